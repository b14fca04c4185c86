"""prims.fma (a * b + c) as a multiply and an add.

torch.optim's Adam and AdamW, traced by Dynamo, update the second moment with
`torch._foreach_addcmul_` / `addcmul_`, which Dynamo's graph spells as `prims.fma` (one rounding
of a * b + c). The planner has no fused multiply-add: the two ops round twice, a difference of
at most half an ulp of the product per step (float32 noise beside eager's fused one).
"""

from __future__ import annotations

from typing import Any


def fma(a: Any, b: Any, c: Any) -> Any:
    return a * b + c


def decompositions() -> dict[Any, Any]:
    import torch

    return {torch.ops.prims.fma.default: fma}
