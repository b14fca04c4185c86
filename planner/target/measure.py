"""Quick host measurements for detection: streaming bandwidth and GEMM FLOP/s, about a second each.

Bandwidth: `np.add(a, b, out=c)` streams three arrays (two read, one written) and releases the
GIL, so one Python thread per core streams in parallel. FLOP/s: a square GEMM through a tuned
kernel, torch.matmul (oneDNN/MKL, what the planner's own kernels are built on) where torch is
installed, else the BLAS numpy links (OpenBLAS: on the 2-core EPYC VM it reached a fraction of
what ResNet-50's step itself ran at, issue 60). They measure what kernels reach, not datasheet
peaks.

A busy machine is not a slow one: where one thread measures, a round counts the CPU time the
process spent (`round_seconds`), not the seconds the scheduler gave other processes meanwhile
(beside 4 two-thread neighbours on 2 cores, a one-thread GEMM took 9 GFLOP/s of wall time and
143 per CPU-second; 141 on the machine alone). Several threads are timed on the wall: a
waiting thread spins or sleeps, so their CPU time is no measure of their work.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

import numpy as np


class Rounds:
    """The wall and CPU seconds of a measurement's timed rounds, summed as they run (what
    the process's own CPU time says of the load, planner.target.load.waited_load: over the
    rounds only, not the single-threaded setup around them)."""

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0

    def ran(self, threads: int) -> float | None:
        """The fraction of its `threads` threads' wall time the rounds spent on a CPU."""
        return self.cpu / (self.wall * threads) if self.wall > 0 and threads > 0 else None


def stream_bandwidth(threads: int, array_bytes: int = 64 << 20, budget_s: float = 0.5,
                     rounds: Rounds | None = None) -> float:
    """Bytes/s streamed by `threads` threads each running c = a + b over its own arrays.

    Each thread's three arrays are `array_bytes` each, larger than a server's last-level cache
    share. Best of the rounds that fit `budget_s` (at least two), counting 3 x array_bytes a pass.
    """
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    n = array_bytes // 4
    arrays = [(np.ones(n, np.float32), np.ones(n, np.float32), np.empty(n, np.float32))
              for _ in range(threads)]
    for a, b, c in arrays:  # touch every page before timing
        np.add(a, b, out=c)

    def one_round() -> float:
        start = threading.Barrier(threads + 1)

        def work(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
            start.wait()
            np.add(a, b, out=c)

        workers = [threading.Thread(target=work, args=abc) for abc in arrays]
        for w in workers:
            w.start()
        start.wait()
        c0, t0 = time.process_time(), time.perf_counter()
        for w in workers:
            w.join()
        return time.perf_counter() - t0, time.process_time() - c0

    return 3 * array_bytes * threads / best_seconds(one_round, budget_s, threads, rounds)


def round_seconds(wall: float, cpu: float, threads: int) -> float:
    """A round's seconds (module docstring): with one thread computing, the process's CPU
    time where less than the wall's; with more, the wall's. Never less than the work took:
    the process's other threads only add CPU time.

    >>> round_seconds(0.5, 0.1, 1), round_seconds(0.5, 0.1, 2), round_seconds(0.1, 0.3, 1)
    (0.1, 0.5, 0.1)
    """
    return min(wall, cpu) if threads == 1 else wall


def timed(run: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds) of `run()`."""
    c0, t0 = time.process_time(), time.perf_counter()
    run()
    return time.perf_counter() - t0, time.process_time() - c0


def best_seconds(one_round: Callable[[], tuple[float, float]], budget_s: float,
                 threads: int, log: Rounds | None = None) -> float:
    """The fastest of the rounds (`round_seconds` of each (wall, CPU) `one_round()` times)
    that fit `budget_s` of their seconds, at least two: on a busy machine a one-thread
    measurement takes as many rounds as on a quiet one (the best of 5 rounds beside 4
    neighbours was a quarter below the quiet rate), up to 4 x `budget_s` of wall time.
    Each round's seconds are added to `log`."""
    best, spent, wall_spent, rounds = float("inf"), 0.0, 0.0, 0
    while rounds < 2 or spent < budget_s and wall_spent < 4 * budget_s:
        wall, cpu = one_round()
        seconds = round_seconds(wall, cpu, threads)
        best = min(best, seconds)
        if log is not None:
            log.wall, log.cpu = log.wall + wall, log.cpu + cpu
        spent, wall_spent, rounds = spent + seconds, wall_spent + wall, rounds + 1
    return best


def gemm_flops(n: int = 1024, budget_s: float = 0.5, threads: int | None = None,
               rounds: Rounds | None = None) -> float:
    """FP32 FLOP/s of an n x n x n matmul through numpy's BLAS (2 n^3 FLOPs), best of rounds.

    threads: BLAS threads (needs threadpoolctl; without it, or with None, BLAS's default).
    """
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    with _blas_threads(threads):
        a @ b  # warm up: BLAS threads started, pages touched
        # BLAS's default team (None) is timed on the wall: its size is not known here.
        best = best_seconds(lambda: timed(lambda: a @ b), budget_s, threads or 0, rounds)
    return 2.0 * n**3 / best


def tuned_gemm() -> str:
    """What `tuned_gemm_flops` runs: "torch" where torch imports, else "numpy"."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return "numpy"
    return "torch"


def tuned_gemm_flops(n: int = 1024, budget_s: float = 0.5, threads: int | None = None,
                     dtype: str = "float32", rounds: Rounds | None = None) -> float:
    """FLOP/s of an n x n x n matmul in `dtype` (float32, bfloat16) through torch.matmul on
    `threads` threads (None: torch's default), best of the rounds that fit `budget_s`; through
    numpy's BLAS (float32 only) where torch is not installed."""
    if tuned_gemm() == "numpy":
        if dtype != "float32":
            raise ValueError(f"numpy's BLAS has no {dtype} GEMM")
        return gemm_flops(n, budget_s, threads, rounds)
    import torch

    was = torch.get_num_threads()
    try:
        if threads is not None:
            torch.set_num_threads(threads)
        g = torch.Generator().manual_seed(0)
        a = torch.randn(n, n, generator=g).to(getattr(torch, dtype))
        b = torch.randn(n, n, generator=g).to(getattr(torch, dtype))
        a @ b  # warm up: the team started, the kernel chosen, pages touched
        best = best_seconds(lambda: timed(lambda: a @ b), budget_s,
                            torch.get_num_threads(), rounds)
    finally:
        torch.set_num_threads(was)
    return 2.0 * n**3 / best


def can_limit_blas_threads() -> bool:
    try:
        import threadpoolctl  # noqa: F401
    except ImportError:
        return False
    return True


def _blas_threads(threads: int | None) -> contextlib.AbstractContextManager[object]:
    if threads is None or not can_limit_blas_threads():
        return contextlib.nullcontext()
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=threads, user_api="blas")
