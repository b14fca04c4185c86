"""A .pt2 file's validated program (planner/importers/pt2/saved.py) to the record the rules convert
(planner/importers/torch/record.py), through the same decomposition as a module traced in this
process.

A saved program is usually not decomposed: torch.export writes its training IR (`aten.linear`,
`aten.conv2d`, `aten.batch_norm` updating its buffers in place, `aten._weight_norm`). Rather
than a second set of rules for that IR, the planner replays the validated calls in a module
of its own (`_Replay`) and exports that module in this process, exactly as the trainer exports
a user's module, then decomposes it (convert.decompose) and records it. What torch traces is
the planner's code: its parameters, buffers, constants and scopes carry the planner's names
(`p0`, `b1`, `c2`, `scopes.3`), every target is an operator object found by registry lookup
(planner/importers/torch/targets.py), every argument a plain value or a tensor; no name, string or
path of the file reaches torch.fx's code generation, sympy or an unpickler. Nor does any of its
values reach a torch kernel: its tensors are the module's parameters and buffers (its tensor
constants too, while traced), which the trace fakes. The record then gets the file's names back
as data: user inputs, state_dict names, module paths.
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from typing import Any

import numpy as np

from planner.errors import UserError
from planner.importers.pt2.archive import SavedArchive
from planner.importers.pt2.saved import Enum, Node
from planner.importers.torch.convert import decompose
from planner.importers.torch.quiet_log import quiet_torch_logs
from planner.importers.torch.record import Program, Ref, from_exported, from_numpy
from planner.importers.torch.targets import resolve

_STATE = {"parameter": "p", "buffer": "b", "tensor_constant": "c"}


class _Refused(Exception):
    """A call torch refused while replaying: the node, and torch's first line."""


def retrace(saved: SavedArchive, where: str) -> Program:
    """The decomposed record of a saved program (see the module docstring); UserError naming
    the member, node and field otherwise."""
    import torch

    program = saved.program
    ops = {}
    for node in program.nodes:
        op = resolve(node.target)
        if op is None:
            raise UserError(f"{where}: node {node.name!r} target {node.target!r} is not an "
                            "operator the planner imports (planner/importers/torch/targets.py)")
        ops[node.name] = op
    users = [s for s in program.inputs if s.kind == "user_input"]
    examples = []
    for spec in users:
        meta = program.values.get(spec.value)
        if meta is None:
            raise UserError(f"{where}: input {spec.value!r} has no graph.tensor_values entry")
        try:  # never written or read: torch traces with fake tensors of its shape
            examples.append(torch.empty(meta.shape, dtype=_dtype(meta.dtype)))
        except (RuntimeError, MemoryError) as e:
            raise UserError(f"{where}: input {spec.value!r} of shape {list(meta.shape)} cannot "
                            f"be allocated to trace the program ({type(e).__name__})") from None
    replay = _Replay(saved, ops, where)
    try:
        with warnings.catch_warnings(), quiet_torch_logs():  # its failure: one line below
            warnings.simplefilter("ignore")  # torch's notes on tensor attributes and the like
            exported = decompose(torch.export.export(replay, tuple(examples), strict=False))
    except _Refused as e:
        raise UserError(f"{where}: {e}") from None
    except UserError:
        raise
    except Exception as e:  # torch refused the replayed program as a whole
        first = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
        at = f"node {replay.at!r}: " if replay.at else ""
        raise UserError(f"{where}: {at}torch cannot trace the program ({type(e).__name__}: "
                        f"{first})") from None
    record = _constants_as_saved(from_exported(exported), replay.state, where)
    names = {i.name: spec.value for i, spec in
             zip([i for i in record.inputs if i.kind == "user_input"], users, strict=True)}
    targets = {attr: spec.target for attr, spec in replay.state.items()}
    paths = {f"scopes.{k}": path for k, path in enumerate(replay.paths)}
    return record.renamed(names, targets, lambda m: paths.get(m, ""))


def _constants_as_saved(record: Program, state: dict[str, Any], where: str) -> Program:
    """`record` with the file's tensor constants, traced as buffers (_Replay), constants
    again: their inputs' kind, and nothing written to them."""
    constants = {attr for attr, spec in state.items() if spec.kind == "tensor_constant"}
    written = [o for o in record.outputs if o.target in constants]
    if written:
        raise UserError(f"{where}: the program writes its tensor constant "
                        f"{state[written[0].target].target!r} in place")
    return replace(record, inputs=tuple(
        replace(i, kind="tensor_constant") if i.kind == "buffer" and i.target in constants
        else i for i in record.inputs))


def _dtype(name: str) -> Any:
    import torch

    return getattr(torch, name)


def _tensor(array: np.ndarray) -> Any:
    return from_numpy(array.copy())


def _module_base() -> type:
    import torch

    class Scope(torch.nn.Module):
        """Calls made under one module path of the file: export records this scope in each
        call's nn_module_stack, which the record maps back to the file's path."""

        def forward(self, op: Any, args: list, kwargs: dict) -> Any:
            return op(*args, **kwargs)

    return Scope


def _Replay(saved: SavedArchive, ops: dict[str, Any], where: str) -> Any:  # noqa: N802
    """The module replaying a saved program's calls in order (see the module docstring)."""
    import torch

    Scope = _module_base()
    program = saved.program

    class Replay(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.state: dict[str, Any] = {}  # attribute -> the input spec it stands for
            self.at = ""
            self.paths = sorted({n.module for n in program.nodes if n.module})
            self.scopes = torch.nn.ModuleList(Scope() for _ in self.paths)
            self._scope = {path: k for k, path in enumerate(self.paths)}
            for k, spec in enumerate(program.inputs):
                if spec.kind == "user_input":
                    continue
                array = saved.tensors.get(spec.target)
                if array is None:
                    raise UserError(f"{where}: input {spec.value!r} reads {spec.kind} "
                                    f"{spec.target!r}, which the archive's payloads lack")
                meta = program.values.get(spec.value)
                if meta is not None and (meta.shape, meta.dtype) != (array.shape,
                                                                     str(array.dtype)):
                    raise UserError(f"{where}: input {spec.value!r} is declared "
                                    f"{meta.dtype}{list(meta.shape)}, its payload "
                                    f"{spec.target!r} holds {array.dtype}{list(array.shape)}")
                attr = f"{_STATE[spec.kind]}{k}"
                t = _tensor(array)
                if spec.kind == "parameter":
                    # Frozen as saved: requires_grad=False makes it a constant of the step.
                    frozen = meta is not None and not meta.requires_grad
                    self.register_parameter(attr, torch.nn.Parameter(
                        t, requires_grad=t.is_floating_point() and not frozen))
                elif spec.kind == "buffer":
                    self.register_buffer(attr, t, persistent=spec.persistent)
                else:
                    # A buffer while traced, not a plain attribute: torch.export fakes buffers,
                    # while ops whose operands are all plain tensors it runs on the values
                    # (the file's: an integer division of INT_MIN by -1 traps). The record
                    # takes the kind back (retrace).
                    self.register_buffer(attr, t, persistent=False)
                self.state[attr] = spec

        def forward(self, *inputs: Any) -> tuple:
            env: dict[str, Any] = {}
            users = iter(inputs)
            for spec in program.inputs:
                env[spec.value] = next(users) if spec.kind == "user_input" else None
            for attr, spec in self.state.items():
                env[spec.value] = getattr(self, attr)
            for node in program.nodes:
                self.at = node.name
                args, kwargs = _arguments(ops[node.name], node, env, where)
                if node.module:
                    out = self.scopes[self._scope[node.module]](ops[node.name], args, kwargs)
                else:
                    out = ops[node.name](*args, **kwargs)
                _bind(node, out, env, where)
            self.at = ""
            for spec in program.outputs:
                if spec.kind == "buffer_mutation":
                    attr = next((a for a, s in self.state.items()
                                 if s.kind == "buffer" and s.target == spec.target), None)
                    if attr is None:
                        raise UserError(f"{where}: an output mutates {spec.target!r}, which is "
                                        "not a buffer of the program")
                    getattr(self, attr).copy_(_read(env, spec.value, where, "an output"))
            return tuple(_read(env, s.value, where, "an output") for s in program.outputs
                         if s.kind == "user_output")

    return Replay()


def _read(env: dict[str, Any], name: str, where: str, reader: str) -> Any:
    value = env.get(name)
    if value is None:
        raise UserError(f"{where}: {reader} reads value {name!r}, which no input or earlier "
                        "node writes")
    return value


def _plain(v: Any, env: dict[str, Any], where: str, reader: str) -> Any:
    import torch

    if isinstance(v, Ref):
        return _read(env, v.name, where, reader)
    if isinstance(v, Enum):
        if v.kind == "dtype":
            return _dtype(v.value)
        if v.kind == "layout":
            return torch.strided
        if v.kind == "device":
            return torch.device("cpu")
        return getattr(torch, v.value)  # a memory format of saved.MEMORY_FORMATS
    if isinstance(v, tuple):
        return [_plain(i, env, where, reader) for i in v]
    return v


def _arguments(op: Any, node: Node, env: dict[str, Any], where: str) -> tuple[list, dict]:
    """The call's positional and keyword arguments, matched by name to the operator's own
    schema; a name the schema lacks, or one given twice, is refused."""
    given: dict[str, Any] = {}
    for name, value, _ in node.args:
        if name in given:
            raise UserError(f"{where}: node {node.name!r} gives argument {name!r} twice")
        given[name] = value
    schema = op._schema.arguments
    known = {a.name for a in schema}
    for name in given:
        if name not in known:
            raise UserError(f"{where}: node {node.name!r} argument {name!r} is not an argument "
                            f"of {node.target}")
    reader = f"node {node.name!r}"
    args, kwargs, positional = [], {}, True
    for a in schema:
        if a.name not in given:
            positional = False
            continue
        value = _plain(given[a.name], env, where, reader)
        if positional and not a.kwarg_only:
            args.append(value)
        else:
            positional = False
            kwargs[a.name] = value
    return args, kwargs


def _bind(node: Node, out: Any, env: dict[str, Any], where: str) -> None:
    """What the call returned, under the names its outputs declare."""
    outs = node.outputs
    single = len(outs) == 1 and not (isinstance(out, (tuple, list)) and
                                     not isinstance(outs[0], tuple))
    if outs:
        _bind_each(node, outs, [out] if single else out, env, where)


def _bind_each(node: Node, declared: tuple, values: Any, env: dict[str, Any],
               where: str) -> None:
    if not isinstance(values, (tuple, list)) or len(values) != len(declared):
        raise UserError(f"{where}: node {node.name!r} declares {len(declared)} outputs where "
                        f"{node.target} gives another number")
    for name, value in zip(declared, values, strict=True):
        if isinstance(name, Ref):
            env[name.name] = value
        elif isinstance(name, tuple):  # a list output (`as_tensors`)
            _bind_each(node, name, value, env, where)
