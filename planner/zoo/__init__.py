"""Model zoo: graph builders for the models the planner is evaluated on, and zoo specs.

A zoo spec names a model and overrides some of its parameters, as on the command line:

    zoo:resnet?depth=50&batch=32        ->  build("resnet", depth=50, batch=32)
    zoo:mlp?hidden=256,128&loss=false   ->  build("mlp", hidden=[256, 128], loss=False)

Every builder takes keyword-only parameters with defaults (the published configuration) and
returns an inference Graph whose outputs are (logits..., loss); `MODELS` maps names to builders.

Example:
    >>> g = from_spec("zoo:mlp?batch=2&hidden=4&in_features=3&classes=2")
    >>> g.name, g.outputs
    ('mlp_batch2_in_features3_hidden4_classes2', ('logits', 'loss'))
    >>> parse_spec("zoo:resnet?depth=101&width=0.5&loss=false")
    ('resnet', {'depth': 101, 'width': 0.5, 'loss': False})
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from planner.graph import Graph, GraphBuildError
from planner.zoo.alexnet import alexnet
from planner.zoo.common import ZooError, defaults, describe
from planner.zoo.dcgan import dcgan
from planner.zoo.densenet import densenet
from planner.zoo.inception import inception_v3
from planner.zoo.lenet import lenet
from planner.zoo.lstm import lstm
from planner.zoo.mlp import mlp
from planner.zoo.resnet import resnet
from planner.zoo.transformer import bert, gpt
from planner.zoo.vgg import vgg16
from planner.zoo.wide_deep import wide_deep

__all__ = ["MODELS", "ZooError", "build", "from_spec", "parse_spec"]

MODELS: dict[str, Callable[..., Graph]] = {
    f.__name__: f for f in (mlp, lenet, alexnet, vgg16, resnet, inception_v3, densenet,
                            wide_deep, dcgan, lstm, gpt, bert)
}

PREFIX = "zoo:"


def build(name: str, **params: Any) -> Graph:
    """Build model `name` with `params` overriding its defaults.

    Values are checked against the defaults' types (an int where a float is expected is
    accepted, and a single int where a list is expected becomes a one-element list).

    Raises:
        ZooError: unknown model (listing the known ones), or an unknown or bad parameter
            (naming it, the model, and the accepted parameters with their defaults).
    """
    builder = model(name)
    accepted = defaults(builder)
    checked = {}
    for key, value in params.items():
        if key not in accepted:
            raise ZooError(f"model {name!r} has no parameter {key!r}; it accepts "
                           f"{describe(builder)}")
        checked[key] = _coerce(name, builder, key, value, accepted[key])
    try:
        return builder(**checked)
    except ZooError as e:
        raise ZooError(f"{e}; accepted parameters: {describe(builder)}") from None
    except GraphBuildError as e:
        raise ZooError(f"model {name!r} with {checked}: {e}") from None


def model(name: str) -> Callable[..., Graph]:
    """The builder registered as `name`; ZooError listing the known models otherwise."""
    try:
        return MODELS[name]
    except KeyError:
        raise ZooError(f"unknown model {name!r}; known models: {', '.join(MODELS)}") from None


def parse_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """`zoo:NAME?key=value&...` (the `zoo:` prefix is optional) -> (NAME, params).

    Values parse as int, float, bool (`true`/`false`) or comma-separated int lists; anything
    else is a ZooError naming the parameter. The model name is not checked here.
    """
    text = spec[len(PREFIX):] if spec.startswith(PREFIX) else spec
    name, _, query = text.partition("?")
    if not name:
        raise ZooError(f"zoo spec {spec!r} names no model; expected zoo:NAME?key=value&...")
    params: dict[str, Any] = {}
    for item in query.split("&") if query else []:
        key, eq, value = item.partition("=")
        if not key or not eq or not value:
            raise ZooError(f"zoo spec {spec!r}: {item!r} is not key=value")
        if key in params:
            raise ZooError(f"zoo spec {spec!r}: parameter {key!r} given twice")
        params[key] = _parse_value(spec, key, value)
    return name, params


def from_spec(spec: str) -> Graph:
    """The graph a zoo spec describes: `build(*parse_spec(spec))`."""
    name, params = parse_spec(spec)
    return build(name, **params)


def _parse_value(spec: str, key: str, value: str) -> Any:
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    if "," in value:
        try:
            return [int(v) for v in value.split(",")]
        except ValueError:
            raise ZooError(f"zoo spec {spec!r}: parameter {key!r} = {value!r} is not a "
                           f"comma-separated list of ints") from None
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    raise ZooError(f"zoo spec {spec!r}: parameter {key!r} = {value!r} is not an int, float, "
                   f"bool or int list")


def _coerce(name: str, builder: Callable[..., Graph], key: str, value: Any, default: Any) -> Any:
    """`value` as the type of `default`, or a ZooError naming the parameter."""
    def bad(expected: str) -> ZooError:
        return ZooError(f"model {name!r}: parameter {key!r} must be {expected}, got {value!r}; "
                        f"accepted parameters: {describe(builder)}")

    def is_int(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        if is_int(value) and value in (0, 1):
            return bool(value)
        raise bad("a bool")
    if is_int(default):
        if is_int(value):
            return value
        raise bad("an int")
    if isinstance(default, float):
        if is_int(value) or isinstance(value, float):
            return float(value)
        raise bad("a number")
    if isinstance(default, (list, tuple)):
        items = [value] if is_int(value) else value
        if isinstance(items, (list, tuple)) and all(is_int(v) for v in items):
            return tuple(items)
        raise bad("an int or a list of ints")
    return value
