"""State the executor holds between steps cannot be wrong without an error (issue 63, item 3):

- fp16-mixed's loss scale is optimizer state, which load_params lets the caller leave out
  (it starts at zero); at zero every gradient becomes 0 * inf = NaN, which the overflow check
  does not see. load_params refuses a missing, zero, negative or non-finite scale, and the
  step refuses a zero one left by a partial load; load_state_dict, through load_params, alike.
- int64 step counters (rng/step) are refused outside [0, 2^62]: -1, -2^63 and 2^63 - 1 (which
  wraps negative after one step) were accepted.
- the random stream is keyed by the whole 64-bit step: step 2^32 + k drew what step k drew
  (seed + step * 2^32 mod 2^64); the executor's draws at such a step equal the reference's
  (planner/ops/dropout.py step_seed), and differ from step k's.
"""

from __future__ import annotations

import numpy as np
import pytest

from planner.frontend.autodiff import LOSS_SCALE, make_training_graph
from planner.graph import GraphBuilder, check_graph, run
from planner.graph.interpret import init_params
from planner.graph.optimizer import Optimizer
from planner.ops.random import draws
from planner.runtime.checkpoint import load_state_dict, state_dict
from tests.codegen.helpers import build_module
from tests.graph.evaluation_cases import bn_dropout_net

pytestmark = [pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")]


@pytest.fixture(scope="module")
def fp16(tmp_path_factory):
    graph = make_training_graph(bn_dropout_net(), Optimizer(kind="sgd", lr=0.1),
                                precision="fp16-mixed")
    module = build_module(graph, tmp_path_factory.mktemp("state") / "fp16_dropout")
    return graph, module


def _feeds(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((6, 5)).astype(np.float32),
            "y": rng.integers(0, 3, 6).astype(np.int64)}


def test_a_missing_loss_scale_is_refused(fp16):
    graph, module = fp16
    start = init_params(graph, seed=1)
    without = {k: v for k, v in start.items() if k != LOSS_SCALE}
    with pytest.raises(ValueError, match=f"load_params: missing '{LOSS_SCALE}' \\(the fp16 "
                                         "loss scale"):
        module.Executor().load_params(without)


@pytest.mark.parametrize("value", [0.0, -1.0, np.inf, np.nan])
def test_a_loss_scale_that_is_no_scale_is_refused(fp16, value):
    graph, module = fp16
    start = {**init_params(graph, seed=1), LOSS_SCALE: np.float32(value)}
    with pytest.raises(ValueError, match=f"'{LOSS_SCALE}' \\(the fp16 loss scale\\) is .*; it "
                                         "must be finite and positive"):
        module.Executor().load_params(start)


def test_the_step_refuses_a_scale_left_at_zero(fp16):
    """A partial load leaves the scale at zero: the step fails naming it, and the parameters
    stay finite (the update never ran)."""
    graph, module = fp16
    ex = module.Executor()
    ex.load_params({k: v for k, v in init_params(graph, seed=1).items() if k != LOSS_SCALE},
                   partial=True)
    with pytest.raises(RuntimeError, match="the fp16 loss scale is 0.*optim/loss_scale"):
        ex.step(_feeds())
    assert all(np.isfinite(v).all() for v in ex.params().values())


def test_load_state_dict_refuses_a_zero_or_missing_scale(fp16):
    graph, module = fp16
    ex = module.Executor()
    ex.load_params(init_params(graph, seed=1))
    ex.step(_feeds())
    ckpt = state_dict(ex)
    assert float(ckpt["planner"][LOSS_SCALE]) > 0  # the run's scale is in it
    ckpt["planner"][LOSS_SCALE] = np.float32(0.0)
    with pytest.raises(ValueError, match="the fp16 loss scale"):
        load_state_dict(module.Executor(), ckpt)
    del ckpt["planner"][LOSS_SCALE]
    with pytest.raises(ValueError, match=f"planner part lacks '{LOSS_SCALE}'"):
        load_state_dict(module.Executor(), ckpt)


@pytest.mark.parametrize("step", [-1, -2**63, 2**63 - 1, 2**62 + 1])
def test_a_step_count_out_of_range_is_refused(fp16, step):
    graph, module = fp16
    ex = module.Executor()
    ex.load_params(init_params(graph, seed=1))
    ckpt = state_dict(ex)
    ckpt["planner"]["rng/step"] = np.int64(step)
    with pytest.raises(ValueError, match=f"'rng/step' \\(a step count\\) is {step}; it must "
                                         "lie in \\[0, 2\\^62\\]"):
        load_state_dict(module.Executor(), ckpt)


def test_a_step_count_at_the_bound_loads_and_steps(fp16):
    graph, module = fp16
    ex = module.Executor()
    ex.load_params({**init_params(graph, seed=1), "rng/step": np.int64(2**62)})
    ex.step(_feeds())
    assert int(ex.params()["rng/step"]) == 2**62 + 1


SHAPE, SEED, RATE = (64, 32), 5, 0.5


@pytest.fixture(scope="module")
def random_ops(tmp_path_factory):
    b = GraphBuilder("step_key")
    x, step = b.input("x", SHAPE), b.input("step", (), "int64")
    y = b.op("Dropout", [x, step], {"rate": RATE, "seed": SEED}, name="y")
    u = b.op("RandomUniform", [step], {"shape": list(SHAPE), "seed": SEED + 1}, name="u")
    graph = check_graph(b.build(outputs=[y, u]))
    return graph, build_module(graph, tmp_path_factory.mktemp("random") / "step_key").Executor()


@pytest.mark.parametrize("k", [0, 4])
def test_steps_2_to_the_32_apart_draw_apart(random_ops, k):
    graph, ex = random_ops
    x = np.ones(SHAPE, np.float32)
    at = {}
    for step in (k, 2**32 + k, 2**40 + k, 2**62):
        feeds = {"x": x, "step": np.array(step, np.int64)}
        got = ex.forward(feeds)
        want = run(graph, feeds, {}, keep="outputs")
        for name in ("y", "u"):  # the executor's draws are the reference's
            assert np.array_equal(got[name], want[name]), (name, step)
        at[step] = got
    masks = {s: tuple((v["y"] != 0).ravel()) for s, v in at.items()}
    assert len(set(masks.values())) == len(masks)  # no two steps share a mask
    assert len({v["u"].tobytes() for v in at.values()}) == len(at)


def test_the_reference_stream_has_no_period_of_2_to_the_32():
    for k in (0, 1, 12345):
        assert not np.array_equal(draws(SEED, k, 16), draws(SEED, 2**32 + k, 16))
    # steps below 2^32 draw what they always drew (checkpoints keep their streams)
    assert int(draws(7, 1, 1)[0]) == int(draws(7 + 2**32, 0, 1)[0])
