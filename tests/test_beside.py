"""planner.beside: a pure computation in a forked child gives the caller what its own call
would, whatever happens to the child; and a plan whose evaluation graph is planned beside the
step is the same bytes as one planned in one process."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from planner import beside as beside_module
from planner.beside import PROCESSES_ENV, beside, can_fork
from planner.frontend.options import GraphOptions
from planner.frontend.prepare import prepare
from planner.graph.optimizer import Optimizer
from planner.pipeline import driver as pipeline
from planner.target import preset

needs_fork = pytest.mark.skipif(not can_fork(), reason="no fork here (one CPU, or threads)")


@needs_fork
def test_the_result_comes_from_a_child():
    parent = os.getpid()
    with beside(os.getpid, worth=True) as result:
        assert result() != parent
    with beside(os.getpid, worth=False) as result:  # not worth it: the caller's own call
        assert result() == parent


@needs_fork
def test_an_error_in_the_child_is_raised_by_the_callers_own_call():
    calls = []

    def fails():
        calls.append(os.getpid())
        raise ValueError("node 'conv1': no kernel")

    with beside(fails, worth=True) as result, pytest.raises(ValueError, match="conv1"):
        result()
    # The parent's call raised it (the child's append happened in the child's memory only).
    assert calls == [os.getpid()]


@needs_fork
def test_a_child_killed_midway_is_computed_again_here():
    parent = os.getpid()

    def dies_in_the_child():
        if os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)
        return "here"

    with beside(dies_in_the_child, worth=True) as result:
        assert result() == "here"


@needs_fork
def test_a_parent_that_stops_waiting_leaves_no_child(tmp_path):
    import time

    pid_file = tmp_path / "child.pid"

    def sleeps():
        pid_file.write_text(str(os.getpid()))
        time.sleep(60)

    with pytest.raises(RuntimeError, match="step failed"), beside(sleeps, worth=True):
        deadline = time.monotonic() + 30
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.01)
        raise RuntimeError("step failed")
    child = int(pid_file.read_text())
    with pytest.raises(ChildProcessError):  # killed and reaped: no such child to wait for
        os.waitpid(child, os.WNOHANG)


def test_no_fork_where_it_is_unsafe_or_switched_off(monkeypatch):
    monkeypatch.setenv(PROCESSES_ENV, "1")
    assert not can_fork()
    monkeypatch.delenv(PROCESSES_ENV)
    monkeypatch.setattr(threading, "active_count", lambda: 2)  # a user's thread running
    assert not can_fork()
    monkeypatch.setattr(beside_module.os, "sched_getaffinity", lambda _: {0}, raising=False)
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    assert not can_fork()


@needs_fork
def test_a_plan_whose_evaluation_is_planned_beside_is_the_same_bytes(monkeypatch):
    g = prepare("zoo:mlp?batch=4&hidden=8&in_features=6&classes=3",
                GraphOptions(optimizer=Optimizer(kind="adamw")))
    target = preset("knl-7250")
    forked = []
    real = pipeline.beside

    def counted(compute, worth):
        forked.append(worth)
        return real(compute, worth)

    monkeypatch.setattr(pipeline, "beside", counted)
    monkeypatch.setattr(pipeline, "BESIDE_NODES", 0)
    beside_plan = pipeline.plan(g, target).to_json()
    assert forked == [True]
    monkeypatch.setenv(PROCESSES_ENV, "1")
    one_process = pipeline.plan(g, target).to_json()
    assert beside_plan == one_process
    assert pipeline.plan(g, target).evaluation is not None
