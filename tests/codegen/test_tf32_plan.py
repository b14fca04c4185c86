"""The tf32 policy from graph to generated executor, without a GPU: a tf32 plan's schedule tells
the CUDA executor (Schedule::tf32), for a GPU without TF32 too (the executor then runs float32
FMA math: it checks the device at load), an fp32 plan's does not; and the bound and margins
tests/codegen/tf32_cases.py derives for a GPU's TF32 GEMM, checked on numpy's emulation of it."""

from __future__ import annotations

import numpy as np
import pytest

from codegen.render import render_files
from planner.frontend.autodiff import make_training_graph
from planner.graph.optimizer import Optimizer
from planner.pipeline import plan as make_plan
from planner.target import preset
from planner.zoo import build as zoo
from tests.codegen.tf32_cases import ADD, NN, RAN_TF32, TF32_PRODUCT, K, M, schedule_tf32


@pytest.fixture(scope="module")
def graphs():
    net = zoo("mlp", batch=4, hidden=[8], in_features=6, classes=3)
    return {p: make_training_graph(net, Optimizer(kind="sgd"), precision=p)
            for p in ("fp32", "tf32")}


@pytest.mark.parametrize("target", ["h100-80gb", "k40c-12gb"])   # sm_90, and sm_35: no TF32
def test_schedule_carries_the_math(graphs, target):
    for precision, flag in (("fp32", 0), ("tf32", 1)):
        plan = make_plan(graphs[precision], preset(target))
        assert (plan.graph.math == "tf32") == bool(flag)
        assert schedule_tf32(render_files(plan, "tf32_net")) == flag


def test_cpu_plan_ignores_it(graphs):
    """A tf32 plan for a CPU renders with the mark, which the CPU runtime never reads (CPUs
    have no TF32): a float32 plan's tensors."""
    plan = make_plan(graphs["tf32"], preset("xeon-8180"))
    files = render_files(plan, "tf32_cpu")
    fp32 = render_files(make_plan(graphs["fp32"], preset("xeon-8180")), "tf32_cpu")
    assert schedule_tf32(files) == 1 and schedule_tf32(fp32) == 0
    # the same tensors in the same types: nothing for the CPU's kernels to do differently
    f32 = files["schedule.cpp"].count("planner::F32")
    assert f32 > 0 and f32 == fp32["schedule.cpp"].count("planner::F32")


def _tf32(x: np.ndarray, truncate: bool) -> np.ndarray:
    """float32 values with TF32's 10-bit significand: truncated (tensor cores fed float32) or
    rounded to nearest (ties away; a library's explicit conversion)."""
    bits = x.astype(np.float32).view(np.uint32)
    if not truncate:
        bits = bits + np.uint32(0x1000)
    return (bits & np.uint32(0xFFFFE000)).view(np.float32)


@pytest.mark.parametrize("truncate", [True, False])
def test_tf32_gemm_bound_and_margin(truncate):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, NN)).astype(np.float32)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    mag = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    tf32 = (_tf32(a, truncate) @ _tf32(b, truncate)).astype(np.float64)
    fp32 = (a @ b).astype(np.float64)
    assert np.all(np.abs(tf32 - exact) <= (TF32_PRODUCT + K * ADD) * mag)
    # the GPU test tells TF32 from float32 by this threshold, with room on both sides
    assert np.max(np.abs(tf32 - exact) / mag) > 4 * RAN_TF32
    assert np.max(np.abs(fp32 - exact) / mag) < RAN_TF32 / 4


def test_cpu_executor_runs_tf32_as_float32(graphs, tmp_path):
    """The CPU executor never reads the mark: a tf32 step is bit for bit the fp32 step."""
    from planner.graph.interpret import random_feeds
    from tests.codegen.helpers import build_module, start_state

    results = {}
    for precision, graph in graphs.items():
        ex = build_module(graph, tmp_path / f"cpu_{precision}").Executor()
        ex.load_params(start_state(graph))
        loss = np.asarray(ex.step(random_feeds(graph, seed=2), ["loss"])["loss"])
        results[precision] = (loss, {k: np.asarray(v) for k, v in ex.params().items()})
    (loss32, p32), (loss_tf, p_tf) = results["fp32"], results["tf32"]
    assert np.array_equal(loss32, loss_tf) and p32.keys() == p_tf.keys()
    assert all(np.array_equal(p32[k], p_tf[k]) for k in p32)
