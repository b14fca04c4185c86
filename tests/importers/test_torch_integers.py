"""Integer arithmetic on computed int64 / int32 tensors through the torch front end, held to
PyTorch exactly (values and dtypes): arithmetic with torch's type promotion, floor and trunc
division and the remainder with torch's signs, bitwise ops and shifts, clamp / minimum /
maximum / abs / neg, where, arange arithmetic, the reductions (sum, prod, amax, amin, max,
cumsum; an int32 or bool sum and cumsum in int64, as torch) and two's complement overflow,
and the storage types int16, int8 and uint8 (casts, comparisons, reductions, arithmetic); on
the numpy reference, then every case at once on the CPU executor (one graph, one build). A zero
integer divisor is refused when the step runs (torch raises ZeroDivisionError)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.nn import functional as F  # noqa: E402

from planner.graph import run  # noqa: E402
from planner.importers.torch.convert import convert  # noqa: E402
from planner.ops.base import OpError  # noqa: E402
from tests.importers.torch_op_check import Case, assert_cpu_executor_matches  # noqa: E402

G = torch.Generator().manual_seed(3)


def ints(*shape, low=-50, high=50, dtype=torch.int64):
    return torch.randint(low, high, shape, generator=G, dtype=dtype)


def nonzero(*shape, dtype=torch.int64):
    x = ints(*shape, low=-9, high=10, dtype=dtype)
    return torch.where(x == 0, torch.ones_like(x), x)


class Fn(torch.nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        out = self.fn(*xs)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)


A, B, D = ints(4, 6), ints(4, 6), nonzero(4, 6)
A32, B32, D32 = ints(4, 6, dtype=torch.int32), ints(6, dtype=torch.int32), \
    nonzero(4, 6, dtype=torch.int32)
BIG = torch.tensor([2**62, -2**62, 2**63 - 1, -2**63], dtype=torch.int64)
BIG32 = torch.tensor([2**30, -2**31, 2**31 - 1, 12345], dtype=torch.int32)
EXPERTS = ints(16, low=0, high=4)
I8, J8 = ints(3, 5, low=-128, high=128, dtype=torch.int8), ints(3, 5, low=-128, high=128,
                                                                 dtype=torch.int8)
U8 = ints(3, 5, low=0, high=256, dtype=torch.uint8)
I16 = ints(3, 5, low=-2000, high=2000, dtype=torch.int16)
IN_RANGE = torch.tensor([[-100.7, -0.5, 0.0, 99.9, 3.2], [-1.5, 50.5, -64.0, 127.0, 7.7]])

# id -> (function of the inputs, inputs)
CASES = {
    "affine": (lambda i: i * 2 + 1, [A]),
    "alpha": (lambda a, b: torch.add(a, b, alpha=3) - torch.sub(b, a, alpha=2), [A, B]),
    "rsub": (lambda a: 7 - a, [A]),
    "positive_count": (lambda x: (x > 0).sum(dim=1), [A]),
    "div_floor": (lambda a, b: torch.div(a, b, rounding_mode="floor"), [A, D]),
    "div_trunc": (lambda a, b: torch.div(a, b, rounding_mode="trunc"), [A, D]),
    "floordiv_number": (lambda a: a // 4, [A]),
    "floordiv_negative_number": (lambda a: a // -3, [A]),
    "floordiv_tensor": (lambda a, b: a // b, [A, D]),
    "remainder_number": (lambda a: a % 5, [A]),
    "remainder_negative": (lambda a: a % -4, [A]),
    "remainder_tensor": (lambda a, b: a % b, [A, D]),
    "true_div": (lambda a, b: a / b, [A, D]),
    "times_float": (lambda a: a * 0.5, [A]),
    "and_or_xor": (lambda a, b: ((a & b), (a | b), (a ^ b)), [A, B]),
    "bitwise_numbers": (lambda a: (a & 0xF, a | 1, a ^ -1), [A]),
    "not": (lambda a: ~a, [A]),
    "shifts": (lambda a: (a << 3, a >> 2), [A]),
    "shift_tensors": (lambda a, s: (a << s, a >> s),
                      [A, ints(4, 6, low=0, high=63)]),
    "clamp": (lambda a: torch.clamp(a, -3, 7), [A]),
    "clamp_min": (lambda a: a.clamp(min=0), [A]),
    "clamp_max": (lambda a: a.clamp(max=5), [A]),
    "clamp_tensors": (lambda a, lo: torch.clamp(a, lo, lo + 10), [A, B]),
    "minimum_maximum": (lambda a, b: (torch.minimum(a, b), torch.maximum(a, b)), [A, B]),
    "abs_neg": (lambda a: (a.abs(), -a), [A]),
    "where": (lambda a, b: torch.where(a > 0, a, b), [A, B]),
    "arange": (lambda a: torch.arange(a.shape[0]) * 3 + a[:, 0], [A]),
    "sum": (lambda a: (a.sum(), a.sum(dim=0), a.sum(dim=1, keepdim=True)), [A]),
    "prod": (lambda a: (a.prod(dim=1), torch.prod(a)), [ints(3, 5, low=-4, high=5)]),
    "extrema": (lambda a: (a.amax(dim=1), a.amin(), a.max(), torch.min(a, 0).values), [A]),
    "cumsum": (lambda a: (a.cumsum(dim=1), torch.cumsum(a, 0)), [A]),
    "int32": (lambda a, b: (a * 3, a + b, a.sum(dim=1), a.cumsum(0), a.amax(dim=1),
                            a.prod(dim=0)), [A32, B32]),
    "int32_division": (lambda a, b: (a // b, a % b, torch.div(a, b, rounding_mode="trunc")),
                       [A32, D32]),
    "int32_with_int64": (lambda a, b: a + b, [A32, A]),
    "bool_cumsum": (lambda a: (a > 0).cumsum(1), [A]),
    "wraps": (lambda a: (a * 3, a + a, -a, a.abs(), a.sum(), a.prod(), a.cumsum(0)), [BIG]),
    # (not -2^31 // -1: torch's CPU kernel traps there; the planner's wraps to -2^31)
    "wraps_int32": (lambda a: (a * 1000, a + a, a.sum(), a // -7), [BIG32]),
    "tokens_per_expert": (lambda e: F.one_hot(e, 4).sum(0), [EXPERTS]),
    "degree": (lambda e: (e.unsqueeze(-1) == torch.arange(4)).sum(0), [EXPERTS]),
    # int16, int8 and uint8: storage types that cast, compare, reduce and compute
    "storage_casts": (lambda x: (x.to(torch.int8), x.abs().to(torch.uint8), x.to(torch.int16),
                                 x.to(torch.int8).to(torch.float32), x.to(torch.int8).long()),
                      [IN_RANGE]),
    "storage_compare": (lambda a, b: (a < b, a == 3, a > -1, torch.where(a < b, a, b)),
                        [I8, J8]),
    "storage_reduce": (lambda a, u: (a.amax(dim=1), a.amin(), a.sum(dim=0), u.sum(), u.max(),
                                     a.cumsum(1), u.prod(dim=1)), [I8, U8]),
    "int8_wraps": (lambda a: (a * 3, a + a, -a, a.abs(), a // 3, a % 7, a & 0x0F, a >> 1,
                              a << 2), [I8]),
    "uint8_images": (lambda u: (u.to(torch.float32) / 255, u > 128, u - 1, u >> 3), [U8]),
    "mixed_widths": (lambda a, u, s: (a + u, s * a, s + 1), [I8, U8, I16]),
}


def integer_case(fn, inputs) -> Case:
    imported = convert(torch.export.export(Fn(fn), tuple(inputs)))
    got = Fn(fn)(*inputs)
    want = {o: v.numpy() for o, v in zip(imported.graph.outputs, got, strict=True)}
    feeds = {name: x.numpy() for name, x in zip(imported.inputs, inputs, strict=True)}
    return Case(imported.graph, imported.params(), feeds, want)


@pytest.fixture(scope="module")
def cases():
    return {k: integer_case(fn, xs) for k, (fn, xs) in CASES.items()}


def _exact(got, want, what):
    """Integers and bools equal; a float (an integer divided by a number: the planner
    multiplies by its float32 reciprocal, two roundings of 2^-24) within 2^-23 relative."""
    got = np.asarray(got)
    assert got.dtype == want.dtype, f"{what}: {got.dtype}, torch's {want.dtype}"
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=2.0**-23, atol=0, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


@pytest.mark.parametrize("key", CASES)
def test_reference_matches_torch(key, cases):
    c = cases[key]
    out = run(c.graph, c.feeds, c.params, keep="outputs")
    for name, want in c.want.items():
        _exact(out[name], want, f"{key}: {name}")


def test_cpu_executor_matches_torch(cases, tmp_path):
    assert_cpu_executor_matches(cases, tmp_path / "torch_integers")  # values
    from tests.codegen.helpers import build_module  # dtypes: the module's outputs keep them

    c = cases["int32"]
    ex = build_module(c.graph, tmp_path / "int32_dtypes").Executor()
    ex.load_params(c.params)
    out = ex.forward(c.feeds)
    for name, want in c.want.items():
        _exact(out[name], want, f"int32: {name} (CPU executor)")


def test_a_zero_divisor_is_refused_when_the_step_runs(tmp_path):
    """torch raises ZeroDivisionError for an integer division by zero on the CPU; so do the
    reference and the executor, naming the node, having written nothing."""
    c = integer_case(lambda a, b: a // b, [A, D])
    feeds = dict(c.feeds)
    divisor = list(feeds)[1]
    feeds[divisor] = feeds[divisor].copy()
    feeds[divisor][1, 2] = 0
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        torch.from_numpy(feeds[list(feeds)[0]]) // torch.from_numpy(feeds[divisor])
    with pytest.raises(OpError, match="integer division by zero"):
        run(c.graph, feeds, c.params, keep="outputs")
    from tests.codegen.helpers import build_module

    ex = build_module(c.graph, tmp_path / "zero_divisor").Executor()
    ex.load_params(c.params)
    with pytest.raises(Exception, match=r"integer division by zero"):
        ex.forward(feeds)
