"""docs/ops.md is the table codegen.ops_table generates from the registries (regenerate with
`python -m codegen.ops_table -o docs/ops.md`)."""

from pathlib import Path

from codegen.ops_table import ops_table

DOC = Path(__file__).resolve().parents[2] / "docs" / "ops.md"


def test_docs_ops_table_is_current():
    assert DOC.read_text(encoding="utf-8") == ops_table(), (
        "docs/ops.md is stale: run python -m codegen.ops_table -o docs/ops.md")


def test_table_lists_the_issue_25_ops_with_their_kernels():
    text = ops_table()
    for onnx_op in ("Resize", "Upsample", "InstanceNormalization", "DepthToSpace"):
        assert f"| {onnx_op} |" in text
    for op in ("Resize", "GroupNorm", "DepthToSpace", "SpaceToDepth"):
        assert any(line.startswith(f"| {op} | x | x |") for line in text.splitlines()), op
