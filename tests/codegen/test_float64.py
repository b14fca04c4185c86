"""float64 on the CPU executor: the kernels that declare it against the numpy reference in
float64 (the MLP's, and the convolutions', normalisations', softmaxes', gathers' and
scatters', which tests/codegen/test_float64_layers.py also holds to torch through the front
end, and the pools' and losses', which tests/codegen/test_float64_pools_losses.py does), a
float64 physics-informed MLP trained through both torch doors against torch in float64, an op
without a float64 kernel refused in one line, and embedding lookups of int32 / int16 / int8 /
uint8 ids bit for bit.

Tolerances, from float64 rounding (u = 2^-53, 1.1e-16):
  - a kernel's element is a few roundings (u each) or libm's tanh / exp / erf (<= 2 ulp), or a
    sum of at most a few hundred terms (a convolution's taps, a normalised row or channel:
    <= n u of the terms' magnitudes, summed in another order than numpy's): 1e-12 of the
    output's largest |value| is ~10^4 u, room for those and for the cancellation of a sum,
    far below any real error (a wrong term shows at 1e-2);
  - five Adam steps of a 3-layer tanh MLP: each step's gradients carry ~10 u (the GEMMs'
    sums of <= 64 terms in BLAS's order against MKL's), and Adam divides m by sqrt(v): in the
    first steps (m / sqrt v ~ g / |g|) that ratio's relative error is that of g, so a
    parameter moves by lr (1 + ~1e-15); over 5 steps the parameters and losses agree to
    ~1e-14 relative, and 1e-12 leaves margin. lr = 2^-10, a float32 value (the step reads its
    lr as a float32 scalar: docs/executor.md, "dtypes").
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from codegen.backends import RUNTIMES
from codegen.errors import UnsupportedError
from codegen.support import check
from planner.graph.builder import GraphBuilder
from planner.ops import get_op
from tests.codegen.helpers import build_module
from tests.codegen.op_cases import VARIANTS, nodes_graph
from tests.helpers.float64_params import assert_params_close

torch = pytest.importorskip("torch")
F = torch.nn.functional

F64_TOL = 1e-12
LR = 2.0 ** -10
# The ops with float64 kernels: an MLP's step, convolutions, normalisations, softmaxes, pools,
# losses and their neighbours, and the gathers and scatters of float64 values by int64 indices.
F64_OPS = frozenset(op for op, sets in RUNTIMES["cpu"].kernel_dtypes.items()
                    if set(sets) & {frozenset({"float64"}), frozenset({"float32", "float64"}),
                                    frozenset({"float64", "int64"})})


def _as_f64(op: str, xs: list[np.ndarray]) -> list[np.ndarray] | None:
    """The variant's float32 tensors in float64 (an update's 0-d lr, wd and step count stay
    float32 scalars); None for a variant a float64 kernel does not take (a folded bias)."""
    update = get_op(op).name in ("SGD", "ApplyMomentum", "ApplyAdam")
    out = [x.astype(np.float64) if x.dtype == np.float32 and not (update and x.ndim == 0)
           else x for x in xs]
    return out if any(x.dtype == np.float64 for x in out) else None


def _admitted(op: str, attrs: dict, xs: list[np.ndarray]) -> bool:
    """Whether the CPU executor's kernel of `op` takes these inputs (and the outputs the
    reference gives them), not folding a bias or an activation (float32's alone)."""
    if attrs.get("activation", "none") != "none" or (op == "MatMul" and len(xs) == 3):
        return False
    opdef = get_op(op)
    with np.errstate(all="ignore"):
        outs = opdef.reference(list(xs), opdef.normalize_attrs(attrs))
    return RUNTIMES["cpu"].admits(op, [str(x.dtype) for x in xs], [str(y.dtype) for y in outs])


def _f64_variants():
    out = []
    for label, op, attrs, xs in VARIANTS:
        if op not in F64_OPS or op in ("Cast", "Embedding", "EmbeddingGrad"):
            continue
        wide = _as_f64(op, xs)
        if wide is not None and _admitted(op, attrs, wide):
            out.append((label, op, attrs, wide))
    return out


F64_VARIANTS = _f64_variants()


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    graph, feeds, outs = nodes_graph("float64_kernels", F64_VARIANTS)
    module = build_module(graph, tmp_path_factory.mktemp("f64") / "float64_kernels", "cpu")
    got = module.Executor().forward(feeds)
    return {label: [got[o] for o in names] for label, names in outs.items()}


@pytest.mark.parametrize("label,op,attrs,xs", F64_VARIANTS, ids=[v[0] for v in F64_VARIANTS])
def test_float64_kernel_matches_reference(label, op, attrs, xs, executed):
    opdef = get_op(op)
    with np.errstate(all="ignore"):
        want = opdef.reference(list(xs), opdef.normalize_attrs(attrs))
    for k, (got, ref) in enumerate(zip(executed[label], want, strict=True)):
        got, ref = np.asarray(got), np.asarray(ref)
        assert got.dtype == ref.dtype and got.shape == ref.shape, f"output {k}"
        if got.dtype.kind != "f":
            assert np.array_equal(got, ref), f"output {k}"
            continue
        assert np.array_equal(np.isnan(got), np.isnan(ref)), f"output {k}: NaN places"
        inf = np.isinf(ref)
        assert np.array_equal(got[inf], ref[inf]), f"output {k}: infinities"
        finite = np.isfinite(ref)
        if finite.any():
            scale = max(float(np.abs(ref[finite]).max()), 1e-300)
            err = float(np.abs(got[finite] - ref[finite]).max()) / scale
            assert err <= F64_TOL, f"output {k}: rel. error {err:.2e}"


def test_the_float64_cases_cover_the_mlp_ops():
    ran = {op for _, op, _, _ in F64_VARIANTS}
    assert {"MatMul", "BiasAdd", "BiasAddGrad", "Tanh", "TanhGrad", "MSE", "MSEGrad",
            "ReduceSum", "ReduceMean", "ApplyAdam", "SGD", "ApplyMomentum"} <= ran


def test_the_float64_cases_cover_the_pools_and_losses():
    ran = {op for _, op, _, _ in F64_VARIANTS}
    assert {"MaxPool", "MaxPoolGrad", "AvgPool", "AvgPoolGrad", "MaxPoolND", "AvgPoolND",
            "AvgPoolNDGrad", "PoolScatter", "PoolGather", "SoftmaxCrossEntropy",
            "SoftmaxCrossEntropyGrad", "NLLLoss", "NLLLossGrad", "SigmoidBCE",
            "SigmoidBCEGrad", "Softplus"} <= ran


def test_an_op_without_a_float64_kernel_is_refused_naming_it():
    b = GraphBuilder("leaky_relu64")
    x = b.input("x", (4, 3), "float64")
    (y,) = b.op_n("LeakyRelu", [x], {"alpha": 0.1})
    graph = b.build(outputs=[y])
    with pytest.raises(UnsupportedError, match=r"no kernel for op LeakyRelu in float64") as e:
        check(graph, RUNTIMES["cpu"])
    assert "\n" not in str(e.value)


class Pinn(torch.nn.Module):
    """A physics-informed network's trunk: u(x, t) by Linear-Tanh three times, then Linear."""

    def __init__(self, width: int = 32):
        super().__init__()
        layers = []
        for k in range(3):
            layers += [torch.nn.Linear(2 if k == 0 else width, width), torch.nn.Tanh()]
        self.net = torch.nn.Sequential(*layers, torch.nn.Linear(width, 1))

    def forward(self, xt):
        return self.net(xt)


def _pinn_data(steps: int = 5):
    g = torch.Generator().manual_seed(3)
    xt = torch.rand(64, 2, generator=g, dtype=torch.float64) * 2 - 1
    u = torch.sin(torch.pi * xt[:, :1]) * torch.exp(-xt[:, 1:])
    return [(xt, u)] * steps


def _torch_run(model, data):
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    losses = []
    for xt, u in data:
        loss = F.mse_loss(model(xt), u)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_pinn_mlp_trains_through_the_trainer_as_torch_float64(tmp_path):
    from planner.torch import trainer

    torch.manual_seed(0)
    model = Pinn().double()
    data = _pinn_data()
    t = trainer(copy.deepcopy(model), (data[0][0],), loss=F.mse_loss, labels=data[0][1],
                optimizer="adam", lr=LR, out_dir=tmp_path, costs="analytical")
    ours = [float(t.step(xt, u)) for xt, u in data]
    want = _torch_run(model, data)
    assert ours == pytest.approx(want, rel=F64_TOL)
    assert want[-1] < want[0]  # it trained
    assert_params_close(t.params(), dict(model.named_parameters()), F64_TOL)


def test_pinn_mlp_trains_through_the_backend_as_torch_float64():
    from tests.helpers.compile_cases import compiled

    torch.manual_seed(0)
    model = Pinn().double()
    ref = copy.deepcopy(model)
    data = _pinn_data()
    got = _torch_run(compiled(model, fallback=False), data)
    want = _torch_run(ref, data)
    assert got == pytest.approx(want, rel=F64_TOL)
    assert_params_close(dict(model.named_parameters()), dict(ref.named_parameters()),
                        F64_TOL)


@pytest.mark.parametrize("ids_dtype", ["int32", "int16", "int8", "uint8"])
def test_embedding_of_small_integer_ids_is_bit_for_bit(ids_dtype, tmp_path):
    rng = np.random.default_rng(4)
    table = {"float32": rng.standard_normal((100, 6)).astype(np.float32),
             "float64": rng.standard_normal((100, 6))}
    ids = rng.integers(0, 100, (5, 7)).astype(ids_dtype)
    dy = {d: rng.standard_normal((5, 7, 6)).astype(d) for d in table}
    b = GraphBuilder("small_ids")
    i = b.input("ids", ids.shape, ids_dtype)
    outs = []
    for d, tab in table.items():
        w = b.input(f"table_{d}", tab.shape, d)
        g = b.input(f"dy_{d}", dy[d].shape, d)
        outs += b.op_n("Embedding", [w, i], {})
        outs += b.op_n("EmbeddingGrad", [i, g], {"num_embeddings": 100})
    module = build_module(b.build(outputs=outs), tmp_path / "small_ids", "cpu")
    got = module.Executor().forward({"ids": ids, **{f"table_{d}": t for d, t in table.items()},
                                     **{f"dy_{d}": v for d, v in dy.items()}})
    for k, d in enumerate(table):
        assert np.array_equal(got[outs[2 * k]], table[d][ids.astype(np.int64)])
        want = np.zeros_like(table[d])
        np.add.at(want, ids.astype(np.int64), dy[d])
        assert np.array_equal(got[outs[2 * k + 1]], want)


@pytest.mark.parametrize("ids_dtype,widen", [("uint8", "long"), ("int8", "int"),
                                             ("int16", "long")])
def test_small_integer_token_ids_look_up_through_the_backend_bit_for_bit(ids_dtype, widen):
    """torch's embedding takes int64 or int32 indices only: byte tokens are widened in the
    model (a Cast in the plan), then looked up, a float64 table's rows exactly."""
    from tests.helpers.compile_cases import compiled

    class TokenEmbedding(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(128, 8, dtype=torch.float64)

        def forward(self, tokens):
            return self.emb(getattr(tokens, widen)()) * 2.0

    torch.manual_seed(0)
    model = TokenEmbedding()
    tokens = torch.randint(0, 128, (4, 9)).to(getattr(torch, ids_dtype))
    with torch.no_grad():
        got = compiled(model, fallback=False)(tokens)
        want = model(tokens)
    assert torch.equal(got, want)


def test_a_float64_lr_float32_does_not_hold_is_said_once(tmp_path, capsys):
    """The step's lr is a float32 scalar: a float64 model's lr of 1e-3 steps at
    1e-3 (1 + 4.7e-8), said in one line naming the group and both values; 2^-10 says nothing."""
    from planner.torch import trainer

    for lr, said in ((1e-3, True), (LR, False)):
        model = Pinn().double()
        data = _pinn_data(2)
        opt = torch.optim.Adam(model.parameters(), lr=lr)
        t = trainer(model, (data[0][0],), loss=F.mse_loss, labels=data[0][1], optimizer=opt,
                    out_dir=tmp_path / str(lr), costs="analytical")
        capsys.readouterr()
        for xt, u in data:
            t.step(xt, u)
        lines = [x for x in capsys.readouterr().err.splitlines() if "float64 parameters" in x]
        if said:
            assert len(lines) == 1 and "param_groups[0] lr 0.001" in lines[0], lines
            assert repr(float(np.float32(1e-3))) in lines[0]
        else:
            assert not lines, lines
