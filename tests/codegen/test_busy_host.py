"""libgomp's spinning throttled while the host is busy (templates/cpu/runtime/busy_host.h).

Each case runs in a process of its own (libgomp's state is per process): a trainer's steps
on one CPU, beside a neighbour process that spins on the same CPU, so every step's threads
wait for it, however quiet or busy the rest of the machine is: its steps' run delay holds the
executor's estimate above the busy share, and the process holds the anchor's parked team (more
libgomp threads than CPUs: libgomp cuts every team's spinning short). A user who set
GOMP_SPINCOUNT keeps it. A child forked from a throttled process starts unthrottled
(the anchor's thread stayed in the parent) and steps. Whether a quiet host lets the anchor go
is left to the bench (bench/results/2026-11-29-busy-host-spinning.md): the suite's host is
never known to be quiet.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")

SCRIPT = textwrap.dedent("""
    import json, os, subprocess, sys
    import torch
    from planner.torch import trainer

    cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})  # lane threads made from here on inherit it
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 10))
    x, y = torch.randn(256, 256), torch.randint(0, 10, (256,))
    # Priced by the model: a step of milliseconds, long enough that the kernel shares the
    # CPU with the neighbour (a sub-millisecond step of a thread that slept barely waits).
    t = trainer(model, (x,), loss=torch.nn.functional.cross_entropy, labels=y,
                optimizer="sgd", lr=0.1, out_dir=sys.argv[1], costs="analytical")
    for _ in range(3):
        t.step(x, y)
    spin = "import os; os.sched_setaffinity(0, {%d})\\nwhile True: pass" % cpu
    neighbour = subprocess.Popen([sys.executable, "-c", spin])
    try:
        for _ in range(40):
            t.step(x, y)
        busy = t.executor.stats()["spin"]
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            t.step(x, y)
            os.write(write, json.dumps(t.executor.stats()["spin"]).encode())
            os._exit(0)
        os.close(write)
        child = json.loads(os.read(read, 4096) or b"null")
        os.waitpid(pid, 0)
    finally:
        neighbour.kill()
        neighbour.wait()
    print(json.dumps({"busy": busy, "child": child}))
""")


def run(tmp_path, env: dict[str, str]) -> dict:
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True,
                         text=True, timeout=600, env={**os.environ, **env})
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_neighbour_on_the_steps_cpu_throttles_libgomps_spinning(tmp_path):
    got = run(tmp_path, {})
    assert got["busy"]["run_delay_share"] > 0.2, got
    assert got["busy"]["throttled"] and not got["busy"]["user_set"], got
    # The child steps (no team waits for a parent's thread) and holds no anchor.
    assert got["child"] is not None and got["child"]["throttled"] is False, got


def test_a_users_own_spin_count_is_kept(tmp_path):
    got = run(tmp_path, {"GOMP_SPINCOUNT": "3000"})
    assert got["busy"]["run_delay_share"] > 0.2, got
    assert got["busy"]["user_set"] and not got["busy"]["throttled"], got
