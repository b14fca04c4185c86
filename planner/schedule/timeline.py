"""A plan's timeline as a hand-written SVG Gantt chart: one row per logical CPU in use, time
left to right, one rectangle per op per CPU, coloured by op type (a legend lists the types).

Example:
    >>> svg = timeline_svg({"ops": [{"name": "a", "op": "Relu", "cpus": [0], "start": 0.0,
    ...                              "end": 1.0}], "graph": {"name": "g"}, "target": {"name": "t"}})
    >>> svg.startswith("<svg") and "Relu" in svg
    True
"""

from __future__ import annotations

import hashlib
from html import escape
from typing import Any

WIDTH = 1200
ROW = 6
LEFT = 60
TOP = 30


def _colour(op: str) -> str:
    h = int(hashlib.sha256(op.encode()).hexdigest()[:6], 16)
    return f"hsl({h % 360},{55 + h // 360 % 30}%,{45 + h // 10800 % 20}%)"


def timeline_svg(plan: dict[str, Any]) -> str:
    """The SVG text (see the module docstring)."""
    ops = plan["ops"]
    # Rows: logical CPUs (CPU plans), or streams in the target's order (GPU plans).
    streams = list(plan.get("target", {}).get("streams", []))

    def lanes(op: dict[str, Any]) -> list:
        return op.get("cpus") or [op.get("stream", "")]

    # A CPU plan's comm lane (data-parallel all-reduces) is a row below its CPUs.
    cpus = sorted({c for op in ops for c in lanes(op)},
                  key=lambda c: (streams.index(c), 0, "") if c in streams
                  else (len(streams), c, "") if isinstance(c, int)
                  else (len(streams) + 1, 0, str(c)))
    row = {c: i for i, c in enumerate(cpus)}
    span = max((op["end"] for op in ops), default=0.0) or 1.0
    scale = (WIDTH - LEFT - 10) / span
    types = sorted({op["op"] for op in ops})
    height = TOP + ROW * len(cpus) + 20 + 14 * len(types)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
           f'font-family="sans-serif" font-size="11">',
           f'<text x="{LEFT}" y="16">{escape(plan.get("graph", {}).get("name", ""))} on '
           f'{escape(plan.get("target", {}).get("name", ""))}: {span * 1e3:.3f} ms</text>']
    for c in cpus:
        if row[c] % 8 == 0 or not isinstance(c, int):
            label = f"cpu {c}" if isinstance(c, int) else escape(str(c))
            out.append(f'<text x="2" y="{TOP + row[c] * ROW + ROW}">{label}</text>')
    for op in ops:
        x = LEFT + op["start"] * scale
        w = max((op["end"] - op["start"]) * scale, 0.5)
        fill = _colour(op["op"])
        for c in lanes(op):
            out.append(f'<rect x="{x:.2f}" y="{TOP + row[c] * ROW}" width="{w:.2f}" '
                       f'height="{ROW - 1}" fill="{fill}"><title>{escape(op["name"])} '
                       f'({escape(op["op"])})</title></rect>')
    y = TOP + ROW * len(cpus) + 20
    for i, t in enumerate(types):
        out.append(f'<rect x="{LEFT}" y="{y + 14 * i - 9}" width="10" height="10" '
                   f'fill="{_colour(t)}"/><text x="{LEFT + 14}" y="{y + 14 * i}">'
                   f'{escape(t)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
