"""ZeRO-3's memory decisions chosen by planning (planner/pipeline/gathers.py): the bucket size,
each all-gather's prefetch depth and which forward copies are freed and gathered again. Each
property is checked against the plan made with the default decisions given explicitly
(GatherChoice()), planned on its own: the chosen plan's arena is no larger, its predicted step
within STEP_TOLERANCE, the choice the same from the same inputs, and a budget the default
decisions meet only by serializing the step is met faster. (That the chosen decisions train
as one process does: tests/codegen/test_sharded_parameters.py.)"""

from __future__ import annotations

import warnings

import pytest

from planner import cli
from planner.errors import UserError
from planner.frontend.options import GraphOptions
from planner.frontend.prepare import prepare
from planner.graph.optimizer import Optimizer
from planner.memory.options import MemoryOptions
from planner.pipeline import PlanOptions, plan
from planner.pipeline.gathers import STEP_TOLERANCE
from planner.schedule.parallel import DataParallelOptions
from planner.step.collectives import GatherChoice
from planner.target import preset

GPT = "zoo:gpt?batch=4&seq=32&dim=64&heads=2&layers=2"
TARGET = "xeon-8180"


def _plan(gathers: GatherChoice | None = None, budget: int | None = None, **dp):
    graph = prepare(GPT, GraphOptions(optimizer=Optimizer(kind="adam")))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return plan(graph, preset(TARGET), evaluation=False, options=PlanOptions(
            memory=MemoryOptions(budget_bytes=budget),
            data_parallel=DataParallelOptions(ranks=2, shard_parameters=True, gathers=gathers,
                                              **dp)))


def _chosen(p) -> GatherChoice:
    return GatherChoice.model_validate(p.provenance.options["data_parallel"]["gathers"])


@pytest.fixture(scope="module")
def plans():
    return _plan(), _plan(GatherChoice())


def test_the_chosen_plan_holds_less_than_the_default_at_its_step(plans):
    chosen, default = plans
    arena, step = chosen.summary.memory.arena_bytes, chosen.summary.step_seconds
    base = default.summary.memory.arena_bytes
    assert arena < base  # this GPT's gathered copies over its peak: there is something to save
    assert step <= default.summary.step_seconds * (1 + STEP_TOLERANCE)
    # what the plan records of the default decisions is that plan's
    record = _chosen(chosen)
    assert record.default_arena_bytes == base
    assert record.default_step_seconds == default.summary.step_seconds
    assert _chosen(default) == GatherChoice()


def test_the_choice_is_a_function_of_its_inputs_and_replans_without_searching(plans):
    """The same inputs give the same plan, byte for byte; and planning again with the
    options it records (its decisions given: what planner explain and verify do) too."""
    chosen, _ = plans
    assert _plan().to_json() == chosen.to_json()
    dp = chosen.provenance.options["data_parallel"]
    again = _plan(_chosen(chosen), bucket_bytes=dp["bucket_bytes"])
    assert again.to_json() == chosen.to_json()


def test_a_budget_below_the_default_decisions_is_met_at_a_faster_step(plans):
    """Between the chosen arena and the default's: the default decisions meet it only by the
    budget search's serial order (planner.memory.cpu_budget); the search's decisions fit it
    as they are, at a faster step."""
    chosen, default = plans
    budget = (chosen.summary.memory.arena_bytes + default.summary.memory.arena_bytes) // 2
    given = _plan(GatherChoice(), budget=budget)
    fitted = _plan(budget=budget)
    assert fitted.summary.memory.arena_bytes <= budget
    assert given.summary.memory.arena_bytes <= budget
    assert fitted.summary.step_seconds < given.summary.step_seconds


def test_a_keep_list_of_another_length_is_refused_in_one_line():
    with pytest.raises(UserError, match=r"keeps 1 buckets' forward copies; the step has \d+"):
        _plan(GatherChoice(keep=(True,)))


def test_show_prints_each_kind_of_decision_and_what_it_saves(tmp_path, capsys):
    out = tmp_path / "z3.json"
    assert cli.main(["plan", GPT, "--train", "adam", "--target", TARGET, "--data-parallel", "2",
                     "--shard-parameters", "--no-evaluation", "-o", str(out)]) == 0
    capsys.readouterr()
    assert cli.main(["show", str(out)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines()
             if line.startswith("  chosen  ")]
    assert [line.split()[1] for line in lines] == ["bucket", "forward", "prefetch", "arena"]
    assert "under the default decisions (saves" in lines[-1]


def test_a_given_bucket_size_is_kept_and_decisions_need_zero3():
    """--bucket-bytes given: planning chooses the rest at that size; gathers without
    --shard-parameters are refused in one line."""
    p = _plan(bucket_bytes=1 << 14)
    assert p.provenance.options["data_parallel"]["bucket_bytes"] == 1 << 14
    assert _chosen(p).default_bucket_bytes == 1 << 14
    with pytest.raises(ValueError, match="the all-gathers' decisions are --shard-parameters'"):
        DataParallelOptions(ranks=2, gathers=GatherChoice())
