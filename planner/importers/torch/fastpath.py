"""nn.TransformerEncoderLayer's inference fast path, as the ops it fuses.

In eval() under no_grad, `nn.TransformerEncoderLayer.forward` calls one fused ATen op,
`aten._transformer_encoder_layer_fwd` (aten/src/ATen/native/transformers/transformer.cpp),
which torch.export keeps whole and the ATen front end has no rule for. Its computation is the
layer's own forward: self-attention (one packed QKV projection, heads of embed_dim / num_heads,
scaled dot-product attention, the output projection), a residual, LayerNorm, a two-layer ReLU or
GELU feed-forward, a residual and LayerNorm, the norms before (norm_first) or after each block.
DECOMPOSITIONS gives it in those ops, for `run_decompositions`, so the layer imports as it does
in training. A mask (a padding or attention mask given to the fast path) is refused: the fast
path's mask types are not spelled here.
"""

from __future__ import annotations

from typing import Any


def encoder_layer(src: Any, embed_dim: int, num_heads: int, qkv_weight: Any, qkv_bias: Any,
                  proj_weight: Any, proj_bias: Any, use_gelu: bool, norm_first: bool,
                  eps: float, norm_weight_1: Any, norm_bias_1: Any, norm_weight_2: Any,
                  norm_bias_2: Any, ffn_weight_1: Any, ffn_bias_1: Any, ffn_weight_2: Any,
                  ffn_bias_2: Any, mask: Any = None, mask_type: int | None = None) -> Any:
    import torch.nn.functional as F

    if mask is not None:
        raise NotImplementedError("nn.TransformerEncoderLayer's fast path with a mask")

    def norm1(x: Any) -> Any:
        return F.layer_norm(x, (embed_dim,), norm_weight_1, norm_bias_1, eps)

    def norm2(x: Any) -> Any:
        return F.layer_norm(x, (embed_dim,), norm_weight_2, norm_bias_2, eps)

    def attention(x: Any) -> Any:
        *lead, t, _ = x.shape
        head = embed_dim // num_heads
        q, k, v = F.linear(x, qkv_weight, qkv_bias).chunk(3, dim=-1)
        q, k, v = (y.reshape(*lead, t, num_heads, head).transpose(-3, -2) for y in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v)
        return F.linear(out.transpose(-3, -2).reshape(*lead, t, embed_dim), proj_weight,
                        proj_bias)

    def feed_forward(x: Any) -> Any:
        h = F.linear(x, ffn_weight_1, ffn_bias_1)
        return F.linear(F.gelu(h) if use_gelu else F.relu(h), ffn_weight_2, ffn_bias_2)

    if norm_first:
        x = src + attention(norm1(src))
        return x + feed_forward(norm2(x))
    x = norm1(src + attention(src))
    return norm2(x + feed_forward(x))


def decompositions() -> dict[Any, Any]:
    import torch

    return {torch.ops.aten._transformer_encoder_layer_fwd.default: encoder_layer}
