"""The serialized program of a .pt2 archive (`models/<m>.json`) parsed as data against an
allow-list of torch.export's schema (torch/_export/serde/schema.py, SCHEMA_MAJOR.x).

Every JSON object is checked field by field: a field the schema does not have is refused by
name, as is a field the planner cannot read as plain data (a symbolic size `as_expr`, a
`sym_int_values` table, a subgraph `as_graph`, a custom object, an operator argument, a
higher-order op, a parameter or user-input mutation). Strings of the file (node, value and
argument names, `guards_code`, `forward_arg_names`, `in_spec`, metadata) stay strings: none is
evaluated, imported or turned into code. A node's target is `torch.ops.aten.<op>.<overload>`
or `torch.ops.prims.<op>.<overload>` naming an operator in torch's own registry and in the
planner's allow-list (planner/importers/torch/targets.py); it is resolved by that lookup, never by
importing a path.

>>> try:
...     parse_program({"graph_module": {}, "schema_version": {"major": 8, "minor": 0},
...                    "guards_code": ["x"], "hack": 1}, "models/model.json")
... except UserError as e:
...     print(e)
models/model.json: field 'hack' is not in torch.export's schema (a field the planner does not read)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from planner.errors import UserError
from planner.importers.torch.ref import Ref

SCHEMA_MAJOR = 8  # torch.export's serialized program schema (torch 2.13 writes 8.20)

# schema.ScalarType -> dtype name (numpy's, with ml_dtypes' bfloat16); complex values exist
# inside programs only (planner/importers/torch/rules_complex.py)
SCALAR_TYPES = {1: "uint8", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "float16",
                7: "float32", 8: "float64", 10: "complex64", 11: "complex128", 12: "bool",
                13: "bfloat16"}
LAYOUT_STRIDED = 7
MEMORY_FORMATS = {1: "contiguous_format", 2: "channels_last", 3: "channels_last_3d",
                  4: "preserve_format"}
_NAME = re.compile(r"[^\x00-\x1f\x7f]{1,200}")
_TARGET = re.compile(r"torch\.ops\.(aten|prims)\.([a-z][a-z0-9_]*|_[a-z][a-z0-9_]*)"
                     r"\.([a-zA-Z][a-zA-Z0-9_]*)")
_MODULE = re.compile(r"[A-Za-z0-9_.]*")
MAX_RANK, MAX_DIM = 16, 1 << 40


@dataclass(frozen=True)
class Enum:
    """A dtype, layout, memory format or device argument: kind and value, as plain data."""

    kind: str
    value: str


@dataclass(frozen=True)
class Meta:
    """A tensor's declared dtype, sizes, strides and storage offset (all plain integers), and
    whether it requires grad (a parameter's False: frozen)."""

    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int
    requires_grad: bool = True


@dataclass(frozen=True)
class Node:
    """One call: its target (`aten.relu.default`), its arguments by schema name (value: None,
    bool, int, float, str, Ref, Enum, or a tuple of them), what it writes (a Ref, a tuple of
    Refs for a list output, None for an absent optional one) and its module path."""

    name: str
    target: str
    args: tuple[tuple[str, Any, bool], ...]  # (name, value, keyword-only as written)
    outputs: tuple[Any, ...]
    module: str


@dataclass(frozen=True)
class Spec:
    """One input or output of the signature: kind, the value's name, the state_dict name."""

    kind: str
    value: str
    target: str = ""
    persistent: bool = True


@dataclass(frozen=True)
class SavedProgram:
    inputs: tuple[Spec, ...]
    outputs: tuple[Spec, ...]
    nodes: tuple[Node, ...]
    values: dict[str, Meta] = field(default_factory=dict)


def parse_program(doc: Any, where: str) -> SavedProgram:
    """The program of one `models/<m>.json` document, or a UserError naming the field."""
    top = _object(doc, where, required=("graph_module", "schema_version"),
                  optional=("opset_version", "range_constraints", "verifiers", "torch_version",
                            "guards_code"))
    version = _object(top["schema_version"], where, ("major", "minor"), (), "schema_version")
    if version["major"] != SCHEMA_MAJOR:
        raise UserError(f"{where}: schema_version {version['major']}.{version['minor']}; the "
                        f"planner reads torch.export's schema {SCHEMA_MAJOR}.x")
    if top.get("range_constraints"):
        raise _field(where, "range_constraints", "holds ranges of symbolic shapes (export "
                     "with static shapes)")
    _strings(top.get("guards_code", []), where, "guards_code")  # never run: data only
    _strings(top.get("verifiers", []), where, "verifiers")
    module = _object(top["graph_module"], where, ("graph", "signature", "module_call_graph"),
                     ("metadata", "treespec_namedtuple_fields"), "graph_module")
    _check_call_graph(module["module_call_graph"], where)
    graph = _object(module["graph"], where, ("inputs", "outputs", "nodes", "tensor_values"),
                    ("sym_int_values", "sym_bool_values", "is_single_tensor_return",
                     "custom_obj_values", "sym_float_values"), "graph")
    for name in ("sym_int_values", "sym_bool_values", "sym_float_values", "custom_obj_values"):
        if graph.get(name):
            raise _field(where, f"graph.{name}", "is not empty (symbolic values or custom "
                         "objects; export with static shapes and tensors only)")
    for part in ("inputs", "outputs"):  # the signature names the same values; checked only
        for k, a in enumerate(_list(graph[part], where, f"graph.{part}")):
            argument(a, where, f"graph.{part}[{k}]")
    values = {}
    for name, meta in _dict(graph["tensor_values"], where, "graph.tensor_values").items():
        values[_name(name, where, "graph.tensor_values")] = tensor_meta(
            meta, where, f"graph.tensor_values[{name!r}]")
    nodes = tuple(_node(n, where, k) for k, n in
                  enumerate(_list(graph["nodes"], where, "graph.nodes")))
    sig = _object(module["signature"], where, ("input_specs", "output_specs"), (),
                  "graph_module.signature")
    inputs = tuple(_input_spec(s, where, k) for k, s in
                   enumerate(_list(sig["input_specs"], where, "signature.input_specs")))
    outputs = tuple(_output_spec(s, where, k) for k, s in
                    enumerate(_list(sig["output_specs"], where, "signature.output_specs")))
    return SavedProgram(inputs, outputs, nodes, values)


def tensor_meta(doc: Any, where: str, what: str) -> Meta:
    meta = _object(doc, where, ("dtype", "sizes", "requires_grad", "device", "strides",
                                "storage_offset", "layout"), (), what)
    dtype = SCALAR_TYPES.get(meta["dtype"]) if type(meta["dtype"]) is int else None
    if dtype is None:
        raise _field(where, f"{what}.dtype", f"is {meta['dtype']!r}, not a dtype the planner "
                     f"reads ({', '.join(sorted(set(SCALAR_TYPES.values())))})")
    if meta["layout"] != LAYOUT_STRIDED:
        raise _field(where, f"{what}.layout", f"is {meta['layout']!r}, not a strided tensor")
    _device(meta["device"], where, f"{what}.device")
    _bool(meta["requires_grad"], where, f"{what}.requires_grad")
    shape = tuple(_sym_int(s, where, f"{what}.sizes") for s in
                  _list(meta["sizes"], where, f"{what}.sizes"))
    strides = tuple(_sym_int(s, where, f"{what}.strides") for s in
                    _list(meta["strides"], where, f"{what}.strides"))
    offset = _sym_int(meta["storage_offset"], where, f"{what}.storage_offset")
    if len(shape) > MAX_RANK or len(strides) != len(shape) or \
            any(not 0 <= d < MAX_DIM for d in shape + strides + (offset,)):
        raise _field(where, what, f"has sizes {list(shape)}, strides {list(strides)} and "
                     f"offset {offset}: not a tensor the planner reads")
    return Meta(dtype, shape, strides, offset, meta["requires_grad"])


# ---- the schema's records ---------------------------------------------------------------------

def _node(doc: Any, where: str, k: int) -> Node:
    what = f"graph.nodes[{k}]"
    node = _object(doc, where, ("target", "inputs", "outputs", "metadata"),
                   ("is_hop_single_tensor_return", "name"), what)
    name = node.get("name")
    name = f"node{k}" if name is None else _name(name, where, f"{what}.name")
    what = f"node {name!r}"
    target = node["target"]
    match = _TARGET.fullmatch(target) if isinstance(target, str) else None
    if match is None:
        raise _field(where, f"{what}.target", f"is {str(target)[:80]!r}, not an ATen or prims "
                     "operator (higher-order ops, custom ops and Python callables are refused)")
    if node.get("is_hop_single_tensor_return") is not None:
        raise _field(where, f"{what}.is_hop_single_tensor_return", "belongs to a higher-order "
                     "op")
    metadata = _dict(node["metadata"], where, f"{what}.metadata")
    _strings(list(metadata.values()), where, f"{what}.metadata")
    args = []
    for j, item in enumerate(_list(node["inputs"], where, f"{what}.inputs")):
        arg = _object(item, where, ("name", "arg"), ("kind",), f"{what}.inputs[{j}]")
        arg_name = _name(arg["name"], where, f"{what}.inputs[{j}].name")
        if arg.get("kind") not in (None, 0, 1, 2):
            raise _field(where, f"{what}.inputs[{j}].kind", f"is {arg['kind']!r}")
        args.append((arg_name, argument(arg["arg"], where, f"{what} argument {arg_name!r}"),
                     arg.get("kind") == 2))
    outputs = tuple(_output(o, where, f"{what}.outputs[{j}]")
                    for j, o in enumerate(_list(node["outputs"], where, f"{what}.outputs")))
    return Node(name, f"{match.group(1)}.{match.group(2)}.{match.group(3)}", tuple(args),
                outputs, _module(metadata.get("nn_module_stack", "")))


def _module(stack: str) -> str:
    """The innermost module path of `nn_module_stack` ("key,path,type;..."), as plain text; ""
    where it is not a dotted path."""
    last = stack.rsplit(";", 1)[-1].split(",")
    path = last[1] if len(last) >= 3 else ""
    return path if _MODULE.fullmatch(path) and len(path) <= 200 else ""


def argument(doc: Any, where: str, what: str) -> Any:
    """One schema Argument as a plain value; the union's members the planner cannot read as
    data are refused by name."""
    if not isinstance(doc, dict) or len(doc) != 1:
        raise _field(where, what, "is not one tagged argument")
    ((tag, v),) = doc.items()
    here = f"{what}.{tag}"
    if tag == "as_none":
        return None
    if tag == "as_tensor":
        return _ref(v, where, here)
    if tag == "as_tensors":
        return tuple(_ref(t, where, here) for t in _list(v, where, here))
    if tag == "as_optional_tensors":
        return tuple(_optional_tensor(t, where, here) for t in _list(v, where, here))
    if tag == "as_optional_tensor":
        return _optional_tensor(v, where, here)
    if tag in ("as_int", "as_sym_int"):
        return _int(v, where, here) if tag == "as_int" else _sym_int(v, where, here)
    if tag in ("as_ints", "as_sym_ints"):
        read = _int if tag == "as_ints" else _sym_int
        return tuple(read(i, where, here) for i in _list(v, where, here))
    if tag in ("as_float", "as_sym_float"):
        return _float(v if tag == "as_float" else _tagged(v, "as_float", where, here),
                      where, here)
    if tag in ("as_floats", "as_sym_floats"):
        return tuple(_float(f if tag == "as_floats" else _tagged(f, "as_float", where, here),
                            where, here) for f in _list(v, where, here))
    if tag in ("as_bool", "as_sym_bool"):
        return _bool(v if tag == "as_bool" else _tagged(v, "as_bool", where, here), where, here)
    if tag in ("as_bools", "as_sym_bools"):
        return tuple(_bool(b if tag == "as_bools" else _tagged(b, "as_bool", where, here),
                           where, here) for b in _list(v, where, here))
    if tag == "as_string":
        return _string(v, where, here)
    if tag == "as_strings":
        return tuple(_string(s, where, here) for s in _list(v, where, here))
    if tag == "as_scalar_type":
        if type(v) is not int or v not in SCALAR_TYPES:
            raise _field(where, here, f"is {v!r}, not a dtype the planner reads")
        return Enum("dtype", SCALAR_TYPES[v])
    if tag == "as_memory_format":
        if type(v) is not int or v not in MEMORY_FORMATS:
            raise _field(where, here, f"is {v!r}, not a memory format")
        return Enum("memory_format", MEMORY_FORMATS[v])
    if tag == "as_layout":
        if v != LAYOUT_STRIDED:
            raise _field(where, here, f"is {v!r}, not the strided layout")
        return Enum("layout", "strided")
    if tag == "as_device":
        return Enum("device", _device(v, where, here))
    if tag == "as_int_lists":
        return tuple(tuple(_int(i, where, here) for i in _list(row, where, here))
                     for row in _list(v, where, here))
    raise _field(where, here, "is an argument the planner does not read (subgraphs, custom "
                 "objects, operators and nested containers are refused)")


def _output(doc: Any, where: str, what: str) -> Any:
    if not isinstance(doc, dict) or len(doc) != 1 or \
            next(iter(doc)) not in ("as_tensor", "as_tensors", "as_none"):
        raise _field(where, what, "is not a tensor, a list of tensors or none")
    return argument(doc, where, what)


def _union(doc: Any, where: str, what: str) -> tuple[str, Any, str]:
    """(member, value, its field path) of a one-member schema union."""
    if not isinstance(doc, dict) or len(doc) != 1:
        raise _field(where, what, "is not one tagged record")
    ((kind, v),) = doc.items()
    return kind, v, f"{what}.{kind}"


def _tensor_arg(v: Any, where: str, here: str) -> Ref:
    value = argument(_object(v, where, ("arg",), (), here)["arg"], where, f"{here}.arg")
    if not isinstance(value, Ref):
        raise _field(where, f"{here}.arg", "is not a tensor (export with tensors only)")
    return value


def _input_spec(doc: Any, where: str, k: int) -> Spec:
    kind, v, here = _union(doc, where, f"signature.input_specs[{k}]")
    if kind == "user_input":
        return Spec("user_input", _tensor_arg(v, where, here).name)
    names = {"parameter": "parameter_name", "buffer": "buffer_name",
             "tensor_constant": "tensor_constant_name"}
    if kind not in names:
        raise _field(where, here, "is an input the planner does not read (custom objects, "
                     "tokens and constant inputs are refused)")
    spec = _object(v, where, ("arg", names[kind]), ("persistent",) if kind == "buffer" else (),
                   here)
    persistent = _bool(spec.get("persistent", True), where, f"{here}.persistent")
    return Spec(kind, _ref(spec["arg"], where, f"{here}.arg").name,
                _name(spec[names[kind]], where, f"{here}.{names[kind]}"), persistent)


def _output_spec(doc: Any, where: str, k: int) -> Spec:
    kind, v, here = _union(doc, where, f"signature.output_specs[{k}]")
    if kind == "user_output":
        return Spec("user_output", _tensor_arg(v, where, here).name)
    if kind == "buffer_mutation":
        spec = _object(v, where, ("arg", "buffer_name"), (), here)
        return Spec(kind, _ref(spec["arg"], where, f"{here}.arg").name,
                    _name(spec["buffer_name"], where, f"{here}.buffer_name"))
    raise _field(where, here, "is an output the planner does not read (losses, gradients, "
                 "tokens, parameter and user-input mutations are refused)")


def _check_call_graph(doc: Any, where: str) -> None:
    """module_call_graph is read as plain data and not used: the signature's input and output
    specs say what the program reads and writes. Its treespecs and argument names stay
    strings (torch's loader parses them into Python types; the planner never does)."""
    for k, entry in enumerate(_list(doc, where, "module_call_graph")):
        what = f"module_call_graph[{k}]"
        entry = _object(entry, where, ("fqn",), ("signature",), what)
        _string(entry["fqn"], where, f"{what}.fqn")
        if entry.get("signature") is None:
            continue
        sig = _object(entry["signature"], where, ("inputs", "outputs", "in_spec", "out_spec"),
                      ("forward_arg_names",), f"{what}.signature")
        for part in ("inputs", "outputs"):
            for j, a in enumerate(_list(sig[part], where, f"{what}.signature.{part}")):
                argument(a, where, f"{what}.signature.{part}[{j}]")
        _string(sig["in_spec"], where, f"{what}.signature.in_spec")
        _string(sig["out_spec"], where, f"{what}.signature.out_spec")
        if sig.get("forward_arg_names") is not None:
            _strings(sig["forward_arg_names"], where, f"{what}.signature.forward_arg_names")


# ---- plain values -----------------------------------------------------------------------------

def _field(where: str, what: str, why: str) -> UserError:
    return UserError(f"{where}: {what} {why}")


def _object(doc: Any, where: str, required: tuple[str, ...], optional: tuple[str, ...],
            what: str = "") -> dict[str, Any]:
    prefix = f"{what}." if what else ""
    if not isinstance(doc, dict):
        raise _field(where, what or "the document", "is not a JSON object")
    for key in doc:
        if key not in required and key not in optional:
            raise UserError(f"{where}: field {prefix + str(key)[:80]!r} is not in torch.export's "
                            "schema (a field the planner does not read)")
    for key in required:
        if key not in doc:
            raise _field(where, f"{prefix}{key}", "is missing")
    return doc


def _list(doc: Any, where: str, what: str) -> list:
    if not isinstance(doc, list):
        raise _field(where, what, "is not a list")
    return doc


def _dict(doc: Any, where: str, what: str) -> dict:
    if not isinstance(doc, dict):
        raise _field(where, what, "is not a JSON object")
    return doc


def _strings(doc: Any, where: str, what: str) -> None:
    for s in _list(doc, where, what):
        _string(s, where, what)


def _string(v: Any, where: str, what: str) -> str:
    if not isinstance(v, str):
        raise _field(where, what, f"is {type(v).__name__}, not a string")
    return v


def _name(v: Any, where: str, what: str) -> str:
    if not isinstance(v, str) or not _NAME.fullmatch(v):
        raise _field(where, what, f"is {str(v)[:80]!r}: not a name (1 to 200 printable "
                     "characters)")
    return v


def _ref(doc: Any, where: str, what: str) -> Ref:
    return Ref(_name(_object(doc, where, ("name",), (), what)["name"], where, f"{what}.name"))


def _optional_tensor(doc: Any, where: str, what: str) -> Ref | None:
    if doc == {"as_none": True}:
        return None
    return _ref(_tagged(doc, "as_tensor", where, what), where, what)


def _tagged(doc: Any, tag: str, where: str, what: str) -> Any:
    if not isinstance(doc, dict) or list(doc) != [tag]:
        raise _field(where, what, f"is not a plain value ({tag} only; symbolic values are "
                     "refused)")
    return doc[tag]


def _int(v: Any, where: str, what: str) -> int:
    if type(v) is not int or not -(1 << 63) <= v < (1 << 63):
        raise _field(where, what, f"is {str(v)[:40]!r}, not a 64-bit integer")
    return v


def _sym_int(doc: Any, where: str, what: str) -> int:
    if isinstance(doc, dict) and "as_expr" in doc:
        raise _field(where, what, "is a symbolic size (export with static shapes)")
    if isinstance(doc, dict) and "as_name" in doc:
        raise _field(where, what, "names a symbolic value (export with static shapes)")
    return _int(_tagged(doc, "as_int", where, what), where, what)


def _float(v: Any, where: str, what: str) -> float:
    special = {"Infinity": math.inf, "-Infinity": -math.inf, "NaN": math.nan}
    if isinstance(v, str) and v in special:
        return special[v]
    if type(v) not in (int, float):
        raise _field(where, what, f"is {str(v)[:40]!r}, not a number")
    return float(v)


def _bool(v: Any, where: str, what: str) -> bool:
    if type(v) is not bool:
        raise _field(where, what, f"is {str(v)[:40]!r}, not true or false")
    return v


def _device(doc: Any, where: str, what: str) -> str:
    device = _object(doc, where, ("type",), ("index",), what)
    if device["type"] not in ("cpu", "cuda", "meta"):
        raise _field(where, f"{what}.type", f"is {str(device['type'])[:40]!r}, not cpu or cuda")
    if device.get("index") is not None:
        _int(device["index"], where, f"{what}.index")
    return "cpu"  # the program is read for its arithmetic; the planner places it itself
