"""One trace for every size: a program traced by torch.export with dynamic shapes and decomposed
once, recorded at each concrete size by evaluating its size symbols (record.from_exported's
`binding`), where tracing and decomposing again took 1.5-3 s a size (a 2-layer encoder on the
2-core VM: the dynamic-padding loop of bench/first_step_loop.py, a new length every few steps).

    traced = SymbolicTrace(program)                   # torch.export(..., dynamic_shapes=AUTO)
    record = traced.at((tokens, mask, labels))        # a Program at these sizes, or OutsideTrace

Sound as torch's own dynamic shapes are: the program holds for every size its guards and range
constraints allow; `at` checks both at the binding (and that every input dimension the trace
kept static has its traced size) and raises OutsideTrace otherwise, and the caller traces those
sizes as they are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from planner.importers.torch.record import Binding, OutsideTrace, Program, from_exported

if TYPE_CHECKING:
    from planner.importers.torch.convert import TorchImport


class SymbolicTrace:
    """An ExportedProgram traced with dynamic shapes, recorded at concrete sizes: each size's
    record kept per host (record_cache.py, by the trace's key and the sizes), the program
    decomposed (convert.decomposed, with `extra`) once, at the first size whose record is not
    kept."""

    def __init__(self, program: Any, root: str = "", extra: Mapping[Any, Any] | None = None
                 ) -> None:
        from planner.importers.torch import record_cache

        self.traced = program
        self.root = root
        self.extra = extra
        # (made before the decomposition detaches no_grad regions' results in the program)
        self.keyed = record_cache.keyed(program, root, extra)
        self.program: Any = None  # decomposed, at the first size not kept
        self.failed = False  # torch could not decompose it: every size traced as it is
        self._kept: dict[int, Any] = {}  # what no binding changes (record.Binding)

    def binding(self, args: Sequence[Any], program: Any = None) -> Binding:
        """Each size symbol's value at the shapes of `args` (the traced inputs, in order) in
        `program` (the decomposed one: the traced one's placeholders and ranges where None);
        OutsideTrace where they are not a size of the trace."""
        import sympy
        import torch

        program = self.program if program is None else program
        inputs = _user_inputs(program)
        if len(args) != len(inputs):
            raise OutsideTrace(f"{len(args)} inputs, the trace has {len(inputs)}")
        binding: dict[Any, int] = {}
        pairs = []
        for node, a in zip(inputs, args, strict=True):
            val = node.meta.get("val")
            if tuple(val.shape).__len__() != a.dim():
                raise OutsideTrace(f"input {node.name!r} of rank {a.dim()}")
            for d, n in zip(val.shape, a.shape, strict=True):
                expr = d.node.expr if isinstance(d, torch.SymInt) else sympy.Integer(int(d))
                if isinstance(expr, sympy.Symbol) and expr not in binding:
                    binding[expr] = int(n)
                pairs.append((node.name, expr, int(n)))
        for name, expr, n in pairs:
            if expr.xreplace(binding) != n:
                raise OutsideTrace(f"input {name!r}: the trace holds {expr} there, not {n}")
        for symbol, ranges in (program.range_constraints or {}).items():
            value = binding.get(symbol)
            if value is not None and not (ranges.lower <= value <= ranges.upper):
                raise OutsideTrace(f"size {symbol} = {value} outside the trace's range "
                                   f"[{ranges.lower}, {ranges.upper}]")
        return Binding(binding, self._kept)

    def at(self, args: Sequence[Any]) -> Program:
        """The program's record at the shapes of `args` (OutsideTrace: trace them apart)."""
        from planner.importers.torch import record_cache

        sizes = self.binding(args, self.traced if self.program is None else None)
        folder = record_cache.folder_at(self.keyed, sizes)
        kept = record_cache.load(folder, self.traced) if folder is not None else None
        if kept is not None:
            return kept
        record = from_exported(self._decomposed(), self.root, self.binding(args))
        if folder is not None:
            record_cache.store(folder, record)
        return record

    def _decomposed(self) -> Any:
        from planner.importers.torch.convert import decomposed

        if self.program is None and not self.failed:
            try:
                self.program = decomposed(self.traced, self.extra)
            except Exception:  # noqa: BLE001 - torch's failure: each size traced as it is
                self.failed = True
        if self.program is None:
            raise OutsideTrace("torch could not decompose the symbolic trace")
        return self.program


def _user_inputs(program: Any) -> list[Any]:
    from torch.export.graph_signature import InputKind

    kinds = {s.arg.name: s.kind for s in program.graph_signature.input_specs
             if hasattr(s.arg, "name")}
    return [n for n in program.graph_module.graph.nodes
            if n.op == "placeholder" and kinds.get(n.name) == InputKind.USER_INPUT]


def names_like(graph: Any, like: Any) -> dict[str, str] | None:
    """Each tensor name of `graph` -> the name of its counterpart in `like` (a graph of the
    same module at other sizes, from another trace), tensor for tensor in their order; None
    where the two are not the same computation op for op (same ops, arities and edges; same
    roles, dtypes and ranks). A symbolic trace numbers its calls past its size calls (`add_7`
    for a concrete trace's `add_5`); what else the graphs hold is checked again by who runs
    one on the other's plan (planner/pipeline/ranges.py)."""
    if (len(graph.nodes) != len(like.nodes) or len(graph.tensors) != len(like.tensors)
            or any((a.role, a.dtype, len(a.shape)) != (b.role, b.dtype, len(b.shape))
                   for a, b in zip(graph.tensors, like.tensors, strict=True))):
        return None
    names = {a.name: b.name for a, b in zip(graph.tensors, like.tensors, strict=True)}
    for a, b in zip(graph.nodes, like.nodes, strict=True):
        if (a.op != b.op or [names[i] for i in a.inputs] != list(b.inputs)
                or [names[o] for o in a.outputs] != list(b.outputs)):
            return None
    if [names[o] for o in graph.outputs] != list(like.outputs):
        return None
    return names


def renamed(graph: Any, names: dict[str, str], like: Any) -> Any:
    """`graph` with its tensors named by `names` and its nodes by `like`'s (names_like)."""
    from planner.graph.validate import check_graph

    def tensor(name: str | None) -> str | None:
        return None if name is None else names[name]

    fields = {f: getattr(graph, f) for f in type(graph).model_fields}
    return check_graph(type(graph)(**{
        **fields,
        "name": like.name,
        "tensors": tuple(t.model_copy(update={"name": names[t.name],
                                              "updates": tensor(t.updates)})
                         for t in graph.tensors),
        "nodes": tuple(n.model_copy(update={"name": b.name,
                                            "inputs": tuple(names[i] for i in n.inputs),
                                            "outputs": tuple(names[o] for o in n.outputs)})
                       for n, b in zip(graph.nodes, like.nodes, strict=True)),
        "outputs": tuple(names[o] for o in graph.outputs),
        "loss": tensor(graph.loss)}))


def named_like(imported: TorchImport, like: TorchImport) -> TorchImport | None:
    """`imported` under the names of `like` (names_like), or None."""
    from dataclasses import replace

    names = names_like(imported.graph, like.graph)
    if names is None:
        return None
    return replace(imported, graph=renamed(imported.graph, names, like.graph),
                   consts={names.get(k, k): v for k, v in imported.consts.items()},
                   inputs=tuple(names.get(i, i) for i in imported.inputs),
                   outputs=tuple(names.get(o, o) for o in imported.outputs))
