"""PyTorch's training semantics, one small module each: the cases of the conformance matrix
(tests/importers/test_training_semantics.py), kept apart from the test so that other runners
(an optimizer row, a torch.compile backend) can step the same cases.

A `Case` is a seeded module factory, its batches (the module's inputs and the labels, per
step), PyTorch's own loss on the module's outputs, and the optimizer on both sides: the
trainer's settings and the torch.optim that means the same. `torch_run` steps a copy of the
module in PyTorch (float32, or float64 for the noise floor) and `planner_run` through
`planner.torch.trainer`; both return a `Run` (each step's loss and the module's outputs, and
the state_dict after the last step), compared by `mismatches`.

Tolerance (`mismatches`): PyTorch float64 is the exact answer to float32 precision; PyTorch's
own float32 run is off it by rounding (its "noise", per tensor); the planner sums in other
orders, so its rounding is of the same size but not the same: within 10x the noise plus 16
float32 ulps of the tensor's scale (where float32 happens to be exact), as every trainer test
(tests/importers/torch_step.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.utils import prune

F = nn.functional
EPS32 = float(np.finfo(np.float32).eps)
BATCH, STEPS = 4, 3


@dataclass(frozen=True)
class Case:
    """One semantic: `make()` the module (seeded, in the modes and requires_grad the case is
    about), `batches()` the (inputs, labels) of each step, `loss(outputs, labels)`.
    `optimizer`/`lr`/`settings` are the trainer's, `reference(params)` the torch.optim meaning
    the same. `between(state)`, when given, runs after every step on the state_dict's tensors
    (PyTorch's) or arrays (the trainer's live views), in place: an EMA target network's update.
    `carry` feeds a module output of the previous step back as an input: {input index:
    output index} (a recurrent state through truncated BPTT). `unchanged` lists state_dict keys
    that must end exactly where they started (frozen parameters)."""

    name: str
    make: Callable[[], nn.Module]
    batches: Callable[[], list[tuple[tuple[Any, ...], Any]]]
    loss: Callable[[Any, Any], Any]
    optimizer: str = "sgd"
    lr: float = 0.05
    settings: Mapping[str, Any] = field(default_factory=dict)
    reference: Callable[[list[nn.Parameter]], torch.optim.Optimizer] | None = None
    between: Callable[[Mapping[str, Any]], None] | None = None
    carry: Mapping[int, int] = field(default_factory=dict)
    unchanged: tuple[str, ...] = ()

    def torch_optimizer(self, params: list[nn.Parameter]) -> torch.optim.Optimizer:
        return self.reference(params) if self.reference else torch.optim.SGD(params, lr=self.lr)


@dataclass
class Run:
    losses: list[float]
    outputs: list[list[np.ndarray]]  # per step, the module's outputs (flattened)
    state: dict[str, np.ndarray]
    # The module in eval() after the steps, on the first batch: its loss and outputs.
    evaluated: tuple[float, list[np.ndarray]] | None = None


def _flat(out: Any) -> list[Any]:
    if isinstance(out, (tuple, list)):
        return [x for o in out for x in _flat(o)]
    return [out]


def _cast(v: Any, dtype: torch.dtype) -> Any:
    return v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v


def torch_run(case: Case, dtype: torch.dtype, steps: int = STEPS,
              wrap: Callable[[nn.Module], Any] | None = None) -> Run:
    """PyTorch's own steps of a fresh module in `dtype`; with `wrap`, the module is called
    through wrap(module), the evaluation's copy too (torch.compile with a backend)."""
    model = case.make().to(dtype)
    call = model if wrap is None else wrap(model)
    opt = case.torch_optimizer(list(model.parameters()))
    losses, outputs = [], []
    previous: list[Any] = []
    for inputs, labels in case.batches()[:steps]:
        inputs = [_cast(v, dtype) for v in inputs]
        for i, o in case.carry.items():
            if previous:
                inputs[i] = previous[o].detach()
        opt.zero_grad()
        out = call(*inputs)
        value = case.loss(out, _cast(labels, dtype))
        value.backward()
        opt.step()
        if case.between is not None:
            with torch.no_grad():
                case.between(model.state_dict(keep_vars=True))
        previous = _flat(out)
        losses.append(float(value.detach()))
        outputs.append([o.detach().numpy().copy() for o in previous])
    state = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    # eval() may still write buffers: on a copy (a fresh one loaded with the state: a pruned
    # module's recomputed weight is no leaf, which deepcopy refuses)
    evaluated = case.make().to(dtype)
    evaluated.load_state_dict(model.state_dict())
    evaluated.eval()
    inputs, labels = case.batches()[0]
    with torch.no_grad():
        out = (evaluated if wrap is None else wrap(evaluated))(*[_cast(v, dtype) for v in inputs])
        value = case.loss(out, _cast(labels, dtype))
    return Run(losses, outputs, state, (float(value), [o.detach().numpy() for o in _flat(out)]))


def planner_trainer(case: Case, model: nn.Module | None = None, **kwargs: Any) -> Any:
    """`planner.torch.trainer` for the case's module (a fresh one unless given), built on its
    first batch."""
    from planner.torch import trainer

    inputs, labels = case.batches()[0]
    return trainer(case.make() if model is None else model, inputs, loss=case.loss,
                   labels=labels, optimizer=case.optimizer, lr=case.lr,
                   **{**case.settings, **kwargs})


def planner_steps(case: Case, t: Any, steps: int = STEPS) -> Run:
    """The trainer `t` stepped on the case's batches."""
    losses, outputs = [], []
    previous: list[np.ndarray] = []
    for inputs, labels in case.batches()[:steps]:
        inputs = list(inputs)
        for i, o in case.carry.items():
            if previous:
                inputs[i] = previous[o]
        loss, previous = t.step(*inputs, labels, outputs=True)
        if case.between is not None:
            case.between(t.params(copy=False))
        losses.append(loss)
        outputs.append(previous)
    state = t.params()
    inputs, labels = case.batches()[0]
    return Run(losses, outputs, state, t.evaluate(*inputs, labels))


def mismatches(ours: Run, f32: Run, f64: Run) -> list[str]:
    """What is off beyond float32 noise (module docstring): each step's loss, the module's
    outputs, and every state_dict tensor."""
    bad = []

    def compare(what: str, got: np.ndarray, t32: np.ndarray, t64: np.ndarray) -> None:
        want = np.asarray(t64, dtype=np.float64)
        noise = np.max(np.abs(np.asarray(t32, dtype=np.float64) - want), initial=0.0)
        err = np.max(np.abs(np.asarray(got, dtype=np.float64) - want), initial=0.0)
        scale = np.max(np.abs(want), initial=0.0)
        if got.shape != want.shape or not err <= 10 * noise + 16 * EPS32 * scale:
            bad.append(f"{what}: error {err:.3g}, torch float32 noise {noise:.3g}, scale "
                       f"{scale:.3g}")

    for k, (a, b, c) in enumerate(zip(ours.losses, f32.losses, f64.losses, strict=True)):
        compare(f"loss of step {k}", np.array(a), np.array(b), np.array(c))
    for k, (a, b, c) in enumerate(zip(ours.outputs, f32.outputs, f64.outputs, strict=True)):
        if len(a) != len(b):
            bad.append(f"step {k}: {len(a)} outputs, torch's {len(b)}")
            continue
        for j, (x, y, z) in enumerate(zip(a, b, c, strict=True)):
            compare(f"output {j} of step {k}", x, y, z)
    if ours.evaluated is not None and f64.evaluated is not None:
        compare("evaluate's loss", np.array(ours.evaluated[0]), np.array(f32.evaluated[0]),
                np.array(f64.evaluated[0]))
        for j, (x, y, z) in enumerate(zip(*(r.evaluated[1] for r in (ours, f32, f64)),
                                          strict=True)):
            compare(f"evaluate's output {j}", x, y, z)
    if set(ours.state) != set(f64.state):
        bad.append(f"state keys {sorted(set(ours.state) ^ set(f64.state))} differ")
    for key in sorted(set(ours.state) & set(f64.state)):
        compare(key, ours.state[key], f32.state[key], f64.state[key])
    return bad


def snapshot(model: nn.Module) -> tuple:
    """What trainer() must leave as it found it: every module's mode, every parameter's
    requires_grad, every parameter's and buffer's value."""
    return (tuple((n, m.training) for n, m in model.named_modules()),
            tuple((n, p.requires_grad) for n, p in model.named_parameters()),
            tuple((k, v.detach().numpy().tobytes()) for k, v in model.state_dict().items()))


# ---- the modules ----------------------------------------------------------------------------

def _seeded(make: Callable[[], nn.Module], seed: int = 0) -> Callable[[], nn.Module]:
    def made() -> nn.Module:
        torch.manual_seed(seed)
        return make()
    return made


def _data(*shapes: Sequence[int], classes: int | None = None,
          target: Sequence[int] | None = None, seed: int = 1,
          steps: int = STEPS) -> Callable[[], list]:
    """Per step, float inputs of `shapes` and labels: class indices (`classes`) or a float
    target of shape `target`."""
    def made() -> list:
        g = torch.Generator().manual_seed(seed)
        out = []
        for _ in range(steps):
            inputs = tuple(torch.randn(*s, generator=g) for s in shapes)
            labels = (torch.randint(0, classes, (BATCH,), generator=g) if classes
                      else torch.randn(*target, generator=g))
            out.append((inputs, labels))
        return out
    return made


def ce(out: Any, y: Any) -> Any:
    return F.cross_entropy(out, y)


def ce_first(out: Any, y: Any) -> Any:
    return F.cross_entropy(out[0], y)


class MLP(nn.Module):
    def __init__(self, n_in: int = 5, hidden: int = 6, n_out: int = 3) -> None:
        super().__init__()
        self.lin1, self.lin2 = nn.Linear(n_in, hidden), nn.Linear(hidden, n_out)

    def forward(self, x: Any) -> Any:
        return self.lin2(torch.tanh(self.lin1(x)))


class Masked(MLP):
    """A fixed mask held as a frozen Parameter (RealNVP's coupling masks), and a frozen bias."""

    def __init__(self) -> None:
        super().__init__()
        self.mask = nn.Parameter(torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0]), requires_grad=False)
        self.lin1.bias.requires_grad_(False)

    def forward(self, x: Any) -> Any:
        return super().forward(x * self.mask)


class FineTune(nn.Module):
    """A frozen backbone (requires_grad_(False)) under a trained head."""

    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 6))
        self.head = nn.Linear(6, 3)
        self.backbone.requires_grad_(False)

    def forward(self, x: Any) -> Any:
        return self.head(torch.relu(self.backbone(x)))


class FineTuneNorm(nn.Module):
    """A frozen backbone with a BatchNorm left in train(): its affine parameters stay, its
    running statistics still move (PyTorch's fine-tuning default)."""

    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(5, 6), nn.BatchNorm1d(6), nn.ReLU())
        self.head = nn.Linear(6, 3)
        self.backbone.requires_grad_(False)

    def forward(self, x: Any) -> Any:
        return self.head(self.backbone(x))


class Distill(nn.Module):
    """A student and a teacher called under torch.no_grad() (the teacher's parameters still
    require grad: the region alone keeps them out of the gradient)."""

    def __init__(self, grad_off: Callable[[], Any] = torch.no_grad) -> None:
        super().__init__()
        self.student, self.teacher = MLP(hidden=4), MLP(hidden=8)
        self.grad_off = grad_off

    def forward(self, x: Any) -> Any:
        with self.grad_off():
            target = self.teacher(x)
        return self.student(x), target.clone()  # clone: an inference tensor may not be saved


class GradBackOn(nn.Module):
    """torch.enable_grad() inside torch.no_grad(): the inner region trains, the outer not."""

    def __init__(self) -> None:
        super().__init__()
        self.student, self.teacher = MLP(hidden=4), MLP(hidden=8)

    def forward(self, x: Any) -> Any:
        with torch.no_grad():
            target = self.teacher(x)
            with torch.enable_grad():
                logits = self.student(x)
        return logits, target


def distill_loss(out: Any, y: Any) -> Any:
    student, teacher = out
    soft = F.kl_div(F.log_softmax(student / 2, -1), F.softmax(teacher / 2, -1),
                    reduction="batchmean")
    return F.cross_entropy(student, y) + soft


class PseudoLabel(nn.Module):
    """Self-training: the same network labels a weak view under no_grad and trains on a strong
    view (FixMatch, mean-teacher targets)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = MLP()

    def forward(self, weak: Any, strong: Any) -> Any:
        with torch.no_grad():
            target = torch.softmax(self.net(weak), -1)
        return self.net(strong), target


def pseudo_loss(out: Any, y: Any) -> Any:
    logits, target = out
    return F.cross_entropy(logits, y) - (target * F.log_softmax(logits, -1)).sum(-1).mean()


class EvalNorm(nn.Module):
    """A BatchNorm left in eval() inside a training module: it normalises with its running
    statistics and updates nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.lin1, self.norm, self.lin2 = nn.Linear(5, 6), nn.BatchNorm1d(6), nn.Linear(6, 3)
        with torch.no_grad():
            self.norm.running_mean.copy_(torch.randn(6) * 0.3)
            self.norm.running_var.copy_(torch.rand(6) + 0.5)

    def forward(self, x: Any) -> Any:
        return self.lin2(torch.relu(self.norm(self.lin1(x))))


def _eval_norm() -> nn.Module:
    model = EvalNorm().train()
    model.norm.eval()
    return model


class Centered(nn.Module):
    """DINO's centre and a gain, reassigned in forward (`self.b = f(self.b)`); the gain's old
    value is what the backward pass reads."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(5, 3)
        self.register_buffer("center", torch.zeros(3))
        self.register_buffer("gain", torch.ones(3))

    def forward(self, x: Any) -> Any:
        out = self.lin(x)
        centered = (out - self.center) * self.gain
        self.center = self.center * 0.9 + out.detach().mean(0) * 0.1
        self.gain = self.gain * 0.5 + out.detach().abs().mean(0) * 0.5
        return centered


class InPlace(nn.Module):
    """Buffers updated in place: a running mean of the input (mul_ / add_), read after it
    changed, a last-batch statistic (copy_) and a float step count (add_)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(5, 3)
        self.register_buffer("running", torch.zeros(5))
        self.register_buffer("last", torch.zeros(3))
        self.register_buffer("seen", torch.zeros(()))

    def forward(self, x: Any) -> Any:
        with torch.no_grad():
            self.running.mul_(0.9).add_(0.1 * x.mean(0))
            self.seen.add_(1.0)
        out = self.lin(x - self.running)
        self.last.copy_(out.detach().mean(0))
        return out


class Siamese(nn.Module):
    """One BatchNorm called twice per step (a Siamese tower): its running statistics are
    updated once per call, in call order, and num_batches_tracked counts both."""

    def __init__(self) -> None:
        super().__init__()
        self.lin, self.norm, self.head = nn.Linear(5, 6), nn.BatchNorm1d(6), nn.Linear(6, 3)

    def tower(self, x: Any) -> Any:
        return self.head(torch.relu(self.norm(self.lin(x))))

    def forward(self, a: Any, b: Any) -> Any:
        return self.tower(a) - 0.5 * self.tower(b)


class Tied(nn.Module):
    """An embedding and the output layer sharing one weight."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(7, 4)
        self.out = nn.Linear(4, 7, bias=False)
        self.out.weight = self.emb.weight

    def forward(self, idx: Any) -> Any:
        return self.out(torch.tanh(self.emb(idx).mean(1)))


def _tokens() -> list:
    g = torch.Generator().manual_seed(1)
    return [((torch.randint(0, 7, (BATCH, 3), generator=g),),
             torch.randint(0, 7, (BATCH,), generator=g)) for _ in range(STEPS)]


class Detached(nn.Module):
    """`.detach()`: the second layer trains on the first's output without training it."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(5, 4), nn.Linear(4, 3)
        self.c = nn.Linear(5, 3)

    def forward(self, x: Any) -> Any:
        return self.b(torch.tanh(self.a(x)).detach()) + self.c(x) + self.a(x)[:, :3]


class StraightThrough(nn.Module):
    """A straight-through estimator: rounded forward, identity gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(5, 4), nn.Linear(4, 3)

    def forward(self, x: Any) -> Any:
        h = self.a(x)
        q = h + (torch.round(h * 4) / 4 - h).detach()
        return self.b(q)


class Cell(nn.Module):
    """A recurrent cell with two states, (x, h, c) -> (y, h', c')."""

    def __init__(self) -> None:
        super().__init__()
        self.wx, self.wh, self.wc = nn.Linear(5, 4), nn.Linear(4, 4), nn.Linear(4, 4)
        self.out = nn.Linear(4, 3)

    def forward(self, x: Any, h: Any, c: Any) -> Any:
        c2 = torch.sigmoid(self.wc(c)) * c + torch.tanh(self.wx(x))
        h2 = torch.tanh(self.wh(h) + c2)
        return self.out(h2), h2, c2


def _same_state_twice() -> list:
    """The first step's h and c are one tensor (`(x, h0, h0)`); later steps feed two."""
    g = torch.Generator().manual_seed(1)
    h0 = torch.randn(BATCH, 4, generator=g)
    out = [((torch.randn(BATCH, 5, generator=g), h0, h0),
            torch.randint(0, 3, (BATCH,), generator=g))]
    for _ in range(STEPS - 1):
        out.append(((torch.randn(BATCH, 5, generator=g), torch.randn(BATCH, 4, generator=g),
                     torch.randn(BATCH, 4, generator=g)),
                    torch.randint(0, 3, (BATCH,), generator=g)))
    return out


class Teacher(nn.Module):
    """A student and an EMA teacher (a target network): the teacher is frozen and labels under
    no_grad; `ema` moves it toward the student after each step."""

    def __init__(self) -> None:
        super().__init__()
        self.student, self.teacher = MLP(), MLP()
        self.teacher.load_state_dict(self.student.state_dict())
        self.teacher.requires_grad_(False)

    def forward(self, x: Any) -> Any:
        with torch.no_grad():
            target = self.teacher(x)
        return self.student(x), target


def ema(state: Mapping[str, Any], momentum: float = 0.8) -> None:
    for key in [k for k in state if k.startswith("teacher.")]:
        student = state["student." + key.removeprefix("teacher.")]
        state[key][...] = state[key] * momentum + student * (1 - momentum)


def teacher_loss(out: Any, y: Any) -> Any:
    return F.cross_entropy(out[0], y) + F.mse_loss(out[0], out[1])


class TeacherInForward(Teacher):
    """The EMA update written in forward under no_grad (frozen parameters written in place)."""

    def forward(self, x: Any) -> Any:
        with torch.no_grad():
            for t, s in zip(self.teacher.parameters(), self.student.parameters(), strict=True):
                t.mul_(0.8).add_(0.2 * s)
            target = self.teacher(x)
        return self.student(x), target


def _hooked() -> nn.Module:
    """Forward hooks, which torch.export runs while tracing: a pre-hook scaling the input of
    a layer and a hook adding to its output."""
    model = MLP()
    model.lin1.register_forward_pre_hook(lambda m, args: (args[0] * 0.5,))
    model.lin2.register_forward_hook(lambda m, args, out: out + 0.1 * args[0][:, :3])
    return model


def _pruned() -> nn.Module:
    """torch.nn.utils.prune: the weight recomputed by a forward pre-hook as `weight_orig *
    weight_mask` (how PyTorch masks a gradient without a tensor hook)."""
    model = MLP()
    prune.l1_unstructured(model.lin1, "weight", amount=0.5)
    return model


class RunningStats(nn.Module):
    """A hand-written normaliser between two layers: running statistics of the first layer's
    output written in place under a no-gradient region (`spelling`: lerp_, mul_/add_/addcmul_,
    copy_, an indexed write, fill_ with a tensor), then read after the write. PyTorch's read
    sees the new value and no gradient reaches the first layer through the update."""

    def __init__(self, spelling: str, grad_off: Callable[[], Any] = torch.no_grad) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(5, 4), nn.Linear(4, 3)
        self.register_buffer("mean", torch.zeros(4))
        self.register_buffer("sq", torch.ones(4))
        self.register_buffer("scale", torch.ones(()))
        self.spelling, self.grad_off = spelling, grad_off

    def update(self, h: Any) -> None:
        m, mean, sq = 0.3, h.mean(0), (h * h).mean(0)
        if self.spelling == "lerp_":
            self.mean.lerp_(mean, m)
            self.sq.lerp_(sq, m)
        elif self.spelling == "mul_add_":
            self.mean.mul_(1 - m).add_(mean, alpha=m)
            self.sq.mul_(1 - m).addcmul_(mean, mean, value=m).add_(h.var(0), alpha=m)
        elif self.spelling == "copy_":
            self.mean.copy_(self.mean * (1 - m) + mean * m)
            self.sq.copy_(self.sq * (1 - m) + sq * m)
        elif self.spelling == "indexed":
            self.mean[:] = self.mean * (1 - m) + mean * m
            self.sq[1:] = self.sq[1:] * (1 - m) + sq[1:] * m
        elif self.spelling == "fill_":
            self.scale.fill_(h.abs().mean() + 0.5)

    def forward(self, x: Any) -> Any:
        h = torch.tanh(self.a(x))
        with self.grad_off():
            self.update(h)
        var = (self.sq - self.mean ** 2).clamp_min(1e-2)
        return self.b((h - self.mean) / var.sqrt() / self.scale)


class DecoratedStats(RunningStats):
    """The update as a method under `@torch.no_grad()`."""

    @torch.no_grad()
    def update(self, h: Any) -> None:
        super().update(h)

    def forward(self, x: Any) -> Any:
        h = torch.tanh(self.a(x))
        self.update(h)
        var = (self.sq - self.mean ** 2).clamp_min(1e-2)
        return self.b((h - self.mean) / var.sqrt() / self.scale)


class BatchStatistics(nn.Module):
    """BatchNorm with track_running_stats=False (batch statistics in train() and eval() alike,
    no buffers), over (N, C) and over (N, C, H, W); `momentum`: the first BatchNorm's instead
    (None: the cumulative moving average)."""

    def __init__(self, momentum: float | None = 0.1, track: bool = False) -> None:
        super().__init__()
        self.lin = nn.Linear(5, 8)
        self.norm1 = nn.BatchNorm1d(8, momentum=momentum, track_running_stats=track)
        self.norm2 = nn.BatchNorm2d(2, track_running_stats=False)
        self.head = nn.Linear(8, 3)

    def forward(self, x: Any) -> Any:
        h = torch.relu(self.norm1(self.lin(x)))
        h = self.norm2(h.reshape(-1, 2, 2, 2)).reshape(-1, 8)
        return self.head(torch.tanh(h))


MLP_DATA = _data((BATCH, 5), classes=3)
FROZEN_TEACHER = tuple(f"teacher.{k}" for k in ("lin1.weight", "lin1.bias", "lin2.weight",
                                                "lin2.bias"))

CASES: tuple[Case, ...] = (
    Case("frozen_parameter", _seeded(Masked), MLP_DATA, ce, optimizer="adamw", lr=0.01,
         settings={"weight_decay": 0.1},
         reference=lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1),
         unchanged=("mask", "lin1.bias")),
    Case("frozen_submodule", _seeded(FineTune), MLP_DATA, ce,
         unchanged=("backbone.0.weight", "backbone.0.bias", "backbone.2.weight",
                    "backbone.2.bias")),
    Case("frozen_backbone_with_batchnorm", _seeded(FineTuneNorm), MLP_DATA, ce,
         unchanged=("backbone.0.weight", "backbone.0.bias", "backbone.1.weight",
                    "backbone.1.bias")),
    Case("no_grad_teacher", _seeded(Distill), MLP_DATA, distill_loss,
         unchanged=FROZEN_TEACHER),
    Case("inference_mode_teacher", _seeded(lambda: Distill(torch.inference_mode)), MLP_DATA,
         distill_loss, unchanged=FROZEN_TEACHER),
    Case("set_grad_enabled_teacher",
         _seeded(lambda: Distill(lambda: torch.set_grad_enabled(False))), MLP_DATA,
         distill_loss, unchanged=FROZEN_TEACHER),
    Case("enable_grad_inside_no_grad", _seeded(GradBackOn), MLP_DATA, distill_loss,
         unchanged=FROZEN_TEACHER),
    Case("no_grad_pseudo_label", _seeded(PseudoLabel), _data((BATCH, 5), (BATCH, 5),
                                                              classes=3), pseudo_loss),
    Case("eval_submodule", _seeded(_eval_norm), MLP_DATA, ce,
         unchanged=("norm.running_mean", "norm.running_var", "norm.num_batches_tracked")),
    Case("reassigned_buffer", _seeded(Centered), _data((BATCH, 5), target=(BATCH, 3)),
         lambda out, y: F.mse_loss(out, y)),
    Case("in_place_buffer", _seeded(InPlace), _data((BATCH, 5), target=(BATCH, 3)),
         lambda out, y: F.mse_loss(out, y)),
    Case("batchnorm_twice", _seeded(Siamese), _data((BATCH, 5), (BATCH, 5), classes=3), ce),
    Case("tied_weights", _seeded(Tied), _tokens, ce),
    Case("detach", _seeded(Detached), MLP_DATA, ce),
    Case("straight_through", _seeded(StraightThrough), MLP_DATA, ce),
    Case("duplicate_example_inputs", _seeded(Cell), _same_state_twice, ce_first),
    Case("step_outputs", _seeded(Cell), _same_state_twice, ce_first, carry={1: 1, 2: 2}),
    Case("ema_target_network", _seeded(Teacher), MLP_DATA, teacher_loss, between=ema),
    Case("ema_in_forward", _seeded(TeacherInForward), MLP_DATA, teacher_loss),
    Case("forward_hooks", _seeded(_hooked), MLP_DATA, ce),
    *(Case(f"running_stats_{spelling}", _seeded(lambda s=spelling: RunningStats(s)), MLP_DATA,
           ce) for spelling in ("lerp_", "mul_add_", "copy_", "indexed", "fill_")),
    Case("running_stats_decorated", _seeded(lambda: DecoratedStats("lerp_")), MLP_DATA, ce),
    Case("running_stats_inference_mode",
         _seeded(lambda: RunningStats("mul_add_", torch.inference_mode)), MLP_DATA, ce),
    Case("running_stats_set_grad_enabled",
         _seeded(lambda: RunningStats("copy_", lambda: torch.set_grad_enabled(False))),
         MLP_DATA, ce),
    Case("pruned", _seeded(_pruned), MLP_DATA, ce, unchanged=("lin1.weight_mask",)),
    Case("batchnorm_batch_statistics", _seeded(BatchStatistics), MLP_DATA, ce),
)
BY_NAME = {c.name: c for c in CASES}
