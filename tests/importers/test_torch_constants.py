"""Importer constants carry their values: a module whose export holds constants (Hardswish's
0.5, GELU's sqrt(2), nn.MultiheadAttention's scale), started as `Executor(init=True)` does
(planner.graph.init_params) and then given the module's own state_dict (load_params(...,
partial=True)), computes what the module computes. Before, those constants were state tensors
that only the import's params() held, and this start left them at 0."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from planner.graph import init_params  # noqa: E402
from planner.graph.interpret import run  # noqa: E402
from planner.importers import import_onnx  # noqa: E402
from tests.importers.torch_step import export  # noqa: E402


class Constants(nn.Module):
    """Linear, Hardswish, GELU (erf), self-attention and a mean: every constant of issue 25."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.act = nn.Hardswish()
        self.gelu = nn.GELU()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        y = self.gelu(self.act(self.fc(x)))
        return self.attn(y, y, y, need_weights=False)[0].mean(1)


def test_constants_survive_init_and_a_partial_state_dict_load():
    torch.manual_seed(0)
    model = Constants().eval()
    x = np.random.default_rng(0).standard_normal((2, 5, 8)).astype(np.float32)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        imported = import_onnx(export(model.train(), torch.from_numpy(x)))
    assert not [w for w in record if "are state tensors" in str(w.message)]
    graph = imported.graph
    state = model.state_dict()
    # Every persistent tensor the import kept is one of the module's (no stray constants).
    persistent = {t.name for t in graph.by_role("param", "state")}
    assert persistent <= set(state), sorted(persistent - set(state))
    fills = {n.attrs["value"] for n in graph.nodes if n.op == "Fill"}
    assert 0.5 in fills and any(abs(v - np.sqrt(2)) < 1e-6 for v in fills)
    start = {**init_params(graph), **{k: v.numpy() for k, v in state.items()
                                      if k in persistent}}
    (out,) = graph.outputs
    ours = run(graph, {graph.by_role("input")[0].name: x}, start, keep="outputs")[out]
    with torch.no_grad():
        theirs = model.eval()(torch.from_numpy(x)).numpy()
    # float32 through four layers of width 8: a few hundred ulps of values of order 1.
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)


def test_dynamo_export_scalars_are_constants_and_unmapped_params_are_named():
    pytest.importorskip("onnxscript")  # the dynamo exporter's translator
    torch.manual_seed(0)
    model = Constants()
    x = np.random.default_rng(0).standard_normal((2, 5, 8)).astype(np.float32)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        try:
            onnx_bytes = export(model, torch.from_numpy(x), dynamo=True, opset=18)
        except Exception as e:  # the exporter's own failures are not the importer's
            pytest.skip(f"dynamo export failed: {type(e).__name__}")
        imported = import_onnx(onnx_bytes)
    graph, state = imported.graph, model.state_dict()
    params = {t.name for t in graph.by_role("param")}
    # GELU's sqrt(2), Hardswish's constants, the attention scale: carried, never trained.
    assert all(graph.tensor(p).shape not in ((), (1,)) for p in params)
    fills = [n.attrs["value"] for n in graph.nodes if n.op == "Fill"]
    assert any(abs(v - np.sqrt(2)) < 1e-6 for v in fills)
    unmapped = sorted(params - set(state))
    (message,) = [str(w.message) for w in record if "no parameter or buffer" in str(w.message)]
    assert all(repr(u) in message for u in unmapped[:5]) and "dynamo=False" in message
