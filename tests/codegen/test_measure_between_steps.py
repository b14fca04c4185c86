"""The background measurement's child measures between steps: its process group is stopped
while an executor of its parent steps (codegen.measure_later.between_steps) and continued after
the last step in flight, and a parent that ends with it stopped leaves it going on (the kernel
continues an orphaned process group, and the child ignores the SIGHUP that comes first).
The end-to-end runs, real children measuring beside real steps, are tests/codegen/
test_measure_later.py's."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from codegen import measure_later

# A process in a group of its own that ignores SIGHUP, as codegen/measure_child.py's main
# makes the measuring child, sleeping in short naps until killed.
SLEEPER = ("import signal, time\n"
           "signal.signal(signal.SIGHUP, signal.SIG_IGN)\n"
           "while True:\n"
           "    time.sleep(0.01)\n")


def state(pid: int) -> str:
    """The process's state letter (/proc: T stopped, S sleeping, R running)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def settles(pid: int, stopped: bool, seconds: float = 5.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if (state(pid) == "T") == stopped:
            return True
        time.sleep(0.01)
    return False


@pytest.fixture
def child(monkeypatch):
    process = subprocess.Popen([sys.executable, "-c", SLEEPER], process_group=0)
    monkeypatch.setattr(measure_later, "_RUNNING",
                        [measure_later._Job("job", [], "a test's", None, process=process)])
    yield process
    process.kill()
    process.wait()


def test_the_child_is_stopped_while_any_step_runs_and_continued_after(child):
    assert settles(child.pid, stopped=False)
    with measure_later.between_steps():
        assert settles(child.pid, stopped=True)
        with measure_later.between_steps():  # another thread's step, at once
            pass
        time.sleep(0.1)
        assert state(child.pid) == "T"  # the first step still runs
    assert settles(child.pid, stopped=False)
    with pytest.raises(RuntimeError), measure_later.between_steps():  # a step that fails
        raise RuntimeError("the step's error")
    assert settles(child.pid, stopped=False)


def test_no_child_no_signal(monkeypatch):
    monkeypatch.setattr(measure_later, "_RUNNING", [])
    with measure_later.between_steps():
        assert measure_later._STOPPED is None


def test_a_parent_that_ends_with_its_child_stopped_leaves_it_going_on():
    parent = subprocess.run(
        [sys.executable, "-c",
         "import os, signal, subprocess, sys, time\n"
         f"p = subprocess.Popen([sys.executable, '-c', {SLEEPER!r}], process_group=0)\n"
         "os.killpg(p.pid, signal.SIGSTOP)\n"
         "while open(f'/proc/{p.pid}/stat').read().rsplit(')', 1)[1].split()[0] != 'T':\n"
         "    time.sleep(0.01)\n"  # stopped before this parent ends
         "print(p.pid, flush=True)\n"],
        capture_output=True, text=True, timeout=60)
    pid = int(parent.stdout.split()[0])
    try:
        assert settles(pid, stopped=False)  # continued by the kernel, SIGHUP ignored
    finally:
        subprocess.run(["kill", "-9", str(pid)], check=False)
