"""docs/architecture.md's checkable claims hold: its stage list is STAGES, its backend tables
are every table keyed by backend, every path it names exists, and generated packages import
only planner/runtime/ of the planner."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from planner.pipeline import STAGES
from tests.helpers.backend_tables import found_tables

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")


def test_the_stage_list_is_stages():
    block = DOC.split("plan(graph, target, costs, options) = run(")[1].split("```")[0]
    listed = [m.group(1) for m in re.finditer(r"^    (\w+(?: \w+)?)  +\S", block, re.M)]
    assert listed == [name for name, _ in STAGES]


def test_the_tables_named_are_every_backend_table():
    paragraph = DOC.split("Where the backends differ")[1].split("tests/test_backend_branches")[0]
    named = {m.groups() for m in re.finditer(r"`((?:planner|codegen)[\w.]*)\.([A-Z][A-Z_]+)`",
                                             paragraph)}
    # planner.pipeline re-exports the table of its backends module
    named = {("planner.pipeline.backends" if m == "planner.pipeline" else m, n)
             for m, n in named}
    assert named == found_tables()


def test_every_path_named_exists():
    paths = set(re.findall(r"\b((?:planner|codegen|templates|tests|bench|docs|examples)"
                           r"/[\w./-]*\w/?)", DOC))
    assert len(paths) > 30
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert missing == []


def _planner_imports(source: str) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return {m for m in out if m == "planner" or m.startswith("planner.")}


def test_generated_packages_import_only_the_runtime(tmp_path):
    """The package templates, and a package rendered from a plan (both backends' templates
    render a Python package: the CPU one here), import of planner only planner.runtime."""
    from codegen.render import render
    from planner.pipeline import plan
    from planner.target import preset
    from planner.zoo import build

    lines = [line.strip() for t in sorted((ROOT / "templates").rglob("*.py.j2"))
             for line in t.read_text(encoding="utf-8").splitlines()]
    stated = {m for line in lines for m in re.findall(r"^(?:from|import) (planner[\w.]*)", line)}
    assert stated and all(m.startswith("planner.runtime") for m in stated), stated
    p = plan(build("mlp", batch=2, hidden=[4], in_features=3, classes=2), preset("knl-7250"))
    package = render(p, tmp_path / "pkg")
    sources = sorted(Path(package.dir).rglob("*.py"))
    assert sources
    imported = set().union(*(_planner_imports(f.read_text(encoding="utf-8")) for f in sources))
    assert imported and all(m.startswith("planner.runtime") for m in imported), imported


def test_the_compile_matrix_runs_where_the_doc_says():
    """The training-semantics matrix through the backend: in the slow tier (opt-in, not CI),
    as many cases outside compile_full as the doc says, of as many in all."""
    from tests.conftest import OPT_IN
    from tests.helpers.training_semantics import CASES

    path = ROOT / "tests" / "importers" / "test_training_semantics_compile.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    ci = next(n.value for n in tree.body if isinstance(n, ast.Assign)
              and getattr(n.targets[0], "id", "") == "CI")
    test = next(n for n in tree.body if isinstance(n, ast.FunctionDef)
                and n.name.startswith("test_"))
    marks = {ast.unparse(d) for d in test.decorator_list}
    assert "pytest.mark.slow" in marks and "slow" in OPT_IN
    words = dict(enumerate("zero one two three four five six seven eight nine ten".split()))
    words.update({n: str(n) for n in range(11, 1000)})
    claim = DOC.split("test_training_semantics_compile.py")[1].split("\n\n")[0]
    assert "slow tier" in claim and "CI" in claim
    assert f"runs {words[len(ci.elts)]} of its {words[len(CASES)]} cases" in " ".join(
        claim.split())


def test_the_one_module_that_schedules_outside_the_stages_is_named():
    """Outside planner/schedule/ and planner/pipeline/, the CPU scheduler is called by the
    modules the doc names (docstring examples aside)."""
    callers = set()
    for folder in ("planner", "codegen"):
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(("planner/schedule/", "planner/pipeline/")):
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            if any(isinstance(n, ast.Call) and getattr(n.func, "id", "") == "cpu_schedule"
                   for n in ast.walk(tree)):
                callers.add(rel)
    claim = DOC.split("One module schedules outside the stages:")[1].split("\n\n")[0]
    assert callers == set(re.findall(r"(?:planner|codegen)/[\w/]+\.py", claim))
