"""Prediction accuracy as seed 002's Table V defines it, and the hold-out experiment behind it.

accuracy = 1 - mean(|predicted - measured| / measured), over the thread counts the hill climb
did not measure. Table V reports it per interval x: 95-98% at x = 2 and 4, falling at 8 and 16,
where the climb skips the steep part of the curve at few threads and stops early.

Example (a noiseless Amdahl curve with spawn overhead on 32 cores):
    >>> curve = {k: 0.1 + 0.9 / k + k / 1000 for k in range(1, 33)}
    >>> [round(holdout_accuracy(curve, curve, x), 2) for x in (2, 4, 8, 16)]
    [0.98, 0.93, 0.77, 0.3]
    >>> [round(holdout_accuracy(curve, curve, x, space="inverse"), 2) for x in (2, 4, 8, 16)]
    [1.0, 1.0, 1.0, 0.98]
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from planner.costs.model import Interpolation, interpolate
from planner.costs.profile import hill_climb


def prediction_accuracy(predicted: Sequence[float], measured: Sequence[float]) -> float:
    """1 - mean(|predicted - measured| / measured).

    Example:
        >>> round(prediction_accuracy([1.1, 0.9], [1.0, 1.0]), 6)
        0.9
    """
    if len(predicted) != len(measured) or not measured:
        raise ValueError(f"need equally many predictions and measurements, at least one; got "
                         f"{len(predicted)} and {len(measured)}")
    if any(m <= 0 for m in measured):
        raise ValueError("measured times must be positive")
    errors = [abs(p - m) / m for p, m in zip(predicted, measured, strict=True)]
    return 1.0 - math.fsum(errors) / len(errors)


def holdout_accuracy(profiled: Mapping[int, float], held_out: Mapping[int, float],
                     interval: int, tolerance: float = 0.0,
                     space: Interpolation = "linear") -> float:
    """Hill-climb `profiled` (seconds per thread count 1..C) at `interval` with `tolerance`,
    interpolate in `space`, and score the predictions against `held_out` (an independent
    measurement of the same counts) at every count the climb did not visit.
    """
    max_threads = max(profiled)
    if sorted(profiled) != list(range(1, max_threads + 1)):
        raise ValueError("profiled times must cover thread counts 1..C")
    points = hill_climb(profiled.__getitem__, max_threads, interval, tolerance)
    visited = {k for k, _ in points}
    counts = [k for k in sorted(held_out) if k not in visited]
    if not counts:
        raise ValueError(f"interval {interval} visited every thread count: nothing held out")
    return prediction_accuracy([interpolate(points, k, space)[0] for k in counts],
                               [held_out[k] for k in counts])
