"""A range plan (planner/pipeline/ranges.py): built once for its largest batch, run on smaller
batches with no other build (codegen/concrete.py), its steps and evaluations as a plan made
for each batch computes them: against the numpy reference interpreter on the smaller batch's
own graph, BatchNorm's statistics over the rows the batch has, and the updated state."""

from __future__ import annotations

import numpy as np
import pytest

from codegen.build import build
from codegen.concrete import concrete_options
from codegen.load import load
from codegen.render import render
from planner.errors import PlanError
from planner.frontend.prepare import GraphOptions, prepare
from planner.graph.evaluation import evaluation_graph
from planner.graph.interpret import random_feeds, run
from planner.graph.optimizer import Optimizer
from planner.pipeline.choices import step_choices
from planner.pipeline.ranges import step_at
from planner.target.detect import detect
from tests.codegen.helpers import host_plan, rel_error, start_state

# Convolutions (blocked images where the host keeps them), BatchNorm with its folded Relu,
# residual sums, pooling, a classifier and momentum SGD (whose update is linear in the gradient,
# so a gradient's rounding stays a rounding of the update: Adam's first step is the gradient's
# sign wherever it is near zero).
SPEC = "zoo:resnet?depth=18&image=16&width=0.125&classes=10&batch={}"
LARGEST = 6
OPTIONS = GraphOptions(optimizer=Optimizer(kind="momentum", lr=0.1, momentum=0.9))


@pytest.fixture(scope="module")
def ranged(tmp_path_factory):
    graph = prepare(SPEC.format(LARGEST), OPTIONS)
    plan = host_plan(graph, "optimized")
    package = load(build(render(plan, tmp_path_factory.mktemp("range") / "resnet_range")).dir)
    return graph, plan, package, step_choices(graph, detect())


def at(ranged, batch: int):
    """The step graph at `batch` under the range plan's choices, and the executor running it
    on the range's build."""
    _, plan, package, choices = ranged
    step = step_at(choices, prepare(SPEC.format(batch), OPTIONS))
    return step, package.Executor(**concrete_options(plan, step))


@pytest.mark.parametrize("batch", [3, 2])
def test_a_smaller_batch_steps_as_a_plan_made_for_it(ranged, batch, tmp_path):
    """The range's build at `batch` against a plan made and built for `batch` alone: the same
    step graph; the same bits where every op runs on as many threads (the same kernels), else
    each as close to the float64 reference as the other; and the loss, the updates and the
    evaluation against the reference on the batch's own graph."""
    step, ex = at(ranged, batch)
    own_plan = host_plan(prepare(SPEC.format(batch), OPTIONS), "optimized")
    assert own_plan.graph == step
    own = load(build(render(own_plan, tmp_path / "own")).dir).Executor()
    state = start_state(step, seed=2)
    feeds = random_feeds(step, seed=batch)
    for e in (ex, own):
        e.load_params(state)
    got, theirs = ex.step(feeds), own.step(feeds)
    want = run(step, {k: _f64(v) for k, v in feeds.items()},
               {k: _f64(v) for k, v in state.items()})
    threads = {p.name: p.threads for p in ranged[1].ops}
    same_kernels = all(threads.get(p.name) == p.threads for p in own_plan.ops)
    after, theirs_after = ex.params(), own.params()
    pairs = [("loss", got["loss"], theirs["loss"])] + [
        (t.name, after[t.updates], theirs_after[t.updates]) for t in step.tensors
        if t.updates is not None and t.role in ("param", "state")]
    for name, mine, other in pairs:
        if same_kernels:
            np.testing.assert_array_equal(mine, other, err_msg=name)
        else:  # other threads sum in another order: as near the reference as theirs, or nearer
            error = rel_error(other, want[name])
            assert rel_error(mine, want[name]) <= 2 * error + 1e-6, name
    # The evaluation schedule at the same batch: BatchNorm on its running statistics.
    evaluated = ex.evaluate(feeds)
    reference = run(evaluation_graph(step), feeds, ex.params(), keep="outputs")
    assert rel_error(evaluated["loss"], reference["loss"]) < 1e-5


def _f64(v: np.ndarray) -> np.ndarray:
    return v.astype(np.float64) if v.dtype == np.float32 else v


def test_the_largest_batch_concrete_is_the_build_itself_bit_for_bit(ranged):
    graph, plan, package, _ = ranged
    step, concrete = at(ranged, LARGEST)
    own = package.Executor()
    state = start_state(step, seed=4)
    feeds = random_feeds(step, seed=4)
    for ex in (own, concrete):
        ex.load_params(state)
    np.testing.assert_array_equal(own.step(feeds)["loss"], concrete.step(feeds)["loss"])
    for name, value in own.params().items():
        np.testing.assert_array_equal(value, concrete.params()[name], err_msg=name)


def test_a_larger_batch_or_another_model_is_refused_in_one_line(ranged):
    _, plan, _, choices = ranged
    larger = step_at(choices, prepare(SPEC.format(LARGEST + 1), OPTIONS))
    with pytest.raises(PlanError, match=r"cannot run these shapes: tensor .* holds more"):
        concrete_options(plan, larger)
    wider = step_at(choices, prepare(SPEC.format(2).replace("classes=10", "classes=12"),
                                     OPTIONS))
    with pytest.raises(PlanError, match=r"\(param\) is \[.*\], the range's"):
        concrete_options(plan, wider)


def test_the_executor_itself_refuses_a_concrete_shape_past_the_range(ranged):
    """The runtime's loader checks what Python's check does (codegen/concrete.py never hands
    it such shapes): a tensor that would not fit the bytes the range gives it, a rank
    changed, or tables of another length, each refused in one line naming the tensor."""
    _, plan, package, _ = ranged
    step, _ = at(ranged, 3)
    tables = concrete_options(plan, step)
    wider = [list(s) for s in tables["shapes"]]
    wider[0][0] = LARGEST + 1
    with pytest.raises(RuntimeError, match=r"tensor 'images': the concrete shape does not fit"):
        package.Executor(**{**tables, "shapes": wider})
    lower = [list(s) for s in tables["shapes"]]
    lower[0] = lower[0][:-1]
    with pytest.raises(RuntimeError, match=r"tensor 'images': a concrete shape of rank 3"):
        package.Executor(**{**tables, "shapes": lower})
    with pytest.raises(RuntimeError, match=r"concrete shapes for \d+ tensors and \d+ ops"):
        package.Executor(**{**tables, "attrs": tables["attrs"][:-1]})


def test_a_plan_file_alone_gives_the_choices_a_smaller_batch_runs_under(ranged):
    """What a `planner plan --batch-range` file's user has: the plan, not the planning. The
    choices it records (planner.pipeline.choices.recorded_choices) make the same step graph
    of a smaller batch as the planning's own."""
    from planner.pipeline.choices import recorded_choices

    _, plan, _, choices = ranged
    small = prepare(SPEC.format(3), OPTIONS)
    assert step_at(recorded_choices(small, plan.json_data), small) == step_at(choices, small)
