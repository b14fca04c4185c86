"""Which constant-only ATen calls the importer may evaluate with torch's eager kernels, and the
checks on a file's values that come first.

A `.pt2` file's constants are data an attacker writes, and torch's CPU kernels trust some of
their operands: an integer division of INT_MIN by -1 traps (SIGFPE), `segment_reduce` reads
at offsets it never checks (a crash, or process memory copied into a constant). So a call is
folded (evaluated now, planner/torch/convert.py `_fold`) only when

1. its operator is on the allow-list below, each class argued:
   - `pointwise` (torch.Tag.pointwise): each output element reads its operands at the same,
     broadcast index; no value becomes an address. Integer division and remainder can trap,
     so their divisors are checked first (`_divisors`).
   - `reduction` (torch.Tag.reduction): reads every element of its input once along axes
     given as arguments, which torch checks against the rank.
   - views and copies, concatenation, padding and triangles (VIEWS): addresses from sizes,
     strides and dims given as arguments and checked by their meta kernels, never from values.
   - factories (FACTORIES): no tensor operand at all (their size is bounded below).
   - gathers (GATHERS): the one class whose values are addresses: every index is checked
     against the dimension it indexes before torch runs (`_indices`).
   Everything else (segment_reduce, scatter and index_put, sort and search, linear algebra)
   is left to its conversion rule, which computes it in the step (or refuses it naming the
   node) with the bounds its shape rule proves.
2. its outputs, worked out from the actual operands on torch's meta device (no data read, no
   memory taken), hold at most FOLD_OUTPUT_LIMIT elements in all: the file's metadata could
   understate them (`aten.arange(0, 2**40)` declared as 4 elements).

>>> allowed_to_fold("aten.add.Tensor"), allowed_to_fold("aten.segment_reduce.default")
(True, False)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from planner.importers.onnx.fold import FOLD_OUTPUT_LIMIT

VIEWS = frozenset({
    "aten.view.default", "aten._unsafe_view.default", "aten.reshape.default",
    "aten.expand.default", "aten.permute.default", "aten.transpose.int", "aten.t.default",
    "aten.squeeze.default", "aten.squeeze.dim", "aten.squeeze.dims", "aten.unsqueeze.default",
    "aten.slice.Tensor", "aten.select.int", "aten.alias.default", "aten.clone.default",
    "aten._to_copy.default", "aten.contiguous.default", "aten.flatten.using_ints",
    "aten.unflatten.int", "aten.split.Tensor", "aten.split_with_sizes.default",
    "aten.chunk.default", "aten.narrow.default", "aten.unbind.int", "aten.cat.default",
    "aten.stack.default", "aten.repeat.default", "aten.flip.default", "aten.roll.default",
    "aten.constant_pad_nd.default", "aten.tril.default", "aten.triu.default",
    "aten.diagonal.default", "aten.movedim.int", "aten.lift_fresh_copy.default",
    "aten.detach.default", "aten.copy.default", "aten.view_as.default",
    "aten.expand_as.default", "aten.type_as.default", "aten.unfold.default",
})
FACTORIES = frozenset({
    "aten.arange.default", "aten.arange.start", "aten.arange.start_step",
    "aten.full.default", "aten.zeros.default", "aten.ones.default",
    "aten.scalar_tensor.default", "aten.full_like.default", "aten.zeros_like.default",
    "aten.ones_like.default", "aten.eye.default", "aten.eye.m", "aten.linspace.default",
    "aten.tril_indices.default", "aten.triu_indices.default",
})
# Complex values made of constants (Llama's freqs_cis built in forward): element-wise or
# whole-tensor kernels that read no value as an address.
COMPLEX = frozenset({
    "aten.polar.default", "aten.complex.default", "aten.view_as_real.default",
    "aten.view_as_complex.default", "aten._conj.default", "aten.resolve_conj.default",
    "aten._fft_r2c.default", "aten._fft_c2c.default", "aten._fft_c2r.default",
})
# operator -> (argument position and name of the indexed tensor, of the indices, of the dim
# (None: the first), whether the index may be negative)
GATHERS: dict[str, tuple[tuple[int, str], tuple[int, str], tuple[int, str] | None, bool]] = {
    "aten.index_select.default": ((0, "self"), (2, "index"), (1, "dim"), False),
    "aten.gather.default": ((0, "self"), (2, "index"), (1, "dim"), False),
    "aten.embedding.default": ((0, "weight"), (1, "indices"), None, False),
    "aten.take.default": ((0, "self"), (1, "index"), None, True),
    "aten.index.Tensor": ((0, "self"), (1, "indices"), None, True),
}
# Integer division and remainder: a zero divisor, or INT_MIN by -1, traps in the kernel.
DIVIDING = frozenset({"div", "floor_divide", "remainder", "fmod"})


class FoldRefused(ValueError):
    """A constant-only call whose operands the kernel must not see (a trap, a read out of
    bounds): the message says which value and why, the caller names the node."""


def allowed_to_fold(target: str) -> bool:
    """Whether a constant-only call of `target` may be evaluated with torch (see above)."""
    return target in VIEWS or target in FACTORIES or target in GATHERS or \
        target in COMPLEX or _tagged(target)


@functools.cache
def _tagged(target: str) -> bool:
    import torch

    from planner.importers.torch.targets import resolve

    op = resolve(target)
    return op is not None and (torch.Tag.pointwise in op.tags or
                               torch.Tag.reduction in op.tags)


def check_operands(target: str, args: Sequence[Any], kwargs: Mapping[str, Any],
                   value: Callable[[Any], np.ndarray | None]) -> None:
    """FoldRefused when the call's operands would make its kernel trap or read out of
    bounds. `value(arg)`: the array a tensor argument holds, None for a non-tensor."""
    name = target.split(".")[1]
    if name in DIVIDING:
        _divisors(args, kwargs, value)
    elif target in GATHERS:
        _indices(target, args, kwargs, value)


def predicted_elements(op: Any, args: Any, kwargs: Mapping[str, Any],
                       meta: Callable[[Any], Any]) -> int | None:
    """The elements of the call's outputs, worked out on torch's meta device from the actual
    operands (`meta(arg)`: the argument with each tensor an empty meta tensor of its shape
    and dtype); None when the meta kernel cannot say (an output shape that depends on the
    values: a boolean mask's selection)."""
    import torch

    kwargs = {k: meta(v) for k, v in kwargs.items()}
    if any(a.name == "device" for a in op._schema.arguments):  # a factory: made on meta too
        kwargs["device"] = torch.device("meta")
    try:
        with torch.no_grad():
            out = op(*meta(args), **kwargs)
    except Exception:  # noqa: BLE001 - no meta kernel, a data-dependent shape, a bad argument
        return None
    outs = out if isinstance(out, (tuple, list)) else (out,)
    if not all(isinstance(t, torch.Tensor) for t in outs):
        return None
    return sum(math.prod(t.shape) for t in outs)


def _arg(args: Sequence[Any], kwargs: Mapping[str, Any], k: int, name: str) -> Any:
    return args[k] if k < len(args) else kwargs.get(name)


def _divisors(args: Sequence[Any], kwargs: Mapping[str, Any],
              value: Callable[[Any], np.ndarray | None]) -> None:
    dividend = value(_arg(args, kwargs, 0, "self"))
    other = _arg(args, kwargs, 1, "other")
    divisor = value(other)
    if divisor is None:
        if not isinstance(other, (int, float, bool)):
            return
        divisor = np.asarray(other)
    integral = [a for a in (dividend, divisor) if a is not None]
    if not all(a.dtype.kind in "iub" for a in integral):
        return  # a float division: inf and NaN, no trap
    if (divisor == 0).any():
        raise FoldRefused("an integer division by zero")
    if dividend is not None and dividend.dtype.kind == "i" and (divisor == -1).any() and \
            (dividend == np.iinfo(dividend.dtype).min).any():
        raise FoldRefused(f"an integer division of {np.iinfo(dividend.dtype).min} (the "
                          f"{dividend.dtype} minimum) by -1, which overflows")


def _indices(target: str, args: Sequence[Any], kwargs: Mapping[str, Any],
             value: Callable[[Any], np.ndarray | None]) -> None:
    (kx, nx), (ki, ni), dim_at, negative = GATHERS[target]
    x = value(_arg(args, kwargs, kx, nx))
    index = _arg(args, kwargs, ki, ni)
    if x is None:
        return
    if target == "aten.index.Tensor":
        at = 0
        for i in index or ():
            v = value(i)
            if v is None:  # a None entry: a whole dimension
                at += 1
                continue
            if v.dtype == np.bool_:
                if x.shape[at:at + v.ndim] != v.shape:
                    raise FoldRefused(f"a boolean index of shape {list(v.shape)} for dims "
                                      f"{list(x.shape[at:at + v.ndim])}")
                at += v.ndim
                continue
            _within(v, x.shape[at] if at < x.ndim else 0, True, f"dim {at}")
            at += 1
        return
    v = value(index)
    if v is None:
        return
    if target == "aten.take.default":
        _within(v, x.size, negative, "the flattened tensor")
        return
    dim = 0 if dim_at is None else int(_arg(args, kwargs, *dim_at))
    if x.ndim == 0:
        _within(v, 1, negative, "a 0-d tensor")
        return
    if not -x.ndim <= dim < x.ndim:
        raise FoldRefused(f"dim {dim} of a {x.ndim}-d tensor")
    _within(v, x.shape[dim], negative, f"dim {dim}")


def _within(index: np.ndarray, size: int, negative: bool, what: str) -> None:
    if index.dtype.kind not in "iu":
        raise FoldRefused(f"{index.dtype} indices")
    if index.size == 0:
        return
    low, high = int(index.min()), int(index.max())
    if high >= size or low < (-size if negative else 0):
        raise FoldRefused(f"index {high if high >= size else low} out of range for "
                          f"{what} of size {size}")


__all__ = ["FOLD_OUTPUT_LIMIT", "FoldRefused", "allowed_to_fold", "check_operands",
           "predicted_elements"]
