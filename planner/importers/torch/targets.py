"""Which operators a .pt2 file's nodes may call, and their resolution to torch's own operator
objects by a registry lookup (never by importing or evaluating a path from the file).

A target `aten.<op>.<overload>` is allowed when torch's dispatcher registers that operator and
it is one the importer converts (a rule of planner/torch/rules*.py, of real or of complex
values: rules_complex.py), a core-ATen operator
(which the importer converts or, on constants alone, evaluates: a mask from `aten.arange`),
or one torch's decomposition turns into others: an operator with a CompositeImplicitAutograd
kernel (written in other ATen ops: `aten.linear`, `aten.conv2d`, `aten.batch_norm`,
`aten._weight_norm`), an operator of torch.export's core-ATen decomposition table, or the
in-place form (`add_`) of an allowed one, or a factory of index constants that reads no
tensor (CONSTANT_FACTORIES: DLRM's `torch.tril_indices` in forward), which only torch
evaluates at import. What the decomposition then gives must itself have a
rule, or the import refuses it naming the op. prims operators are allowed only where a rule
converts them. RULES is read as its importers filled it: planner/importers/torch/convert.py imports
every rule module, and the callers here import it first.

>>> allowed("aten.relu.default"), allowed("aten.linear.default"), allowed("aten.nope.default")
(True, True, False)
"""

from __future__ import annotations

import functools
from typing import Any

from planner.importers.torch.context import RULES
from planner.importers.torch.rules_complex import CX_RULES


@functools.cache
def _registry() -> frozenset[str]:
    import torch

    return frozenset(torch._C._dispatch_get_all_op_names())


@functools.cache
def _decomposed() -> frozenset[str]:
    import torch

    return frozenset(str(op) for op in torch.export.default_decompositions())


def _qualified(target: str) -> str | None:
    """`aten::op.overload` (`aten::op` for the default overload) of `aten.op.overload`."""
    parts = target.split(".")
    if len(parts) != 3 or parts[0] not in ("aten", "prims") or parts[1].startswith("__"):
        return None
    return f"{parts[0]}::{parts[1]}" + ("" if parts[2] == "default" else f".{parts[2]}")


CONSTANT_FACTORIES = frozenset({"aten.tril_indices.default", "aten.triu_indices.default"})


@functools.cache
def allowed(target: str) -> bool:
    """Whether a node of a .pt2 file may call `target` (see the module docstring)."""
    import torch

    qualified = _qualified(target)
    if qualified is None or qualified not in _registry():
        return False
    if target in RULES or target in CX_RULES or target in CONSTANT_FACTORIES:
        return True
    if target.startswith("prims."):
        return False
    if target in _decomposed() or torch._C._dispatch_has_kernel_for_dispatch_key(
            qualified, "CompositeImplicitAutograd") or torch.Tag.core in _op(target).tags:
        return True
    op, overload = target.split(".")[1:]
    return op.endswith("_") and not op.startswith("_") and \
        allowed(f"aten.{op[:-1]}.{overload}")


def resolve(target: str) -> Any:
    """torch's operator object for an allowed target, or None."""
    if target == "getitem" or not allowed(target):
        return None
    return _op(target)


def _op(target: str) -> Any:
    """The operator object of a target the registry holds (checked before: only then is the
    name looked up)."""
    import torch

    space, op, overload = target.split(".")
    return getattr(getattr(getattr(torch.ops, space), op), overload)
