"""Sizes that depend on the data, planned at a bound (planner/importers/torch/rules_bounded.py):
masked_select, nonzero / argwhere and `x[mask]` feeding sums, means and pointwise ops, forward
and backward on the reference interpreter against PyTorch; a bound torch._check declares
planned as declared; the one-line refusals (no bound, a consumer that cannot respect the count,
a size read as a number, a counted output); and a loss over the valid tokens,
`cross_entropy(..., reduction='none').masked_select(mask).mean()`, trained through
planner.torch.trainer and through torch.compile(backend="planner") as PyTorch trains it, its
step's every op one both executors have a kernel for.

Tolerance: opinfo_cases.compare / torch_step.mismatches, 10x PyTorch's own float32 error
against float64 plus 16 ulps of the tensor's scale."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from tests.importers.opinfo_cases import check_call  # noqa: E402
from tests.importers.torch_step import Step, mismatches  # noqa: E402


def _xm(seed: int = 0, shape=(4, 5), p=0.4):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g), torch.rand(*shape, generator=g) > p


def _declared(x, m):
    s = x.masked_select(m)
    torch._check(s.size(0) <= 15)
    return s.mean()


CASES = {
    "masked_select.mean": lambda x, m: x.masked_select(m).mean(),
    "masked_select.sum": lambda x, m: x.masked_select(m).sum(),
    # exp(0) = 1: the rows past the count must be put back to zero before the sum
    "exp.sum": lambda x, m: torch.exp(x.masked_select(m)).sum(),
    "broadcast mask": lambda x, m: (x.masked_select(m[0]) * 3 + 1).mean(),
    "float64 mean": lambda x, m: x.masked_select(m).double().mean(),
    "bfloat16 mean": lambda x, m: x.masked_select(m).bfloat16().mean().float(),
    "rows.sum": lambda x, m: x[m[:, 0]].sum(0),
    "rows.mean": lambda x, m: torch.sigmoid(x[m[:, 1]]).mean(0),
    "rows.mean all": lambda x, m: x[m[:, 2]].mean(),
    "nonzero.mean": lambda x, m: (x > 0).nonzero().float().mean() + x.sum(),
    "argwhere.sum": lambda x, m: torch.argwhere(m).float().sum(0) + x.sum(0)[:2],
    "declared bound": _declared,
    # a comparison's false and where's -2 past the count would count without the zeroing
    "bool sum": lambda x, m: (x.masked_select(m) > 0).sum() + x.sum(),
    "where mean": lambda x, m: torch.where(x.masked_select(m) > 0, 1.0, -2.0).mean(),
    # row-wise readers: linear's bias and log_softmax of a zero row are no zeros
    "linear rows": lambda x, m: F.linear(x[m[:, 0]], x[:3], x[3, :3]).sum(),
    "log_softmax rows": lambda x, m: torch.log_softmax(x[m[:, 0]], dim=1).mean(),
    "addmm rows": lambda x, m: torch.addmm(x[0, :3], x[m[:, 0]], x.t()[:, :3]).exp().mean(),
    # views moving the counted dim
    "transpose": lambda x, m: torch.exp(x[m[:, 0]].t().unsqueeze(0)).sum(),
    "expand": lambda x, m: (x[m[:, 0]].unsqueeze(1).expand(-1, 2, -1) + 1).mean(),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_reference_matches_torch_forward_and_backward(name):
    x, m = _xm(1)
    if name == "declared bound":  # at most 15 selected, as declared
        m = torch.zeros_like(m)
        m.view(-1)[::2] = True
    assert check_call(CASES[name], x, m) == ("pass", "")


@pytest.mark.parametrize("mask", ["none", "all"])
def test_nothing_and_everything_selected(mask):
    """Of nothing, torch's mean is 0/0 = nan, and the planner's too; of everything, the bound."""
    x, _ = _xm(2)
    m = torch.zeros(4, 5, dtype=torch.bool) if mask == "none" else torch.ones(4, 5,
                                                                               dtype=torch.bool)
    assert check_call(lambda x, m: x.masked_select(m).mean(), x, m) == ("pass", "")


def _imported(fn, *args):
    from planner.importers.torch.convert import convert

    class M(torch.nn.Module):
        def forward(self, *a):
            return fn(*a)

    return convert(torch.export.export(M(), args))


def test_declared_bound_is_the_planned_size():
    x, m = _xm(3)
    m = torch.zeros_like(m)
    m[0] = True
    assert _selected(_imported(_declared, x, m).graph) == [(15,)]
    # without one, torch's own: the input's numel
    assert _selected(_imported(lambda x, m: x.masked_select(m).mean(), x, m).graph) == [(20,)]


def _selected(graph):
    """The shapes of the selected values (the Slice cutting the dropped rows' row off)."""
    shapes = {t.name: t.shape for t in graph.tensors}
    return [shapes[n.outputs[0]] for n in graph.nodes if n.op == "Slice"]


class Declared(torch.nn.Module):
    """A mean over at most 8 selected elements, as forward declares."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.linspace(-1.0, 1.0, 20).reshape(4, 5))

    def forward(self, x, m):
        s = (x * self.w).masked_select(m)
        torch._check(s.size(0) <= 8)
        return s.mean()


def _masks(kept: int) -> torch.Tensor:
    m = torch.zeros(4, 5, dtype=torch.bool)
    m.view(-1)[torch.randperm(20, generator=torch.Generator().manual_seed(kept))[:kept]] = True
    return m


def test_more_rows_than_declared_are_refused_when_the_step_runs(tmp_path):
    """Within the bound the step is torch's; past it torch's check raises, and so does the
    CPU executor (an index past the scatter's target), never a mean of the first 8."""
    from planner.torch import trainer

    x, _ = _xm(6)
    model = Declared()
    t = trainer(copy.deepcopy(model), (x, _masks(8)), loss=None, optimizer="sgd", lr=0.1,
                costs="analytical", out_dir=tmp_path)
    assert t.step(x, _masks(5)) == pytest.approx(float(model(x, _masks(5))), rel=1e-6)
    with pytest.raises(RuntimeError):
        model(x, _masks(9))
    with pytest.raises(Exception, match="out of range"):
        t.step(x, _masks(9))


def _unbounded(x, k):
    n = k.sum().item()
    torch._check_is_size(n)
    return x.sum() + torch.ones(n).sum()


def _even(x, m):
    s = x.masked_select(m)
    torch._check(s.size(0) % 2 == 0)
    return s.sum()


REFUSALS = {
    # a check the bound does not imply, which the planned step could not make
    "guard": (_even, "(aten._assert_scalar.default): torch checks Eq(Mod(u0, 2), 0) on a size "
                     "that depends on the data"),
    "no bound": (_unbounded, "node 'full' (aten.full.default): the size u0 of dim 0 depends "
                             "on the data and has no upper bound: declare one"),
    "sort": (lambda x, m: x.masked_select(m).sort()[0].sum(),
             "node 'sort' (aten.sort.default): reads 'masked_select', whose size [u0]"),
    "cumsum": (lambda x, m: x[m[:, 0]].cumsum(0).sum(),
               "node 'cumsum' (aten.cumsum.default): reads 'index', whose size [u0, 5]"),
    "softmax over the count": (
        lambda x, m: torch.softmax(x[m[:, 0]], 0).sum(),
        "node '_softmax' from softmax (aten._softmax.default): reads 'index', whose size [u0, 5]"),
    "unique": (lambda x, m: torch.unique(x).sum(),
               "node '_unique2' (aten._unique2.default): its output size depends on the data"),
    "numel": (lambda x, m: x.masked_select(m).sum() / x.masked_select(m).numel(),
              "(aten.div.Tensor): reads u1, a size that depends on the data, as a number"),
    "output": (lambda x, m: x.masked_select(m),
               "output 'masked_select': its size [u0] depends on the data"),
}


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_refusals_are_one_line_naming_the_node(name):
    fn, said = REFUSALS[name]
    x, m = _xm(4)
    args = (x, torch.ones(3, dtype=torch.long)) if name == "no bound" else (x, m)
    if name == "guard":
        m = torch.zeros_like(m)
        m.view(-1)[::2] = True
        args = (x, m)
    status, detail = check_call(fn, *args)
    assert status == "refused" and said in detail and "\n" not in detail, detail


def test_symbolic_trace_leaves_the_size_to_a_trace_of_its_own():
    """Traced with symbolic sizes, torch bounds masked_select by no number: that size is traced
    as it is (OutsideTrace), not planned at 2**63."""
    from planner.importers.torch.record import OutsideTrace
    from planner.importers.torch.specialize import SymbolicTrace

    class M(torch.nn.Module):
        def forward(self, x, m):
            return x.masked_select(m).mean()

    x, m = _xm(5)
    auto = {0: torch.export.Dim.AUTO, 1: torch.export.Dim.AUTO}
    program = torch.export.export(M(), (x, m), dynamic_shapes=(auto, auto))
    with pytest.raises(OutsideTrace, match="no bound in a trace of symbolic sizes"):
        SymbolicTrace(program).at((x, m))


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_both_executors_have_every_kernel_of_the_training_step(backend):
    """The bounded ops are compositions of existing ops: each executor runs the masked loss's
    training step with the kernels it has (codegen.support.check raises naming any gap)."""
    from codegen.backends import RUNTIMES
    from codegen.support import check
    from planner.frontend.autodiff import make_training_graph
    from planner.graph.optimizer import Optimizer
    from planner.importers.torch.convert import convert

    graph = convert(torch.export.export(MaskedTokens(), _batches()[0])).graph
    step = make_training_graph(graph, Optimizer(kind="sgd", lr=0.1))
    assert {"CumSum", "IndexScatter", "IndexGather"} <= {n.op for n in step.nodes}
    check(step, RUNTIMES[backend])


class MaskedTokens(torch.nn.Module):
    """A token classifier whose loss is over the valid tokens only."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Linear(6, 8)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x, y, mask):
        logits = self.head(torch.tanh(self.embed(x))).flatten(0, 1)
        loss = F.cross_entropy(logits, y.flatten(), reduction="none")
        return loss.masked_select(mask.flatten()).mean()


def _batches():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(3, 4, 6, generator=g), torch.randint(0, 5, (3, 4), generator=g),
             torch.rand(3, 4, generator=g) > 0.3) for _ in range(4)]


def _eager(model, batches, dtype, lr):
    model = copy.deepcopy(model).to(dtype)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for x, y, mask in batches:
        opt.zero_grad()
        value = model(x.to(dtype), y, mask)
        value.backward()
        opt.step()
    return Step(float(value.detach()), {k: v.detach().numpy().copy()
                                        for k, v in model.state_dict().items()})


def test_masked_token_loss_trains_as_pytorch(tmp_path):
    from planner.torch import trainer

    torch.manual_seed(0)
    model, batches, lr = MaskedTokens(), _batches(), 0.5
    t = trainer(copy.deepcopy(model), batches[0], loss=None, optimizer="sgd", lr=lr,
                costs="analytical", out_dir=tmp_path)
    for b in batches:
        value = t.step(*b)
    ours = Step(float(value), {k: np.asarray(v) for k, v in t.params().items()})
    f32, f64 = (_eager(model, batches, d, lr) for d in (torch.float32, torch.float64))
    assert not mismatches(ours, f32, f64, set(f64.state))
    assert not np.allclose(ours.state["head.bias"], model.head.bias.detach().numpy())


def test_masked_token_loss_trains_through_torch_compile():
    """With Dynamo capturing ops of data-dependent sizes, the whole step is one planned graph
    (no graph break) and trains as PyTorch does."""
    import torch._dynamo

    import planner.torch  # noqa: F401  (registers the backend)

    torch.manual_seed(0)
    model, batches, lr = MaskedTokens(), _batches(), 0.5
    mine = copy.deepcopy(model)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        step = torch.compile(mine, backend="planner",
                             options={"fallback": False, "costs": "analytical"})
        opt = torch.optim.SGD(mine.parameters(), lr=lr)
        for b in batches:
            opt.zero_grad()
            value = step(*b)
            value.backward()
            opt.step()
    assert not torch._dynamo.utils.counters["graph_break"]
    ours = Step(float(value.detach()), {k: v.detach().numpy().copy()
                                        for k, v in mine.state_dict().items()})
    f32, f64 = (_eager(model, batches, d, lr) for d in (torch.float32, torch.float64))
    assert not mismatches(ours, f32, f64, set(f64.state))
