"""Seven models written fresh, as a PyTorch user writes them today, for planner.torch's trainer
(tests/importers/test_fresh_models.py) and the nn.Module bench (bench/bench_vs_compile.py):

- `moe`: a mixture-of-experts layer with top-2 routing done by index ops (softmax gate,
  `topk`, `index_select` of the tokens and of the chosen experts' weights, `index_add` of the
  weighted results back to their tokens, a load-balancing term from a `scatter` of the chosen
  experts);
- `gnn`: a two-layer graph network passing messages along an edge list, summed at the
  receiving node by `index_add_` in one layer and `scatter_add` in the other, mean-normalized
  by in-degrees counted the same way;
- `dlrm`: a DLRM-style recommender (a bottom MLP on dense features, `nn.EmbeddingBag` sum
  tables of variable-length bags given by offsets, pairwise dot-product interactions, a top
  MLP) trained with `F.binary_cross_entropy_with_logits`;
- `mae`: a masked autoencoder whose random masking is MAE's: `torch.rand` noise, `argsort`
  twice, `gather` of the kept patches and of the restored order (the noise may be passed in,
  which makes the step deterministic);
- `stochastic_depth`: a ResNet whose residual branches are dropped per sample by
  `bernoulli_` (torchvision's stochastic depth, row mode);
- `focal`: a classifier trained with the focal loss (`gather` of the target's log
  probability and of its class weight, `(1 - p_t) ** gamma`);
- `gpt`: a GPT (causal self-attention blocks, tied output embedding) trained with
  `F.cross_entropy(..., label_smoothing=0.1)`.

Tiny sizes by default (each trains through the planner in seconds); `bench=True` sizes are
what the bench steps. MODELS maps a name to a Fresh record: its constructor, how to draw a
batch (the module's inputs and the labels) from a torch.Generator, and its loss.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


class MoE(nn.Module):
    """Token classifier through one top-2 mixture-of-experts layer. Returns (logits, aux):
    aux is Switch/GShard's load-balancing term, E * sum_e (fraction routed to e) *
    (mean gate probability of e)."""

    def __init__(self, dim: int = 8, hidden: int = 16, experts: int = 4, classes: int = 5,
                 tokens: int = 16) -> None:
        super().__init__()
        self.experts, self.tokens = experts, tokens
        self.embed = nn.Linear(dim, dim)
        self.gate = nn.Linear(dim, experts, bias=False)
        self.w1 = nn.Parameter(torch.randn(experts, dim, hidden) / math.sqrt(dim))
        self.w2 = nn.Parameter(torch.randn(experts, hidden, dim) / math.sqrt(hidden))
        self.head = nn.Linear(dim, classes)
        # token i's two routing slots are rows 2i and 2i + 1 of the dispatch
        self.register_buffer("slot_token", torch.arange(tokens).repeat_interleave(2),
                             persistent=False)

    def forward(self, x):
        h = self.embed(x)
        probs = self.gate(h).softmax(-1)
        weight, expert = probs.topk(2, dim=-1)
        weight = weight / weight.sum(-1, keepdim=True)
        expert, weight = expert.reshape(-1), weight.reshape(-1, 1)
        tokens = h.index_select(0, self.slot_token)
        a = torch.bmm(tokens.unsqueeze(1), self.w1.index_select(0, expert))
        y = torch.bmm(F.gelu(a), self.w2.index_select(0, expert)).squeeze(1)
        out = torch.zeros_like(h).index_add(0, self.slot_token, y * weight)
        routed = torch.zeros_like(probs).scatter(1, expert.view(-1, 2), 1.0)
        aux = self.experts * (routed.mean(0) / 2 * probs.mean(0)).sum()
        return self.head(h + out), aux


def _moe_loss(out, labels):
    logits, aux = out
    return F.cross_entropy(logits, labels) + 0.01 * aux


class GNN(nn.Module):
    """Two rounds of mean-aggregated message passing over `edges` (2, E) (sender row 0,
    receiver row 1), then a per-node classifier."""

    def __init__(self, features: int = 6, hidden: int = 16, classes: int = 4) -> None:
        super().__init__()
        self.msg1, self.self1 = nn.Linear(features, hidden), nn.Linear(features, hidden)
        self.msg2, self.self2 = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x, edges):
        src, dst = edges[0], edges[1]
        degree = x.new_zeros(x.shape[0], 1).index_add_(0, dst, x.new_ones(src.shape[0], 1))
        degree = degree.clamp(min=1.0)
        m = self.msg1(x).index_select(0, src)
        agg = x.new_zeros(x.shape[0], m.shape[1]).index_add_(0, dst, m)
        h = F.relu(self.self1(x) + agg / degree)
        m = self.msg2(h)[src]
        agg = torch.zeros_like(h).scatter_add(0, dst.unsqueeze(1).expand(-1, m.shape[1]), m)
        h = F.relu(self.self2(h) + agg / degree)
        return self.head(h)


class DLRM(nn.Module):
    """Facebook's DLRM at toy size: dense features through a bottom MLP, one EmbeddingBag
    (sum) per sparse feature over bags given by (indices, offsets), the dot products of every
    pair of the resulting vectors, a top MLP to one click logit."""

    def __init__(self, dense: int = 4, dim: int = 8, rows: tuple[int, ...] = (20, 30, 12),
                 hidden: int = 16) -> None:
        super().__init__()
        self.bottom = nn.Sequential(nn.Linear(dense, hidden), nn.ReLU(), nn.Linear(hidden, dim),
                                    nn.ReLU())
        self.tables = nn.ModuleList(nn.EmbeddingBag(n, dim, mode="sum") for n in rows)
        f = len(rows) + 1
        li, lj = torch.tril_indices(f, f, offset=-1)
        self.register_buffer("pairs", li * f + lj, persistent=False)
        self.top = nn.Sequential(nn.Linear(dim + len(self.pairs), hidden), nn.ReLU(),
                                 nn.Linear(hidden, 1))

    def forward(self, dense, indices, offsets):
        x = self.bottom(dense)
        vectors = [x] + [t(indices[k], offsets[k]) for k, t in enumerate(self.tables)]
        t = torch.stack(vectors, dim=1)
        z = torch.bmm(t, t.transpose(1, 2)).flatten(1).index_select(1, self.pairs)
        return self.top(torch.cat([x, z], dim=1)).squeeze(1)


class MAE(nn.Module):
    """A masked autoencoder over (N, L, P) patches: embed, keep a random (1 - ratio) of the
    patches per sample (MAE's argsort of uniform noise), encode the kept ones, put mask tokens
    in the dropped places (gather with the inverse permutation), decode every patch. Returns
    (reconstruction, mask), mask 1 where a patch was dropped; `noise` (N, L) replaces the
    torch.rand draw when given."""

    def __init__(self, patches: int = 16, patch_dim: int = 12, dim: int = 16,
                 ratio: float = 0.75) -> None:
        super().__init__()
        self.keep = int(patches * (1 - ratio))
        self.embed = nn.Linear(patch_dim, dim)
        self.pos = nn.Parameter(0.02 * torch.randn(1, patches, dim))
        self.encoder = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 2 * dim), nn.GELU(),
                                     nn.Linear(2 * dim, dim))
        self.mask_token = nn.Parameter(0.02 * torch.randn(1, 1, dim))
        self.dec_pos = nn.Parameter(0.02 * torch.randn(1, patches, dim))
        self.decoder = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim), nn.GELU(),
                                     nn.Linear(dim, patch_dim))

    def extra_repr(self) -> str:
        return f"keep={self.keep}"

    def forward(self, x, noise=None):
        n, length, _ = x.shape
        h = self.embed(x) + self.pos
        if noise is None:
            noise = torch.rand(n, length)
        shuffle = torch.argsort(noise, dim=1)
        restore = torch.argsort(shuffle, dim=1)
        kept = shuffle[:, :self.keep]
        h = torch.gather(h, 1, kept.unsqueeze(-1).expand(-1, -1, h.shape[2]))
        h = h + self.encoder(h)
        mask = torch.ones(n, length)
        mask[:, :self.keep] = 0
        mask = torch.gather(mask, 1, restore)
        tokens = torch.cat([h, self.mask_token.expand(n, length - self.keep, -1)], dim=1)
        h = torch.gather(tokens, 1, restore.unsqueeze(-1).expand(-1, -1, h.shape[2]))
        return self.decoder(h + self.dec_pos), mask


def _mae_loss(out, target):
    """MAE's loss: the mean squared error per patch, averaged over the dropped patches."""
    pred, mask = out
    per_patch = ((pred - target) ** 2).mean(-1)
    return (per_patch * mask).sum() / mask.sum()


class MAEFixedNoise(nn.Module):
    """The MAE with its masking noise as an input: the step a function of its inputs."""

    def __init__(self, **kw) -> None:
        super().__init__()
        self.mae = MAE(**kw)

    def forward(self, x, noise):
        return self.mae(x, noise)


def stochastic_depth(x, p: float, training: bool):
    """torchvision.ops.stochastic_depth, mode="row": each sample's residual branch kept with
    probability 1 - p and scaled by 1 / (1 - p)."""
    if not training:
        return x
    survival = 1.0 - p
    noise = torch.empty([x.shape[0]] + [1] * (x.ndim - 1), dtype=x.dtype).bernoulli_(survival)
    if survival > 0.0:
        noise.div_(survival)
    return x * noise


class DropBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, p: float) -> None:
        super().__init__()
        self.p = p
        self.body = nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
            nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
        self.short = (nn.Identity() if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)))

    def extra_repr(self) -> str:  # as torchvision's StochasticDepth shows its p
        return f"p={self.p}"

    def forward(self, x):
        return F.relu(self.short(x) + stochastic_depth(self.body(x), self.p, self.training))


class StochasticDepthResNet(nn.Module):
    """A ResNet of BasicBlocks whose drop probability rises linearly with depth to `p` (the
    stochastic-depth paper's rule)."""

    def __init__(self, width: int = 8, blocks: int = 3, p: float = 0.5,
                 classes: int = 5) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU())
        layers, cin = [], width
        for k in range(blocks):
            cout = width * 2 ** (k // 2)
            layers.append(DropBlock(cin, cout, 2 if k and k % 2 == 0 else 1,
                                    p * (k + 1) / blocks))
            cin = cout
        self.blocks = nn.Sequential(*layers)
        self.head = nn.Linear(cin, classes)

    def forward(self, x):
        return self.head(F.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1).flatten(1))


class FocalClassifier(nn.Module):
    """An MLP classifier; its loss is `focal_loss`."""

    def __init__(self, features: int = 10, hidden: int = 32, classes: int = 6) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, classes))

    def forward(self, x):
        return self.net(x)


FOCAL_ALPHA = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5)


def focal_loss(logits, target, gamma: float = 2.0):
    """Lin et al.'s focal loss with per-class weights alpha: -alpha_t (1 - p_t)^gamma
    log p_t, averaged."""
    alpha = torch.tensor(FOCAL_ALPHA, dtype=logits.dtype)
    logp = F.log_softmax(logits, dim=-1).gather(1, target.unsqueeze(1)).squeeze(1)
    weight = alpha.gather(0, target) * (1 - logp.exp()) ** gamma
    return -(weight * logp).mean()


class GPT(nn.Module):
    """A GPT: token and position embeddings, pre-LayerNorm blocks of causal self-attention
    (scaled_dot_product_attention) and a GELU MLP, a final LayerNorm, the output layer tied to
    the token embedding."""

    def __init__(self, vocab: int = 17, dim: int = 16, heads: int = 2, layers: int = 2,
                 context: int = 8) -> None:
        super().__init__()
        self.heads = heads
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(0.02 * torch.randn(context, dim))
        self.blocks = nn.ModuleList(_Block(dim) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)

    def forward(self, ids):
        h = self.tok(ids) + self.pos[:ids.shape[1]]
        for block in self.blocks:
            h = block(h, self.heads)
        return self.norm(h) @ self.tok.weight.t()


class _Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc, self.out = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x, heads: int):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, heads, d // heads).transpose(1, 2)
                   for z in self.qkv(self.ln1(x)).split(d, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


def _smoothed_lm_loss(logits, ids):
    return F.cross_entropy(logits.flatten(0, 1), ids.flatten(), label_smoothing=0.1)


# ---- batches -------------------------------------------------------------------------------


def _edges(nodes: int, edges: int, g: torch.Generator) -> torch.Tensor:
    """A random directed edge list (2, edges) with every node receiving at least one edge
    along a ring, so no degree is zero by accident of the draw."""
    ring = torch.stack([torch.arange(nodes), (torch.arange(nodes) + 1) % nodes])
    extra = torch.randint(0, nodes, (2, edges - nodes), generator=g)
    return torch.cat([ring, extra], dim=1)


def _bags(rows: tuple[int, ...], batch: int, nnz: int, g: torch.Generator):
    """Per table, `batch` non-empty bags of `nnz` indices in all, their sizes drawn (a
    random split of nnz): (indices (T, nnz), offsets (T, batch)); the tables share the
    sizes, so they stack. The total is fixed because the executor's shapes are."""
    cuts = torch.randperm(nnz - 1, generator=g)[:batch - 1].sort().values + 1
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), cuts])
    indices = torch.stack([torch.randint(0, n, (nnz,), generator=g) for n in rows])
    return indices, offsets.expand(len(rows), -1).contiguous()


@dataclass(frozen=True)
class Fresh:
    """One fresh model: `make(bench)` its module; `batch(g, bench)` a tuple of the module's
    inputs followed by the labels; `loss` PyTorch's loss, called as loss(module(*inputs),
    labels)."""

    make: Callable[[bool], nn.Module]
    batch: Callable[[torch.Generator, bool], tuple]
    loss: Callable


def _moe_batch(g, bench):
    tokens, dim = (128, 32) if bench else (16, 8)
    return torch.randn(tokens, dim, generator=g), torch.randint(0, 5, (tokens,), generator=g)


def _gnn_batch(g, bench):
    nodes, edges, features = (512, 4096, 32) if bench else (12, 40, 6)
    return (torch.randn(nodes, features, generator=g), _edges(nodes, edges, g),
            torch.randint(0, 4, (nodes,), generator=g))


_DLRM_ROWS = {False: (20, 30, 12), True: (1000, 2000, 500, 800)}


def _dlrm_batch(g, bench):
    batch, dense = (128, 13) if bench else (8, 4)
    indices, offsets = _bags(_DLRM_ROWS[bench], batch, 3 * batch, g)
    return (torch.randn(batch, dense, generator=g), indices, offsets,
            torch.randint(0, 2, (batch,), generator=g).to(torch.float32))


def _mae_shape(bench):
    return (32, 64, 48) if bench else (3, 16, 12)


def _mae_batch(g, bench):
    x = torch.randn(*_mae_shape(bench), generator=g)
    return x, x.clone()


def _mae_fixed_batch(g, bench):
    x = torch.randn(*_mae_shape(bench), generator=g)
    return x, torch.rand(x.shape[:2], generator=g), x.clone()


def _image_batch(g, bench):
    n, side = (8, 32) if bench else (4, 8)
    return torch.randn(n, 3, side, side, generator=g), torch.randint(0, 5, (n,), generator=g)


def _focal_batch(g, bench):
    n, features = (512, 64) if bench else (16, 10)
    return torch.randn(n, features, generator=g), torch.randint(0, 6, (n,), generator=g)


def _gpt_batch(g, bench):
    vocab, (n, t) = (97, (8, 32)) if bench else (17, (3, 8))
    ids = torch.randint(0, vocab, (n, t + 1), generator=g)
    return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()


MODELS: dict[str, Fresh] = {
    "moe": Fresh(lambda bench: MoE(32, 64, 8, 5, 128) if bench else MoE(), _moe_batch,
                 _moe_loss),
    "gnn": Fresh(lambda bench: GNN(32, 64) if bench else GNN(), _gnn_batch, F.cross_entropy),
    "dlrm": Fresh(lambda bench: DLRM(13, 16, _DLRM_ROWS[True], 64) if bench else DLRM(),
                  _dlrm_batch, F.binary_cross_entropy_with_logits),
    "mae": Fresh(lambda bench: MAE(64, 48, 64) if bench else MAE(), _mae_batch, _mae_loss),
    "mae_fixed_noise": Fresh(lambda bench: MAEFixedNoise(), _mae_fixed_batch, _mae_loss),
    "stochastic_depth": Fresh(
        lambda bench: StochasticDepthResNet(16, 4) if bench else StochasticDepthResNet(),
        _image_batch, F.cross_entropy),
    "focal": Fresh(lambda bench: FocalClassifier(64, 128) if bench else FocalClassifier(),
                   _focal_batch, focal_loss),
    "gpt": Fresh(lambda bench: GPT(97, 64, 4, 2, 32) if bench else GPT(), _gpt_batch,
                 _smoothed_lm_loss),
}
