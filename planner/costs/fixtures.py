"""Seed 002's published measurements on KNL (Xeon Phi 7250) as cost tables, for scheduler tests.

    table_ii()   Conv2DBackpropFilter, Conv2DBackpropInput, Conv2D at three input sizes: the best
                 thread count, its time, and the loss at 68 threads (Table II)
    TABLE_III    co-running Conv2DBackpropFilter and Conv2DBackpropInput at (32,8,8,2048):
                 serial on 68 threads each, on SMT siblings, or 34 + 34 cores (Table III)
    table_vi()   the five most expensive op types of ResNet-50, DCGAN, Inception-v3 and LSTM on
                 68 threads and with Strategies 1-2 (Table VI)

The paper publishes points, not curves, so each op's samples are built from what it gives
(all compact: the seed packs threads into tiles; spread was not published):
  - at the best count k*, the published time (tables report 1000 runs; we store one run);
  - at 68 threads, t(k*) / (1 - variance), reading Table II's "performance variance" as the
    loss of 68 threads against the best, relative to the 68-thread time;
  - below k*, Amdahl's law through t(k*) at counts 1, 5, 9, ... (the interval-4 climb), with a
    serial fraction derived from Table III's losses at 34 threads where the paper gives them
    (Conv2DBackpropFilter 25% -> 0.042, Conv2DBackpropInput 17% -> 0.067 at (32,8,8,2048)) and
    their midpoint, 0.05, elsewhere; the 34-thread point itself is a sample for those two ops.
So the cost model's best thread count for each Table II op is the published one, and the
time ratio between 68 threads and the best is the published variance.

The input sizes are TensorFlow's NHWC; the signatures are NCHW. The paper names no filters;
assumed (Inception-v3 layers with these inputs): a 1x3 convolution 384 -> 384 at 8x8, a 3x3
convolution 384 -> 384 (pad 1) at 17x17, a 1x1 convolution 2048 -> 384 at 8x8.

Table VI publishes no shapes and no thread counts: its signatures are the paper's op names with
the model as an attribute, and the Strategies 1-2 time is put at 34 threads (one core per tile).

Example:
    >>> from planner.costs.model import CostModel
    >>> from planner.target import preset
    >>> model = CostModel(preset("knl-7250"), table_ii())
    >>> [model.best(sig).threads for sig in TABLE_II_SIGNATURES["Conv2D"]]
    [45, 63, 66]
"""

from __future__ import annotations

from pydantic import Field

from planner.costs.records import CostEntry, CostTable, CpuSample, Provenance
from planner.costs.signature import OpSignature, signature_of
from planner.ir.graph import Record
from planner.ops import TensorType

TARGET = "knl-7250"
CORES = 68
SOURCE = "seed 002 (Liu et al., Runtime Concurrency Control and Operation Scheduling, IPDPS 2019)"
DEFAULT_SERIAL_FRACTION = 0.05


class PublishedBest(Record):
    """One row of Table II: per-run seconds at the best thread count, and the 68-thread loss."""

    op: str
    input_nhwc: tuple[int, int, int, int]
    seconds: float
    best_threads: int
    variance: float = Field(ge=0, lt=1)


TABLE_II: tuple[PublishedBest, ...] = tuple(
    PublishedBest(op=op, input_nhwc=size, seconds=total / 1000, best_threads=k, variance=v)
    for op, size, total, k, v in (
        ("Conv2DBackpropFilter", (32, 8, 8, 384), 7.2, 26, 0.173),
        ("Conv2DBackpropFilter", (32, 17, 17, 384), 11.1, 42, 0.102),
        ("Conv2DBackpropFilter", (32, 8, 8, 2048), 20.3, 68, 0.0),
        ("Conv2DBackpropInput", (32, 8, 8, 384), 5.8, 36, 0.098),
        ("Conv2DBackpropInput", (32, 17, 17, 384), 8.7, 56, 0.023),
        ("Conv2DBackpropInput", (32, 8, 8, 2048), 19.6, 68, 0.0),
        ("Conv2D", (32, 8, 8, 384), 4.7, 45, 0.111),
        ("Conv2D", (32, 17, 17, 384), 7.4, 63, 0.035),
        ("Conv2D", (32, 8, 8, 2048), 14.8, 66, 0.020),
    ))

# (kernel h, w, pads [top, left, bottom, right], output channels) per input size, assumed.
_FILTERS = {
    (8, 8, 384): ((1, 3), [0, 1, 0, 1], 384),
    (17, 17, 384): ((3, 3), [1, 1, 1, 1], 384),
    (8, 8, 2048): ((1, 1), [0, 0, 0, 0], 384),
}


def conv_signature(op: str, input_nhwc: tuple[int, int, int, int]) -> OpSignature:
    """The NCHW signature of a Table II op: Conv2D [x, w], Conv2DBackpropInput [dy, w],
    Conv2DBackpropFilter [x, dy], with the filter assumed for that input size."""
    n, h, w, c = input_nhwc
    (kh, kw), pads, out = _FILTERS[(h, w, c)]
    attrs = {"strides": [1, 1], "pads": pads, "dilations": [1, 1], "groups": 1}
    x, wt, dy = TensorType((n, c, h, w)), TensorType((out, c, kh, kw)), TensorType((n, out, h, w))
    if op == "Conv2D":
        return signature_of(op, [x, wt], attrs)
    if op == "Conv2DBackpropInput":
        return signature_of(op, [dy, wt], {**attrs, "input_shape": list(x.shape)})
    if op == "Conv2DBackpropFilter":
        return signature_of(op, [x, dy], {**attrs, "filter_shape": list(wt.shape)})
    raise ValueError(f"Table II has no op {op!r}")


def published_curve(best_threads: int, best_seconds: float, seconds_at_68: float,
                    serial_fraction: float = DEFAULT_SERIAL_FRACTION,
                    extra: dict[int, float] | None = None) -> tuple[CpuSample, ...]:
    """Compact samples: Amdahl below the best count at 1, 5, 9, ..., the best, 68, and `extra`
    (threads -> seconds) points the paper gives besides."""
    s = serial_fraction
    scale = best_seconds / (s + (1 - s) / best_threads)
    points = {k: scale * (s + (1 - s) / k) for k in range(1, best_threads, 4)}
    points.update({best_threads: best_seconds, CORES: seconds_at_68, **(extra or {})})
    return tuple(CpuSample(threads=k, affinity="compact", seconds=t)
                 for k, t in sorted(points.items()))


def _serial_fraction_from_loss(loss: float, threads: int = 34) -> float:
    """Serial fraction s with t(threads) / t(68) = 1 + loss under Amdahl's law."""
    r = 1 + loss
    return (CORES / threads - r) / ((CORES / threads - r) + CORES * (r - 1))


# Table III's per-op losses on 34 cores against 68 (Conv2DBackpropFilter, Conv2DBackpropInput).
TABLE_III_LOSS_AT_34 = {"Conv2DBackpropFilter": 0.25, "Conv2DBackpropInput": 0.17}


def table_ii() -> CostTable:
    """Table II's nine signatures on knl-7250 (compact samples only)."""
    entries = []
    for row in TABLE_II:
        t68 = row.seconds / (1 - row.variance)
        s, extra = DEFAULT_SERIAL_FRACTION, {}
        if row.input_nhwc[3] == 2048 and row.op in TABLE_III_LOSS_AT_34:
            loss = TABLE_III_LOSS_AT_34[row.op]
            s, extra = _serial_fraction_from_loss(loss), {34: t68 * (1 + loss)}
        entries.append(CostEntry(signature=conv_signature(row.op, row.input_nhwc),
                                 cpu=published_curve(row.best_threads, row.seconds, t68, s, extra)))
    return CostTable(target=TARGET, entries=tuple(entries), provenance=(
        Provenance(target=TARGET, tool="published", date="2019", source=f"{SOURCE}, Table II"),))


TABLE_II_SIGNATURES: dict[str, list[OpSignature]] = {
    op: [conv_signature(r.op, r.input_nhwc) for r in TABLE_II if r.op == op]
    for op in ("Conv2DBackpropFilter", "Conv2DBackpropInput", "Conv2D")}


class CoRun(Record):
    """Table III: two ops at (32,8,8,2048), seconds for one run of both, three ways."""

    ops: tuple[OpSignature, OpSignature]
    serial_seconds: float  # one after the other, 68 threads each
    hyperthreading_seconds: float  # together, each on 68 cores, one SMT sibling each
    split_seconds: float  # together, 34 cores each

    @property
    def split_speedup(self) -> float:
        return self.serial_seconds / self.split_seconds


TABLE_III = CoRun(
    ops=(conv_signature("Conv2DBackpropFilter", (32, 8, 8, 2048)),
         conv_signature("Conv2DBackpropInput", (32, 8, 8, 2048))),
    serial_seconds=41.1e-3, hyperthreading_seconds=39.9e-3, split_seconds=29.8e-3)


class PublishedOpTime(Record):
    """One row of Table VI: an op type's milliseconds per step, on 68 threads and tuned."""

    model: str
    op: str
    recommendation_ms: float
    strategies_ms: float


TABLE_VI: tuple[PublishedOpTime, ...] = tuple(
    PublishedOpTime(model=m, op=op, recommendation_ms=r, strategies_ms=s)
    for m, rows in (
        ("ResNet-50", (("Conv2DBackpropFilter", 158, 146), ("InputConversion", 131, 122),
                       ("Tile", 107, 105), ("Mul", 103, 100), ("ToTf", 79, 78))),
        ("DCGAN", (("Conv2DBackpropInput", 164, 144), ("Conv2DBackpropFilter", 133, 110),
                   ("ApplyAdam", 84, 72), ("BiasAddGrad", 26, 23), ("FusedBatchNorm", 15, 14))),
        ("Inception-v3", (("AvgPool", 759, 730), ("Tile", 539, 532),
                          ("Conv2DBackpropFilter", 479, 475), ("MaxPooling", 455, 422),
                          ("InputConversion", 416, 413))),
        ("LSTM", (("SparseSoftmaxCross", 11.71, 8.76), ("BiasAddGrad", 2.03, 1.98),
                  ("Mul", 1.36, 1.09), ("AddN", 1.02, 0.87), ("MatMul", 0.95, 0.93))),
    )
    for op, r, s in rows)

TABLE_VI_TUNED_THREADS = 34


def table_vi_signature(row: PublishedOpTime) -> OpSignature:
    """The placeholder signature of a Table VI row: the paper's op name, the model as attr."""
    return OpSignature(op=row.op, attrs={"model": row.model})


def table_vi() -> CostTable:
    """Table VI's twenty op types on knl-7250: 68 threads at the recommendation time, 34 at
    the Strategies 1-2 time, Amdahl (serial fraction 0.05) below."""
    entries = tuple(
        CostEntry(signature=table_vi_signature(row),
                  cpu=published_curve(TABLE_VI_TUNED_THREADS, row.strategies_ms / 1e3,
                                      row.recommendation_ms / 1e3))
        for row in TABLE_VI)
    return CostTable(target=TARGET, entries=entries, provenance=(
        Provenance(target=TARGET, tool="published", date="2019", source=f"{SOURCE}, Table VI"),))
