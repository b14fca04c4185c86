"""A compiled model, a trainer and a bare executor called in a fork()ed child: refused in one
line naming the spawn start method, never a hang (planner/runtime/forked.py).

Each child is a real fork of this process after the parent ran its executors (their lane
threads and OpenMP teams exist); each wait has a deadline, so a regression fails here instead
of hanging the suite. A DataLoader's fork workers are the case users meet; a spawn worker is a
fresh interpreter and runs the model (not tested here: it re-imports and re-plans, seconds).
"""

from __future__ import annotations

import multiprocessing
import traceback

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import planner.torch  # noqa: E402,F401  (registers the backend)

DEADLINE = 60.0  # seconds; a refusal takes milliseconds, a hang forever


def in_fork(fn):
    """(ok, text) of fn() run in a forked child: its repr'd result, or its error's last line.
    Fails the test when the child neither answers nor exits within DEADLINE."""
    ctx = multiprocessing.get_context("fork")
    read, write = ctx.Pipe(duplex=False)

    def child() -> None:
        try:
            write.send((True, repr(fn())))
        except BaseException as e:  # noqa: BLE001 - the child's answer, whatever it is
            write.send((False, traceback.format_exception_only(type(e), e)[-1].strip()))

    p = ctx.Process(target=child)
    p.start()
    write.close()
    answered = read.poll(DEADLINE)
    got = read.recv() if answered else None
    p.join(DEADLINE if answered else 1)
    if p.is_alive():
        p.kill()
        p.join()
    assert got is not None, "the forked child hung (no answer in time)"
    return got


def assert_refused(got) -> None:
    ok, text = got
    assert not ok, f"ran in the forked child: {text}"
    assert "\n" not in text
    assert "forked child process" in text and "'spawn'" in text, text


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    net = Net().eval()
    torch._dynamo.reset()
    fast = torch.compile(net, backend="planner", options={"costs": "analytical"})
    x = torch.randn(4, 8)
    with torch.no_grad():
        got = fast(x)  # planned, built and run here: lanes and teams exist
        assert torch.allclose(got, net(x), rtol=1e-5, atol=1e-6)
    return fast, x


class Calls(torch.utils.data.Dataset):
    """Each item the compiled model's output on one batch (a worker calls it)."""

    def __init__(self, fast, x) -> None:
        self.fast, self.x = fast, x

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i):
        with torch.no_grad():
            return self.fast(self.x + i)


def test_dataloader_fork_workers_are_refused_in_one_line(model):
    fast, x = model
    loader = torch.utils.data.DataLoader(Calls(fast, x), batch_size=None, num_workers=2,
                                         multiprocessing_context="fork", timeout=DEADLINE)
    with pytest.raises(Exception) as e:  # the worker's UserError, re-raised by the loader
        list(loader)
    assert "called in a forked child process" in str(e.value)
    assert "multiprocessing_context='spawn'" in str(e.value)
    # The parent still runs the model, after its children's refusals.
    with torch.no_grad():
        assert torch.allclose(fast(x), fast._orig_mod(x), rtol=1e-5, atol=1e-6)


def test_compiled_model_call_in_fork_is_refused(model):
    fast, x = model

    def call():
        with torch.no_grad():
            return fast(x).sum().item()

    assert_refused(in_fork(call))


def test_bare_executor_call_in_fork_is_refused_by_the_runtime(model):
    """A call straight on an executor the parent ran (no planner door in between): the
    runtime's bindings refuse it before taking its lock or running a team."""
    from planner.torch.executors import _EXECUTORS, _POOLS

    executors = list(_EXECUTORS.values()) + [ex for p in _POOLS.values() for ex in p.idle()]
    assert executors, "the compiled model made no executor"
    ex = getattr(executors[0], "ex", executors[0])  # a ChosenWay wraps its executor

    assert_refused(in_fork(lambda: ex.params()))
    assert_refused(in_fork(lambda: ex.stats()))


def test_trainer_step_in_fork_is_refused_and_parent_trains_on():
    torch.manual_seed(0)
    net = Net()
    x, y = torch.randn(4, 8), torch.randint(0, 3, (4,))
    t = planner.torch.trainer(net, [x], F.cross_entropy, y, optimizer="sgd", lr=0.1,
                              costs="analytical")
    first = t.step(x, y)
    assert_refused(in_fork(lambda: t.step(x, y)))
    # A new executor in the child is refused too (its team would use the parent's pool).
    assert_refused(in_fork(lambda: t.shapes.primary.package.Executor()))
    second = t.step(x, y)
    assert np.isfinite(first) and second < first  # the parent's executor is intact
