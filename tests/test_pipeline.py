"""The one driver: the backend chosen from the target, one Schedule record from either
scheduler, memory as a decision, one assembly, verification always."""

from __future__ import annotations

import json
import warnings

import pytest
from pydantic import ValidationError

from planner.errors import PlanError, UserError
from planner.frontend.autodiff import Optimizer, make_training_graph
from planner.pipeline import PlanOptions, decide, place, plan
from planner.plan import SCHEMA, Plan, load_plan
from planner.schedule import ScheduledOp, ScheduleOptions, cpu_schedule, stream_schedule
from planner.target import preset
from planner.zoo import build


@pytest.fixture(scope="module")
def graph():
    return make_training_graph(build("lenet", batch=4, image=16), Optimizer(kind="sgd"))


def quiet_plan(*args, **kw) -> Plan:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return plan(*args, **kw)


@pytest.mark.parametrize("target, backend", [("xeon-8180", "cpu"), ("k40c-12gb", "cuda")])
def test_the_target_chooses_the_backend_and_every_op_is_placed_for_it(graph, target, backend):
    p = quiet_plan(graph, preset(target))
    assert p.backend == backend == preset(target).backend
    if backend == "cpu":
        assert all(o.cpus and not o.stream for o in p.ops) and p.target.core_of
    else:
        assert all(o.stream in p.target.streams and not o.cpus for o in p.ops)
        assert not p.target.core_of
    assert p.to_json() == quiet_plan(graph, preset(target)).to_json()  # deterministic
    assert Plan.from_json(p.to_json()) == p


def test_an_op_is_on_cpus_or_a_stream_never_both():
    with pytest.raises(ValidationError, match="either cpus .CPU. or stream .GPU."):
        ScheduledOp(name="a", op="Relu", cpus=(0,), stream="compute", start=0.0, end=1.0)
    with pytest.raises(ValidationError, match="either cpus"):
        ScheduledOp(name="a", op="Relu", start=0.0, end=1.0)


def test_the_plan_is_the_schedule_and_the_memory_decision_assembled(graph):
    target = preset("xeon-8180")
    model, schedule, memory = decide(graph, target)
    p = quiet_plan(graph, target)
    assert [o.name for o in p.ops] == [o.name for o in schedule.ops]
    assert p.tensors == memory.tensors
    edges = {(e.before, e.after) for e in p.happens_before}
    assert edges == {(e.before, e.after) for e in (*schedule.edges, *memory.edges)}
    assert p.summary.lower_bound_seconds == schedule.bound.seconds
    assert p.summary.memory == memory.summary
    # The memory planner only decides: the same call gives the same decision.
    assert place(graph, model, schedule) == memory
    assert cpu_schedule(graph, model) == schedule


def test_gpu_plans_keep_the_stream_schedules_order_and_refuse_cpu_options(graph):
    target = preset("k40c-12gb")
    model, schedule, memory = decide(graph, target)
    assert schedule == stream_schedule(graph, model)
    # Each node on the stream the schedule chose, in the schedule's order (co-running
    # streams: a small LeNet's kernels do not fill a K40).
    assert schedule.strategy == "streams"
    placed = [(o.name, o.stream) for o in memory.ops if o.stream.startswith("compute")]
    assert placed == [(o.name, o.stream) for o in schedule.ops]
    with pytest.raises(ValueError, match="scheduling options .* are for CPU targets"):
        plan(graph, target, options=PlanOptions(schedule=ScheduleOptions(strategy="paper")))


def test_every_plan_is_verified_before_it_is_returned(graph, monkeypatch):
    import planner.verify

    monkeypatch.setattr(planner.verify, "verify_plan", lambda p: ["op 'x' breaks a rule"])
    with pytest.raises(PlanError, match="does not verify: op 'x' breaks a rule"):
        quiet_plan(graph, preset("xeon-8180"))
    assert quiet_plan(graph, preset("xeon-8180"), check=False).ops


def test_a_plan_of_an_older_schema_is_refused_with_one_line(graph, tmp_path):
    data = json.loads(quiet_plan(graph, preset("xeon-8180")).to_json())
    data["schema"] = "planner.plan/1"
    path = tmp_path / "old.plan.json"
    path.write_text(json.dumps(data))
    with pytest.raises(UserError) as e:
        load_plan(str(path))
    message = str(e.value)
    assert "\n" not in message and "re-plan it" in message and SCHEMA in message
    with pytest.raises(PlanError, match="re-plan it"):
        Plan.from_json(json.dumps(data))
