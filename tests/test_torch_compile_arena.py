"""torch.compile(backend="planner")'s saved activations stay in the forward executor's arena
until the backward reads them (planner/torch/executors.py's ExecutorPool): no copy per step, one
executor leased per call in flight, returned when autograd frees the call's activations.

Each case holds the compiled model to eager on the same weights and batches (float32: a
forward or gradient differs from eager's by sums rounded in another order, a few ulps of the
largest value times the terms summed, here tens: 1e-5 of the largest |value| leaves room for
that and is far below a real error, a stale or overwritten activation shows at percents), and
reads the pool's state: executors made, idle, and where the saved activations' bytes lie.
Priced analytically to keep planning to seconds.
"""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import planner.torch  # noqa: E402,F401  (registers the backend)
from planner.torch import executors  # noqa: E402

RTOL = 1e-5


class Mlp(nn.Module):
    """Linear, LayerNorm, GELU, Linear: activations the backward reads that are no output."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(7, width)
        self.norm = nn.LayerNorm(width)
        self.fc2 = nn.Linear(width, 3)

    def forward(self, x):
        return self.fc2(F.gelu(self.norm(self.fc1(x))))


def made(width: int):
    """A model, its compiled copy (same weights) and the one pool the compiled copy's first
    call plans (a width no other test plans, so the pool is new)."""
    torch._dynamo.reset()
    torch.manual_seed(width)
    model = Mlp(width)
    ref = copy.deepcopy(model)
    before = set(executors._POOLS)
    compiled = torch.compile(model, backend="planner", options={"costs": "analytical"})
    return model, ref, compiled, before


def new_pools(before: set[str]) -> tuple[executors.ExecutorPool, executors.ExecutorPool]:
    """The forward and the backward pool the compiled copy planned (in that order)."""
    pools = [p for k, p in executors._POOLS.items() if k not in before]
    assert len(pools) == 2, f"{len(pools)} new pools"
    return pools[0], pools[1]


def new_pool(before: set[str]) -> executors.ExecutorPool:
    return new_pools(before)[0]


def assert_close(got, want, what: str) -> None:
    scale = max(float(want.abs().max()), 1e-3)
    err = float((got.double() - want.double()).abs().max())
    assert err <= RTOL * scale, f"{what}: |diff| {err:.3g} > {RTOL} x {scale:.3g}"


def inside(ptr: int, ex) -> bool:
    stats = ex.stats()
    return stats["arena_address"] <= ptr < stats["arena_address"] + stats["arena_bytes"]


def test_a_loop_keeps_one_executor_and_reads_activations_in_its_arena():
    model, ref, compiled, before = made(19)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    torch.manual_seed(1)
    for step in range(4):
        x, y = torch.randn(5, 7), torch.randint(0, 3, (5,))
        out = compiled(x)
        loss = F.cross_entropy(out, y)
        pool = new_pool(before)
        assert (pool.size, len(pool.idle())) == (1, 0), f"step {step}: the call holds its lease"
        # The saved activations that are not outputs: views of the leased arena, held by one
        # saved anchor (the only saved tensor that is not the user's).
        node = out.grad_fn
        assert type(node).__name__ == "StepBackward", type(node).__name__
        shown = {t.data_ptr() for t in (x, out, *model.parameters())}
        assert [t.numel() for t in node.saved_tensors if t.data_ptr() not in shown] == [0]
        views = [a.__array_interface__["data"][0] for a in node.arena.values()]
        assert views, "no saved activation"
        opt.zero_grad()
        loss.backward()
        opt.step()
        ref_loss = F.cross_entropy(ref(x), y)
        ref_opt.zero_grad()
        ref_loss.backward()
        ref_opt.step()
        assert_close(loss.detach(), ref_loss.detach(), f"step {step} loss")
        (ex,) = pool.idle()  # the backward freed the views: the lease is back
        assert pool.size == 1
        assert all(inside(p, ex) for p in views), "a saved activation was copied"
        assert node.arena == {}, "the freed anchor let go of the arena's arrays"
        # The gradients: views of the backward executor's arena, leased while they live
        # (zero_grad's set_to_none frees them before the next backward: one executor).
        backward = new_pools(before)[1]
        assert (backward.size, len(backward.idle())) == (1, 0)
        leased = next(lease.ex for lease in executors._LEASES if lease.pool is backward)
        assert all(inside(p.grad.data_ptr(), leased) for p in model.parameters())
    for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        assert_close(p.detach(), q.detach(), name)


def test_two_calls_in_flight_lease_two_executors_and_equal_eager_one_dropped_returns():
    model, ref, compiled, before = made(23)
    torch.manual_seed(2)
    x1, x2 = torch.randn(4, 7), torch.randn(4, 7)
    for _ in range(2):  # the second round reuses both executors
        for p in (*model.parameters(), *ref.parameters()):
            p.grad = None
        a, b = compiled(x1), compiled(x2)
        pool = new_pool(before)
        assert (pool.size, len(pool.idle())) == (2, 0)
        # b's forward ran after a's: a's activations must still be its own.
        (a.square().sum() + (2 * b).sum()).backward()
        (ref(x1).square().sum() + (2 * ref(x2)).sum()).backward()
        assert (pool.size, len(pool.idle())) == (2, 2)
        for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
            assert_close(p.grad, q.grad, name)
    # A call never backwarded holds its lease until its outputs are dropped.
    out = compiled(x1)
    assert (pool.size, len(pool.idle())) == (2, 1)
    del out
    assert (pool.size, len(pool.idle())) == (2, 2)


def test_gradient_accumulation_adds_into_the_kept_gradients_as_eager():
    """Gradients kept across backwards (accumulation; zero_grad(set_to_none=False)) pin their
    executor's arena: the next backward runs on a second one and autograd adds its views into
    the kept `.grad`s; no third is ever made."""
    model, ref, compiled, before = made(31)
    torch.manual_seed(4)
    for _ in range(2):
        for _ in range(3):  # three micro-batches into the same .grads
            x = torch.randn(4, 7)
            compiled(x).square().mean().backward()
            ref(x).square().mean().backward()
        backward = new_pools(before)[1]
        assert (backward.size, len(backward.idle())) == (2, 1)
        for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
            assert_close(p.grad, q.grad, name)
        model.zero_grad(set_to_none=False)  # in place: the first executor stays pinned
        ref.zero_grad(set_to_none=False)
    model.zero_grad()  # set_to_none: every executor free again
    assert (backward.size, len(backward.idle())) == (2, 2)


def test_retain_graph_backwards_twice_as_eager():
    model, ref, compiled, before = made(29)
    x = torch.randn(3, 7)
    out, want = compiled(x).sum(), ref(x).sum()
    out.backward(retain_graph=True)
    want.backward(retain_graph=True)
    compiled(torch.randn(3, 7)).sum().backward()  # another call meanwhile: another executor
    model.zero_grad()
    ref.zero_grad()
    out.backward()
    want.backward()
    assert new_pool(before).size == 2
    for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        assert_close(p.grad, q.grad, name)


def test_a_saved_output_changed_in_place_raises_as_eager():
    torch._dynamo.reset()
    model = nn.Sequential(nn.Linear(7, 11), nn.ReLU())  # ReLU's gradient reads its output
    compiled = torch.compile(model, backend="planner", options={"costs": "analytical"})
    x = torch.randn(2, 7)
    for run in (model, compiled):
        out = run(x)
        out.mul_(2)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.sum().backward()


@pytest.mark.slow
def test_a_call_never_backwarded_alive_at_the_end_leaks_no_executor(tmp_path):
    """Its saved activations, views of a leased arena, are given memory of their own at exit:
    nanobind reports no executor alive at the interpreter's end."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "kept.py"
    script.write_text(
        "import torch\nimport planner.torch\n"
        "m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LayerNorm(8), "
        "torch.nn.GELU(), torch.nn.Linear(8, 2))\n"
        "c = torch.compile(m, backend='planner', options={'costs': 'analytical'})\n"
        "x = torch.randn(3, 4)\nc(x).sum().backward()\nkept = c(x)\n")
    root = str(Path(__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": root}, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "leaked" not in done.stderr, done.stderr[-2000:]


def test_lanes_or_pytorchs_team_give_the_same_bits():
    # BackendOptions.lanes: the default runs the plan's lanes, lanes=False each executor's ops
    # one at a time on the calling thread's OpenMP team; each op keeps its planned thread
    # count, so three SGD steps agree bit for bit.
    runs = []
    for lanes in (False, True):
        torch._dynamo.reset()
        torch.manual_seed(5)
        model = Mlp(29)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        compiled = torch.compile(model, backend="planner",
                                 options={"costs": "analytical", "lanes": lanes})
        g = torch.Generator().manual_seed(6)
        losses = []
        for _ in range(3):
            opt.zero_grad()
            loss = compiled(torch.randn(16, 7, generator=g)).square().mean()
            loss.backward()
            opt.step()
            losses.append(loss.detach().clone())
        runs.append((losses, [p.detach().clone() for p in model.parameters()]))
    (l0, p0), (l1, p1) = runs
    assert all(torch.equal(a, b) for a, b in zip(l0, l1, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(p0, p1, strict=True))


@pytest.mark.parametrize("hooks", ["checkpoint", "saved_tensors_hooks"])
def test_saved_tensor_hooks_see_every_saved_activation(hooks):
    """Under the user's saved-tensor hooks (torch.utils.checkpoint without reentrancy, which
    drops what is saved and recomputes it; or hooks of their own), every activation the
    backward reads is saved through them, as eager saves it: an arena anchor would be dropped
    by the hook and the arena read after its lease ended."""
    from torch.utils.checkpoint import checkpoint

    model, ref, compiled, _ = made(31)
    x = torch.randn(6, 7)
    packed = []

    def pack(t):
        packed.append(t.numel())
        return t

    def grads(run, module) -> dict:
        if hooks == "checkpoint":
            out = checkpoint(run, x, use_reentrant=False)
        else:
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                out = run(x)
        out.square().sum().backward()
        return {n: p.grad for n, p in module.named_parameters()}

    got = grads(compiled, model)
    if hooks == "saved_tensors_hooks":
        assert packed and 0 not in packed  # every activation, and no empty anchor
    for name, want in grads(ref, ref).items():
        assert_close(got[name], want, name)


def test_a_loops_gradients_hold_their_arena_without_a_finalizer_each_and_share_the_leaves():
    """What a call leaves alive per parameter is its gradient and one weak reference holding
    the lease (Lease.kept): no finalizer each (four objects the cyclic collector tracks, per
    gradient and step), and the leaves' weak references are the planned call's, made once
    for a loop's calls (the same parameters each step). The arena is still held while a
    gradient lives and let go when the last one is freed, and the gradients equal eager's."""
    import weakref

    model, ref, compiled, before = made(37)
    torch.manual_seed(6)
    x = torch.randn(5, 7)
    compiled(x).square().mean().backward()  # the first call: planning's own finalizers
    ref(x).square().mean().backward()
    model.zero_grad()
    ref.zero_grad()
    nodes = []
    for step in range(3):
        x = torch.randn(5, 7)
        finalizers = len(weakref.finalize._registry)
        out = compiled(x)
        nodes.append(out.grad_fn)
        out.square().mean().backward()
        ref(x).square().mean().backward()
        backward = new_pools(before)[1]
        assert (backward.size, len(backward.idle())) == (1, 0), "the gradients hold the arena"
        assert len(weakref.finalize._registry) == finalizers, f"step {step}: a finalizer kept"
        for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
            assert_close(p.grad, q.grad, f"step {step} {name}")
        model.zero_grad()  # set_to_none: the last gradient freed returns the arena
        ref.zero_grad()
        assert (backward.size, len(backward.idle())) == (1, 1), f"step {step}: not returned"
    assert nodes[0].leaves is nodes[1].leaves is nodes[2].leaves
    assert {id(r()) for r in nodes[0].leaves} == {id(p) for p in model.parameters()}
