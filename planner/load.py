"""Reading and writing the user's files: the I/O edge of the pipeline.

A GRAPH argument is one of
  - a zoo spec: `zoo:resnet?depth=50&batch=32`,
  - an ONNX file (recognised by its `.onnx` suffix, or by failing to parse as JSON),
  - a graph JSON file as written by `planner graph -o`,
  - a PyTorch ExportedProgram saved by `torch.export.save` (`.pt2`, planner.torch).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic import ValidationError

from planner.errors import UserError
from planner.graph import Graph, check_graph, normalize_attrs


def load_graph(spec: str, train_dropout: bool = False) -> Graph:
    """Load and validate a graph from a zoo spec, an ONNX file or a graph JSON file.

    `train_dropout`: an ONNX file's Dropouts without a training flag train too (see
    planner.importers.onnx.import_onnx); other sources ignore it."""
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
    suffix = path.suffix.lower()
    try:
        if suffix == ".pt2":  # its reader opens the file itself, once (planner/torch/archive.py)
            from planner.torch.program import load_pt2

            return check_graph(load_pt2(path, name=path.stem))
        data = path.read_bytes()
        if suffix == ".onnx" or (suffix != ".json" and not _looks_like_json(data)):
            from planner.importers import load_onnx

            return check_graph(load_onnx(path, name=path.stem, train_dropout=train_dropout))
        return graph_from_data(parse_json_bytes(data, spec), source=spec)
    except ValueError as e:  # GraphError, OpError, OnnxImportError: name the file too
        if str(e).startswith(spec):
            raise
        raise UserError(f"{spec}: {e}") from None


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


def with_kept(graph: Graph, names: list[str] | None) -> Graph:
    """The graph with tensors `names` added to its outputs, which the plan keeps to the end of
    the step (no later tensor reuses their bytes), so that an executor's step returns them;
    UserError naming a tensor the graph does not have.

    >>> from planner.zoo import build
    >>> g = build("mlp", batch=2, hidden=[4], in_features=3, classes=2)
    >>> with_kept(g, ["relu1"]).outputs
    ('logits', 'loss', 'relu1')
    """
    if not names:
        return graph
    tensors = graph.tensor_map
    for name in names:
        if name not in tensors:
            raise UserError(f"--keep: graph {graph.name!r} has no tensor {name!r}")
    kept = tuple(dict.fromkeys((*graph.outputs, *names)))
    return check_graph(graph.model_copy(update={"outputs": kept}))


def kept_names(text: str) -> list[str]:
    """argparse type of --keep: comma-separated tensor names."""
    return [n for n in (part.strip() for part in text.split(",")) if n]


LOSS_HELP = ("attach a loss to an output (default: the only one) with a new label input: "
             "cross-entropy (int64 class ids; classes on axis 1 as PyTorch's; options "
             "?axis=A&ignore_index=I&label_smoothing=S) or mse (float targets), e.g. "
             "--loss cross-entropy:logits")


def graph_from_json(text: str, source: str = "graph JSON") -> Graph:
    """Parse, normalise and validate graph JSON; errors name the offending field."""
    return graph_from_data(parse_json(text, source), source)


def graph_from_data(data: object, source: str) -> Graph:
    """Normalise and validate parsed graph JSON; errors name `source` and the field."""
    try:
        graph = Graph.model_validate(data)
    except ValidationError as e:
        raise UserError(f"{source}: {describe_validation_error(e)}") from None
    return check_graph(normalize_attrs(graph))


def read_json(path: str | Path, what: str = "file") -> object:
    """The JSON data of the user's file `path` (a `what`: plan, cost table, target, ...): the
    one reader of every command. UserError naming the file, and the byte, line or field, for a
    file that cannot be read, is not UTF-8, is not JSON or holds text that cannot be written
    back as UTF-8 (a lone surrogate escape).

    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "t.json")
    >>> _ = open(path, "wb").write(b'{"name": "caf\\xe9"}')
    >>> read_json(path, "target")
    Traceback (most recent call last):
    planner.errors.UserError: ...t.json: not UTF-8 text (byte 0xe9 at offset 13)
    """
    p = Path(path)
    if p.is_dir():
        raise UserError(f"{path}: is a directory, not a {what}")
    if p.exists() and not p.is_file():
        raise UserError(f"{path}: is not a regular file")  # a FIFO would block the read
    try:
        data = p.read_bytes()
    except OSError as e:
        raise UserError(f"{path}: cannot read {what} ({e.strerror or e})") from None
    return parse_json_bytes(data, str(path))


def parse_json_bytes(data: bytes, source: str) -> object:
    """parse_json of a file's bytes, which must be UTF-8 (the error gives the first bad byte)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{source}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset "
                        f"{e.start})") from None
    return parse_json(text, source)


def parse_json(text: str, source: str) -> object:
    """json.loads with one-line errors naming `source` (and the line and column); text that
    cannot be written back as UTF-8 is refused naming its field (see check_utf8).

    >>> parse_json('{"nodes": [{"name": "a\\\\ud800"}]}', "g.json")
    Traceback (most recent call last):
    planner.errors.UserError: g.json: field nodes.0.name: '\\ud800' is a lone surrogate, not text
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{source}: not valid JSON (line {e.lineno} column {e.colno}: "
                        f"{e.msg})") from None
    except RecursionError:
        raise UserError(f"{source}: JSON nested too deeply") from None
    # A lone surrogate can only come from a \uD8xx..\uDFxx escape: look only when one is there.
    if _SURROGATE_ESCAPE.search(text):
        check_utf8(data, source)
    return data


_SURROGATE_ESCAPE = re.compile(r"\\[uU][dD][89a-fA-F]")


def check_utf8(data: object, source: str) -> None:
    """Refuse a string (key or value) in JSON `data` that cannot be encoded as UTF-8, naming
    its field: checked before anything is written, so no half-written file names it.

    >>> check_utf8({"graph": {"name": "ok", "tags": ["x\\udc80"]}}, "p.json")
    Traceback (most recent call last):
    planner.errors.UserError: p.json: field graph.tags.0: '\\udc80' is a lone surrogate, not text
    """
    problem = _non_utf8_field(data, ())
    if problem:
        where, char = problem
        raise UserError(f"{source}: field {'.'.join(where) or 'document'}: {ascii(char)} is a "
                        f"lone surrogate, not text")


def _non_utf8_field(data: object, where: tuple[str, ...]) -> tuple[tuple[str, ...], str] | None:
    stack = [(data, where)]
    while stack:
        value, at = stack.pop()
        if isinstance(value, str):
            bad = _lone_surrogate(value)
            if bad:
                return at, bad
        elif isinstance(value, dict):
            for key, item in value.items():
                bad = _lone_surrogate(key)
                if bad:
                    return (*at, ascii(key)), bad
                stack.append((item, (*at, key)))
        elif isinstance(value, list):
            stack.extend((item, (*at, str(i))) for i, item in enumerate(value))
    return None


def _lone_surrogate(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return text[e.start]
    return ""


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


def write_text(path: str, text: str | bytes, force: bool = False) -> bool:
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
