"""docs/supported-ops.md is the page planner.importers.supported_ops generates from the two
importers' rule tables (regenerate with
`python -m planner.importers.supported_ops -o docs/supported-ops.md`)."""

from pathlib import Path

from planner.importers.supported_ops import supported_ops_page
from planner.importers.torch.context import RULES

DOC = Path(__file__).resolve().parents[2] / "docs" / "supported-ops.md"


def test_docs_supported_ops_page_is_current():
    assert DOC.read_text(encoding="utf-8") == supported_ops_page(), (
        "docs/supported-ops.md is stale: run python -m planner.importers.supported_ops "
        "-o docs/supported-ops.md")


def test_every_aten_rule_is_listed_once_with_issue_35s_ops():
    rows = [line.split(" | ")[0].removeprefix("| ") for line in DOC.read_text().splitlines()
            if line.startswith(("| aten.", "| torch_nn."))]
    assert sorted(rows) == sorted(RULES) and len(set(rows)) == len(rows)
    assert {"aten.as_strided.default", "aten.index.Tensor"} <= set(rows)
