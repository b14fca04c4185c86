"""What a step returns and changes can be trusted, under the plan's own memory layout (arena
bytes reused between tensors): a requested tensor comes back with the reference interpreter's
value or is refused naming it; a feed that is a view of the executor's memory reads as a copy
would; a step that raises changes no parameter or state."""

from __future__ import annotations

import numpy as np
import pytest

from planner.frontend.autodiff import make_training_graph
from planner.frontend.prepare import with_kept
from planner.graph.builder import GraphBuilder
from planner.graph.interpret import random_feeds, run
from planner.graph.optimizer import Optimizer
from planner.zoo import build
from planner.zoo.layers import batch_norm, conv2d, head, relu
from tests.codegen.helpers import build_module, rel_error, start_state


def conv_bn_graph():
    """Conv2D -> BatchNorm (training: running statistics updated every step) -> Relu -> fc,
    with more channels than image values: a running statistic can hold a whole feed."""
    b = GraphBuilder("conv_bn")
    x = b.input("images", (2, 2, 2, 2))
    x = relu(b, batch_norm(b, conv2d(b, x, 32, 1, name="conv", bias=False), name="bn"))
    return make_training_graph(b.build(head(b, x, classes=3, loss=True)),
                               Optimizer(kind="sgd", lr=0.1))


@pytest.fixture(scope="module")
def lenet(tmp_path_factory):
    graph = make_training_graph(build("lenet", image=8, batch=8),
                                Optimizer(kind="sgd", lr=0.1))
    return graph, build_module(graph, tmp_path_factory.mktemp("built") / "lenet_reuse",
                               layout="plan")


@pytest.fixture(scope="module")
def conv_bn(tmp_path_factory):
    graph = conv_bn_graph()
    return graph, build_module(graph, tmp_path_factory.mktemp("built") / "conv_bn_reuse",
                               layout="plan")


def test_a_requested_tensor_is_its_reference_value_or_refused_naming_it(lenet):
    graph, module = lenet
    state, feeds = start_state(graph), random_feeds(graph, seed=3)
    want = run(graph, feeds, state)
    ex = module.Executor(concurrent=False)
    returned, refused = [], []
    for t in graph.tensors:
        if t.name not in graph.producer or t.name in graph.outputs:
            continue
        ex.load_params(state)
        try:
            got = ex.step(feeds, outputs=[t.name])[t.name]
        except ValueError as e:
            assert str(e).startswith(f"cannot return '{t.name}': op '"), e
            assert f"writes over its bytes later in the step (the plan reuses them); plan with " \
                   f"--keep {t.name} to keep it" in str(e)
            refused.append(t.name)
            continue
        # float32 kernels against the float32 reference: reordered sums, a few ulps per term
        # over at most a few hundred terms per value.
        assert rel_error(got, want[t.name]) < 1e-4, t.name
        returned.append(t.name)
    # The plan reuses bytes (else this test would not test the refusal) but not all of them.
    assert refused and returned, (refused, returned)


def test_tensors_the_plan_keeps_are_returned(lenet, tmp_path):
    graph, module = lenet
    state, feeds = start_state(graph), random_feeds(graph, seed=3)
    want = run(graph, feeds, state)
    ex = module.Executor()
    refused = []
    # The first three computed tensors the plan writes over (which ones follows its arena).
    for name in (t.name for t in graph.tensors
                 if t.name in graph.producer and t.name not in graph.outputs):
        ex.load_params(state)
        try:
            ex.step(feeds, outputs=[name])
        except ValueError as e:
            assert f"plan with --keep {name} to keep it" in str(e), e
            refused.append(name)
        if len(refused) == 3:
            break
    assert len(refused) == 3, refused
    kept = with_kept(graph, refused)
    ex = build_module(kept, tmp_path / "lenet_kept", layout="plan").Executor()
    ex.load_params(state)
    got = ex.step(feeds)
    for name in refused:
        assert rel_error(got[name], want[name]) < 1e-4, name


@pytest.mark.parametrize("model", ["lenet", "conv_bn"])
def test_a_feed_viewing_the_executors_memory_reads_as_a_copy(request, model):
    graph, module = request.getfixturevalue(model)
    state, feeds = start_state(graph), random_feeds(graph, seed=5)
    ex = module.Executor(concurrent=False)
    size, shape = feeds["images"].size, feeds["images"].shape
    tried = 0
    # A feed of a parameter's or a running statistic's bytes: the step writes over them (the
    # running statistics in the forward pass, before the weight gradients read the images).
    for name in (t.name for t in graph.tensors
                 if t.role in ("param", "state") and t.updates is None):
        ex.load_params(state)
        values = ex.params(copy=False)[name].reshape(-1)
        if values.size < size:
            continue
        view = values[:size].reshape(shape)
        want = {**ex.step(dict(feeds, images=view.copy())), **ex.params()}
        ex.load_params(state)
        got = {**ex.step(dict(feeds, images=view)), **ex.params()}
        for out in want:
            np.testing.assert_array_equal(got[out], want[out], err_msg=f"{name}: {out}")
        tried += 1
    assert tried >= 1


def test_a_step_that_raises_changes_no_parameter_or_state(conv_bn):
    graph, module = conv_bn
    state, feeds = start_state(graph), random_feeds(graph, seed=7)
    ex = module.Executor()
    ex.load_params(state)
    before = ex.params()
    bad = dict(feeds, labels=feeds["labels"].copy())
    bad["labels"][-1] = 3  # the classes are 0..2
    with pytest.raises(RuntimeError, match=r"SoftmaxCrossEntropy\): label 3 out of range"):
        ex.step(bad)
    after = ex.params()
    for name, value in before.items():
        assert value.tobytes() == after[name].tobytes(), name
    # Nothing half-done either: the next good step is the reference's first step.
    out = ex.step(feeds)
    assert rel_error(out["loss"], run(graph, feeds, state)["loss"]) < 1e-5
