"""The backend is chosen once (Target.backend) and read from its tables: no module of planner/
or codegen/ compares a backend's name or looks a table up by one (`T["cpu"]`,
`T.get("cuda")`), except the independent checker's per-backend rules (planner/verify/), which
re-derive what the tables decided without reading them. Every table has a row for each
backend and no other.

The tables: planner.target.backends.BACKEND_TRAITS (what the target, costs and schedule layers
ask), planner.pipeline.BACKENDS (planning), codegen.backends.RUNTIMES (the executors),
codegen.build.RUNTIME_BUILDS (their builds), planner.cli.costs.PROFILERS (their measurers).
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import get_args

from planner.ir.record import Backend
from tests.helpers.backend_tables import found_tables

ROOT = Path(__file__).resolve().parent.parent
BACKEND_NAMES = {"cpu", "cuda"}
# Where a comparison of backend names belongs: verify's per-backend rules.
ALLOWED = ("planner/verify/",)


def _names_backend(node: ast.expr) -> bool:
    """`backend`, `x.backend`, `x["backend"]`."""
    if isinstance(node, ast.Name):
        return node.id == "backend"
    if isinstance(node, ast.Attribute):
        return node.attr == "backend"
    if isinstance(node, ast.Subscript):
        s = node.slice
        return isinstance(s, ast.Constant) and s.value == "backend"
    return False


def _is_backend_literal(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value in BACKEND_NAMES


def _looks_up_backend(node: ast.AST) -> bool:
    """`table["cpu"]`, `table.get("cuda", ...)` (and pop, setdefault)."""
    if isinstance(node, ast.Subscript):
        return _is_backend_literal(node.slice)
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("get", "pop", "setdefault") and bool(node.args)
            and _is_backend_literal(node.args[0]))


def branches(source: str) -> list[int]:
    """Lines of `source` that compare a backend with something, or something with "cpu" or
    "cuda" for equality, or look something up by "cpu" or "cuda"."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if _looks_up_backend(node):
            out.append(node.lineno)
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            # A literal is a backend's name where it is compared for equality ("cpu" in a
            # cgroup's controllers is not one).
            equality = all(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops)
            if any(_names_backend(o) or (equality and _is_backend_literal(o))
                   for o in operands):
                out.append(node.lineno)
    return sorted(out)


def test_no_backend_comparison_outside_the_tables():
    found = []
    for package in ("planner", "codegen"):
        for f in sorted((ROOT / package).rglob("*.py")):
            rel = f.relative_to(ROOT).as_posix()
            if rel.startswith(ALLOWED):
                continue
            found += [f"{rel}:{line}" for line in branches(f.read_text(encoding="utf-8"))]
    assert found == [], ("compare no backend names: read a field of the backend's record "
                         "(planner.target.backends, planner.pipeline.BACKENDS, "
                         f"codegen.backends.RUNTIMES) instead: {found}")


def test_the_check_sees_each_spelling():
    src = ("if target.backend == 'cpu': pass\n"
           "x = 1 if plan.backend != 'cuda' else 2\n"
           "y = data['backend'] == kind\n"
           "z = backend in allowed\n"
           "w = 'cuda' == name\n"
           "ok = device['type'] not in ('cpu', 'meta')\n"
           "ok2 = traits(target).host_cores\n"
           "ok3 = 'cpu' in controllers\n"
           "a = RUNTIMES['cuda'].registered\n"
           "b = TABLE.get('cpu', 64)\n"
           "ok4 = RUNTIMES[target.backend]\n")
    assert branches(src) == [1, 2, 3, 4, 5, 9, 10]


# (module, name) of every backend table.
TABLES = (("planner.target.backends", "BACKEND_TRAITS"), ("planner.pipeline", "BACKENDS"),
          ("codegen.backends", "RUNTIMES"), ("codegen.build", "RUNTIME_BUILDS"),
          ("planner.cli.costs", "PROFILERS"))


def test_every_backend_table_has_exactly_the_backends():
    backends = set(get_args(Backend))
    assert backends == BACKEND_NAMES
    for module, name in TABLES:
        assert set(getattr(importlib.import_module(module), name)) == backends, (module, name)


def test_the_tables_are_every_table_keyed_by_backend():
    # planner.pipeline's table lives in its backends module
    named = {("planner.pipeline.backends" if m == "planner.pipeline" else m, n)
             for m, n in TABLES}
    assert found_tables() == named
