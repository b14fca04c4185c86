"""What every zoo builder shares: the error type, graph naming and channel scaling.

A builder is a function with keyword-only parameters, each with a default; the defaults are the
model's published configuration. Its graph is named after the model and the parameters that
differ from those defaults, so two specs that build different graphs never share a name.

Example:
    >>> def toy(*, batch: int = 32, hidden: tuple[int, ...] = (256, 128)) -> None: ...
    >>> graph_name(toy, {"batch": 32, "hidden": [4, 2]})
    'toy_hidden4x2'
    >>> scaled(64, 0.5), scaled(3, 0.1)
    (32, 1)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any


class ZooError(ValueError):
    """A model or a model parameter that the zoo does not know or cannot build."""


def defaults(builder: Callable[..., Any]) -> dict[str, Any]:
    """The builder's parameters and their defaults, in signature order."""
    return {p.name: p.default for p in inspect.signature(builder).parameters.values()}


def describe(builder: Callable[..., Any]) -> str:
    """`batch=32, depth=50, ...`: the accepted parameters with defaults, for error messages."""
    return ", ".join(f"{k}={_spell(v)}" for k, v in defaults(builder).items())


def graph_name(builder: Callable[..., Any], params: Mapping[str, Any]) -> str:
    """`model_key<value>_...` for every parameter that differs from its default.

    Lists are spelled `4x2`, floats `0p5`, bools `true`/`false`: the name stays an identifier
    (generated executors use it for directories and import names).
    """
    parts = [builder.__name__]
    for key, default in defaults(builder).items():
        value = params.get(key, default)
        if _same(value, default):
            continue
        parts.append(f"{key}{_spell(value, sep='x').replace('.', 'p').replace('-', 'm')}")
    return "_".join(parts)


def scaled(channels: int, width: float) -> int:
    """Channel count under a width multiplier: rounded, at least 1."""
    return max(1, int(round(channels * width)))


def require(ok: bool, model: str, param: str, message: str) -> None:
    """Raise ZooError naming the model and parameter unless `ok`."""
    if not ok:
        raise ZooError(f"model {model!r}: parameter {param!r} {message}")


def _same(value: Any, default: Any) -> bool:
    if isinstance(default, (list, tuple)) and isinstance(value, (list, tuple)):
        return list(value) == list(default)
    if isinstance(value, bool) or isinstance(default, bool):
        return type(value) is type(default) and value == default
    return bool(value == default)


def _spell(value: Any, sep: str = ",") -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return sep.join(str(v) for v in value)
    return str(value)


def require_positive(model: str, **params: float) -> None:
    """ZooError naming the first parameter that is not > 0."""
    for key, value in params.items():
        require(value > 0, model, key, f"must be > 0, got {value}")
