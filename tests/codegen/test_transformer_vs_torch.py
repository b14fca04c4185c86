"""zoo:gpt and zoo:bert: one SGD step through the generated executor against PyTorch.

PyTorch runs the same step from the same parameters: gpt as a GPT block written in torch
(below), bert with torch.nn.TransformerEncoderLayer (post-LN, GELU) blocks holding our weights.
Both run in float64 (the reference) and float32 (to measure float32's own noise). Attention's
Transposes are folded into its MatMuls' strides (planner/frontend/passes/transpose_fold.py). The
executor's loss must be within 1e-4 of float64 PyTorch's, and its parameter update (p' - p = -lr *
grad) within 10x the distance of PyTorch's own float32 update from the float64 one (and 1e-5).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner.frontend.autodiff import make_training_graph
from planner.graph.interpret import init_params, random_feeds
from planner.graph.optimizer import Optimizer
from planner.zoo import build
from tests.codegen.helpers import build_module, rel_error

torch = pytest.importorskip("torch")
F = torch.nn.functional

CFG = dict(batch=2, seq=8, dim=16, heads=2, layers=2, vocab=23)
LR = 0.1


def _start(graph):
    """init_params with LayerNorm and bias params moved off their constants, so that every
    gradient is a generic sum."""
    state = init_params(graph, seed=1)
    rng = np.random.default_rng(7)
    for t in graph.by_role("param"):
        if t.init in ("zeros", "ones") and t.updates is None:
            state[t.name] = (state[t.name] + rng.uniform(-0.1, 0.1, t.shape)).astype(t.dtype)
    return state


def _gpt_loss(p, tokens, labels, heads):
    batch, seq = tokens.shape
    dim = p["embed/tokens/table"].shape[1]
    width = dim // heads
    future = torch.ones(seq, seq, dtype=torch.bool).triu(1)

    def ln(x, name):
        return F.layer_norm(x, (dim,), p[f"{name}/scale"], p[f"{name}/bias"], eps=1e-5)

    def dense(x, name):
        return x @ p[f"{name}/weight"] + p[f"{name}/bias"]

    def attention(h, blk):
        q, k, v = dense(h, f"{blk}/attn/qkv").split(dim, dim=2)
        q, k, v = (t.view(batch, seq, heads, width).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-1, -2) / math.sqrt(width)).masked_fill(future, float("-inf"))
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, seq, dim)
        return dense(y, f"{blk}/attn/proj")

    x = F.embedding(tokens, p["embed/tokens/table"]) + p["embed/positions/table"]
    layer = 1
    while f"block{layer}/ln1/scale" in p:
        blk = f"block{layer}"
        x = x + attention(ln(x, f"{blk}/ln1"), blk)
        x = x + dense(F.gelu(dense(ln(x, f"{blk}/ln2"), f"{blk}/mlp/fc")), f"{blk}/mlp/proj")
        layer += 1
    table = p["embed/tokens/table"]
    logits = (ln(x, "ln_f") @ table.T).reshape(-1, table.shape[0])
    return F.cross_entropy(logits, labels)


# our param (suffix under block<i>/) -> (TransformerEncoderLayer param, transposed)
BERT_PARAMS = {
    "attn/qkv/weight": ("self_attn.in_proj_weight", True),
    "attn/qkv/bias": ("self_attn.in_proj_bias", False),
    "attn/proj/weight": ("self_attn.out_proj.weight", True),
    "attn/proj/bias": ("self_attn.out_proj.bias", False),
    "mlp/fc/weight": ("linear1.weight", True),
    "mlp/fc/bias": ("linear1.bias", False),
    "mlp/proj/weight": ("linear2.weight", True),
    "mlp/proj/bias": ("linear2.bias", False),
    "ln1/scale": ("norm1.weight", False),
    "ln1/bias": ("norm1.bias", False),
    "ln2/scale": ("norm2.weight", False),
    "ln2/bias": ("norm2.bias", False),
}


def _bert_loss(p, tokens, labels, heads):
    """The encoder with nn.TransformerEncoderLayer blocks whose parameters are views of p's
    leaves, so that autograd reaches p."""
    dim = p["embed/tokens/table"].shape[1]
    x = F.embedding(tokens, p["embed/tokens/table"]) + p["embed/positions/table"]
    x = F.layer_norm(x, (dim,), p["embed/ln/scale"], p["embed/ln/bias"], eps=1e-5)
    layer = 1
    while f"block{layer}/ln1/scale" in p:
        ffn = p[f"block{layer}/mlp/fc/weight"].shape[1]
        block = torch.nn.TransformerEncoderLayer(dim, heads, ffn, dropout=0.0, activation="gelu",
                                                 batch_first=True, norm_first=False,
                                                 layer_norm_eps=1e-5).to(p["embed/tokens/table"].dtype)
        for ours, (theirs, transposed) in BERT_PARAMS.items():
            value = p[f"block{layer}/{ours}"]
            _set(block, theirs, value.T if transposed else value)
        x = block(x)
        layer += 1
    logits = (x @ p["embed/tokens/table"].T).reshape(-1, p["embed/tokens/table"].shape[0])
    return F.cross_entropy(logits, labels)


def _set(module, dotted, value):
    """Replace a module's parameter by a tensor (keeping the autograd link to `value`)."""
    *path, leaf = dotted.split(".")
    for part in path:
        module = getattr(module, part)
    delattr(module, leaf)
    setattr(module, leaf, value)


def _torch_step(model, state, feeds, dtype, trainable):
    """(loss, {param: p - lr * grad}) of one SGD step in torch, in `dtype`, of the `trainable`
    parameters (the state also holds the step's learning rate and weight decay)."""
    p = {k: torch.tensor(state[k], dtype=dtype, requires_grad=True) for k in trainable}
    tokens = torch.from_numpy(feeds["tokens"])
    labels = torch.from_numpy(feeds["labels"])
    loss_fn = _gpt_loss if model == "gpt" else _bert_loss
    loss = loss_fn(p, tokens, labels, CFG["heads"])
    loss.backward()
    return loss.item(), {k: (t - LR * t.grad).detach().numpy() for k, t in p.items()}


@pytest.mark.parametrize("model", ["gpt", "bert"])
def test_training_step_matches_torch(model, tmp_path_factory):
    graph = make_training_graph(build(model, **CFG), Optimizer(kind="sgd", lr=LR))
    # attention's head splits and merges, forward and backward, run as strides of the GEMMs
    # (planner/frontend/passes/transpose_fold.py)
    assert not [n.name for n in graph.nodes if n.op == "Transpose"]
    assert sum("perm_y" in n.attrs for n in graph.nodes) == 4 * CFG["layers"]
    state = _start(graph)
    feeds = random_feeds(graph, seed=3)
    module = build_module(graph, tmp_path_factory.mktemp("transformer") / model)
    ex = module.Executor()
    ex.load_params(state)
    loss = float(ex.step(feeds)["loss"])
    got = ex.params()

    trainable = sorted(t.name for t in graph.by_role("param") if t.updates is None)
    loss64, want = _torch_step(model, state, feeds, torch.float64, trainable)
    _, single = _torch_step(model, state, feeds, torch.float32, trainable)
    assert abs(loss - loss64) / abs(loss64) < 1e-4
    assert set(want) == {t.updates for t in graph.tensors if t.role == "param" and t.updates}
    for name, target in want.items():
        step = got[name].astype(np.float64) - state[name]
        noise = rel_error(single[name] - state[name], target - state[name])
        err = rel_error(step, target - state[name])
        assert err < max(10 * noise, 1e-5), f"{model}: {name} update off by {err:.2e} " \
                                            f"(torch float32: {noise:.2e})"
