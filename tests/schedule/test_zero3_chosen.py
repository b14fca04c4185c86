"""ZeRO-3's memory decisions chosen by planning under a memory budget
(planner/pipeline/gathers.py): the bucket size, each all-gather's prefetch depth and which
forward copies are freed and gathered again. Without a budget planning keeps the default
decisions and records none. Under a budget just below the default decisions' arena, the
chosen plan fits it, holds less than the default decisions without a budget and steps faster
than those decisions fitted to the budget (by the budget search's serial order) or than the
default decisions at the other bucket sizes the search starts from; the choice is the same
from the same inputs. (That the chosen decisions train as one process does:
tests/codegen/test_sharded_parameters.py.)"""

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
    """The default decisions without a budget, and the plan chosen under a budget 1% below
    their arena, with that budget."""
    default = _plan()
    budget = default.summary.memory.arena_bytes * 99 // 100
    return default, _plan(budget=budget), budget


def test_without_a_budget_the_default_decisions_are_kept_and_not_recorded(plans):
    default, _, _ = plans
    assert "gathers" not in default.provenance.options["data_parallel"]
    given = _plan(GatherChoice())
    assert default.summary.memory.arena_bytes == given.summary.memory.arena_bytes
    assert default.summary.step_seconds == given.summary.step_seconds


def test_under_a_budget_the_chosen_plan_fits_holds_less_and_is_the_fastest_fitting(plans):
    default, chosen, budget = plans
    assert chosen.summary.memory.arena_bytes <= budget < default.summary.memory.arena_bytes
    # the default decisions fit the budget only by running the step more serially
    fitted = _plan(GatherChoice(), budget=budget)
    assert fitted.summary.memory.arena_bytes <= budget
    assert chosen.summary.step_seconds < fitted.summary.step_seconds
    size = _chosen(chosen).default_bucket_bytes
    for smaller in (size // 2, size // 4):  # the other sizes the search starts from
        start = _plan(GatherChoice(), budget=budget, bucket_bytes=smaller)
        assert chosen.summary.step_seconds <= start.summary.step_seconds, smaller
    # what the plan records of the default decisions is theirs under the same budget
    record = _chosen(chosen)
    assert record.default_arena_bytes == fitted.summary.memory.arena_bytes
    assert record.default_step_seconds == fitted.summary.step_seconds


def test_the_choice_is_a_function_of_its_inputs_and_replans_without_searching(plans):
    """The same inputs give the same plan, byte for byte; and planning again with the
    options it records (its decisions given: what planner explain and verify do) too."""
    _, chosen, budget = plans
    assert _plan(budget=budget).to_json() == chosen.to_json()
    dp = chosen.provenance.options["data_parallel"]
    again = _plan(_chosen(chosen), budget=budget, bucket_bytes=dp["bucket_bytes"])
    assert again.to_json() == chosen.to_json()


def test_a_keep_list_of_another_length_is_refused_in_one_line():
    with pytest.raises(UserError, match=r"keeps 1 buckets' forward copies; the step has \d+"):
        _plan(GatherChoice(keep=(True,)))


def test_show_prints_each_kind_of_decision_and_what_it_saves(plans, tmp_path, capsys):
    out = tmp_path / "z3.json"
    assert cli.main(["plan", GPT, "--train", "adam", "--target", TARGET, "--data-parallel", "2",
                     "--shard-parameters", "--memory-budget", str(plans[2]),
                     "--no-evaluation", "-o", str(out)]) == 0
    capsys.readouterr()
    assert cli.main(["show", str(out)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines()
             if line.startswith("  chosen  ")]
    assert [line.split()[1] for line in lines] == ["bucket", "forward", "prefetch", "arena"]
    assert "the default decisions under the same budget: " in lines[-1]


def test_a_given_bucket_size_is_kept_and_decisions_need_zero3(plans):
    """--bucket-bytes given: planning chooses the rest at that size; gathers without
    --shard-parameters are refused in one line."""
    p = _plan(budget=plans[2], bucket_bytes=1 << 14)
    assert p.provenance.options["data_parallel"]["bucket_bytes"] == 1 << 14
    assert _chosen(p).default_bucket_bytes == 1 << 14
    with pytest.raises(ValueError, match="the all-gathers' decisions are --shard-parameters'"):
        DataParallelOptions(ranks=2, gathers=GatherChoice())
