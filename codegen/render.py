"""Plan -> source tree of a CPU executor: `render(plan, out_dir)`.

The tree (a Python package once built):

    generated/NAME/
      schedule.cpp     the plan as compiled-in data (templates/common/schedule.h): tensors with
                       arena offsets, ops in plan order with thread counts, lanes, CPUs, the
                       ops each waits for, scratch areas and attributes, the plan JSON itself
      CMakeLists.txt   builds schedule.cpp into build/libschedule-<key>.so
      __init__.py      Executor(), plan, INPUTS, PARAMS: loads the cached runtime and the schedule
      plan.json        the plan, as given

Files whose content is unchanged are not rewritten, so Ninja does not rebuild them.

Example:
    >>> import tempfile
    >>> from planner.pipeline import plan as make_plan
    >>> from planner.target import preset
    >>> from planner.zoo import build
    >>> g = build("mlp", batch=2, hidden=[4], in_features=3, classes=2)
    >>> plan = make_plan(g, preset("xeon-8180"))
    >>> tree = render(plan, tempfile.mkdtemp() + "/mlp")
    >>> sorted(tree.files)
    ['CMakeLists.txt', '__init__.py', 'plan.json', 'schedule.cpp']
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from codegen import support
from codegen.backends import COMMON, backend_for
from codegen.errors import UnsupportedError
from codegen.layout import ArenaLayout, arena_layout, own_layout
from planner.graph.ir import Graph, Node
from planner.ops import get_op
from planner.ops.base import TensorType
from planner.plan import Plan

DTYPE_CODES = {"float32": "F32", "float64": "F64", "float16": "F16", "int64": "I64",
               "int32": "I32", "bool": "BOOL"}
ROLE_CODES = {"input": "INPUT", "label": "LABEL", "param": "PARAM", "state": "STATE",
              "optimizer-state": "OPT_STATE", "activation": "ACTIVATION", "grad": "GRAD"}
MAX_RANK = 8


@dataclass(frozen=True)
class RenderedTree:
    """What `render` wrote: the package name, its folder and its files (name -> text)."""

    name: str
    dir: Path
    files: dict[str, str]


def module_name(text: str) -> str:
    """A Python identifier for a package name: `lenet_batch8` from 'lenet?batch=8'.

    >>> module_name("resnet-18 (small)")
    'resnet_18_small'
    """
    name = re.sub(r"\W+", "_", text).strip("_") or "plan"
    if name[0].isdigit() or keyword.iskeyword(name):
        name = "plan_" + name
    return name


def render(plan: Plan, out_dir: str | Path, name: str | None = None,
           layout: str = "plan") -> RenderedTree:
    """Write the executor sources of `plan` into `out_dir` (package name: its folder's name
    unless `name` is given), for the plan's backend. Raises UnsupportedError naming every op
    and dtype without a kernel, or a backend this planner cannot generate.

    layout: "plan" uses the memory plan's offsets when it has a complete one (see
    codegen.layout.arena_layout); "own" gives every tensor its own bytes, so that every value
    of a step can be read back after it (tests, debugging).
    """
    out = Path(out_dir)
    name = module_name(name or out.name)
    files = render_files(plan, name, layout)
    out.mkdir(parents=True, exist_ok=True)
    for fname, text in files.items():
        write_if_changed(out / fname, text)
    return RenderedTree(name=name, dir=out, files=files)


def render_files(plan: Plan, name: str, layout: str = "plan") -> dict[str, str]:
    """The tree's files as text (pure: no file is written)."""
    backend = backend_for(plan)
    graph = plan.graph
    support.check(graph, backend)
    if layout not in ("plan", "own"):
        raise ValueError(f"layout must be 'plan' or 'own', got {layout!r}")
    ops = ordered_ops(plan)
    arena = (arena_layout(graph, plan.tensors, len(plan.memory.ops)) if layout == "plan"
             else own_layout(graph, plan.tensors))
    env = jinja2.Environment(loader=jinja2.FileSystemLoader([backend.package, COMMON]),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    index = {t.name: i for i, t in enumerate(graph.tensors)}
    plan_json = plan.to_json()
    rows, cpus, waits, lanes = _op_rows(plan, ops, index, arena)
    context = {
        "name": name,
        "kind": graph.kind,
        "backend": backend.name,
        "backend_code": backend.code,
        "num_ops": len(graph.nodes),
        "tensors": _tensor_rows(graph, arena, index),
        "ops": rows,
        "cpus": cpus,
        "waits": waits,
        "num_lanes": lanes,
        "arena_bytes": arena.bytes,
        "outputs": ", ".join(str(index[o]) for o in graph.outputs),
        "num_outputs": len(graph.outputs),
        "plan_json": plan_json,
        "delimiter": _delimiter(plan_json),
        "inputs": _describe(graph, ("input", "label")),
        "params": _describe(graph, ("param", "state", "optimizer-state"), skip_updates=True),
    }
    context["outputs_py"] = repr(list(graph.outputs))
    files = {
        "schedule.cpp": env.get_template("schedule.cpp.j2").render(context),
        "CMakeLists.txt": env.get_template("CMakeLists.txt.j2").render(context),
        "__init__.py": env.get_template("__init__.py.j2").render(
            {**context, "outputs": context["outputs_py"]}),
        "plan.json": plan_json,
    }
    return files


def write_if_changed(path: Path, text: str) -> bool:
    """Write `text` unless the file already holds it (keeps its mtime for Ninja)."""
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return False
    path.write_text(text, encoding="utf-8")
    return True


# ---- tables ---------------------------------------------------------------------------------

def _tensor_rows(graph: Graph, layout: ArenaLayout, index: dict[str, int]) -> list[dict]:
    rows = []
    for i, t in enumerate(graph.tensors):
        if len(t.shape) > MAX_RANK:
            raise UnsupportedError(f"tensor {t.name!r}: rank {len(t.shape)} exceeds the "
                                   f"executor's {MAX_RANK}")
        rows.append({
            "index": i, "name": c_string(t.name), "offset": layout.offsets[t.name],
            "nbytes": t.nbytes, "rank": len(t.shape),
            "shape": ", ".join(str(d) for d in t.shape) or "0",
            "dtype": DTYPE_CODES[t.dtype], "role": ROLE_CODES[t.role],
            "updates": index[t.updates] if t.updates else -1,
            "alias_of": index[layout.alias_of[t.name]] if t.name in layout.alias_of else -1,
        })
    return rows


def ordered_ops(plan: Plan) -> list:
    """The plan's ops in execution order, after checking they are exactly its graph's nodes
    (the executor runs graph nodes; recompute and offload ops are not run yet)."""
    graph = plan.graph
    order = sorted(plan.ops, key=lambda p: p.order)
    placed = {p.name for p in order}
    if placed != set(graph.node_map) or len(order) != len(placed):
        missing = sorted(set(graph.node_map) - placed)
        extra = sorted(placed - set(graph.node_map))
        raise UnsupportedError(
            "the executor runs each graph node once; this plan "
            + (f"does not place node(s) {missing[:5]}" if missing else "")
            + ("; " if missing and extra else "")
            + (f"adds op(s) {extra[:5]} (recompute / offload), which it does not run yet"
               if extra else "")
            + ("places a node twice" if not missing and not extra else ""))
    return order


def lanes_of(ops: list) -> list[int]:
    """Each op's lane: CPU ops by their first logical CPU (two ops sharing it never overlap in
    time, the plan orders them), GPU ops by stream; numbered densely in order of first use.

    >>> from planner.plan import OpPlan
    >>> ops = [OpPlan(name=n, op="Relu", order=k, cpus=c, threads=len(c), start=0, end=1)
    ...        for k, (n, c) in enumerate([("a", (0, 1)), ("b", (2,)), ("c", (0,))])]
    >>> lanes_of(ops)
    [0, 1, 0]
    """
    keys = [min(p.cpus) if p.cpus else p.stream for p in ops]
    dense = {k: i for i, k in enumerate(dict.fromkeys(keys))}
    return [dense[k] for k in keys]


def _op_rows(plan: Plan, order: list, index: dict[str, int], arena: ArenaLayout
             ) -> tuple[list[dict], str, str, int]:
    graph = plan.graph
    at_order = {p.name: k for k, p in enumerate(order)}
    waits: dict[str, set[int]] = {p.name: set() for p in order}
    for e in plan.happens_before:
        if e.before in at_order and e.after in waits:
            waits[e.after].add(at_order[e.before])
    lanes = lanes_of(order)
    groups = {g: i for i, g in enumerate(dict.fromkeys(p.group for p in order if p.group))}
    rows, at, cpus, wait_list = [], 0, [], []
    for k, p in enumerate(order):
        node = graph.node_map[p.name]
        args = [index[t] for t in (*node.inputs, *node.outputs)]
        before = sorted(waits[p.name])
        offset, nbytes = arena.scratch.get(p.name, (-1, 0))
        rows.append({
            "name": c_string(node.name), "op": node.op, "threads": p.threads,
            "first_input": at, "num_inputs": len(node.inputs),
            "first_output": at + len(node.inputs), "num_outputs": len(node.outputs),
            "attrs": c_string(encode_attrs(graph, node)),
            "args": ", ".join(map(str, args)) if args else "/* none */",
            "label": _comment(node.name),
            "lane": lanes[k], "first_cpu": len(cpus), "num_cpus": len(p.cpus),
            "smt": "true" if p.smt else "false", "group": groups.get(p.group, -1),
            "first_wait": len(wait_list), "num_waits": len(before),
            "scratch_offset": offset, "scratch_bytes": nbytes,
        })
        cpus.extend(p.cpus)
        wait_list.extend(before)
        at += len(args)
    return rows, ", ".join(map(str, cpus)), ", ".join(map(str, wait_list)), \
        max(lanes, default=-1) + 1


def _describe(graph: Graph, roles: tuple[str, ...], skip_updates: bool = False) -> str:
    items = {t.name: (list(t.shape), t.dtype) for t in graph.by_role(*roles)
             if not (skip_updates and t.updates)}
    return repr(items)


# ---- attributes -----------------------------------------------------------------------------

def encode_attrs(graph: Graph, node: Node) -> str:
    """The node's attrs, every one spelled out, as `key=v1,v2;key=v` (sorted keys), plus what
    the kernels need precomputed (a Slice's per-axis begin and step). An absent optional attr
    (None: Clip's missing bound, CausalMask's -inf) is left out; kernels test `has(key)`.

    >>> from planner.graph.ir import Node
    >>> encode_attrs(None, Node(name="r", op="LeakyRelu", attrs={"alpha": 0.2}))
    'alpha=0.2'
    """
    op = get_op(node.op)
    attrs = op.normalize_attrs(node.attrs)
    if op.kernel_attrs is not None:
        ins = [TensorType(graph.tensor(t).shape, graph.tensor(t).dtype) for t in node.inputs]
        attrs = {**attrs, **op.kernel_attrs(ins, attrs)}
    return ";".join(f"{k}={_value(node, k, v)}" for k, v in sorted(attrs.items())
                    if v is not None)


def _value(node: Node, key: str, v: Any) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return ",".join(_value(node, key, x) for x in v)
    if isinstance(v, str) and not set(v) & set(";=,\"\\"):
        return v
    raise ValueError(f"node {node.name!r}: attribute {key!r} = {v!r} cannot be encoded")


# ---- C text ---------------------------------------------------------------------------------

def c_string(text: str) -> str:
    """A C string literal of `text` (UTF-8; quotes, backslashes and non-printables escaped).

    >>> print(c_string('a"b'))
    "a\\"b"
    """
    out = []
    for b in text.encode("utf-8"):
        ch = chr(b)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 32 <= b < 127 and ch != "?":  # '?' escaped: no trigraphs
            out.append(ch)
        else:
            out.append(f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def _comment(text: str) -> str:
    # A line comment: a trailing backslash would swallow the next line.
    return text.replace("\\", "/").replace("\n", " ")


def _delimiter(text: str) -> str:
    d = "PLAN"
    while f"){d}\"" in text:
        d += "_"
    return d
