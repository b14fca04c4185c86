"""What happened while torch.export traced a module: the trainer's export (training.py) runs
inside `watching(model)`, which knows which submodule was running when torch.export failed and
which `torch.autograd.Function`s the trace went through, so that both become one line.

- An error of torch.export itself (`DynamicOutputShapeException` for `aten._ctc_loss`, a
  FakeTensor TypeError inside `pack_padded_sequence`) becomes a TorchImportError saying
  torch.export could not trace the module, where (the module path, or the loss), the torch
  function and op it failed in, and what to do.
- A `torch.autograd.Function` subclass of the user's: torch.export traces its forward and
  drops its custom backward, so the planner would train with the derivative of the forward
  instead of the user's gradient. It is refused, naming the function and the module.

- `torch.autograd.grad` (or `backward`) called inside the module or the loss: a gradient
  penalty (WGAN-GP's `create_graph=True`). torch.export cannot trace it (it fails, or bakes in
  a value), and the step differentiates the program once: refused naming the call and line.
- `Tensor.register_hook` called inside forward (a gradient hook on an activation): torch.export
  drops it, so it is refused naming the line (a parameter's hooks and a module's backward
  hooks are refused before the trace: planner/torch/hooks.py).
- `torch.inference_mode()`, which torch.export does not record (its region would be traced
  as if gradients were on), is traced as `torch.no_grad()` (`inference_mode(False)` as
  `enable_grad()`) while the module runs, however the user's code holds it (a `with`, a
  decorator, a reference kept in an attribute): both mean "no gradient" for the values the
  region computes, and torch.export records no_grad (planner/importers/torch/grad_mode.py).
- Python's `random` and `time` called by the user's code while tracing (teacher forcing by
  `random.random() < ratio`, a time-seeded choice): torch.export runs the Python once, so the
  value drawn at trace time is baked into every step. Each call is a warning naming its line.

All watch the Python the trace runs (non-strict export): module forward hooks keep the stack
of running modules, and `Function.apply` and the random and time functions are wrapped for the
duration. Functions defined inside torch itself are not the user's (their backward is the
forward's derivative) and pass, as do calls from torch, the planner and Python's own library.
"""

from __future__ import annotations

import contextlib
import functools
import random
import sys
import sysconfig
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner.importers.torch.context import TorchImportError

# The torch functions whose failure under export has a known way round: what to do.
ADVICE = {
    "pack_padded_sequence": "pad the sequences instead of packing them (run the RNN on the "
                            "padded batch and mask its outputs)",
    "pack_sequence": "pad the sequences instead of packing them (run the RNN on the padded "
                     "batch and mask its outputs)",
}
DATA_DEPENDENT = ("an op whose output shape depends on the data cannot be traced: compute it "
                  "outside the module and the loss the trainer traces")
PACKED = ADVICE["pack_padded_sequence"]
# Frames between the user's call and the torch function it called (nn.Module's call path): a
# module's own `forward` is named by the module path instead.
CALL_WRAPPERS = frozenset({"_call_impl", "_wrapped_call_impl", "module_call_wrapper",
                           "__call__", "forward", "inner", "call_module"})
GENERIC = ("make that code traceable by torch.export (static shapes, no Python control flow "
           "on tensor values)")
# Python functions whose value torch.export freezes at trace time: watched while tracing.
FROZEN = {random: ("random", "uniform", "randint", "randrange", "choice", "choices", "sample",
                   "shuffle", "gauss", "normalvariate", "betavariate", "expovariate",
                   "getrandbits"),
          time: ("time", "time_ns", "perf_counter", "perf_counter_ns", "monotonic",
                 "monotonic_ns", "process_time")}


@dataclass
class Watch:
    """The trace as it runs: the paths of the modules running (innermost last), whether the
    user's module has returned, and the user's autograd.Functions applied (name, path)."""

    names: dict[int, str]
    model: Any
    running: list[str] = field(default_factory=list)
    model_done: bool = False
    functions: list[tuple[str, str]] = field(default_factory=list)
    frozen: list[tuple[str, str]] = field(default_factory=list)  # (function, file:line)
    # torch.autograd.grad / backward called by the user's code: (call, file:line, where)
    gradients: list[tuple[str, str, str]] = field(default_factory=list)
    # Tensor.register_hook called by the user's code: (file:line, where)
    tensor_hooks: list[tuple[str, str]] = field(default_factory=list)
    # buffers written in place inside a torch.utils.checkpoint region with gradients on
    checkpoint_writes: list[str] = field(default_factory=list)

    def where(self) -> str:
        """The innermost running module's path, `the loss` after the module returned."""
        path = self.running[-1] if self.running else ""
        if not path and self.model_done:
            return "in the loss"
        return f"in {path}" if path else ""


@contextlib.contextmanager
def watching(wrapped: Any, model: Any, prefix: str = "") -> Iterator[Watch]:
    """Watch a trace of `wrapped`, whose submodule `model` is the user's (its paths lose
    `prefix`, the user's module's own attribute name and dot)."""
    import torch
    from torch.nn.modules import module as nn_module

    names = {id(m): n.removeprefix(prefix) if n.startswith(prefix) else n
             for n, m in wrapped.named_modules()}
    names[id(model)] = ""
    watch = Watch(names, model)

    def pre(m: Any, args: Any) -> None:
        if id(m) in names:
            watch.running.append(names[id(m)])

    def post(m: Any, args: Any, out: Any) -> None:
        if id(m) in names and watch.running:
            watch.running.pop()
            watch.model_done = watch.model_done or m is model

    function = torch.autograd.Function
    real = function.__dict__["apply"]
    # Torch's own Functions first applied during the trace keep this wrapper for good (a
    # decorator, supports_tensorlist, binds `cls.apply` once): it reaches the watch, and so
    # the user's module, only while the trace runs, else the module (and an executor whose
    # views the module's parameters became) would live to the interpreter's exit.
    active = [watch]

    def apply(cls: Any, *args: Any, **kwargs: Any) -> Any:
        if active and not str(getattr(cls, "__module__", "")).startswith("torch."):
            now = active[0]
            now.functions.append((cls.__qualname__, now.where().removeprefix("in ")))
        return real.__func__(cls, *args, **kwargs)

    hooks = [nn_module.register_module_forward_pre_hook(pre),
             nn_module.register_module_forward_hook(post)]
    function.apply = classmethod(apply)
    replaced = [(module, fn, getattr(module, fn)) for module, fns in FROZEN.items()
                for fn in fns if hasattr(module, fn)]
    for module, fn, original in replaced:
        setattr(module, fn, _noting(watch, f"{module.__name__}.{fn}", original))
    mode = torch.autograd.grad_mode.inference_mode
    enter, leave = mode.__enter__, mode.__exit__
    mode.__enter__, mode.__exit__ = _as_no_grad(watch, enter, leave)
    try:
        with _gradients_noted(watch), _checkpoints_watched(watch):
            yield watch
    finally:
        active.clear()
        mode.__enter__, mode.__exit__ = enter, leave
        for module, fn, original in replaced:
            setattr(module, fn, original)
        function.apply = real
        for h in hooks:
            h.remove()


@contextlib.contextmanager
def _gradients_noted(watch: Watch) -> Iterator[None]:
    """torch.autograd.grad / backward and Tensor.register_hook noted in `watch` while the
    trace runs (what the trainer's step cannot do inside a module or its loss)."""
    import torch

    autograd = torch.autograd
    differentiators = {fn: getattr(autograd, fn) for fn in ("grad", "backward")}
    for fn, original in differentiators.items():
        setattr(autograd, fn, _gradient_taken(watch, fn, original))
    register_hook = torch.Tensor.register_hook
    torch.Tensor.register_hook = _hook_noted(watch, register_hook)
    try:
        yield
    finally:
        for fn, original in differentiators.items():
            setattr(autograd, fn, original)
        torch.Tensor.register_hook = register_hook


@contextlib.contextmanager
def _checkpoints_watched(watch: Watch) -> Iterator[None]:
    """Non-reentrant torch.utils.checkpoint regions (its generator, which `checkpoint` calls
    around the region) watched for in-place writes of the user's module's buffers (their
    version counters before and after) while gradients are on."""
    import torch.utils.checkpoint as ckpt

    original = getattr(ckpt, "_checkpoint_without_reentrant_generator", None)
    if original is None:  # torch moved it: nothing watched, as before
        yield
        return

    def generator(*args: Any, **kwargs: Any) -> Iterator[None]:
        import torch

        before = _buffer_versions(watch.model)
        yield from original(*args, **kwargs)
        if torch.is_grad_enabled():
            after = _buffer_versions(watch.model)
            watch.checkpoint_writes.extend(k for k, v in before.items() if after.get(k) != v)

    ckpt._checkpoint_without_reentrant_generator = generator
    try:
        yield
    finally:
        ckpt._checkpoint_without_reentrant_generator = original


def _buffer_versions(model: Any) -> dict[str, tuple[int, int]]:
    return {name: (id(b), b._version) for name, b in model.named_buffers()}


def checkpoint_writes(watch: Watch, module: str) -> TorchImportError | None:
    """A checkpointed region that writes a buffer (BatchNorm's running statistics): eager
    writes it again when the backward recomputes the region (two momentum updates a step),
    which the step, computing the region once, cannot match: refused naming the buffer."""
    if not watch.checkpoint_writes:
        return None
    return TorchImportError(
        f"{module}: buffer {watch.checkpoint_writes[0]!r} is written inside a "
        f"torch.utils.checkpoint region, which eager PyTorch runs again in the backward (its "
        f"running statistics updated twice a step); the step computes the region once: keep "
        f"that module outside the checkpoint")


def _noting(watch: Watch, name: str, original: Any) -> Any:
    """`original`, noting in `watch` each call from the user's code (file and line)."""
    def call(*args: Any, **kwargs: Any) -> Any:
        frame = sys._getframe(1)
        if _users(frame.f_code.co_filename):
            watch.frozen.append((name, f"{frame.f_code.co_filename}:{frame.f_lineno}"))
        return original(*args, **kwargs)

    return call


def _gradient_taken(watch: Watch, fn: str, original: Any) -> Any:
    """torch.autograd.`fn` (grad or backward), noting in `watch` each call the user's code
    makes (directly, or through Tensor.backward) while the module or the loss runs."""
    import torch

    torch_dir = Path(torch.__file__).parent

    def call(*args: Any, **kwargs: Any) -> Any:
        frame = sys._getframe(1)
        while frame is not None and _under(frame.f_code.co_filename, torch_dir):
            frame = frame.f_back
        if frame is not None and _users(frame.f_code.co_filename):
            create = kwargs.get("create_graph", False)
            spelled = (f"torch.autograd.{fn}(..., create_graph=True)" if create
                       else f"torch.autograd.{fn}")
            watch.gradients.append((spelled, f"{frame.f_code.co_filename}:{frame.f_lineno}",
                                    watch.where()))
        return original(*args, **kwargs)

    return call


def _hook_noted(watch: Watch, original: Any) -> Any:
    """Tensor.register_hook, noting in `watch` each call the user's code makes."""
    def register_hook(self: Any, hook: Any) -> Any:
        frame = sys._getframe(1)
        if _users(frame.f_code.co_filename):
            watch.tensor_hooks.append((f"{frame.f_code.co_filename}:{frame.f_lineno}",
                                       watch.where()))
        return original(self, hook)

    return register_hook


def _as_no_grad(watch: Watch, enter: Any, leave: Any) -> tuple[Any, Any]:
    """inference_mode's __enter__ and __exit__ while the watched module runs: no_grad's
    (enable_grad's for inference_mode(False)); the real ones otherwise."""
    import torch

    def entered(self: Any) -> None:
        if not watch.running:
            return enter(self)
        self._planner_traced_as = torch.no_grad() if self.mode else torch.enable_grad()
        self._planner_traced_as.__enter__()
        return None

    def left(self: Any, *exc: Any) -> Any:
        traced = self.__dict__.pop("_planner_traced_as", None)
        return leave(self, *exc) if traced is None else traced.__exit__(*exc)

    return entered, left


@functools.lru_cache(maxsize=4096)
def _users(filename: str) -> bool:
    """Is `filename` the user's code: not torch's, the planner's or Python's own library?
    (Cached: torch's own tracing reads the clock thousands of times.)"""
    import torch

    if filename.startswith("<"):
        return False
    skip = (Path(torch.__file__).parent, Path(__file__).resolve().parents[1],
            Path(sysconfig.get_paths()["stdlib"]))
    return not any(_under(filename, folder) for folder in skip)


def frozen_calls(watch: Watch, module: str) -> list[str]:
    """One warning line per place the user's code called a watched random or time function."""
    return [f"{module}: forward calls {fn} at {where}: torch.export ran it once, so every step "
            f"uses the value it had when traced; draw it with torch ops (torch.rand, "
            f"torch.randint) or pass it in as an input"
            for fn, where in dict.fromkeys(watch.frozen)]


def custom_gradients(watch: Watch, module: str) -> TorchImportError | None:
    """The refusal of the user's autograd.Functions the trace went through, if any."""
    if not watch.functions:
        return None
    seen = list(dict.fromkeys(watch.functions))
    listed = ", ".join(f"{fn}{' in ' + path if path else ''}" for fn, path in seen)
    return TorchImportError(
        f"{module}: torch.autograd.Function {listed}: torch.export traces its forward and drops "
        f"its backward, so the step would train with another gradient than PyTorch's; write "
        f"it with torch ops (its gradient is then theirs)")


def gradients_taken(watch: Watch, module: str) -> TorchImportError | None:
    """The refusal of a gradient taken inside the traced module or loss, if any."""
    if not watch.gradients:
        return None
    spelled, line, where = watch.gradients[0]
    return TorchImportError(
        f"{module}: {spelled} at {line}{' ' + where if where else ''}: the trainer "
        f"differentiates the traced step once, and a gradient taken inside the model or the "
        f"loss (a gradient penalty: WGAN-GP, R1; MAML's inner step) is not traced; train this "
        f"model with PyTorch's own loop (torch.compile(backend=\"planner\") refuses a second "
        f"backward too)")


def hooks_registered(watch: Watch, module: str) -> TorchImportError | None:
    """The refusal of a gradient hook registered on a tensor inside forward, if any."""
    if not watch.tensor_hooks:
        return None
    line, where = watch.tensor_hooks[0]
    from planner.torch.hooks import INSTEAD

    return TorchImportError(f"{module}: a gradient hook (Tensor.register_hook) at {line}"
                            f"{' ' + where if where else ''}: {INSTEAD}")


def export_failed(e: BaseException, watch: Watch, module: str) -> TorchImportError:
    """One line for an exception torch.export raised while tracing `module` (a class name)."""
    from torch._subclasses.fake_tensor import DynamicOutputShapeException

    where = watch.where()
    called = _called_torch_function(e)
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    if isinstance(e, DynamicOutputShapeException):
        what, advice = f"{text} has an output shape that depends on the data", DATA_DEPENDENT
    else:
        what = f"{type(e).__name__}: {text}"
        advice = PACKED if _packed(e) else ADVICE.get(called, GENERIC)
    line = (f"torch.export could not trace {module}{' ' + where if where else ''}"
            f"{f' ({called})' if called else ''}: {what[:200]}; {advice}")
    return TorchImportError(line)


def _called_torch_function(e: BaseException) -> str:
    """The torch function the user's code called when the error came: the first frame inside
    torch after the last frame of the user's code ("" when none can be told)."""
    import torch

    torch_dir = Path(torch.__file__).parent
    frames = traceback.extract_tb(e.__traceback__)
    inside = [_under(f.filename, torch_dir) for f in frames]
    planner_dir = Path(__file__).resolve().parents[1]
    user = [k for k, f in enumerate(frames)
            if not inside[k] and not _under(f.filename, planner_dir)]
    if not user:
        return ""
    for k in range(user[-1] + 1, len(frames)):
        if not inside[k]:
            break
        if frames[k].name not in CALL_WRAPPERS:
            return "" if frames[k].name.startswith("_") else frames[k].name
    return ""


def _packed(e: BaseException) -> bool:
    """Did the failing call read a PackedSequence (an RNN fed pack_padded_sequence's result)?"""
    from torch.nn.utils.rnn import PackedSequence

    tb = e.__traceback__
    while tb is not None:
        if any(isinstance(v, PackedSequence) for v in tb.tb_frame.f_locals.values()):
            return True
        tb = tb.tb_next
    return False


def _under(filename: str, folder: Path) -> bool:
    """Is `filename` in `folder`, both resolved (a virtual environment reached by a link names
    its files by the link or by their place)?"""
    try:
        return Path(filename).resolve().is_relative_to(folder.resolve())
    except (OSError, ValueError):
        return False
