"""One record behind `planner plan` and planner.torch.trainer (planner/cli/settings.py):
every flag has its Python twin by the same name, the same settings give the same options from
either side, and a bad setting is one line naming it as its caller spells it."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from planner.cli.main import build_parser
from planner.cli.settings import (
    CLI_ONLY,
    PYTHON_NAMES,
    PlanSettings,
    from_flags,
    graph_options,
    plan_options,
    settings_of,
    spelled,
)
from planner.errors import UserError


def _plan_parser():
    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    return sub.choices["plan"]


def test_every_plan_flag_has_a_python_twin():
    from planner.torch.settings import OPTIMIZER_SETTINGS, split
    from planner.torch.training import trainer

    named = set(inspect.signature(trainer).parameters)
    for action in _plan_parser()._actions:
        if action.dest in CLI_ONLY:
            continue
        assert action.dest in PlanSettings.model_fields, f"{action.option_strings}: no field"
        twin = PYTHON_NAMES.get(action.dest, action.dest)
        if twin in named:
            continue
        # a further keyword of trainer(): a plan setting, or the optimizer's (torch names)
        plan, rest = split({twin: None})
        assert twin in plan or (twin in OPTIMIZER_SETTINGS and rest), action.option_strings
    assert set(CLI_ONLY) <= {a.dest for a in _plan_parser()._actions}


ARGV = ["g.json", "--target", "host", "-o", "p.json", "--train", "adam",
        "--precision", "bf16-mixed", "--memory-budget", "3MiB", "--recompute", "layer1",
        "--recompute", "layer2", "--offload", "layer3", "--keep-tensor", "fc/out",
        "--region-budget", "layer4=64KiB", "--recompute-products", "--accumulate", "4",
        "--strategy", "optimized",
        "--data-parallel", "4", "--ranks-per-host", "2", "--shard-optimizer",
        "--bucket-bytes", "4096", "--no-variants", "--no-evaluation", "--keep", "a,b"]
PYTHON = {"train": "adam", "precision": "bf16-mixed", "memory_budget": 3 * 2**20,
          "recompute": ["layer1", "layer2"], "offload": "layer3", "keep_tensor": ["fc/out"],
          "region_budget": {"layer4": "64KiB"}, "recompute_products": True, "accumulate": 4,
          "strategy": "optimized",
          "data_parallel": 4, "ranks_per_host": 2, "shard_optimizer": True,
          "bucket_bytes": 4096, "no_variants": True, "no_evaluation": True, "keep": ["a", "b"]}


def test_the_same_settings_give_the_same_options():
    cli = from_flags(_plan_parser().parse_args(ARGV))
    python = settings_of(PYTHON, "python")
    assert cli.model_copy(update={"memory_budget": None}) == \
        python.model_copy(update={"memory_budget": None})  # "3MiB" and 3145728
    assert graph_options(cli) == graph_options(python)
    options = plan_options(python)
    assert options == plan_options(cli)
    assert options.memory.budget_bytes == 3 * 2**20
    assert [(p.decision, p.name) for p in options.memory.pins] == [
        ("keep", "fc/out"), ("recompute", "layer1"), ("recompute", "layer2"),
        ("offload", "layer3")]
    assert options.data_parallel.ranks == 4 and options.data_parallel.shard_optimizer
    assert options.memory.recompute_products
    assert not options.variants


@pytest.mark.parametrize("values,message", [
    ({"accumulate": 0}, "accumulate 0: input should be greater than or equal to 1"),
    ({"precision": "fp8"}, "precision 'fp8': input should be 'fp32'"),
    ({"memory_budget": "lots"}, "memory_budget: cannot read 'lots' as a byte count"),
    ({"precision": "bf16-mixed"}, "precision needs optimizer"),
    ({"shard_optimizer": True}, "shard_optimizer shards the optimizer state among the ranks "
                                "of data_parallel N"),
    ({"data_parallel": 4, "ranks_per_host": 3}, "ranks_per_host 3 does not divide "
                                                "data_parallel 4"),
    ({"region_budget": ["layer1"]}, "region_budget 'layer1': expected PREFIX=BYTES"),
    ({"memory_budgt": 1}, "memory_budgt: not a plan setting; expected one of"),
])
def test_a_bad_setting_is_one_line_naming_it(values, message):
    with pytest.raises(UserError) as e:
        s = settings_of(values, "python")
        graph_options(s)
        plan_options(s)
    text = spelled(str(e.value), "python")
    assert message in text and "\n" not in text
    assert "pydantic" not in text and "validation error" not in text


def test_trainer_refuses_before_tracing():
    torch = pytest.importorskip("torch")
    from planner.torch.training import trainer

    model, x = torch.nn.Linear(3, 2), torch.randn(4, 3)
    for settings, message in [
            ({"memory_budget": "lots"}, "memory_budget: cannot read 'lots'"),
            ({"data_parallel": True}, "data_parallel: trains the ranks of torch.distributed"),
            ({"memory_budgt": 1}, "trainer setting memory_budgt: neither an optimizer setting"),
            ({"precision": "fp8"}, "precision 'fp8': input should be")]:
        with pytest.raises(UserError) as e:
            trainer(model, (x,), loss=torch.nn.functional.mse_loss, labels=torch.randn(4, 2),
                    **settings)
        assert message in str(e.value) and "\n" not in str(e.value)


@pytest.mark.slow
def test_the_trainer_plans_with_the_flags_options(tmp_path):
    # trainer(precision=, memory_budget=, strategy=, no_variants=) plans with the options
    # `planner plan` makes of the same flags, and trains in bf16-mixed
    torch = pytest.importorskip("torch")
    from planner.torch.training import trainer

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    x, y = torch.randn(4, 6), torch.randn(4, 3)
    t = trainer(model, (x,), loss=torch.nn.functional.mse_loss, labels=y, optimizer="adam",
                costs="analytical", out_dir=tmp_path, precision="bf16-mixed",
                memory_budget="64MiB", no_variants=True)
    flags = _plan_parser().parse_args(["g", "--target", "host", "-o", "p", "--train", "adam",
                                       "--precision", "bf16-mixed", "--memory-budget", "64MiB",
                                       "--no-variants"])
    options = plan_options(from_flags(flags))
    assert t.plan.provenance.options == options.model_dump(mode="json", exclude={"data_parallel"})
    assert {n.op for n in t.graph.nodes} >= {"Cast"}  # the bf16 policy's casts
    losses = [t.step(x, y) for _ in range(3)]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
