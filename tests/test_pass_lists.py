"""Each pass list is data in its folder's __init__, and the folder's modules are that list: a
module added without its entry, an entry without its module, or a pass that calls none of its
module's functions fails here. Every copy of a list in the docs, written `NAME = (a, b, ...)`,
is the list itself, and the pages that describe the passes hold one (a pass renamed, added or
moved in the code and not in the prose fails here)."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

from planner.frontend import passes as front_end
from planner.frontend import prepare
from planner.step import STEP_PASSES

ROOT = Path(__file__).resolve().parent.parent

# The lists, by the names the docs give them: the module that defines each, and its passes'
# names in order.
LISTS: dict[str, list[str]] = {
    "planner.frontend.prepare.PASSES": [p.__name__ for p in prepare.PASSES],
    "planner.frontend.passes.PASSES": [name for name, _, _ in front_end.PASSES],
    "planner.frontend.passes.GRADIENT_PASSES": [name for name, _ in front_end.GRADIENT_PASSES],
    "planner.frontend.passes.TRAINING_PASSES": [name for name, _ in front_end.TRAINING_PASSES],
    "planner.frontend.passes.INFERENCE_PASSES": [name for name, _ in
                                                 front_end.INFERENCE_PASSES],
    "planner.step.STEP_PASSES": [name for name, _ in STEP_PASSES],
}
# Where a list is named without its module, the file says which module it means.
HOME = {"planner/frontend/prepare.py": "planner.frontend.prepare",
        "planner/frontend/passes/__init__.py": "planner.frontend.passes",
        "planner/frontend/autodiff.py": "planner.frontend.passes",
        "planner/step/__init__.py": "planner.step"}
# The pages and docstrings that describe the passes, and the lists each must spell out.
DESCRIBED = {
    "docs/front-end.md": {"planner.frontend.prepare.PASSES", "planner.frontend.passes.PASSES",
                          "planner.frontend.passes.INFERENCE_PASSES",
                          "planner.step.STEP_PASSES"},
    "docs/architecture.md": {"planner.frontend.prepare.PASSES",
                             "planner.frontend.passes.PASSES", "planner.step.STEP_PASSES"},
    "planner/pipeline/driver.py": {"planner.step.STEP_PASSES"},
    "planner/frontend/prepare.py": {"planner.frontend.prepare.PASSES"},
    "planner/frontend/passes/__init__.py": {"planner.frontend.passes.PASSES"},
    "planner/frontend/autodiff.py": {"planner.frontend.passes.TRAINING_PASSES"},
    "planner/step/__init__.py": {"planner.step.STEP_PASSES"},
}
SPELLED = re.compile(r"((?:planner\.[\w.]+\.)?[A-Z_]*PASSES) = \(([\w,\s]+)\)")


def pass_modules(package: str) -> list[str]:
    """The modules (and packages) of a pass folder but its helpers (a leading underscore: a
    module two passes share, no pass itself)."""
    folder = importlib.import_module(package)
    return sorted(m.name for m in pkgutil.iter_modules(folder.__path__)
                  if not m.name.startswith("_"))


def drift(package: str, entries: list[tuple[str, object]]) -> list[str]:
    """How a folder and its list disagree: modules without an entry, entries without a module,
    an entry twice, and a pass whose code calls nothing of its own module."""
    names = [name for name, _ in entries]
    modules = pass_modules(package)
    bad = [f"{package}.{m}: a module of the folder, not in its list"
           for m in modules if m not in names]
    bad += [f"{package}: {n!r} in its list, no module of the folder" for n in names
            if n not in modules]
    bad += [f"{package}: {n!r} twice in its list" for n in sorted(set(names))
            if names.count(n) > 1]
    for name, run in entries:
        if name not in modules:
            continue
        module = importlib.import_module(f"{package}.{name}")
        own = {n for n, v in vars(module).items()
               if callable(v) and getattr(v, "__module__", None) == module.__name__}
        if not own & set(run.__code__.co_names):
            bad.append(f"{package}: the pass {name!r} calls no function of {module.__name__}")
    return bad


@pytest.mark.parametrize("package, entries", [
    ("planner.frontend.passes", [(name, run) for name, _, run in front_end.PASSES]),
    ("planner.step", list(STEP_PASSES)),
])
def test_each_folders_modules_are_its_pass_list(package, entries):
    assert drift(package, entries) == []


def test_a_module_without_its_entry_is_drift():
    """The check fails on each kind of drift (a list missing a module, an entry without one,
    a pass that calls another module's function)."""
    steps = list(STEP_PASSES)
    assert drift("planner.step", steps[1:]) == [
        "planner.step.for_cores: a module of the folder, not in its list"]
    assert drift("planner.step", [*steps, ("sideways", steps[0][1])]) == [
        "planner.step: 'sideways' in its list, no module of the folder"]
    assert drift("planner.step", [("layouts", steps[0][1]), *steps[1:]])[-1:] == [
        "planner.step: the pass 'layouts' calls no function of planner.step.layouts"]


def test_the_graph_kinds_draw_the_lists_in_order():
    order = [name for name, _, _ in front_end.PASSES]
    for drawn in (front_end.GRADIENT_PASSES, front_end.TRAINING_PASSES,
                  front_end.INFERENCE_PASSES):
        names = [name for name, _ in drawn]
        assert names == sorted(names, key=order.index)
    assert [name for name, _ in front_end.TRAINING_PASSES] == order


def spelled(path: str) -> list[tuple[str, list[str]]]:
    """Each `NAME = (a, b, ...)` of a pass list in a file, the name made whole."""
    text = " ".join((ROOT / path).read_text(encoding="utf-8").replace("`", "").split())
    out = []
    for m in SPELLED.finditer(text):
        name = m.group(1) if m.group(1).startswith("planner.") else (
            f"{HOME[path]}.{m.group(1)}" if path in HOME else m.group(1))
        out.append((name, [n.strip() for n in m.group(2).split(",") if n.strip()]))
    return out


@pytest.mark.parametrize("path", sorted(DESCRIBED))
def test_the_docs_spell_each_list_as_it_is(path):
    found = spelled(path)
    assert [(name, names) for name, names in found if LISTS.get(name) != names] == []
    assert DESCRIBED[path] <= {name for name, _ in found}


def test_a_doc_copy_that_drifted_is_found(tmp_path):
    steps = ", ".join(LISTS["planner.step.STEP_PASSES"][::-1])
    HOME[str(tmp_path / "x.md")] = "planner.step"
    (tmp_path / "x.md").write_text(f"the passes:\n    STEP_PASSES = ({steps})\n")
    try:
        [(name, names)] = spelled(str(tmp_path / "x.md"))
    finally:
        del HOME[str(tmp_path / "x.md")]
    assert name == "planner.step.STEP_PASSES" and names != LISTS[name]
