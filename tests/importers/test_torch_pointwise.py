"""The pointwise table through the torch front end, against PyTorch in float64: per case a tiny
module whose parameters feed the op (a weighted sum of its result is the loss), exported,
imported, run forward and backward on the reference interpreter in float32; the loss and every
parameter's gradient are held to torch.autograd's in float64. Comparisons, logic, predicates,
casts and masks feeding where / arithmetic likewise, and the one-line refusal of a dtype an op
does not take."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from planner.frontend.autodiff import gradients  # noqa: E402
from planner.graph import run  # noqa: E402
from planner.importers.torch.context import TorchImportError  # noqa: E402
from planner.importers.torch.convert import convert  # noqa: E402
from planner.ops.pointwise_table import ROWS  # noqa: E402

SHAPE = (3, 4)
# float32's evaluation of a few roundings against float64 (norm-relative over the elements)
TOL = 2e-5


def _sample(kind: str, shape, rng) -> np.ndarray:
    if kind == "positive":
        return rng.uniform(0.5, 2.0, shape)
    if kind == "sym":
        return rng.uniform(-0.9, 0.9, shape)
    if kind == "gt1":
        return rng.uniform(1.1, 3.0, shape)
    return rng.standard_normal(shape)


class Params(nn.Module):
    """loss = sum(c * f(p0, p1, ...)) over float parameters p (c a fixed input)."""

    def __init__(self, f, values) -> None:
        super().__init__()
        self.f = f
        self.ps = nn.ParameterList([nn.Parameter(torch.tensor(v)) for v in values])

    def forward(self, c):
        return (c * self.f(*self.ps)).sum()


def _planner(module: Params, c: np.ndarray):
    """(loss, {param index: gradient or None}) on the reference interpreter, in float32."""
    m32 = module.to(torch.float32)
    program = torch.export.export(m32, (torch.tensor(c, dtype=torch.float32),))
    imported = convert(program)
    names = [t.name for t in imported.graph.by_role("param")]
    graph, grads = gradients(imported.graph, names)
    out = run(graph, {imported.inputs[0]: c.astype(np.float32)}, imported.params())
    loss = float(out[imported.graph.outputs[0]])
    by_index = {}
    for name in names:
        k = int(name.rsplit(".", 1)[-1])
        by_index[k] = None if grads[name] is None else out[grads[name]]
    return loss, by_index, imported.graph


def _torch64(f, values, c):
    ps = [torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in values]
    loss = (torch.tensor(c, dtype=torch.float64) * f(*ps)).sum()
    loss.backward()
    return float(loss), [p.grad.numpy() if p.grad is not None else np.zeros(p.shape)
                         for p in ps]


def _check(f, values, seed=0):
    c = np.random.default_rng(seed + 100).standard_normal(SHAPE)
    want_loss, want_grads = _torch64(f, values, c)
    loss, grads, graph = _planner(Params(f, values), c)
    assert abs(loss - want_loss) <= TOL * (1 + abs(want_loss)), (loss, want_loss)
    for k, want in enumerate(want_grads):
        got = grads.get(k)
        got = np.zeros(want.shape) if got is None else got.astype(np.float64)
        scale = max(float(np.linalg.norm(want)), 1.0)
        assert float(np.linalg.norm(got - want)) <= TOL * scale, (k, got, want)
    return graph


def _torch_fn(row):
    # The ATen op as torch's Python API spells it, else the ATen op itself (hardsigmoid and
    # special_entr live in torch.nn.functional and torch.special under other names).
    name = row.aten[0].split(".")[0]
    return getattr(torch, name, None) or getattr(torch.ops.aten, name)


ROW_CASES = [r for r in ROWS if r.aten and r.out == "same"]


@pytest.mark.parametrize("row", ROW_CASES, ids=[r.name for r in ROW_CASES])
def test_row_forward_and_gradient_match_torch(row):
    rng = np.random.default_rng(0)
    values = [_sample(d, SHAPE if k == 0 else SHAPE[1:], rng)
              for k, d in enumerate(row.inputs_domain)]
    graph = _check(_torch_fn(row), values)
    assert row.name in {n.op for n in graph.nodes}


NUMBER_CASES = {
    "fmod": lambda a: torch.fmod(a, -1.5),
    "remainder": lambda a: torch.remainder(a, 1.5),
    "lerp": lambda a, b: torch.lerp(a, b, 0.7),
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc") * a,
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor") * a,
    "floor_divide": lambda a, b: (a.detach() // b.detach()) * b,  # torch has no derivative
    "div_floor_number": lambda a: torch.div(a, 0.3, rounding_mode="floor") + a,
    "pow_tensors": lambda a, b: torch.pow(a.abs() + 0.5, b),
    "pow_number_base": lambda a: 2.0 ** a,
    "minimum": lambda a, b: torch.minimum(a, b),
    "maximum": lambda a, b: torch.maximum(a, b),
    "clamp_tensor": lambda a, b: torch.clamp(a, min=b, max=b + 1.0),
    "clamp_max_tensor": lambda a, b: torch.clamp(a, max=b),
    "clamp_max_number": lambda a: torch.clamp(a, max=0.2),
    "sign": lambda a: torch.sign(a) * a,
    "frac": lambda a: torch.frac(a * 3.0),
    "square": lambda a: torch.square(a),
    "rsqrt": lambda a: torch.rsqrt(a.abs() + 0.5),
    "logaddexp_tie": lambda a: torch.logaddexp(a, a),
    "xlogy_zero": lambda a, b: torch.xlogy(torch.where(a > 0, a, 0.0), b.abs() + 0.1),
}


@pytest.mark.parametrize("name", sorted(NUMBER_CASES))
def test_scalar_overloads_and_other_rules_match_torch(name):
    f = NUMBER_CASES[name]
    arity = f.__code__.co_argcount
    rng = np.random.default_rng(1)
    _check(f, [rng.standard_normal(SHAPE if k == 0 else SHAPE[1:]) for k in range(arity)])


MASKS = {
    "lt_where": lambda a, b: torch.where(a < b, a * 2.0, b),
    "eq_scalar_cast": lambda a, b: (torch.round(a) == 0).float() * b + a,
    "ne_masked_fill": lambda a, b: a.masked_fill(a.round() != b.round(), 0.5),
    "ge_le_mul": lambda a, b: a * (a >= 0.1) - b * (b <= -0.2),
    "gt_int_cast": lambda a, b: (a > b).to(torch.int64) * a,
    "logical": lambda a, b: torch.where(torch.logical_and(a > 0, torch.logical_not(b > 0)) |
                                        torch.logical_xor(a < -1, b < -1), a, b * 3.0),
    "logical_or": lambda a, b: torch.where(torch.logical_or(a > 1, b > 1), a, -b),
    "bitwise_bool": lambda a, b: torch.where(((a > 0) & (b > 0)) ^ ~(a < 1), a, b),
    "isnan_isinf": lambda a, b: torch.where(torch.isnan(a / (b - b)), a, b)
                                + torch.where(torch.isinf(a / (a - a)), b, 0.0),
    "bool_product": lambda a, b: torch.where((a > 0) * (b > 0), a, b),
    "isfinite": lambda a, b: torch.where(torch.isfinite(torch.log(a)), a, b),
    "cast_bool_round_trip": lambda a, b: a.round().to(torch.bool).to(torch.float32) * b,
    "cast_int32": lambda a, b: (a * 3.0).to(torch.int32).to(torch.float32) * b,
    "cast_int64_int32": lambda a, b: (a * 3.0).to(torch.int64).to(torch.int32).float() + b,
    "cast_low_floats": lambda a, b: a.to(torch.bfloat16).to(torch.float16).float() * b,
    "cast_bool_to_int": lambda a, b: (a > 0).to(torch.int32).to(torch.float32) + b,
}


@pytest.mark.parametrize("name", sorted(MASKS))
def test_comparisons_logic_casts_and_masks_match_torch(name):
    rng = np.random.default_rng(2)
    values = [rng.standard_normal(SHAPE), rng.standard_normal(SHAPE)]
    if name == "cast_low_floats":  # exact in both low types: the round trip is the identity
        values[0] = np.round(values[0] * 8) / 8
    _check(MASKS[name], values)


class IntFmod(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(3))

    def forward(self, i):
        return torch.fmod(i, 3).float() * self.w


def test_an_op_refuses_a_dtype_in_one_line_naming_node_module_and_dtype():
    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = IntFmod()

        def forward(self, i):
            return self.inner(i)

    program = torch.export.export(Outer(), (torch.arange(3),))
    with pytest.raises(TorchImportError) as e:
        convert(program)
    message = str(e.value)
    assert "\n" not in message
    for part in ("fmod", "inner", "aten.fmod.Scalar", "int64", "Fmod does not take"):
        assert part in message, message


def test_comparisons_of_integer_tensors_give_bool():
    class Ints(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.ones(4))

        def forward(self, i, j):
            return torch.where((i < j) | (i == 2), self.w, -self.w)

    i, j = torch.tensor([0, 3, 2, 5]), torch.tensor([1, 1, 1, 9])
    imported = convert(torch.export.export(Ints(), (i, j)))
    kinds = {n.op: imported.graph.tensor(n.outputs[0]).dtype for n in imported.graph.nodes}
    assert kinds["Less"] == kinds["Equal"] == kinds["Or"] == "bool"
    got = run(imported.graph, dict(zip(imported.inputs, (i.numpy(), j.numpy()), strict=True)),
              imported.params(), keep="outputs")[imported.graph.outputs[0]]
    np.testing.assert_array_equal(got, Ints()(i, j).detach().numpy())


# ---- the CPU executor: a model of masks, casts and table rows, trained ----------------------

class Gated(nn.Module):
    """Masks from comparisons feeding where and arithmetic, casts of them, and table rows
    (log1p, atan2, remainder, hypot) in the forward pass."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 8)
        self.out = nn.Linear(8, 4)

    def forward(self, x):
        h = self.fc(x)
        keep = (h > -0.3) & ~torch.isnan(h)
        h = torch.where(keep, h, 0.1 * h) + keep.to(torch.int32).to(torch.float32) * 0.05
        h = torch.log1p(h.abs()) + torch.atan2(h, h.abs() + 1.0)
        h = h + 0.1 * torch.remainder(h, 0.7) + 0.1 * torch.hypot(h, x[:, :1])
        return self.out(h)


def focal(out, onehot):
    """A focal-style loss: (p - 1)^2 weighting, the true class by a one-hot mask."""
    p = torch.softmax(out, dim=1)
    chosen = torch.where(onehot > 0.5, p, torch.ones_like(p))
    return ((p - 1.0) ** 2 * -torch.log(chosen)).sum() / out.shape[0]


def _torch_train(model, batches, dtype):
    import copy

    from tests.importers.torch_step import Step

    model = copy.deepcopy(model).to(dtype)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in batches:
        opt.zero_grad()
        value = focal(model(x.to(dtype)), y.to(dtype))
        value.backward()
        opt.step()
    return Step(float(value), {k: v.detach().numpy().copy()
                               for k, v in model.state_dict().items()})


def test_masks_casts_and_rows_train_on_the_cpu_executor_like_pytorch(tmp_path):
    import planner.torch
    from tests.importers.torch_step import Step, mismatches

    torch.manual_seed(0)
    model = Gated()
    batches = []
    for _ in range(3):
        x = torch.randn(5, 6)
        batches.append((x, torch.nn.functional.one_hot(torch.randint(0, 4, (5,)), 4).float()))
    x0, y0 = batches[0]
    t = planner.torch.trainer(model, (x0,), loss=focal, labels=y0, lr=0.1, out_dir=tmp_path)
    ops = {n.op for n in t.imported.graph.nodes}
    assert {"Greater", "IsNaN", "Not", "And", "Log1p", "Atan2", "Remainder", "Hypot"} <= ops
    assert {"bool", "int32"} <= {x.dtype for x in t.imported.graph.tensors}
    losses = [t.step(x, y) for x, y in batches]
    ours = Step(losses[-1], t.params())
    assert mismatches(ours, _torch_train(model, batches, torch.float32),
                      _torch_train(model, batches, torch.float64)) == []
