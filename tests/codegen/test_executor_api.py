"""The generated module's API: Executor(), load_params/params, step/forward, stats, plan, and
errors that name the tensor."""

from __future__ import annotations

import json

import numpy as np
import pytest

from planner.graph.interpret import init_params, random_feeds, run, train_step


@pytest.fixture()
def ex(mlp_module, mlp_graph):
    e = mlp_module.Executor()
    e.load_params(init_params(mlp_graph, seed=0))
    return e


def test_module_describes_its_plan(mlp_module, mlp_graph):
    assert json.loads(mlp_module.plan)["graph"]["name"] == mlp_graph.name
    assert mlp_module.KIND == "training"
    assert set(mlp_module.INPUTS) == {"x", "labels"}
    assert mlp_module.Executor().plan == mlp_module.plan


def test_step_returns_outputs_and_requested_tensors(ex, mlp_graph):
    feeds = random_feeds(mlp_graph, seed=1)
    out = ex.step(feeds, outputs=["relu1"])
    assert set(out) == set(mlp_graph.outputs) | {"relu1"}
    assert out["loss"].shape == () and out["loss"].dtype == np.float32
    assert (out["relu1"] >= 0).all()


def test_params_round_trip_and_views(ex, mlp_graph):
    state = init_params(mlp_graph, seed=5)
    ex.load_params(state)
    got = ex.params()
    assert set(got) == set(state)
    for k in state:
        np.testing.assert_array_equal(got[k], state[k])
    view = ex.params(copy=False)["fc1/weight"]
    ex.step(random_feeds(mlp_graph, seed=1))
    assert not np.array_equal(view, state["fc1/weight"])  # the live arena moved on
    np.testing.assert_array_equal(view, ex.params()["fc1/weight"])


def test_results_named_in_views_are_live_views_of_the_arena(ex, mlp_graph):
    feeds = random_feeds(mlp_graph, seed=1)
    out = ex.step(feeds, outputs=["relu1", "x"], views=["relu1", "x"])
    copy = ex.step(feeds, outputs=["relu1"])["relu1"]  # the same feeds: the same values
    stats = ex.stats()
    start = out["relu1"].__array_interface__["data"][0]
    assert stats["arena_address"] <= start < stats["arena_address"] + stats["arena_bytes"]
    np.testing.assert_array_equal(out["relu1"], copy)
    # A feed read in place is unbound after the step: asked as a view, it comes back a copy.
    np.testing.assert_array_equal(out["x"], feeds["x"])
    assert not np.shares_memory(out["x"], feeds["x"])
    ex.step(random_feeds(mlp_graph, seed=2))
    assert not np.array_equal(out["relu1"], copy)  # live: the next step wrote over it
    with pytest.raises(ValueError, match="views: 'relu2' is not an output"):
        ex.step(feeds, views=["relu2"])


def test_non_contiguous_feeds_are_copied_in(ex, mlp_graph):
    feeds = random_feeds(mlp_graph, seed=1)
    state = ex.params()
    wide = np.zeros((feeds["x"].shape[0], feeds["x"].shape[1] * 2), np.float32)
    wide[:, ::2] = feeds["x"]
    out = ex.step({"x": wide[:, ::2], "labels": feeds["labels"]})
    want, _ = train_step(mlp_graph, feeds, state)
    np.testing.assert_allclose(out["loss"], want["loss"], rtol=1e-5)


def test_torch_tensors_cross_through_dlpack(ex, mlp_graph):
    torch = pytest.importorskip("torch")
    feeds = random_feeds(mlp_graph, seed=1)
    state = ex.params()
    ex.load_params({k: torch.from_numpy(v) for k, v in state.items()})
    out = ex.step({k: torch.from_numpy(v) for k, v in feeds.items()})
    want, _ = train_step(mlp_graph, feeds, state)
    np.testing.assert_allclose(out["loss"], want["loss"], rtol=1e-5)
    with pytest.raises(ValueError, match="feed 'x' has shape"):
        ex.step({"x": torch.zeros(1, 1), "labels": torch.from_numpy(feeds["labels"])})


@pytest.mark.parametrize("feeds, message", [
    (lambda f: {"x": f["x"]}, "missing feed 'labels'"),
    (lambda f: {**f, "x": f["x"][:2]}, "feed 'x' has shape"),
    (lambda f: {**f, "x": f["x"].astype(np.float64)}, "feed 'x' must be float32"),
    (lambda f: {**f, "labels": f["labels"].astype(np.int32)}, "feed 'labels' must be int64"),
    (lambda f: {**f, "nope": f["x"]}, "'nope' is not an input"),
])
def test_bad_feeds_raise_naming_the_tensor(ex, mlp_graph, feeds, message):
    with pytest.raises(ValueError, match=message):
        ex.step(feeds(random_feeds(mlp_graph, seed=1)))


def test_bad_params_raise_naming_the_tensor(ex):
    with pytest.raises(ValueError, match="parameter 'fc1/weight' has shape"):
        ex.load_params({"fc1/weight": np.zeros((1, 1), np.float32)})
    with pytest.raises(ValueError, match="'x' is not a parameter"):
        ex.load_params({"x": np.zeros((1, 1), np.float32)})


def test_out_of_range_label_raises_naming_the_op(ex, mlp_graph):
    feeds = random_feeds(mlp_graph, seed=1)
    feeds["labels"] = feeds["labels"] + 100
    with pytest.raises(RuntimeError, match=r"SoftmaxCrossEntropy.*label 10\d out of range"):
        ex.step(feeds)


def test_stats_report_every_op_and_the_arena(ex, mlp_graph):
    ex.step(random_feeds(mlp_graph, seed=1))
    ex.step(random_feeds(mlp_graph, seed=2))
    s = ex.stats()
    assert [o["name"] for o in s["ops"]] == [n.name for n in mlp_graph.nodes] or \
        sorted(o["name"] for o in s["ops"]) == sorted(n.name for n in mlp_graph.nodes)
    assert all(o["calls"] == 2 and o["seconds"] >= 0 for o in s["ops"])
    assert s["steps"] == 2 and s["arena_bytes"] >= s["tensor_bytes"] > 0


def test_forward_runs_inference_plans_only(ex, mlp_inference_module, mlp_graph):
    fwd = mlp_inference_module.Executor()
    params = init_params(mlp_graph, seed=0)
    fwd.load_params({k: params[k] for k in mlp_inference_module.PARAMS})
    x = random_feeds(mlp_graph, seed=1)["x"]
    logits = fwd.forward({"x": x})["logits"]
    from planner.zoo import build

    g = build("mlp", batch=4, hidden=[8], in_features=6, classes=3, loss=False)
    want = run(g, {"x": x}, {k: params[k] for k in mlp_inference_module.PARAMS},
               keep="outputs")["logits"]
    np.testing.assert_allclose(logits, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="forward\\(\\) runs inference plans"):
        ex.forward(random_feeds(mlp_graph, seed=1))


def test_step_before_parameters_are_loaded_raises(mlp_module, mlp_graph):
    ex = mlp_module.Executor()
    with pytest.raises(RuntimeError, match=r"parameters not loaded: 'fc1/weight'.*"
                                           r"Executor\(init=True\)"):
        ex.step(random_feeds(mlp_graph, seed=1))
    with pytest.raises(RuntimeError, match="parameters not loaded"):
        ex.step_async(random_feeds(mlp_graph, seed=1))


def test_load_params_requires_every_parameter_unless_partial(mlp_module, mlp_graph):
    state = init_params(mlp_graph, seed=0)
    ex = mlp_module.Executor()
    partial = {k: v for k, v in state.items() if k != "fc2/bias"}
    with pytest.raises(ValueError, match="load_params: missing 'fc2/bias'.*partial=True"):
        ex.load_params(partial)
    ex.load_params(partial, partial=True)
    with pytest.raises(RuntimeError, match="parameters not loaded: 'fc2/bias'"):
        ex.step(random_feeds(mlp_graph, seed=1))
    ex.load_params({"fc2/bias": state["fc2/bias"]}, partial=True)
    feeds = random_feeds(mlp_graph, seed=1)
    want, _ = train_step(mlp_graph, feeds, state)
    np.testing.assert_allclose(ex.step(feeds)["loss"], want["loss"], rtol=1e-5)


def test_executor_init_draws_from_the_graph_init_hints(mlp_module, mlp_graph):
    ex = mlp_module.Executor(init=True, seed=3)
    state = init_params(mlp_graph, seed=3)
    for name, value in ex.params().items():
        np.testing.assert_array_equal(value, state[name])
    feeds = random_feeds(mlp_graph, seed=1)
    want, _ = train_step(mlp_graph, feeds, state)
    np.testing.assert_allclose(ex.step(feeds)["loss"], want["loss"], rtol=1e-5)


def test_a_nan_input_gives_a_nan_loss(ex, mlp_graph):
    """One NaN feature reaches the loss through MatMul, BiasAdd and Relu, as in the reference
    (a kernel mapping NaN to a number would hide a diverged run)."""
    feeds = random_feeds(mlp_graph, seed=1)
    feeds["x"][0, 0] = np.nan
    want, _ = train_step(mlp_graph, feeds, ex.params())
    assert np.isnan(want["loss"]) and np.isnan(ex.step(feeds)["loss"])


@pytest.mark.parametrize("value", [float("nan"), 0.0, -1.0, float("inf")])
def test_watchdog_seconds_must_be_finite_and_positive(mlp_module, value):
    # NaN would never time out, 0 and below fail every step at once (issue 32)
    with pytest.raises(ValueError, match=r"^watchdog_seconds=.*finite number of seconds > 0"):
        mlp_module.Executor(watchdog_seconds=value)


def test_jitter_us_must_not_be_negative(mlp_module):
    with pytest.raises(ValueError, match=r"^jitter_us=-1: "):
        mlp_module.Executor(jitter_us=-1)
