"""Reading and writing the user's files: the I/O edge of the pipeline.

A GRAPH argument is one of
  - a zoo spec: `zoo:resnet?depth=50&batch=32`,
  - an ONNX file (recognised by its `.onnx` suffix, or by failing to parse as JSON),
  - a graph JSON file as written by `planner graph -o`.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from planner.errors import UserError
from planner.graph import Graph, check_graph, normalize_attrs


def load_graph(spec: str) -> Graph:
    """Load and validate a graph from a zoo spec, an ONNX file or a graph JSON file."""
    if spec.startswith("zoo:"):
        from planner.zoo import from_spec

        return check_graph(from_spec(spec))
    path = Path(spec)
    if not path.exists():
        raise UserError(f"{spec}: no such file (a GRAPH is an .onnx file, a graph .json file "
                        f"or a zoo spec such as 'zoo:resnet?depth=50&batch=32')")
    if path.is_dir():
        raise UserError(f"{spec}: is a directory, not a graph file")
    if not path.is_file():
        raise UserError(f"{spec}: is not a regular file")  # a FIFO would block the read
    data = path.read_bytes()
    suffix = path.suffix.lower()
    if suffix == ".onnx" or (suffix != ".json" and not _looks_like_json(data)):
        from planner.importers import load_onnx

        return check_graph(load_onnx(path, name=path.stem))
    return graph_from_json(data.decode("utf-8", errors="replace"), source=spec)


def with_loss(graph: Graph, spec: str | None) -> Graph:
    """The graph with the loss a `--loss KIND[:OUTPUT]` option names attached (unchanged when
    spec is None); see planner.graph.loss.

    >>> from planner.zoo import build
    >>> g = build("mlp", batch=2, hidden=[4], in_features=3, classes=2, loss=False)
    >>> with_loss(g, "cross-entropy:logits").outputs
    ('loss', 'logits')
    """
    if spec is None:
        return graph
    from planner.graph.loss import attach_loss, parse_loss_spec

    kind, output, options = parse_loss_spec(spec)
    return attach_loss(graph, kind, output, **options)


LOSS_HELP = ("attach a loss to an output (default: the only one) with a new label input: "
             "cross-entropy (int64 class ids; classes on axis 1 as PyTorch's; options "
             "?axis=A&ignore_index=I&label_smoothing=S) or mse (float targets), e.g. "
             "--loss cross-entropy:logits")


def graph_from_json(text: str, source: str = "graph JSON") -> Graph:
    """Parse, normalise and validate graph JSON; errors name the offending field."""
    data = parse_json(text, source)
    try:
        graph = Graph.model_validate(data)
    except ValidationError as e:
        raise UserError(f"{source}: {describe_validation_error(e)}") from None
    return check_graph(normalize_attrs(graph))


def parse_json(text: str, source: str) -> object:
    """json.loads with one-line errors naming `source` (and the line and column)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{source}: not valid JSON (line {e.lineno} column {e.colno}: "
                        f"{e.msg})") from None
    except RecursionError:
        raise UserError(f"{source}: JSON nested too deeply") from None


def describe_validation_error(e: ValidationError) -> str:
    """One line for a pydantic error: the first problem with its field path, and a count."""
    errors = e.errors()
    first = errors[0]
    where = ".".join(str(p) for p in first["loc"]) or "document"
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    return f"field {where}: {first['msg']}{more}"


def _looks_like_json(data: bytes) -> bool:
    head = data.lstrip()[:1]
    if head not in (b"{", b"["):
        return False
    try:
        json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return False
    except RecursionError:
        return True  # JSON, nested too deeply: graph_from_json says so
    return True


def write_text(path: str, text: str, force: bool = False) -> bool:
    """Write `text` to `path`, refusing to replace a different existing file unless `force`.

    Returns False when the file already holds exactly this text (nothing written, so build
    tools watching timestamps see no change). The write is atomic (planner.files): a failure
    leaves the old file whole. A target that is not a regular file (a FIFO, /dev/full, a
    folder) is refused before anything is read from it.
    """
    from planner.files import atomic_write, check_target, holds

    check_target(path)
    if holds(path, text):
        return False
    if Path(path).exists() and not force:
        raise UserError(f"{path} exists and differs; pass --force to overwrite it")
    atomic_write(path, text)
    return True
