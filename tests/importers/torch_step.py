"""One SGD step of a PyTorch module, and of its ONNX export imported into the planner: the
harness of test_torch_training.py (and of the executor check beside it).

The planner's step: import the export, attach a cross-entropy loss to its one output, build the
SGD training graph, and run it on the numpy reference (or an executor) from the export's own
weights. PyTorch's step: the same module in train() mode, F.cross_entropy, torch.optim.SGD; run
in float32 and in float64, whose difference is the float32 noise that bounds how far the
planner's float32 result may be from float64.

Dropout cannot share PyTorch's random stream, so PyTorch's step swaps each nn.Dropout for
PlannerDropout, which draws the planner's counter-based mask for the same node (the k-th
Dropout of the export has seed k, rules_const.py): the comparison then checks that the import
kept the ratio and the mask scaling forward and backward.
"""

from __future__ import annotations

import copy
import hashlib
import io
import warnings
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from planner.frontend.autodiff import make_training_graph
from planner.frontend.loss import attach_loss
from planner.graph import Graph, Optimizer, init_params
from planner.graph.interpret import train_step
from planner.importers import import_onnx
from planner.ops.dropout import dropout_mask, step_seed
from planner.step.for_cores import for_cores

LR = 0.1
EPS32 = float(np.finfo(np.float32).eps)


class PlannerDropout(nn.Module):
    """nn.Dropout with the planner's mask for seed `seed` at step 0."""

    def __init__(self, rate: float, seed: int) -> None:
        super().__init__()
        self.rate, self.seed = rate, seed

    def forward(self, x):
        keep = dropout_mask(step_seed(self.seed, 0), x.numel(), self.rate).reshape(x.shape)
        return x * torch.from_numpy(keep).to(x.dtype) / (1.0 - self.rate)


# Exports made in this test run, by what they are a function of (module structure and
# values, input, exporter, opset): the same seeded model is exported by the reference test,
# the executor test and others, and each export takes seconds.
_EXPORTS: dict[tuple, bytes] = {}


def export(model: nn.Module, x: torch.Tensor, dynamo: bool = False, opset: int = 17) -> bytes:
    """The training-mode ONNX export of `model` (legacy or dynamo exporter); made once per
    test run for equal inputs."""
    key = (repr(model), tensor_digest(model.state_dict().values()), tensor_digest([x]), dynamo,
           opset)
    if key not in _EXPORTS:
        _EXPORTS[key] = _export(model, x, dynamo, opset)
    return _EXPORTS[key]


def tensor_digest(tensors) -> tuple:
    """(shapes and dtypes, sha256 of the bytes) of tensors: equal values, equal digests."""
    h = hashlib.sha256()
    shapes = []
    for t in tensors:
        a = t.detach().cpu().contiguous().numpy()
        shapes.append((tuple(a.shape), str(a.dtype)))
        h.update(a.tobytes())
    return tuple(shapes), h.hexdigest()


def _export(model: nn.Module, x: torch.Tensor, dynamo: bool, opset: int) -> bytes:
    model = copy.deepcopy(model).train()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            program = torch.onnx.export(model, (x,), dynamo=True, opset_version=opset,
                                        verbose=False)
            return program.model_proto.SerializeToString()
        f = io.BytesIO()
        torch.onnx.export(model, (x,), f, dynamo=False, opset_version=opset,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
        return f.getvalue()


@dataclass(frozen=True)
class Step:
    loss: float
    state: dict[str, np.ndarray]  # params and buffers after the step, by ONNX/torch name


def torch_step(model: nn.Module, x: np.ndarray, labels: np.ndarray, dtype: torch.dtype,
               start: dict[str, np.ndarray]) -> Step:
    """PyTorch's step from `start` (the export's initializers, by name): a training-mode export
    traces the module in train() mode, so the exported running statistics already hold one
    update from the example input, and both sides must start from those."""
    model = copy.deepcopy(model).train()
    own = model.state_dict()
    model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in start.items()
                           if k in own}, strict=False)
    model = with_planner_dropout(model.to(dtype))
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    loss = nn.functional.cross_entropy(model(torch.from_numpy(x).to(dtype)),
                                       torch.from_numpy(labels))
    opt.zero_grad()
    loss.backward()
    opt.step()
    state = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    return Step(float(loss.detach()), state)


def sgd_run(model: nn.Module, batches, dtype: torch.dtype, lr: float) -> Step:
    """PyTorch's run of plain SGD on cross-entropy over `batches` ((x, labels) pairs) in
    `dtype`, on a copy of `model`: the last loss and the state_dict after it."""
    model = copy.deepcopy(model).to(dtype)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for x, y in batches:
        opt.zero_grad()
        value = nn.functional.cross_entropy(model(x.to(dtype)), y)
        value.backward()
        opt.step()
    return Step(float(value.detach()), {k: v.detach().numpy().copy()
                                        for k, v in model.state_dict().items()})


def with_planner_dropout(model: nn.Module) -> nn.Module:
    """`model` with each nn.Dropout replaced by PlannerDropout (the k-th: seed k), in place."""
    seeds = iter(range(1, 1 << 16))
    for name, m in list(model.named_modules()):
        if isinstance(m, nn.Dropout) and m.p > 0:
            parent = model.get_submodule(name.rpartition(".")[0]) if "." in name else model
            setattr(parent, name.rpartition(".")[2], PlannerDropout(m.p, next(seeds)))
    return model


def training_graph(onnx_bytes: bytes, cores: int | None = None
                   ) -> tuple[Graph, dict[str, np.ndarray]]:
    """The SGD training graph of an export (for a step on `cores` cores: the step graph's
    for_cores pass) and its starting state (the export's weights)."""
    imported = import_onnx(onnx_bytes)
    graph = for_cores(make_training_graph(attach_loss(imported.graph, "cross-entropy"),
                                          Optimizer(kind="sgd", lr=LR)), cores)
    return graph, {**init_params(graph), **imported.params()}


def feeds_of(graph: Graph, x: np.ndarray, labels: np.ndarray) -> dict[str, np.ndarray]:
    (image,) = (t.name for t in graph.by_role("input"))
    return {image: x, "labels": labels}


def planner_step(onnx_bytes: bytes, x: np.ndarray, labels: np.ndarray,
                 cores: int | None = None) -> tuple[Step, dict[str, np.ndarray]]:
    """The planner's step on the reference, and the state it started from."""
    graph, state = training_graph(onnx_bytes, cores)
    outputs, new = train_step(graph, feeds_of(graph, x, labels), state)
    return Step(float(outputs["loss"]), new), state


def mismatches(ours: Step, f32: Step, f64: Step, names: set[str] | None = None) -> list[str]:
    """What is off: the loss by more than 1e-4 relative to PyTorch's float32 loss, or a tensor
    by more than 10x PyTorch's own float32 error (|t32 - t64|) plus 16 float32 ulps of its
    scale. `names`: the tensors to compare (default: those both sides have)."""
    bad = []
    if abs(ours.loss - f32.loss) > 1e-4 * abs(f32.loss):
        bad.append(f"loss {ours.loss} vs torch {f32.loss}")
    for name in sorted(names if names is not None else set(ours.state) & set(f64.state)):
        want = f64.state[name].astype(np.float64)
        noise = np.max(np.abs(f32.state[name] - want), initial=0.0)
        err = np.max(np.abs(ours.state[name].astype(np.float64) - want), initial=0.0)
        scale = np.max(np.abs(want), initial=0.0)
        if err > 10 * noise + 16 * EPS32 * scale:
            bad.append(f"{name}: error {err:.3g}, torch float32 noise {noise:.3g}, "
                       f"scale {scale:.3g}")
    return bad
