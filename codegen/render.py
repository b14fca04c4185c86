"""Plan -> source tree of its backend's executor (CPU or CUDA): `render(plan, out_dir)`.

The tree (a Python package once built):

    generated/NAME/
      schedule.cpp     the plan as compiled-in data (templates/common/schedule.h): tensors with
                       arena offsets, ops in plan order with thread counts, the plan's lanes,
                       CPUs, the ops each waits for (its happens-before edges), scratch areas
                       and attributes, the plan JSON itself
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
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from codegen import support
from codegen.backends import COMMON, runtime_for
from codegen.errors import UnsupportedError
from codegen.layout import ArenaLayout, arena_layout, own_layout
from planner.errors import PlanError
from planner.ir.accumulation import MICRO_STEP, micro_batches, optimizer_step_nodes
from planner.ir.graph import Graph, Node, channel_block
from planner.ir.record import Backend
from planner.ops import get_op
from planner.ops.base import TensorType
from planner.plan import Plan

DTYPE_CODES = {"float32": "F32", "float64": "F64", "float16": "F16", "int64": "I64",
               "int32": "I32", "bool": "BOOL", "bfloat16": "BF16", "int16": "I16", "int8": "I8",
               "uint8": "U8"}
ROLE_CODES = {"input": "INPUT", "label": "LABEL", "param": "PARAM", "state": "STATE",
              "optimizer-state": "OPT_STATE", "activation": "ACTIVATION", "grad": "GRAD"}
MAX_RANK = 8


@dataclass(frozen=True)
class RenderedTree:
    """What `render` wrote: the package name, its folder, its files (name -> text), the
    plan's backend (whose runtime `build` links it against), and its target's name and GPU
    compute capability (the architecture a CUDA runtime is built for; "" on a CPU)."""

    name: str
    dir: Path
    files: dict[str, str]
    backend: Backend
    target: str = ""
    compute_capability: str = ""


def module_name(text: str) -> str:
    """An ASCII Python identifier for a package name: `lenet_batch8` from 'lenet?batch=8'. It
    is spelled into CMake, C++ and Python sources, so it holds nothing but [A-Za-z0-9_]; one
    that would shadow a standard or the executor's own module when imported gets `plan_`.

    >>> module_name("resnet-18 (small)"), module_name("r\u00e9seau"), module_name("json")
    ('resnet_18_small', 'r_seau', 'plan_json')
    """
    name = re.sub(r"[^A-Za-z0-9_]+", "_", text).strip("_")[:64] or "plan"
    if name[0].isdigit() or keyword.iskeyword(name) or shadows(name):
        name = "plan_" + name
    return name


def shadows(name: str) -> bool:
    """Whether importing a package called `name` would hide a module the executor or its
    user imports: the standard library's, numpy, torch, or this project's."""
    return name in sys.stdlib_module_names or name in sys.builtin_module_names \
        or name in _IMPORTED


_IMPORTED = frozenset({"numpy", "torch", "planner", "codegen", "jinja2", "pydantic", "nanobind",
                       "onnx", "tvm"})


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
    return RenderedTree(name=name, dir=out, files=files, backend=plan.backend,
                        target=plan.target.name,
                        compute_capability=plan.target.compute_capability)


def _capability_code(capability: str) -> int:
    """ "9.0" -> 90, as the executor compares it with cudaDeviceProp major * 10 + minor; 0 when
    the plan names none.

    >>> _capability_code("8.9"), _capability_code("")
    (89, 0)
    """
    major, _, minor = capability.partition(".")
    return int(major) * 10 + int(minor) if capability else 0


def render_files(plan: Plan, name: str, layout: str = "plan") -> dict[str, str]:
    """The tree's files as text (pure: no file is written). Raises PlanError naming the first
    rule the plan breaks: a plan that does not verify is never compiled."""
    env, context = schedule_context(plan, name, layout)
    context["evaluation"] = plan.evaluation is not None
    files = {
        "schedule.cpp": env.get_template("schedule.cpp.j2").render(context),
        "CMakeLists.txt": env.get_template("CMakeLists.txt.j2").render(context),
        "__init__.py": env.get_template("__init__.py.j2").render(
            {**context, "outputs": context["outputs_py"]}),
        "plan.json": context["plan_json"],
    }
    if plan.evaluation is not None:
        from codegen.evaluation import evaluation_context

        own_env, own = schedule_context(plan.evaluation.plan, name, "plan")
        files["evaluation.cpp"] = own_env.get_template("schedule.cpp.j2").render(
            evaluation_context(plan, own, layout))
    return files


def schedule_context(plan: Plan, name: str, layout: str = "plan"
                     ) -> tuple[jinja2.Environment, dict[str, Any]]:
    """The templates' environment and the context of the plan's schedule.cpp (its tables)."""
    backend = runtime_for(plan)
    graph = plan.graph
    support.check(graph, backend, plan.target.compute_capability)
    refuse_unverified(plan)
    if layout not in ("plan", "own"):
        raise ValueError(f"layout must be 'plan' or 'own', got {layout!r}")
    ops = ordered_ops(plan)
    arena = (arena_layout(graph, plan.tensors) if layout == "plan"
             else own_layout(graph, plan.tensors))
    env = jinja2.Environment(loader=jinja2.FileSystemLoader([backend.package, COMMON]),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    index = {t.name: i for i, t in enumerate(graph.tensors)}
    # Copies follow the graph's tensors: their rows are indexed by buffer name.
    buffers = index | {c.name: len(index) + k for k, c in enumerate(arena.copies)}
    plan_json = plan.to_json()
    strings = StringTable()
    rows, cpus, waits, lanes = _op_rows(plan, ops, buffers, arena, strings)
    context = {
        **_names(name, graph, backend),
        "num_ops": len(graph.nodes),
        "tensors": _tensor_rows(graph, arena, index, strings),
        "ops": rows,
        "cpus": cpus,
        "waits": waits,
        "num_lanes": lanes,
        "arena_bytes": arena.bytes,
        # The GPU the plan was made for (0 for a CPU plan): the CUDA executor checks the device.
        "compute_capability": _capability_code(plan.target.compute_capability),
        "device_memory_bytes": plan.target.gpu_memory_bytes,
        "tf32": int(graph.math == "tf32"),
        "host_bytes": arena.host_bytes,
        "outputs": ", ".join(str(index[o]) for o in graph.outputs),
        "num_outputs": len(graph.outputs),
        "variants": [{"name": strings.add(v.name), "cores": v.cores,
                      "seconds": repr(float(v.step_seconds)),
                      "threads": ", ".join(map(str, v.threads))} for v in plan.variants],
        "step_seconds": repr(float(plan.summary.step_seconds)),
        "micro_batches": micro_batches(graph),
        # memory planning's decision (MemorySummary.weight_packs)
        "pack_weights": int(plan.summary.memory is not None
                            and plan.summary.memory.weight_packs),
        "micro_step": index.get(MICRO_STEP, -1) if micro_batches(graph) > 1 else -1,
        "strings": strings.c_array(),
        "plan_c": c_string_lines(plan_json),
        "inputs": _describe(graph, ("input", "label")),
        "params": _describe(graph, ("param", "state", "optimizer-state"), skip_updates=True),
    }
    context["outputs_py"] = ascii(list(graph.outputs))
    context["plan_json"] = plan_json
    return env, context


def _names(name: str, graph: Any, backend: Any) -> dict[str, Any]:
    """The context's names: the package's and its graph kind's (also as C strings), its
    runtime's, how the runtime is loaded, and the symbol the schedule library exports."""
    return {"name": name, "name_c": c_string(name), "kind": graph.kind,
            "kind_c": c_string(graph.kind), "backend": backend.name,
            "runtime_module": backend.module, "backend_title": backend.code,
            "backend_code": backend.code,
            "load_environment": ascii(dict(sorted(backend.load_environment.items()))),
            "load_choices": ascii(backend.load_choices),
            # The symbol the schedule library exports it under (schedule.h).
            "symbol": "planner_schedule"}


def refuse_unverified(plan: Plan) -> None:
    """Raise PlanError when `planner verify` would reject the plan."""
    from planner.verify import verify_plan

    problems = verify_plan(plan)
    if problems:
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise PlanError(f"plan {plan.graph.name!r} does not verify: {problems[0]}"
                                  f"{more}; run `planner verify` on it")


def write_if_changed(path: Path, text: str) -> bool:
    """Write `text` unless the file already holds it (keeps its mtime for Ninja)."""
    from planner.io.write import atomic_write, holds

    if holds(path, text):
        return False
    atomic_write(path, text)
    return True


# ---- tables ---------------------------------------------------------------------------------

def _tensor_rows(graph: Graph, layout: ArenaLayout, index: dict[str, int],
                 strings: StringTable) -> list[dict]:
    rows = []
    for i, t in enumerate(graph.tensors):
        if len(t.shape) > MAX_RANK:
            raise UnsupportedError(f"tensor {t.name!r}: rank {len(t.shape)} exceeds the "
                                   f"executor's {MAX_RANK}")
        rows.append({
            "index": i, "name": strings.add(t.name), "offset": layout.offsets[t.name],
            "nbytes": t.nbytes, "rank": len(t.shape),
            "shape": ", ".join(str(d) for d in t.shape) or "0",
            "dtype": DTYPE_CODES[t.dtype], "role": ROLE_CODES[t.role],
            "updates": index[t.updates] if t.updates else -1,
            "alias_of": index[layout.alias_of[t.name]] if t.name in layout.alias_of else -1,
            "store": "ARENA",
            "block": channel_block(t.layout) if t.layout else 0,
        })
    for c in layout.copies:
        t = graph.tensor(c.tensor)
        rows.append({**rows[index[c.tensor]], "index": len(rows), "name": strings.add(c.name),
                     "offset": c.offset, "role": ROLE_CODES["activation"], "updates": -1,
                     "alias_of": -1, "store": "HOST_STORE" if c.host else "ARENA"})
    return rows


def ordered_ops(plan: Plan) -> list:
    """The plan's ops in execution order, after checking they are exactly its graph's nodes
    and the ops memory planning added (plan.memory.ops), each once."""
    graph = plan.graph
    order = sorted(plan.ops, key=lambda p: p.order)
    placed = {p.name for p in order}
    runs = set(graph.node_map) | {m.name for m in plan.memory.ops}
    if placed != runs or len(order) != len(placed):
        missing = sorted(runs - placed)
        extra = sorted(placed - runs)
        raise UnsupportedError(
            "the executor runs each graph node and each added op once; this plan "
            + (f"does not place {missing[:5]}" if missing else "")
            + ("; " if missing and extra else "")
            + (f"places op(s) {extra[:5]} that are neither graph nodes nor added by memory "
               f"planning" if extra else "")
            + ("places an op twice" if not missing and not extra else ""))
    return order


def op_buffers(plan: Plan) -> dict[str, tuple[str, str, tuple[str, ...], tuple[str, ...]]]:
    """Per op of the plan: the node whose kernel and attrs it runs ("" for a transfer), its op
    type, and the buffers it reads and writes. A graph node reads the copy memory planning
    made for it where a buffer holding a copy of its input lists it as a reader, else the
    tensor itself."""
    graph = plan.graph
    copy_for = {(r, t.tensor): t.name for t in plan.tensors
                if t.tensor and t.name != t.tensor for r in t.readers}
    out = {n.name: (n.name, n.op, tuple(copy_for.get((n.name, i), i) for i in n.inputs),
                    tuple(n.outputs)) for n in graph.nodes}
    node_ops = {n.name: n.op for n in graph.nodes}
    for m in plan.memory.ops:
        out[m.name] = (m.node if m.kind == "recompute" else "", m.op_type(node_ops), m.inputs,
                       m.outputs)
    return out


def _op_rows(plan: Plan, order: list, index: dict[str, int], arena: ArenaLayout,
             strings: StringTable) -> tuple[list[dict], str, str, int]:
    graph = plan.graph
    # The plan's ordering and nothing else (planner.plan): each op runs on its lane, after
    # the ops before it there, and waits for the ops of its happens-before edges.
    at_order = {p.name: k for k, p in enumerate(order)}
    waits: dict[str, set[int]] = {p.name: set() for p in order}
    for e in plan.happens_before:
        waits[e.after].add(at_order[e.before])
    lanes = [p.lane for p in order]
    groups = {g: i for i, g in enumerate(dict.fromkeys(p.group for p in order if p.group))}
    planned = plan_attrs(plan)
    runs = op_buffers(plan)
    step_only = optimizer_step_nodes(graph)
    rows, at, cpus, wait_list = [], 0, [], []
    for k, p in enumerate(order):
        kernel, op_type, reads, writes = runs[p.name]
        node = graph.node_map[kernel] if kernel else None
        args = [index[t] for t in (*reads, *writes)]
        before = sorted(waits[p.name])
        offset, nbytes = arena.scratch.get(p.name, (-1, 0))
        rows.append({
            "index": k, "name": strings.add(p.name),
            "op": strings.add(op_type),
            "threads": p.threads,
            "first_input": at, "num_inputs": len(reads),
            "first_output": at + len(reads), "num_outputs": len(writes),
            "attrs": strings.add(encode_attrs(graph, node, planned.get(node.name))
                                 if node is not None else ""),
            "args": ", ".join(map(str, args)) if args else "/* none */",
            "lane": lanes[k], "first_cpu": len(cpus), "num_cpus": len(p.cpus),
            "smt": "true" if p.smt else "false", "group": groups.get(p.group, -1),
            "first_wait": len(wait_list), "num_waits": len(before),
            "scratch_offset": offset, "scratch_bytes": nbytes,
            "optimizer_step_only": "true" if kernel in step_only else "false",
        })
        cpus.extend(p.cpus)
        wait_list.extend(before)
        at += len(args)
    return rows, ", ".join(map(str, cpus)), ", ".join(map(str, wait_list)), \
        max(lanes, default=-1) + 1


def _describe(graph: Graph, roles: tuple[str, ...], skip_updates: bool = False) -> str:
    items = {t.name: (list(t.shape), t.dtype) for t in graph.by_role(*roles)
             if not (skip_updates and t.updates)}
    return ascii(items)  # a Python literal: every non-ASCII character escaped


# ---- attributes -----------------------------------------------------------------------------

def plan_attrs(plan: Plan) -> dict[str, dict[str, Any]]:
    """Per node, the plan's decisions a kernel reads as attrs: a convolution's algorithm
    (`conv_algo`, GPU plans: plan.memory.convs) and a generated kernel's threads per block
    (`block`, GPU plans: the op's `block`, when the cost table measured its launches).

    >>> from types import SimpleNamespace as NS
    >>> conv = NS(node="c1", algorithm="WINOGRAD")
    >>> ops = (NS(name="c1", block=0), NS(name="r1", block=512))
    >>> plan_attrs(NS(memory=NS(convs=(conv,)), ops=ops))
    {'c1': {'conv_algo': 'WINOGRAD'}, 'r1': {'block': 512}}
    """
    out: dict[str, dict[str, Any]] = {c.node: {"conv_algo": c.algorithm}
                                      for c in plan.memory.convs}
    for op in plan.ops:
        if op.block:
            out.setdefault(op.name, {})["block"] = op.block
    return out


def encode_attrs(graph: Graph, node: Node, planned: dict[str, Any] | None = None) -> str:
    """The node's attrs, every one spelled out, as `key=v1,v2;key=v` (sorted keys), plus what
    the kernels need precomputed (a Slice's per-axis begin and step) and the plan's decisions
    for it (`planned`, see plan_attrs). An absent optional attr (None: Clip's missing bound,
    CausalMask's -inf) is left out; kernels test `has(key)`.

    >>> from planner.ir.graph import Node
    >>> encode_attrs(None, Node(name="r", op="LeakyRelu", attrs={"alpha": 0.2}))
    'alpha=0.2'
    """
    op = get_op(node.op)
    attrs = op.normalize_attrs(node.attrs)
    if op.kernel_attrs is not None:
        ins = [TensorType(graph.tensor(t).shape, graph.tensor(t).dtype) for t in node.inputs]
        attrs = {**attrs, **op.kernel_attrs(ins, attrs)}
    attrs = {**attrs, **(planned or {})}
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
#
# No string from the input (graph, node and tensor names, attribute strings) reaches the
# generated source except as bytes in `kStrings`, written as decimal numbers, so no name can end
# its context and become code. The plan JSON and the package name go through `c_string`, which
# escapes everything but printable ASCII. Never put an input string in a comment or a raw string.


class StringTable:
    """Every name and attribute string of a schedule as one NUL-separated byte array; a string
    is referred to by its offset (`kStrings + 12`).

    >>> t = StringTable(); t.add("ab"), t.add("c"), t.add("ab")
    ('kStrings + 0', 'kStrings + 3', 'kStrings + 0')
    >>> t.c_array()
    '    97, 98, 0, 99, 0'
    """

    def __init__(self) -> None:
        self.data = bytearray()
        self.at: dict[str, int] = {}

    def add(self, text: str) -> str:
        if "\0" in text:  # graph validation refuses it; a C string would end there
            raise ValueError(f"string {text!r} holds a NUL byte, which the executor cannot hold")
        if text not in self.at:
            self.at[text] = len(self.data)
            self.data += text.encode("utf-8") + b"\0"
        return f"kStrings + {self.at[text]}"

    def c_array(self) -> str:
        data = bytes(self.data) or b"\0"
        return ",\n".join("    " + ", ".join(str(b) for b in data[k:k + 24])
                           for k in range(0, len(data), 24))


def c_string(text: str) -> str:
    """A C string literal of `text` (UTF-8): printable ASCII as itself but for quote, backslash
    and '?', every other byte as a three-digit octal escape (so no byte can end the literal or
    the line, and a NUL stays a NUL).

    >>> print(c_string('a"b\\r'))
    "a\\"b\\015"
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


def c_string_lines(text: str, width: int = 4096) -> str:
    """`text` as adjacent C string literals of at most `width` characters each, one per line."""
    lines = [c_string(text[k:k + width]) for k in range(0, len(text), width)]
    return "\n".join(lines) or '""'
