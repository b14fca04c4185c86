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
from planner.graph.optimizer import Optimizer
from planner.zoo import build
from tests.codegen.helpers import build_module, start_state

U = 2.0 ** -8  # bfloat16's unit roundoff (8-bit significand)

MODELS = {
    "mlp": dict(batch=8, hidden=[32], in_features=24, classes=5),
    "lenet": dict(batch=4, image=12),
}


def mixed_graph(model: str):
    return make_training_graph(build(model, **MODELS[model]), Optimizer(kind="sgd", lr=0.1),
                               precision="bf16-mixed")


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


@pytest.mark.parametrize("model", sorted(MODELS))
def test_bf16_mixed_step_matches_emulated_reference(model, tmp_path_factory):
    graph = mixed_graph(model)
    assert sum(n.op == "Cast" for n in graph.nodes) > 0
    module = build_module(graph, tmp_path_factory.mktemp("bf16") / model, layout="plan")
    state, feeds = start_state(graph), random_feeds(graph, seed=2)
    ex = module.Executor()
    ex.load_params(state)
    loss = float(np.asarray(ex.step(feeds, ["loss"])["loss"]))
    got = {k: np.asarray(v) for k, v in ex.params().items()}
    outputs, want = train_step(graph, feeds, state)
    assert abs(loss - float(outputs["loss"])) <= 4 * U * abs(float(outputs["loss"]))
    errors = update_errors(graph, state, got, want)
    assert errors and max(errors.values()) <= 4 * U, errors
    # stats() names what oneDNN runs for each low-precision op (a bf16 kernel, or the float32
    # fallback's reorders around a float32 one)
    impls = {d["name"]: d.get("impl", "") for d in ex.stats()["ops"]
             if d["op"] in ("Conv2D", "MatMul")}
    assert impls and all(impls.values()), impls
    if os.environ.get("ONEDNN_MAX_CPU_ISA") == "AVX2":  # the fallback below: no bf16 kernels
        assert not any("bf16" in v or "amx" in v for v in impls.values()), impls


def test_float32_fallback_where_the_isa_has_no_bf16(tmp_path):
    """On a CPU without bf16 support (oneDNN limited to AVX2 here, as on an AVX2-only or older
    AMD machine), the same step still matches the emulated reference: the convolutions and
    matmuls compute in float32 between converting reorders (templates/cpu/runtime/kernels)."""
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2"}
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp",
         str(tmp_path / "t"), f"{Path(__file__)}::test_bf16_mixed_step_matches_emulated_reference",
         "-k", "lenet"], cwd=root, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "1 passed" in done.stdout
