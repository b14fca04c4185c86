"""No module under tests/ imports a test module (test_*.py): what several tests share lives in
tests/helpers/ (or a helper module beside them), and no helper is itself a test module, so
running one test file never collects another's tests through an import."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def imported_test_modules(source: str) -> list[str]:
    """Modules of tests/ named test_* that `source` imports (at any depth)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        names = ([node.module] + [f"{node.module}.{a.name}" for a in node.names]
                 if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
                 else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
        out += [m for m in names if m.startswith("tests.")
                and m.rsplit(".", 1)[-1].startswith("test_")]
    return out


def test_no_module_of_tests_imports_a_test_module():
    found = [f"{f.relative_to(TESTS)}: {m}" for f in sorted(TESTS.rglob("*.py"))
             for m in imported_test_modules(f.read_text(encoding="utf-8"))]
    assert found == []


def test_helpers_are_not_test_modules():
    assert not list((TESTS / "helpers").glob("test_*.py"))


def test_the_check_sees_each_spelling():
    src = ("from tests.codegen.test_x import helper\n"
           "import tests.ops.test_y\n"
           "from tests.codegen import test_z\n"
           "from tests.helpers.sharded import gathered\n")
    assert imported_test_modules(src) == ["tests.codegen.test_x", "tests.ops.test_y",
                                          "tests.codegen.test_z"]
