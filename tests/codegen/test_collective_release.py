"""The collective planner.runtime.distributed hands an executor (ex.set_collective) leaves no
reference to the bucket's tensors with the process group when it returns (issue 32).

A gloo worker thread drops its work a moment after the caller of dist.all_reduce is woken
(about a quarter of the calls on a busy machine). A tensor still referenced there when Python
frees it is later freed by that thread, which takes the GIL to do so; a script ending right
after its last step then aborted now and then ("terminate called without an active
exception", exit 134: the thread ended by pthread_exit during finalization). Each call here
checks, right after the collective returns, that the tensors are referenced as before it.

The group is one gloo rank in a child process (the test process keeps no process group)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch.distributed")

CHILD = textwrap.dedent("""
    import socket
    import torch
    import torch.distributed as dist
    from planner.runtime.distributed import collective_callback

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0,
                            world_size=1)
    fn = collective_callback(dist.group.WORLD, 1, 0)
    left = []
    for call in range(300):
        what = call % 3  # all-reduce, reduce-scatter, all-gather
        whole = torch.arange(64, dtype=torch.float32)
        before = whole._use_count()
        fn(what, whole, 0)
        if whole._use_count() != before:
            left.append((what, whole._use_count() - before))
        assert torch.equal(whole, torch.arange(64, dtype=torch.float32))  # 1 rank: the same
    dist.destroy_process_group()
    print("left", left)
    assert not left, left
""")


def test_the_process_group_keeps_no_reference_to_a_bucket_after_its_collective():
    r = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, (r.stdout + r.stderr)[-2000:]
    assert "left []" in r.stdout
