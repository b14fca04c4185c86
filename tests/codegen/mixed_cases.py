"""bf16-mixed and fp16-mixed training steps of a generated executor against the reference
interpreter's emulated low-type step (planner/graph/interpret.py: low-type values widened exactly,
each op in float32, every result rounded once to its declared type, as the oneDNN kernels
compute), and the Cast kernels against ml_dtypes. tests/codegen/test_mixed_precision.py runs
them on the CPU executor, tests/cuda/test_cuda_mixed.py on the CUDA one.

Tolerance, from bfloat16's 8-bit significand (unit roundoff u = 2^-8; one ulp of a value x is at
most 2u|x|): both sides round the same float32 values, which differ only by float32 summation
order (about K * 2^-24 relative for a K-term sum, far below u). A bfloat16 rounding can still go
the other way where a float32 value lies that close to a rounding boundary; each such flip
moves one element by one ulp, <= 2u of itself, and a product of flipped operands by <= 4u. So
the loss and each gradient agree to a few u of their size: we hold the loss to 4u relative, and
each parameter's update (p_after - p_before) to 4u of the update's largest element. float16
steps are held to the same bounds in its unit roundoff 2^-11. A step computing in float32
without the bfloat16 roundings misses by more than these bounds
(tests/graph/test_precision.py: test_tolerance_sees_bfloat16_rounding).
"""

from __future__ import annotations

import numpy as np

from planner.frontend.autodiff import make_training_graph
from planner.graph.interpret import random_feeds, train_step
from planner.graph.optimizer import LossScaling, Optimizer
from planner.zoo import build
from tests.codegen.helpers import build_module, start_state

U = 2.0 ** -8  # bfloat16's unit roundoff (8-bit significand)

MODELS = {
    "mlp": dict(batch=8, hidden=[32], in_features=24, classes=5),
    "lenet": dict(batch=4, image=12),
    # BatchNorm, pooling and residual adds in bfloat16 between the convolutions
    "resnet": dict(batch=4, image=16, depth=18, width=0.125, classes=4),
    # attention's batched GEMMs on permuted bfloat16 views (folded Transposes)
    "gpt": dict(batch=2, seq=8, dim=16, heads=2, layers=1, vocab=11),
}


# unit roundoff of each low type: bfloat16's 8-bit significand, float16's 11-bit
UNIT = {"bf16-mixed": U, "fp16-mixed": 2.0 ** -11}


def mixed_graph(model: str, precision: str = "bf16-mixed"):
    # without fp16-mixed's loss scaling: its first scale (2^16) overflows LeNet's float16
    # gradients, a skipped step with nothing to compare (tests/codegen/loss_scale_check.py)
    return make_training_graph(build(model, **MODELS[model]), Optimizer(kind="sgd", lr=0.1),
                               precision=precision, loss_scaling=LossScaling(enabled=False))


def update_errors(graph, before, got, want) -> dict[str, float]:
    """Per updated param: max |got - want| over the largest |want - before| (the update)."""
    out = {}
    for t in graph.tensors:
        if t.updates is None or t.role != "param":
            continue
        step = np.max(np.abs(want[t.updates].astype(np.float64) - before[t.updates]))
        out[t.updates] = float(np.max(np.abs(got[t.updates].astype(np.float64)
                                             - want[t.updates])) / step)
    return out


# ResNet in bf16-mixed only: its last stages normalise 1x1 maps over the batch's 4 values, where
# BatchNorm multiplies a one-ulp rounding flip of its input (a float32 summation-order
# difference in the convolution before it) by |x| / std; float16's unit roundoff is 8x smaller
# than bfloat16's, and so is the bound, while the flips' size is set by the float32 sums.
CASES = [(m, p) for m in sorted(MODELS) for p in sorted(UNIT)
         if (m, p) != ("resnet", "fp16-mixed")]


def check_mixed_step(model: str, precision: str, folder, backend: str = "cpu"):
    """One step of the generated executor of `backend` against the emulated reference step,
    within the bounds above; returns the executor (for its stats())."""
    u = UNIT[precision]
    graph = mixed_graph(model, precision)
    assert sum(n.op == "Cast" for n in graph.nodes) > 0
    module = build_module(graph, folder, backend, layout="plan")
    state, feeds = start_state(graph), random_feeds(graph, seed=2)
    ex = module.Executor()
    ex.load_params(state)
    loss = float(np.asarray(ex.step(feeds, ["loss"])["loss"]))
    got = {k: np.asarray(v) for k, v in ex.params().items()}
    outputs, want = train_step(graph, feeds, state)
    assert abs(loss - float(outputs["loss"])) <= 4 * u * abs(float(outputs["loss"]))
    errors = update_errors(graph, state, got, want)
    assert errors and max(errors.values()) <= 4 * u, errors
    return ex


def check_casts(folder, backend: str = "cpu") -> None:
    """Cast float32 -> bfloat16 / float16 -> float32 through the executor of `backend`:
    bit-identical to numpy's (ml_dtypes') round to nearest even, ties, overflow, NaN and
    infinities included, except that a float32 subnormal may become a zero of its sign (the CPU's
    AVX512_BF16 conversion flushes denormal inputs; the GPU's converts them exactly) and zeros
    are compared by value (oneDNN's conversion without bf16 instructions may turn -0.0 into
    +0.0)."""
    import ml_dtypes

    from planner.graph.builder import GraphBuilder

    rng = np.random.default_rng(0)
    x = np.concatenate([
        rng.standard_normal(200).astype(np.float32) * 10.0 ** rng.integers(-6, 6, 200),
        np.float32([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 1e-40, 3.4e38, 7e4, 1e-8,
                    np.inf, -np.inf, np.nan, 0.0, -0.0]),  # ties to even, subnormal, overflow
    ]).astype(np.float32)
    b = GraphBuilder("casts")
    xin = b.input("x", x.shape)
    outs = []
    for low in ("bfloat16", "float16"):
        y = b.op("Cast", [xin], {"to": low}, name=f"to_{low}")
        outs += [y, b.op("Cast", [y], {"to": "float32"}, name=f"from_{low}")]
    module = build_module(b.build(outputs=outs), folder, backend)
    got = module.Executor().forward({"x": x})
    tiny = (x != 0) & (np.abs(x) < np.finfo(np.float32).tiny)
    assert tiny.any()
    for low, dtype in (("bfloat16", ml_dtypes.bfloat16), ("float16", np.float16)):
        with np.errstate(over="ignore"):  # 3.4e38 and 7e4 overflow float16 on purpose
            want = x.astype(dtype).astype(np.float32)
        back = got[f"from_{low}"]
        exact = ~tiny & (x != 0)
        assert np.array_equal(back[exact].view(np.uint32), want[exact].view(np.uint32)), low
        assert np.all(back[x == 0] == 0), low
        assert all(v in (w, 0.0) for v, w in zip(back[tiny], want[tiny], strict=True)), low
        if low == "bfloat16":
            assert got[f"to_{low}"].dtype == np.dtype(dtype)
            assert np.array_equal(got[f"to_{low}"].astype(np.float32), back, equal_nan=True)
