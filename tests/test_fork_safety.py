"""A compiled model, a trainer and a bare executor called in a fork()ed child run there and
return the parent's results bit for bit (planner/runtime/forked.py; templates/common/
executor_core.h, "Fork").

Each child is a real fork of this process after the parent ran its executors (their lane threads
and OpenMP teams exist; the forking thread's libgomp pool is let go at the fork, or its copy
would name workers that stay in the parent). The child runs an inherited executor's ops one at a
time, each on its planned team, with the kernels the parent made: the serial reference the
lanes' run equals, so the expected results are the parent's exact bits, not a tolerance
(docs/executor.md: the ops are the same kernels on the same thread counts, and every schedule
computes the main schedule's bits). Also: threads the child starts, with the backend's locks
held by a parent thread at the fork; a grandchild; children forked while another thread steps an
executor (that executor is refused there in one line, the rest runs). Each wait has a deadline,
so a regression fails here instead of hanging the suite (a child that starts a team of two from
the parent's copy of the forking thread's pool, or finds a parent thread's lock held, does hang:
both were checked against this file).
"""

from __future__ import annotations

import os
import pickle
import selectors
import threading
import time
import traceback
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import planner.torch  # noqa: E402,F401  (registers the backend)

DEADLINE = 120.0  # seconds; a child's calls take well under one, a hang forever
TORN = "was fork()ed while another thread was using it"


def in_fork(fn):
    """(ok, value) of fn() run in a child made by os.fork(): its result, or its error's last
    line. Fails the test when the child neither answers nor exits within DEADLINE."""
    read, write = os.pipe()
    with warnings.catch_warnings():  # a test that forks beside a stepping thread does so on purpose
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: answer, then leave without running the parent's exit handlers
        try:
            os.close(read)
            try:
                got = (True, fn())
            except BaseException as e:  # noqa: BLE001 - the child's answer, whatever it is
                got = (False, traceback.format_exception_only(type(e), e)[-1].strip())
            with os.fdopen(write, "wb") as f:
                pickle.dump(got, f)
        finally:
            os._exit(0)
    os.close(write)
    data, end = b"", time.monotonic() + DEADLINE
    # (selectors, not select.select: a worker that has loaded hundreds of packages holds
    # descriptors past select's 1024.)
    with os.fdopen(read, "rb") as f, selectors.DefaultSelector() as waiting:
        waiting.register(f, selectors.EVENT_READ)
        while time.monotonic() < end:
            ready = waiting.select(max(0.0, end - time.monotonic()))
            chunk = os.read(f.fileno(), 1 << 20) if ready else b""
            if not chunk:
                break
            data += chunk
    if not data:
        os.kill(pid, 9)
    os.waitpid(pid, 0)
    assert data, "the forked child hung (no answer in time)"
    return pickle.loads(data)


def answered(got):
    ok, value = got
    assert ok, f"failed in the forked child: {value}"
    return value


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 32)
        self.fc2 = nn.Linear(32, 3)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def inputs(i: int):
    g = torch.Generator().manual_seed(100 + i)
    return torch.randn(16, 8, generator=g), torch.randint(0, 3, (16,), generator=g)


def gradients(fast, x):
    """Loss and every parameter's gradient of one training forward and backward."""
    for p in fast.parameters():
        p.grad = None
    loss = F.cross_entropy(fast(x), torch.arange(x.shape[0]) % 3)
    loss.backward()
    return [loss.detach().clone()] + [p.grad.clone() for p in fast.parameters()]


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    net = Net()
    torch._dynamo.reset()
    fast = torch.compile(net, backend="planner", options={"costs": "analytical"})
    with torch.no_grad():
        assert torch.allclose(fast(inputs(0)[0]), net(inputs(0)[0]), rtol=1e-5, atol=1e-6)
    gradients(fast, inputs(0)[0])  # the training plans planned, built and run here too
    return fast


@pytest.fixture(scope="module")
def trained():
    torch.manual_seed(1)
    net = Net()
    x, y = inputs(0)
    # Every op on a team of two: the child must start teams of its own (uniform, intra 2).
    t = planner.torch.trainer(net, [x], F.cross_entropy, y, optimizer="sgd", lr=0.1,
                              costs="analytical", strategy="uniform", intra=2, inter=1)
    t.step(x, y)  # lanes and teams exist; the state is one step in
    # The evaluation runs on the calling thread: this thread's libgomp pool now has a worker,
    # which a child forked from here does not (a team of two started from it there waits
    # forever), and so has PyTorch's matmul's team.
    t.evaluate(x, y)
    a = torch.randn(512, 512)
    torch.mm(a, a)
    return t


class Calls(torch.utils.data.Dataset):
    """Item i: the compiled model's output on input i (no grad), its loss and gradients (a
    training forward and backward), and the trainer's evaluation and one step from the state
    the worker inherited, with the parameters after it."""

    def __init__(self, fast, t) -> None:
        self.fast, self.t = fast, t

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i):
        return calls(self.fast, self.t, i)


def calls(fast, t, i):
    x, y = inputs(i)
    with torch.no_grad():
        out = fast(x).clone()
    grads = gradients(fast, x)
    loss_eval, outs = t.evaluate(x, y)
    loss_step = t.step(x, y)
    # As tensors: the loader's workers hand numpy arrays back as tensors.
    params = {k: torch.from_numpy(np.array(v)) for k, v in t.params().items()}
    return out, grads, loss_eval, [torch.from_numpy(np.array(o)) for o in outs], loss_step, params


def same(a, b) -> None:
    """Equal bit for bit, structure and all."""
    if isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for u, v in zip(a, b, strict=True):
            same(u, v)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            same(a[k], b[k])
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), (a, b)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b), (a, b)
    else:
        assert a == b, (a, b)


@pytest.mark.filterwarnings("ignore:This DataLoader will create 4 worker processes")
def test_dataloader_fork_workers_return_the_parents_results(model, trained):
    """4 DataLoader workers under the fork start method each call the compiled model (no
    grad, and a training forward and backward) and the trainer (evaluate, and a step on its
    copy of the state): each result is the parent's for the same input and state."""
    start = trained.state_dict()
    expected = []
    for i in range(4):
        expected.append(calls(model, trained, i))
        trained.load_state_dict(start)  # each worker steps from the state it inherited
    loader = torch.utils.data.DataLoader(Calls(model, trained), batch_size=None, num_workers=4,
                                         multiprocessing_context="fork", timeout=DEADLINE)
    got = list(loader)
    assert len(got) == 4
    for i in range(4):
        same(got[i], expected[i])
    # The parent runs on after its children: the same results again.
    same(calls(model, trained, 0), expected[0])
    trained.load_state_dict(start)


def test_bare_executor_step_in_os_fork_child(trained):
    """A plain os.fork() child calls the trainer's executor straight (no planner door in
    between): its step's loss and parameters, and an evaluation, are the parent's, and an
    executor made in the child (lanes of its own) steps to the same bits."""
    built = trained.shapes.primary
    ex, package = built.executor, built.package
    x, y = inputs(5)
    feeds = {t.name: a for t, a in zip(built.feeds, [x.numpy(), y.numpy()], strict=True)}
    state = ex.params()

    def step_of(executor):
        loss = {k: np.array(v) for k, v in executor.step(feeds).items()}
        return loss, executor.params()

    def fresh():
        mine = package.Executor()
        mine.load_params(state)
        return step_of(mine), mine.concurrent

    def inherited():
        # PyTorch's own parallel matmul on the forking thread too (its pool let go at the fork).
        return ex.evaluate(feeds), step_of(ex), torch.mm(a, a)

    assert any(op.threads > 1 for op in built.plan.ops), \
        "no op runs on a team: the test would not see the parent's OpenMP pool"
    a = torch.randn(512, 512)
    product = torch.mm(a, a)
    evaluation = ex.evaluate(feeds)
    evaluated, in_child, child_product = answered(in_fork(inherited))
    made_in_child, concurrent = answered(in_fork(fresh))
    here = step_of(ex)
    same((evaluated, in_child), (evaluation, here))
    same(made_in_child, here)
    assert concurrent == ex.concurrent  # the child's own executor ran on lanes of its own
    # Another thread count may sum the 512 products of a dot in another order: within
    # 512 * 2^-24 * sum |a_ik||a_kj| (the float32 bound; |a| ~ N(0, 1): sum ~ 512 * 0.64).
    assert torch.allclose(child_product, product, rtol=0, atol=512 * 2**-24 * 512)
    ex.load_params(state)


def test_torch_threads_in_the_child_are_the_parents(model):
    """PyTorch's own ops on a child's forking thread after the parent ran them on two threads
    with torch.set_num_threads(2) (which MKL keeps apart from OpenMP's count: setting OpenMP's
    to one in the child did not reach it, and the GEMM hung there, as it does in eager PyTorch
    without the planner): the child's GEMM returns, at the parent's thread count, and the
    compiled model answers without compiling again (Dynamo's guards read that count)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        a = torch.randn(512, 512)
        product = torch.mm(a, a)
        x = inputs(3)[0]
        with torch.no_grad():
            expected = model(x)
        frames = torch._dynamo.utils.counters["frames"]["ok"]

        def child():
            with torch.no_grad():
                out = model(x)
            return (torch.mm(a, a), out, torch.get_num_threads(),
                    torch._dynamo.utils.counters["frames"]["ok"])

        got, out, child_threads, child_frames = answered(in_fork(child))
    finally:
        torch.set_num_threads(threads)
    assert (child_threads, child_frames) == (2, frames)
    same(out, expected)
    # The same thread count and kernel: the same sums in the same order.
    assert torch.equal(got, product)


def test_child_forked_mid_step_answers(model, trained):
    """Children forked while another thread steps the trainer on its lanes: each answers in
    time; a call on the executor that thread was using is refused in one line (its copy's
    state may be half written) or, forked between steps, runs; the compiled model runs."""
    x, y = inputs(0)
    with torch.no_grad():
        expected = model(x).clone()
    stop = threading.Event()

    def steps():
        while not stop.is_set():
            trained.step(x, y)

    def child():
        with torch.no_grad():
            out = model(x).clone()
        try:
            return out, trained.step(x, y)
        except Exception as e:  # noqa: BLE001 - the refusal is the answer
            return out, str(e)

    start = trained.state_dict()
    worker = threading.Thread(target=steps)
    worker.start()
    answers = []
    try:
        for _ in range(6):
            time.sleep(0.01)
            answers.append(answered(in_fork(child)))
    finally:
        stop.set()
        worker.join()
    trained.load_state_dict(start)
    for out, stepped in answers:
        assert torch.equal(out, expected)
        if isinstance(stepped, str):
            assert TORN in stepped and "\n" not in stepped, stepped
        else:
            assert np.isfinite(stepped)


def test_python_threads_in_the_child(model, trained):
    """Threads a forked child starts call the compiled model (no grad, and a training forward)
    and the trainer's evaluation at once, while a parent thread held the backend's
    executor-pool locks at the fork: every call
    returns the parent's bits (the child's worker thread takes the calls one at a time; the
    locks are made anew in the child)."""
    from planner.torch.executors import _POOLS

    x, y = inputs(2)

    def all_calls():
        with torch.no_grad():
            out = model(x).clone()
        # A training forward leases a pooled executor (its arena kept for the backward).
        return out, model(x).detach().clone(), trained.evaluate(x, y)

    expected = all_calls()
    pools = list(_POOLS.values())
    assert pools, "the compiled model made no executor pool"
    held, let_go = threading.Event(), threading.Event()

    def holder():
        for pool in pools:
            pool._lock.__enter__()
        held.set()
        let_go.wait()
        for pool in pools:
            pool._lock.__exit__(None, None, None)

    def child():
        got = [None] * 4

        def call(k):
            got[k] = all_calls()

        threads = [threading.Thread(target=call, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return got

    keeper = threading.Thread(target=holder)
    keeper.start()
    held.wait()
    try:
        got = answered(in_fork(child))
    finally:
        let_go.set()
        keeper.join()
    for each in got:
        same(each, expected)


def test_grandchild(trained):
    """A child that ran the trainer's executor (its worker thread and teams made) forks again:
    the grandchild's step is the parent's too (the child's worker stayed in the child)."""
    built = trained.shapes.primary
    ex = built.executor
    x, y = inputs(6)
    feeds = {t.name: a for t, a in zip(built.feeds, [x.numpy(), y.numpy()], strict=True)}
    state = ex.params()

    def step():
        return {k: np.array(v) for k, v in ex.step(feeds).items()}, ex.params()

    def child():
        evaluation = ex.evaluate(feeds)  # the child's worker runs it
        return evaluation, answered(in_fork(step))

    expected = (ex.evaluate(feeds), step())
    ex.load_params(state)
    same(answered(in_fork(child)), expected)


def test_a_step_in_flight_on_a_shared_arena_tears_every_executor_on_it(trained):
    """Executors on one arena (arena_of: a range's shapes): a child forked while one of them
    has a step in flight refuses the others too, in one line (their arena may be half
    written); forked after it, the other steps in the child as in the parent."""
    built = trained.shapes.primary
    package, ex = built.package, built.executor
    sharer = package.Executor(arena_of=ex)
    x, y = inputs(7)
    feeds = {t.name: a for t, a in zip(built.feeds, [x.numpy(), y.numpy()], strict=True)}
    state = ex.params()

    def step():
        return {k: np.array(v) for k, v in sharer.step(feeds).items()}, sharer.params()

    ex.step_async(feeds)
    try:
        ok, said = in_fork(step)
    finally:
        ex.wait()
    assert not ok and TORN in said and "\n" not in said, said
    got = answered(in_fork(step))
    expected = step()
    ex.load_params(state)
    same(got, expected)
