"""Pictures of a plan a user would rather look at than read: the step-time / memory-budget
curve (`planner fit --pareto --plot`) and the timeline of a plan's step (`planner show
--timeline`), drawn with matplotlib (the optional `plot` extra: pip install 'planner[plot]').

The format follows the file's suffix: .svg or .png (matplotlib's PDFs carry an id that differs
from run to run). The bytes are a function of the plan alone: no creation date, and SVG element
ids from a fixed salt, so a plot committed beside its plan diffs only when the plan does.

Example:
    >>> from planner.report.plots import plot_format
    >>> plot_format("curve.svg"), plot_format("t.PNG")
    ('svg', 'png')
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import Any

from planner.errors import UserError

FORMATS = ("svg", "png")
# Op types named in a timeline's legend, busiest first (every type keeps its own colour).
TIMELINE_TYPES = 12
# Ops labelled with their names in a timeline, longest first.
LABELLED = 8
# A label's character as a share of the time axis (xx-small type on a 10-inch figure).
LABEL_WIDTH = 0.0062
# The heaviest op types of the zoo's steps, each its own colour (a family in one hue: a
# convolution's three kernels in blues, norms in purples, an op light beside its gradient),
# so the pictures most read tell the big ops apart at a glance. Presentation, not an op fact.
TYPE_COLOURS = {
    "Conv2D": "#1f77b4", "Conv2DBackpropInput": "#6baed6", "Conv2DBackpropFilter": "#08306b",
    "ConvTranspose2D": "#17becf", "MatMul": "#2ca02c", "BiasAddGrad": "#98df8a",
    "BatchNorm": "#9467bd", "BatchNormGrad": "#c5b0d5", "LayerNorm": "#7b4173",
    "LayerNormGrad": "#ce6dbd", "Relu": "#ff7f0e", "ReluGrad": "#ffbb78", "Add": "#d62728",
    "AddN": "#ff9896", "MaxPool": "#8c564b", "MaxPoolGrad": "#c49c94",
    "GlobalAvgPool": "#bcbd22", "AvgPoolGrad": "#dbdb8d", "ApplyAdam": "#e377c2",
    "LSTMCell": "#393b79", "LSTMCellGrad": "#9c9ede", "Gelu": "#e6550d", "GeluGrad": "#fdae6b",
    "ScaledSoftmax": "#31a354", "ScaledSoftmaxGrad": "#a1d99b", "Embedding": "#843c39",
    "EmbeddingGrad": "#d6616b"}
# Every other op type: a stable hash of its name into these (matplotlib's tab20b, darker and
# muted beside the table's, no greys: grey would read as idle).
PALETTE = ("#5254a3", "#6b6ecf", "#637939", "#8ca252", "#b5cf6b", "#8c6d31", "#bd9e39",
           "#e7ba52", "#e7cb94", "#ad494a", "#e7969c", "#a55194", "#de9ed6", "#cedb9c")


def op_colour(op_type: str) -> str:
    """The colour of an op type in every timeline, whatever else the picture holds: its own
    (TYPE_COLOURS) or a stable hash of its name into PALETTE. Two pictures (two targets, two
    plans) show one op type alike.

    >>> op_colour("Conv2D"), op_colour("Softmax") == op_colour("Softmax")
    ('#1f77b4', True)
    """
    if op_type in TYPE_COLOURS:
        return TYPE_COLOURS[op_type]
    digest = hashlib.sha256(op_type.encode()).digest()
    return PALETTE[int.from_bytes(digest[:4], "big") % len(PALETTE)]


def plot_format(path: str | Path) -> str:
    """The matplotlib format of an output path, from its suffix; UserError for another."""
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in FORMATS:
        raise UserError(f"{path}: a plot is written as {', '.join(FORMATS)} "
                        f"(by the file's suffix), not {suffix or 'a file without a suffix'!r}")
    return suffix


def _figure(width: float, height: float) -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise UserError("plots are drawn with matplotlib, which is not installed: "
                        "pip install 'planner[plot]' (or pip install matplotlib)") from None
    return Figure(figsize=(width, height), dpi=120, layout="constrained")


def _bytes(fig: Any, fmt: str) -> bytes:
    import matplotlib

    out = io.BytesIO()
    metadata = {"Date": None} if fmt == "svg" else {}
    with matplotlib.rc_context({"svg.hashsalt": "planner", "svg.fonttype": "none"}):
        fig.savefig(out, format=fmt, metadata=metadata)
    return out.getvalue()


def _mib(n: float) -> float:
    return n / 2**20


def curve_plot(curve: Any, fmt: str, measured: dict[str, dict[str, float]] | None = None,
               chosen: str = "") -> bytes:
    """Predicted step (ms) against planned peak (MiB) of a `planner.curve.Curve`: a step line
    with a dot per point, the per-op bound as a dashed line, measured steps (from `--measure`:
    plan sha256 -> {"step_seconds", "peak_bytes", ...}) as crosses at the measured peak, and
    the plan `chosen` (a plan sha256: planner.curve.enough_memory's) ringed."""
    fig = _figure(7.0, 4.2)
    ax = fig.add_subplot()
    pts = sorted((_mib(p.peak_bytes + p.host_bytes), p.step_seconds * 1e3, p.plan_sha256)
                 for p in curve.points)
    ax.step([x for x, _, _ in pts], [y for _, y, _ in pts], where="post", color="#1f77b4",
            linewidth=1.5)
    ax.plot([x for x, _, _ in pts], [y for _, y, _ in pts], "o", color="#1f77b4",
            label="predicted (one plan per budget)")
    ax.axvline(_mib(curve.per_op_bound_bytes), color="grey", linestyle="--", linewidth=1,
               label="per-op bound")
    if measured:
        got = [(_mib(m["peak_bytes"]), m["step_seconds"] * 1e3) for _, _, sha in pts
               if (m := measured.get(sha)) is not None]
        ax.plot([x for x, _ in got], [y for _, y in got], "x", color="#d62728", markersize=8,
                label="measured on this machine (held bytes)")
    for x, y, sha in pts:
        if sha == chosen:
            ax.plot([x], [y], "o", markersize=14, markerfacecolor="none", color="#2ca02c",
                    label="enough memory: within 1% of the fastest")
            break
    ax.set_xlabel("planned peak memory (MiB): arena + host store")
    ax.set_ylabel("step (ms)")
    ax.set_title(f"{curve.graph} on {curve.target}: step time against memory budget")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return _bytes(fig, fmt)


def timeline_plot(plan: dict[str, Any], fmt: str) -> bytes:
    """A plan's step as a Gantt chart: a row per logical CPU or stream (each labelled, the
    comm lane last), time in ms, each op type in its own colour in every picture (op_colour),
    the busiest TIMELINE_TYPES types in the legend and the LABELLED longest ops named on
    their bars."""
    from planner.report.trace import track_of

    ops = plan["ops"]
    streams = list(plan.get("target", {}).get("streams", []))
    tracks = sorted({t for op in ops for t in track_of(op)},
                    key=lambda t: (0, t, "") if isinstance(t, int) else
                    (1, streams.index(t) if t in streams else len(streams), t))
    busy: dict[str, float] = {}
    for op in ops:
        busy[op["op"]] = busy.get(op["op"], 0.0) + op["end"] - op["start"]
    named = sorted(busy, key=lambda t: (-busy[t], t))[:TIMELINE_TYPES]
    fig = _figure(10.0, 1.6 + 0.32 * len(tracks))
    ax = fig.add_subplot()
    row = {t: i for i, t in enumerate(tracks)}
    for t in tracks:
        spans = [(op["start"] * 1e3, (op["end"] - op["start"]) * 1e3, op["op"]) for op in ops
                 if t in track_of(op)]
        ax.broken_barh([(s, d) for s, d, _ in spans], (row[t] - 0.4, 0.8),
                       facecolors=[op_colour(k) for _, _, k in spans],
                       edgecolor="white", linewidth=0.3)
    span = max((op["end"] for op in ops), default=0.0) * 1e3
    longest = _labelled(ops, row, span)
    for op in longest:
        first = min(row[t] for t in track_of(op))
        ax.annotate(op["name"], ((op["start"] + op["end"]) * 0.5e3, first),
                    ha="center", va="center", fontsize="xx-small", clip_on=True,
                    bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "alpha": 0.8,
                          "linewidth": 0})
    ax.set_yticks(range(len(tracks)),
                  [f"cpu {t}" if isinstance(t, int) else f"stream {t}" for t in tracks])
    ax.invert_yaxis()
    ax.set_xlabel("time from the step's start (ms, predicted)")
    ax.set_xlim(0, span or 1.0)
    ax.set_title(f"{plan.get('graph', {}).get('name', '')} on "
                 f"{plan.get('target', {}).get('name', '')}: {span:.3f} ms, {len(ops)} ops "
                 f"(the {len(longest)} longest named)")
    from matplotlib.patches import Patch

    handles = [Patch(color=op_colour(t), label=f"{t} ({busy[t] * 1e3:.2f} ms)") for t in named]
    if len(busy) > len(named):
        handles.append(Patch(color="none", label=f"+ {len(busy) - len(named)} other types"))
    ax.legend(handles=handles, fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1),
              frameon=False, title="op type (busy time)", title_fontsize="x-small")
    ax.grid(True, axis="x", alpha=0.3)
    return _bytes(fig, fmt)


def _labelled(ops: list[dict[str, Any]], row: dict[Any, int], span_ms: float
              ) -> list[dict[str, Any]]:
    """The LABELLED longest ops whose names fit beside the labels of longer ones on their row
    (a name's width guessed at LABEL_WIDTH of the time axis per character)."""
    from planner.report.trace import track_of

    placed: dict[int, list[tuple[float, float]]] = {}
    chosen = []
    for op in sorted(ops, key=lambda op: (op["start"] - op["end"], op["name"])):
        if len(chosen) == LABELLED:
            break
        if not track_of(op):
            continue
        r = min(row[t] for t in track_of(op))
        half = len(op["name"]) * LABEL_WIDTH * span_ms / 2
        mid = (op["start"] + op["end"]) * 0.5e3
        if all(mid + half < lo or mid - half > hi for lo, hi in placed.get(r, ())):
            placed.setdefault(r, []).append((mid - half, mid + half))
            chosen.append(op)
    return chosen


def memory_plot(plan: Any, curves: dict[str, Any], fmt: str) -> bytes:
    """Seed 001's Fig. 10 of a plan (planner.report.memory.memory_curves' `curves`): bytes
    live per op in execution order, a line per curve with its peak in the legend, the ops on
    the axis (a sample of their names), forward apart from backward, the plan's peak named at
    its op, titled for the memory it is: a GPU's device memory or a CPU plan's host arena."""
    from planner.ir.phases import node_phase
    from planner.report.memory import COLORS, device_memory, graph_order

    names = graph_order(plan)
    graph = plan.graph
    forward = sum(1 for n in names if node_phase(graph, graph.node_map[n]) == "forward")
    fig = _figure(10.0, 4.8)
    ax = fig.add_subplot()
    order = ["naive", "liveness", "+ offload", "+ recompute", "plan"]
    for name in sorted(curves, key=lambda c: (order.index(c) if c in order else len(order), c)):
        curve = curves[name]
        peak = _mib(float(curve.max())) if len(curve) else 0.0
        ax.plot(range(len(curve)), [_mib(float(v)) for v in curve],
                color=COLORS.get(name, "black"), linewidth=1.6 if name == "plan" else 1.2,
                label=f"{name} (peak {peak:,.1f} MiB)")
    own = curves.get("plan")
    if own is not None and len(own):
        at = int(own.argmax())
        ax.annotate(f"peak {_mib(float(own[at])):,.1f} MiB at {names[at]}",
                    (at, _mib(float(own[at]))), xytext=(0, 12), textcoords="offset points",
                    ha="center", fontsize="small", arrowprops={"arrowstyle": "->"})
    if 0 < forward < len(names):
        ax.axvline(forward - 0.5, color="#bbbbbb", linestyle="--", linewidth=1)
        ax.text(forward / 2, 1.0, "forward", transform=ax.get_xaxis_transform(), ha="center",
                va="bottom", fontsize="small")
        ax.text((forward + len(names)) / 2, 1.0, "backward", transform=ax.get_xaxis_transform(),
                ha="center", va="bottom", fontsize="small")
    ticks = list(range(0, len(names), max(1, len(names) // 14)))
    ax.set_xticks(ticks, [names[i] for i in ticks], rotation=35, ha="right",
                  fontsize="xx-small")
    ax.set_xlim(-0.5, max(len(names) - 0.5, 0.5))
    ax.set_ylim(bottom=0)
    ax.set_xlabel(f"the step's {len(names)} ops in execution order")
    ax.set_ylabel("live MiB")
    ax.set_title(f"{graph.name} on {plan.target.name}: {device_memory(plan)} per op",
                 pad=16)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    return _bytes(fig, fmt)
