"""Op-name special cases outside planner/ops/: comparisons of a value against an op type's name
(`node.op == "BatchNorm"`, `op in {"Conv", "ConvGrad"}`, `"Relu" != n.op`, `n.op in FOLDS` with
FOLDS a module-level literal of op names) in planner/ and
codegen/. A fact about an op belongs to its definition (planner/ops/, an OpDef field) that
every reader asks; each such comparison is one reader knowing the fact by name instead.
tests/test_op_name_cases.py holds the count from growing.

    python -m tests.helpers.op_name_cases          # the count, by file and by op
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("planner", "codegen")
OUTSIDE = "planner/ops/"


def _op_names() -> frozenset[str]:
    import planner.ops  # noqa: F401  (registers every op)
    from planner.ops.base import REGISTRY

    return frozenset(REGISTRY)


def _strings(node: ast.AST) -> list[str]:
    """The string constants a comparison operand names: itself, or a literal collection's
    (a set, tuple, list, or frozenset(...) / set(...) of one)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("frozenset", "set") \
            and len(node.args) == 1:
        node = node.args[0]
    if isinstance(node, (ast.Set, ast.Tuple, ast.List)):
        return [e.value for e in node.elts
                if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def cases(source: str, names: frozenset[str]) -> list[tuple[int, tuple[str, ...]]]:
    """(line, op names) of each comparison in `source` against one or more op names.

    >>> cases('if n.op == "Relu" or n.op in ("Conv", "x"):\\n    pass', frozenset({"Relu", "Conv"}))
    [(1, ('Conv',)), (1, ('Relu',))]
    """
    tree = ast.parse(source)
    consts = {t.id: _strings(n.value) for n in tree.body if isinstance(n, (ast.Assign,
              ast.AnnAssign)) and n.value is not None
              for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
              if isinstance(t, ast.Name)}
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        ops = tuple(dict.fromkeys(s for operand in (node.left, *node.comparators)
                                  for s in (consts.get(operand.id, [])
                                            if isinstance(operand, ast.Name)
                                            else _strings(operand)) if s in names))
        if ops:
            out.append((node.lineno, ops))
    return sorted(out)


def count() -> dict[str, list[tuple[int, tuple[str, ...]]]]:
    """Each file's op-name comparisons (path relative to the repository: its cases)."""
    names = _op_names()
    found = {}
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(OUTSIDE):
                continue
            mine = cases(path.read_text(encoding="utf-8"), names)
            if mine:
                found[rel] = mine
    return found


def main() -> None:
    found = count()
    by_op = Counter(op for mine in found.values() for _, ops in mine for op in ops)
    for rel, mine in sorted(found.items(), key=lambda kv: -len(kv[1])):
        print(f"{len(mine):4d}  {rel}")
    print("by op:", ", ".join(f"{op} {n}" for op, n in by_op.most_common(30)))
    print("total:", sum(len(m) for m in found.values()))


if __name__ == "__main__":
    main()
