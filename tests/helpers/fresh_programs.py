"""Ten small training programs written fresh, as users write them, each run through both doors
(torch.compile(model, backend="planner") and planner.torch.trainer) and through eager PyTorch
in float32 and float64 on the same data and seeds (tests/importers/test_fresh_programs_round3.py).

What they hold that the earlier sets (tests/importers/fresh_models.py, bench/semantics_sweep.py,
tests/helpers/training_semantics.py) do not: a GRU language model trained by truncated BPTT
with its hidden state carried (detached) from step to step; nanoGPT's hand-written causal
attention (a registered tril buffer, masked_fill with -inf, the head's weight tied to the
embedding by assignment, ignore_index=-1 targets, AdamW groups with and without decay); a
Conv1d classifier trained by micro-batch accumulation with clip_grad_norm_, Nesterov SGD over
two lr groups and StepLR; a BatchNorm2d CNN validated under torch.no_grad() in eval() after
every step; a U-Net with ConvTranspose2d and skip concatenation trained on per-pixel
cross-entropy with ignore_index=255; a diffusion block (sinusoidal timestep embedding computed
in forward, GroupNorm, SiLU); a sparse autoencoder with a tied transposed decoder returning a
dict, its loss MSE plus an L1 penalty on ReLU codes (exact zeros: |x|'s kink); an MLP under
torch.autocast("cpu", bfloat16); a text classifier with nn.MultiheadAttention and a
key_padding_mask, Embedding(padding_idx=0), a masked mean; a two-headed regressor (PReLU,
LayerNorm) returning a tuple, trained on huber_loss plus BCE-with-logits with pos_weight.

Each Program's Dropouts have p=0.0: a Dropout draws from the planner's generator, not torch's
(docs/pytorch.md), so with p > 0 the runs could not be compared step for step.
"""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

from bench.semantics_sweep import seeded

EPS32 = float(np.finfo(np.float32).eps)
EPS_BF16 = 2.0 ** -8
BATCH = 6


@dataclass(frozen=True)
class Program:
    """One user's program: `make()` the module (seeded, train()), `data(g)` one micro-batch
    ((inputs...), labels), `loss(outputs, labels)`, `optimizer(module)`, `scheduler(opt)`;
    `clip` clip_grad_norm_'s max_norm; `accumulate` micro-batches per optimizer step;
    `validate` an eval() loss under no_grad on a held-out batch after every optimizer step;
    `carry` {output index: input index}: an output fed (detached) as that input of the next
    step (truncated BPTT's hidden state); `autocast` the forward and loss under
    torch.autocast("cpu", bfloat16)."""

    name: str
    make: Callable[[], nn.Module]
    data: Callable[[torch.Generator], tuple[tuple[Any, ...], Any]]
    loss: Callable[[Any, Any], Any]
    optimizer: Callable[[nn.Module], torch.optim.Optimizer]
    scheduler: Callable[[torch.optim.Optimizer], Any] | None = None
    clip: float | None = None
    accumulate: int = 1
    validate: bool = False
    carry: dict[int, int] = field(default_factory=dict)
    autocast: bool = False

    def batches(self, steps: int) -> list[tuple[tuple[Any, ...], Any]]:
        g = torch.Generator().manual_seed(1)
        return [self.data(g) for _ in range(steps * self.accumulate + self.validate)]


@dataclass
class Outcome:
    """One run: each micro-step's loss, each validation loss, the state_dict after."""

    losses: list[float]
    state: dict[str, np.ndarray]
    validation: list[float] = field(default_factory=list)
    seconds: float = 0.0


# ---- 1. a GRU language model, truncated BPTT -----------------------------------------------

class GRULM(nn.Module):
    """Returns (logits (N, T, V), the last hidden state (1, N, H))."""

    def __init__(self, vocab: int = 13, width: int = 12) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.rnn = nn.GRU(width, width, batch_first=True)
        self.out = nn.Linear(width, vocab)

    def forward(self, ids, h):
        y, h = self.rnn(self.embed(ids), h)
        return self.out(y), h


def _lm_loss(out, targets):
    logits = out[0]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def _stream(g):
    """One window of a token stream: (ids, h0), the next tokens; h0 is carried after step 0."""
    ids = torch.randint(0, 13, (BATCH // 2, 6), generator=g)
    return (ids, torch.zeros(1, BATCH // 2, 12)), torch.roll(ids, -1, dims=1)


# ---- 2. nanoGPT's causal attention with a mask buffer and tied weights ------------------------

class CausalSelfAttention(nn.Module):
    def __init__(self, width: int, heads: int, context: int) -> None:
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(width, 3 * width)
        self.c_proj = nn.Linear(width, width)
        self.attn_dropout = nn.Dropout(0.0)
        self.register_buffer("bias", torch.tril(torch.ones(context, context))
                             .view(1, 1, context, context))

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        return self.c_proj((att @ v).transpose(1, 2).contiguous().view(b, t, c))


class NanoGPT(nn.Module):
    def __init__(self, vocab: int = 11, width: int = 8, context: int = 8) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(context, width)
        self.ln_1, self.ln_f = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, 2, context)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width,
                                                                                   width))
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.wte.weight = self.lm_head.weight  # nanoGPT's weight tying

    def forward(self, idx):
        pos = torch.arange(0, idx.size(1), dtype=torch.long)
        x = self.wte(idx) + self.wpe(pos)
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(x)
        return self.lm_head(self.ln_f(x))


def _gpt_loss(logits, targets):
    return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


def _gpt_data(g):
    ids = torch.randint(0, 11, (BATCH // 2, 7), generator=g)
    targets = torch.roll(ids, -1, dims=1)
    targets[:, -1] = -1  # nothing to predict after the window's last token
    return (ids,), targets


def _nanogpt_groups(model: nn.Module) -> torch.optim.Optimizer:
    """nanoGPT's configure_optimizers: 2-D tensors decayed, the rest not."""
    params = {n: p for n, p in model.named_parameters()}  # the tied one once
    decay = [p for p in params.values() if p.dim() >= 2]
    rest = [p for p in params.values() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                              {"params": rest, "weight_decay": 0.0}], lr=3e-3,
                             betas=(0.9, 0.95))


# ---- 3. Conv1d, accumulation, clipping, Nesterov over two lr groups, StepLR ---------------------

class Conv1dNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv1d(2, 6, 5, padding=2), nn.ReLU(),
                                      nn.Conv1d(6, 8, 3, stride=2), nn.ReLU(),
                                      nn.AdaptiveAvgPool1d(1))
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


def _two_lr_nesterov(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD([{"params": model.features.parameters(), "lr": 0.02},
                            {"params": model.head.parameters()}], lr=0.1, momentum=0.9,
                           nesterov=True, weight_decay=1e-4)


# ---- 4. BatchNorm2d CNN validated in eval() after every step --------------------------------

class BNNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 6, 3, padding=1, bias=False), nn.BatchNorm2d(6),
                                  nn.ReLU(), nn.MaxPool2d(2), nn.Dropout(0.0),
                                  nn.Conv2d(6, 8, 3, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.body(x).mean((2, 3)))


# ---- 5. a U-Net with ConvTranspose2d and skip concatenation ---------------------------------

class TinyUNet(nn.Module):
    def __init__(self, classes: int = 3) -> None:
        super().__init__()
        self.down1 = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU())
        self.down2 = nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(4, 8, 3, padding=1), nn.ReLU())
        self.up = nn.ConvTranspose2d(8, 4, 2, stride=2)
        self.fuse = nn.Sequential(nn.Conv2d(8, 4, 3, padding=1), nn.ReLU(),
                                  nn.Conv2d(4, classes, 1))

    def forward(self, x):
        a = self.down1(x)
        return self.fuse(torch.cat([self.up(self.down2(a)), a], dim=1))


def _seg_data(g):
    x = torch.randn(BATCH // 2, 1, 8, 8, generator=g)
    y = torch.randint(0, 3, (BATCH // 2, 8, 8), generator=g)
    y[torch.rand(y.shape, generator=g) < 0.2] = 255  # unlabelled pixels
    return (x,), y


# ---- 6. a diffusion block: timestep embedding, GroupNorm, SiLU ------------------------------

def timestep_embedding(t, dim: int, dtype: torch.dtype):
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=dtype) / half)
    args = t[:, None].to(dtype) * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class DiffusionBlock(nn.Module):
    def __init__(self, channels: int = 8, tdim: int = 8) -> None:
        super().__init__()
        self.tdim = tdim
        self.time = nn.Sequential(nn.Linear(tdim, 16), nn.SiLU(), nn.Linear(16, channels))
        self.inp = nn.Conv2d(2, channels, 3, padding=1)
        self.norm1, self.norm2 = nn.GroupNorm(4, channels), nn.GroupNorm(4, channels)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.out = nn.Conv2d(channels, 2, 1)

    def forward(self, x_t, t):
        h = self.inp(x_t)
        r = self.conv1(F.silu(self.norm1(h)))
        r = r + self.time(timestep_embedding(t, self.tdim, x_t.dtype))[:, :, None, None]
        h = h + self.conv2(F.silu(self.norm2(r)))
        return self.out(h)


def _diffusion_data(g):
    """x_t = sqrt(a) x0 + sqrt(1 - a) noise at a drawn timestep; the target is the noise."""
    x0 = torch.randn(BATCH // 2, 2, 6, 6, generator=g)
    noise = torch.randn(x0.shape, generator=g)
    t = torch.randint(0, 1000, (BATCH // 2,), generator=g)
    a = torch.cos(t.float() / 1000 * math.pi / 2)[:, None, None, None] ** 2
    return (a.sqrt() * x0 + (1 - a).sqrt() * noise, t), noise


# ---- 7. a sparse autoencoder: tied transposed decoder, dict output, L1 on codes -----------------

class SparseAE(nn.Module):
    def __init__(self, features: int = 10, codes: int = 16) -> None:
        super().__init__()
        self.enc = nn.Linear(features, codes)
        self.dec_bias = nn.Parameter(torch.zeros(features))

    def forward(self, x):
        code = F.relu(self.enc(x - self.dec_bias))
        return {"recon": F.linear(code, self.enc.weight.t(), self.dec_bias), "code": code}


def _sparse_loss(out, x):
    return F.mse_loss(out["recon"], x) + 1e-2 * out["code"].abs().sum(-1).mean()


# ---- 8. an MLP under autocast bf16 -------------------------------------------------------------

class AutocastMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 16),
                                 nn.LayerNorm(16), nn.ReLU(), nn.Linear(16, 3))

    def forward(self, x):
        return self.net(x)


def _autocast_mse(out, y):
    return F.mse_loss(out.float(), y)


# ---- 9. text classification: MultiheadAttention with a key padding mask ----------------------

class PaddedTextClassifier(nn.Module):
    def __init__(self, vocab: int = 15, width: int = 8, classes: int = 3) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width, padding_idx=0)
        self.attn = nn.MultiheadAttention(width, 2, batch_first=True)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, classes)

    def forward(self, ids):
        pad = ids == 0
        h = self.embed(ids)
        a, _ = self.attn(h, h, h, key_padding_mask=pad, need_weights=False)
        h = self.norm(h + a)
        keep = (~pad).unsqueeze(-1).float()
        return self.head((h * keep).sum(1) / keep.sum(1).clamp(min=1.0))


def _padded_text(g):
    ids = torch.randint(1, 15, (BATCH, 7), generator=g)
    lengths = torch.randint(2, 8, (BATCH,), generator=g)
    ids[torch.arange(7)[None, :] >= lengths[:, None]] = 0
    return (ids,), torch.randint(0, 3, (BATCH,), generator=g)


# ---- 10. a two-headed regressor returning a tuple ----------------------------------------------

class TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(7, 16), nn.LayerNorm(16), nn.PReLU(16),
                                   nn.Linear(16, 16), nn.Hardswish())
        self.value, self.event = nn.Linear(16, 2), nn.Linear(16, 1)

    def forward(self, x):
        h = self.trunk(x)
        return self.value(h), self.event(h).squeeze(-1)


def _two_heads_loss(out, y):
    value, event = out
    return (F.huber_loss(value, y[:, :2], delta=0.5)
            + F.binary_cross_entropy_with_logits(event, y[:, 2], pos_weight=torch.tensor(3.0)))


def _two_heads_data(g):
    x = torch.randn(BATCH, 7, generator=g)
    y = torch.cat([2 * torch.randn(BATCH, 2, generator=g),
                   (torch.rand(BATCH, 1, generator=g) < 0.3).float()], dim=1)
    return (x,), y


def _classes(g, shape, classes):
    return (torch.randn(*shape, generator=g),), torch.randint(0, classes, (shape[0],),
                                                              generator=g)


PROGRAMS = [
    Program("gru_lm_tbptt", seeded(GRULM), _stream, _lm_loss,
            lambda m: torch.optim.Adam(m.parameters(), lr=0.01), clip=0.5, carry={1: 1}),
    Program("nanogpt_mask_buffer_tied", seeded(NanoGPT), _gpt_data, _gpt_loss, _nanogpt_groups),
    Program("conv1d_accumulate_clip_nesterov_groups", seeded(Conv1dNet),
            lambda g: _classes(g, (BATCH // 2, 2, 12), 4), F.cross_entropy, _two_lr_nesterov,
            lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5), clip=1.0,
            accumulate=3),
    Program("batchnorm_validate_every_step", seeded(BNNet),
            lambda g: _classes(g, (BATCH, 3, 6, 6), 3), F.cross_entropy,
            lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9), validate=True),
    Program("unet_convtranspose_ignore_255", seeded(TinyUNet), _seg_data,
            lambda out, y: F.cross_entropy(out, y, ignore_index=255),
            lambda m: torch.optim.Adam(m.parameters(), lr=0.01)),
    Program("diffusion_groupnorm_silu", seeded(DiffusionBlock), _diffusion_data, F.mse_loss,
            lambda m: torch.optim.AdamW(m.parameters(), lr=2e-3, weight_decay=0.01)),
    Program("sparse_autoencoder_dict_l1", seeded(SparseAE),
            lambda g: (lambda x: ((x,), x))(torch.randn(BATCH, 10, generator=g)), _sparse_loss,
            lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.5)),
    Program("autocast_bf16_mlp", seeded(AutocastMLP),
            lambda g: ((torch.randn(BATCH, 10, generator=g),), torch.randn(BATCH, 3,
                                                                             generator=g)),
            _autocast_mse, lambda m: torch.optim.Adam(m.parameters(), lr=0.01), autocast=True),
    Program("mha_key_padding_mask", seeded(PaddedTextClassifier), _padded_text,
            lambda out, y: F.cross_entropy(out, y, label_smoothing=0.05),
            lambda m: torch.optim.Adam(m.parameters(), lr=0.01)),
    Program("two_heads_huber_bce_pos_weight", seeded(TwoHeads), _two_heads_data,
            _two_heads_loss, lambda m: torch.optim.Adam(m.parameters(), lr=0.01, amsgrad=True)),
]
# ---- probes: features where a planner could go silently wrong ---------------------------------

class SpectralDisc(nn.Module):
    """A GAN discriminator with spectral_norm (its power iteration's u, v buffers updated in
    forward in train())."""

    def __init__(self) -> None:
        super().__init__()
        sn = nn.utils.parametrizations.spectral_norm
        self.net = nn.Sequential(sn(nn.Linear(6, 16)), nn.LeakyReLU(0.2), sn(nn.Linear(16, 1)))

    def forward(self, x):
        return self.net(x).squeeze(-1)


class MaxNormEmbed(nn.Module):
    """nn.Embedding(max_norm=1.0): the looked-up rows renormalized in place in forward."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(12, 6, max_norm=1.0)
        self.head = nn.Linear(6, 3)

    def forward(self, ids):
        return self.head(self.embed(ids).mean(1))


class WeightNormConv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        wn = nn.utils.parametrizations.weight_norm
        self.conv = wn(nn.Conv1d(3, 6, 3, padding=1))
        self.head = nn.Linear(6, 2)

    def forward(self, x):
        return self.head(F.relu(self.conv(x)).amax(-1))


class RobertaPositions(nn.Module):
    """Position ids from the padding mask by cumsum (RoBERTa's create_position_ids), in-place
    masked_fill_ and ReLU(inplace=True), upsampled by F.interpolate."""

    def __init__(self) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(15, 8, padding_idx=1), nn.Embedding(10, 8)
        self.proj = nn.Sequential(nn.Linear(8, 8), nn.ReLU(inplace=True))
        self.head = nn.Linear(8, 3)

    def forward(self, ids):
        mask = ids.ne(1).int()
        positions = torch.cumsum(mask, dim=1).type_as(mask) * mask + 1
        e = self.tok(ids) + self.pos(positions)
        e.masked_fill_(~mask.bool().unsqueeze(-1), 0.0)
        h = self.proj(e)
        h = F.interpolate(h.transpose(1, 2), scale_factor=2, mode="linear")
        return self.head(h.mean(-1))


class Embed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 4))

    def forward(self, x):
        return self.net(x)


def batch_hard_triplet(emb, y, margin: float = 0.5):
    """The batch-hard triplet loss on torch.cdist distances (zero on the diagonal, where
    PyTorch's gradient of the distance is 0)."""
    d = torch.cdist(emb, emb)
    same = y[:, None] == y[None, :]
    hardest_pos = (d * same).max(1).values
    hardest_neg = (d + 1e4 * same).min(1).values
    return F.relu(hardest_pos - hardest_neg + margin).mean()


class LSTMCarry(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(4, 5, num_layers=2, batch_first=True)
        self.out = nn.Linear(5, 3)

    def forward(self, x, h, c):
        y, (h, c) = self.lstm(x, (h, c))
        return self.out(y), h, c


def _lstm_data(g):
    return ((torch.randn(2, 5, 4, generator=g), torch.zeros(2, 2, 5), torch.zeros(2, 2, 5)),
            torch.randint(0, 3, (2, 5), generator=g))


class Branchy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(6, 8), nn.Linear(8, 3), nn.Linear(8, 3)

    def forward(self, x):
        h = torch.tanh(self.a(x))
        if h.mean() > 0:  # Python control flow on a tensor's value
            return self.b(h)
        return self.c(h) * 2


class InputInPlace(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(6, 3)

    def forward(self, x):
        x.sub_(x.mean(0)).div_(x.std(0) + 1e-5)  # the caller's batch standardised in place
        return self.lin(x)


class Annealed(nn.Module):
    """A softmax temperature annealed by a Python counter the forward increments."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(6, 3)
        self.calls = 0

    def forward(self, x):
        tau = max(0.5, 2.0 - 0.5 * self.calls)
        if self.training:
            self.calls += 1
        return self.lin(x) / tau


class AnnealedBuffer(nn.Module):
    """Annealed with the counter in a buffer updated in place (what the refusal advises)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(6, 3)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        tau = (2.0 - 0.5 * self.calls).clamp(min=0.5)
        if self.training:
            self.calls.add_(1)
        return self.lin(x) / tau


class Checkpointed(nn.Module):
    """Two pre-LayerNorm residual blocks under torch.utils.checkpoint (non-reentrant)."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.LayerNorm(6), nn.Linear(6, 12), nn.GELU(),
                                                  nn.Linear(12, 6)) for _ in range(2))
        self.head = nn.Linear(6, 3)

    def forward(self, x):
        for block in self.blocks:
            x = x + checkpoint(block, x, use_reentrant=False)
        return self.head(x)


class CheckpointedNorm(nn.Module):
    """A checkpointed block holding a BatchNorm1d: eager updates its running statistics again
    when the backward recomputes the block."""

    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(),
                                   nn.Linear(16, 6))
        self.head = nn.Linear(6, 3)

    def forward(self, x):
        return self.head(x + checkpoint(self.block, x, use_reentrant=False))


class GradientReversal(nn.Module):
    """Domain-adversarial features: the domain head's gradient reversed by a hook on an
    activation."""

    def __init__(self) -> None:
        super().__init__()
        self.features, self.cls, self.domain = nn.Linear(6, 8), nn.Linear(8, 3), nn.Linear(8, 3)

    def forward(self, x):
        h = torch.relu(self.features(x))
        r = h * 1.0
        if r.requires_grad:
            r.register_hook(lambda g: -0.5 * g)
        return self.cls(h) + self.domain(r)


class CTCHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 5)

    def forward(self, x):
        return self.lin(x).log_softmax(-1)


def _ctc(logp, targets):
    steps, n = logp.shape[0], logp.shape[1]
    return F.ctc_loss(logp, targets, torch.full((n,), steps, dtype=torch.long),
                      torch.full((n,), targets.shape[1], dtype=torch.long))


def _weighted_smooth_ce(out, y):
    w = torch.tensor([1.0, 2.0, 0.5], dtype=out.dtype)
    return F.cross_entropy(out, y, weight=w, ignore_index=0, label_smoothing=0.2)


def _hinge_d(out, y):
    return F.relu(1.0 - out * (2 * y - 1)).mean()


def _roberta_ids(g):
    ids = torch.randint(2, 15, (BATCH, 5), generator=g)
    ids[:, 3:][torch.rand(BATCH, 2, generator=g) < 0.5] = 1
    return (ids,), torch.randint(0, 3, (BATCH,), generator=g)


PROBES = [
    Program("spectral_norm_hinge", seeded(SpectralDisc),
            lambda g: ((torch.randn(BATCH, 6, generator=g),),
                       torch.randint(0, 2, (BATCH,), generator=g).float()), _hinge_d,
            lambda m: torch.optim.Adam(m.parameters(), lr=2e-3, betas=(0.0, 0.9))),
    Program("embedding_max_norm", seeded(MaxNormEmbed),
            lambda g: ((torch.randint(0, 12, (BATCH, 4), generator=g),),
                       torch.randint(0, 3, (BATCH,), generator=g)), F.cross_entropy,
            lambda m: torch.optim.SGD(m.parameters(), lr=0.5)),
    Program("weight_norm_conv1d", seeded(WeightNormConv),
            lambda g: _classes(g, (BATCH, 3, 8), 2), F.cross_entropy,
            lambda m: torch.optim.Adam(m.parameters(), lr=0.01)),
    Program("roberta_positions_inplace_interpolate", seeded(RobertaPositions), _roberta_ids,
            F.cross_entropy, lambda m: torch.optim.AdamW(m.parameters(), lr=0.01)),
    Program("ce_weight_smoothing_ignore", seeded(lambda: nn.Sequential(nn.Linear(5, 3))),
            lambda g: _classes(g, (BATCH, 5), 3), _weighted_smooth_ce,
            lambda m: torch.optim.SGD(m.parameters(), lr=0.3)),
    Program("batch_hard_triplet_cdist", seeded(Embed),
            lambda g: ((torch.randn(BATCH, 6, generator=g),),
                       torch.randint(0, 2, (BATCH,), generator=g)), batch_hard_triplet,
            lambda m: torch.optim.SGD(m.parameters(), lr=0.1)),
    Program("lstm_two_layers_carry_h_c", seeded(LSTMCarry), _lstm_data,
            lambda out, y: F.cross_entropy(out[0].reshape(-1, 3), y.reshape(-1)),
            lambda m: torch.optim.Adam(m.parameters(), lr=0.01), carry={1: 1, 2: 2}),
    Program("data_dependent_branch", seeded(Branchy), lambda g: _classes(g, (BATCH, 6), 3),
            F.cross_entropy, lambda m: torch.optim.SGD(m.parameters(), lr=0.2)),
    Program("input_written_in_place", seeded(InputInPlace),
            lambda g: _classes(g, (BATCH, 6), 3), F.cross_entropy,
            lambda m: torch.optim.SGD(m.parameters(), lr=0.2)),
    Program("python_counter_in_forward", seeded(Annealed),
            lambda g: _classes(g, (BATCH, 6), 3), F.cross_entropy,
            lambda m: torch.optim.SGD(m.parameters(), lr=0.2)),
    Program("buffer_counter_in_forward", seeded(AnnealedBuffer),
            lambda g: _classes(g, (BATCH, 6), 3), F.cross_entropy,
            lambda m: torch.optim.SGD(m.parameters(), lr=0.2)),
    Program("activation_checkpoint", seeded(Checkpointed),
            lambda g: _classes(g, (BATCH, 6), 3), F.cross_entropy,
            lambda m: torch.optim.Adam(m.parameters(), lr=0.01)),
    Program("checkpoint_around_batchnorm", seeded(CheckpointedNorm),
            lambda g: _classes(g, (BATCH, 6), 3), F.cross_entropy,
            lambda m: torch.optim.SGD(m.parameters(), lr=0.2)),
    Program("gradient_reversal_hook", seeded(GradientReversal),
            lambda g: _classes(g, (BATCH, 6), 3), F.cross_entropy,
            lambda m: torch.optim.SGD(m.parameters(), lr=0.2)),
    Program("ctc_loss", seeded(CTCHead),
            lambda g: ((torch.randn(6, 2, 4, generator=g),),
                       torch.randint(1, 5, (2, 2), generator=g)), _ctc,
            lambda m: torch.optim.SGD(m.parameters(), lr=0.2)),
]
BY_NAME = {p.name: p for p in PROGRAMS + PROBES}


# ---- the three ways to run a program -----------------------------------------------------------

def _cast(v: Any, dtype: torch.dtype) -> Any:
    return v.to(dtype) if torch.is_tensor(v) and v.is_floating_point() else v


def _flat(out: Any) -> list[Any]:
    if isinstance(out, dict):
        return [v for o in out.values() for v in _flat(o)]
    if isinstance(out, (tuple, list)):
        return [v for o in out for v in _flat(o)]
    return [out]


def _fed(program: Program, inputs: tuple, carried: dict[int, Any], dtype) -> list[Any]:
    fed = [_cast(v, dtype) for v in inputs]
    for k, v in carried.items():
        fed[k] = v
    return fed


def _autocast(program: Program, dtype: torch.dtype):
    on = program.autocast and dtype == torch.float32
    return torch.autocast("cpu", dtype=torch.bfloat16) if on else contextlib.nullcontext()


def _validation(program: Program, call, model: nn.Module, batch, dtype) -> float:
    model.eval()
    with torch.no_grad(), _autocast(program, dtype):
        value = program.loss(call(*(_cast(v, dtype) for v in batch[0])), _cast(batch[1], dtype))
    model.train()
    return float(value)


def eager(program: Program, steps: int, dtype: torch.dtype,
          wrap: Callable[[nn.Module], Any] | None = None) -> Outcome:
    """The program's own loop in PyTorch (`dtype`; autocast only in float32), the module called
    through wrap(module) when given (the planner's backend)."""
    start = time.perf_counter()
    model = program.make().to(dtype)
    call = model if wrap is None else wrap(model)
    opt = program.optimizer(model)
    sched = program.scheduler(opt) if program.scheduler else None
    batches = program.batches(steps)
    held_out = batches.pop() if program.validate else None
    out = Outcome([], {})
    carried: dict[int, Any] = {}
    for k, (inputs, labels) in enumerate(batches):
        with _autocast(program, dtype):
            outputs = call(*_fed(program, inputs, carried, dtype))
            value = program.loss(outputs, _cast(labels, dtype))
        (value / program.accumulate).backward()
        out.losses.append(float(value.detach()))
        carried = {i: _flat(outputs)[o].detach() for o, i in program.carry.items()}
        if (k + 1) % program.accumulate:
            continue
        if program.clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), program.clip)
        opt.step()
        opt.zero_grad()
        if sched is not None:
            sched.step()
        if held_out is not None:
            out.validation.append(_validation(program, call, model, held_out, dtype))
    out.state = {k: v.detach().float().numpy().copy() if v.is_floating_point()
                 else v.numpy().copy() for k, v in model.state_dict().items()}
    out.seconds = time.perf_counter() - start
    return out


def through_backend(program: Program, steps: int) -> Outcome:
    import planner.torch  # noqa: F401  (registers the backend)

    torch._dynamo.reset()
    return eager(program, steps, torch.float32,
                 wrap=lambda m: torch.compile(m, backend="planner",
                                              options={"costs": "analytical"}))


def through_trainer(program: Program, steps: int, out_dir: Path) -> Outcome:
    """The program as a planner.torch.trainer script: the same optimizer and scheduler objects,
    t.evaluate for the validation, outputs=True for the carried state; an autocast program
    steps inside torch.autocast as its eager loop does."""
    from planner.torch import trainer

    start = time.perf_counter()
    model = program.make()
    opt = program.optimizer(model)
    sched = program.scheduler(opt) if program.scheduler else None
    batches = program.batches(steps)
    held_out = batches.pop() if program.validate else None
    settings = {"clip_grad_norm": program.clip} if program.clip is not None else {}
    out = Outcome([], {})
    with _autocast(program, torch.float32):
        t = trainer(model, batches[0][0], loss=program.loss, labels=batches[0][1],
                    optimizer=opt, costs="analytical", out_dir=out_dir,
                    accumulate=program.accumulate, **settings)
        carried: dict[int, Any] = {}
        for k, (inputs, labels) in enumerate(batches):
            fed = _fed(program, inputs, carried, torch.float32)
            value, outputs = t.step(*fed, labels, outputs=True)
            out.losses.append(float(value))
            carried = {i: torch.from_numpy(np.array(outputs[o])) for o, i in
                       program.carry.items()}
            if (k + 1) % program.accumulate:
                continue
            if sched is not None:
                sched.step()
            if held_out is not None:
                out.validation.append(t.evaluate(*held_out[0], held_out[1])[0])
    out.state = {k: np.asarray(v, np.float32) if np.asarray(v).dtype.kind == "f"
                 else np.asarray(v) for k, v in t.params().items()}
    out.seconds = time.perf_counter() - start
    return out


# ---- the verdict ---------------------------------------------------------------------------------

def _near(a: float, b32: float, b64: float, bf16: bool) -> bool:
    """A loss: within 1e-4 relative of eager float32's (the repo's bound for float32 runs, the
    planner rounding in other orders), or under autocast within 10x eager's own distance from
    float64 plus a bfloat16 ulp of it."""
    if bf16:
        return abs(a - b32) <= 10 * abs(b32 - b64) + EPS_BF16 * abs(b64)
    return abs(a - b32) <= 1e-4 * abs(b32) + 1e-7


def compare(program: Program, ours: Outcome, f32: Outcome, f64: Outcome) -> list[str]:
    """What is off beyond eager's own rounding: losses and validations by `_near`, every
    state_dict tensor within 10x eager float32's |error| against float64 plus 16 float32 ulps
    of its scale (tests/importers/torch_step.py's bound)."""
    bad = []
    pairs = [("loss", ours.losses, f32.losses, f64.losses),
             ("validation", ours.validation, f32.validation, f64.validation)]
    for what, mine, b32, b64 in pairs:
        if len(mine) != len(b32):
            bad.append(f"{len(mine)} {what}es, eager {len(b32)}")
            continue
        for k, (a, x, y) in enumerate(zip(mine, b32, b64, strict=True)):
            if not _near(a, x, y, program.autocast):
                bad.append(f"step {k} {what} {a:.7g} vs eager {x:.7g}")
    for name, want in f64.state.items():
        if name not in ours.state:
            bad.append(f"{name} missing")
            continue
        got, noise32 = ours.state[name].astype(np.float64), f32.state[name].astype(np.float64)
        if want.dtype.kind != "f":
            if not np.array_equal(got, want):
                bad.append(f"{name}: {got} vs eager {want}")
            continue
        scale = max(float(np.max(np.abs(want))), 1e-30)
        err, noise = np.max(np.abs(got - want)), np.max(np.abs(noise32 - want))
        if not err <= 10 * noise + 16 * EPS32 * scale:
            bad.append(f"{name}: error {err:.3g}, eager float32's {noise:.3g}")
    return bad


@dataclass
class Verdict:
    program: str
    door: str
    verdict: str  # match | refused | told (off eager, said in one line) | wrong | crash
    detail: str
    seconds: float
    eager_seconds: float


def run_door(program: Program, door: str, steps: int, out_dir: Path,
             refs: tuple[Outcome, Outcome] | None = None) -> Verdict:
    """One program through one door, classified against eager float32 and float64."""
    from planner.torch.piece import PlannerFallback

    f32, f64 = refs or (eager(program, steps, torch.float32),
                        eager(program, steps, torch.float64))
    start = time.perf_counter()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", PlannerFallback)
            ours = (through_trainer(program, steps, out_dir) if door == "trainer"
                    else through_backend(program, steps))
    except Exception as e:  # noqa: BLE001 - classified: one line is a refusal
        text = f"{type(e).__name__}: {e}".strip()
        verdict = "refused" if "\n" not in text and len(text) < 600 else "crash"
        return Verdict(program.name, door, verdict, text.splitlines()[0][:300],
                       time.perf_counter() - start, f32.seconds)
    fell_back = [str(w.message).splitlines()[0] for w in caught
                 if issubclass(w.category, PlannerFallback)]
    # a line saying where the plan computes otherwise than eager (planner/torch/dynamo_import.py)
    told = [str(w.message) for w in caught if str(w.message).startswith("planner: node ")]
    bad = compare(program, ours, f32, f64)
    verdict = ("told" if bad and told else "wrong" if bad else "refused" if fell_back
               else "match")
    detail = (told[0][:300] if bad and told else "; ".join(bad[:3]) if bad
              else "fell back: " + fell_back[0][:250] if fell_back else "")
    return Verdict(program.name, door, verdict, detail, ours.seconds, f32.seconds)

