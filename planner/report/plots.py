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

import io
from pathlib import Path
from typing import Any

from planner.errors import UserError

FORMATS = ("svg", "png")
# Op types coloured by name in a timeline, busiest first; the rest are grey ("other").
TIMELINE_TYPES = 10


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
    comm lane last), time in ms, ops coloured by type (the busiest TIMELINE_TYPES types
    named in the legend, the rest grey)."""
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
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
               "#bcbd22", "#17becf", "#7f7f7f"]
    colour = {t: palette[i % len(palette)] for i, t in enumerate(named)}
    fig = _figure(9.0, 1.4 + 0.32 * len(tracks))
    ax = fig.add_subplot()
    row = {t: i for i, t in enumerate(tracks)}
    for t in tracks:
        spans = [(op["start"] * 1e3, (op["end"] - op["start"]) * 1e3, op["op"]) for op in ops
                 if t in track_of(op)]
        ax.broken_barh([(s, d) for s, d, _ in spans], (row[t] - 0.4, 0.8),
                       facecolors=[colour.get(k, "#d0d0d0") for _, _, k in spans],
                       edgecolor="white", linewidth=0.3)
    ax.set_yticks(range(len(tracks)),
                  [f"cpu {t}" if isinstance(t, int) else f"stream {t}" for t in tracks])
    ax.invert_yaxis()
    ax.set_xlabel("time from the step's start (ms, predicted)")
    span = max((op["end"] for op in ops), default=0.0) * 1e3
    ax.set_xlim(0, span or 1.0)
    ax.set_title(f"{plan.get('graph', {}).get('name', '')} on "
                 f"{plan.get('target', {}).get('name', '')}: {span:.3f} ms, {len(ops)} ops")
    from matplotlib.patches import Patch

    handles = [Patch(color=colour[t], label=t) for t in named]
    if len(busy) > len(named):
        handles.append(Patch(color="#d0d0d0", label=f"{len(busy) - len(named)} other types"))
    ax.legend(handles=handles, fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1),
              frameon=False)
    ax.grid(True, axis="x", alpha=0.3)
    return _bytes(fig, fmt)
