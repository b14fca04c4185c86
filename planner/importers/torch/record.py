"""The program the ATen rules convert: a neutral, validated record of a decomposed torch.export
program, made the same way for a module traced in this process (`from_exported`) and for a
.pt2 file read as data (planner/importers/pt2/retrace.py), so both go through the same rules.

A record holds no torch object: calls with a target string (`aten.convolution.default`,
`getitem`), arguments in which every tensor is a `Ref` to an earlier value, each output's
declared shape, dtype and strides, and the module path that wrote it; the signature's inputs
(user inputs, parameters, buffers, constants by state_dict name) and outputs (user outputs,
buffer mutations); and each state tensor as a loader of its numpy value.

>>> Value((2, 3), "float32", (3, 1), 0).shape
(2, 3)
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from planner.importers.torch.ref import Ref


@dataclass(frozen=True)
class Value:
    """A tensor's declared shape, dtype (`float32`), strides and storage offset."""

    shape: tuple[int, ...]
    dtype: str
    strides: tuple[int, ...] = ()
    offset: int = 0
    # Per dim, the symbol of a size that depends on the data (torch.export's unbacked `u0`:
    # masked_select's count), whose dim `shape` holds at its upper bound; "" for a static dim,
    # () when no dim is such (planner/importers/torch/rules_bounded.py).
    counted: tuple[str, ...] = ()


@dataclass(frozen=True)
class Call:
    """One call: `out` is its Value, a tuple (a Value or None per output) or None (no tensor);
    `users` how many calls or outputs read it."""

    name: str
    target: str
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    out: Any
    module: str = ""
    users: int = 0
    place: str = ""  # where messages place it (planner/importers/torch/origin.py); in-process only
    # The torch op whose error check reads this call's info output (CHECK_EFFECTS: its
    # api_name, `linalg.cholesky`, `torch.linalg.solve`): the step raises torch's error there.
    checked: str = ""

    def reads(self) -> list[str]:
        """The values the call reads, in argument order."""
        found: list[str] = []

        def walk(v: Any) -> None:
            if isinstance(v, Ref):
                found.append(v.name)
            elif isinstance(v, (tuple, list)):
                for item in v:
                    walk(item)

        walk(self.args)
        walk(tuple(self.kwargs.values()))
        return found


@dataclass(frozen=True)
class Input:
    """A placeholder: kind is user_input, parameter, buffer or tensor_constant; target its
    state_dict name (empty for a user input); `trainable` False for a parameter with
    requires_grad=False (frozen: a constant of the step, which the planner does not train)."""

    name: str
    kind: str
    target: str
    value: Value
    trainable: bool = True


@dataclass(frozen=True)
class Output:
    """kind is user_output, buffer_mutation, parameter_mutation or user_input_mutation
    (target: the buffer, the parameter or the input's placeholder); name the value written."""

    kind: str
    name: str
    target: str = ""


@dataclass(frozen=True)
class Tensor:
    shape: tuple[int, ...]
    dtype: str
    load: Callable[[], np.ndarray]


@dataclass(frozen=True)
class Program:
    inputs: tuple[Input, ...]
    calls: tuple[Call, ...]
    outputs: tuple[Output, ...]
    tensors: Mapping[str, Tensor] = field(default_factory=dict)

    def renamed(self, values: Mapping[str, str], targets: Mapping[str, str],
                modules: Callable[[str], str]) -> Program:
        """The program with values, state_dict names and module paths renamed; a call whose
        name a renamed value takes gets a fresh one (`relu` -> `relu_1`)."""
        taken = set(values.values())
        names = dict(values)
        for c in self.calls:
            name, k = c.name, 0
            while name in taken:
                k += 1
                name = f"{c.name}_{k}"
            taken.add(name)
            names[c.name] = name

        def ref(v: Any) -> Any:
            if isinstance(v, Ref):
                return Ref(names.get(v.name, v.name))
            if isinstance(v, (tuple, list)):
                return type(v)(ref(i) for i in v)
            return v

        return Program(
            tuple(replace(i, name=names.get(i.name, i.name),
                          target=targets.get(i.target, i.target)) for i in self.inputs),
            tuple(replace(c, name=names[c.name], args=ref(c.args),
                          kwargs={k: ref(v) for k, v in c.kwargs.items()},
                          module=modules(c.module), place="") for c in self.calls),
            tuple(replace(o, name=names.get(o.name, o.name), target=targets.get(o.target,
                                                                                o.target))
                  for o in self.outputs),
            {targets.get(k, k): t for k, t in self.tensors.items()})


class Binding(dict):
    """Each size symbol's value (symbol -> int), with what was evaluated at it so far: a
    trace's size expressions repeat (a 2-layer encoder's record at one length evaluates 750
    sizes of a few dozen distinct expressions); and what a record reads of the trace that no
    binding changes (`kept`, shared by every binding of one trace, keyed by the traced
    object's id: the trace holds it): each value's data-dependent dims (`_bounds`), each
    call's target, module path and place in the source (`_call`)."""

    def __init__(self, values: Mapping[Any, int], kept: dict[int, Any] | None = None) -> None:
        super().__init__(values)
        self.done: dict[tuple[type, Any], Any] = {}
        self.kept = {} if kept is None else kept


class OutsideTrace(ValueError):
    """Concrete shapes a symbolic trace does not hold (a dimension it specialised, a guard
    torch recorded that they fail, a size outside its range): trace them as they are."""


def from_exported(program: Any, root: str = "", binding: Mapping[Any, int] | None = None
                  ) -> Program:
    """The record of a decomposed ExportedProgram traced in this process; module paths less
    the `root` prefix (the trainer's wrapper holds the user's module as `model`). With
    `binding` (planner/importers/torch/specialize.py: each size symbol of a program traced
    with dynamic shapes, its value), the program at those sizes: every symbolic size, and
    every call computing one (`sym_size`, size arithmetic), evaluated to its integer, every
    guard torch recorded checked (OutsideTrace where one fails)."""
    from torch.export.graph_signature import InputKind, OutputKind

    sizes: dict[str, Any] = {}  # calls computing a size (or a guard's truth): their values

    sig = program.graph_signature
    kinds = {InputKind.USER_INPUT: "user_input", InputKind.PARAMETER: "parameter",
             InputKind.BUFFER: "buffer", InputKind.CONSTANT_TENSOR: "tensor_constant"}
    specs = {s.arg.name: s for s in sig.input_specs if hasattr(s.arg, "name")}
    inputs, calls = [], []
    tokens: set[str] = set()  # effect tokens and the calls that only pass one on
    checks: dict[str, str] = {}  # info values an error check reads: the op that raises
    for node in program.graph_module.graph.nodes:
        if node.op == "placeholder":
            spec = specs.get(node.name)
            if spec is not None and spec.kind == InputKind.TOKEN:
                tokens.add(node.name)
                continue
            kind = kinds.get(spec.kind) if spec is not None else None
            if kind is None:
                from planner.importers.torch.context import TorchImportError
                raise TorchImportError(f"input {node.name!r}: unsupported kind "
                                       f"{getattr(getattr(spec, 'kind', None), 'name', None)}")
            held = program.state_dict.get(spec.target or "")
            inputs.append(Input(node.name, kind, spec.target or "", _value(node, node.meta.get(
                "val"), binding), trainable=bool(getattr(held, "requires_grad", True))))
        elif node.op == "call_function" and _passes_token(node, tokens):
            tokens.add(node.name)
            if node.target is not operator.getitem:  # with_effects(token, check, info, api)
                checks[node.args[2].name] = str(node.args[3])
        elif node.op == "call_function" and (_data_sized(node, sizes) or (
                binding is not None and _sized(node, binding, sizes))):
            continue
        elif node.op == "call_function":
            calls.append(_call(node, root, binding, sizes))
    outputs = []
    for spec in sig.output_specs:
        kind = {OutputKind.USER_OUTPUT: "user_output",
                OutputKind.BUFFER_MUTATION: "buffer_mutation",
                OutputKind.PARAMETER_MUTATION: "parameter_mutation",
                OutputKind.USER_INPUT_MUTATION: "user_input_mutation"}.get(spec.kind)
        arg = getattr(spec.arg, "name", None)
        if spec.kind == OutputKind.TOKEN and arg in tokens:
            continue
        if kind is None or arg is None:
            from planner.importers.torch.context import TorchImportError
            raise TorchImportError(f"output {arg!r}: unsupported kind {spec.kind.name}")
        outputs.append(Output(kind, arg, spec.target or ""))
    calls = _checked(calls, checks)
    return Program(tuple(inputs), tuple(calls), tuple(outputs), state_tensors(program))


def state_tensors(program: Any) -> dict[str, Tensor]:
    """An ExportedProgram's state as a record holds it: its tensor constants, then its
    state_dict, each a loader of its value now."""
    return {**{k: _tensor(v) for k, v in (getattr(program, "constants", {}) or {}).items()
               if hasattr(v, "shape")},
            **{k: _tensor(v) for k, v in program.state_dict.items()}}


def _call(node: Any, root: str, binding: Mapping[Any, int] | None,
          sizes: Mapping[str, Any]) -> Call:
    """The record of one call_function node (the sizes it reads at the binding, as ints)."""
    import torch.fx

    from planner.importers.torch.origin import location, module_path

    def arg(a: Any) -> Any:
        if isinstance(sizes.get(a.name), DataSize):
            from planner.importers.torch.context import TorchImportError

            raise TorchImportError(
                f"node {node.name!r} ({node.target}): reads {sizes[a.name].expr}, a size that "
                f"depends on the data, as a number, which the planner has only as a count at "
                f"run time: reduce the selected values (sum, mean), or make the size fixed")
        return sizes[a.name] if a.name in sizes else Ref(a.name)

    kept = getattr(binding, "kept", {})
    if id(node) not in kept:
        kept[id(node)] = ("getitem" if node.target is operator.getitem else str(node.target),
                          module_path(node, root), location(node, root))
    target, module, place = kept[id(node)]
    val = node.meta.get("val")
    out = tuple(_value(node, v, binding) for v in val) \
        if isinstance(val, (tuple, list)) else _value(node, val, binding)
    return Call(node.name, target, torch.fx.node.map_arg(tuple(node.args), arg),
                dict(torch.fx.node.map_arg(dict(node.kwargs), arg)), out,
                module, len(node.users), place)


# Ops torch.export threads on an effect token whose only effect is raising an error
# (torch.linalg's singular-matrix and not-positive-definite checks): the record drops them with
# their tokens and marks the factorization whose info they read (Call.checked), whose op then
# raises torch's error itself (the CPU executor at step time; the CUDA one computes what the
# op gives there, inf or NaN). Any other effect is refused.
CHECK_EFFECTS = frozenset({"aten._linalg_check_errors.default"})


def _passes_token(node: Any, tokens: set[str]) -> bool:
    """Is the call an error check run on an effect token (`with_effects(token, check, ...)`), or
    the getitem of the token it returns? Another op with an effect is refused in one line."""
    import torch

    if node.target is operator.getitem:
        return getattr(node.args[0], "name", None) in tokens
    if node.target is not torch.ops.higher_order.with_effects:
        return False
    op = str(node.args[1])
    if op not in CHECK_EFFECTS:
        from planner.importers.torch.context import TorchImportError

        raise TorchImportError(f"node {node.name!r} ({op}): an op with a side effect torch "
                               f"orders by an effect token; the planner accepts only the error "
                               f"checks {sorted(CHECK_EFFECTS)}")
    return True


def _checked(calls: list[Call], checks: dict[str, str]) -> list[Call]:
    """The calls, each factorization whose info (`getitem(call, k)`) an error check reads
    marked with the name of the op that raises."""
    producers = {c.args[0].name: checks[c.name] for c in calls
                 if c.target == "getitem" and c.name in checks and isinstance(c.args[0], Ref)}
    return [replace(c, checked=producers[c.name]) if c.name in producers else c
            for c in calls]


# Calls torch.export records to check a symbolic size: run on the binding, then dropped.
GUARDS = frozenset({"aten._assert_scalar.default", "aten.sym_constrain_range_for_size.default",
                    "aten.sym_constrain_range.default", "aten._assert_tensor_metadata.default"})


@dataclass(frozen=True)
class DataSize:
    """A size (or a guard's truth) computed from a size that depends on the data (`u0 <= 6`):
    no number at import; a call reading it is refused (from_exported). `holds`: a truth that
    holds over the whole range torch keeps for its sizes (`u0 <= 6` where u0 is in [0, 6]),
    which a guard may check and the planner drop."""

    expr: str
    holds: bool = False


def _data_sized(node: Any, sizes: dict[str, Any]) -> bool:
    """Whether `node` computes from a data-dependent size (torch.export's unbacked symbols:
    `sym_size(masked_select, 0)`, `u0 <= 6`) or checks one (GUARDS): kept in `sizes` as a
    DataSize and dropped from the program. A guard is dropped only where what it checks holds
    for every size in the range the planner plans (torch's own range checks, a declared
    bound); one it could fail (`Eq(u0, 20)`) is refused in one line, never left unchecked."""
    import torch
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    val = node.meta.get("val")
    if isinstance(val, torch.SymInt | torch.SymBool | torch.SymFloat) and \
            free_unbacked_symbols(val):
        sizes[node.name] = DataSize(str(val.node.expr), _holds(val))
        return True
    held = sizes.get(getattr(node.args[0] if node.args else None, "name", ""))
    if str(node.target) not in GUARDS or not isinstance(held, DataSize):
        return False
    if not held.holds:
        from planner.importers.torch.context import TorchImportError

        raise TorchImportError(f"node {node.name!r} ({node.target}): torch checks {held.expr} "
                               f"on a size that depends on the data, which the planned step "
                               f"cannot check: keep only bounds of it (torch._check(n <= B))")
    return True


def _holds(val: Any) -> bool:
    """Whether a SymBool of unbacked sizes is a linear inequality in them true at every
    corner of their ranges (where the corners decide); False for anything else (`Eq`, `Mod`)."""
    import itertools

    import sympy
    import torch

    if not isinstance(val, torch.SymBool):
        return False
    expr, env = val.node.expr, val.node.shape_env
    symbols = sorted(expr.free_symbols, key=str)
    if not isinstance(expr, sympy.Le | sympy.Lt | sympy.Ge | sympy.Gt):
        return False
    gap = expr.lhs - expr.rhs
    if not gap.is_polynomial(*symbols) or sympy.Poly(gap, *symbols).total_degree() > 1:
        return False
    ranges = [env.var_to_range.get(u) for u in symbols]
    if any(r is None or not isinstance(r.lower, sympy.Integer) for r in ranges):
        return False
    ends = [(r.lower, r.upper if isinstance(r.upper, sympy.Integer) else sympy.oo)
            for r in ranges]  # torch's int_oo is no sympy number: sympy's oo compares
    return all(bool(expr.xreplace(dict(zip(symbols, c, strict=True))))
               for c in itertools.product(*ends))


# torch's upper bound for a size it knows nothing of (sys.maxsize - 1): no bound
NO_BOUND = (1 << 63) - 2


def _bounds(node: Any, val: Any, symbolic: bool) -> dict[int, tuple[Any, int]]:
    """Each dim of `val` whose size depends on the data (an unbacked symbol, `u0`): the symbol
    and its upper bound (torch's range for it: the input's numel for masked_select and nonzero,
    or what `torch._check(n <= B)` declared). One line where a dim has none, or is an
    expression of such a symbol (`2*u0`); in a trace with symbolic sizes (`symbolic`), where
    torch bounds masked_select by no number, OutsideTrace: that size is traced as it is."""
    import sympy
    import torch
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    from planner.importers.torch.context import TorchImportError

    found = {}
    for k, d in enumerate(val.shape):
        if not isinstance(d, torch.SymInt) or not free_unbacked_symbols(d):
            continue
        expr = d.node.expr
        where = f"node {node.name!r} ({getattr(node, 'target', '')}): the size {expr} of dim {k}"
        if not expr.is_Symbol:
            raise TorchImportError(f"{where} is an expression of sizes that depend on the "
                                   f"data; the planner bounds a data-dependent size only as a "
                                   f"dim of its own")
        upper = d.node.shape_env.bound_sympy(expr).upper  # torch's int_oo says is_finite
        bounded = isinstance(upper, sympy.Integer) and int(upper) < NO_BOUND
        if symbolic and not bounded:
            raise OutsideTrace(f"{where} has no bound in a trace of symbolic sizes")
        if not bounded:
            raise TorchImportError(f"{where} depends on the data and has no upper bound: "
                                   f"declare one in forward, torch._check(n <= B) of the size n")
        found[k] = (expr, int(upper))
    return found


def _sized(node: Any, binding: Mapping[Any, int], sizes: dict[str, Any]) -> bool:
    """Whether `node` computes a size or a guard's truth (its value a SymInt, SymBool or
    SymFloat: kept in `sizes` at the binding) or checks one (GUARDS: OutsideTrace where it
    fails at the binding); such a call is no op of the program at concrete sizes."""
    import torch

    val = node.meta.get("val")
    if isinstance(val, torch.SymInt | torch.SymBool | torch.SymFloat | int | bool) and \
            not isinstance(val, torch.Tensor):
        sizes[node.name] = _at(val, binding)
        return True
    if str(node.target) in GUARDS:
        if str(node.target) == "aten._assert_scalar.default":
            held = node.args[0]
            truth = sizes.get(held.name) if hasattr(held, "name") else held
            if truth is not True:
                raise OutsideTrace(f"the trace's guard {node.args[1:]!r} fails at these sizes")
        return True
    return False


def _evaluated(value: Any, binding: Mapping[Any, int] | None) -> Any:
    """A symbolic size (or a plain int) at the binding: an int (a bool, a float)."""
    import torch

    if not isinstance(value, torch.SymInt | torch.SymBool | torch.SymFloat):
        return value
    import sympy

    expr = sympy.sympify(value.node.expr)
    if binding is None:
        raise TypeError("symbolic")
    done = sympy.sympify(expr.xreplace({k: sympy.Integer(v) for k, v in binding.items()
                                        if k in expr.free_symbols}))
    if done.free_symbols:
        raise OutsideTrace(f"size {expr} has symbols the binding lacks")
    kind = {torch.SymInt: int, torch.SymBool: bool, torch.SymFloat: float}[type(value)]
    return kind(done)


def _at(value: Any, binding: Mapping[Any, int] | None) -> Any:
    """A symbolic size (or a plain int) at the binding: an int (a bool, a float); each
    expression evaluated once per Binding."""
    done = getattr(binding, "done", None)
    if done is None or not hasattr(value, "node"):
        return _evaluated(value, binding)
    key = (type(value), value.node.expr)
    if key not in done:
        done[key] = _evaluated(value, binding)
    return done[key]


def _value(node: Any, val: Any, binding: Mapping[Any, int] | None = None) -> Value | None:
    if val is None or not hasattr(val, "shape"):
        return None
    memo = getattr(binding, "kept", None)
    if memo is None:
        bounds = _bounds(node, val, binding is not None)
    elif id(val) in memo:
        bounds = memo[id(val)]
    else:
        bounds = memo[id(val)] = _bounds(node, val, True)
    if bounds:  # planned at the bound (planner/importers/torch/rules_bounded.py)
        binding = {**(binding or {}), **dict(bounds.values())}
    try:
        shape = tuple(int(_at(d, binding)) for d in val.shape)
        strides = tuple(int(_at(s, binding)) for s in val.stride())
        offset = int(_at(val.storage_offset(), binding))
    except (TypeError, RuntimeError) as e:  # a symbol (dynamic shapes), or data-dependent
        from planner.importers.torch.context import TorchImportError

        if "DataDependent" in type(e).__name__:  # nonzero, masked_select, unique, ...
            raise TorchImportError(
                f"node {node.name!r} ({getattr(node, 'target', '')}): its output shape "
                f"depends on the data ({[str(d) for d in val.shape]}); the planner plans "
                f"static shapes: compute it outside the traced module, or use a fixed-size "
                f"form (torch.where with a mask, nonzero_static)") from None
        raise TorchImportError(f"node {node.name!r}: symbolic shape {list(val.shape)}; export "
                               "with static shapes") from None
    counted = tuple(str(bounds[k][0]) if k in bounds else "" for k in range(len(shape))) \
        if bounds else ()
    return Value(shape, str(val.dtype).removeprefix("torch."), strides, offset, counted)


def _tensor(t: Any) -> Tensor:
    return Tensor(tuple(int(d) for d in t.shape), str(t.dtype).removeprefix("torch."),
                  lambda: to_numpy(t))


def to_numpy(t: Any) -> np.ndarray:
    """A torch tensor's value as numpy (bfloat16 through its bits: numpy's is ml_dtypes')."""
    import torch

    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view("bfloat16")
    return t.numpy()


def from_numpy(array: np.ndarray) -> Any:
    """A torch tensor sharing a numpy array's memory (bfloat16, ml_dtypes', through its bits:
    torch.from_numpy takes no ml_dtypes array)."""
    import torch

    if array.dtype == np.dtype("bfloat16"):
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)
