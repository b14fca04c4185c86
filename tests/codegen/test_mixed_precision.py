"""bf16-mixed training steps of the generated CPU executor against the reference interpreter's
emulated bfloat16 step (planner/graph/interpret.py: low-type values widened exactly, each op in
float32, every result rounded once to its declared type, as the oneDNN kernels compute).

Tolerance, from bfloat16's 8-bit significand (unit roundoff u = 2^-8; one ulp of a value x is at
most 2u|x|): both sides round the same float32 values, which differ only by float32 summation
order (about K * 2^-24 relative for a K-term sum, far below u). A bfloat16 rounding can still go
the other way where a float32 value lies that close to a rounding boundary; each such flip
moves one element by one ulp, <= 2u of itself, and a product of flipped operands by <= 4u. So
the loss and each gradient agree to a few u of their size: we hold the loss to 4u relative, and
each parameter's update (p_after - p_before) to 4u of the update's largest element. A kernel
computing in float32 without the bfloat16 rounding of its operands misses by ~u on every
element at once, which these bounds catch on the updates (checked in
test_tolerance_detects_unrounded_operands).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from planner.graph.autodiff import make_training_graph
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
    # gradients, a skipped step with nothing to compare (tests/codegen/test_loss_scale.py)
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


@pytest.mark.parametrize(("model", "precision"), CASES)
def test_bf16_mixed_step_matches_emulated_reference(model, precision, tmp_path_factory):
    """(and fp16-mixed, with float16's unit roundoff in the same bounds)"""
    ex = check_mixed_step(model, precision, tmp_path_factory.mktemp("mixed") / model)
    # stats() names what oneDNN runs for each low-precision op (a bf16 kernel, or the float32
    # fallback's reorders around a float32 one)
    impls = {d["name"]: d.get("impl", "") for d in ex.stats()["ops"]
             if d["op"] in ("Conv2D", "MatMul")}
    assert impls and all(impls.values()), impls
    if os.environ.get("ONEDNN_MAX_CPU_ISA") == "AVX2":  # the fallback below: no bf16 kernels
        assert not any("bf16" in v or "amx" in v for v in impls.values()), impls


def check_mixed_step(model: str, precision: str, folder, backend: str = "cpu"):
    """One step of the generated executor of `backend` against the emulated reference step,
    within the bounds above; returns the executor (tests/cuda/test_cuda_mixed.py: the GPU's)."""
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


def test_float32_fallback_where_the_isa_has_no_bf16(tmp_path):
    """On a CPU without bf16 or f16 support (oneDNN limited to AVX2 here, as on an AVX2-only or
    older AMD machine), the same steps still match the emulated references: the convolutions and
    matmuls (attention's over permuted views too) compute in float32 between converting
    reorders (templates/cpu/runtime/kernels)."""
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2"}
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp",
         str(tmp_path / "t"), f"{Path(__file__)}::test_bf16_mixed_step_matches_emulated_reference",
         "-k", "lenet or gpt"], cwd=root, env=env, capture_output=True, text=True,
        timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "4 passed" in done.stdout  # bf16-mixed and fp16-mixed; gpt: permuted views too


def test_cast_kernels_round_as_ml_dtypes(tmp_path):
    """Cast float32 -> bfloat16 / float16 -> float32 through the executor: bit-identical to
    numpy's (ml_dtypes') round to nearest even, ties, overflow, NaN and infinities included;
    the bfloat16 value comes back to Python as a numpy bfloat16 array. One exception: a
    float32 subnormal (below 2^-126) may become a zero of its sign, as the AVX512_BF16
    conversion instruction (VCVTNEPS2BF16) flushes denormal inputs where ml_dtypes keeps a
    bfloat16 subnormal; training never meets values that small. And on CPUs without bf16
    instructions (ONEDNN_MAX_CPU_ISA=AVX2) oneDNN's conversion may turn -0.0 into +0.0: zeros
    are compared by value."""
    check_casts(tmp_path / "casts")


def check_casts(folder, backend: str = "cpu") -> None:
    """The casts above through the executor of `backend` (the GPU's converts subnormals
    exactly, which the bounds allow too)."""
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


def test_bfloat16_feeds_from_torch_over_dlpack(tmp_path):
    """A bfloat16 input takes a torch.bfloat16 tensor (DLPack); a numpy bfloat16 array cannot
    cross (numpy exports no bfloat16 over DLPack or the buffer protocol) and is refused, naming
    the feed, rather than misread (pass torch tensors, or feed float32 and cast in the graph)."""
    import ml_dtypes
    torch = pytest.importorskip("torch")

    from planner.graph.builder import GraphBuilder

    b = GraphBuilder("bf16_feed")
    x = b.input("x", (3, 5), "bfloat16")
    module = build_module(b.build(outputs=[b.op("Cast", [x], {"to": "float32"}, name="y")]),
                          tmp_path / "feed")
    t = torch.randn(3, 5).to(torch.bfloat16)
    got = module.Executor().forward({"x": t})["y"]
    assert np.array_equal(got, t.float().numpy())
    with pytest.raises(ValueError, match="feed 'x'"):
        module.Executor().forward({"x": np.zeros((3, 5), ml_dtypes.bfloat16)})
