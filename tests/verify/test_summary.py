"""verify re-derives every summary figure from the plan's ops, buffers and graph: a figure
edited by hand (with the embedded graph resealed) fails naming the field; real plans, with
offloads and recomputes too, verify."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.cli import main
from planner.graph import Graph
from planner.plan import digest
from planner.verify import verify_plan_data
from tests.offloading import offloading_plan

PLANS = Path(__file__).resolve().parent.parent.parent / "examples" / "plans"


@pytest.fixture(scope="module")
def offloading() -> dict:
    return offloading_plan()


def problems(data: dict) -> list[str]:
    return verify_plan_data(data, [n["name"] for n in data["graph"]["nodes"]])


def resealed(data: dict) -> dict:
    """`data` with its graph digest recomputed, as a forger would."""
    out = json.loads(json.dumps(data))
    out["provenance"]["graph_sha256"] = digest(Graph.model_validate(out["graph"]).to_json())
    return out


def test_the_offloading_plan_verifies(offloading):
    assert problems(offloading) == []
    assert offloading["summary"]["memory"]["transfer_bytes"] > 0


def test_transfer_bytes_of_two_to_the_63_fails_naming_the_field(offloading, tmp_path, capsys):
    data = resealed(offloading)
    data["summary"]["memory"]["transfer_bytes"] = 2**63
    assert any(p.startswith("summary memory transfer_bytes 9223372036854775808 is not")
               for p in problems(data))
    path = tmp_path / "forged.plan.json"
    path.write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["verify", str(path)]) != 0
    out = capsys.readouterr()
    assert "transfer_bytes" in out.out + out.err


@pytest.mark.parametrize(("section", "field", "value"), [
    ("summary", "step_seconds", 1e9),
    ("summary", "lower_bound_seconds", 1e-12),
    ("summary", "ratio", 0.5),
    ("summary", "ops", 3),
    ("summary", "utilization", 7.0),
    ("memory", "peak_bytes", 1),
    ("memory", "arena_bytes", 2**40),
    ("memory", "host_bytes", 2**40),
    ("memory", "fragmentation", 0.5),
    ("memory", "load_bytes", 1),
    ("memory", "resident_bytes", 12),
    ("memory", "naive_bytes", 2**62),
    ("memory", "recompute_ops", 99),
    ("memory", "offloaded_tensors", 0),
    ("memory", "recompute_seconds", 5.0),
    ("memory", "stall_seconds", 5.0),
    ("memory", "reuse_edges", 10**6),
])
def test_each_edited_figure_fails_naming_its_field(offloading, section, field, value):
    data = resealed(offloading)
    figures = data["summary"] if section == "summary" else data["summary"]["memory"]
    assert figures[field] != value
    figures[field] = value
    found = problems(data)
    assert any(f" {field} " in p and p.startswith("summary") for p in found), found


@pytest.mark.parametrize("name", sorted(p.name[:-len(".plan.json")] for p in PLANS.glob("*.json")))
def test_committed_plans_summaries_verify(name):
    from planner.verify.summary import summary_problems

    assert summary_problems(json.loads((PLANS / f"{name}.plan.json").read_text())) == []
