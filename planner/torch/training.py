"""Train an nn.Module through a planned, generated executor: `trainer(module, ...)`.

    t = trainer(model, (x,), loss=F.cross_entropy, labels=y, optimizer="adam", lr=1e-3)
    for x, y in data:
        loss = t.step(x, y)
    t.load_into(model)            # the module's parameters now are the executor's

The module and its loss are traced together by torch.export (as `loss(module(*inputs),
labels)`, each submodule in its own train()/eval() mode, as the user left it), imported
(convert.py), made a training graph for the optimizer, planned for `target`, rendered, built
(cached by content) and loaded. The executor starts from the module's own parameters and
buffers. `params()` is keyed like `module.state_dict()`; `num_batches_tracked` counts the
steps taken, as PyTorch's does.

What PyTorch's training means, the step means (docs/pytorch.md, "What trains"): parameters
with requires_grad=False are constants of the step (read, written back by `load_into`, never
trained), values computed under no_grad / inference_mode / set_grad_enabled(False) carry no
gradient, buffers the forward changes (BatchNorm's statistics, once per call; a reassigned or
in-place updated buffer) change every step. `trainer()` changes nothing of the module: not its
modes, not requires_grad, not its parameters or buffers (until `load_into`).
A batch of other shapes (a DataLoader's last, smaller batch; another sequence length) gets a
plan and executor of its own on first use, the run's state handed between them
(planner/torch/shapes.py). Built packages are kept per host by plan content
($PLANNER_CACHE/trainers), as the kernel library is.
"""

from __future__ import annotations

import math
import operator
import os
import sys
import tempfile
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from planner.collection import collector_off
from planner.importers.torch.context import TorchImportError
from planner.importers.torch.convert import TorchImport, convert
from planner.importers.torch.quiet_log import quiet_torch_logs
from planner.torch.export_watch import (
    checkpoint_writes,
    custom_gradients,
    export_failed,
    frozen_calls,
    gradients_taken,
    hooks_registered,
    watching,
)
from planner.torch.hooks import backward_hooks
from planner.torch.norm_modes import cumulative_norms
from planner.torch.shapes import Built, Shapes, key_of, own_values, spell

PREFIX = "model."  # the wrapped module's attribute: its state_dict keys gain this prefix


def export(module: Any, inputs: Sequence[Any], loss: Callable | None, labels: Any,
           dynamic: bool = False) -> Any:
    """torch.export of `loss(module(*inputs), labels)` followed by the module's outputs (or
    of the module alone without a loss), in the module's current train()/eval() mode; with
    `dynamic`, every input dimension left to torch to keep symbolic or specialise
    (Dim.AUTO: planner/importers/torch/specialize.py).
    TorchImportError, in one line, where torch.export fails or the trace goes through a
    torch.autograd.Function of the user's (planner/torch/export_watch.py) or a backward hook
    the step could not apply (planner/torch/hooks.py)."""
    import torch

    hooked = (backward_hooks(module, type(module).__name__)
              or cumulative_norms(module, type(module).__name__))
    if hooked is not None:  # before the trace: the trace would drop it, silently
        raise TorchImportError(hooked)

    class WithLoss(torch.nn.Module):
        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args: Any) -> Any:
            before = [(m, dict(m._buffers)) for m in self.model.modules()], \
                python_numbers(self.model)
            if loss is None:
                out = self.model(*args)
            else:
                # The module's outputs after the loss: the step returns the loss (the first
                # output), evaluate() both (the evaluation graph keeps the training graph's).
                out = self.model(*args[:-1])
                out = loss(out, args[-1]), out
            refusals.extend(reassigned(before[0]) + rewritten(before[1]))
            return out

    refusals: list[str] = []  # buffers reassigned to another shape, Python numbers written
    wrapped = WithLoss(module)
    # The wrapper's own flag only: .train() would set every submodule's (an eval() teacher).
    wrapped.training = module.training
    args = separate((*inputs, labels) if loss is not None else tuple(inputs))
    name = type(module).__name__
    with warnings.catch_warnings(), watching(wrapped, module, PREFIX) as watch, \
            quiet_torch_logs():  # the failure is said below, in one line
        warnings.simplefilter("ignore")
        try:
            dims = tuple({d: torch.export.Dim.AUTO for d in range(a.dim())}
                         if isinstance(a, torch.Tensor) else None for a in args)
            program = torch.export.export(wrapped, args,
                                          dynamic_shapes=(dims,) if dynamic else None)
        except Exception as e:  # torch's own failure, as one line saying where and what to do
            raise (gradients_taken(watch, name) or hooks_registered(watch, name)
                   or export_failed(e, watch, name)) from None
    refusal = (gradients_taken(watch, name) or hooks_registered(watch, name)
               or custom_gradients(watch, name) or checkpoint_writes(watch, name))
    if refusal is not None:
        raise refusal
    if refusals:
        raise TorchImportError(f"{name}: {refusals[0]}")
    for line in frozen_calls(watch, name):
        warnings.warn(line, UserWarning, stacklevel=3)
    return program


def python_numbers(model: Any) -> list[tuple[str, Any, dict[str, Any], Any, Any]]:
    """(path, module, its Python number attributes (int, float, bool), a getter of their
    values from the module's __dict__, their values so got) of every submodule: what
    `rewritten` and `changed_numbers` compare against (the getter compares a module's values
    at once: 1200 modules in ~0.3 ms a step)."""
    out = []
    for path, m in model.named_modules():
        before = {k: v for k, v in vars(m).items()
                  if isinstance(v, int | float) and not k.startswith("__")}
        if before:
            get = operator.itemgetter(*before)
            out.append((path, m, before, get, get(before)))
    return out


def changed_numbers(numbers: Sequence[tuple[str, Any, dict[str, Any], Any, Any]],
                    modes: bool) -> str:
    """The first Python number of the module set since the trace (`model.temperature = 0.5`
    between steps, a DANN lambda's schedule, `model.bn.eval()` to freeze BatchNorm), said in
    one line, or "": the step computes with the traced value, where PyTorch's reads the new
    one. `modes`: train()/eval() flags count too (not for evaluate, eval() by definition)."""
    for path, module, before, get, values in numbers:
        try:  # the common case: nothing changed
            if get(vars(module)) == values:
                continue
        except KeyError:  # an attribute deleted: looked at one by one below
            pass
        for name, old in before.items():
            new = vars(module).get(name, old)
            if new == old or (name == "training" and not modes):
                continue
            where = f"{path}.{name}" if path else name
            if name == "training":
                return (f"{where!r} ({type(module).__name__}'s train()/eval() mode) is {new!r}, "
                        f"not the {old!r} the step was traced in: make a trainer of the module "
                        f"in the mode wanted (t.evaluate runs eval())")
            return (f"{where!r} of {type(module).__name__} is {new!r}, not the {old!r} the "
                    f"step was traced with (torch.export froze the value the forward reads): "
                    f"pass it to the module as an input tensor, or make a new trainer")
    return ""


def rewritten(numbers: Sequence[tuple[str, Any, dict[str, Any], Any, Any]]) -> list[str]:
    """Python numbers the forward wrote (`self.calls += 1` read into a temperature schedule):
    torch.export runs the forward once, so every step would compute with the value it read at
    trace time, where PyTorch's reads the new one each step. Each is put back (the trainer
    leaves the module as it found it) and refused, naming the module and attribute."""
    refusals = []
    for path, module, before, _, _ in numbers:
        for name, old in before.items():
            new = vars(module).get(name, old)
            if not isinstance(new, int | float) or new == old:  # a SymInt: no guard made
                continue
            setattr(module, name, old)
            where = f"{path}.{name}" if path else name
            refusals.append(f"forward writes the Python attribute {where!r} of "
                            f"{type(module).__name__} ({old!r} -> {new!r}): torch.export runs "
                            f"the forward once, so every step would read its traced value; keep "
                            f"it in a buffer updated in place (self.{name}.add_(1)) and compute "
                            f"from it with torch ops, or use torch.compile(model, "
                            f"backend='planner'), which traces it again as it changes")
    return refusals


def reassigned(buffers: Sequence[tuple[Any, dict[str, Any]]]) -> list[str]:
    """Buffers the forward reassigned (`self.center = self.center * m + c * (1 - m)`, DINO's
    centre), which torch.export would drop: each written into the buffer it replaced, after
    everything the step computes, so torch.export records the buffer's new value as it records
    `self.buf.copy_(...)`. `buffers`: (module, its buffers before the forward) of every module.
    Returns the refusals of buffers reassigned to another shape or dtype (a state the step
    could not keep in the buffer's bytes)."""
    import torch

    refusals = []
    for module, before in buffers:
        for name, old in before.items():
            new = module._buffers.get(name)
            if old is None or new is None or new is old:
                continue
            module._buffers[name] = old
            if (new.shape, new.dtype) != (old.shape, old.dtype):
                refusals.append(f"buffer {name!r} of {type(module).__name__}: reassigned in "
                                f"forward to {new.dtype} {list(new.shape)}, not its own "
                                f"{old.dtype} {list(old.shape)}; keep its shape and dtype")
                continue
            with torch.no_grad():
                old.copy_(new)
    return refusals


def separate(args: Sequence[Any]) -> tuple[Any, ...]:
    """The example tensors, each a tensor of its own: torch.export makes one input of a tensor
    passed twice (`(x, h0, h0)`, an autoencoder's target), where each step feeds two."""
    out: list[Any] = []
    for a in args:
        out.append(a.clone() if hasattr(a, "clone") and any(a is b for b in out) else a)
    return tuple(out)


class Trainer:
    """A built training executor for one module (see `trainer`), and one per further input
    shape the run brings (planner/torch/shapes.py)."""

    def __init__(self, imported: TorchImport, graph: Any, executor: Any, module_keys: Sequence[str],
                 start: Mapping[str, Any], aliases: Mapping[str, str] | None = None,
                 plan: Any = None, shapes: Shapes | None = None,
                 optimizer: Any = None, ranks: int = 1, module: Any = None) -> None:
        self.imported = imported
        # The module's Python numbers as traced (torch.export froze what the forward read)
        self._numbers = python_numbers(module) if module is not None else []
        self.graph = graph
        self.plan = plan  # the Plan it runs (its summary: predicted step, what priced it)
        self.executor = executor  # the first shapes' executor: it holds the run between calls
        self.steps = 0
        self._keys = list(module_keys)
        self._start = dict(start)  # what the executor does not hold: counters, unread buffers
        self._aliases = dict(aliases or {})  # a tied weight's second key -> the key exported
        feeds = [t for t in graph.tensors if t.role in ("input", "label")]
        by_name = {t.name: t for t in feeds}
        self._feeds = [by_name[n] for n in imported.inputs if n in by_name]
        self.shapes = shapes
        self.ranks = ranks  # data-parallel ranks under torchrun (1 without)
        # A torch.optim instance the trainer was given: its groups' lr and weight_decay (a
        # scheduler's; with a cycled momentum that too) are read before each step; the values
        # last written, per group.
        self.optimizer = optimizer
        self._sharded = any(n.op == "AllGather" for n in graph.nodes)
        self._cycle = any(n.attrs.get("momentum_input") for n in graph.nodes)
        self._written: list[dict[str, float]] = []
        self._stepped: Built | None = None  # the shapes the last step ran on (`trace`)
        # The module's tensors made views of the executor (load_into, params(copy=False)):
        # a measured plan is then not swapped in (_refine).
        self._viewed = self._viewed_told = self._float32_told = False
        if optimizer is not None:
            from planner.torch.optimizers import compiled

            self._compiled = compiled(optimizer, self._cycle)

    def _arrays(self, inputs: Sequence[Any], what: str) -> list[np.ndarray]:
        changed = changed_numbers(self._numbers, modes=what != "evaluate")
        if changed:
            raise ValueError(f"trainer: {what}: {changed}")
        if len(inputs) != len(self._feeds):
            raise ValueError(f"{what} takes {len(self._feeds)} arrays (the module's inputs, "
                             f"then the labels), got {len(inputs)}")
        return [_numpy(v, t.dtype, t.name) for t, v in zip(self._feeds, inputs, strict=True)]

    def _run(self, arrays: list[np.ndarray], call: Callable[[Any, dict], Any],
             what: str) -> tuple[Any, TorchImport, Any]:
        """`call(executor, feeds)` on the executor for these arrays' shapes (a new shape is
        planned and built first); (its result, the shape's import and graph). Data parallel:
        every rank's `what` (step, evaluate) must be of the same shapes, checked first on every
        rank (planner/torch/settings.py, same_shapes)."""
        if self.ranks > 1:
            from planner.torch.settings import same_shapes

            same_shapes(key_of(arrays), what)
        if self.shapes is None:  # a Trainer made by hand around one executor
            feeds = {t.name: a for t, a in zip(self._feeds, arrays, strict=True)}
            return call(self.executor, feeds), self.imported, self.graph
        with collector_off():  # a new shape is planned here (planner/collection.py)
            self._refine()
            built = self.shapes.get(arrays)
        feeds = {t.name: a for t, a in zip(built.feeds, arrays, strict=True)}
        return self.shapes.run(built, lambda ex: call(ex, feeds)), built.imported, built.graph

    def step(self, *inputs: Any, outputs: bool = False) -> Any:
        """One training step on the module's inputs followed by the labels (torch tensors or
        numpy arrays); returns the loss, or with `outputs=True` (loss, [the module's outputs
        as numpy arrays, flattened in its order]): a recurrent module's new hidden state for
        truncated BPTT, computed by this step's forward, before its update. With
        `accumulate=K`, one micro-batch: every K-th step updates the parameters. A batch of
        other shapes than the example's (a smaller last batch, another sequence length) runs
        on a plan of its own, made on first use: its loss is the mean over the rows it has,
        as PyTorch's."""
        arrays = self._arrays(inputs, "step")
        if self.optimizer is not None:
            self._read_groups()
        out, imported, graph = self._run(arrays, lambda ex, f: ex.step(f), "step")
        self.steps += 1
        if self.shapes is not None:  # what `trace` writes: evaluate() runs no step
            self._stepped = self.shapes.last
        if self.optimizer is not None:
            # This step was the optimizer's: a scheduler stepped next is in the right order
            # (torch's lr_scheduler warns otherwise, reading this flag of its wrapper).
            self.optimizer._opt_called = True
        value = float(np.asarray(out[graph.outputs[0]]))
        if not outputs:
            return value
        # Copies: the executor's next step writes over its output bytes.
        return value, given_out(imported, out)

    def _refine(self) -> None:
        """Between steps: the plan made again from this host's measurements once the
        background has taken them (Shapes.refined), said in one line. Not while the module's
        tensors are views of this executor (load_into / params(copy=False)): they would stop
        following the run."""
        old = self.shapes.primary
        if old.provisional is None:
            self.shapes.refined()  # shapes planned apart, while their measurements come in
            return
        if self._viewed:
            if not self._viewed_told:
                self._viewed_told = True
                print("trainer: this host's measurements are taken in the background; the "
                      "plan made from them is not swapped in, since the module's tensors are "
                      "views of this executor (load_into / params(copy=False)); the next run "
                      "plans from them", file=sys.stderr, flush=True)
            return
        new = self.shapes.refined()
        if new is None:
            return
        self.executor, self.plan, self.graph = new.executor, new.plan, new.graph
        self._written = []  # the groups' lr and weight_decay written again
        print(f"trainer: step {self.steps}: this host's measurements are in; planned again "
              f"from them and swapped in (predicted step "
              f"{old.plan.summary.step_seconds * 1e3:.1f} ms -> "
              f"{new.plan.summary.step_seconds * 1e3:.1f} ms; the run's state carried over)",
              file=sys.stderr, flush=True)

    def _read_groups(self) -> None:
        """The torch optimizer's groups' lr and weight_decay (and a cycled momentum or
        beta1) into the executor, where they changed (a scheduler's step, or the user's write
        to param_groups)."""
        from planner.torch.optimizers import group_hyperparameters

        now = group_hyperparameters(self.optimizer, self._compiled, self._cycle)
        for k, values in enumerate(now):
            if k >= len(self._written) or self._written[k] != values:
                self.executor.set_hyperparameters(values, group=k)
                self._say_float32_scalars(k, values)
        self._written = now

    def _say_float32_scalars(self, group: int, values: dict[str, float]) -> None:
        """Once a run: a float64 model's lr or weight decay that float32 does not hold, said
        (the step reads them as float32 scalars: docs/executor.md, "dtypes")."""
        if self._float32_told or not any(
                t.dtype == "float64" and t.role == "param" for t in self.graph.tensors):
            return
        for key, value in values.items():
            held = float(np.float32(value))
            if held != value:
                self._float32_told = True
                print(f"trainer: float64 parameters: param_groups[{group}] {key} {value!r} "
                      f"enters the update as the float32 {held!r} (the step's scalars are "
                      f"float32; a value float32 holds, such as a power of two, gives torch's "
                      f"float64 steps)", file=sys.stderr, flush=True)
                return

    def evaluate(self, *inputs: Any) -> tuple[float, list[np.ndarray]]:
        """The module in eval() mode on the parameters as trained, from the same build
        (Executor.evaluate: BatchNorm on its running statistics, Dropout the identity, nothing
        updated): the module's inputs followed by the labels, as `step` (of any batch size
        `step` takes); returns the loss and the module's outputs (numpy arrays, in the
        module's order)."""
        out, imported, graph = self._run(self._arrays(inputs, "evaluate"),
                                         lambda ex, f: ex.evaluate(f), "evaluate")
        loss = graph.outputs[0]
        return float(np.asarray(out[loss])), given_out(imported, out)

    def trace(self, path: str | Path, with_prediction: bool = False) -> Path:
        """Write the last step this trainer ran (of the shapes it ran on, whatever evaluate()
        ran since) as Chrome trace JSON at `path` (Perfetto opens it; the tracks of `planner
        show PLAN --trace`), with the plan's prediction beside it when `with_prediction`;
        returns the path."""
        if self.shapes is None:
            raise ValueError("trace: this Trainer was made around an executor, not by "
                             "trainer(); call the package's trace(executor, path)")
        built = self._stepped
        if built is None:
            raise ValueError("trace: no step has run yet; call step() first")
        built.package.trace(built.executor, str(path), with_prediction=with_prediction)
        return Path(path)

    def explain(self, name: str | None = None, as_dict: bool = False) -> Any:
        """Why the plan decided what it did (`planner explain`): for op or tensor `name`, or
        every recompute and offload decision; the text (or, `as_dict`, the record). Re-plans
        the first shapes' graph with the target and the cost table the plan was priced with."""
        from planner.pipeline.explain import explain, format_explain, rederive

        if self.shapes is None:
            raise ValueError("explain: this Trainer was made around an executor, not by "
                             "trainer(); run `planner explain` on its plan")
        built = self.shapes.primary
        out = explain(rederive(built.plan, built.target, built.table), name)
        return out if as_dict else format_explain(out)

    def params(self, copy: bool = True) -> dict[str, np.ndarray]:
        """Parameters and buffers keyed like `module.state_dict()`: copies, or (copy=False)
        live views of the executor's memory, which the next step updates. Of a plan that
        shards the parameters (shard_parameters), copies of the whole ones, gathered from
        every rank: each rank calls it together, as `step`."""
        self._viewed = self._viewed or not copy
        if self._sharded:  # ZeRO-3: each rank holds shards; every rank gathers them together
            held = self.executor.state_dict()["model"]
        else:
            held = self.executor.params(copy=copy)
        out: dict[str, np.ndarray] = {}
        for key in self._keys:
            name = PREFIX + self._aliases.get(key, key)
            if name in held:
                out[key] = held[name]
            elif name in self.imported.counters:
                start = self._start[key]  # (an array, as every value: a 0-d one stays one)
                out[key] = np.array(start + self.steps * self.imported.counters[name],
                                    dtype=start.dtype)
            elif key in self._start:  # a buffer no op reads (eval-mode num_batches_tracked)
                out[key] = self._start[key].copy()
        return out

    def state_dict(self) -> dict[str, Any]:
        """The run's checkpoint: the executor's state_dict (model, optimizer, planner:
        docs/training.md) and `trainer`, the steps taken, which the counters the executor does
        not hold (BatchNorm's num_batches_tracked) count from. Save the torch.optim instance's
        and its scheduler's state_dict beside it, as in PyTorch."""
        return {**self.executor.state_dict(), "trainer": {"steps": self.steps}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from `state_dict()`: the executor's state (checked before anything is
        written) and the steps taken. A torch.optim instance's groups are read again before the
        next step (load the optimizer's and the scheduler's own state_dict into them, as in
        PyTorch); the run then equals the uninterrupted one bit for bit."""
        if "trainer" not in state:
            raise ValueError("load_state_dict: no 'trainer' entry (the steps taken); give it "
                             "a Trainer.state_dict(), or an executor's state_dict to "
                             "Trainer.executor.load_state_dict")
        steps = state["trainer"].get("steps")
        if isinstance(steps, bool) or not isinstance(steps, int) or not 0 <= steps < 2**63:
            raise ValueError(f"load_state_dict: trainer steps must be an int in [0, 2**63), got "
                             f"{steps!r}")
        self.executor.load_state_dict({k: v for k, v in state.items() if k != "trainer"})
        self.steps = steps
        self._written = []  # the executor now holds the checkpoint's lr: the groups' next

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


def _numpy(v: Any, dtype: str, name: str = "") -> np.ndarray:
    """`v` as a C-contiguous array of the feed's dtype (a 0-d array stays 0-d). A cast to an
    integer or boolean feed that changes a value (a fractional label, one past int32) is
    refused: PyTorch refuses the dtype, and the cast would train on other labels."""
    if hasattr(v, "detach"):
        v = v.detach().cpu().numpy()
    given = np.asarray(v)
    out = np.asarray(given, dtype=dtype, order="C")
    if out.dtype.kind in "iub" and given.dtype != out.dtype and given.dtype.kind in "iubf":
        with np.errstate(invalid="ignore"):
            changed = out.astype(given.dtype) != given
        if changed.any():
            bad = given[changed].reshape(-1)[0].item()
            raise ValueError(f"feed {name!r} holds {bad!r} ({given.dtype}), which {dtype} "
                             f"cannot hold; the trainer's feed is {dtype}, as traced")
    return out


@collector_off()  # tracing, importing, planning, building: planner/collection.py
def trainer(module: Any, example_inputs: Sequence[Any], loss: Callable | None,
            labels: Any = None, *,
            optimizer: Any = "sgd", lr: float | None = None, target: str = "host",
            out_dir: str | Path | None = None, accumulate: int = 1,
            costs: Any = None, adaptive: bool = True, shapes: Sequence[Any] = (),
            shape_cache: int | None = None, data_parallel: bool | int = False,
            **settings: Any) -> Trainer:
    """Plan, build and load a training executor for `module`.

    example_inputs: the module's inputs for one step (their shapes are the executor's);
    loss: PyTorch's own loss function, traced with the module, e.g. `F.cross_entropy` (classes
    on axis 1, as PyTorch defines it) or `F.mse_loss`, called as `loss(module(*inputs), labels)`;
    labels: an example of the loss's target. The loss may be any float scalar computed from
    the module's outputs (`F.mse_loss(recon, x) + beta * kl` of a VAE returning (recon, mu,
    logvar)); with loss=None (and no labels) the module returns its own loss, first.
    optimizer: a torch.optim.SGD, Adam or AdamW built on the module's parameters (its param
    groups and every hyperparameter read; a scheduler on it drives the step's lr, read before
    each step: planner/torch/optimizers.py), or sgd | momentum | adam | adamw with `lr` and
    torch.optim's keyword names (momentum, dampening, nesterov, betas, eps, weight_decay,
    amsgrad, maximize; `sgd` with momentum > 0 is momentum SGD) and the planner's
    clip_grad_norm, groups and schedule (or lr_schedule); target: `host` or a CPU target
    preset; out_dir: where the executors' sources go (default: the cache folder,
    $PLANNER_CACHE or ~/.cache/planner, under packages/, one folder per plan by its content: a
    later run of the same plan, in any process, compiles nothing; the cache is bounded by
    $PLANNER_CACHE_MAX_BYTES, codegen/cached.py); accumulate: micro-batches per
    optimizer step (the example inputs are one micro-batch; each `step` takes one and every
    `accumulate`-th updates the parameters with the mean of their gradients, as PyTorch's
    `(loss / K).backward()` K times then `optimizer.step()`); costs: what the plan is priced
    with: None (the default: "background" on the host), "background" (the times this host
    kept and the model now; the rest measured by a child at low priority, the plan made from
    them swapped in between steps: codegen/measure_later.py), "measured" (measured first,
    kept per host: only kernels no plan measured run), "analytical" (the cost model), a
    cost table or the path of one (`planner profile` on this target), or "in-step": every op
    measured inside this step first (a few builds and steps, codegen.profiling.
    profile_in_step), the table kept as costs.json in out_dir (without one, the profile's
    builds go in a temporary folder removed after); adaptive: let the executor
    switch to the plan's variants for fewer cores when the machine is busy (True, the
    default: every variant computes the main schedule's bits, so two runs, or a run and its
    resumption, compute the same bits whatever the load; False: the main schedule always;
    docs/training.md).
    shapes: further batches to plan now rather than on first use, each a batch size (the
    example inputs' first axis cut or repeated to it) or a tuple of example arrays like
    `(*example_inputs, labels)`; a `step` or `evaluate` of shapes not yet planned plans them
    then (a line on stderr says so), so the last smaller batch of a DataLoader and other
    sequence lengths train in the same run; shape_cache: executors kept besides the first
    shapes' (LRU; default: 4 planned apart, a range's shapes within 1 GiB).
    data_parallel: under torchrun, True (or the world size)
    plans for the ranks of torch.distributed's default group (ranks_per_host from torchrun's
    LOCAL_WORLD_SIZE), rank 0's plan used by every rank and its parameters broadcast, as DDP;
    the example inputs are this rank's shard; every rank feeds batches of one shape at each
    step (a DistributedSampler's last smaller batch is planned on every rank alike), checked
    before each step with one all-reduce and refused in one line naming the ranks' shapes.
    Every other setting of `planner plan`, by its
    flag's name (planner/cli/settings.py): precision, memory_budget, keep_tensor,
    recompute, offload, region_budget, decisions, strategy, intra, inter, grid, min_team_us,
    ranks_per_host, bucket_bytes, interconnect, shard_optimizer, shard_parameters,
    no_variants, no_evaluation, keep, loss_scale_*, no_loss_scaling.

    Raises TorchImportError (an op the planner lacks, in one line naming the node), UserError
    or ValueError for bad settings.
    """
    recipe = _recipe(module, loss, optimizer, lr, target, out_dir, accumulate, costs, adaptive,
                     data_parallel, settings)
    examples = _examples(example_inputs, labels, loss is not None)
    declared = [_declared(d, examples) for d in shapes]
    planned = _first_planned(recipe, examples, declared)
    # Seconds (18 s for six encoder layers, busy 2-core VM): said, as later new shapes are.
    print(f"trainer: {type(module).__name__}: tracing (torch.export) and planning for inputs "
          f"{spell(tuple(tuple(int(d) for d in v.shape) for v in planned))} on {target}",
          file=sys.stderr, flush=True)
    traced, imported = _range_traced(recipe, examples, planned)
    first = _build_shape(recipe, planned, imported)
    aliases, start = _not_held(state := module.state_dict(), first.graph)
    run = _shapes(recipe, first, shape_cache, planned, traced)
    t = Trainer(first.imported, first.graph, first.executor, list(state), start, aliases,
                first.plan, run, None if isinstance(optimizer, str) else optimizer,
                ranks=recipe.ranks, module=module)
    for arrays in (a for a in (examples, *declared) if a is not planned):
        run.add(t._arrays(arrays, "shapes"))
    return t


def _first_planned(recipe: Recipe, examples: tuple[Any, ...],
                   declared: Sequence[tuple[Any, ...]]) -> tuple[Any, ...]:
    """The shapes the trainer plans first: the smallest declared one that covers the
    examples' (a range: the examples run in it, on its arena, and so does every shape it
    holds; one plan and build, not two), else the examples'. Only where a plan is a range
    (one process on the host's cores: _range_choices)."""
    from planner.pipeline.ranges import covers
    from planner.target.backends import traits

    if recipe.ranks > 1 or not traits(recipe.target).host_cores:
        return examples
    def shapes(arrays: Sequence[Any]) -> tuple[tuple[int, ...], ...]:
        return tuple(tuple(int(d) for d in getattr(v, "shape", np.shape(v))) for v in arrays)

    key = shapes(examples)
    covering = [d for d in declared if len(d) == len(examples) and covers(shapes(d), key)]
    return min(covering, key=lambda d: sum(math.prod(s) for s in shapes(d)), default=examples)


def _range_traced(recipe: Recipe, examples: tuple[Any, ...], planned: tuple[Any, ...]
                  ) -> tuple[dict[Any, Any], TorchImport | None]:
    """The run's traces (`traced`: shapes -> (import, step graph), and its one symbolic trace)
    and the import of the shapes planned first, where those are a declared range's (not the
    examples'): traced once for every size from the start, the range's largest shapes and the
    examples both imported from it. A declared range brings many shapes, and two concrete
    traces (the largest, the examples') and then the symbolic one at the next new shape cost
    about twice the symbolic one alone, all but its last on the first step, and the next shape
    waited seconds (4.6 s on the text workload's encoder) where the later ones wait none.
    Elsewhere, and where torch cannot trace so or the trace does not hold the range's sizes:
    nothing yet (the first shapes traced as they are)."""
    from codegen.build import build_runtime_ahead
    from planner.importers.torch.record import OutsideTrace
    from planner.target.backends import traits

    if traits(recipe.target).host_cores:
        build_runtime_ahead()  # a cold kernel library compiles while torch.export traces

    traced: dict[Any, Any] = {}
    if planned is examples:
        return traced, None
    symbolic = traced[_SYMBOLIC] = _symbolic_trace(recipe, examples)
    if symbolic is None:
        return traced, None
    try:
        return traced, convert(symbolic.at(separate(planned)), name=type(recipe.module).__name__,
                               module_root=PREFIX.rstrip("."), complex_outputs=True)
    except OutsideTrace:
        return traced, None


def _shapes(recipe: Recipe, first: Built, limit: int | None, examples: Sequence[Any],
            traced: dict[Any, Any]) -> Shapes:
    """The run's shapes from `first`: others planned as `first` was (ZeRO-3: with its bucket
    size), or run in its range, traced as `traced` (_range_traced) holds them."""
    recipe = _first_buckets(recipe, first)
    return Shapes(first, lambda arrays, imported=None: _build_shape(recipe, arrays, imported),
                  limit=limit,
                  within=lambda ranged, arrays: _shape_within(recipe, ranged, arrays, traced),
                  examples=examples)


def _first_buckets(recipe: Recipe, first: Built) -> Recipe:
    """`recipe` planning every shape with the bucket size ZeRO-3's first plan chose
    (planner/pipeline/gathers.py chooses one per plan): the run's shards move between shapes'
    plans only where their buckets are alike (shapes.hand_over)."""
    dp = recipe.plan_options.data_parallel
    chosen = (first.plan.provenance.options.get("data_parallel") or {}).get("bucket_bytes")
    if not dp.shard_parameters or dp.bucket_bytes is not None or chosen is None:
        return recipe
    return replace(recipe, plan_options=recipe.plan_options.model_copy(update={
        "data_parallel": dp.model_copy(update={"bucket_bytes": chosen})}))


def _examples(inputs: Sequence[Any], labels: Any, with_labels: bool) -> tuple[Any, ...]:
    """The module's example inputs, then the labels where a loss takes them. Each step feeds
    one array per example: a tuple, list or dict (multi-task targets `(classes, boxes)`, an
    LSTM's `(h, c)`) is refused naming it, rather than failing deep in the planning."""
    examples = (*inputs, labels) if with_labels else tuple(inputs)
    for k, v in enumerate(examples):
        if isinstance(v, tuple | list | dict):
            what = "labels" if with_labels and k == len(examples) - 1 else f"input {k}"
            raise ValueError(f"trainer: {what} is a {type(v).__name__} of {len(v)}; the step "
                             f"feeds one tensor per input and one labels tensor: pass each "
                             f"tensor as an input of its own (the loss can then be computed "
                             f"in the module, returned first, with loss=None), or stack them "
                             f"into one tensor")
    return examples


def _recipe(module: Any, loss: Callable | None, optimizer: Any, lr: float | None, target: str,
            out_dir: str | Path | None, accumulate: int, costs: Any, adaptive: bool,
            data_parallel: bool | int, settings: Mapping[str, Any]) -> Recipe:
    """trainer's settings read as one Recipe: the plan settings by `planner plan`'s flag names
    (planner/cli/settings.py), the optimizer's by torch.optim's, the data-parallel ranks (rank
    0's parameters broadcast to every rank, as DDP starts). UserError naming a bad setting as
    the caller spells it."""
    from planner.cli.settings import graph_options, plan_options, settings_of, spelled
    from planner.errors import UserError
    from planner.torch.settings import broadcast_state, optimizer_of, ranks_of, split

    chosen_settings, optimizer_settings = split(settings)
    ranks = ranks_of(data_parallel, chosen_settings)
    plan_settings = settings_of({"target": target, "accumulate": accumulate,
                                 "data_parallel": ranks, **chosen_settings}, "python")
    record = optimizer_of(module, optimizer, lr, optimizer_settings, PREFIX)
    try:
        options = plan_options(plan_settings)
        graph_settings = graph_options(plan_settings, optimizer=record)
    except UserError as e:
        raise UserError(spelled(str(e), "python")) from None
    if ranks > 1:
        broadcast_state(module)
    from planner.target.presets import load_target

    # Read once: every shape of the run is planned for one target (each read of 'host'
    # detects this host again).
    chosen = load_target(target)
    _check_runs_here(chosen)
    return Recipe(module=module, loss=loss, target=chosen, graph_options=graph_settings,
                  plan_options=options, evaluation=not plan_settings.no_evaluation,
                  out_dir=Path(out_dir) if out_dir is not None else None,
                  costs=costs, adaptive=adaptive,
                  modes=tuple(bool(m.training) for m in module.modules()),
                  with_labels=loss is not None, ranks=ranks,
                  shard_parameters=bool(plan_settings.shard_parameters),
                  torch_optimizer=None if isinstance(optimizer, str) else optimizer)


def _not_held(state: Mapping[str, Any], graph: Any) -> tuple[dict[str, str], dict[str, Any]]:
    """Of the module's state_dict entries the executor does not hold: (aliases: a tied
    weight's second key -> the key exported, since tied weights are one placeholder in the
    export; start: the values of the others, counters and buffers no op reads)."""
    held = {t.name for t in graph.by_role("param", "state")}

    def storage(v: Any) -> tuple:
        return v.data_ptr(), tuple(v.shape), tuple(v.stride()), v.dtype

    first_key: dict[tuple, str] = {}
    for k, v in state.items():
        if PREFIX + k in held:
            first_key.setdefault(storage(v), k)
    aliases = {k: first_key[storage(v)] for k, v in state.items()
               if PREFIX + k not in held and storage(v) in first_key}
    start = {k: v.detach().cpu().numpy().copy() for k, v in state.items()
             if PREFIX + k not in held and k not in aliases}
    return aliases, start


@dataclass(frozen=True)
class Recipe:
    """What `trainer` was given, less the example batch: how to plan and build the module for
    any input shapes (planner/torch/shapes.py)."""

    module: Any
    loss: Callable | None
    target: Any  # the Target every shape is planned for, read when the trainer was made
    graph_options: Any  # GraphOptions: what `prepare` makes of the import (the optimizer)
    plan_options: Any  # PlanOptions the plan is made with
    evaluation: bool  # whether the plan holds its evaluation schedule
    out_dir: Path | None
    costs: Any
    adaptive: bool
    # Each submodule's train()/eval() flag when the trainer was made: every shape's export's
    # (a module trained with a frozen, eval() BatchNorm inside keeps it so).
    modes: tuple[bool, ...]
    with_labels: bool
    # Data-parallel ranks under torchrun (1 without): rank 0's plan runs on every rank (ranks
    # measure their own costs, and the executor refuses ranks that run different plans).
    ranks: int = 1
    shard_parameters: bool = False  # ZeRO-3: each rank loads its shards of the parameters
    torch_optimizer: Any = None  # the torch.optim instance given, None for the string form


def _declared(declared: Any, examples: Sequence[Any]) -> tuple[Any, ...]:
    """The example batch of a `shapes=` entry: a batch size (each example cut or repeated
    along its first axis to it) or the arrays themselves."""
    if isinstance(declared, bool) or not isinstance(declared, (int, tuple, list)):
        raise ValueError(f"shapes: each entry is a batch size or a tuple of example arrays, "
                         f"not {type(declared).__name__}")
    if not isinstance(declared, int):
        return tuple(declared)
    if declared < 1:
        raise ValueError(f"shapes: a batch size is 1 or more, not {declared}")
    arrays = [v.detach().cpu().numpy() if hasattr(v, "detach") else np.asarray(v)
              for v in examples]
    if any(a.ndim == 0 for a in arrays):
        raise ValueError("shapes: a batch size needs example arrays with a batch axis")
    # Refused before anything is allocated: a batch this size could not be stepped here.
    need = sum(declared * (a.nbytes // max(len(a), 1)) for a in arrays)
    have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if need > have // 2:
        raise ValueError(f"shapes: a batch of {declared} takes {need} bytes of inputs alone, "
                         f"more than half this host's {have} bytes of memory")
    return tuple(np.resize(a, (declared, *a.shape[1:])) for a in arrays)


def _torch(a: Any) -> Any:
    import torch

    return a if hasattr(a, "detach") else torch.from_numpy(np.asarray(a, order="C"))


def _build_shape(recipe: Recipe, examples: Sequence[Any], imported: Any = None) -> Built:
    """Export, import (unless given the import at these shapes: planned again), plan, build
    and load the module for the shapes of `examples` (the module's inputs, then the labels);
    the executor starts from the module's own values."""
    from codegen.cached import load_built, package_name
    from planner.frontend.prepare import prepare
    from planner.graph import init_params
    from planner.pipeline import plan
    from planner.torch.settings import rank0_plan

    examples = tuple(_torch(v) for v in examples)
    if recipe.ranks > 1:  # rank 0's plan runs on every rank: of every rank's shapes
        from planner.torch.settings import same_shapes

        same_shapes([tuple(v.shape) for v in examples], "plan")
    imported = imported or _imported(recipe, examples)
    chosen = recipe.target
    prepared = prepare(imported.graph, recipe.graph_options)
    if recipe.torch_optimizer is not None:  # before anything is built for it
        from planner.errors import UserError
        from planner.torch.optimizers import outside_groups

        try:
            outside_groups(recipe.torch_optimizer, recipe.module, PREFIX, prepared)
        except ValueError as e:
            raise UserError(str(e)) from None
    by_name = {t.name: t for t in prepared.tensors}
    from codegen.measure_later import watch

    with watch() as priced:  # what the host lacks, measured in the background meanwhile
        table = _cost_table(recipe.costs, prepared, chosen, recipe.out_dir, {  # in-step on them
            name: _numpy(v, by_name[name].dtype)
            for name, v in zip(imported.inputs, examples, strict=False) if name in by_name},
            options=recipe.plan_options, evaluation=recipe.evaluation,
            background=recipe.ranks == 1)

    def planned_here() -> Any:
        with warnings.catch_warnings():  # an op the table lacks is priced analytically
            warnings.simplefilter("ignore")
            return plan(prepared, chosen, table, recipe.plan_options,
                        evaluation=recipe.evaluation)

    planned = planned_here() if recipe.ranks == 1 else rank0_plan(planned_here)
    graph = planned.graph  # as the step's cores rewrote it: the graph the executor runs
    name = package_name(planned, "torch_")
    package, _ = load_built(planned, recipe.out_dir, name, progress=_say)
    executor = _new_executor(package, recipe)
    start_params = {**init_params(graph), **imported.params()}
    if recipe.shard_parameters:  # ZeRO-3: this rank's shards of them
        import torch.distributed as dist

        from planner.runtime.sharded import shard_params

        start_params = shard_params(executor.plan, start_params, dist.get_rank())
    executor.load_params(start_params)
    return Built(key=_key(imported, graph, examples), imported=imported, graph=graph,
                 plan=planned, package=package, executor=executor, target=chosen, table=table,
                 feeds=_feeds(imported, graph), choices=_range_choices(recipe, prepared, table,
                                                                       graph),
                 provisional=priced.provisional)


def _feeds(imported: TorchImport, graph: Any) -> tuple[Any, ...]:
    feeds = {t.name: t for t in graph.tensors if t.role in ("input", "label")}
    return tuple(feeds[n] for n in imported.inputs if n in feeds)


def _key(imported: TorchImport, graph: Any, examples: Sequence[Any]) -> Any:
    feeds = {t.name: t for t in graph.tensors if t.role in ("input", "label")}
    return key_of([_numpy(v, feeds[n].dtype)
                   for n, v in zip(imported.inputs, examples, strict=False) if n in feeds])


def _range_choices(recipe: Recipe, prepared: Any, table: Any, step: Any) -> Any:
    """What the plan's step graph was made with (planner.pipeline.choices, as planning chose
    it), so that the plan runs smaller shapes of its graph (planner/pipeline/ranges.py); None
    for a data-parallel plan (rank 0's, every rank's shapes checked alike: planned apart) or
    where the choices do not give the plan's graph again."""
    from planner.pipeline.ranges import range_choices
    from planner.target.backends import traits

    # The CUDA executor runs its plan's own shapes only (no concrete smaller ones): each
    # shape is planned apart there.
    if recipe.ranks > 1 or not traits(recipe.target).host_cores:
        return None
    return range_choices(prepared, step, recipe.target, recipe.plan_options.data_parallel,
                         table)


def _new_executor(package: Any, recipe: Recipe, **concrete: Any) -> Any:
    """An executor of `package`: on the CPUs switching to the plan's variants by load unless
    the trainer said not (`adaptive`), at a range plan's `concrete` shapes; the CUDA executor
    takes its streams from the plan and has neither."""
    from planner.target.backends import traits

    if traits(recipe.target).host_cores:
        return package.Executor(adaptive=recipe.adaptive, **concrete)
    return package.Executor()


# Shapes whose traced graphs a trainer keeps (KBs each), so that a shape whose executor was let
# go is not traced again (torch.export and its import: about a second).
TRACED = 256


def _shape_within(recipe: Recipe, ranged: Built, examples: Sequence[Any],
                  traced: dict[Any, tuple[Any, Any]] | None = None) -> Built | None:
    """The module at the shapes of `examples`, run on the build of the range plan `ranged`
    (planner/pipeline/ranges.py): traced and imported at these shapes (their own attrs and
    constants: a loss's row count), the step graph made under the range's choices and
    checked against the range's, an executor of the range's build made for it. None, with a
    line saying why, where the graphs differ (a shape torch.export specialises)."""
    from codegen.concrete import concrete_options
    from planner.frontend.prepare import prepare
    from planner.graph import init_params
    from planner.graph.validate import check_graph, checked_at_the_end
    from planner.pipeline.ranges import outside_range, step_at

    examples = tuple(_torch(v) for v in examples)
    shapes = (tuple(tuple(v.shape) for v in examples), ranged.key)
    if traced is not None and shapes in traced:
        imported, step = traced[shapes]
    else:
        # The range's graph went through the same import and passes, each checked; this
        # shape's step graph is checked once, in full (checked_at_the_end).
        with checked_at_the_end():
            imported = _imported_at(recipe, examples, traced, ranged.imported)
            step = step_at(ranged.choices, prepare(imported.graph, recipe.graph_options))
        step = check_graph(step)
        if traced is not None:
            traced[shapes] = imported, step
            while len(traced) - (_SYMBOLIC in traced) > TRACED:  # (the trace itself kept)
                traced.pop(next(k for k in traced if k != _SYMBOLIC))
    problem = outside_range(ranged.graph, step)
    if problem is not None:
        print(f"trainer: shapes {spell(_key(imported, step, examples))} are not in the range "
              f"of the plan for {spell(ranged.key)} ({problem}): planned apart",
              file=sys.stderr, flush=True)
        return None
    # On the range's arena: the run's parameters and state are already there, in place.
    executor = _new_executor(ranged.package, recipe, arena_of=ranged.executor,
                             **concrete_options(ranged.plan, step))
    own, restore = own_values(ranged, step, imported.params(), lambda: init_params(step))
    stats = executor.stats()
    return Built(key=_key(imported, step, examples), imported=imported, graph=step,
                 plan=ranged.plan, package=ranged.package, executor=executor,
                 target=ranged.target, table=ranged.table, feeds=_feeds(imported, step),
                 choices=ranged.choices, within=ranged.key, own=own, restore=restore,
                 held_bytes=stats["held_bytes"] - stats["arena_bytes"]
                 - stats["host_store_bytes"])


# The key under which a run's `traced` keeps its symbolic trace (None: torch could not make one).
_SYMBOLIC = "symbolic"
# Shapes traced as they are before the run traces its module once for every size, the range
# plan's own included: a symbolic trace costs about three concrete ones (7 s against 2-2.5 s
# for a 2-layer encoder on the loaded VM; 4.6 s against 1.35 s uncached for the text workload
# of bench/first_step_loop.py), and a run whose only other shape is its last batch never needs
# one; a run that declared its range and steps an example inside it has shown two.
SYMBOLIC_AFTER = 2


def _imported_at(recipe: Recipe, examples: Sequence[Any], traced: dict[Any, Any] | None,
                 like: TorchImport) -> TorchImport:
    """The module imported at the shapes of `examples`, under the names of `like` (the range
    plan's import): from the run's one symbolic trace (planner/importers/torch/specialize.py:
    no torch.export and no decomposition again, 0.04 s where they took 1.7-2.3 s) where it
    holds these sizes and gives the same ops, else traced at them."""
    from planner.importers.torch.record import OutsideTrace
    from planner.importers.torch.specialize import named_like

    if traced is None or (_SYMBOLIC not in traced and 1 + len(traced) < SYMBOLIC_AFTER):
        return _imported(recipe, examples)  # a shape or two more (a last batch): traced as is
    if _SYMBOLIC not in traced:
        traced[_SYMBOLIC] = _symbolic_trace(recipe, examples)
    symbolic = traced[_SYMBOLIC]
    if symbolic is not None:
        try:
            named = named_like(convert(symbolic.at(separate(examples)),
                                       name=type(recipe.module).__name__,
                                       module_root=PREFIX.rstrip("."), complex_outputs=True),
                               like)
            if named is not None:
                return named
        except OutsideTrace:
            pass
    return _imported(recipe, examples)


def _symbolic_trace(recipe: Recipe, examples: Sequence[Any]) -> Any:
    """The module traced once with dynamic shapes (SymbolicTrace: decomposed at the first size
    whose record this host has not kept), or None where torch cannot trace it so (each size is
    then traced as it is)."""
    from planner.importers.torch.specialize import SymbolicTrace

    # Seconds (several concrete traces' worth): said, as every wait over ~2 s is.
    print(f"trainer: {type(recipe.module).__name__}: tracing once for every size (torch.export "
          f"with dynamic shapes), so that new shapes need no trace of their own",
          file=sys.stderr, flush=True)
    try:
        program = _exported_as_made(recipe, examples, dynamic=True)
        return SymbolicTrace(program, PREFIX.rstrip("."))  # (decomposed once, where not kept)
    except Exception:  # noqa: BLE001 - torch's failure to trace symbolically: per size then
        return None


def _imported(recipe: Recipe, examples: Sequence[Any]) -> TorchImport:
    """The module traced (with its loss) on `examples` and imported."""
    return convert(_exported_as_made(recipe, examples), name=type(recipe.module).__name__,
                   module_root=PREFIX.rstrip("."), complex_outputs=True)


def given_out(imported: TorchImport, out: Mapping[str, Any]) -> list[np.ndarray]:
    """The module's outputs after the loss, as numpy copies (the executor's next step writes
    over its output bytes); a complex one (convert's complex_outputs: its planes) as complex
    numbers again, complex64 from float32 planes."""
    given = []
    for k, o in enumerate(imported.outputs[1:], start=1):
        if o not in out:
            continue
        v = np.asarray(out[o])
        if k not in imported.complex_outputs:
            given.append(np.array(v))
            continue
        z = np.empty(v.shape[:-1], np.complex64 if v.dtype == np.float32 else np.complex128)
        z.real, z.imag = v[..., 0], v[..., 1]
        given.append(z)
    return given


def _exported_as_made(recipe: Recipe, examples: Sequence[Any], dynamic: bool = False) -> Any:
    """The module exported with its loss on `examples` (`export`), each submodule in the
    train()/eval() mode it had when the trainer was made, then as it is now again."""
    module = recipe.module
    inputs = examples[:-1] if recipe.with_labels else examples
    labels = examples[-1] if recipe.with_labels else None
    now = [m.training for m in module.modules()]
    _set_modes(module, recipe.modes)
    try:
        return export(module, inputs, recipe.loss, labels, dynamic=dynamic)
    finally:
        _set_modes(module, now)


def _set_modes(module: Any, modes: Sequence[bool]) -> None:
    subs = list(module.modules())
    if len(subs) != len(modes):
        raise ValueError(f"trainer: {type(module).__name__} has {len(subs)} submodules now, "
                         f"{len(modes)} when the trainer was made; a new input shape is traced "
                         f"from the module as it was: make a new trainer")
    for m, flag in zip(subs, modes, strict=True):
        m.training = flag


def _say(line: str) -> None:
    """A build's progress on stderr, but for a cached build's "up to date"."""
    if not line.endswith(": up to date"):
        print(line, file=sys.stderr, flush=True)


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


def _cost_table(costs: Any, graph: Any, target: Any, folder: Path | None,
                examples: Mapping[str, np.ndarray], options: Any = None,
                evaluation: bool = True, background: bool = True,
                prefix: str = "torch_") -> Any:
    """The cost table `trainer`'s plan is priced with (its `costs` argument; "in-step" steps
    on the example batch `examples`; "measured": the graphs a plan with `options` and
    `evaluation` prices; "background", the default on the host where `background`: what the
    host kept now, the rest measured meanwhile, codegen/measure_later.py); UserError for a
    table of another target or a value that names none."""
    from planner.costs import CostTable, load_table
    from planner.errors import UserError

    if costs is None:
        from codegen.measure_later import measure_mode
        from planner.costs.host_costs import default_costs

        costs = default_costs(target)
        if costs == "measured" and background and measure_mode() == "background":
            costs = "background"
    if isinstance(costs, CostTable):
        table = costs
    elif isinstance(costs, str) and costs == "analytical":
        table = None
    elif isinstance(costs, str) and costs == "background":
        from codegen.measure_later import Replan, priced_now
        from planner.pipeline import PlanOptions, priced_graphs

        # What the host kept now; what it lacks measured by a child meanwhile
        # (codegen/measure_later.py), the plan made again between steps once it is, and
        # built by the child for the next process.
        then = (Replan(graph=graph, options=options or PlanOptions(), evaluation=evaluation,
                       prefix=prefix) if folder is None else None)
        table = priced_now(priced_graphs(graph, target, options, evaluation), target,
                           examples, f"graph {graph.name!r}", then)
    elif isinstance(costs, str) and costs == "measured":
        from codegen.profiling import host_measured

        # The graphs the plan prices with `options` (a data-parallel step's sharded updates),
        # as `planner plan --costs measured` measures them: one table, one plan.
        table = host_measured(graph, target, progress=sys.stderr, feeds=examples,
                              options=options, evaluation=evaluation)
    elif isinstance(costs, str) and costs == "in-step":
        from codegen.profiling import profile_in_step
        from planner.io.write import atomic_write

        if folder is None:  # no out_dir: the profile's builds in a folder removed after
            with tempfile.TemporaryDirectory(prefix="planner-profile-") as work:
                table = profile_in_step(graph, target, Path(work) / "profile", feeds=examples)
        else:
            table = profile_in_step(graph, target, folder / "profile", feeds=examples)
            atomic_write(folder / "costs.json", table.to_json())
    elif isinstance(costs, (str, Path)):
        table = load_table(costs)
    else:
        raise UserError(f"costs: 'background', 'measured', 'analytical', 'in-step', a cost "
                        f"table or its path, not {type(costs).__name__}")
    if table is not None and table.target != target.name:
        raise UserError(f"costs: a cost table of target {table.target!r}, not of {target.name!r}")
    return table
