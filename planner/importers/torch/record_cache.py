"""Records kept per host: a program traced again (the next process of the same script, a
notebook's restart) skips torch's decomposition and the record.

Decomposing a traced program (torch.export's run_decompositions) and recording it
(record.from_exported) were more than half of a restarted trainer's tracing: 10.0 of 15.8 s of
the CNN script's three traces under cProfile at load 9 (bench/first_step_loop.py). Both are
functions of the traced program and the decomposition table alone, so the record is kept under
a key of everything they read: the code of the graph and of every graph nested in it (a
no_grad region's); every node's metadata they read (its value's shape, dtype, strides and
offset, the module paths and types of its module stack and the source line messages name: not
the stack's keys, which Dynamo makes of each module's id() in the process); the signature and
the symbolic ranges; the module root; torch's version and this importer's own sources (a rule
or a kept op changed: another key); the table beside torch's own (`table_text`: each op and the
function of this importer that decomposes it; one from anywhere else is not kept). The
trainer's traces (torch's table) and torch.compile's graphs (planner/torch/dynamo_import.py:
the backend's table, its fast paths, prims.fma and the `_foreach_` ops) go through the same
`convert.recorded`, whose misses detach no_grad regions' results before decomposing
(`convert.decomposed`, as every decomposition here does). A program traced with dynamic shapes
(specialize.SymbolicTrace: the trainer's, the backend's graphs of symbolic sizes) keeps one
record per size, under its key and each size symbol's value (`folder_at`): the next process
decomposes it only at a size it has not kept, once. Nothing the
user wrote is trusted to stand for the program: the key is made from what torch traced in this
process, after the trace, so an edit of the model's code, a flag read in forward, another shape,
another torch, each gives another key. A program that calls an op of its own (torch.library: its
decomposition is code the trace does not show) is not kept.

The state's values are never kept: a record read back takes its tensors from this process's
program (the user's weights now, not the run that wrote it), and is used only where their names,
shapes and dtypes are the ones recorded; else, or where the file cannot be read, the program is
decomposed as if nothing were kept (and the record written again). A record is JSON of plain
values (torch's dtype, device, layout and memory format by name, looked up as those types only);
one that holds anything else is not kept. Records live in <cache>/records/KEY/ beside the built
packages, listed and pruned with them (planner/io/disk_cache.py, `planner cache`).

>>> decoded(encoded((Ref("x"), [1, 2.5, None], {"dim": -1})))
(Ref(name='x'), [1, 2.5, None], {'dim': -1})
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from planner.importers.torch.record import Call, Input, Output, Program, Value, state_tensors
from planner.importers.torch.ref import Ref

# Bumped when the file's layout changes (older records are then another key, never misread).
FORMAT = 1
FILE = "record.json"
_TORCH_KINDS = ("dtype", "device", "layout", "memory_format")
# The op namespaces whose decompositions are torch's own (a program calling any other op is
# not kept).
TORCH_NAMESPACES = frozenset({"aten", "prims"})
# torch's own higher-order ops whose bodies are graphs nested in the program, each hashed into
# the key with its code (a no_grad region: grad_mode.py).
KEPT_HIGHER_ORDER = frozenset({"wrap_with_set_grad_enabled"})


class NotKept(ValueError):
    """A value the record's JSON has no form for: the record is not kept."""


def key(program: Any, root: str, extra: Mapping[Any, Any] | None = None) -> str:
    """The key of what decomposing `program` (an ExportedProgram traced in this process) with
    the table `extra` (convert.decompose's: op -> its decomposition) and recording it reads
    from it, with module paths less `root` (module docstring)."""
    import torch

    h = hashlib.sha256()
    h.update(f"{FORMAT}\0{torch.__version__}\0{root}\0{_sources_digest()}\0".encode())
    h.update(f"table\0{table_text(extra or {})}\0".encode())
    h.update(str(program.graph_signature).encode())
    h.update(str(getattr(program, "range_constraints", "")).encode())
    # Every graph, the nested ones too: a region under no_grad is a submodule of its own
    # (wrap_with_set_grad_enabled), its calls and their arguments in its code only.
    for name, module in program.graph_module.named_modules():
        graph = getattr(module, "graph", None)
        if graph is None:
            continue
        h.update(f"\0graph {name}\0{module.code}".encode())
        for node in graph.nodes:
            namespace = getattr(node.target, "namespace", "aten")
            if namespace not in TORCH_NAMESPACES and not (
                    namespace == "higher_order"
                    and getattr(node.target, "__name__", None) in KEPT_HIGHER_ORDER):
                # a user's own op (torch.library): its decomposition is their code, which
                # the trace does not show
                raise NotKept(f"node {node.name!r}: {node.target}")
            meta = node.meta
            h.update(f"\0{node.name}\0{_meta_text(meta.get('val'))}\0".encode())
            # its modules' paths and types, as the record reads them (origin.module_path),
            # not the stack's keys: Dynamo's name each module by its id() in this process
            h.update(str(list((meta.get("nn_module_stack") or {}).values())).encode())
            h.update(str(meta.get("stack_trace", "")).encode())
    for name, t in sorted({**(getattr(program, "constants", {}) or {}),
                           **program.state_dict}.items()):
        h.update(f"\0{name}\0{_meta_text(t)}\0{getattr(t, 'requires_grad', '')}".encode())
    return h.hexdigest()[:32]


def table_text(extra: Mapping[Any, Any]) -> str:
    """The identity of a decomposition table beside torch's own: each op's name and the
    function that decomposes it (module and qualified name: its code is one of this importer's
    sources, in the key by their digest). NotKept for a function from anywhere else (its code
    is not in the key).

    >>> from planner.importers.torch import fma
    >>> table_text({"prims.fma.default": fma.fma})
    'prims.fma.default=planner.importers.torch.fma.fma'
    """
    rows = []
    for op, fn in extra.items():
        module = getattr(fn, "__module__", None) or ""
        if module.rpartition(".")[0] != __name__.rpartition(".")[0]:
            raise NotKept(f"decomposition of {op}: {module or type(fn).__name__}")
        rows.append(f"{op}={module}.{getattr(fn, '__qualname__', '')}")
    return "\n".join(sorted(rows))


def keyed(program: Any, root: str, extra: Mapping[Any, Any] | None = None) -> str | None:
    """key(program, root, extra), or None where nothing of it is kept: the program calls an op
    of another namespace than torch's own (its decomposition is the user's code) or `extra`
    holds a decomposition of code outside this importer (table_text)."""
    try:
        return key(program, root, extra)
    except NotKept:
        return None


def folder(program: Any, root: str, extra: Mapping[Any, Any] | None = None) -> Path | None:
    """Where the record of `program` decomposed with `extra` is kept: <cache>/records/KEY; None
    where nothing of it is kept (keyed) or there is no cache folder (no home, $PLANNER_CACHE
    not a folder)."""
    return _under(keyed(program, root, extra))


def folder_at(keyed: str | None, sizes: Mapping[Any, int]) -> Path | None:
    """Where the record of a program traced with dynamic shapes (`keyed`: its key) at `sizes`
    (each size symbol's value) is kept (specialize.SymbolicTrace): one record per size; None as
    `folder`. The record at sizes is the program's at them, guards checked: only one that
    held them was kept."""
    if keyed is None:
        return None
    at = ",".join(f"{k}={v}" for k, v in sorted((str(k), int(v)) for k, v in sizes.items()))
    return _under(hashlib.sha256(f"{keyed}\0at\0{at}".encode()).hexdigest()[:32])


def _under(name: str | None) -> Path | None:
    from planner.errors import UserError
    from planner.io.disk_cache import records_root

    if name is None:
        return None
    try:
        return records_root() / name
    except UserError:
        return None


def load(folder: Path, program: Any) -> Program | None:
    """The record kept in `folder` with its tensors from `program` (this process's trace), or
    None where there is none, it cannot be read, or its state differs from `program`'s."""
    from planner.io.disk_cache import mark_used

    try:
        data = json.loads((folder / FILE).read_text())
        record = _program(data)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    tensors = state_tensors(program)
    held = {k: [list(t.shape), t.dtype] for k, t in tensors.items()}
    if held != data["tensors"]:
        return None
    mark_used(folder)
    return Program(record.inputs, record.calls, record.outputs, tensors)


def store(folder: Path, record: Program) -> None:
    """Keep `record` in `folder` (its state by name, shape and dtype only); nothing where the
    record holds a value JSON has no form for, or the cache cannot be written."""
    from planner.errors import NotWritten
    from planner.io.write import atomic_write

    try:
        text = json.dumps({
            "format": FORMAT,
            "inputs": [encoded(vars(i)) for i in record.inputs],
            "calls": [encoded({k: getattr(c, k) for k in Call.__dataclass_fields__})
                      for c in record.calls],
            "outputs": [encoded(vars(o)) for o in record.outputs],
            "tensors": {k: [list(t.shape), t.dtype] for k, t in record.tensors.items()}})
    except NotKept:
        return
    try:
        atomic_write(folder / FILE, text)
    except NotWritten:
        pass  # a read-only cache: the next process decomposes again


def encoded(v: Any) -> Any:
    """`v` as JSON values: tuples, dicts, Refs, Values and torch's enums tagged."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, Ref):
        return {"$ref": v.name}
    if isinstance(v, Value):
        return {"$value": encoded(vars(v))}
    if isinstance(v, tuple):
        return {"$tuple": [encoded(i) for i in v]}
    if isinstance(v, list):
        return [encoded(i) for i in v]
    if isinstance(v, dict):
        return {"$dict": [[encoded(k), encoded(i)] for k, i in v.items()]}
    kind = _torch_kind(v)
    if kind is None:
        raise NotKept(f"{type(v).__name__} value")
    return {f"${kind}": str(v).removeprefix("torch.")}


def decoded(v: Any) -> Any:
    """The value `encoded` made `v` from."""
    if isinstance(v, list):
        return [decoded(i) for i in v]
    if not isinstance(v, dict):
        return v
    (tag, body), = v.items()
    if tag == "$ref":
        return Ref(str(body))
    if tag == "$value":
        fields = decoded(body)
        return Value(**{k: tuple(x) if isinstance(x, list) else x for k, x in fields.items()})
    if tag == "$tuple":
        return tuple(decoded(i) for i in body)
    if tag == "$dict":
        return {decoded(k): decoded(i) for k, i in body}
    return _torch_value(tag.removeprefix("$"), body)


def _program(data: dict) -> Program:
    if data.get("format") != FORMAT:
        raise ValueError("another format")
    return Program(tuple(Input(**decoded(i)) for i in data["inputs"]),
                   tuple(Call(**decoded(c)) for c in data["calls"]),
                   tuple(Output(**decoded(o)) for o in data["outputs"]))


def _meta_text(val: Any) -> str:
    """A node's value as the record reads it: a tensor's shape, dtype, strides and offset (as
    torch prints its sizes, symbols included); containers item by item; a number by repr."""
    if isinstance(val, (tuple, list)):
        return "(" + ",".join(_meta_text(v) for v in val) + ")"
    if hasattr(val, "shape") and hasattr(val, "dtype"):
        strides = val.stride() if callable(getattr(val, "stride", None)) else ""
        offset = val.storage_offset() if callable(getattr(val, "storage_offset", None)) else ""
        return f"T{tuple(val.shape)}{val.dtype}{strides}@{offset}"
    return repr(val)


def _torch_kind(v: Any) -> str | None:
    import torch

    types = {"dtype": torch.dtype, "device": torch.device, "layout": torch.layout,
             "memory_format": torch.memory_format}
    return next((k for k, t in types.items() if isinstance(v, t)), None)


def _torch_value(kind: str, name: Any) -> Any:
    """torch's dtype, device, layout or memory format `name`, as that type only."""
    import torch

    if kind not in _TORCH_KINDS or not isinstance(name, str):
        raise ValueError(f"no {kind!r} value")
    if kind == "device":
        return torch.device(name)
    value = getattr(torch, name, None)
    if _torch_kind(value) != kind:
        raise ValueError(f"torch.{name} is no {kind}")
    return value


_SOURCES: list[str] = []


def _sources_digest() -> str:
    """The digest of this importer's sources (its rules, the ops it keeps whole), read once."""
    if not _SOURCES:
        h = hashlib.sha256()
        here = Path(__file__).resolve().parent
        for path in sorted(here.glob("*.py")):
            h.update(path.name.encode() + b"\0" + path.read_bytes())
        _SOURCES.append(h.hexdigest())
    return _SOURCES[0]
