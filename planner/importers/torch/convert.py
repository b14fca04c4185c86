"""An ExportedProgram (torch.export) to a planner Graph: the driver of the ATen rules.

    convert(program) -> TorchImport(graph, consts, inputs, counters)

1. `run_decompositions` to core ATen, keeping the ops the planner has as one op
   (PRESERVED: F.linear, the losses (rules_losses.py), dropout, scaled_dot_product_attention,
   PReLU and Softplus, whose decompositions compare, which no planner op does, reflect and
   replicate padding, which decompose to gathers (the planner's Pad has those modes), and
   torch.roll, which decomposes to gathers too (it becomes two Slices and a Concat), lerp,
   logaddexp, xlogy and isfinite, one row each of the pointwise table
   (planner/ops/pointwise_table.py), the reductions rules_reduce.py keeps whole (all,
   logsumexp, nansum, nanmean), max_unpool (rules_pool.py: its decomposition writes through
   index_put), take (rules_index.py: its decomposition reads a 0-d index as a Python int)
   and one_hot (rules_onehot.py: its decomposition asserts, which no op does),
   so a linear layer is one GEMM with its weight transposed in place and the loss is the
   planner's loss op, whose gradient make_training_graph knows. The decomposed program is
   then recorded (planner/importers/torch/record.py); a .pt2 file arrives as such a record already
   (planner/importers/pt2/retrace.py), and from here both go the same way.
2. The graph signature names every placeholder: a PARAMETER becomes a param tensor under its
   state_dict name (a state tensor when it has requires_grad=False), a BUFFER a state tensor
   (BatchNorm's running statistics), a lifted constant
   a state tensor holding its value, a USER_INPUT an input.
3. Every call_function node goes through its rule (rules.py), or, when it reads only
   constants (a mask built in forward by arange, tril, comparisons), torch evaluates it now
   and the result is a constant; the planner's shape for each result is checked against the
   node's own FakeTensor shape.
4. Outputs: USER_OUTPUTs are the graph's outputs; the first, when it is a float scalar no
   loss op writes (a loss of several terms traced with the model), is marked as the graph's
   loss. A BUFFER_MUTATION is the buffer's value after the step, as PyTorch leaves it: the
   new running statistics of a training BatchNorm reading that buffer are updated in place by
   the planner itself; an integer counter incremented by constants (`num_batches_tracked += 1`,
   once per BatchNorm call) is left out of the graph and `counters` reports its increment per
   step, for the trainer to count steps into; any other new value (a reassigned buffer
   `self.center = self.center * m + c * (1 - m)`, `self.buf.add_(...)`, `copy_`, a BatchNorm
   called k times, whose running statistics chain through its k calls) is written over the
   buffer by a Cast to its own dtype at the end of the forward graph (`<buffer>.next`, role
   state, `updates` the buffer), which training runs after the backward pass
   (planner/frontend/autodiff.py) and evaluation leaves out. A frozen parameter (requires_grad
   False: a state tensor, see 2.) written in forward (an EMA teacher updated under no_grad) is
   written back as a buffer is. A buffer or a parameter overwritten by a fresh draw
   (`self.noise.normal_()`, `w.uniform_()` under no_grad: a value of random ops alone, never
   the old one) is drawn anew inside every step, where the forward reads it, and its stored
   value is left as it was; so is an input so overwritten (`x.cauchy_()` on a forward
   argument), with a warning that the caller's tensor keeps its value. A trained parameter
   written in forward, or any other write to an input, is refused.

Gradients as PyTorch has them: values torch.export traced with gradients off (no_grad,
inference_mode, set_grad_enabled(False) regions) get a detach before decomposition
(planner/importers/torch/grad_mode.py), and a parameter with requires_grad=False becomes a
state tensor (a constant of the step: no gradient, no update, no optimizer state, still
loaded from the module and written back).

Names from the program (node names, state_dict keys) are data: they name tensors and nodes,
never code; the graph's validation refuses control characters in them.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import planner.importers.torch.rules  # noqa: F401  (registering the rules)
import planner.importers.torch.rules_complex  # noqa: F401  (complex values: rules_complex.py)
import planner.importers.torch.rules_complex_math  # noqa: F401  (complex log, sqrt, sin, ...)
import planner.importers.torch.rules_index  # noqa: F401
import planner.importers.torch.rules_linalg  # noqa: F401
import planner.importers.torch.rules_margin  # noqa: F401  (the margin losses; MARGIN_PRESERVED below)
import planner.importers.torch.rules_onehot  # noqa: F401  (F.one_hot; its PRESERVED below)
import planner.importers.torch.rules_pointwise  # noqa: F401
import planner.importers.torch.rules_pool  # noqa: F401  (pools; its PRESERVED below)
import planner.importers.torch.rules_products  # noqa: F401
import planner.importers.torch.rules_reduce  # noqa: F401  (the reductions; its PRESERVED below)
import planner.importers.torch.rules_resample  # noqa: F401  (antialiased F.interpolate)
import planner.importers.torch.rules_search  # noqa: F401
import planner.importers.torch.rules_sort  # noqa: F401
import planner.importers.torch.rules_special  # noqa: F401  (special functions; its PRESERVED below)
import planner.importers.torch.rules_views  # noqa: F401
from planner.dtypes import DTYPE_BYTES
from planner.graph.validate import check_graph
from planner.importers.kit import Const, Unsupported
from planner.importers.onnx.context import Importer
from planner.importers.onnx.fold import FOLD_OUTPUT_LIMIT
from planner.importers.torch.bounded import consumer, dims_of, respected
from planner.importers.torch.context import RULES, NodeCtx, TorchImportError, _in, _Unavailable
from planner.importers.torch.fold_guard import (
    FoldRefused,
    allowed_to_fold,
    check_operands,
    predicted_elements,
)
from planner.importers.torch.grad_mode import detach_grad_off
from planner.importers.torch.quiet_log import quiet_torch_logs
from planner.importers.torch.record import (
    Call,
    Program,
    Ref,
    Tensor,
    Value,
    from_exported,
    from_numpy,
    to_numpy,
)
from planner.importers.torch.rules_complex import (
    COMPLEX_DTYPES,
    Cx,
    Phased,
    complex_const,
    convert_complex,
)
from planner.importers.torch.rules_index import INDEX_PRESERVED
from planner.importers.torch.rules_losses import LOSS_PRESERVED
from planner.importers.torch.rules_margin import MARGIN_PRESERVED
from planner.importers.torch.rules_random import RANDOM_PRESERVED, fresh_draw
from planner.importers.torch.rules_views import UNINITIALIZED
from planner.importers.torch.targets import resolve
from planner.ir.graph import Graph
from planner.ops import get_op

PRESERVED = ("linear.default", *LOSS_PRESERVED, *MARGIN_PRESERVED, *INDEX_PRESERVED,
             *RANDOM_PRESERVED,
             "dropout.default", "_safe_softmax.default",
             "scaled_dot_product_attention.default", "prelu.default", "softplus.default",
             "reflection_pad1d.default", "reflection_pad2d.default",
             "replication_pad1d.default", "replication_pad2d.default", "roll.default",
             # the pointwise table's rows (their decompositions compare and select)
             "lerp.Scalar", "lerp.Tensor", "logaddexp.default", "xlogy.Tensor",
             "isfinite.default",
             # their gradients at kinks and 0 / 0 points are torch's own (planner/ops/
             # kinks.py), not their decompositions' (clamp's, where's)
             "hardsigmoid.default", "hardswish.default", "sinc.default",
             "special_entr.default", "special_xlog1py.default",
             # a complex sgn's decomposition, where(|z| == 0, 0, z / |z|), has a NaN gradient
             # at 0 (the masked quotient's 0 / 0); torch's own is 0 there (rules_complex.py)
             "sgn.default",
             # detach() decomposes to alias, which passes the gradient on: a StopGradient
             "detach.default",
             *planner.importers.torch.rules_reduce.PRESERVED,
             *planner.importers.torch.rules_pool.PRESERVED,
             *planner.importers.torch.rules_onehot.ONEHOT_PRESERVED,
             *planner.importers.torch.rules_special.PRESERVED)


@dataclass(frozen=True)
class TorchImport:
    """An imported program: its forward graph, the value behind each param and state tensor,
    the graph's input tensors in the program's argument order, the integer buffers the
    program increments by a constant each call (state_dict name -> increment) and the tensor
    of each user output."""

    graph: Graph
    consts: Mapping[str, Const]
    inputs: tuple[str, ...]
    counters: Mapping[str, int] = field(default_factory=dict)
    # The tensor of each of the program's outputs, in its order (one tensor may be two outputs).
    outputs: tuple[str, ...] = ()
    # The positions in `outputs` of complex values, each given as its planes (convert's
    # `complex_outputs`): real [..., 2], torch.view_as_real's layout.
    complex_outputs: tuple[int, ...] = ()

    def params(self) -> dict[str, np.ndarray]:
        """Every param and state tensor's value, by name (state_dict names for the module's)."""
        return {t.name: self.consts[t.name].value().astype(t.dtype, copy=False)
                for t in self.graph.by_role("param", "state") if t.updates is None}


def decompose(program: Any, extra: Mapping[Any, Any] | None = None) -> Any:
    """The program in core ATen, with PRESERVED ops kept whole, and the ops of `extra` (op ->
    a function of torch ops) decomposed as it says."""
    import torch

    table = torch.export.default_decompositions()
    for name in PRESERVED:
        op, overload = name.split(".")
        table.pop(getattr(getattr(torch.ops.aten, op), overload), None)
    table.update(extra or {})
    # multi_margin_loss's Python kernel at the Autograd key decomposes it whatever the table
    # says: set aside while decomposing, so the op reaches its rule whole
    autograd = torch._C.DispatchKey.Autograd
    aside = {}
    for name in MARGIN_PRESERVED:
        op = getattr(getattr(torch.ops.aten, name.split(".")[0]), name.split(".")[1])
        if autograd in op.py_kernels:
            aside[op] = op.py_kernels.pop(autograd)
            op._dispatch_cache.clear()
    try:
        with warnings.catch_warnings(), quiet_torch_logs():  # a failure: the caller's one line
            # torch's own deprecation inside its deepcopy of the module call graph (torch 2.9:
            # `isinstance(treespec, LeafSpec)` from copyreg): nothing the user can act on.
            warnings.filterwarnings("ignore", message=r".*\bLeafSpec\b", category=FutureWarning)
            return program.run_decompositions(table)
    finally:
        for op, kernel in aside.items():
            op.py_kernels[autograd] = kernel
            op._dispatch_cache.clear()


def decomposed(program: Any, extra: Mapping[Any, Any] | None = None) -> Any:
    """`program` (an ExportedProgram traced in this process) with its no_grad regions' results
    detached, then decomposed (`decompose`, with `extra`); TorchImportError in one line where
    torch itself cannot decompose it."""
    detach_grad_off(program)  # before the decomposition inlines no_grad regions
    try:
        return decompose(program, extra)
    except TorchImportError:
        raise
    except Exception as e:  # a program torch itself cannot decompose
        raise TorchImportError(f"cannot decompose the program: {type(e).__name__}: "
                               f"{str(e).splitlines()[0] if str(e) else ''}") from None


def recorded(program: Any, module_root: str = "", extra: Mapping[Any, Any] | None = None
             ) -> Program:
    """The record of an ExportedProgram traced in this process, decomposed with `extra`
    (`decompose`): the one kept from an earlier trace of the same program with the same table
    (planner/importers/torch/record_cache.py), else decomposed and recorded now, and kept."""
    from planner.importers.torch import record_cache

    folder = record_cache.folder(program, module_root, extra)
    kept = record_cache.load(folder, program) if folder is not None else None
    if kept is not None:
        return kept
    record = from_exported(decomposed(program, extra), module_root)
    if folder is not None:
        record_cache.store(folder, record)
    return record


def convert(program: Any, name: str = "torch", module_root: str = "",
            complex_inputs: bool = False, complex_outputs: bool = False) -> TorchImport:
    """Import a program: an ExportedProgram traced in this process (decomposed, then recorded,
    planner/importers/torch/record.py) or a record already made (a .pt2 file's,
    planner/importers/pt2/retrace.py). Raises TorchImportError, naming the node, its ATen op and its
    module path (from the node's nn_module_stack), less `module_root`: the path of the user's module
    inside the exported one (the trainer's wrapper holds it as `model`). `complex_inputs`: a
    complex user input becomes a real input of its planes (rules_complex.py), which the caller
    feeds as torch.view_as_real of the tensor and never differentiates (torch.compile's pieces
    take a module's buffers as inputs); otherwise it is refused. `complex_outputs`: a complex
    user output is the graph output of its planes, its position listed in the result's
    `complex_outputs`, which the caller gives out as torch.view_as_complex of it (the trainer's
    outputs); otherwise it is refused. A cotangent of those planes is torch's complex
    cotangent's view_as_real: for real parameters the gradient is then PyTorch's (conjugate
    Wirtinger: Re(g) d(re)/dp + Im(g) d(im)/dp)."""
    if not isinstance(program, Program):
        program = recorded(program, module_root)
    # Buffers and frozen parameters are state: read, never trained.
    buffers = {i.target for i in program.inputs
               if i.kind == "buffer" or (i.kind == "parameter" and not i.trainable)}
    reserved = {c.name for c in program.calls} | {i.name for i in program.inputs} | \
        {i.target for i in program.inputs if i.target}
    imp = Importer(graph_name=name, opset=0, reserved=reserved, state_names=set(buffers),
                   init_hints={}, used=set())
    env: dict[str, Any] = {}
    metas: dict[str, Any] = {}
    inputs: list[str] = []
    for spec in program.inputs:
        metas[spec.name] = spec.value
        if spec.kind == "user_input":
            env[spec.name] = _user_input(imp, spec, complex_inputs)
            inputs.append(spec.name)
        else:
            env[spec.name] = _state(imp, spec, program.tensors, module_root)
    counters = _counters(program)
    _convert_nodes(imp, program.calls, env, metas,
                   skip={c for calls, _ in counters.values() for c in calls})
    planes: list[int] | None = [] if complex_outputs else None
    user_outputs = _outputs(program, env, imp, counters, buffers,
                            f"{module_root}." if module_root else "", planes)
    graph_outputs = list(dict.fromkeys(user_outputs))
    graph = check_graph(imp.builder.build(outputs=graph_outputs,
                                          loss=_traced_loss(imp, graph_outputs)))
    return TorchImport(graph, {t.name: imp.consts[t.name] for t in graph.tensors
                               if t.name in imp.consts}, tuple(inputs),
                       {buf: step for buf, (_, step) in counters.items()}, tuple(user_outputs),
                       tuple(planes or ()))


def _meta(call: Call) -> tuple[tuple[int, ...], str]:
    if not isinstance(call.out, Value):
        raise TorchImportError(f"node {call.name!r}: no tensor metadata")
    return call.out.shape, call.out.dtype


def _user_input(imp: Importer, spec: Any, complex_inputs: bool) -> Any:
    """A user input's graph input: a complex one as its planes where the caller feeds those
    (convert's `complex_inputs`), else refused, as a dtype the planner lacks is."""
    if spec.value is None:
        raise TorchImportError(f"input {spec.name!r}: no tensor metadata")
    dtype = spec.value.dtype
    if dtype in COMPLEX_DTYPES and complex_inputs:
        return Cx(imp.builder.input(spec.name, (*spec.value.shape, 2), COMPLEX_DTYPES[dtype]))
    if dtype in COMPLEX_DTYPES:
        raise TorchImportError(
            f"input {spec.name!r}: a {dtype} tensor; the planner takes complex values only "
            "inside the model (pass torch.view_as_real(x) and view_as_complex it in forward)")
    if dtype not in DTYPE_BYTES:  # uint16, float8, ...
        raise TorchImportError(
            f"input {spec.name!r}: a {dtype} tensor; the planner's tensors are "
            f"{', '.join(DTYPE_BYTES)} (give the input in one of these)")
    return imp.builder.input(spec.name, spec.value.shape, dtype)


def _state(imp: Importer, spec: Any, tensors: Mapping[str, Tensor], root: str) -> Any:
    """A parameter, buffer or lifted constant; a complex one (a rotary embedding's
    `freqs_cis`) as the planes of a constant (planner/importers/torch/rules_complex.py), under
    a name of its own (the module keeps its complex tensor); a trained complex parameter is
    refused: its gradient convention (PyTorch's conjugate Wirtinger) is not a real one."""
    c = _const(spec.target, tensors,
               "constant" if spec.kind == "tensor_constant" else "initializer")
    if c.dtype not in COMPLEX_DTYPES:
        return c
    shown = spec.target.removeprefix(f"{root}." if root else "")
    if spec.kind == "parameter" and getattr(spec, "trainable", True):
        raise TorchImportError(
            f"parameter {shown!r}: a trained {c.dtype} parameter; the planner trains real "
            f"tensors (hold it as a real parameter of shape {[*c.shape, 2]} and "
            "torch.view_as_complex it in forward)")
    planes = complex_const(c, imp.fresh(f"{spec.target}.view_as_real"))
    imp.state_names.add(planes.v.name)  # a constant of the step, as a buffer is
    return planes


def _const(target: str, tensors: Mapping[str, Tensor], origin: str) -> Const:
    t = tensors.get(target)
    if t is None:
        raise TorchImportError(f"tensor {target!r}: not in the program's state")
    return Const(target, t.shape, t.dtype, origin, t.load)  # type: ignore[arg-type]


def _counters(program: Program) -> dict[str, tuple[list[str], int]]:
    """Integer buffers mutated as `buffer + constant + ...` (BatchNorm's num_batches_tracked,
    once per call of the BatchNorm): buffer name -> (the calls of the chain, which the graph
    leaves out; the increment per step)."""
    placeholders = {i.name: i.target for i in program.inputs}
    by_name = {c.name: c for c in program.calls}
    out: dict[str, tuple[list[str], int]] = {}
    for spec in program.outputs:
        if spec.kind != "buffer_mutation":
            continue
        chain, step, call = [], 0, by_name.get(spec.name)
        while (call is not None and call.target == "aten.add.Tensor" and len(call.args) >= 2
               and isinstance(call.args[0], Ref) and isinstance(call.args[1], int)
               and not isinstance(call.args[1], bool) and call.users == 1
               and isinstance(call.out, Value) and call.out.dtype in ("int64", "int32")):
            chain.append(call.name)
            step += call.args[1]
            if placeholders.get(call.args[0].name) == spec.target:
                out[spec.target] = (chain, step)
                break
            call = by_name.get(call.args[0].name)
    return out


def _args(v: Any, env: Mapping[str, Any]) -> Any:
    """Arguments with every Ref replaced by what its value became."""
    if isinstance(v, Ref):
        return env[v.name]
    if isinstance(v, (tuple, list)):
        return type(v)(_args(i, env) for i in v)
    if isinstance(v, dict):  # keyword arguments (segment_reduce's lengths, pinv's atol/rtol)
        return {k: _args(i, env) for k, i in v.items()}
    return v


def _convert_nodes(imp: Importer, calls: tuple[Call, ...], env: dict[str, Any],
                   metas: dict[str, Any], skip: set[str]) -> None:
    """Convert every call; collect every unsupported op, then raise once."""
    unsupported: dict[str, str] = {}
    modules: dict[str, str] = {}
    first_error: TorchImportError | None = None
    dropouts = [0]
    counts: dict[str, str] = {}  # each data-dependent size's count tensor (rules_bounded.py)
    poisoned: set[str] = set()
    kernel_shaped: dict[str, str] = {}  # _check
    for call in calls:
        metas[call.name] = call.out
        if call.name in skip:
            continue
        op = call.target
        if any(r in poisoned for r in call.reads()):
            poisoned.add(call.name)
            continue
        try:
            # a size the data decide: the reader's kind, or refused
            bounded = consumer(call, metas) if op != "getitem" else ""
            if op == "getitem":
                value = env[call.args[0].name][call.args[1]]
            elif _foldable(call, env):
                value = _fold(imp, call, env)
            elif _complex(call, env):
                shape, dtype = _meta(call) if isinstance(call.out, Value) else (None, None)
                value = convert_complex(NodeCtx(
                    imp, call.name, op, _args(call.args, env), _args(dict(call.kwargs), env),
                    shape, dropouts, dtype, call, call.place or call.module, metas))
            else:
                if op not in RULES:
                    raise Unsupported(op)
                shape, dtype = _meta(call) if isinstance(call.out, Value) else (None, None)
                ctx = NodeCtx(imp, call.name, op, _args(call.args, env),
                              _args(dict(call.kwargs), env), shape, dropouts, dtype,
                              call, call.place or call.module, metas, counts)
                value = RULES[op](ctx)
                if bounded:
                    value = respected(ctx, call, value, bounded)
            _check(imp, call, value, kernel_shaped)
            env[call.name] = value
        except Unsupported as e:
            if e.what not in unsupported:
                unsupported[e.what], modules[e.what] = call.name, call.place or call.module
            poisoned.add(call.name)
        except TorchImportError as e:
            first_error = first_error or e
            poisoned.add(call.name)
        except Exception as e:  # a corrupt program: still one line naming the node
            first_error = first_error or TorchImportError(
                f"node {call.name!r}{_in(call.place or call.module)} ({op}): cannot convert: "
                f"{type(e).__name__}: {e}")
            poisoned.add(call.name)
    if unsupported:
        raise TorchImportError.unsupported_ops(unsupported, modules)
    if first_error is not None:
        raise first_error


def _complex(call: Call, env: Mapping[str, Any]) -> bool:
    """Does the call read or give a complex value?"""
    outs = call.out if isinstance(call.out, tuple) else (call.out,)
    return any(isinstance(v, Value) and v.dtype in COMPLEX_DTYPES for v in outs) or \
        any(isinstance(env.get(r), Cx) for r in call.reads())


def _foldable(call: Call, env: Mapping[str, Any]) -> bool:
    """Is the call a computation on constants alone (a causal mask built in forward from
    arange, tril, comparisons), which torch itself evaluates now? Not on float parameters or
    buffers (they stay tensors the planner trains or updates), not a random op or an `empty`
    (whose rule gives zeros, not the memory torch finds), only an operator whose kernel reads
    no value as an address unchecked (planner/importers/torch/fold_guard.py), and not an
    output past FOLD_OUTPUT_LIMIT elements, as declared and as the operands make it."""
    import torch

    reads = [v.v if isinstance(v, Cx) else v for v in (env.get(r) for r in call.reads())]
    if not all(isinstance(v, Const) and v.foldable for v in reads):
        return False
    op = resolve(call.target)
    if op is None or torch.Tag.nondeterministic_seeded in op.tags or \
            call.target in UNINITIALIZED or not allowed_to_fold(call.target):
        return False
    vals = call.out if isinstance(call.out, tuple) else (call.out,)
    if not all(isinstance(v, Value) and not any(v.counted) for v in vals) or \
            sum(math.prod(v.shape) for v in vals) > FOLD_OUTPUT_LIMIT:
        return False

    def meta(v: Any) -> Any:
        if isinstance(v, Ref):
            c = env[v.name]
            if isinstance(c, Cx):
                return torch.empty(c.v.shape[:-1], device="meta",
                                   dtype=torch.complex64 if c.v.dtype == "float32" else
                                   torch.complex128)
            return torch.empty(c.shape, dtype=getattr(torch, c.dtype), device="meta")
        if isinstance(v, (tuple, list)):
            return type(v)(meta(i) for i in v)
        return v

    elements = predicted_elements(op, call.args, call.kwargs, meta)
    return elements is not None and elements <= FOLD_OUTPUT_LIMIT


def _fold(imp: Importer, call: Call, env: Mapping[str, Any]) -> Const | tuple[Const, ...]:
    import torch

    def tensor(v: Any) -> Any:
        if isinstance(v, Ref) and isinstance(env[v.name], Cx):  # planes: complex again
            return torch.view_as_complex(from_numpy(np.array(env[v.name].v.value(), order="C")))
        if isinstance(v, Ref):
            # np.array, not np.ascontiguousarray, which makes a 0-d value 1-d; bfloat16
            # through its bits (torch.from_numpy takes no ml_dtypes array)
            return from_numpy(np.array(env[v.name].value(), order="C"))
        if isinstance(v, (tuple, list)):
            return type(v)(tensor(i) for i in v)
        return v

    def const(t: Any) -> Const | Cx:
        if not isinstance(t, torch.Tensor):
            raise Unsupported(f"{call.target} (of constants, giving {type(t).__name__})")
        if t.is_complex():
            return Cx(Const.of(imp.fresh(call.name), to_numpy(torch.view_as_real(t)),
                               origin="constant"))
        return Const.of(imp.fresh(call.name), to_numpy(t), origin="constant")

    try:  # the file's values the kernel would trust, checked first
        check_operands(call.target, call.args, call.kwargs,
                       lambda v: np.asarray(env[v.name].value()) if isinstance(v, Ref)
                       else None)
    except FoldRefused as e:
        raise TorchImportError(f"node {call.name!r}{_in(call.place or call.module)} "
                               f"({call.target}): its constant operands hold {e}; refused "
                               "rather than evaluated (a corrupt or edited model file?)") \
            from None
    op = resolve(call.target)
    with torch.no_grad():
        out = op(*tensor(call.args), **{k: tensor(v) for k, v in call.kwargs.items()})
    return tuple(const(t) for t in out) if isinstance(out, (tuple, list)) else const(out)


# ATen ops whose traced (meta) shape torch's own kernel does not give: a one-sample
# reduction='none' margin loss is traced (1,) and computed 0-d. The planner gives the kernel's.
KERNEL_SHAPE = frozenset({"aten.multilabel_margin_loss.default",
                          "aten.multi_margin_loss.default"})


def _check(imp: Importer, call: Call, value: Any, kernel_shaped: dict[str, str]) -> None:
    """The planner's shape for a tensor result is the one torch traced (or, for KERNEL_SHAPE
    ops, holds as many elements: eager's shape, noted in `kernel_shaped` so that a later node
    whose traced shape follows torch's instead is refused saying why)."""
    if isinstance(value, Cx) and isinstance(call.out, Value):
        want = (*call.out.shape, 2)
        got = imp.type_of(value.v, call.name).shape
        if got != want:
            raise TorchImportError(f"node {call.name!r} ({call.target}): planner shape "
                                   f"{list(got)} (a complex value's planes), torch's "
                                   f"{list(want)}")
    if isinstance(value, (str, Const)) and isinstance(call.out, Value):
        want = call.out.shape
        got = imp.type_of(value, call.name).shape
        if got == want:
            return
        if str(call.target) in KERNEL_SHAPE and math.prod(got) == math.prod(want):
            kernel_shaped[call.name] = (
                f"; it reads {call.name!r}, which eager PyTorch shapes {list(got)} where "
                f"torch's trace says {list(want)} (the meta kernel of {call.target} disagrees "
                "with its kernel for one sample with reduction='none'): reduce the loss "
                "('mean', 'sum') or give the input a batch axis, x.reshape(1, -1)")
            return
        why = next((kernel_shaped[r] for r in call.reads() if r in kernel_shaped), "")
        raise TorchImportError(f"node {call.name!r} ({call.target}): planner shape "
                               f"{list(got)}, torch's {list(want)}{why}")


def _outputs(program: Program, env: dict[str, Any], imp: Importer,
             counters: Mapping[str, Any], state: set[str], root: str = "",
             planes: list[int] | None = None) -> list[str]:
    """The graph's outputs (the program's user outputs, in order) and the buffers' values
    after the step written back (module docstring, 4.); refusals name the module's own
    state_dict keys (less `root`, the trainer's wrapper's attribute)."""
    placeholders = {i.target: i.name for i in program.inputs if i.target}
    calls = {c.name: c for c in program.calls}
    outputs: list[str] = []
    written: list[tuple[str, str, Any, Any]] = []  # (buffer, node, new value, old value)
    for spec in program.outputs:
        if spec.kind == "user_output":
            value = env.get(spec.name)
            if isinstance(value, _Unavailable) and value.why:
                raise TorchImportError(f"output {spec.name!r}: {value.why}")
            if isinstance(value, Phased):
                raise TorchImportError(f"output {spec.name!r}: {value.why}")
            if isinstance(value, Cx) and planes is not None:  # given out as its planes
                planes.append(len(outputs))
                value = value.v
            if isinstance(value, Cx):
                raise TorchImportError(f"output {spec.name!r}: a complex tensor; the planner's "
                                       "outputs are real (return torch.view_as_real of it, "
                                       "or its .real / .abs())")
            if not isinstance(value, (str, Const)):
                raise TorchImportError(f"output {spec.name!r}: not a tensor the planner "
                                       "computes")
            traced = calls[spec.name].out if spec.name in calls else None
            if isinstance(traced, Value) and any(traced.counted):
                raise TorchImportError(f"output {spec.name!r}: its size {dims_of(traced)} "
                                       f"depends on the data (planned at its bound "
                                       f"{list(traced.shape)}); return its sum or mean")
            outputs.append(imp.as_tensor(value))
        elif spec.kind in ("buffer_mutation", "parameter_mutation"):
            if spec.target in counters or fresh_draw(imp, env.get(spec.name)):
                continue
            if spec.kind == "parameter_mutation" and spec.target not in state:
                raise TorchImportError(f"parameter {spec.target.removeprefix(root)!r}: "
                                       f"overwritten in forward by "
                                       f"node {spec.name!r}, which is not a fresh random draw "
                                       "(the planner updates trained parameters by the "
                                       "optimizer only); update it outside forward, or set "
                                       "its requires_grad=False to write it as a buffer")
            new, old = env.get(spec.name), env.get(placeholders.get(spec.target))
            if not _planner_updates(imp, new, old):
                written.append((spec.target, spec.name, new, old))
        elif spec.kind == "user_input_mutation":
            call = calls.get(spec.name)
            if call is not None and call.target == "getitem" and isinstance(call.args[0], Ref):
                call = calls.get(call.args[0].name, call)  # an output of a multi-output op
            _input_written(imp, spec, env.get(spec.name), call)
        else:
            raise TorchImportError(f"output {spec.name!r}: unsupported kind {spec.kind}")
    for buffer, node, new, old in written:  # after every reader of the old values
        _write_back(imp, buffer, node, new, old, buffer.removeprefix(root))
    return outputs


def _write_back(imp: Importer, buffer: str, node: str, new: Any, old: Any, shown: str) -> None:
    """The buffer's value after the step (`new`, computed by node `node`) written over it: a
    Cast to its own dtype whose output `<buffer>.next` carries `updates=<buffer>` (module
    docstring, 4.). TorchImportError, naming the buffer, when that cannot be."""
    if not isinstance(old, Const):
        raise TorchImportError(f"buffer {shown!r}: mutated by node {node!r}, but it is not "
                               "a tensor of the module's state; register it with "
                               "register_buffer")
    if not isinstance(new, (str, Const)):
        raise TorchImportError(f"buffer {shown!r}: mutated by node {node!r}, whose value "
                               "is not a tensor the planner computes; compute the new value "
                               "with torch ops the planner imports")
    target, value = imp.as_tensor(old), imp.as_tensor(new)
    have, want = imp.builder.type(value), imp.builder.type(target)
    if (have.shape, have.dtype) != (want.shape, want.dtype):
        raise TorchImportError(f"buffer {shown!r}: mutated by node {node!r} to "
                               f"{have.dtype} {list(have.shape)}, not its own {want.dtype} "
                               f"{list(want.shape)}; keep the buffer's shape and dtype")
    out = imp.fresh(f"{target}.next")
    imp.builder.op_n("Cast", [value], {"to": want.dtype}, name=out, outputs=[out],
                     role="state")
    imp.builder.set_updates(out, target)


def _input_written(imp: Importer, spec: Any, new: Any, call: Call | None) -> None:
    """An input the forward writes in place (`x.normal_()`, `F.batch_norm` on running
    statistics the caller passes). A step never writes its inputs back, so the write is lost
    to the caller: a fresh random draw is still the planner's own draw (what the forward reads
    after it), said in a warning; any other write is refused."""
    what = f"node {spec.name!r}" if call is None else \
        f"node {call.name!r}{_in(call.place or call.module)} ({call.target})"
    if fresh_draw(imp, new):
        warnings.warn(f"input {spec.target!r}: overwritten in forward by {what}, a fresh random "
                      "draw: the planner draws it inside the step, where the forward reads "
                      "it; the tensor the caller passes keeps its value", stacklevel=3)
        return
    raise TorchImportError(f"input {spec.target!r}: written in place by {what}, which the "
                           "planner cannot honour (a step never writes its inputs back): "
                           "write to a clone, or hold the tensor in a module buffer")


def _traced_loss(imp: Importer, outputs: list[str]) -> str | None:
    """The first output, when it is a float scalar no loss op writes (a loss of several terms,
    `F.mse_loss(o, y) + beta * kl`, traced with the model, or a module returning its own loss
    first): marked as the graph's loss (Graph.loss), which autodiff seeds."""
    from planner.ops.loss import LOSS_OPS

    if not outputs:
        return None
    first = imp.builder.type(outputs[0])
    node = imp.builder.producer(outputs[0])
    if first.shape != () or not first.dtype.startswith(("float", "bfloat")) or \
            (node is not None and node.op in LOSS_OPS):
        return None
    return outputs[0]


def _planner_updates(imp: Importer, new: Any, old: Any) -> bool:
    """Is `new` the planner's own next value of buffer `old` (a training BatchNorm's running
    statistic output 1 or 2 reading it as input 3 or 4: OpDef.running_statistics), or `old`
    itself (no change)?"""
    if new is old and new is not None and not isinstance(new, _Unavailable):
        return True
    if not isinstance(new, str) or not isinstance(old, Const):
        return False
    node = imp.builder.producer(new)
    if node is None or not node.attrs.get("training"):
        return False
    read = dict(get_op(node.op).running_statistics).get(node.outputs.index(new))  # BatchNorm's
    return read is not None and node.inputs[read] == old.name
