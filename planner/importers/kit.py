"""What the ONNX and ATen importers share: a value known at import time (`Const`), the error
a conversion rule raises when a node has no planner equivalent (`Unsupported`), the base of
each importer's one error type (`ImportFailed`), and the rule registry (`Rules`) each fills
with its `@rule`s.

Example:
    >>> import numpy as np
    >>> c = Const.of("k", np.arange(3), origin="constant")
    >>> c.shape, c.dtype, c.foldable
    ((3,), 'int64', True)
    >>> RULES = Rules("ONNX")
    >>> @RULES.rule("Relu")
    ... def relu(n): ...
    >>> RULES["Relu"] is relu
    True
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import numpy as np

from planner.dtypes import DTYPE_BYTES

# Where a Const comes from: a graph initializer (or a ConstantOfShape placeholder standing in
# for one, as in onnx's light_* models), a Constant node, or a folded computation.
Origin = Literal["initializer", "constant", "folded"]


class ImportFailed(ValueError):
    """A model cannot be imported. The message is one line naming the file, node or tensor
    (whatever names a corrupt file holds); `unsupported` maps each unsupported op to the name of
    one node using it, and is empty when the model is broken rather than beyond what the
    planner supports."""

    def __init__(self, message: str, unsupported: Mapping[str, str] | None = None) -> None:
        super().__init__(message.replace("\r", "\\r").replace("\n", "\\n"))
        self.unsupported: dict[str, str] = dict(unsupported or {})


class Unsupported(Exception):
    """Raised by a conversion rule: this node (this op, or this variant of it) has no planner
    equivalent. `what` names it as the user will read it, e.g. "Pad (mode wrap)"."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


@dataclass(frozen=True)
class Const:
    """A tensor value known at import time: an initializer or a state tensor, a `Constant`
    node, or the folded result of a shape computation. `name` is the value it was first bound
    to; `load()` returns the numpy array (computed on demand, not cached), so importing a
    model with 100M parameters reads only their shapes."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    origin: Origin
    load: Callable[[], np.ndarray] = field(repr=False, compare=False)

    @classmethod
    def of(cls, name: str, value: Any, origin: Origin = "folded") -> Const:
        array = np.asarray(value)
        return cls(name, tuple(array.shape), array.dtype.name, origin, lambda: array)

    @property
    def foldable(self) -> bool:
        """May shape computations consume this value at import time? Not for float
        initializers: they are the model's weights, which stay params (trainable, and shared
        by every op that reads them) instead of being copied into reshaped constants
        (bfloat16 is a float type too)."""
        return not (self.origin == "initializer" and self.dtype.startswith(("float", "bfloat")))

    @property
    def is_planner_dtype(self) -> bool:
        return self.dtype in DTYPE_BYTES

    def value(self) -> np.ndarray:
        """The array; an importer's own error from `load` as it is, anything else (data that
        does not fit the dims, a bad type) as ImportFailed naming the tensor."""
        try:
            array = np.asarray(self.load())
        except ImportFailed:
            raise
        except Exception as e:
            raise ImportFailed(f"tensor {self.name!r}: cannot read its value ({e})") from None
        if tuple(array.shape) != self.shape:
            raise ImportFailed(f"tensor {self.name!r}: stored value has shape "
                               f"{list(array.shape)}, declared {list(self.shape)}")
        return array


R = TypeVar("R", bound=Callable[..., Any])


class Rules(dict[str, Callable[..., Any]]):
    """An importer's conversion rules: the op it converts (an ONNX op type, an ATen overload
    such as "aten.convolution.default") -> its rule, filled by the rules modules with
    `@RULES.rule(...)`; a second rule for one op is a ValueError at import."""

    def __init__(self, source: str) -> None:
        super().__init__()
        self.source = source

    def rule(self, *ops: str) -> Callable[[R], R]:
        def register(fn: R) -> R:
            for op in ops:
                if op in self:
                    raise ValueError(f"two {self.source} conversion rules for {op}")
                self[op] = fn
            return fn

        return register
