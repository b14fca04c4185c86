"""`planner profile` then `planner plan --costs` on zoo models: every kernel of the plan's graph
is measured, none priced by the analytical model (issue 33's acceptance). The cases hold what
once failed to profile: view ops (LeNet's Flatten and Reshape share their input's bytes) and
bfloat16 operands (numpy feeds no bfloat16; the profiler casts them in its graph)."""

from __future__ import annotations

import json

import pytest

import planner.cli as cli
from planner.costs.records import load_table
from planner.costs.signature import graph_signatures
from planner.graph import Graph

LENET = "zoo:lenet?batch=2&image=8&width=0.5&classes=3"
MLP = "zoo:mlp?batch=2&hidden=4&in_features=3&classes=2"
LSTM = "zoo:lstm?batch=2&seq=3&hidden=4&vocab=8&layers=1&dropout=0"


@pytest.mark.parametrize(("graph", "precision"), [(LENET, "fp32"), (MLP, "bf16-mixed"),
                                                  (LSTM, "fp32"), (LSTM, "bf16-mixed")])
def test_profile_then_plan_prices_no_kernel_analytically(graph, precision, tmp_path, capsys):
    flags = ["--train", "sgd", "--precision", precision, "--target", "host"]
    costs, plan = str(tmp_path / "c.json"), str(tmp_path / "p.json")
    assert cli.main(["profile", graph, *flags, "-o", costs, "--repeats", "1", "--json"]) == 0
    run = json.loads(capsys.readouterr().out)
    assert run["failures"] == [] and run["complete"]
    assert cli.main(["plan", graph, *flags, "--costs", costs, "-o", plan]) == 0
    capsys.readouterr()
    with open(plan) as f:
        planned = json.load(f)
    assert planned["summary"]["analytical_signatures"] == 0
    # Re-derived from the plan's own graph: each signature has CPU samples in the table.
    table = load_table(costs)
    unmeasured = [s.key for s in graph_signatures(Graph.model_validate(planned["graph"])).values()
                  if table.entry(s) is None or not table.entry(s).cpu]
    assert unmeasured == []
    if precision == "bf16-mixed":
        assert any("bfloat16" in s.dtypes for s in
                   graph_signatures(Graph.model_validate(planned["graph"])).values())
    if graph == LENET:
        assert {"Flatten", "Reshape"} <= {e.signature.op for e in table.entries}
