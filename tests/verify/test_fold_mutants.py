"""Mutants of a plan's folded LeakyRelus (a Conv2D's, oneDNN's post-op, and a BatchNorm's with
its gradient), each with the verdict the fold's rule gives it: a slope whose float32 value is
not a positive normal number, or a gradient of another slope or activation than its forward's,
is refused by `planner verify` (planner/verify/folds.py); a consistent positive slope is
accepted. One accepted mutant (the slopes rewritten as their float32 values, the runtime's)
is built and run on this host: one step gives the original's bits."""

from __future__ import annotations

import copy
import functools
import json
import math

import numpy as np
import pytest

from planner.graph.builder import GraphBuilder
from planner.graph.optimizer import Optimizer
from planner.ir.graph import Graph
from planner.plan import Plan
from planner.verify import verify_plan_data
from planner.zoo.layers import batch_norm, conv2d, head

SLOPE = 0.2


@functools.cache
def _graph() -> Graph:
    """DCGAN's discriminator in small: Conv2D -> LeakyRelu, Conv2D -> BatchNorm -> LeakyRelu,
    the head; x trained (a GAN's fake images are)."""
    from planner.frontend.options import GraphOptions
    from planner.frontend.prepare import prepare

    b = GraphBuilder("disc")
    h = b.op("LeakyRelu", [conv2d(b, b.param("x", (2, 3, 6, 6)), 4, 3, pad=1, name="c1")],
             {"alpha": SLOPE}, name="lrelu1")
    h = b.op("LeakyRelu", [batch_norm(b, conv2d(b, h, 4, 3, pad=1, name="c2"), name="bn")],
             {"alpha": SLOPE}, name="lrelu2")
    g = b.build(head(b, b.op("Flatten", [h], {"axis": 1}, name="flat"), 3, True))
    return prepare(g, GraphOptions(optimizer=Optimizer(kind="sgd", lr=0.1)))


@functools.cache
def _plan(target: str) -> str:
    import warnings

    from planner.pipeline import plan
    from planner.target import preset
    from planner.target.detect import detect

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return plan(_graph(), detect() if target == "host" else preset(target)).to_json()


def _nodes(data, op=None, act=None):
    """The nodes of the step graph and of the evaluation graph (a training plan carries one,
    with the forward's folds), by op and activation."""
    graphs = [data["graph"]] + [e["plan"]["graph"] for e in [data.get("evaluation") or {}]
                                if e]
    return [n for g in graphs for n in g["nodes"]
            if (op is None or n["op"] == op)
            and (act is None or (n["attrs"].get("activation") or "none") == act)]


def _set(nodes, **attrs):
    assert nodes
    for n in nodes:
        n["attrs"].update(attrs)


def conv_slope(v):
    """The folded Conv2D's slope and its LeakyReluGrad's, both `v` (a consistent edit)."""
    def edit(data):
        conv = [n for n in _nodes(data, "Conv2D", "leaky_relu")]
        y = conv[0]["outputs"][0]
        _set(conv, alpha=v)
        _set([n for n in _nodes(data, "LeakyReluGrad") if n["inputs"][1] == y], alpha=v)
    return edit


def norm_slope(v):
    """The folded BatchNorm's slope and its BatchNormGrad's, both `v`."""
    def edit(data):
        _set(_nodes(data, "BatchNorm", "leaky_relu") + _nodes(data, "BatchNormGrad",
                                                              "leaky_relu"), alpha=v)
    return edit


def one(op, act, **attrs):
    def edit(data):
        _set(_nodes(data, op, act), **attrs)
    return edit


BAD_SLOPES = [0.0, -0.0, -0.2, -1.0, 5e-324, 1e-40, 1e39, math.inf, -math.inf, math.nan]
REFUSED = [(f"conv slope {v}", conv_slope(v)) for v in BAD_SLOPES] + \
    [(f"norm slope {v}", norm_slope(v)) for v in BAD_SLOPES] + [
    ("conv gradient's slope alone", one("LeakyReluGrad", None, alpha=0.3)),
    ("conv's slope alone", one("Conv2D", "leaky_relu", alpha=0.3)),
    ("norm gradient's slope alone", one("BatchNormGrad", "leaky_relu", alpha=0.3)),
    ("norm's slope alone", one("BatchNorm", "leaky_relu", alpha=0.3)),
    ("norm gradient a relu", one("BatchNormGrad", "leaky_relu", activation="relu")),
    ("conv slope a string", conv_slope("0.2")),
]
ACCEPTED = [(f"conv slope {v}", conv_slope(v)) for v in (0.3, 1.0, 1e30, 1e-30)] + \
    [(f"norm slope {v}", norm_slope(v)) for v in (0.5, 2.0, 1e-37)]


def _mutant(edit) -> dict:
    data = json.loads(_plan("xeon-8180"))
    edit(data)
    return data


def test_the_plan_folds_both_and_verifies():
    data = json.loads(_plan("xeon-8180"))
    assert len(_nodes(data, "Conv2D", "leaky_relu")) >= 1
    assert len(_nodes(data, "BatchNormGrad", "leaky_relu")) == 1
    assert verify_plan_data(data) == []


@pytest.mark.parametrize(("what", "edit"), REFUSED, ids=[w for w, _ in REFUSED])
def test_unsafe_fold_mutants_are_refused(what, edit):
    problems = verify_plan_data(_mutant(edit))
    assert problems, what
    assert all("\n" not in p for p in problems)
    assert any("alpha" in p or "activation" in p for p in problems), problems[:3]


@pytest.mark.parametrize(("what", "edit"), ACCEPTED, ids=[w for w, _ in ACCEPTED])
def test_consistent_positive_slopes_are_accepted(what, edit):
    assert verify_plan_data(_mutant(edit)) == [], what


def test_an_accepted_mutant_runs_with_the_original_bits(tmp_path):
    """Every slope rewritten as its float32 value (the runtime's, a different double):
    accepted, built and stepped once from one state, the original's outputs and parameters bit
    for bit."""
    from codegen.build import build
    from codegen.load import load
    from codegen.render import render
    from planner.graph.interpret import random_feeds
    from tests.codegen.helpers import start_state

    original = json.loads(_plan("host"))
    assert _nodes(original, "Conv2D", "leaky_relu") and _nodes(original, "BatchNormGrad",
                                                                 "leaky_relu")
    mutant = copy.deepcopy(original)
    f32 = float(np.float32(SLOPE))
    assert f32 != SLOPE
    for n in _nodes(mutant):
        if n["attrs"].get("alpha") == SLOPE:
            n["attrs"]["alpha"] = f32
    assert verify_plan_data(mutant) == []
    graph = _graph()
    state, feeds = start_state(graph), random_feeds(graph, seed=3)
    results = []
    for name, data in (("original", original), ("mutant", mutant)):
        ex = load(build(render(Plan.model_validate(data), tmp_path / name)).dir).Executor()
        ex.load_params(state)
        results.append((ex.step(feeds), ex.params()))
    (want_out, want_params), (got_out, got_params) = results
    for name in want_out:
        np.testing.assert_array_equal(got_out[name], want_out[name], err_msg=name)
    for name in want_params:
        np.testing.assert_array_equal(got_params[name], want_params[name], err_msg=name)
