"""The backend is chosen once (Target.backend) and read from its tables: no module of planner/
or codegen/ compares a backend's name, except the independent checker's per-backend rules
(planner/verify/), which re-derive what the tables decided without reading them.

The tables: planner.target.backends.BACKEND_TRAITS (what the target, costs and schedule layers
ask), planner.pipeline.BACKENDS (planning), codegen.backends.RUNTIMES (the executors).
"""

from __future__ import annotations

import ast
from pathlib import Path

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


def branches(source: str) -> list[int]:
    """Lines of `source` that compare a backend with something, or something with "cpu" or
    "cuda" for equality."""
    out = []
    for node in ast.walk(ast.parse(source)):
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
           "ok3 = 'cpu' in controllers\n")
    assert branches(src) == [1, 2, 3, 4, 5]
