"""The generated executor's fp16-mixed dynamic loss scaling, step by step against the reference
interpreter: the same overflow flags, the same scale and clean-step count bit for bit, an
overflowing step leaving every parameter and optimizer state bit-identical (updates in place,
as planned), and clean steps agreeing as fp16-mixed steps do. tests/codegen/test_loss_scale.py
runs it on the CPU executor, tests/cuda/test_cuda_mixed.py on the CUDA one.

Tolerance of clean steps, as tests/codegen/mixed_cases.py: both sides round the same float32
values to float16 (unit roundoff u = 2^-11), which differ only by float32 summation order; a
rounding that goes the other way moves an element by one ulp (2u of it). Adam's update is a
ratio m / sqrt(v) of such values; we hold each parameter after each step to 4u of the largest
update so far (the differences accumulate over the steps).
"""

from __future__ import annotations

import numpy as np

from planner.frontend.autodiff import FOUND_INF, LOSS_SCALE
from planner.graph.interpret import INIT_LOSS_SCALE, init_params, run
from tests.codegen.helpers import build_module
from tests.graph.loss_scale_cases import (
    GROWTH_INTERVAL,
    OVERFLOW_STEP,
    STEPS,
    feeds_for,
    loss_scaled_mlp,
    params,
)

U16 = 2.0 ** -11


def check_loss_scaling(folder, backend: str = "cpu") -> None:
    """The generated executor of `backend` steps through a forced overflow and the scale's
    growth as the reference (tests/cuda/test_cuda_mixed.py runs it on the GPU)."""
    g = loss_scaled_mlp("adam")
    module = build_module(g, folder, backend, layout="plan")
    ex = module.Executor()
    state = init_params(g, seed=1)
    ex.load_params(state)
    want = dict(state)
    largest = 0.0
    scales = []
    for step in range(STEPS):
        feeds = feeds_for(g, step)
        before = {k: np.asarray(v).copy() for k, v in ex.params().items()}
        found = float(np.asarray(ex.step(feeds, [FOUND_INF])[FOUND_INF]))
        got = {k: np.asarray(v) for k, v in ex.params().items()}
        values = run(g, feeds, want)
        want = {**want, **{t.updates: values[t.name] for t in g.tensors if t.updates}}
        assert found == float(values[FOUND_INF]) == float(step == OVERFLOW_STEP), step
        for name in (LOSS_SCALE, f"{LOSS_SCALE}/clean_steps", "optim/step"):
            assert got[name] == want[name], (step, name)
        scales.append(float(got[LOSS_SCALE]))
        if found:
            for name in got:
                if not name.startswith(LOSS_SCALE):
                    assert np.array_equal(got[name].view(np.uint32),
                                          before[name].view(np.uint32)), name
            continue
        for p in params(g):
            largest = max(largest, float(np.max(np.abs(want[p].astype(np.float64) - before[p]))))
            gap = float(np.max(np.abs(got[p].astype(np.float64) - want[p])))
            assert gap <= 4 * U16 * largest, (step, p, gap, largest)
    assert scales[OVERFLOW_STEP] == INIT_LOSS_SCALE / 2
    assert scales[OVERFLOW_STEP + GROWTH_INTERVAL] == INIT_LOSS_SCALE
    assert ex.params()["optim/step"] == STEPS - 1   # the skipped step is not counted
