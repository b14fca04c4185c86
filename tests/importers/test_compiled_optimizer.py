"""PyTorch's compiled-optimizer pattern through the planner: `torch.compile(opt.step,
backend="planner")` (or a function calling it) against the same torch.optim run eagerly.

Each case steps two copies of the same parameters on the same gradients, one optimizer compiled
and one eager, with an lr_scheduler changing the lr between steps (Dynamo recompiles once with
the lr a tensor argument; every later lr is that graph's input). Tolerance: the planned graph is
torch.optim's own update in float32, its roundings in another order (a fused multiply-add as a
multiply and an add, `addcdiv` as a divide and an add): a few ulps (2^-24) of the largest
parameter per step, over three steps well under 1e-5 of it, far below a real error (a missed
step, a stale moment, an lr not taken: percents). A compiled model in the loop feeds its
gradients back into the next step, within the same bound (tests/test_torch_compile.py).

Planned means: no fallback warning, and every parameter and optimizer state tensor is a view of
one executor's arena from the first planned step on, its address unchanged by later steps (the
executor updates torch's tensors where they lie: no copy per step).
"""

from __future__ import annotations

import copy
import warnings

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import planner.torch  # noqa: E402,F401  (registers the backend)
from planner.torch.piece import PlannerFallback  # noqa: E402

OPTIONS = {"costs": "analytical"}
RTOL = 1e-5
STEPS = 3  # a constant lr, then the lr an input twice (the second reuses the plan)


def assert_close(got, want, what: str, rtol: float = RTOL) -> None:
    scale = max(float(want.detach().abs().max()), 1e-3)
    err = float((got.detach().double() - want.detach().double()).abs().max())
    assert err <= rtol * scale, f"{what}: |diff| {err:.3g} > {rtol} x {scale:.3g}"


def tensors_of(opt) -> list:
    """The parameters and every optimizer state tensor, in a fixed order."""
    params = [p for g in opt.param_groups for p in g["params"]]
    return params + [v for p in params for _, v in sorted(opt.state[p].items())
                     if isinstance(v, torch.Tensor)]


def run(make_opt, compiled_model: bool = False, form: str = "function"):
    """STEPS steps of a small model with `make_opt(params)` and a StepLR halving the lr every
    step, eager and compiled; returns both models, both optimizers, the fallback warnings and
    the tensors' addresses after each compiled step."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    ref = copy.deepcopy(model)
    opt, ref_opt = make_opt(model.parameters()), make_opt(ref.parameters())
    sched = torch.optim.lr_scheduler.StepLR(opt, 1, 0.5)
    ref_sched = torch.optim.lr_scheduler.StepLR(ref_opt, 1, 0.5)
    torch._dynamo.reset()
    forward = torch.compile(model, backend="planner", options=OPTIONS) if compiled_model \
        else model
    if form == "method":
        step = torch.compile(opt.step, backend="planner", options=OPTIONS)
    else:
        @torch.compile(backend="planner", options=OPTIONS)
        def step():
            opt.step()
    g = torch.Generator().manual_seed(1)
    addresses = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(STEPS):
            x, y = torch.randn(5, 6, generator=g), torch.randn(5, 3, generator=g)
            for f, o in ((forward, opt), (ref, ref_opt)):
                o.zero_grad()
                ((f(x) - y) ** 2).mean().backward()
            step()
            ref_opt.step()
            sched.step()
            ref_sched.step()
            addresses.append([t.data_ptr() for t in tensors_of(opt)])
    fallbacks = [str(w.message) for w in caught if w.category is PlannerFallback]
    return model, ref, opt, ref_opt, fallbacks, addresses


def assert_planned_as_eager(make_opt, **kw) -> None:
    model, ref, opt, ref_opt, fallbacks, addresses = run(make_opt, **kw)
    assert not fallbacks, fallbacks
    for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        assert_close(p.detach(), q.detach(), name)
    for k, (a, b) in enumerate(zip(tensors_of(opt), tensors_of(ref_opt), strict=True)):
        assert_close(a, b, f"optimizer tensor {k}")
    assert opt.param_groups[0]["lr"] == ref_opt.param_groups[0]["lr"]
    # The last graph (the lr an input) is planned once and owns torch's tensors from then on.
    assert addresses[-1] == addresses[-2], "a planned step moved torch's tensors"
    from planner.torch.piece import _RUNS

    arenas = [r for r in _RUNS if type(r).__name__ == "Held" and r.ex is not None
              and all(t.data_ptr() == r.views[n].data_ptr() for n, t in r.tensors.items())]
    assert len(arenas) == 1 and len(arenas[0].tensors) == len(tensors_of(opt))


@pytest.mark.ci_sample
def test_adamw_with_a_compiled_model_and_a_scheduler_equals_eager():
    assert_planned_as_eager(lambda ps: torch.optim.AdamW(ps, lr=0.05, weight_decay=0.1),
                            compiled_model=True)


def test_sgd_momentum_foreach_compiled_as_a_method_equals_eager():
    assert_planned_as_eager(lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9,
                                                       weight_decay=1e-2, foreach=True),
                            form="method")


@pytest.mark.compile_full
@pytest.mark.parametrize("make_opt", [
    lambda ps: torch.optim.Adam(ps, lr=0.05),
    lambda ps: torch.optim.AdamW(ps, lr=0.05, amsgrad=True, foreach=True),
    lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
    lambda ps: torch.optim.SGD(ps, lr=0.1),
    lambda ps: torch.optim.Adam(ps, lr=0.05, foreach=True),
], ids=["adam", "adamw-amsgrad-foreach", "sgd-nesterov", "sgd", "adam-foreach"])
def test_more_optimizers_equal_eager(make_opt):
    """Adam, amsgrad, nesterov, plain SGD, foreach Adam: run with -m compile_full."""
    assert_planned_as_eager(make_opt)


def _compiled_adam_steps(dtype):
    """Two Adam steps of one `dtype` parameter through the backend and eagerly: (p, q, the
    backend's PlannerFallback lines)."""
    torch.manual_seed(0)
    p = nn.Parameter(torch.randn(4, 3, dtype=dtype))
    q = nn.Parameter(p.detach().clone())
    opt, ref = torch.optim.Adam([p], lr=0.1), torch.optim.Adam([q], lr=0.1)
    torch._dynamo.reset()
    step = torch.compile(opt.step, backend="planner", options=OPTIONS)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in range(2):
            p.grad = torch.full_like(p, k + 1.0)
            q.grad = p.grad.clone()
            step()
            ref.step()
    return p, q, [str(w.message) for w in caught if w.category is PlannerFallback]


def test_a_step_the_planner_refuses_runs_eagerly_named_in_one_line():
    """float16 parameters: the CPU executor has float16 kernels for mixed precision's ops only,
    not the update's; Dynamo's graph runs eagerly (torch.optim's compiled formula, not bit for
    bit the eager step's) after one line naming the op and the dtype."""
    p, q, fallbacks = _compiled_adam_steps(torch.float16)
    assert len(fallbacks) == 1 and "\n" not in fallbacks[0], fallbacks
    assert "float16" in fallbacks[0] and "runs eagerly" in fallbacks[0]
    assert_close(p.detach(), q.detach(), "p", rtol=1e-3)


def test_a_float64_step_runs_planned():
    """float64 parameters: the CPU executor's float64 kernels run the compiled step (docs/
    executor.md, "dtypes"), no fallback. Dynamo's graph of torch.optim's step computes its
    scalars in float32 (the betas, its float32 step count for the bias corrections) and the
    plan reads the lr as float32, so it equals eager's double scalars within their float32
    rounding: beta2 = 0.999 is 1.3e-8 off, 1 - beta2^t 1.3e-5 relative, the update's
    denominator half that; after two steps of size 0.1 ~1e-6 of |p|, within RTOL. That is
    torch.compile's own: the same Dynamo graph run eagerly (the fallback, tried once) was
    1.63e-6 off eager's step as well."""
    p, q, fallbacks = _compiled_adam_steps(torch.float64)
    assert not fallbacks, fallbacks
    assert_close(p.detach(), q.detach(), "p")


@pytest.mark.parametrize("make_opt", [
    lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1),
    lambda ps: torch.optim.SGD(ps, lr=0.01, momentum=0.9),
], ids=["adamw-betas", "sgd-momentum"])
def test_one_cycle_with_its_momentum_cycling_equals_eager(make_opt):
    """OneCycleLR's default cycle_momentum=True writes betas[0] (momentum) every step as well
    as the lr, as a Python float: the compiled step takes each as the lr (planner/torch/
    scalars.py), a graph input after Dynamo's one recompile, every step planned, none eager
    (the trainer reads it as a scalar of its step too: test_cycled_momentum.py). STEPS + 1 steps:
    the bound above is for a few steps (the step's scalars are float32 where eager's are
    Python floats)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    ref = copy.deepcopy(model)
    opt, ref_opt = make_opt(model.parameters()), make_opt(ref.parameters())
    scheds = [torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.05, total_steps=8)
              for o in (opt, ref_opt)]
    torch._dynamo.reset()
    step = torch.compile(opt.step, backend="planner", options=OPTIONS)
    g = torch.Generator().manual_seed(1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(STEPS + 1):
            x, y = torch.randn(5, 6, generator=g), torch.randn(5, 3, generator=g)
            for f, o in ((model, opt), (ref, ref_opt)):
                o.zero_grad()
                ((f(x) - y) ** 2).mean().backward()
            step()
            ref_opt.step()
            for s in scheds:
                s.step()
    assert not [w for w in caught if w.category is PlannerFallback]
    key = "betas" if "betas" in opt.param_groups[0] else "momentum"
    assert opt.param_groups[0][key] == ref_opt.param_groups[0][key] != \
        opt.param_groups[0]["max_momentum"]  # it did cycle
    for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        assert_close(p.detach(), q.detach(), name)
    for k, (a, b) in enumerate(zip(tensors_of(opt), tensors_of(ref_opt), strict=True)):
        assert_close(a, b, f"optimizer tensor {k}")
