"""Collectives of data-parallel training: the all-reduce of a bucket of gradients, and ZeRO-1's
reduce-scatter of a bucket and sharded update (planner plan --shard-optimizer).

`AllReduce` reads one rank's gradients g_1..g_k (a bucket, planner.schedule.parallel) and
writes their average over the `ranks` processes of the group, r_j = (1/ranks) * sum over ranks
of g_j: the executor runs a sum all-reduce on the bucket through the process group
(torch.distributed) and scales by 1/ranks while copying out. With `in_place` the gradients
lie side by side in the arena (planner.memory.layout) and are summed there, on a view of the
arena (they are read by nothing else); else they are copied into the op's scratch area
first. The reference interpreter runs one process: it models every rank holding the same
gradients, so its output is its input.

`ReduceScatter` and `ShardedUpdate` split a bucket among the ranks: its members lie side by
side (`bucket_places`: each at the previous one's end rounded up to the `alignment` attr's
bytes: 64, the CPU arena's, or 256 on GPU targets, the device arena's), the bucket is padded
to `ranks` equal shards of `shard_floats` floats (a multiple of the alignment, so every shard
starts aligned), and rank r owns floats [r * shard, (r + 1) * shard) of it:

    bucket   [ g_1 ....|pad| g_2 ........ | pad to ranks x shard ]
    shards   [ rank 0's        | rank 1's        | ...           ]

`ReduceScatter [g_1..g_k] -> [s]` writes rank r's shard of the bucket averaged over the ranks
(a sum reduce-scatter in place on the gradients, or with `in_place` 0 on a copy of them laid out
alike in the op's scratch area, then 1/ranks): s = (1/ranks) sum over ranks
of bucket[r * shard : (r + 1) * shard]. `ShardedUpdate [p_1..p_k, s, state shards.., (step),
lr, wd] -> [p_1'..p_k', state shards']` runs the optimizer `update` (SGD, ApplyMomentum, ApplyAdam:
planner.ops.optim's formulas) on the floats of rank r's shard of the parameters, laid out
alike (a bucket of their own), with its shard of the optimizer state (each rank holds 1/ranks
of it), then all-gathers the parameters in place, so every rank holds them all. The update and
its all-gather are one op because the graph lets one op write a parameter's next value. The
reference interpreter runs one process as rank 0 (it holds rank 0's state only): its
ShardedUpdate updates the floats of shard 0 and leaves the rest, which other ranks update.

`AllGather [s] -> [p_1..p_k]` (ZeRO-3, planner plan --shard-parameters) is the inverse of the
sharding: every rank holds its shard s of a bucket of parameters and the op writes the whole
bucket, laid out as above, every rank's shard at its place (an all-gather in place on the
bucket, after copying s to this rank's place); the members' shapes are its attrs (`ndims`,
each member's rank, and `dims`, their shapes one after the other). The reference interpreter
runs one process: with one rank the shard is the bucket; with more it holds one shard of
several and refuses.

`ShardedClipGradNorm [s_1..s_k] -> [s_1 c..s_k c, total_norm]` is clip_grad_norm_ after a
reduce-scatter (--shard-optimizer or --shard-parameters with clip_grad_norm): every rank holds
its shards of the averaged gradients (their padding zeros), so the global norm is the square
root of the sum over the ranks of each rank's sum of squares, one float all-reduced; every rank
then scales its shards by c = min(max_norm / (total_norm + 1e-6), 1), as ClipGradNorm. A
collective (the comm lane runs it in the one order of every rank's collectives); the reference
interpreter, one process, runs it for one rank only.

`ShardedUnscaleGrads [s_1..s_k, scale] -> [s_1 / scale..s_k / scale, found_inf]` is
GradScaler.unscale_ after the reduce-scatters (fp16-mixed with --shard-optimizer or
--shard-parameters): every rank unscales its shards and finds whether they hold an inf or
NaN, and the ranks sum that flag (one float all-reduced), so found_inf is 1 on every rank where
any rank's shards overflowed: every rank skips the same steps (a ShardedUpdate's
`skip_on_overflow`, SkipOnOverflow) and updates its scale alike, as FSDP's ShardedGradScaler.
The reference interpreter, one process, runs it for one rank only.

Example:
    >>> import numpy as np
    >>> from planner.ops import get_op
    >>> get_op("AllReduce").reference([np.ones(2, np.float32)], {"ranks": 2})[0].tolist()
    [1.0, 1.0]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from planner.ops.base import (
    Attr,
    Attrs,
    Infer,
    OpDef,
    OpError,
    Reference,
    TensorType,
    get_op,
    register,
)
from planner.ops.optim import HYPER_INPUTS

# The bytes between a sharded bucket's members and shards where the `alignment` attr is absent
# (a CPU arena's). A backend's is its trait (planner.target.backends: bucket_alignment); plans
# name it in the collectives' `alignment` attr where it is not this one (their shapes follow).
DEFAULT_ALIGNMENT = 64
# The optimizer updates a ShardedUpdate runs and their state slots, in input order.
SHARDED_UPDATES: dict[str, tuple[str, ...]] = {
    "SGD": (), "ApplyMomentum": ("velocity",), "ApplyAdam": ("m", "v")}
COLLECTIVE_OPS = frozenset({"AllReduce", "ReduceScatter", "ShardedUpdate", "AllGather",
                            "ShardedClipGradNorm", "ShardedUnscaleGrads"})


def _up(n: int, alignment: int = 64) -> int:
    step = alignment // 4
    return -(-n // step) * step


def bucket_places(sizes: Sequence[int], alignment: int = 64) -> tuple[list[int], int]:
    """Each member's first float in a bucket of members of `sizes` floats laid out side by
    side, each at the previous one's end rounded up to `alignment` bytes; and the bucket's end.

    >>> bucket_places([3, 20]), bucket_places([3, 20], alignment=256)
    (([0, 16], 36), ([0, 64], 84))
    """
    places, end = [], 0
    for n in sizes:
        places.append(_up(end, alignment) if places else 0)
        end = places[-1] + n
    return places, end


def shard_floats(sizes: Sequence[int], ranks: int, alignment: int = 64) -> int:
    """Floats in each rank's shard of a bucket of members of `sizes` floats: its span over
    `ranks`, rounded up to `alignment` bytes; the bucket takes ranks x that, padding included.

    >>> shard_floats([3, 20], 2), shard_floats([3, 20], 4), shard_floats([3, 20], 2, 256)
    (32, 16, 64)
    """
    return _up(-(-bucket_places(sizes, alignment)[1] // ranks), alignment)


def collective_buckets(nodes: Sequence[Any], floats: Callable[[str], int]
                       ) -> dict[str, tuple[str, int, int]]:
    """Tensor -> (the collective whose bucket holds it, its place there, the bucket's bytes
    when padded to shards, else 0), over graph `nodes` (`floats`: a tensor's size): an
    in-place AllReduce's gradients, a ReduceScatter's, a ShardedUpdate's parameters and an
    AllGather's gathered copies (not a ReduceScatter's that copies them into scratch).
    Memory planning lays them out side by side and codegen's arena holds the padding.

    >>> from types import SimpleNamespace as N
    >>> nodes = [N(name="g", op="AllGather", inputs=("s",), outputs=("a", "b"),
    ...            attrs={"ranks": 2})]
    >>> collective_buckets(nodes, {"a": 3, "b": 20}.get)
    {'a': ('g', 0, 256), 'b': ('g', 1, 256)}
    """
    out: dict[str, tuple[str, int, int]] = {}
    for n in nodes:
        if n.op == "AllReduce" and n.attrs.get("in_place"):
            members, padded = tuple(n.inputs), 0
        elif n.op in ("ReduceScatter", "ShardedUpdate", "AllGather") and (
                n.op != "ReduceScatter" or n.attrs.get("in_place", 1)):
            members = (tuple(n.inputs) if n.op == "ReduceScatter" else tuple(n.outputs)
                       if n.op == "AllGather"
                       else tuple(n.inputs[:sharded_parts(len(n.inputs), n.attrs)[0]]))
            shard = shard_floats([floats(t) for t in members], n.attrs["ranks"],
                                 n.attrs.get("alignment", 64))
            padded = n.attrs["ranks"] * shard * 4
        else:
            continue
        out.update({t: (n.name, k, padded) for k, t in enumerate(members)})
    return out


def gathered_again(nodes: Sequence[tuple[str, Sequence[str], Sequence[str]]]
                   ) -> dict[str, str]:
    """A gathered copy -> the copy a later all-gather of the same shard writes at the same
    place, over (op, inputs, outputs) of graph nodes in their order: ZeRO-3's forward copy
    and the one gathered again for backward hold the same floats (the shard is updated only
    after both read it), so a forward op run again in backward (a recompute) may read the
    second in place of the first, freed since.

    >>> gathered_again([("AllGather", ["s"], ["a", "b"]), ("Relu", ["a"], ["y"]),
    ...                 ("AllGather", ["s"], ["a2", "b2"])])
    {'a': 'a2', 'b': 'b2'}
    """
    first: dict[str, Sequence[str]] = {}
    out: dict[str, str] = {}
    for op, inputs, outputs in nodes:
        if op != "AllGather" or len(inputs) != 1:
            continue
        if inputs[0] in first and len(first[inputs[0]]) == len(outputs):
            out.update(zip(first[inputs[0]], outputs, strict=True))
        else:
            first.setdefault(inputs[0], outputs)
    return out


def _alignment(a: Attrs) -> int:
    return a.get("alignment", DEFAULT_ALIGNMENT)


def _check_ranks(op: str, a: Attrs) -> None:
    alignment = _alignment(a)
    if not isinstance(alignment, int) or alignment < 4 or alignment & (alignment - 1):
        raise OpError(f"{op}: alignment is an arena's, a power of two of at least 4 bytes, "
                      f"got {alignment}")
    if a["ranks"] < 1:
        raise OpError(f"{op}: ranks must be >= 1, got {a['ranks']}")
    if not 1 <= a["ranks_per_host"] <= a["ranks"] or a["ranks"] % a["ranks_per_host"]:
        raise OpError(f"{op}: ranks_per_host must divide ranks ({a['ranks']}), got "
                      f"{a['ranks_per_host']}")


def _infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    _check_ranks("AllReduce", a)
    if a["in_place"] not in (0, 1):
        raise OpError(f"AllReduce: in_place is 0 or 1, got {a['in_place']}")
    for t in ins:
        if t.dtype != "float32":
            raise OpError(f"AllReduce: gradients must be float32, got {t.dtype}")
    return list(ins)


def _reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    return [x.copy() for x in xs]


def _bytes(ins: list[TensorType], outs: list[TensorType], a: Attrs) -> int:
    # Copy in (not in place), the reduction's reads and writes, copy out: passes over it.
    return (3 if a["in_place"] else 4) * sum(t.nbytes for t in ins)


def _scratch(ins: list[TensorType], outs: list[TensorType], a: Attrs, threads: int) -> int:
    # The bucket: the gradients side by side, the buffer the process group reduces in place
    # (none when they lie side by side in the arena already).
    return 0 if a["in_place"] else sum(t.nbytes for t in ins)


register(OpDef(
    name="AllReduce",
    ring_traffic=("inputs", 2),
    cost_class="data-movement",
    arity=None,
    # ranks_per_host: of the ranks, how many share one host, each on its own cores
    # (planner.target.shares); the executor's placement at load, not the arithmetic.
    # in_place: the gradients lie side by side in the arena (planner.memory.layout) and
    # nothing else reads them: the all-reduce sums them where they are, no copy in.
    attrs={"ranks": Attr("int", required=True), "ranks_per_host": Attr("int", default=1),
           "in_place": Attr("int", default=0)},
    infer=_infer,
    flops=lambda ins, outs, a: sum(t.size for t in ins),
    bytes_moved=_bytes,
    reference=_reference,
    recompute="never",
    scratch=_scratch,
    # The CUDA kernel's bucket packs the gradients without padding: the same bytes.
    gpu_scratch=lambda ins, outs, a: _scratch(ins, outs, a, 1),
    doc="r_j = mean over the process group's ranks of g_j (a sum all-reduce, then 1/ranks).",
))


# ---- ReduceScatter ----------------------------------------------------------------------------

def _infer_scatter(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    _check_ranks("ReduceScatter", a)
    if a.get("in_place", 1) not in (0, 1):
        raise OpError(f"ReduceScatter: in_place is 0 or 1, got {a['in_place']}")
    for t in ins:
        if t.dtype != "float32":
            raise OpError(f"ReduceScatter: gradients must be float32, got {t.dtype}")
    shard = shard_floats([t.size for t in ins], a["ranks"], _alignment(a))
    return [TensorType((shard,), "float32")]


def flat_bucket(xs: Sequence[np.ndarray], ranks: int, alignment: int = 64) -> np.ndarray:
    """The bucket of `xs` as laid out in the arena, padded to `ranks` shards (zeros)."""
    places, _ = bucket_places([x.size for x in xs], alignment)
    out = np.zeros(ranks * shard_floats([x.size for x in xs], ranks, alignment), np.float32)
    for x, at in zip(xs, places, strict=True):
        out[at:at + x.size] = x.reshape(-1)
    return out


def _reference_scatter(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    # Rank 0 of ranks that hold the same gradients: their average is rank 0's shard itself.
    shard = shard_floats([x.size for x in xs], a["ranks"], _alignment(a))
    return [flat_bucket(xs, a["ranks"], _alignment(a))[:shard]]


def _scatter_scratch(outs: list[TensorType], a: Attrs) -> int:
    # in_place 0: the bucket, every rank's shard, copied into scratch
    return 0 if a.get("in_place", 1) else a["ranks"] * outs[0].nbytes


register(OpDef(
    name="ReduceScatter",
    ring_traffic=("inputs", 1),
    cost_class="data-movement",
    arity=None,
    # alignment: bytes between the bucket's members and shards (DEFAULT_ALIGNMENT)
    # in_place 0: the gradients are copied into the op's scratch area, laid out as the
    # bucket (with accumulation the sums' new values, state the layout does not move)
    attrs={"ranks": Attr("int", required=True), "ranks_per_host": Attr("int", default=1),
           "alignment": Attr("int", default=64), "in_place": Attr("int", default=1)},
    infer=_infer_scatter,
    flops=lambda ins, outs, a: sum(t.size for t in ins),
    # the reduction's reads and writes of the bucket, the shard's copy out
    bytes_moved=lambda ins, outs, a: 2 * sum(t.nbytes for t in ins) + 2 * outs[0].nbytes,
    reference=_reference_scatter,
    recompute="never",
    scratch=lambda ins, outs, a, threads: _scatter_scratch(outs, a),
    # (the CUDA kernel's copy too: compiled, not yet run; accumulation is refused on GPUs)
    gpu_scratch=lambda ins, outs, a: _scatter_scratch(outs, a),
    doc="s = this rank's shard of the gradient bucket [g_1..g_k], averaged over the ranks "
        "(a sum reduce-scatter in place, or on a copy in scratch, then 1/ranks).",
))


# ---- ShardedUpdate ----------------------------------------------------------------------------

def sharded_parts(n_inputs: int, a: Attrs) -> tuple[int, int, bool]:
    """(parameters, state slots, takes a step count) of a ShardedUpdate with `n_inputs`
    inputs and attrs `a` (its `update`; `skip_on_overflow`: the last input is the overflow
    flag); OpError for an update it does not run."""
    update = a["update"]
    if update not in SHARDED_UPDATES:
        raise OpError(f"ShardedUpdate: update must be one of {sorted(SHARDED_UPDATES)}, got "
                      f"{update!r}")
    slots, step = len(SHARDED_UPDATES[update]), update == "ApplyAdam"
    k = (n_inputs - 1 - slots - int(step) - len(HYPER_INPUTS)
         - int(bool(a.get("skip_on_overflow"))))
    if k < 1:
        raise OpError(f"ShardedUpdate: {update} over a shard needs parameters, the gradient "
                      f"shard and {slots} state shard(s); got {n_inputs} inputs")
    return k, slots, step


def _infer_sharded(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    _check_ranks("ShardedUpdate", a)
    k, slots, step = sharded_parts(len(ins), a)
    params = ins[:k]
    for t in params:
        if t.dtype != "float32":
            raise OpError(f"ShardedUpdate: parameters must be float32, got {t.dtype}")
    shard = TensorType((shard_floats([t.size for t in params], a["ranks"], _alignment(a)),),
                       "float32")
    for what, t in zip(("the gradient shard", *SHARDED_UPDATES[a["update"]]),
                       ins[k:k + 1 + slots], strict=True):
        if t != shard:
            raise OpError(f"ShardedUpdate: {what} must be float32 of shape {list(shard.shape)} "
                          f"(a shard of the bucket), got {list(t.shape)} ({t.dtype})")
    scalars = ins[k + 1 + slots:]
    flag = ("the overflow flag",) * bool(a.get("skip_on_overflow"))
    for what, t in zip(("the step count",) * step + HYPER_INPUTS + flag, scalars,
                       strict=True):
        if t != TensorType((), "float32"):
            raise OpError(f"ShardedUpdate: {what} must be a float32 scalar")
    return [*params, *[shard] * slots]


def _update_attrs(a: Attrs) -> Attrs:
    # the update's optional attrs (dampening, amsgrad) are absent: a sharded update refuses
    # them (planner/step/collectives/data_parallel.py)
    return {name: a[name] for name in get_op(a["update"]).attrs if name in a}


def _reference_sharded(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    k, slots, step = sharded_parts(len(xs), a)
    if a.get("skip_on_overflow"):
        *xs, found = xs
        if found:  # GradScaler.step skips optimizer.step(): parameters and state as they are
            return [x.copy() for x in (*xs[:k], *xs[k + 1:k + 1 + slots])]
    params, (g, *rest) = xs[:k], xs[k:]
    shard = g.size
    flat = flat_bucket(params, a["ranks"], _alignment(a))
    new = get_op(a["update"]).reference([flat[:shard], g, *rest], _update_attrs(a))
    flat[:shard] = new[0]
    places, _ = bucket_places([p.size for p in params], _alignment(a))
    outs = [flat[at:at + p.size].reshape(p.shape) for p, at in zip(params, places, strict=True)]
    return [*outs, *new[1:1 + slots]]


def _flops_sharded(ins: list[TensorType], outs: list[TensorType], a: Attrs) -> int:
    k, slots, _ = sharded_parts(len(ins), a)
    base = get_op(a["update"])
    one = [TensorType((1,), "float32")] * (len(ins) - k - int(bool(a.get("skip_on_overflow"))))
    return ins[k].size * base.flops(one, one[:1 + slots], _update_attrs(a))


def _bytes_sharded(ins: list[TensorType], outs: list[TensorType], a: Attrs) -> int:
    # The shard's update (parameters and state read and written, the gradient read), then
    # the all-gather's writes of the whole bucket of parameters.
    k, slots, _ = sharded_parts(len(ins), a)
    return (3 + 2 * slots) * ins[k].nbytes + sum(t.nbytes for t in ins[:k])


register(OpDef(
    name="ShardedUpdate",
    ring_traffic=("param outputs", 1),
    cost_class="data-movement",
    arity=None,
    min_inputs=2,
    attrs={"update": Attr("str", required=True), "ranks": Attr("int", required=True),
           "ranks_per_host": Attr("int", default=1), "alignment": Attr("int", default=64),
           # the update's own (planner.ops.optim), those it does not take left at defaults
           "momentum": Attr("float", 0.9), "nesterov": Attr("bool", False),
           "beta1": Attr("float", 0.9), "beta2": Attr("float", 0.999),
           "epsilon": Attr("float", 1e-8), "decoupled": Attr("bool", False),
           # fp16-mixed (planner.step.collectives.sharded_scaling): the last input is the
           # overflow flag reduced over the ranks; a step it marks leaves parameters and state
           # as they are
           "skip_on_overflow": Attr("bool", optional=True)},
    infer=_infer_sharded,
    flops=_flops_sharded,
    bytes_moved=_bytes_sharded,
    reference=_reference_sharded,
    recompute="never",
    doc="ShardedUpdate [p_1..p_k, s, state shards, (step), lr, weight_decay, (found_inf)] -> "
        "[p_1'..p_k', state shards']: "
        "`update` on this rank's shard of the parameters' bucket, then an all-gather of it "
        "(neither where skip_on_overflow and found_inf is nonzero).",
))


# ---- AllGather ------------------------------------------------------------------------------

def gathered_shapes(a: Attrs) -> list[tuple[int, ...]]:
    """The members' shapes of an AllGather (its `ndims` and `dims` attrs).

    >>> gathered_shapes({"ndims": [2, 1], "dims": [3, 8, 8]})
    [(3, 8), (8,)]
    """
    ndims, dims = list(a["ndims"]), list(a["dims"])
    if not ndims or any(d < 0 for d in ndims) or sum(ndims) != len(dims) or \
            any(d < 1 for d in dims):
        raise OpError(f"AllGather: ndims {ndims} and dims {dims} do not describe the shapes of "
                      f"one or more members (sum(ndims) dims, each >= 1)")
    out, at = [], 0
    for d in ndims:
        out.append(tuple(dims[at:at + d]))
        at += d
    return out


def _size(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _infer_gather(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    _check_ranks("AllGather", a)
    shapes = gathered_shapes(a)
    shard = shard_floats([_size(s) for s in shapes], a["ranks"], _alignment(a))
    if len(ins) != 1 or ins[0] != TensorType((shard,), "float32"):
        raise OpError(f"AllGather: reads one float32 shard of shape [{shard}] (the bucket of "
                      f"{len(shapes)} member(s) over {a['ranks']} ranks)")
    return [TensorType(s, "float32") for s in shapes]


def _reference_gather(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    if a["ranks"] != 1:
        raise OpError(f"AllGather: one process holds one shard of {a['ranks']}; the reference "
                      f"interpreter cannot gather the others")
    shapes = gathered_shapes(a)
    places, _ = bucket_places([_size(s) for s in shapes], _alignment(a))
    return [xs[0][at:at + _size(s)].reshape(s).copy()
            for s, at in zip(shapes, places, strict=True)]


register(OpDef(
    name="AllGather",
    ring_traffic=("outputs", 1),
    cost_class="data-movement",
    arity=1,
    attrs={"ranks": Attr("int", required=True), "ranks_per_host": Attr("int", default=1),
           "alignment": Attr("int", default=64),
           # the members' shapes: each one's number of dims, then all their dims in order
           "ndims": Attr("ints", required=True), "dims": Attr("ints", required=True),
           # a forward gather's copy kept for backward's readers too (1), or freed after the
           # last forward reader and gathered again (0); absent on a backward gather
           "keep": Attr("int", optional=True)},
    infer=_infer_gather,
    flops=lambda ins, outs, a: 0,
    # the shard copied to its place, the whole bucket written by the ranks' shards
    bytes_moved=lambda ins, outs, a: 2 * ins[0].nbytes + a["ranks"] * ins[0].nbytes,
    reference=_reference_gather,
    recompute="never",
    doc="[p_1..p_k] = the bucket of parameters whose shards the ranks hold, this rank's s "
        "among them (an all-gather in place on the bucket).",
))


# ---- ShardedClipGradNorm, ShardedUnscaleGrads -------------------------------------------------

def _over_shards(name: str, base: str, others: str) -> tuple[Infer, Reference]:
    """The shape rule and reference of collective `name`: op `base`'s over one rank's gradient
    shards (with the ranks' attrs), the reference for one rank only (a process holds one
    shard: it cannot `others`)."""
    def infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
        _check_ranks(name, a)
        return get_op(base).infer(ins, a)

    def reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
        if a["ranks"] != 1:
            raise OpError(f"{name}: one process holds one shard of {a['ranks']}; the "
                          f"reference interpreter cannot {others}")
        return get_op(base).reference(xs, a)

    return infer, reference


_infer_clip, _reference_clip = _over_shards("ShardedClipGradNorm", "ClipGradNorm",
                                            "add the others' squares")

register(OpDef(
    name="ShardedClipGradNorm",
    ring_traffic=("one float", 2),
    cost_class="reduction",
    arity=None,
    attrs={"ranks": Attr("int", required=True), "ranks_per_host": Attr("int", default=1),
           "max_norm": Attr("float", required=True)},
    in_place=lambda n: range(n),
    infer=_infer_clip,
    flops=lambda ins, outs, a: 3 * sum(t.size for t in ins),
    bytes_moved=lambda ins, outs, a: 3 * sum(t.nbytes for t in ins) + 4,
    reference=_reference_clip,
    recompute="never",
    # the float the ranks sum (its own 64 bytes of the arena, a view the process group reads;
    # 256 of the device arena: compiled, not yet run on a GPU, where it is refused)
    scratch=lambda ins, outs, a, threads: 64,
    gpu_scratch=lambda ins, outs, a: 256,
    doc="clip_grad_norm_ over gradient shards [s_1..s_k] -> [s_1 c..s_k c, total_norm]: the "
        "shards' squares summed, then summed over the ranks (an all-reduce of one float), "
        "c = min(max_norm / (total_norm + 1e-6), 1).",
))


_infer_unscale, _reference_unscale = _over_shards("ShardedUnscaleGrads", "UnscaleGrads",
                                                  "see the others' overflows")

register(OpDef(
    name="ShardedUnscaleGrads",
    ring_traffic=("one float", 2),
    cost_class="reduction",
    arity=None,
    min_inputs=2,
    attrs={"ranks": Attr("int", required=True), "ranks_per_host": Attr("int", default=1)},
    in_place=lambda n: range(n - 1),
    infer=_infer_unscale,
    flops=lambda ins, outs, a: 2 * sum(t.size for t in ins[:-1]),
    bytes_moved=lambda ins, outs, a: 2 * sum(t.nbytes for t in ins[:-1]) + 8,
    reference=_reference_unscale,
    recompute="never",
    # the flag the ranks sum (as ShardedClipGradNorm's)
    scratch=lambda ins, outs, a, threads: 64,
    gpu_scratch=lambda ins, outs, a: 256,
    doc="GradScaler.unscale_ over gradient shards [s_1..s_k, scale] -> [s_1 / scale.. s_k / "
        "scale, found_inf]: found_inf 1 where any rank's shards hold an inf or NaN (each "
        "rank's flag summed over the ranks, an all-reduce of one float), else 0.",
))
