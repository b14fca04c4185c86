"""Functions stay short (issue 87): in planner/ and codegen/, at most MAX_LONG functions over
LONG lines and none over LONGEST (a nested function counts apart, and inside its enclosing
one). The list is printed, longest first, so a failure names what to shorten."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LONG, LONGEST = 60, 80
MAX_LONG = 12  # 2026-11-28: 12 (19 before issue 87's item 4)


def long_functions(root: Path = ROOT, folders: tuple[str, ...] = ("planner", "codegen"),
                   over: int = LONG) -> list[tuple[int, str]]:
    """(lines, "path:line name") of every function over `over` lines under `root`'s
    `folders`, longest first."""
    out = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > over:
                        where = f"{path.relative_to(root)}:{node.lineno} {node.name}"
                        out.append((lines, where))
    return sorted(out, reverse=True)


def test_long_functions_counts_a_function_by_its_lines(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(LONG))  # def line + LONG: one over
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "a.py").write_text(f"def long():\n{body}\n\n\ndef short():\n    pass\n")
    assert long_functions(tmp_path, ("m",)) == [(LONG + 1, "m/a.py:1 long")]


def test_functions_stay_short():
    found = long_functions()
    print("\n".join(f"{n:4d} {where}" for n, where in found))
    over = [f"{where} ({n} lines)" for n, where in found if n > LONGEST]
    assert not over, f"over {LONGEST} lines: {over}"
    assert len(found) <= MAX_LONG, (
        f"{len(found)} functions over {LONG} lines (at most {MAX_LONG}): "
        + ", ".join(f"{where} ({n})" for n, where in found))
