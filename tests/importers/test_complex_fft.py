"""Complex values and the DFT family through the torch front end
(planner/importers/torch/rules_complex.py): each lowered op against torch (forward and the
gradient of a real-in, real-out program, on the reference interpreter, held to torch float64
with torch's float32 noise as the tolerance: opinfo_cases.check_call); the family on the CPU
executor's FFT kernel (pocketfft) against torch float64 within an FFT's normwise error bound,
and the kernel alone on 1 and 2 threads (the same bits); FNet's token mixing and a
rotary-embedding attention trained through planner.torch.trainer and run through
torch.compile(backend="planner") as eager does; torch.istft (forward and gradient on the
reference interpreter, and an stft/istft round trip on the CPU executor in float32 and
float64); and the one-line refusals."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from planner.importers.torch.context import TorchImportError  # noqa: E402
from planner.importers.torch.convert import convert  # noqa: E402
from tests.importers.opinfo_cases import check_call, compare  # noqa: E402
from tests.importers.torch_step import Step, mismatches  # noqa: E402

EPS32 = float(np.finfo(np.float32).eps)
vr, vc = torch.view_as_real, torch.view_as_complex


def _real(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


X, Z = _real(3, 8, 6), _real(3, 8, 6, 2, seed=1)  # a real signal; a complex one's planes

# Each: a real-in, real-out program over one complex or FFT op (complex values inside only).
CASES = {
    "fnet_mixing": (lambda x: torch.fft.fft(torch.fft.fft(x, dim=-1), dim=-2).real, X),
    "rfft": (lambda x: vr(torch.fft.rfft(x)), X),
    "rfft_n_ortho": (lambda x: vr(torch.fft.rfft(x, n=9, norm="ortho")), X),
    "rfft_crop_forward": (lambda x: vr(torch.fft.rfft(x, n=4, dim=1, norm="forward")), X),
    "fft_of_real": (lambda x: vr(torch.fft.fft(x, dim=0)), X),
    "fft_prime_97": (lambda x: vr(torch.fft.fft(x, n=97, norm="ortho")), X),
    "rfft_4099": (lambda x: vr(torch.fft.rfft(x, n=4099)), X),
    "irfft_odd_2049": (lambda z: torch.fft.irfft(vc(z), n=2049, norm="forward"), Z),
    "ifft_n": (lambda z: vr(torch.fft.ifft(vc(z), n=5, dim=0)), Z),
    "ifft_ortho": (lambda z: vr(torch.fft.ifft(vc(z), norm="ortho")), Z),
    "irfft": (lambda z: torch.fft.irfft(vc(z), dim=1), Z),
    "irfft_n_forward": (lambda z: torch.fft.irfft(vc(z), n=7, norm="forward"), Z),
    "irfft_odd_ortho": (lambda z: torch.fft.irfft(vc(z), n=11, norm="ortho"), Z),
    "fft2_ortho": (lambda z: vr(torch.fft.fft2(vc(z), norm="ortho")), Z),
    "ifft2": (lambda z: vr(torch.fft.ifft2(vc(z), s=(3, 9))), Z),
    "rfft2": (lambda x: vr(torch.fft.rfft2(x)), X),
    "irfft2_s": (lambda z: torch.fft.irfft2(vc(z), s=(5, 8)), Z),
    "fftn": (lambda x: vr(torch.fft.fftn(x)), X),
    "ifftn_s": (lambda z: vr(torch.fft.ifftn(vc(z), s=(4, 4), dim=(0, 2))), Z),
    "rfftn_forward": (lambda x: vr(torch.fft.rfftn(x, norm="forward")), X),
    "irfftn": (lambda z: torch.fft.irfftn(vc(z)), Z),
    "hfft": (lambda z: torch.fft.hfft(vc(z)), Z),
    "ihfft": (lambda x: vr(torch.fft.ihfft(x).resolve_conj()), X),
    "abs_angle": (lambda z: vc(z).abs() + vc(z).angle(), Z),
    "conj_mul": (lambda z: vr(vc(z).conj() * vc(z).flip(0)), Z),
    "mul_real_and_scalar": (lambda z: vr(vc(z) * z[..., 0] * 3 + 1), Z),
    "div": (lambda z: vr(vc(z) / (vc(z).flip(1) + 1)), Z),
    "div_real": (lambda z: vr(vc(z) / (z[..., 0].abs() + 1) / 2), Z),
    "polar": (lambda x: vr(torch.polar(x.abs(), x)), X),
    "complex_real_imag": (lambda x: (torch.complex(x, x * 2) * 3).real
                          + torch.complex(x, x.flip(0)).imag, X),
    "exp": (lambda z: vr(torch.exp(vc(z))), Z),
    "matmul": (lambda z: vr(vc(z)[:, :, :6] @ vc(z).transpose(1, 2)[0]), _real(3, 6, 6, 2)),
    "matmul_by_a_real_valued": (lambda z: vr(vc(z) @ torch.complex(
        z[0, :, :, 1].T, torch.zeros(6, 8))), Z),
    "cat_sum_mean_repeat": (lambda z: vr(torch.cat([vc(z), vc(z) * 2], dim=-1).sum(-2)
                                         + vc(z).mean(1).repeat(1, 2)), Z),
    "pad_slice_permute": (lambda z: vr(F.pad(vc(z), (1, 2))[1:, ::2].permute(2, 0, 1)), Z),
    "stack_unbind": (lambda z: vr(torch.stack(vc(z).unbind(1)[::3], dim=-1)), Z),
    # a complex constant made in forward from constants alone: torch folds it at import
    "folded_polar_constant": (lambda z: vr(vc(z) * torch.polar(torch.ones(6),
                                                               torch.arange(6.0))), Z),
    "stft_magnitude": (lambda x: torch.stft(x, n_fft=8, hop_length=2,
                                            window=torch.hann_window(8),
                                            return_complex=True).abs(), _real(2, 40)),
    # istft: irfft of each frame, the window, overlap-add, divided by the window's envelope,
    # the centre padding cut (torch's decomposition, its index arithmetic folded at import)
    "istft": (lambda z: torch.istft(vc(z), n_fft=8, hop_length=2, window=torch.hann_window(8)),
              _real(2, 5, 21, 2, seed=3)),
    "istft_win_length_length": (lambda z: torch.istft(vc(z), n_fft=8, hop_length=3,
                                                      win_length=6, window=torch.hann_window(6),
                                                      length=50, normalized=True),
                                _real(2, 5, 17, 2, seed=3)),
    "istft_two_sided": (lambda z: torch.istft(vc(z), n_fft=8, hop_length=2, onesided=False,
                                              window=torch.hann_window(8)),
                        _real(2, 8, 21, 2, seed=3)),
    "istft_of_stft": (lambda x: torch.istft(torch.stft(x, n_fft=16, hop_length=4,
                                                       window=torch.hann_window(16),
                                                       return_complex=True),
                                            n_fft=16, hop_length=4,
                                            window=torch.hann_window(16), length=60),
                      _real(3, 60, seed=4)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_lowered_op_matches_torch_forward_and_gradient(name):
    fn, x = CASES[name]
    assert check_call(fn, x) == ("pass", "")


def _imported_run(fn, x):
    from planner.graph.interpret import run

    class M(torch.nn.Module):
        def forward(self, x):
            return fn(x)

    imported = convert(torch.export.export(M(), (x,)), name="long")
    (out,) = imported.graph.outputs
    return np.asarray(run(imported.graph, {imported.inputs[0]: x.numpy()},
                          imported.params())[out], np.float64)


def _complex(*shape, seed=0):
    return _real(*shape, 2, seed=seed)


# Each: (a real-in, real-out program of one transform, its input, the transformed points N):
# every function of the family, every norm, n / s crops and pads, odd, prime (97, 4099:
# Bluestein's algorithm) and past-2048 lengths, a transform along an outer dim.
EXECUTOR_CASES = {
    "fft_97": (lambda z: vr(torch.fft.fft(vc(z))), _complex(3, 97), 97),
    "ifft_4099_ortho": (lambda z: vr(torch.fft.ifft(vc(z), norm="ortho")), _complex(2, 4099),
                        4099),
    "fft_2500_outer_dim": (lambda z: vr(torch.fft.fft(vc(z), dim=0, norm="forward")),
                           _complex(2500, 3), 2500),
    "rfft_3000_forward": (lambda x: vr(torch.fft.rfft(x, norm="forward")), _real(2, 3000),
                          3000),
    "rfft_n_pad_97": (lambda x: vr(torch.fft.rfft(x, n=97)), _real(3, 50), 97),
    "irfft_4099": (lambda z: torch.fft.irfft(vc(z), n=4099), _complex(2, 2050), 4099),
    "irfft_crop_ortho": (lambda z: torch.fft.irfft(vc(z), n=30, norm="ortho"),
                         _complex(3, 40), 30),
    "hfft_forward": (lambda z: torch.fft.hfft(vc(z), n=97, norm="forward"), _complex(2, 49),
                     97),
    "ihfft_ortho": (lambda x: vr(torch.fft.ihfft(x, norm="ortho").resolve_conj()),
                    _real(2, 97), 97),
    "fft2_s": (lambda z: vr(torch.fft.fft2(vc(z), s=(13, 8))), _complex(2, 12, 10), 104),
    "ifft2_forward": (lambda z: vr(torch.fft.ifft2(vc(z), norm="forward")),
                      _complex(2, 9, 16), 144),
    "rfftn_ortho": (lambda x: vr(torch.fft.rfftn(x, norm="ortho")), _real(2, 9, 16), 288),
    "irfftn_s_odd": (lambda z: torch.fft.irfftn(vc(z), s=(9, 15)), _complex(2, 9, 9), 135),
    "irfft2_ortho": (lambda z: torch.fft.irfft2(vc(z), norm="ortho"), _complex(2, 6, 5), 48),
}


def _all_transforms(*xs):
    return tuple(fn(x) for (fn, _, _), x in zip(EXECUTOR_CASES.values(), xs, strict=True))


def _values_and_gradients(fn, xs, cots, dtype):
    leaves = [x.detach().to(dtype).clone().requires_grad_(True) for x in xs]
    outs = fn(*leaves)
    sum((o * c.to(dtype)).sum() for o, c in zip(outs, cots, strict=True)).backward()
    return [o.detach().numpy() for o in outs], [x.grad.numpy() for x in leaves]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_transforms_on_the_executor_within_the_fft_error_bound(dtype):
    """Every case through torch.compile(backend="planner") on the CPU executor (pocketfft),
    one compiled program, each case its own input: values and each input's gradient against
    torch in float64. An FFT's error is normwise: ||computed - exact|| <= c log2(N) eps ||exact||
    (Higham, Accuracy and Stability, 24.1; pocketfft's twiddles are accurate to an ulp), c a
    small constant; Bluestein's prime lengths run three transforms of a padded length up to
    4N, so log2(4N) here and c = 4. A wrong twiddle, sign, scale or mirrored bin is off by
    O(1) of the norm."""
    from tests.helpers.compile_cases import compiled

    xs = [x for _, x, _ in EXECUTOR_CASES.values()]
    with torch.no_grad():
        outs = _all_transforms(*xs)
    cots = [_real(*o.shape, seed=50 + k) for k, o in enumerate(outs)]
    got = _values_and_gradients(compiled(_all_transforms, fallback=False), xs, cots, dtype)
    want = _values_and_gradients(_all_transforms, xs, cots, torch.float64)
    eps = float(torch.finfo(dtype).eps)
    for k, (name, (_, _, points)) in enumerate(EXECUTOR_CASES.items()):
        bound = 4 * math.log2(4 * points) * eps
        for what, side in (("value", 0), ("gradient", 1)):
            ours, exact = got[side][k], want[side][k]
            assert ours.dtype == torch.empty(0, dtype=dtype).numpy().dtype
            err = np.linalg.norm(ours - exact) / np.linalg.norm(exact)
            assert err <= bound, f"{name} {what}: normwise error {err:.2e} > {bound:.2e}"


def test_the_fft_kernel_matches_numpy_on_every_thread_count(tmp_path):
    """The FFT op alone on the CPU executor at 1 and 2 threads: the same bits (the lines'
    pieces are fixed by the sizes, not the team), and the numpy reference (float64) within the
    normwise bound above, float32 and float64: a prime length past 2048 (Bluestein), two axes
    with inner strides, an inverse with a scale."""
    from planner.costs.signature import OpSignature
    from planner.ops import get_op
    from tests.codegen.helpers import ops_on_threads

    cases = [((8, 4099, 2), {"axes": [1], "inverse": False, "scale": 1.0}, 4099),
             ((16, 97, 33, 2), {"axes": [0, 1], "inverse": True, "scale": 0.25}, 16 * 97),
             ((6, 3000, 2), {"axes": [-1], "inverse": True, "scale": 1 / 3000}, 3000)]
    sigs = [OpSignature(op="FFT", shapes=(shape,), dtypes=(dtype,), attrs=attrs)
            for shape, attrs, _ in cases for dtype in ("float32", "float64")]
    feeds, got, _ = ops_on_threads(sigs, tmp_path, seed=11)
    op = get_op("FFT")
    for k, sig in enumerate(sigs):
        assert np.array_equal(got[1][k], got[2][k]), sig
        x = feeds[k]["in0"].astype(np.float64)
        want = op.reference([x], op.normalize_attrs(sig.attrs))[0]
        eps = float(np.finfo(sig.dtypes[0]).eps)
        err = np.linalg.norm(got[1][k] - want) / np.linalg.norm(want)
        assert err <= 4 * math.log2(4 * cases[k // 2][2]) * eps, (sig, err)


def _istft_round_trip(x):
    window = torch.hann_window(16, dtype=x.dtype)
    spectrum = torch.stft(x, n_fft=16, hop_length=4, window=window, return_complex=True)
    return torch.istft(spectrum * 2, n_fft=16, hop_length=4, window=window, length=x.shape[-1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_istft_round_trip_on_the_executor_as_torch(dtype):
    """stft then istft (a spectrum scaled by 2: the signal back, doubled) through
    torch.compile(backend="planner") on the CPU executor, forward and the gradient of the
    signal against torch: float32 within its noise over torch float64 (opinfo_cases.compare);
    float64 to 1e-12 of the largest value (each sample a dense DFT's sums of 16 terms, twice,
    and an overlap of 4 frames: ~10^2 u)."""
    from tests.helpers.compile_cases import compiled

    x = _real(2, 64, seed=5)
    cot = _real(2, 64, seed=6)

    def run(fn, d):
        leaf = x.detach().to(d).clone().requires_grad_(True)
        out = fn(leaf)
        (out * cot.to(d)).sum().backward()
        return out.detach().numpy(), leaf.grad.numpy()

    got = run(compiled(_istft_round_trip, fallback=False), dtype)
    want64 = run(_istft_round_trip, torch.float64)
    np.testing.assert_allclose(want64[0], 2 * x.double().numpy(), atol=1e-12)  # the identity
    if dtype == torch.float64:
        for ours, want in zip(got, want64, strict=True):
            assert ours.dtype == np.float64
            assert np.abs(ours - want).max() <= 1e-12 * np.abs(want).max()
        return
    want32 = run(_istft_round_trip, torch.float32)
    for what, ours, t32, t64 in zip(("output", "gradient"), got, want32, want64, strict=True):
        assert not compare(what, ours, t32, t64)


# ---- refusals --------------------------------------------------------------------------------

class _Fn(torch.nn.Module):
    def __init__(self, fn, weight=None):
        super().__init__()
        self.fn = fn
        if weight is not None:
            self.w = torch.nn.Parameter(weight)

    def forward(self, x):
        return self.fn(self, x)


def _refusal(module, x):
    with pytest.raises(TorchImportError) as e:
        convert(torch.export.export(module, (x,)))
    message = str(e.value)
    assert "\n" not in message
    return message


def test_a_complex_output_is_refused_in_one_line():
    """Where the caller does not take a complex output's planes (convert's complex_outputs:
    the trainer does), a complex output is refused."""
    message = _refusal(_Fn(lambda m, x: torch.fft.rfft(x)), X)
    assert "output" in message and "complex" in message and "view_as_real" in message


class _Spectrum(torch.nn.Module):
    """Its own loss first, then a complex output (the spectrum of a linear layer's output)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        z = torch.fft.rfft(self.lin(x))
        return z.abs().pow(2).mean(), z


def test_a_complex_output_comes_out_of_the_trainer_as_complex_numbers(tmp_path):
    """The trainer takes a complex output's planes (convert's complex_outputs) and gives it
    out as complex64, step's computed before its update and evaluate's after, as torch's."""
    from planner.torch import trainer

    torch.manual_seed(0)
    model, x = _Spectrum(), torch.randn(4, 8)
    t = trainer(copy.deepcopy(model), (x,), loss=None, optimizer="sgd", lr=0.1,
                out_dir=tmp_path)

    def off(z, module):
        want = [vr(module.to(d)(x.to(d))[1]).detach().numpy()
                for d in (torch.float32, torch.float64)]
        assert z.dtype == np.complex64 and z.shape == want[0].shape[:-1]
        return compare("spectrum", np.stack([z.real, z.imag], axis=-1), *want)

    _, (z,) = t.step(x, outputs=True)
    assert not off(z, copy.deepcopy(model))
    model.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in t.params().items()})
    _, (z,) = t.evaluate(x)
    assert not off(z, model)


def test_a_trained_complex_parameter_is_refused_in_one_line():
    w = torch.randn(6, dtype=torch.cfloat)
    message = _refusal(_Fn(lambda m, x: torch.fft.irfft(torch.fft.rfft(x) * m.w[:4]), w), X)
    assert "parameter 'w'" in message and "complex64" in message and "[6, 2]" in message


def test_a_complex_input_is_refused_in_one_line():
    message = _refusal(_Fn(lambda m, z: vr(z * 2)), torch.randn(3, 4, dtype=torch.cfloat))
    assert "input 'x'" in message and "complex64" in message


def test_a_complex_op_without_a_rule_is_refused_in_one_line():
    message = _refusal(_Fn(lambda m, z: vr(torch.logsumexp(vc(z), -1))), Z)
    assert "aten.logsumexp.default (on complex tensors)" in message


def test_a_complex_buffer_is_a_constant_of_the_step():
    """A complex buffer (not trained) reaches the graph as its planes, under its own name."""
    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("k", torch.randn(5, dtype=torch.cfloat))

        def forward(self, x):
            return torch.fft.irfft(torch.fft.rfft(x) * self.k, n=8)

    m = Scaled()
    imported = convert(torch.export.export(m, (_real(3, 8),)))
    planes = {k: v for k, v in imported.params().items() if k.startswith("k.")}
    (value,) = planes.values()
    np.testing.assert_array_equal(value, vr(m.k).numpy())


# ---- models: trained through the trainer, run through torch.compile -----------------------

class FNetBlock(torch.nn.Module):
    """FNet's encoder block: Fourier token mixing (the real part of a 2-D DFT over the
    sequence and the hidden dims), then a feed-forward layer, each with a residual and a
    LayerNorm; a linear head on the mean token."""

    def __init__(self, d=16, classes=3):
        super().__init__()
        self.norm1, self.norm2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.ff = torch.nn.Sequential(torch.nn.Linear(d, 2 * d), torch.nn.GELU(),
                                      torch.nn.Linear(2 * d, d))
        self.head = torch.nn.Linear(d, classes)

    def forward(self, x):
        x = self.norm1(x + torch.fft.fft(torch.fft.fft(x, dim=-1), dim=-2).real)
        x = self.norm2(x + self.ff(x))
        return self.head(x.mean(1))


def _rotary(x, freqs_cis):
    """Llama's apply_rotary_emb: pairs of features as complex numbers, turned by freqs_cis."""
    xc = vc(x.reshape(*x.shape[:-1], -1, 2))
    return vr(xc * freqs_cis[None, :, None, :]).flatten(3)


class RotaryAttention(torch.nn.Module):
    """One attention layer with rotary embeddings on q and k; freqs_cis a complex buffer
    (`polar=False`, Llama's) or made in forward by torch.polar from a real angle buffer."""

    def __init__(self, d=16, heads=2, seq=6, classes=3, polar=False):
        super().__init__()
        self.heads, self.polar = heads, polar
        self.qkv, self.out = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, classes)
        hd = d // heads
        angles = torch.outer(torch.arange(seq, dtype=torch.float32),
                             1.0 / 10000 ** (torch.arange(0, hd, 2).float() / hd))
        if polar:
            self.register_buffer("angles", angles)
        else:
            self.register_buffer("freqs_cis", torch.polar(torch.ones_like(angles), angles))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        freqs = torch.polar(torch.ones_like(self.angles), self.angles) if self.polar \
            else self.freqs_cis
        q, k = _rotary(q, freqs), _rotary(k, freqs)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2), is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, t, d).mean(1))


def _batches(seed=3, n=3):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(4, 6, 16, generator=g), torch.randint(0, 3, (4,), generator=g))
            for _ in range(n)]


def _in(model, dtype):
    """A copy of `model` in `dtype`, its complex buffers in the complex dtype of that precision
    (Module.to(float32) would drop their imaginary parts)."""
    model = copy.deepcopy(model)
    complex_dtype = torch.complex128 if dtype == torch.float64 else torch.complex64
    for m in model.modules():
        for name, b in m.named_buffers(recurse=False):
            setattr(m, name, b.to(complex_dtype if b.is_complex() else dtype))
    for p in model.parameters():
        p.data = p.data.to(dtype)
    return model


def _train_eager(model, batches, dtype, lr):
    model = _in(model, dtype)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for x, y in batches:
        opt.zero_grad()
        value = F.cross_entropy(model(x.to(dtype)), y)
        value.backward()
        opt.step()
    return Step(float(value.detach()), {k: v.detach().numpy().copy()
                                        for k, v in model.named_parameters()})


@pytest.mark.parametrize("make", [FNetBlock, RotaryAttention,
                                  lambda: RotaryAttention(polar=True)],
                         ids=["fnet", "rotary", "rotary_polar"])
def test_trains_through_the_trainer_as_pytorch(make, tmp_path):
    from planner.torch import trainer

    torch.manual_seed(0)
    model = make()
    batches, lr = _batches(), 0.1
    t = trainer(copy.deepcopy(model), (batches[0][0],), loss=F.cross_entropy,
                labels=batches[0][1], optimizer="sgd", lr=lr, out_dir=tmp_path)
    for x, y in batches:
        value = t.step(x, y)
    ours = Step(value, {k: np.asarray(v) for k, v in t.params().items()})
    f32, f64 = (_train_eager(model, batches, d, lr) for d in (torch.float32, torch.float64))
    assert not mismatches(ours, f32, f64, set(f64.state))
    head = "head.weight" if make is FNetBlock else "out.weight"
    assert not np.allclose(ours.state[head], dict(model.named_parameters())[head].detach())


def _eager_grads(model, x, dtype):
    m = _in(model, dtype)
    out = m(x.to(dtype))
    out.pow(2).sum().backward()
    return out.detach().numpy(), {k: p.grad.numpy() for k, p in m.named_parameters()}


@pytest.mark.parametrize("make", [FNetBlock, RotaryAttention,
                                  lambda: RotaryAttention(polar=True)],
                         ids=["fnet", "rotary", "rotary_polar"])
def test_torch_compile_backend_matches_eager(make):
    """Dynamo passes a module's buffers as graph inputs: the complex freqs_cis is fed as its
    planes (fallback off: a refusal would raise)."""
    torch.manual_seed(0)
    model = make()
    x = _batches(seed=4, n=1)[0][0]
    (o32, g32), (o64, g64) = (_eager_grads(model, x, d) for d in (torch.float32,
                                                                  torch.float64))
    mine = copy.deepcopy(model)
    out = torch.compile(mine, backend="planner", options={"fallback": False})(x)
    out.pow(2).sum().backward()
    assert not compare("output", out.detach().numpy(), o32, o64)
    for name, p in mine.named_parameters():
        assert not compare(name, p.grad.numpy(), g32[name], g64[name])


# ---- PyTorch's own OpInfos of the family -----------------------------------------------------

def _fft_opinfos():
    from tests.importers.opinfo_cases import by_name

    ops = by_name()
    return sorted(n for n in ops if (n.startswith("fft.") and "shift" not in n)
                  or n in ("stft", "istft"))


@pytest.mark.parametrize("name", _fft_opinfos())
def test_fft_opinfo_samples_match_torch_as_real_planes(name):
    """op_db's fft OpInfos (and stft) on their own first samples, their complex result taken
    as view_as_real of it inside the module: a real output, the form torch.compile's pieces
    take (the sweep gives the complex output out as its planes, convert's complex_outputs),
    forward and gradients (opinfo_cases.check_sample)."""
    import itertools
    from types import SimpleNamespace

    from tests.importers.opinfo_cases import _seeded, _Skip, by_name, check_sample

    op = by_name()[name]

    def real_out(*args, **kwargs):
        out = op.op(*args, **kwargs)
        return vr(out.resolve_conj()) if out.is_complex() else out

    checked = 0
    for k, sample in enumerate(itertools.islice(_seeded(op), 3)):
        try:
            got = check_sample(SimpleNamespace(op=real_out, supports_autograd=True), sample,
                               seed=k)
        except _Skip:
            continue
        assert got == ("pass", ""), (k, got)
        checked += 1
    assert checked


def test_abs_gradient_at_zero_is_torchs():
    """|z|'s gradient at z = 0 is 0 in torch (sgn(0)); the import's too, not 0/0."""
    z = torch.tensor([[0.0, 0.0], [3.0, -4.0], [0.0, 0.0]])
    assert check_call(lambda z: vc(z).abs(), z) == ("pass", "")


def test_a_saved_program_of_complex_ops_loads_through_the_pt2_reader(tmp_path):
    """The .pt2 reader takes the complex rules' ops (its operator allow-list,
    planner/importers/torch/targets.py) and complex dtypes (a complex buffer's payload): a
    saved rotary embedding and FNet mixing load and compute as torch."""
    from planner.graph.interpret import run
    from planner.importers.pt2.archive import read_archive
    from planner.importers.pt2.retrace import retrace

    class Both(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("angles", torch.randn(6, 4))
            self.register_buffer("k", torch.randn(8, dtype=torch.cfloat))  # a complex payload

        def forward(self, x):  # x [B, 6, 8]
            turned = _rotary(x[:, :, None], torch.polar(torch.ones_like(self.angles),
                                                        self.angles))[:, :, 0]
            return (torch.fft.fft(torch.fft.fft(turned, dim=-1), dim=-2) * self.k).real

    m, x = Both(), _real(2, 6, 8)
    path = tmp_path / "both.pt2"
    torch.export.save(torch.export.export(m, (x,)), path)
    imported = convert(retrace(read_archive(path), "both.pt2"))
    (out,) = imported.graph.outputs
    got = run(imported.graph, {imported.inputs[0]: x.numpy()}, imported.params())[out]
    want = m.double()(x.double()).numpy()
    assert np.max(np.abs(got - want)) <= 64 * 8 * EPS32 * np.max(np.abs(want))


def test_torch_compile_refuses_a_trained_complex_parameter_in_one_line():
    from planner.importers.torch.context import TorchImportError as Refused

    class Spectral(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(4, dtype=torch.cfloat))

        def forward(self, x):
            return torch.fft.irfft(torch.fft.rfft(x) * self.w, n=6)

    with pytest.raises(Refused) as e:
        torch.compile(Spectral(), backend="planner", options={"fallback": False})(_real(2, 6))
    assert "complex tensor that requires grad" in str(e.value) and "\n" not in str(e.value)


def test_fno_spectral_convolution_matches_torch():
    """FNO's spectral convolution: rfft2, the low modes times complex weights (held as a real
    parameter and view_as_complex'd) written into a zero spectrum, irfft2 back to the grid."""
    def spectral(x, w):
        ft = torch.fft.rfft2(x)
        out = torch.zeros(x.shape[0], 3, x.shape[-2], x.shape[-1] // 2 + 1, dtype=torch.cfloat)
        out[:, :, :4, :4] = torch.einsum("bixy,ioxy->boxy", ft[:, :, :4, :4], vc(w))
        return torch.fft.irfft2(out, s=(x.shape[-2], x.shape[-1]))

    assert check_call(spectral, _real(2, 3, 8, 8), _real(3, 3, 4, 4, 2, seed=5)) == ("pass", "")
