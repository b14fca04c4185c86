"""Train an nn.Module through a planned, generated executor: `trainer(module, ...)`.

    t = trainer(model, (x,), loss=F.cross_entropy, labels=y, optimizer="adam", lr=1e-3)
    for x, y in data:
        loss = t.step(x, y)
    t.load_into(model)            # the module's parameters now are the executor's

The module and its loss are traced together by torch.export (as `loss(module(*inputs),
labels)`, in the module's own train()/eval() mode), imported (convert.py), made a training
graph for the optimizer, planned for `target`, rendered, built (cached by content) and loaded.
The executor starts from the module's own parameters and buffers. `params()` is keyed like
`module.state_dict()`; `num_batches_tracked` counts the steps taken, as PyTorch's does.
"""

from __future__ import annotations

import hashlib
import tempfile
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from planner.importers.torch.convert import TorchImport, convert
from planner.torch.export_watch import custom_gradients, export_failed, watching

PREFIX = "model."  # the wrapped module's attribute: its state_dict keys gain this prefix


def export(module: Any, inputs: Sequence[Any], loss: Callable | None, labels: Any) -> Any:
    """torch.export of `loss(module(*inputs), labels)` followed by the module's outputs (or
    of the module alone without a loss), in the module's current train()/eval() mode.
    TorchImportError, in one line, where torch.export fails or the trace goes through a
    torch.autograd.Function of the user's (planner/torch/export_watch.py)."""
    import torch

    class WithLoss(torch.nn.Module):
        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args: Any) -> Any:
            if loss is None:
                return self.model(*args)
            # The module's outputs after the loss: the step returns the loss (the first
            # output), evaluate() both (the evaluation graph keeps the training graph's).
            out = self.model(*args[:-1])
            return loss(out, args[-1]), out

    wrapped = WithLoss(module).train(module.training)
    if loss is not None and any(labels is x for x in inputs):
        labels = labels.clone()  # an autoencoder's target: export would merge the two inputs
    args = (*inputs, labels) if loss is not None else tuple(inputs)
    name = type(module).__name__
    with warnings.catch_warnings(), watching(wrapped, module, PREFIX) as watch:
        warnings.simplefilter("ignore")
        try:
            program = torch.export.export(wrapped, args)
        except Exception as e:  # torch's own failure, as one line saying where and what to do
            raise export_failed(e, watch, name) from None
    refusal = custom_gradients(watch, name)
    if refusal is not None:
        raise refusal
    return program


class Trainer:
    """A built training executor for one module (see `trainer`)."""

    def __init__(self, imported: TorchImport, graph: Any, executor: Any, module_keys: Sequence[str],
                 start: Mapping[str, Any], aliases: Mapping[str, str] | None = None,
                 plan: Any = None) -> None:
        self.imported = imported
        self.graph = graph
        self.plan = plan  # the Plan it runs (its summary: predicted step, what priced it)
        self.executor = executor
        self.steps = 0
        self._keys = list(module_keys)
        self._start = dict(start)  # what the executor does not hold: counters, unread buffers
        self._aliases = dict(aliases or {})  # a tied weight's second key -> the key exported
        feeds = [t for t in graph.tensors if t.role in ("input", "label")]
        by_name = {t.name: t for t in feeds}
        self._feeds = [by_name[n] for n in imported.inputs if n in by_name]

    def step(self, *inputs: Any) -> float:
        """One training step on the module's inputs followed by the labels (torch tensors or
        numpy arrays); returns the loss. With `accumulate=K`, one micro-batch: every K-th
        step updates the parameters."""
        if len(inputs) != len(self._feeds):
            raise ValueError(f"step takes {len(self._feeds)} arrays (the module's inputs, then "
                             f"the labels), got {len(inputs)}")
        feeds = {t.name: _numpy(v, t.dtype) for t, v in zip(self._feeds, inputs, strict=True)}
        out = self.executor.step(feeds)
        self.steps += 1
        return float(np.asarray(out[self.graph.outputs[0]]))

    def evaluate(self, *inputs: Any) -> tuple[float, list[np.ndarray]]:
        """The module in eval() mode on the parameters as trained, from the same build
        (Executor.evaluate: BatchNorm on its running statistics, Dropout the identity, nothing
        updated): the module's inputs followed by the labels, as `step`; returns the loss
        and the module's outputs (numpy arrays, in the module's order)."""
        if len(inputs) != len(self._feeds):
            raise ValueError(f"evaluate takes {len(self._feeds)} arrays (the module's inputs, "
                             f"then the labels), got {len(inputs)}")
        feeds = {t.name: _numpy(v, t.dtype) for t, v in zip(self._feeds, inputs, strict=True)}
        out = self.executor.evaluate(feeds)
        loss = self.graph.outputs[0]
        return float(np.asarray(out[loss])), [out[o] for o in self.graph.outputs[1:] if o in out]

    def params(self, copy: bool = True) -> dict[str, np.ndarray]:
        """Parameters and buffers keyed like `module.state_dict()`: copies, or (copy=False)
        live views of the executor's memory, which the next step updates."""
        held = self.executor.params(copy=copy)
        out: dict[str, np.ndarray] = {}
        for key in self._keys:
            name = PREFIX + self._aliases.get(key, key)
            if name in held:
                out[key] = held[name]
            elif name in self.imported.counters:
                out[key] = self._start[key] + self.steps * self.imported.counters[name]
            elif key in self._start:  # a buffer no op reads (eval-mode num_batches_tracked)
                out[key] = self._start[key].copy()
        return out

    def load_into(self, module: Any, copy: bool = False) -> None:
        """Write `params()` into `module`'s parameters and buffers. Without `copy`, float
        tensors become views of the executor's memory (no copy: the module then follows
        every later step, and keeps the executor alive); counters are copied."""
        import torch

        own = dict(module.named_parameters()) | dict(module.named_buffers())
        for key, value in self.params(copy=copy).items():
            target = own.get(key)
            if target is None:
                continue
            array = np.asarray(value)
            if (not copy and array.dtype == np.float32 and array.flags.writeable
                    and tuple(array.shape) == tuple(target.shape)):
                target.data = torch.from_numpy(array)
            else:
                with torch.no_grad():
                    target.copy_(torch.from_numpy(np.array(array)))


def _numpy(v: Any, dtype: str) -> np.ndarray:
    if hasattr(v, "detach"):
        v = v.detach().cpu().numpy()
    return np.ascontiguousarray(np.asarray(v), dtype=dtype)


def trainer(module: Any, example_inputs: Sequence[Any], loss: Callable | None,
            labels: Any = None, *,
            optimizer: str = "sgd", lr: float | None = None, target: str = "host",
            out_dir: str | Path | None = None, accumulate: int = 1,
            costs: Any = None, adaptive: bool = False, **optimizer_settings: Any) -> Trainer:
    """Plan, build and load a training executor for `module`.

    example_inputs: the module's inputs for one step (their shapes are the executor's);
    loss: PyTorch's own loss function, traced with the module, e.g. `F.cross_entropy` (classes
    on axis 1, as PyTorch defines it) or `F.mse_loss`, called as `loss(module(*inputs), labels)`;
    labels: an example of the loss's target. The loss may be any float scalar computed from
    the module's outputs (`F.mse_loss(recon, x) + beta * kl` of a VAE returning (recon, mu,
    logvar)); with loss=None (and no labels) the module returns its own loss, first.
    optimizer: sgd | momentum | adam with `lr` and
    further settings (momentum, weight_decay, beta1, beta2, epsilon, nesterov) as
    planner.graph.Optimizer; target: `host` or a CPU target preset; out_dir: where the
    executor's sources go (default: a fresh temporary folder); accumulate: micro-batches per
    optimizer step (the example inputs are one micro-batch; each `step` takes one and every
    `accumulate`-th updates the parameters with the mean of their gradients, as PyTorch's
    `(loss / K).backward()` K times then `optimizer.step()`); costs: what the plan is priced
    with: None (the default: "measured" on the host, planner.costs.host_costs.default_costs),
    "measured" (times measured on this machine and kept per host: only the kernels no earlier
    plan measured are run, with a progress line on stderr), "analytical" (the cost model), a
    cost table or the path of one (`planner profile` on this target), or "in-step": every op
    measured inside this step first (a few builds and steps, codegen.profiling.
    profile_in_step), the table kept as costs.json in out_dir; adaptive: let the executor
    switch to the plan's variants for fewer cores when the machine is busy (False, the
    default: the main schedule always, so two runs, or a run and its resumption, compute the
    same bits; docs/training.md).

    Raises TorchImportError (an op the planner lacks, in one line naming the node), UserError
    or ValueError for bad settings.
    """
    from codegen.build import build
    from codegen.load import load
    from codegen.render import render
    from planner.frontend.options import GraphOptions
    from planner.frontend.prepare import prepare
    from planner.graph import Optimizer, init_params
    from planner.pipeline import plan
    from planner.target.presets import load_target

    settings = Optimizer.parse(optimizer, lr=lr, **optimizer_settings)
    imported = convert(export(module, example_inputs, loss, labels),
                       name=type(module).__name__, module_root=PREFIX.rstrip("."))
    chosen = load_target(target)
    _check_runs_here(chosen)
    prepared = prepare(imported.graph, GraphOptions(optimizer=settings, accumulate=accumulate))
    folder = Path(out_dir) if out_dir is not None else Path(tempfile.mkdtemp(prefix="planner-"))
    examples = (*example_inputs, labels) if loss is not None else tuple(example_inputs)
    by_name = {t.name: t for t in prepared.tensors}
    table = _cost_table(costs, prepared, chosen, folder, {  # an in-step profile steps on them
        name: _numpy(v, by_name[name].dtype)
        for name, v in zip(imported.inputs, examples, strict=False) if name in by_name})
    with warnings.catch_warnings():  # an op the table lacks is priced analytically
        warnings.simplefilter("ignore")
        planned = plan(prepared, chosen, table)
    graph = planned.graph  # as the step's cores rewrote it: the graph the executor runs
    name = "torch_" + hashlib.sha256(planned.to_json().encode()).hexdigest()[:16]
    module_py = load(build(render(planned, folder / name)).dir)
    executor = module_py.Executor(adaptive=adaptive)
    state = module.state_dict()
    executor.load_params({**init_params(graph), **imported.params()})
    held = {t.name for t in graph.by_role("param", "state")}
    # Tied weights (one tensor under two keys) are one placeholder in the export.
    def storage(v: Any) -> tuple:
        return v.data_ptr(), tuple(v.shape), tuple(v.stride()), v.dtype

    first: dict[tuple, str] = {}
    for k, v in state.items():
        if PREFIX + k in held:
            first.setdefault(storage(v), k)
    aliases = {k: first[storage(v)] for k, v in state.items()
               if PREFIX + k not in held and storage(v) in first}
    start = {k: v.detach().cpu().numpy().copy() for k, v in state.items()
             if PREFIX + k not in held and k not in aliases}
    return Trainer(imported, graph, executor, list(state), start, aliases, planned)


def _check_runs_here(target: Any) -> None:
    """UserError, before anything is planned or compiled, for a target whose executor cannot
    run in this process: a GPU target on a host where nvidia-smi lists no GPU."""
    from planner.errors import UserError
    from planner.target.backends import traits

    if traits(target).host_cores:
        return
    from planner.target.detect import detect_gpus

    gpus, notes = detect_gpus(1)
    if not gpus:
        raise UserError(f"trainer: target {target.name!r} runs on a GPU, and this host has "
                        f"none to run it ({'; '.join(notes) or 'nvidia-smi lists none'}); "
                        f"use target='host' or a CPU target preset")


def _cost_table(costs: Any, graph: Any, target: Any, folder: Path,
                examples: Mapping[str, np.ndarray]) -> Any:
    """The cost table `trainer`'s plan is priced with (its `costs` argument; "in-step" steps
    on the example batch `examples`); UserError for a table of another target or a value that
    names none."""
    from planner.costs import CostTable, load_table
    from planner.errors import UserError

    if costs is None:
        from planner.costs.host_costs import default_costs

        costs = default_costs(target)
    if isinstance(costs, CostTable):
        table = costs
    elif isinstance(costs, str) and costs == "analytical":
        table = None
    elif isinstance(costs, str) and costs == "measured":
        import sys

        from codegen.profiling import host_measured

        table = host_measured(graph, target, progress=sys.stderr, feeds=examples)
    elif isinstance(costs, str) and costs == "in-step":
        from codegen.profiling import profile_in_step
        from planner.io.write import atomic_write

        table = profile_in_step(graph, target, folder / "profile", feeds=examples)
        atomic_write(folder / "costs.json", table.to_json())
    elif isinstance(costs, (str, Path)):
        table = load_table(costs)
    else:
        raise UserError(f"costs: 'measured', 'analytical', 'in-step', a cost table or its "
                        f"path, not {type(costs).__name__}")
    if table is not None and table.target != target.name:
        raise UserError(f"costs: a cost table of target {table.target!r}, not of {target.name!r}")
    return table
