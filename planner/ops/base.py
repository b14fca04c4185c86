"""The op registry: one `OpDef` per op, holding everything the pipeline knows about it.

An op definition keeps together
  - its attribute schema (names, kinds, defaults),
  - its shape and dtype rule (`infer`),
  - its cost features (`flops`, 2 per multiply-accumulate; `bytes_moved`),
  - its numpy reference forward (`reference`), the oracle for every executor,
  - its gradient rule (`gradient`), used by autodiff to build training graphs,
  - what the planner's stages need to know of it: its cost class (the analytical model's
    scaling curve), whether it is a convolution (priced per algorithm, with a workspace),
    whether recomputing it is worth it, whether its output is a view of its input (no bytes
    of its own, no copy) or may be written over its input (`in_place`), and the attributes
    its kernels need precomputed (`kernel_attrs`).
    Which backends have a kernel for it is the backends' own registry (codegen.backends).

Example (the whole definition of an op):
    >>> import numpy as np
    >>> from planner.ops.base import REGISTRY, OpDef, TensorType, register, elementwise_flops
    >>> register(OpDef(
    ...     name="ExampleSquare", arity=1,
    ...     infer=lambda ins, a: [ins[0]],
    ...     flops=elementwise_flops(1),
    ...     reference=lambda xs, a: [xs[0] * xs[0]],
    ... )).name
    'ExampleSquare'
    >>> del REGISTRY["ExampleSquare"]  # only an example: the tests' process shares the registry

Conventions shared by every op (the graph JSON contract):
  - images are NCHW; convolution weights OIHW; transposed-convolution weights IOHW
    (C_in, C_out / groups, kH, kW), as in ONNX and PyTorch;
  - spatial `pads` are [top, left, bottom, right]; `strides`, `dilations`, `kernel` are [h, w];
  - negative axes count from the end, as in numpy;
  - integer class labels are int64; every float op computes in its input dtype.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Protocol

import numpy as np

from planner.dtypes import LOW_FLOATS, is_float, num_bytes, num_elements


class OpError(ValueError):
    """A node's inputs or attributes do not fit its op. The message names what is wrong;
    graph validation prefixes the node name."""


# OpDef.channel_blocked of an op computed element by element at the same position of every
# operand (no broadcasting but of scalar bounds, no use of the element's index).
BY_POSITION = "by position"


@dataclass(frozen=True)
class TensorType:
    """Shape and dtype of a value flowing along an edge."""

    shape: tuple[int, ...]
    dtype: str = "float32"

    @property
    def size(self) -> int:
        return num_elements(self.shape)

    @property
    def nbytes(self) -> int:
        return num_bytes(self.shape, self.dtype)

    @property
    def rank(self) -> int:
        return len(self.shape)


@dataclass(frozen=True)
class Attr:
    """One attribute: its kind and default. `required` attrs have no default. An `optional`
    attr absent from a node stays absent (normalize_attrs writes no default for it; the op
    reads it with `.get`), so adding one to an op leaves existing graphs and plans
    byte-identical.

    kinds: "int", "float", "bool", "str", "ints" (list of int), "floats" (list of float).
    """

    kind: str
    default: Any = None
    required: bool = False
    optional: bool = False


Attrs = dict[str, Any]
Infer = Callable[[list[TensorType], Attrs], list[TensorType]]
Flops = Callable[[list[TensorType], list[TensorType], Attrs], int]
Reference = Callable[[list[np.ndarray], Attrs], list[np.ndarray]]


class GradBuilder(Protocol):
    """What a gradient rule may do: emit nodes into the training graph being built.

    `emit(op, inputs, attrs)` adds a node (shapes inferred from the op's rule) and returns the
    names of its outputs; `needs(tensor)` says whether a gradient for that tensor is wanted;
    `type(tensor)` gives its TensorType.
    """

    def emit(self, op: str, inputs: Sequence[str], attrs: Attrs | None = None) -> list[str]: ...

    def needs(self, tensor: str) -> bool: ...

    def type(self, tensor: str) -> TensorType: ...


# gradient(builder, node, grad_outputs) -> one gradient tensor name (or None) per node input.
# grad_outputs holds, per node output, the name of the incoming gradient or None.
Gradient = Callable[[GradBuilder, Any, list[str | None]], list[str | None]]


@dataclass(frozen=True)
class Pointwise:
    """An op computed element by element: its scalar formula, from which backends generate
    kernels (codegen/tvm_kernels.py builds TVM computes of it for the CUDA backend).

    `formula(m, xs, p)` returns the op's outputs at one element, given `xs`, its inputs there,
    and `p`, the runtime parameters (and `structural` attrs) by name. `m` is a math namespace
    (the generator's): m.exp, m.log, m.sqrt, m.abs, m.tanh, m.erf, m.erfc, m.expm1, m.log1p,
    m.pow, m.where(cond, a, b) (both evaluated), m.isnan, m.isinf, m.isfinite, m.any, m.all,
    m.not_, m.cast(x, dtype), m.u64(constant), m.call(name, *xs) (a C library function of
    planner.ops.pointwise_table.LIBM: sin, atan2, lgamma, ...), and m.index, the element's flat
    index (int64). Operators + - * / < > ==
    ^ >> work on its values; a Python number takes the dtype of the value it meets.
    The formula is the reference's, NaN and infinities included (the tests compare the two).

    params       (attr, dtype, value when the attr is absent) of the attrs passed to the kernel
                 at run time: float32, float64, uint64 (a seed)
    signatures   the kernels to generate, as dtypes "in,in->out,out" (int64 Add, say); in a
                 low float type (bfloat16, float16: mixed precision) the kernel loads the low
                 values, computes the formula in float32 and rounds each output once
                 (`low_signatures` spells them)
    structural   (attr, values): an attr fixed per kernel (Gelu's approximate); p holds its value
    broadcast    inputs broadcast to the output as numpy (per-dim strides passed at run time)
    scalar_inputs  inputs read at element 0 whatever the index (a step counter)
    arities      for variadic ops, the input counts to generate (the kernel chains for more)
    reduce_to    (output, input): that output is a per-element contribution the kernel sums
                 down to the input's shape (PReluGrad's dslope)
    extents      (name, axis): input 0's extent along axis, an int64 parameter in p
    blocks       the threads-per-block variants to generate (None: every one the generator
                 offers); a compute-bound formula, whose time the block does not move, takes one
    """

    formula: Callable[[Any, list[Any], dict[str, Any]], list[Any]]
    signatures: tuple[str, ...] = ("float32->float32",)
    params: tuple[tuple[str, str, float], ...] = ()
    structural: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    broadcast: bool = False
    scalar_inputs: tuple[int, ...] = ()
    arities: tuple[int, ...] = ()
    reduce_to: tuple[tuple[int, int], ...] = ()
    extents: tuple[tuple[str, int], ...] = ()
    blocks: tuple[int, ...] | None = None


def low_signatures(*signatures: str) -> tuple[str, ...]:
    """Each float32 signature again in each low float type (the kernels a mixed-precision
    policy runs between its convolutions; planner.frontend.passes.precision.FOLLOW_OPS).

    Example:
        >>> low_signatures("float32,float32->float32")
        ('bfloat16,bfloat16->bfloat16', 'float16,float16->float16')
    """
    return tuple(s.replace("float32", low) for low in sorted(LOW_FLOATS) for s in signatures)


def default_bytes(ins: list[TensorType], outs: list[TensorType], attrs: Attrs) -> int:
    """Bytes moved by a kernel that reads every input and writes every output once."""
    return sum(t.nbytes for t in ins) + sum(t.nbytes for t in outs)


@dataclass(frozen=True)
class OpDef:
    """Everything about one op. `arity` is the exact number of inputs, or None for variadic
    (then `min_inputs` applies)."""

    name: str
    infer: Infer
    flops: Flops
    reference: Reference
    arity: int | None = 1
    min_inputs: int = 1
    attrs: dict[str, Attr] = field(default_factory=dict)
    bytes_moved: Flops = default_bytes
    gradient: Gradient | None = None
    # Inputs that never receive a gradient (integer ids, labels, shapes).
    nondiff_inputs: tuple[int, ...] = ()
    doc: str = ""
    # The analytical model's scaling curve (planner.costs.analytical.CLASS_CURVES): "conv",
    # "gemm", "elementwise", "reduction", "data-movement", "scatter", or "" for the default.
    cost_class: str = ""
    # A convolution (forward, backward data or filter): priced per algorithm, with a workspace
    # (planner.costs.convalgo).
    convolution: bool = False
    # Memory planning's recompute policy for its outputs: "cheap" (recompute rather than keep),
    # "expensive" (as costly as the pass itself: its outputs are checkpoints) or "never" (it
    # writes persistent state or fills constants: never run twice).
    recompute: str = "cheap"
    # What a recompute reads, operand by operand, when not its inputs as they are: ("in", k)
    # input k, ("out", k) output k as the first run wrote it and memory planning kept it
    # (BatchNorm: its saved statistics in place of the running ones, which that run updated in
    # place; its in-place outputs then go to scratch). An input it does not name is not read
    # again; an input past the node's inputs is an optional one it lacks (BatchNorm's folded
    # residual). planner.memory.stash plans the recompute's reads from it, planner.report
    # .replay runs them and planner.verify.inserted checks them: `recompute_operands`.
    recompute_reads: tuple[tuple[str, int], ...] | None = None
    # (output, input) pairs: in training mode (its `training` attribute) output k is the new
    # running value of input j (BatchNorm's running mean and variance), an update of persistent
    # state. An evaluation graph (model.eval()) runs the op with training off, keeps output 0
    # alone and gives a reader of output k input j; autodiff marks output k as input j's
    # update; the importers chain a second call's statistics through it.
    running_statistics: tuple[tuple[int, int], ...] = ()
    # In an evaluation graph (model.eval()) output 0 is input 0 (Dropout): the op is dropped
    # and its readers read its input.
    evaluation_identity: bool = False
    # A collective's ring traffic (planner.schedule.parallel prices it): the bytes it moves
    # ("inputs": its gradients; "outputs": the gathered bucket; "param outputs": a sharded
    # update's parameters; "one float": a flag or sum of squares) and its ring passes (2: an
    # all-reduce, a reduce-scatter then an all-gather; 1: either half).
    ring_traffic: tuple[str, int] | None = None
    # Output 0 is input 0's bytes under another shape: memory planning gives it no bytes of its
    # own (an alias), and kernels copy nothing.
    view: bool = False
    # Outputs its kernels may write over the bytes of the input of the same index, given the
    # node's input count (UnscaleGrads: every gradient): memory planning gives such an output
    # its input's bytes when nothing else reads them later (planner.memory.liveness
    # .in_place_aliases), so the kernels must be correct when an output is its input.
    in_place: Callable[[int], Sequence[int]] | None = None
    # Attributes the kernels need precomputed from the input types (a slice's per-axis first
    # index and step), merged into the node's attrs when a backend renders it.
    kernel_attrs: Callable[[list[TensorType], Attrs], Attrs] | None = None
    # Bytes of scratch its CPU kernel may ask for at `threads` threads (library scratchpads,
    # reorders into blocked layouts, per-thread partials): memory planning gives the op an
    # area of this size with the op's lifetime. An estimate from the operand sizes; a kernel
    # that needs more gets a block of its own at load, which the executor's stats() report.
    scratch: Callable[[list[TensorType], list[TensorType], Attrs, int], int] | None = None
    # Bytes of device scratch its CUDA kernel needs beside any library workspace (a padded
    # copy of a convolution's image): memory planning adds them to the op's workspace area.
    gpu_scratch: Callable[[list[TensorType], list[TensorType], Attrs], int] | None = None
    # Its scalar formula, when it is computed element by element (generated GPU kernels).
    pointwise: Pointwise | None = None
    # Which of its float32 image operands its CPU kernel also reads or writes channel-blocked
    # (Tensor.layout; planner.step.blocked keeps activations so between such ops): given the
    # node's attrs, groups of (side, index) operands ("in", 0: input 0), each group blocked or
    # plain as one, independently of the others; BY_POSITION: every operand, all in one layout
    # (a kernel visiting elements by position, for which operands of one shape line up
    # whatever their common layout). An index past the node's operands names an optional one
    # it lacks (BatchNorm's folded residual).
    channel_blocked: (Callable[[Attrs], tuple[tuple[tuple[str, int], ...], ...]] | str
                      | None) = None

    def blocked_groups(self, attrs: Attrs, inputs: int, outputs: int
                       ) -> tuple[tuple[tuple[str, int], ...], ...]:
        """A callable channel_blocked's groups for a node of `inputs` and `outputs` operands,
        without the optional slots it lacks; () for other rules."""
        if not callable(self.channel_blocked):
            return ()
        count = {"in": inputs, "out": outputs}
        return tuple(tuple(slot for slot in slots if slot[1] < count[slot[0]])
                     for slots in self.channel_blocked(attrs))

    def recompute_operands(self, inputs: Sequence[str], outputs: Sequence[str]
                           ) -> tuple[str, ...]:
        """The values a recompute of a node of this op with `inputs` and `outputs` reads
        (recompute_reads); its inputs when that is None or the node lacks an output it names
        (a BatchNorm in inference mode, which is never recomputed).

        >>> outs = ["y", "rm2", "rv2", "mean", "invstd"]
        >>> get_op("BatchNorm").recompute_operands(["x", "g", "b", "rm", "rv"], outs)
        ('x', 'g', 'b', 'mean', 'invstd')
        >>> get_op("BatchNorm").recompute_operands(["x", "g", "b", "rm", "rv", "skip"], outs)
        ('x', 'g', 'b', 'mean', 'invstd', 'skip')
        """
        reads = self.recompute_reads
        if reads is None or any(s == "out" and k >= len(outputs) for s, k in reads):
            return tuple(inputs)
        side = {"in": inputs, "out": outputs}
        return tuple(side[s][k] for s, k in reads if k < len(side[s]))

    def recompute_reads_input(self, k: int) -> bool:
        """Whether a recompute reads input `k` again (recompute_reads)."""
        return self.recompute_reads is None or ("in", k) in self.recompute_reads

    def normalize_attrs(self, attrs: Attrs) -> Attrs:
        """Attrs with defaults filled in and kinds checked; OpError names a bad field."""
        unknown = sorted(set(attrs) - set(self.attrs))
        if unknown:
            raise OpError(f"{self.name}: unknown attribute(s) {unknown}; "
                          f"expected some of {sorted(self.attrs)}")
        out: Attrs = {}
        for key, spec in sorted(self.attrs.items()):
            if key in attrs and attrs[key] is not None:
                out[key] = _coerce(self.name, key, spec.kind, attrs[key])
            elif spec.required:
                raise OpError(f"{self.name}: missing required attribute {key!r}")
            elif not spec.optional:
                out[key] = spec.default
        return out

    def check_arity(self, n: int) -> None:
        if self.arity is not None and n != self.arity:
            raise OpError(f"{self.name} takes {self.arity} input(s), got {n}")
        if self.arity is None and n < self.min_inputs:
            raise OpError(f"{self.name} takes at least {self.min_inputs} input(s), got {n}")


def _coerce(op: str, key: str, kind: str, value: Any) -> Any:
    def bad() -> OpError:
        return OpError(f"{op}: attribute {key!r} must be {kind}, got {value!r}")

    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise bad()
        if not -2**63 <= int(value) < 2**63:  # the executor reads attributes as int64
            raise OpError(f"{op}: attribute {key!r} = {value} does not fit in 64 bits")
        return int(value)
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
            raise bad()
        if not math.isfinite(float(value)):
            raise OpError(f"{op}: attribute {key!r} must be a finite number, got {value!r}")
        return float(value)
    if kind == "bool":
        if not isinstance(value, (bool, np.bool_)):
            raise bad()
        return bool(value)
    if kind == "str":
        if not isinstance(value, str):
            raise bad()
        if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 or 0xD800 <= ord(c) < 0xE000
               for c in value):
            raise OpError(f"{op}: attribute {key!r} = {value!r} holds a control character or "
                          f"a lone surrogate")
        return value
    if kind in ("ints", "floats"):
        if not isinstance(value, (list, tuple)):
            raise bad()
        scalar = "int" if kind == "ints" else "float"
        return [_coerce(op, key, scalar, v) for v in value]
    raise AssertionError(f"unknown attr kind {kind}")


REGISTRY: dict[str, OpDef] = {}


def register(op: OpDef, replace: bool = False) -> OpDef:
    if op.name in REGISTRY and not replace:
        raise ValueError(f"op {op.name} registered twice")
    REGISTRY[op.name] = op
    return op


def get_op(name: str) -> OpDef:
    try:
        return REGISTRY[name]
    except KeyError:
        raise OpError(f"unknown op {name!r}") from None


# ---- small helpers shared by op families ----------------------------------------------------

def elementwise_flops(per_element: int) -> Flops:
    """FLOPs = per_element x output elements (summed over outputs)."""
    return lambda ins, outs, a: per_element * sum(o.size for o in outs)


Scratch = Callable[[list[TensorType], list[TensorType], Attrs, int], int]


def widening_scratch(rule: Scratch | None = None) -> Scratch:
    """A `scratch` rule for a float32 loop kernel that also runs on bfloat16 / float16 tensors
    by widening them (the CPU runtime's `widened()`): `rule`'s bytes (none if None) plus a
    float32 copy of every low operand, each rounded up to 64 bytes.

    >>> widening_scratch()([TensorType((3, 5), "bfloat16")], [TensorType((3, 5), "bfloat16")],
    ...                    {}, 2)
    128
    >>> widening_scratch()([TensorType((3, 5))], [TensorType((3, 5))], {}, 2)
    0
    """
    def scratch(ins: list[TensorType], outs: list[TensorType], a: Attrs, threads: int) -> int:
        low = [t for t in (*ins, *outs) if t.dtype in LOW_FLOATS]
        copies = sum(-(-num_bytes(t.shape, "float32") // 64) * 64 for t in low)
        # the float32 kernel is sized on the float32 operands it then sees
        wide = [[TensorType(t.shape, "float32" if t.dtype in LOW_FLOATS else t.dtype)
                 for t in ts] for ts in (ins, outs)]
        return copies + (rule(wide[0], wide[1], a, threads) if rule else 0)

    return scratch


def reorder_scratch(copies: int, per_thread: int = 4096):
    """A `scratch` rule for kernels of oneDNN primitives: `copies` x the operands' bytes
    with channels (axis 1, and a 4-D weight's axis 0) padded to oneDNN's blocks of 16, plus
    `per_thread` bytes per thread for the primitive's own scratchpad.

    Measured on the zoo's small training graphs (2 threads, AVX-512): convolutions and GEMMs
    need 0.43x of reorder_scratch(2) in all, more than it for 12 of 439 ops (which then get
    blocks of their own: 3% of the bytes); pools at most 0.6x of reorder_scratch(2),
    normalisation and concatenation at most 0.2x of reorder_scratch(1). How much a library
    asks for per thread (oneDNN's per-thread weight-gradient partials, say) is not known
    before it runs on the machine: measured values belong in the cost table (CpuSample.
    scratch_bytes). Convolutions have their own bound (planner/ops/conv_scratch.py).

    >>> reorder_scratch(2)([TensorType((2, 3, 8, 8)), TensorType((8, 3, 3, 3))],
    ...                    [TensorType((2, 8, 8, 8))], {}, 2)
    31104
    """
    return ReorderScratch(copies, per_thread)


@dataclass(frozen=True)
class ReorderScratch:
    """reorder_scratch's rule. `by_threads`: one node's rule as a function of its thread
    count, its operands' bytes worked out once (planner.memory.scratch)."""

    copies: int
    per_thread: int

    def __call__(self, ins: list[TensorType], outs: list[TensorType], attrs: Attrs,
                 threads: int) -> int:
        return self.by_threads(ins, outs, attrs)(threads)

    def by_threads(self, ins: list[TensorType], outs: list[TensorType],
                   attrs: Attrs) -> Callable[[int], int]:
        fixed = self.copies * _padded_operands(tuple((tuple(t.shape), t.dtype) for t in ins),
                                               tuple((tuple(t.shape), t.dtype) for t in outs))
        return lambda threads: fixed + self.per_thread * threads


@lru_cache(maxsize=4096)
def _padded_operands(ins: tuple[tuple[tuple[int, ...], str], ...],
                     outs: tuple[tuple[tuple[int, ...], str], ...]) -> int:
    """reorder_scratch's operand bytes (shapes and dtypes), blocked: the part of its rule no
    thread count changes, cached (planning asks for an op's scratch at many thread counts:
    planner.memory.variants)."""
    def padded(shape: tuple[int, ...], dtype: str, weight: bool) -> int:
        # Fewer than 8 channels (a first layer's image) stay in plain layouts.
        s = list(shape)
        if len(s) >= 2 and s[1] >= 8:
            s[1] = -(-s[1] // 16) * 16
        if weight and len(s) == 4 and s[0] >= 8:
            s[0] = -(-s[0] // 16) * 16
        return num_bytes(tuple(s), dtype)

    operands = [padded(shape, dtype, k == 1) for k, (shape, dtype) in enumerate(ins)]
    operands += [padded(shape, dtype, False) for shape, dtype in outs]
    return sum(operands)


def zero_flops(ins: list[TensorType], outs: list[TensorType], attrs: Attrs) -> int:
    return 0


def same_as_input(ins: list[TensorType], attrs: Attrs) -> list[TensorType]:
    return [ins[0]]


def require_float(op: str, t: TensorType, what: str = "input") -> None:
    if not is_float(t.dtype):
        raise OpError(f"{op}: {what} must be a float tensor, got {t.dtype}")


def require_rank(op: str, t: TensorType, rank: int, what: str = "input") -> None:
    if t.rank != rank:
        raise OpError(f"{op}: {what} must have rank {rank}, got shape {list(t.shape)}")


def norm_axis(op: str, axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise OpError(f"{op}: axis {axis} out of range for rank {rank}")
    return axis % max(rank, 1)
