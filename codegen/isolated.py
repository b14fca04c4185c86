"""Built executors stepped each in a process of its own, their steps taken in turns.

Why a process each: several executors in one process share one libgomp, and once the process
holds more libgomp threads than CPUs libgomp spins 100 times instead of 300,000 at every
barrier (bench/step_process.py). A contention fit that ran the one-lane and the two-lane plans
of LSTM's step in one process measured the two-lane step at 41 ms where it runs 18 ms alone in
its process, and each op's one-lane time inflated alike: co-running read as free of cost
(kappa 0.02, sigma 0). Why in turns: a neighbour's burst of work falls on every executor alike.

A child is a fresh interpreter (`python -m codegen.isolated`), not a fork (the parent's OpenMP
threads do not survive one) nor multiprocessing's spawn (which imports the caller's main
script again: a user's training script without a main guard). It reads its package folder,
parameters and feeds pickled from stdin, steps on each request and writes back pickled (step
seconds, stats()).
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

# Project root: the child imports codegen from where the parent did.
ROOT = Path(__file__).resolve().parent.parent


def steps_in_turns(packages: Sequence[Path], state: Mapping[str, np.ndarray] | None,
                   feeds: Mapping[str, np.ndarray], steps: int
                   ) -> list[list[tuple[float, dict]]]:
    """Per package (a built executor's folder): `steps` of (seconds, stats()) of its executor
    (its main schedule), warmed up by one step, each in a process of its own, stepped in
    turns."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    children = []
    try:
        for package in packages:
            child = subprocess.Popen([sys.executable, "-m", "codegen.isolated"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
            children.append(child)
            _send(child, (str(package), None if state is None else dict(state), dict(feeds)))
        for child in children:
            _receive(child)  # warmed up
        runs: list[list[tuple[float, dict]]] = [[] for _ in children]
        for _ in range(max(1, steps)):
            for child, run in zip(children, runs, strict=True):
                _send(child, True)
                run.append(_receive(child))
        for child in children:
            _send(child, False)
            child.wait(60)
        return runs
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()


def _send(child: subprocess.Popen, message: object) -> None:
    pickle.dump(message, child.stdin)
    child.stdin.flush()


def _receive(child: subprocess.Popen) -> object:
    try:
        return pickle.load(child.stdout)
    except EOFError:
        raise RuntimeError(f"an executor's step process ended (exit code {child.wait()}); "
                           f"see its error above") from None


def _serve() -> None:
    """The child: load, warm up, then one step per request until told to stop."""
    from codegen.load import load

    # Replies on a copy of stdout; stdout itself (the runtime's prints, C++'s among them)
    # goes to stderr, so that nothing mixes with them.
    read, write = sys.stdin.buffer, os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    package, state, feeds = pickle.load(read)
    ex = load(package).Executor()
    # The plan's own schedule: the adaptive rule tries its variants from the 8th step on, and
    # a contention fit's one-lane plan switched to its two-core variant, a co-running step
    # (stepped in 37.6 ms where its one lane took 51.5), read as its one-lane step.
    ex.set_variant("main")
    if state is not None:
        ex.load_params(state)
    ex.step(feeds)
    pickle.dump("ready", write)
    write.flush()
    while pickle.load(read):
        ex.reset_stats()
        start = time.perf_counter()
        ex.step(feeds)
        seconds = time.perf_counter() - start
        pickle.dump((seconds, ex.stats()), write)
        write.flush()


if __name__ == "__main__":
    _serve()
