"""A training step in a process of its own, timed there and stepped on request.

The CPU benches compare engines each in its own process: in one process PyTorch and the
executor share one libgomp (PyTorch's, loaded first), and once the process holds more libgomp
threads than CPUs libgomp spins 100 times instead of 300,000 at every barrier, so each parallel
region wakes sleeping workers; several executors in one process do the same to each other.
PyTorch's eager mobilenet_v2 step went from 32 to 80 ms once an executor had stepped in its
process (bench/results/2026-11-25-vectorized-loops.md).

    runner = StepProcess(make, arg1, arg2, what="uniform")  # make(*args) -> step callable
    seconds = runner.step()
    runner.report()   # what make's optional report() says (which schedule ran, say)
    runner.close()

`make` is a module-level function (the child imports it by name) that builds, warms up and
returns the step, or (step, report) with report() -> str; it runs in a fresh interpreter
(multiprocessing's spawn), so nothing of the parent's OpenMP or PyTorch state comes along.
"""

from __future__ import annotations

import multiprocessing as mp
import time
import warnings
from collections.abc import Callable


def _serve(conn, make: Callable, args: tuple) -> None:
    warnings.simplefilter("ignore")
    made = make(*args)
    step, report = made if isinstance(made, tuple) else (made, None)
    conn.send("ready")
    while (msg := conn.recv()) is not None:
        if msg == "report":
            conn.send(report() if report is not None else "")
            continue
        start = time.perf_counter()
        step()
        conn.send(time.perf_counter() - start)


class StepProcess:
    """A step built by `make(*args)` in a spawned process; `step()` runs one and returns its
    seconds (measured in that process, the pipe's round trip left out)."""

    def __init__(self, make: Callable, *args, what: str = "", timeout: float = 1800.0) -> None:
        ctx = mp.get_context("spawn")
        self.what = what or getattr(make, "__name__", "step")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, make, args), daemon=True)
        self.proc.start()
        child.close()
        try:
            if not self.conn.poll(timeout) or self.conn.recv() != "ready":
                raise EOFError
        except EOFError:
            self.proc.kill()
            raise SystemExit(f"{self.what}: its process did not start (exit code "
                             f"{self.proc.exitcode}); see its error above") from None

    def step(self) -> float:
        self.conn.send("step")
        return self.conn.recv()

    def report(self) -> str:
        self.conn.send("report")
        return self.conn.recv()

    def close(self) -> None:
        if self.proc.is_alive():
            self.conn.send(None)
            self.proc.join(30)
