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


def _parametrized_marks(test: ast.FunctionDef) -> dict[str, str]:
    """The one mark each case of a `[pytest.param(c, marks=pytest.mark.X) if ... else ...]`
    parametrisation gets, by the condition that picks it ("else" for the last)."""
    listing = next(d for d in test.decorator_list if "parametrize" in ast.unparse(d)).args[1]
    chosen, node = {}, listing.elt
    while isinstance(node, ast.IfExp):
        chosen[ast.unparse(node.test)] = ast.unparse(node.body.keywords[0].value)
        node = node.orelse
    chosen["else"] = ast.unparse(node.keywords[0].value)
    return chosen


def test_the_compile_matrix_runs_where_the_doc_says():
    """The training-semantics matrix through the backend: one case in CI (its ci_sample),
    as many more in the slow tier as the doc says, the rest in compile_full, of as many in
    all."""
    from tests.conftest import OPT_IN
    from tests.helpers.training_semantics import CASES

    path = ROOT / "tests" / "importers" / "test_training_semantics_compile.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    values = {n.targets[0].id: ast.literal_eval(n.value) for n in tree.body
              if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") in
              ("SAMPLE", "SLOW")}
    test = next(n for n in tree.body if isinstance(n, ast.FunctionDef)
                and n.name.startswith("test_"))
    assert _parametrized_marks(test) == {"c.name == SAMPLE": "pytest.mark.ci_sample",
                                         "c.name in SLOW": "pytest.mark.slow",
                                         "else": "pytest.mark.compile_full"}
    assert "slow" in OPT_IN and "compile_full" in OPT_IN and "ci_sample" not in OPT_IN
    names = {c.name for c in CASES}
    assert values["SAMPLE"] in names and set(values["SLOW"]) <= names
    words = dict(enumerate("zero one two three four five six seven eight nine ten".split()))
    words.update({n: str(n) for n in range(11, 1000)})
    claim = " ".join(DOC.split("test_training_semantics_compile.py")[1].split("\n\n")[0].split())
    rest = len(CASES) - 1 - len(values["SLOW"])
    assert (f"CI runs one of its {words[len(CASES)]} cases (the `ci_sample`, "
            f"{values['SAMPLE'].replace('_', ' ')}), the slow tier (`-m slow`, `make test-all`) "
            f"{words[len(values['SLOW'])]} more, `-m compile_full` the other {words[rest]}."
            ) in claim


def test_what_ci_runs_is_what_the_doc_says():
    """The tests/ entry's claim: CI runs all but the opt-in tiers, which it names as
    tests/conftest.py's OPT_IN does, and a ci_sample of each module with opt-in cases, held
    by tests/test_ci_tiers.py."""
    from tests.conftest import OPT_IN

    claim = " ".join(DOC.split("tests/              pytest")[1].split("bench/ ")[0].split())
    named = re.search(r"OPT_IN: ([\w, ]+)\)", claim).group(1)
    assert named.split(", ") == list(OPT_IN)
    assert "`ci_sample`" in claim and "tests/test_ci_tiers.py" in claim
    tiers = (ROOT / "tests" / "test_ci_tiers.py").read_text(encoding="utf-8")
    assert "UNSAMPLED" in claim and "UNSAMPLED = {" in tiers


def test_the_op_name_count_is_the_ratchets():
    """The planner/ops/ entry's count of op-name comparisons is the ratchet's limit."""
    from tests.helpers.op_name_cases import count

    claim = " ".join(DOC.split("planner/ops/        one OpDef per op")[1].split("planner/graph/")[0]
                     .split())
    stated = int(re.search(r"only falls, (\d+) now", claim).group(1))
    ratchet = (ROOT / "tests" / "test_op_name_cases.py").read_text(encoding="utf-8")
    assert f"LIMIT = {stated}\n" in ratchet
    assert sum(len(m) for m in count().values()) <= stated


def test_no_module_outside_the_schedule_and_the_pipeline_schedules():
    """Outside planner/schedule/ and planner/pipeline/, no module calls the CPU scheduler
    (docstring examples aside), as the doc says."""
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
    assert callers == set()
    assert ("No module outside planner/schedule/ and planner/pipeline/ calls the CPU scheduler"
            in " ".join(DOC.split()))
