"""A sweep of fresh training programs, written the way users write them, each run for a few
steps through both entry points (planner.torch.trainer and torch.compile(model,
backend="planner")) against eager PyTorch, and classified:

    MATCH    every step's loss within 1e-4 relative of PyTorch float32's, and every
             parameter (and buffer, the user's EMA, the eval() validation loss where the
             program has them) within 10x PyTorch's own float32 error (|float32 - float64|,
             float64 the exact answer) plus 16 float32 ulps of the tensor's scale: the
             planner rounds in other orders, so its error is of PyTorch's size, not its bits
             (the bound of every trainer test, tests/importers/torch_step.py)
    REFUSED  an error in one line naming what is not built (or, through the backend, a
             PlannerFallback warning: that piece ran eager, said in one line)
    WRONG    anything else: a result off that bound, or an error that is not one line

    PYTHONPATH=. python bench/semantics_sweep.py [--only NAME,...] [--steps N]

prints the table (program x entry point -> verdict, max relative error: the largest
|ours - float64| / max|float64| over the compared tensors, beside PyTorch float32's own).
Dropout draws from the planner's generator, not torch's (docs/pytorch.md): the dropout
program's PyTorch runs draw the planner's masks (planner/ops/dropout.py, the k-th Dropout
of the graph seeded k, anew each training step), so the comparison is exact there too.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

F = nn.functional
EPS32 = float(np.finfo(np.float32).eps)
BATCH = 8


@dataclass(frozen=True)
class Program:
    """One user's training program: `make()` the module (seeded), `data(g)` one micro-batch
    ((inputs...), labels), `loss(outputs, labels)`, `optimizer(module)` and `scheduler(opt)`
    made before training; `clip` clip_grad_norm_'s max_norm, `accumulate` micro-batches per
    optimizer step, `ema` the decay of a weight average the user keeps, `validate` an eval()
    pass on the first batch after training, `adjust(opt, k)` a write of the user's to the
    optimizer after its k-th step."""

    name: str
    make: Callable[[], nn.Module]
    data: Callable[[torch.Generator], tuple[tuple[Any, ...], Any]]
    loss: Callable[[Any, Any], Any]
    optimizer: Callable[[nn.Module], torch.optim.Optimizer]
    scheduler: Callable[[torch.optim.Optimizer], Any] | None = None
    clip: float | None = None
    accumulate: int = 1
    ema: float | None = None
    validate: bool = False
    dropout: tuple[float, ...] = ()  # the rates of its Dropouts, in forward order
    # the user's own write to the optimizer after optimizer step k (k from 0), by hand
    adjust: Callable[[torch.optim.Optimizer, int], None] | None = None

    def batches(self, steps: int) -> list[tuple[tuple[Any, ...], Any]]:
        g = torch.Generator().manual_seed(1)
        return [self.data(g) for _ in range(steps * self.accumulate)]


@dataclass
class Outcome:
    """One run: each micro-step's loss, the state_dict, the EMA, the eval() loss."""

    losses: list[float]
    state: dict[str, np.ndarray]
    ema: dict[str, np.ndarray] = field(default_factory=dict)
    validation: float | None = None


# ---- the programs' modules, losses and data ----------------------------------------------------

def seeded(make: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    """`make` with torch's seed set first, the module in train() mode."""

    def made() -> nn.Module:
        torch.manual_seed(0)
        return make().train()
    return made


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(4, 8, 3), nn.ReLU())
        self.head = nn.Linear(8 * 2 * 2, 5)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


class TinyLM(nn.Module):
    """A causal one-layer transformer language model, as nanoGPT-style scripts write it."""

    def __init__(self, vocab: int = 17, width: int = 16, length: int = 6) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Parameter(0.02 * torch.randn(1, length, width))
        self.block = nn.TransformerEncoderLayer(width, 2, 32, dropout=0.0, batch_first=True,
                                                norm_first=True)
        self.norm = nn.LayerNorm(width)
        self.out = nn.Linear(width, vocab)
        self.register_buffer("causal", nn.Transformer.generate_square_subsequent_mask(length))

    def forward(self, idx):
        h = self.tokens(idx) + self.positions
        return self.out(self.norm(self.block(h, src_mask=self.causal)))


def lm_loss(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


class AutoEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encode = nn.Sequential(nn.Linear(12, 6), nn.Tanh(), nn.Linear(6, 3))
        self.decode = nn.Sequential(nn.Linear(3, 6), nn.Tanh(), nn.Linear(6, 12))

    def forward(self, x):
        return self.decode(self.encode(x))


class Siamese(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 4))

    def forward(self, a, b):
        return self.embed(a), self.embed(b)


def contrastive(out, same, margin: float = 1.0):
    d = F.pairwise_distance(*out)
    return (same * d.pow(2) + (1 - same) * F.relu(margin - d).pow(2)).mean()


class MultiTask(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(9, 16), nn.GELU())
        self.classify = nn.Linear(16, 4)
        self.regress = nn.Linear(16, 1)

    def forward(self, x):
        h = self.trunk(x)
        return self.classify(h), self.regress(h).squeeze(-1)


def multitask_loss(out, y):  # y: 4 class probabilities, then the regression target
    logits, value = out
    return F.cross_entropy(logits, y[:, :4]) + 0.5 * F.mse_loss(value, y[:, 4])


class FrozenEmbedding(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(30, 8)
        self.embedding.weight.requires_grad_(False)  # pretrained, frozen
        self.head = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3))

    def forward(self, idx):
        return self.head(self.embedding(idx).mean(1))


class TabularMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(14, 32), nn.ReLU(), nn.Dropout(0.2),
                                 nn.Linear(32, 16), nn.ReLU(), nn.Dropout(0.1),
                                 nn.Linear(16, 2))

    def forward(self, x):
        return self.net(x)


def _decay_groups(model: nn.Module, lr: float = 0.01) -> torch.optim.Optimizer:
    decay = [p for n, p in model.named_parameters() if p.ndim > 1]
    no_decay = [p for n, p in model.named_parameters() if p.ndim <= 1]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.05},
                              {"params": no_decay, "weight_decay": 0.0}], lr=lr)


def _mlp(width_in: int = 10, classes: int = 3) -> nn.Module:
    return nn.Sequential(nn.Linear(width_in, 16), nn.ReLU(), nn.Linear(16, classes))


class VAE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(12, 16), nn.ReLU())
        self.mu, self.logvar = nn.Linear(16, 3), nn.Linear(16, 3)
        self.decoder = nn.Sequential(nn.Linear(3, 16), nn.ReLU(), nn.Linear(16, 12))

    def forward(self, x, eps):  # the noise fed in: reproducible on both sides
        h = self.encoder(x)
        mu, logvar = self.mu(h), self.logvar(h)
        z = mu + torch.exp(0.5 * logvar) * eps
        return self.decoder(z), mu, logvar


def vae_loss(out, x):
    recon, mu, logvar = out
    kl = -0.5 * torch.mean(torch.sum(1 + logvar - mu.pow(2) - logvar.exp(), dim=1))
    return F.mse_loss(recon, x, reduction="sum") / x.shape[0] + kl


class Mixup(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = _mlp(10, 4)

    def forward(self, x, shuffled, lam):  # lam (batch, 1) drawn by the data loader
        return self.net(lam * x + (1 - lam) * shuffled)


def soft_ce(logits, probabilities):
    return F.cross_entropy(logits, probabilities)


def focal(logits, y, gamma: float = 2.0):
    ce = F.cross_entropy(logits, y, reduction="none")
    return ((1 - torch.exp(-ce)) ** gamma * ce).mean()


class NormMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(10, 16), nn.BatchNorm1d(16), nn.ReLU(),
                                 nn.Linear(16, 3))

    def forward(self, x):
        return self.net(x)


def _classes(g, width: int = 10, classes: int = 3):
    return (torch.randn(BATCH, width, generator=g),), torch.randint(0, classes, (BATCH,),
                                                                    generator=g)


def _lm_data(g):
    seq = torch.randint(0, 17, (BATCH, 7), generator=g)
    return (seq[:, :-1],), seq[:, 1:]


def _pairs(g):
    a, b = torch.randn(BATCH, 10, generator=g), torch.randn(BATCH, 10, generator=g)
    same = (torch.rand(BATCH, generator=g) < 0.5).float()
    return (a, torch.where(same[:, None] > 0, a + 0.1 * b, b)), same


def _multitask_data(g):
    x = torch.randn(BATCH, 9, generator=g)
    probs = F.one_hot(torch.randint(0, 4, (BATCH,), generator=g), 4).float()
    return (x,), torch.cat([probs, torch.randn(BATCH, 1, generator=g)], 1)


def _mixup_data(g):
    x = torch.randn(BATCH, 10, generator=g)
    y = F.one_hot(torch.randint(0, 4, (BATCH,), generator=g), 4).float()
    perm = torch.randperm(BATCH, generator=g)
    lam = torch.rand(BATCH, 1, generator=g)  # the loader's draw (Beta(a, a) in the paper)
    return (x, x[perm], lam), lam * y + (1 - lam) * y[perm]


def _vae_data(g):
    x = torch.randn(BATCH, 12, generator=g)
    return (x, torch.randn(BATCH, 3, generator=g)), x


def _warmup(opt, steps: int = 3):
    return torch.optim.lr_scheduler.LambdaLR(opt, lambda k: min(1.0, (k + 1) / steps))


PROGRAMS = [
    Program("cnn_onecycle_nesterov", seeded(SmallCNN),
            lambda g: ((torch.randn(BATCH, 1, 8, 8, generator=g),),
                       torch.randint(0, 5, (BATCH,), generator=g)),
            F.cross_entropy,
            lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, nesterov=True),
            lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.1, total_steps=20)),
    Program("lm_adamw_warmup_clip", seeded(TinyLM), _lm_data, lm_loss,
            lambda m: torch.optim.AdamW(m.parameters(), lr=3e-3, betas=(0.9, 0.95),
                                        weight_decay=0.1),
            _warmup, clip=1.0),
    Program("autoencoder_mse", seeded(AutoEncoder),
            lambda g: (lambda x: ((x,), x))(torch.randn(BATCH, 12, generator=g)), F.mse_loss,
            lambda m: torch.optim.Adam(m.parameters(), lr=0.01)),
    Program("siamese_contrastive", seeded(Siamese), _pairs, contrastive,
            lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.5)),
    Program("multitask_two_losses", seeded(MultiTask), _multitask_data, multitask_loss,
            lambda m: torch.optim.Adam(m.parameters(), lr=0.01)),
    Program("frozen_embedding_head", seeded(FrozenEmbedding),
            lambda g: ((torch.randint(0, 30, (BATCH, 5), generator=g),),
                       torch.randint(0, 3, (BATCH,), generator=g)),
            F.cross_entropy,
            lambda m: torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=0.1,
                                      momentum=0.9)),
    Program("tabular_dropout_decay_groups", seeded(TabularMLP),
            lambda g: _classes(g, 14, 2), F.cross_entropy, _decay_groups, dropout=(0.2, 0.1)),
    Program("label_smoothing_ce", seeded(lambda: _mlp()), _classes,
            lambda out, y: F.cross_entropy(out, y, label_smoothing=0.1),
            lambda m: torch.optim.SGD(m.parameters(), lr=0.1)),
    Program("grad_accumulation_4", seeded(lambda: _mlp()), _classes, F.cross_entropy,
            lambda m: torch.optim.Adam(m.parameters(), lr=0.01), accumulate=4),
    Program("steplr_momentum", seeded(lambda: _mlp()), _classes, F.cross_entropy,
            lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9,
                                      weight_decay=1e-3),
            lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5)),
    Program("user_ema_of_weights", seeded(lambda: _mlp()), _classes, F.cross_entropy,
            lambda m: torch.optim.SGD(m.parameters(), lr=0.1), ema=0.9),
    Program("vae_fed_noise", seeded(VAE), _vae_data, vae_loss,
            lambda m: torch.optim.Adam(m.parameters(), lr=3e-3)),
    Program("mixup_fed_lambda", seeded(Mixup), _mixup_data, soft_ce,
            lambda m: torch.optim.SGD(m.parameters(), lr=0.1)),
    Program("focal_loss", seeded(lambda: _mlp()), _classes, focal,
            lambda m: torch.optim.Adam(m.parameters(), lr=0.01)),
    Program("batchnorm_mlp_eval_validation", seeded(NormMLP), _classes, F.cross_entropy,
            lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9), validate=True),
    Program("adamw_onecycle_betas", seeded(lambda: _mlp()), _classes, F.cross_entropy,
            lambda m: torch.optim.AdamW(m.parameters(), lr=0.01),
            lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.02, total_steps=20)),
]


def _momentum_by_hand(opt: torch.optim.Optimizer, k: int) -> None:
    for group in opt.param_groups:  # a hand-written momentum warmup
        group["momentum"] = min(0.9, 0.5 + 0.1 * (k + 1))


PROGRAMS += [
    Program("cycliclr_sgd_momentum", seeded(lambda: _mlp()), _classes, F.cross_entropy,
            lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9),
            lambda o: torch.optim.lr_scheduler.CyclicLR(o, base_lr=0.01, max_lr=0.1,
                                                        step_size_up=2)),
    Program("momentum_set_by_hand", seeded(lambda: _mlp()), _classes, F.cross_entropy,
            lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.5),
            adjust=_momentum_by_hand),
]
BY_NAME = {p.name: p for p in PROGRAMS}


# ---- the runs ----------------------------------------------------------------------------------

class PlannerMaskDropout(nn.Module):
    """nn.Dropout drawing the planner's mask (seed `seed`, anew each training step), so that
    PyTorch's run of a dropout program can be compared bit-for-bit in distribution."""

    def __init__(self, rate: float, seed: int, clock: list[int]) -> None:
        super().__init__()
        self.rate, self.seed, self.clock = rate, seed, clock

    def forward(self, x):
        from planner.ops.dropout import dropout_mask, step_seed

        if not self.training:
            return x
        keep = dropout_mask(step_seed(self.seed, self.clock[0]), x.numel(), self.rate)
        return x * torch.from_numpy(keep.reshape(x.shape)).to(x.dtype) / (1.0 - self.rate)


def _planner_masks(model: nn.Module) -> list[int]:
    """Swap each nn.Dropout of `model` for PlannerMaskDropout (seeds 1, 2, ... in module
    order, which is the forward order of the programs here); returns the step clock."""
    clock = [0]
    seed = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Dropout):
                seed += 1
                setattr(parent, name, PlannerMaskDropout(child.p, seed, clock))
    return clock


def _cast(v: Any, dtype: torch.dtype) -> Any:
    return v.to(dtype) if torch.is_tensor(v) and v.is_floating_point() else v


def eager(program: Program, steps: int, dtype: torch.dtype,
          wrap: Callable[[nn.Module], Any] | None = None, first_draw: int = 0) -> Outcome:
    """The program's own loop in PyTorch (`dtype`), the module called through wrap(module)
    when given (torch.compile with the planner's backend: its own Dropout); without, a
    Dropout draws the planner's masks, the first step's at step `first_draw`."""
    model = program.make().to(dtype)
    clock = _planner_masks(model) if program.dropout and wrap is None else [0]
    clock[0] = first_draw
    call = model if wrap is None else wrap(model)
    opt = program.optimizer(model)
    sched = program.scheduler(opt) if program.scheduler else None
    ema = {k: v.detach().clone() for k, v in model.state_dict().items()}
    losses = []
    for k, (inputs, labels) in enumerate(program.batches(steps)):
        value = program.loss(call(*(_cast(v, dtype) for v in inputs)), _cast(labels, dtype))
        (value / program.accumulate).backward()
        losses.append(float(value.detach()))
        if (k + 1) % program.accumulate:
            continue
        if program.clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), program.clip)
        opt.step()
        opt.zero_grad()
        clock[0] += 1
        if sched is not None:
            sched.step()
        if program.adjust is not None:
            program.adjust(opt, (k + 1) // program.accumulate - 1)
        if program.ema is not None:
            with torch.no_grad():
                for key, v in model.state_dict().items():
                    ema[key].mul_(program.ema).add_(v, alpha=1 - program.ema)
    out = Outcome(losses, {k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
    if program.ema is not None:
        out.ema = {k: v.numpy().copy() for k, v in ema.items()}
    if program.validate:
        model.eval()
        inputs, labels = program.batches(1)[0]
        with torch.no_grad():
            out.validation = float(program.loss(call(*(_cast(v, dtype) for v in inputs)),
                                                _cast(labels, dtype)))
    return out


def through_trainer(program: Program, steps: int, out_dir: Path) -> Outcome:
    """The program as a planner.torch.trainer script: the same optimizer and scheduler
    objects, the user's EMA over t.params(), t.evaluate for the validation."""
    from planner.torch import trainer

    model = program.make()
    opt = program.optimizer(model)
    sched = program.scheduler(opt) if program.scheduler else None
    batches = program.batches(steps)
    settings = {"clip_grad_norm": program.clip} if program.clip is not None else {}
    t = trainer(model, batches[0][0], loss=program.loss, labels=batches[0][1], optimizer=opt,
                costs="analytical", out_dir=out_dir, accumulate=program.accumulate,
                **settings)
    ema = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    losses = []
    for k, (inputs, labels) in enumerate(batches):
        losses.append(t.step(*inputs, labels))
        if (k + 1) % program.accumulate:
            continue
        if sched is not None:
            sched.step()
        if program.adjust is not None:
            program.adjust(opt, (k + 1) // program.accumulate - 1)
        if program.ema is not None:
            for key, v in t.params(copy=False).items():
                ema[key] = program.ema * ema[key] + (1 - program.ema) * v
    out = Outcome(losses, t.params())
    if program.ema is not None:
        out.ema = ema
    if program.validate:
        inputs, labels = batches[0]
        out.validation = t.evaluate(*inputs, labels)[0]
    return out


def through_backend(program: Program, steps: int) -> Outcome:
    """The program's own PyTorch loop with the module compiled by the planner's backend."""
    import planner.torch  # noqa: F401  (registers the backend)

    torch._dynamo.reset()
    return eager(program, steps, torch.float32,
                 wrap=lambda m: torch.compile(m, backend="planner",
                                              options={"costs": "analytical"}))


# ---- the verdicts ------------------------------------------------------------------------------

def compare(ours: Outcome, f32: Outcome, f64: Outcome) -> tuple[list[str], float, float]:
    """(what is off beyond float32 noise, ours' max relative error, PyTorch float32's)."""
    bad = []
    for k, (a, b) in enumerate(zip(ours.losses, f32.losses, strict=True)):
        if not abs(a - b) <= 1e-4 * abs(b) + 1e-7:
            bad.append(f"step {k} loss {a:.7g} vs torch {b:.7g}")
    worst = noise_worst = 0.0
    for prefix, mine, theirs32, theirs64 in (("", ours.state, f32.state, f64.state),
                                             ("ema ", ours.ema, f32.ema, f64.ema)):
        for name in sorted(theirs64):
            if name not in mine:
                bad.append(f"{prefix}{name} missing")
                continue
            want = theirs64[name].astype(np.float64)
            got = np.asarray(mine[name], np.float64)
            if want.dtype.kind != "f" or not want.size:
                continue
            finite = np.isfinite(want)  # a mask buffer's -inf: equal, not near
            if not np.array_equal(got[~finite], want[~finite]):
                bad.append(f"{prefix}{name}: its non-finite entries differ")
            want, got, mine32 = want[finite], got[finite], theirs32[name][finite]
            if not want.size:
                continue
            noise = np.max(np.abs(mine32 - want))
            err = np.max(np.abs(got - want))
            scale = max(np.max(np.abs(want)), 1e-30)
            worst, noise_worst = max(worst, err / scale), max(noise_worst, noise / scale)
            if not err <= 10 * noise + 16 * EPS32 * scale:
                bad.append(f"{prefix}{name}: error {err:.3g}, torch float32 noise {noise:.3g}")
    if f64.validation is not None:
        v = ours.validation
        if v is None or not abs(v - f32.validation) <= 1e-4 * abs(f32.validation):
            bad.append(f"eval() loss {v} vs torch {f32.validation}")
    return bad, worst, noise_worst


@dataclass
class Verdict:
    program: str
    entry: str
    verdict: str  # MATCH | REFUSED | WRONG
    error: float | None  # max relative error against float64
    noise: float | None  # PyTorch float32's own
    detail: str
    seconds: float


def _run(entry: str, run: Callable[[], Outcome], f32: Outcome, f64: Outcome,
         program: str) -> Verdict:
    from planner.torch.piece import PlannerFallback

    start = time.perf_counter()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", PlannerFallback)
            ours = run()
    except Exception as e:  # noqa: BLE001 - classified: one line is a refusal
        text = f"{type(e).__name__}: {e}"
        one_line = "\n" not in str(e).strip() and len(str(e)) < 600
        return Verdict(program, entry, "REFUSED" if one_line else "WRONG", None, None,
                       text.splitlines()[0][:300] if text else "", time.perf_counter() - start)
    fell_back = [str(w.message) for w in caught if issubclass(w.category, PlannerFallback)]
    bad, worst, noise = compare(ours, f32, f64)
    if bad:
        verdict, detail = "WRONG", "; ".join(bad[:3])
    elif fell_back:
        verdict, detail = "REFUSED", "fell back to eager: " + fell_back[0].splitlines()[0][:250]
    else:
        verdict, detail = "MATCH", ""
    return Verdict(program, entry, verdict, worst, noise, detail, time.perf_counter() - start)


def sweep(names: list[str] | None = None, steps: int = 4, out_dir: Path | None = None,
          entries: tuple[str, ...] = ("trainer", "compile")) -> list[Verdict]:
    """Every program (or those named) through each entry point, against eager PyTorch."""
    out_dir = Path(out_dir or tempfile.mkdtemp(prefix="semantics-sweep-"))
    verdicts = []
    for program in (BY_NAME[n] for n in names) if names else PROGRAMS:
        f32 = eager(program, steps, torch.float32)
        f64 = eager(program, steps, torch.float64)
        runs = {"trainer": lambda p=program: through_trainer(p, steps, out_dir / p.name),
                "compile": lambda p=program: through_backend(p, steps)}
        for entry in entries:
            refs = (f32, f64)
            if entry == "compile" and program.dropout:
                refs = _backend_draws(program, steps)
            verdicts.append(_run(entry, runs[entry], *refs, program.name))
            print(_row(verdicts[-1]), file=sys.stderr, flush=True)
    return verdicts


def _backend_draws(program: Program, steps: int) -> tuple[Outcome, Outcome]:
    """PyTorch float32 and float64 runs drawing the masks the backend's next calls will: its
    Dropouts draw at the process's count of drawing calls (planner/torch/executors.py,
    RNG_STEP), one per forward call, each piece's seeded 1, 2, ... in graph order."""
    from planner.torch import executors

    first = next(executors._DRAWS) + 1  # the count the next compiled forward call takes
    return (eager(program, steps, torch.float32, first_draw=first),
            eager(program, steps, torch.float64, first_draw=first))


def _row(v: Verdict) -> str:
    err = "-" if v.error is None else f"{v.error:.2e}"
    noise = "-" if v.noise is None else f"{v.noise:.2e}"
    return (f"| {v.program} | {v.entry} | {v.verdict} | {err} | {noise} | {v.seconds:.0f} | "
            f"{v.detail} |")


def table(verdicts: list[Verdict]) -> str:
    head = ("| program | entry point | verdict | max rel. error | torch f32 rel. error | s | "
            "detail |\n|---|---|---|---|---|---|---|")
    return "\n".join([head, *(_row(v) for v in verdicts)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated program names")
    parser.add_argument("--steps", type=int, default=4, help="optimizer steps per program")
    parser.add_argument("--entry", choices=("trainer", "compile", "both"), default="both")
    args = parser.parse_args(argv)
    names = [n for n in args.only.split(",") if n]
    for n in names:
        if n not in BY_NAME:
            parser.error(f"--only: no program {n!r} (one of {', '.join(BY_NAME)})")
    entries = ("trainer", "compile") if args.entry == "both" else (args.entry,)
    verdicts = sweep(names or None, args.steps, entries=entries)
    print(table(verdicts))
    counts = {k: sum(v.verdict == k for v in verdicts) for k in ("MATCH", "REFUSED", "WRONG")}
    print(f"\n{len(verdicts)} runs: " + ", ".join(f"{n} {k}" for k, n in counts.items()))
    return 1 if counts["WRONG"] else 0


if __name__ == "__main__":
    sys.exit(main())
