"""The backend tables of planner/ and codegen/: module-level dicts keyed by backend names
(tests/test_backend_branches.py holds their keys, tests/test_architecture_doc.py their list in
docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BACKEND_NAMES = {"cpu", "cuda"}
# The independent checker keeps its own per-backend rules (planner/verify/).
CHECKER = ("planner/verify/",)


def is_backend_literal(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value in BACKEND_NAMES


def tables(source: str) -> list[str]:
    """Names bound at module level to a dict literal whose keys are all backend names."""
    out = []
    for node in ast.parse(source).body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1
            else None)
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if (isinstance(target, ast.Name) and isinstance(value, ast.Dict) and value.keys
                and all(k is not None and is_backend_literal(k) for k in value.keys)):
            out.append(target.id)
    return out


def found_tables() -> set[tuple[str, str]]:
    """(module, name) of every backend table outside the checker."""
    found = set()
    for package in ("planner", "codegen"):
        for f in sorted((ROOT / package).rglob("*.py")):
            rel = f.relative_to(ROOT)
            if rel.as_posix().startswith(CHECKER):
                continue
            parts = rel.with_suffix("").parts
            module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found |= {(module, name) for name in tables(f.read_text(encoding="utf-8"))}
    return found
