"""The trainer's settings are `planner plan`'s (planner/cli/settings.py, one record behind
both): a module exported with its loss and planned by the CLI with --data-parallel 2
--shard-parameters --precision bf16-mixed --memory-budget, built and run on two ranks (gloo,
CPU, torchrun's environment), ends on the same bits as trainer(data_parallel=True,
shard_parameters=True, precision="bf16-mixed", memory_budget=...) on the same ranks; the two
plans are one plan. The budget lies below the plan's unconstrained arena, so a budget the
trainer dropped plans another layout; the prices are each side's default (with measured costs,
the trainer measures the signatures the CLI does: a data-parallel step's sharded updates)."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

# No --costs (and no costs= in the worker): both price as their default does, $PLANNER_COSTS
# (tests/conftest.py: analytical; PLANNER_COSTS=measured runs this on the host's measured costs).
ROOT_ARGS = ["--target", "host", "--train", "adamw", "--lr", "0.01"]
BUDGET = 28800  # bytes: the unconstrained plan's arena is 29312, liveness's bound 28736


def _cli(*args: str) -> None:
    from planner.cli.main import main  # `planner ARGS`, in this process (torch imported once)

    assert main(list(args)) == 0


def test_a_torchrun_trainer_equals_the_cli_plan_bit_for_bit(tmp_path):
    from planner.torch.training import export
    from tests.codegen.dp_harness import launch_ranks
    from tests.importers.dp_cli_twin_worker import module

    g = torch.Generator().manual_seed(3)
    xs, ys = torch.randn(4, 16, 16, generator=g), torch.randint(0, 4, (4, 16), generator=g)
    np.savez(tmp_path / "data.npz", x=xs.numpy(), y=ys.numpy(), budget=BUDGET)
    # The graph file is the module with its loss on one rank's batch, as the trainer traces it
    # (the graph is named after the file, the trainer's after the module's class).
    torch.export.save(export(module(), (xs[0, :8],), torch.nn.functional.cross_entropy,
                             ys[0, :8]), str(tmp_path / "TanhNet.pt2"))
    plan = tmp_path / "net.plan.json"
    _cli("plan", str(tmp_path / "TanhNet.pt2"), *ROOT_ARGS, "--data-parallel", "2",
         "--ranks-per-host", "2", "--shard-parameters", "--precision", "bf16-mixed",
         "--memory-budget", str(BUDGET), "-o", str(plan))
    memory = json.loads(plan.read_text())["summary"]["memory"]
    assert memory["budget_bytes"] == BUDGET and memory["arena_bytes"] <= BUDGET
    _cli("build", str(plan), "-o", str(tmp_path / "net_dp"))
    outs = [tmp_path / f"rank{r}.npz" for r in range(2)]
    runs = launch_ranks([str(tmp_path / "net_dp")] * 2, tmp_path / "data.npz", outs,
                        timeout_s=120,
                        local=[{"LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": "2"} for r in range(2)],
                        worker="tests.importers.dp_cli_twin_worker")
    for run in runs:
        assert run.returncode == 0, run.stdout[-3000:]
    got = [dict(np.load(o)) for o in outs]
    assert json.loads(str(got[0]["plan"])) == json.loads(plan.read_text())  # one plan
    start = {k: v.numpy() for k, v in module().state_dict().items()}
    for g in got:
        cli = {k[4:]: v for k, v in g.items() if k.startswith("cli:")}
        ours = {k[5:]: v for k, v in g.items() if k.startswith("ours:")}
        assert sorted(cli) == sorted(ours) == sorted(start)
        for k, v in ours.items():
            assert v.tobytes() == cli[k].tobytes(), k
            assert np.abs(v - start[k]).max() > 1e-3, k  # the steps moved it
