"""Transformers: `gpt` (a decoder: pre-LayerNorm blocks, causal attention, as GPT-2) and `bert`
(an encoder: post-LayerNorm blocks, as torch.nn.TransformerEncoderLayer and BERT).

    tokens (batch, seq) int64 -> Embedding(embed/tokens/table (vocab, dim))
                                  + embed/positions/table (seq, dim)
    [bert: LayerNorm]
    -> layers x block:
         gpt   x = x + attention(LN1(x));  x = x + mlp(LN2(x))
         bert  x = LN1(x + attention(x));  x = LN2(x + mlp(x))
       attention(h): qkv = h @ attn/qkv/weight (dim, 3 dim) + bias, split into q, k, v, each
         reshaped (batch, seq, heads, dim/heads) and transposed to (batch, heads, seq, dim/heads);
         scores = q @ k^T / sqrt(dim/heads) (batched MatMul), [gpt: CausalMask], Softmax, @ v,
         back to (batch, seq, dim), @ attn/proj/weight (dim, dim) + bias
       mlp(h) = Gelu(h @ mlp/fc/weight (dim, ffn) + bias) @ mlp/proj/weight (ffn, dim) + bias
    [gpt: LayerNorm ln_f]
    -> logits = x @ embed/tokens/table^T (the output projection tied to the token embedding),
       reshaped (batch x seq, vocab)
    loss = SoftmaxCrossEntropy(logits, labels (batch x seq,) int64): the mean over every token
       (for gpt the next tokens, for bert the tokens to recover).

Linear weights are [in, out] (MatMul's b); torch.nn.Linear's weight is their transpose, and
nn.MultiheadAttention's in_proj_weight is attn/qkv/weight transposed (rows q, k, v). Weights are
initialised N(0, 0.02) as GPT-2 and BERT, embedding tables N(0, 1 / dim) as the zoo's other
tables, biases zero, LayerNorm scale one. No dropout: a step is deterministic, so it can be
checked against PyTorch (tests/codegen/test_transformer_vs_torch.py).

The defaults are small (a 2-layer, 64-wide model over 32 tokens) so that they plan, build and
train in seconds on a laptop.

Example:
    >>> g = gpt(batch=2, seq=8, dim=16, heads=2, layers=1, vocab=11)
    >>> g.outputs, g.tensor("logits").shape
    (('logits', 'loss'), (16, 11))
    >>> sorted({n.op for n in g.nodes} & {"CausalMask", "LayerNorm", "Gelu"})
    ['CausalMask', 'Gelu', 'LayerNorm']
"""

from __future__ import annotations

import math

from planner.graph import Graph, GraphBuilder
from planner.zoo.common import graph_name, require, require_positive
from planner.zoo.layers import classify


def gpt(*, batch: int = 4, seq: int = 32, dim: int = 64, heads: int = 4, layers: int = 2,
        vocab: int = 256, ffn: int = 0, loss: bool = True) -> Graph:
    """GPT-style decoder language model (ffn=0 means 4 * dim); outputs (logits, loss)."""
    return _transformer(gpt, locals(), causal=True)


def bert(*, batch: int = 4, seq: int = 32, dim: int = 64, heads: int = 4, layers: int = 2,
         vocab: int = 256, ffn: int = 0, loss: bool = True) -> Graph:
    """BERT-style encoder with a tied token head (ffn=0 means 4 * dim); outputs (logits, loss)."""
    return _transformer(bert, locals(), causal=False)


def _transformer(builder, params: dict, causal: bool) -> Graph:
    model = builder.__name__
    batch, seq, dim, heads = params["batch"], params["seq"], params["dim"], params["heads"]
    vocab, layers = params["vocab"], params["layers"]
    ffn = params["ffn"] or 4 * dim
    require_positive(model, batch=batch, seq=seq, dim=dim, heads=heads, layers=layers,
                     vocab=vocab, ffn=ffn)
    require(dim % heads == 0, model, "heads", f"must divide dim {dim}, got {heads}")
    b = GraphBuilder(graph_name(builder, params))
    tokens = b.input("tokens", (batch, seq), dtype="int64")
    table = b.param("embed/tokens/table", (vocab, dim), init="embedding")
    positions = b.param("embed/positions/table", (seq, dim), init="embedding")
    x = b.op("Add", [b.op("Embedding", [table, tokens], name="embed/lookup"), positions],
             name="embed")
    if not causal:
        x = layer_norm(b, x, "embed/ln")
    for layer in range(1, layers + 1):
        with b.scope(f"block{layer}"):
            if causal:  # pre-LN: the residual stream itself is never normalised
                x = b.op("Add", [x, attention(b, layer_norm(b, x, "ln1"), heads, causal)],
                         name="attn/residual")
                x = b.op("Add", [x, mlp(b, layer_norm(b, x, "ln2"), ffn)], name="mlp/residual")
            else:  # post-LN, as nn.TransformerEncoderLayer(norm_first=False)
                x = layer_norm(b, b.op("Add", [x, attention(b, x, heads, causal)],
                                       name="attn/residual"), "ln1")
                x = layer_norm(b, b.op("Add", [x, mlp(b, x, ffn)], name="mlp/residual"), "ln2")
    if causal:
        x = layer_norm(b, x, "ln_f")
    scores = b.op("MatMul", [x, table], {"transpose_b": True}, name="head")
    logits = b.op("Reshape", [scores], {"shape": [batch * seq, vocab]}, name="head/reshape",
                  outputs=["logits"])
    return b.build(classify(b, logits, params["loss"]))


def layer_norm(b: GraphBuilder, x: str, name: str) -> str:
    """LayerNorm over the last axis with `name/scale` (ones) and `name/bias` (zeros)."""
    dim = b.type(x).shape[-1]
    scale = b.param(f"{name}/scale", (dim,), init="ones")
    bias = b.param(f"{name}/bias", (dim,), init="zeros")
    return b.op_n("LayerNorm", [x, scale, bias], {"axis": -1, "epsilon": 1e-5}, name=name)[0]


def dense(b: GraphBuilder, x: str, out: int, name: str) -> str:
    """x (..., in) @ name/weight (in, out) + name/bias, over the last axis."""
    w = b.param(f"{name}/weight", (b.type(x).shape[-1], out), init="normal")
    bias = b.param(f"{name}/bias", (out,), init="zeros")
    return b.op("BiasAdd", [b.op("MatMul", [x, w], name=name), bias], {"axis": -1},
                name=f"{name}/bias_add")


def attention(b: GraphBuilder, x: str, heads: int, causal: bool) -> str:
    """Multi-head self-attention of x (batch, seq, dim) with batched MatMuls."""
    batch, seq, dim = b.type(x).shape
    width = dim // heads
    with b.scope("attn"):
        qkv = dense(b, x, 3 * dim, "qkv")
        split = b.op_n("Split", [qkv], {"axis": 2, "sizes": [dim] * 3}, name="split")
        q, k, v = (b.op("Transpose", [b.op("Reshape", [t], {"shape": [batch, seq, heads, width]},
                                           name=f"{part}/heads")],
                        {"perm": [0, 2, 1, 3]}, name=part)
                   for part, t in zip("qkv", split, strict=True))
        scores = b.op("MatMul", [q, k], {"transpose_b": True}, name="scores")
        scores = b.op("Scale", [scores], {"factor": 1.0 / math.sqrt(width)}, name="scaled")
        if causal:
            scores = b.op("CausalMask", [scores], name="mask")
        p = b.op("Softmax", [scores], {"axis": -1}, name="softmax")
        y = b.op("Transpose", [b.op("MatMul", [p, v], name="context")], {"perm": [0, 2, 1, 3]},
                 name="context/merge")
        y = b.op("Reshape", [y], {"shape": [batch, seq, dim]}, name="context/reshape")
        return dense(b, y, dim, "proj")


def mlp(b: GraphBuilder, x: str, ffn: int) -> str:
    """Gelu(x @ fc + bias) @ proj + bias."""
    dim = b.type(x).shape[-1]
    with b.scope("mlp"):
        h = b.op("Gelu", [dense(b, x, ffn, "fc")], name="gelu")
        return dense(b, h, dim, "proj")
