"""Complex tensors inside a graph, lowered to real ones, and the DFT family as the FFT op.

A complex64 (complex128) value inside a program becomes a float32 (float64) planner tensor of
one more, trailing, axis of 2: its real then its imaginary part, the layout of
`torch.view_as_real` (`Cx` wraps it, so a rule knows the trailing axis is the planes'). So
`view_as_real` and `view_as_complex` are free, and every complex ATen op lowers to real ops
the planner has: a product is (ac - bd, ad + bc) of Slices, Muls, Sub, Add and a Concat,
`conj` a Mul by (1, -1), `abs` a 2-norm over the planes (scaled), `angle` an Atan2, `polar` a Mul by
Cos and Sin; the ops that only move elements (view, permute, slice, cat, pad, copy,
slice_scatter, diagonal, diagonal_scatter, ...) are the real rules run on the planes with their
dims kept off the trailing axis. A matrix product (mm, bmm, matmul, addmm, addmv, addbmm,
linear) is four real ones; prod and cumprod trees or doubling scans of complex products; var
(and std) the real parts' variance plus the imaginary parts'. The elementary functions (log,
sqrt, pow by a number, sin, tanh, asinh, sigmoid, sinc, ...) are in rules_complex_math.py,
with their branch cuts, signed zeros and singular gradients torch's, beside the predicates
(isnan, eq, any, logical_and, ...: of the two parts), lerp, l1_loss and dist.

The DFT (`aten._fft_r2c`, `_fft_c2c`, `_fft_c2r`, which torch.fft's fft, ifft, rfft, irfft,
hfft, ihfft, fft2, ifft2, rfft2, irfft2, fftn, ifftn, rfftn, irfftn decompose to, after their
`n`/`s` crops and zero pads) is the FFT op (planner/ops/fft.py: complex to complex over the
transformed dims, pocketfft's c2c on the CPU, O(n log n) at any length) with its `norm`
("backward", "ortho", "forward") as the op's scale, 1, 1/sqrt(n) or 1/n of the transformed
signal's points. A real signal's transform is the FFT of (x, 0) then, one-sided, the first
n // 2 + 1 bins of the last dim; a one-sided spectrum's real inverse is the other dims'
inverse FFT, then the last dim's spectrum completed by its Hermitian mirror (bin k past the
half is conj(bin n - k)), its inverse FFT and the real plane: the zero and Nyquist bins'
imaginary parts reach only the dropped imaginary plane, ignored as pocketfft's c2r ignores
them. So the gradients are the FFT's own (its adjoint) and the real ops' (Slice, Concat,
Mul, Pad), and they equal PyTorch's `_fft_r2c_backward` and `_fft_c2r_backward` (which pad,
or double the mirrored bins, to the same effect).

Everything is ops of the op table, so the reference interpreter and autodiff need nothing
new (the CUDA executor has no FFT kernel yet and refuses the op), and gradients are the ops'
own: for a program whose inputs, parameters and outputs are real, the derivative of a real
function, which is what PyTorch's complex autograd (conjugate Wirtinger) gives there too. A
complex output is the graph output of its planes where the caller takes them (convert's
`complex_outputs`: the trainer), a cotangent of them torch's complex one as view_as_real, which
for real parameters gives PyTorch's gradient as well; other callers refuse it. Where a complex
tensor is an input or a trained parameter, the conventions differ, and the front end refuses it
(planner/importers/torch/convert.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from planner.importers.kit import Const, Rules, Unsupported
from planner.importers.torch.context import RULES, NodeCtx, _Unavailable

# A complex dtype -> the real dtype of its planes.
COMPLEX_DTYPES = {"complex64": "float32", "complex128": "float64"}


@dataclass(frozen=True)
class Cx:
    """A complex value: `v` holds it as planes, a real tensor of its shape and a trailing 2."""

    v: str | Const


@dataclass(frozen=True)
class Phased(Cx):
    """A complex value whose columns' phases are the planner's choice, not torch's (the
    eigenvectors of linalg_eig): only a reader that does not see them (PHASE_FREE, the
    modulus) may read it; `why` names it and its node for the error of any other reader, or
    of the program's output."""

    why: str = ""


# what may read a Phased value: the elementwise modulus, the same for every phase
PHASE_FREE = frozenset({"aten.abs.default"})

CX_RULES = Rules("ATen complex")
cx_rule = CX_RULES.rule


def reads_complex(args: Any) -> bool:
    if isinstance(args, Cx):
        return True
    if isinstance(args, (tuple, list)):
        return any(reads_complex(a) for a in args)
    if isinstance(args, dict):
        return any(reads_complex(a) for a in args.values())
    return False


def _phased(args: Any) -> Phased | None:
    """The first Phased value in args (nested in tuples, lists and dicts), else None."""
    if isinstance(args, Phased):
        return args
    items = args.values() if isinstance(args, dict) else args \
        if isinstance(args, (tuple, list)) else ()
    return next((p for p in map(_phased, items) if p is not None), None)


def convert_complex(n: NodeCtx) -> Any:
    """The node `n` reading or giving a complex value, by its rule of CX_RULES."""
    phased = _phased((n.args, n.kwargs))
    if phased is not None and n.op not in PHASE_FREE:
        raise n.fail(f"reads {phased.why}")
    fn = CX_RULES.get(n.op)
    if fn is None:
        raise Unsupported(f"{n.op} (on complex tensors)")
    return fn(n)


def complex_const(c: Const, name: str) -> Cx:
    """A complex Const (a buffer, a lifted constant) as planes under `name`."""
    real = COMPLEX_DTYPES[c.dtype]
    return Cx(Const(name, (*c.shape, 2), real, c.origin,
                    lambda: np.ascontiguousarray(c.value()).view(real).reshape(*c.shape, 2)))


# ---- helpers ---------------------------------------------------------------------------------

def _planes(n: NodeCtx, z: Cx) -> tuple[str, str]:
    """The real and imaginary parts of z, each of z's shape."""
    shape = n.shape(z.v)
    rank = len(shape) - 1
    parts = n.emit("Split", [z.v], {"axis": rank, "sizes": [1, 1]}, n_out=2)
    return tuple(n.emit1("Reshape", [p], {"shape": list(shape[:-1])})  # type: ignore[return-value]
                 for p in parts)


def _joined(n: NodeCtx, re: Any, im: Any) -> Cx:
    """The complex value of real part re and imaginary part im, broadcast together (as
    torch.complex broadcasts them)."""
    shape = list(np.broadcast_shapes(n.shape(re), n.shape(im)))
    re, im = (p if list(n.shape(p)) == shape else n.emit1("Expand", [p], {"shape": shape})
              for p in (re, im))
    re, im = (n.emit1("Reshape", [p], {"shape": [*shape, 1]}) for p in (re, im))
    return Cx(n.emit1("Concat", [re, im], {"axis": len(shape)}))


def _promote(n: NodeCtx, v: Any, real: str) -> Cx:
    """A real tensor (or number) as a complex value of imaginary part 0."""
    if isinstance(v, Cx):
        return v
    if isinstance(v, complex):
        return Cx(n.const([v.real, v.imag], real))
    if isinstance(v, (int, float)):
        return Cx(n.const([float(v), 0.0], real))
    if n.dtype(v) != real:
        v = n.emit1("Cast", [v], {"to": real})
    shape = list(n.shape(v))
    column = n.emit1("Reshape", [v], {"shape": [*shape, 1]})
    return Cx(n.emit1("Pad", [column], {"pads": [0] * (2 * len(shape) + 1) + [1],
                                        "mode": "constant", "value": 0.0}))


def _real_of(n: NodeCtx) -> str:
    dtype = n.out_dtype or ""
    if dtype in COMPLEX_DTYPES:
        return COMPLEX_DTYPES[dtype]
    for a in n.args:
        if isinstance(a, Cx):
            return n.dtype(a.v)
    return "float32"


# ---- views between the two -------------------------------------------------------------------

@cx_rule("aten.view_as_real.default", "aten.view_as_real_copy.default")
def view_as_real(n: NodeCtx) -> Any:
    z = n.arg(0, "self")
    if not isinstance(z, Cx):
        raise n.fail("view_as_real of a real tensor")
    return z.v


@cx_rule("aten.view_as_complex.default", "aten.view_as_complex_copy.default")
def view_as_complex(n: NodeCtx) -> Any:
    x = n.tensor(0)
    shape, dtype = n.shape(x), n.dtype(x)
    if not shape or shape[-1] != 2 or dtype not in COMPLEX_DTYPES.values():
        raise n.fail(f"view_as_complex of a {dtype} tensor of shape {list(shape)} (its last "
                     "dim must be 2, float32 or float64)")
    return Cx(x)


@cx_rule("aten._conj.default", "aten.conj_physical.default", "aten._conj_physical.default",
         "aten.conj.default")
def conj(n: NodeCtx) -> Any:
    z = _arg_cx(n, 0)
    return Cx(n.emit1("Mul", [z.v, n.const([1.0, -1.0], n.dtype(z.v))]))


@cx_rule("aten.abs.default")
def abs_(n: NodeCtx) -> Any:
    return _modulus(n, _arg_cx(n, 0))


def _modulus(n: NodeCtx, z: Cx) -> Any:
    """|z|: the 2-norm over the planes, its gradient at 0 being 0, as torch's (a Hypot's is
    0/0), taken of z / s and times s, s the larger plane's magnitude held constant (clamped into
    the dtype's normal range): a plain norm squares the planes, which overflows past 1.8e19 in
    float32 where torch's hypot gives |z| (the complex64 OpInfo abs's extremal samples)."""
    return n.emit1("Mul", list(_unit_modulus(n, z)))


def _unit_modulus(n: NodeCtx, z: Cx) -> tuple[Any, Any]:
    """|z / s| and s (each of z's shape), s the larger plane's magnitude held constant and
    clamped into the dtype's normal range: |z| is their product, which a caller may keep apart
    (a logarithm, a square root) where the product itself would overflow."""
    shape = n.shape(z.v)
    rank = len(shape) - 1
    _, s = _plane_scale(n, z)
    norm = n.emit1("ReduceNorm", [n.emit1("Div", [z.v, s])],
                   {"axes": [rank], "keepdims": False, "p": 2.0})
    return norm, n.emit1("Reshape", [s], {"shape": list(shape[:-1])})


@cx_rule("aten.sgn.default")
def sgn(n: NodeCtx) -> Any:
    """z / |z|, 0 at 0, as torch's, and so its gradient (torch's sgn_backward gives 0 at 0):
    the modulus made 1 where it is 0, so that the quotient there, masked, has a finite
    gradient (torch's decomposition, where(|z| == 0, 0, z / |z|), has 0 / 0 there)."""
    z = _arg_cx(n, 0)
    size, real = _modulus(n, z), n.dtype(z.v)
    column = [*n.shape(size), 1]
    zero = n.emit1("Equal", [size, n.const(0.0, real)])
    safe = n.emit1("Where", [zero, n.const(1.0, real), size])
    q = n.emit1("Div", [z.v, n.emit1("Reshape", [safe], {"shape": column})])
    return Cx(n.emit1("Where", [n.emit1("Reshape", [zero], {"shape": column}),
                                n.const(0.0, real), q]))


@cx_rule("aten.linalg_vector_norm.default")
def vector_norm(n: NodeCtx) -> Any:
    """A complex vector's norm is its moduli's (torch's linalg_vector_norm takes abs first)."""
    return _real_rule(n, [_modulus(n, _arg_cx(n, 0)), *n.args[1:]], n.kwargs)


@cx_rule("aten.angle.default")
def angle(n: NodeCtx) -> Any:
    re, im = _planes(n, _arg_cx(n, 0))
    return n.emit1("Atan2", [im, re])


@cx_rule("aten.polar.default")
def polar(n: NodeCtx) -> Any:
    """abs (cos + i sin) of angle. torch's backward (polar_backward) gives abs the gradient
    Re(conj(g) sgn(result)): the derivative times sign(abs), so 0 at abs = 0 and negated
    below it; here abs enters as itself (held) plus |abs| - |abs| (0, exactly), whose gradient
    is that sign."""
    r, theta = n.tensor(0), n.tensor(1)
    size = n.emit1("Abs", [r])
    r = n.emit1("Add", [n.emit1("StopGradient", [r]),
                        n.emit1("Sub", [size, n.emit1("StopGradient", [size])])])
    return _joined(n, n.emit1("Mul", [r, n.emit1("Cos", [theta])]),
                   n.emit1("Mul", [r, n.emit1("Sin", [theta])]))


@cx_rule("aten.complex.default")
def complex_(n: NodeCtx) -> Any:
    return _joined(n, n.tensor(0), n.tensor(1))


@cx_rule("aten.real.default", "aten.imag.default")
def real_imag(n: NodeCtx) -> Any:
    re, im = _planes(n, _arg_cx(n, 0))
    return re if n.op == "aten.real.default" else im


def _arg_cx(n: NodeCtx, k: int) -> Cx:
    z = n.arg(k, "self")
    if isinstance(z, _Unavailable) or not isinstance(z, Cx):
        return _promote(n, n.tensor(k), _real_of(n))
    return z


# ---- arithmetic ------------------------------------------------------------------------------

def _times(n: NodeCtx, a: Cx, b: Any) -> Cx:
    """a * b, b complex, a real tensor or a number."""
    if isinstance(b, (int, float)) and not isinstance(b, bool):
        return Cx(n.emit1("Scale", [a.v], {"factor": float(b)}))
    if isinstance(b, (str, Const)):  # real: broadcast over the planes
        column = n.emit1("Reshape", [b], {"shape": [*n.shape(b), 1]})
        return Cx(n.emit1("Mul", [a.v, column]))
    b = _promote(n, b, n.dtype(a.v))
    ar, ai = _planes(n, a)
    br, bi = _planes(n, b)
    return _joined(n, n.emit1("Sub", [n.emit1("Mul", [ar, br]), n.emit1("Mul", [ai, bi])]),
                   n.emit1("Add", [n.emit1("Mul", [ar, bi]), n.emit1("Mul", [ai, br])]))


@cx_rule("aten.mul.Tensor", "aten.mul.Scalar")
def mul(n: NodeCtx) -> Any:
    """A complex value times anything; or a real tensor times a complex number (torch's
    complex convolution's decomposition multiplies by 1j), the tensor promoted."""
    a, b = n.arg(0, "self"), n.arg(1, "other")
    if not isinstance(a, Cx):
        a, b = b, a
    if not isinstance(a, Cx):
        tensor, number = (b, a) if isinstance(a, complex) else (a, b)
        a, b = _promote(n, tensor, _real_of(n)), number
    return _times(n, a, b)


@cx_rule("aten.div.Tensor", "aten.div.Scalar")
def div(n: NodeCtx) -> Any:
    """a / b: by a real number or tensor, the planes divided; by a complex b,
    a * conj(b') / |b'|^2 / s, b' = b / s, s the larger of |Re b| and |Im b| (as numpy's
    and c10's complex division scale: |b|^2 itself overflows past 1.8e19 in float32); by 0,
    a's planes divided by 0 (inf or NaN, c10's)."""
    if n.kwargs.get("rounding_mode") is not None:
        raise Unsupported(f"{n.op} (rounding_mode, on complex tensors)")
    return _quotient(n, n.arg(0, "self"), n.arg(1, "other"))


@cx_rule("aten.reciprocal.default")
def reciprocal(n: NodeCtx) -> Any:
    return _quotient(n, 1.0, _arg_cx(n, 0))


def _quotient(n: NodeCtx, a: Any, b: Any) -> Cx:
    """a / b, either complex (div's docstring)."""
    real = _real_of(n)
    a = _promote(n, a, real)
    if isinstance(b, (int, float)) and not isinstance(b, bool) and b != 0:
        return Cx(n.emit1("Scale", [a.v], {"factor": 1.0 / b}))
    if isinstance(b, (str, Const)):
        column = n.emit1("Reshape", [b], {"shape": [*n.shape(b), 1]})
        return Cx(n.emit1("Div", [a.v, column]))
    b = _promote(n, b, real)
    top, s = _plane_scale(n, b)
    unit = Cx(n.emit1("Div", [b.v, s]))
    ur, ui = _planes(n, unit)
    size = n.emit1("Add", [n.emit1("Mul", [ur, ur]), n.emit1("Mul", [ui, ui])])
    num = _times(n, a, Cx(n.emit1("Mul", [unit.v, n.const([1.0, -1.0], real)])))
    column = n.emit1("Reshape", [size], {"shape": [*n.shape(size), 1]})
    q = n.emit1("Div", [n.emit1("Div", [num.v, column]), s])
    # by 0: a's planes over 0, held (their gradient, g / 0, would make the masked zeros NaN)
    by_zero = n.emit1("Div", [n.emit1("StopGradient", [a.v]), n.const(0.0, real)])
    zero = n.emit1("Equal", [top, n.const(0.0, real)])
    return Cx(n.emit1("Where", [zero, by_zero, q]))


def _plane_scale(n: NodeCtx, z: Cx) -> tuple[Any, Any]:
    """The larger of |Re z| and |Im z| ([..., 1]), and it held constant and clamped into the
    dtype's normal range: the scale that keeps a square of the planes finite."""
    real = n.dtype(z.v)
    rank = len(n.shape(z.v)) - 1
    top = n.emit1("ReduceMax", [n.emit1("Abs", [z.v])], {"axes": [rank], "keepdims": True})
    info = np.finfo(real)
    return top, n.emit1("Clamp", [n.emit1("StopGradient", [top]),
                                  n.const(float(info.tiny), real),
                                  n.const(float(info.max), real)])


@cx_rule("aten.add.Tensor", "aten.sub.Tensor", "aten.add.Scalar", "aten.sub.Scalar",
         "aten.rsub.Scalar", "aten.rsub.Tensor")
def add_sub(n: NodeCtx) -> Any:
    """On the planes, a real operand promoted (imaginary part 0); alpha is real."""
    real = _real_of(n)
    args = [_promote(n, n.arg(0, "self"), real), _promote(n, n.arg(1, "other"), real),
            *n.args[2:]]
    return _lifted(n, args, n.kwargs)


@cx_rule("aten.where.self")
def where(n: NodeCtx) -> Any:
    """The real where on the planes, the condition given a trailing 1 (it broadcasts over the
    planes) and a real operand promoted."""
    cond, real = n.tensor(0), _real_of(n)
    cond = n.emit1("Reshape", [cond], {"shape": [*n.shape(cond), 1]})
    return _lifted(n, [cond, _promote(n, n.arg(1, "self"), real),
                       _promote(n, n.arg(2, "other"), real)], {})


@cx_rule("aten._assert_tensor_metadata.default")
def assert_metadata(n: NodeCtx) -> Any:
    """The dtype check export writes before a `.to()` of a complex tensor: the real rule's."""
    return RULES[n.op](n)


@cx_rule("aten.mm.default", "aten.bmm.default", "aten.matmul.default")
def matmul(n: NodeCtx) -> Any:
    a, b = n.arg(0, "self"), n.arg(1, "mat2" if "mm" in n.op else "other")
    return _bilinear(n, a if isinstance(a, Cx) else n.tensor(0),
                     b if isinstance(b, Cx) else n.tensor(1),
                     lambda x, y: n.emit1("MatMul", [x, y]))


def _bilinear(n: NodeCtx, a: Any, b: Any, product: Callable[[Any, Any], Any]) -> Cx:
    """product(a, b) of a real bilinear product (a matrix product, a dense layer) and complex
    (or real) a and b: (A + iB)(C + iD) = AC - BD + i(AD + BC), four real products (one side
    real: two)."""
    pa = _planes(n, a) if isinstance(a, Cx) else (a, None)
    pb = _planes(n, b) if isinstance(b, Cx) else (b, None)

    def prod(x: Any, y: Any) -> Any:
        return None if x is None or y is None else product(x, y)

    re = [prod(pa[0], pb[0]), prod(pa[1], pb[1])]
    im = [prod(pa[0], pb[1]), prod(pa[1], pb[0])]
    re_v = re[0] if re[1] is None else n.emit1("Sub", re)
    im_v = [v for v in im if v is not None]
    return _joined(n, re_v, im_v[0] if len(im_v) == 1 else n.emit1("Add", im_v))


def _operand(n: NodeCtx, k: int, name: str) -> Any:
    """Argument k: a complex value as it is, a real tensor as its name."""
    v = n.arg(k, name)
    return v if isinstance(v, Cx) else n.tensor(k)


@cx_rule("aten.addmm.default", "aten.addmv.default", "aten.addbmm.default")
def addmm(n: NodeCtx) -> Any:
    """beta input + alpha (m1 @ m2) (addmv: a matrix times a vector; addbmm: the sum of a
    batch's products), alpha and beta complex numbers or real; input is not read where beta is
    0 (torch's: a NaN there does not reach the result)."""
    y = _bilinear(n, _operand(n, 1, "mat1"), _operand(n, 2, "mat2"), _product_of(n))
    beta, alpha = n.kwargs.get("beta", 1), n.kwargs.get("alpha", 1)
    if alpha != 1:
        y = _times(n, y, alpha)
    if beta == 0:
        return y
    bias = _promote(n, n.arg(0, "self"), _real_of(n))
    return Cx(n.emit1("Add", [y.v, (bias if beta == 1 else _times(n, bias, beta)).v]))


def _product_of(n: NodeCtx) -> Callable[[Any, Any], Any]:
    """The real product of addmm, addmv or addbmm (n's op) of two real operands."""
    from planner.importers.torch.rules_products import reshape_to

    def mv(mat: Any, vec: Any) -> Any:
        (k,) = n.shape(vec)
        y = n.emit1("MatMul", [mat, reshape_to(n, vec, (k, 1))])
        return reshape_to(n, y, n.shape(mat)[:1])

    def bmm_sum(b1: Any, b2: Any) -> Any:  # b1 as [N, B*K] (the batch inside), b2 [B*K, P]
        (b, rows, k), cols = n.shape(b1), n.shape(b2)[2]
        a = reshape_to(n, n.emit1("Transpose", [b1], {"perm": [1, 0, 2]}), (rows, b * k))
        return n.emit1("MatMul", [a, reshape_to(n, b2, (b * k, cols))])

    if n.op == "aten.addmv.default":
        return mv
    return bmm_sum if n.op == "aten.addbmm.default" else \
        (lambda x, w: n.emit1("MatMul", [x, w]))


@cx_rule("aten.linear.default")
def linear(n: NodeCtx) -> Any:
    """x @ w.T + b, each part's product the real dense layer's (rules_products.dense)."""
    from planner.importers.torch.rules_products import dense

    y = _bilinear(n, _operand(n, 0, "input"), _operand(n, 1, "weight"),
                  lambda x, w: dense(n, x, w, None))
    bias = n.arg(2, "bias")
    if bias is None:
        return y
    return Cx(n.emit1("Add", [y.v, _promote(n, bias, _real_of(n)).v]))


@cx_rule("aten.var.correction", "aten.var_mean.correction")
def var(n: NodeCtx) -> Any:
    """The variance of complex values, the mean of |z - mean|^2, is the real part's plus the
    imaginary part's (each the real rule's, the same dims and correction); var_mean's mean is
    the two parts' means."""
    re, im = _planes(n, _arg_cx(n, 0))
    parts = [_real_rule(n, [p, *n.args[1:]], n.kwargs) for p in (re, im)]
    if n.op == "aten.var.correction":
        return n.emit1("Add", parts)
    (vr, mr), (vi, mi) = parts
    return n.emit1("Add", [vr, vi]), _joined(n, mr, mi)


@cx_rule("aten.prod.default", "aten.prod.dim_int")
def prod(n: NodeCtx) -> Any:
    """The product along a dim (every element: of the flattened tensor) as a tree of complex
    products, log2 of the length levels (each half times the other, an odd last element
    carried); of no elements, 1."""
    z, rank = _arg_cx(n, 0), _rank(n)
    if n.op == "aten.prod.default":
        count = math.prod(n.shape(z.v)[:-1])
        z, dim, keep = Cx(n.emit1("Reshape", [z.v], {"shape": [count, 2]})), 0, False
    elif rank == 0:
        return z
    else:
        dim, keep = _dim(n.arg(1, "dim"), rank), bool(n.arg(2, "keepdim", False))
    z = _tree_product(n, z, dim)
    if not keep:
        shape = [s for k, s in enumerate(n.shape(z.v)) if k != dim]
        z = Cx(n.emit1("Reshape", [z.v], {"shape": shape}))
    return z


@cx_rule("aten.cumprod.default")
def cumprod(n: NodeCtx) -> Any:
    """The running product along a dim, by doubling (Hillis and Steele's scan): after the
    step of shift s each element is the product of the 2s up to it, p[k] times p[k - s]."""
    z, rank = _arg_cx(n, 0), _rank(n)
    if rank == 0:
        return z
    dim = _dim(n.arg(1, "dim"), rank)
    length, shift = n.shape(z.v)[dim], 1

    def part(v: Cx, start: int, end: int) -> Cx:
        return Cx(n.emit1("Slice", [v.v], {"starts": [start], "ends": [end], "axes": [dim]}))

    while shift < length:
        later = _times(n, part(z, shift, length), part(z, 0, length - shift))
        z = Cx(n.emit1("Concat", [part(z, 0, shift).v, later.v], {"axis": dim}))
        shift *= 2
    return z


def _tree_product(n: NodeCtx, z: Cx, dim: int) -> Cx:
    """The product of z's elements along `dim`, kept as a dim of 1."""
    length = n.shape(z.v)[dim]
    if length == 0:
        shape = list(n.shape(z.v))
        shape[dim] = 1
        return _promote(n, n.const(np.ones(shape[:-1]), n.dtype(z.v)), n.dtype(z.v))

    def part(start: int, end: int) -> Cx:
        return Cx(n.emit1("Slice", [z.v], {"starts": [start], "ends": [end], "axes": [dim]}))

    while length > 1:
        half = length // 2
        p = _times(n, part(0, half), part(half, 2 * half))
        if length % 2:
            p = Cx(n.emit1("Concat", [p.v, part(length - 1, length).v], {"axis": dim}))
        z, length = p, half + length % 2
    return z


@cx_rule("aten._to_copy.default")
def to_copy(n: NodeCtx) -> Any:
    """A cast: to a complex dtype, of a real (imaginary part 0) or complex value; from a
    complex one to bool, whether either part is non-zero (torch's); to another real dtype, its
    real part (what torch keeps, with a warning)."""
    x = n.arg(0, "self")
    want = n.out_dtype or ""
    if want in COMPLEX_DTYPES:
        z = _promote(n, x, COMPLEX_DTYPES[want])
        return z if n.dtype(z.v) == COMPLEX_DTYPES[want] else \
            Cx(n.emit1("Cast", [z.v], {"to": COMPLEX_DTYPES[want]}))
    re, im = _planes(n, x)
    if want == "bool":
        return n.emit1("Or", [n.emit1("Cast", [p], {"to": "bool"}) for p in (re, im)])
    return re if n.dtype(re) == want else n.emit1("Cast", [re], {"to": want})


@cx_rule("aten.full.default", "aten.zeros.default", "aten.ones.default",
         "aten.full_like.default", "aten.zeros_like.default", "aten.ones_like.default")
def full(n: NodeCtx) -> Any:
    from planner.importers.torch.rules import filled

    name = n.op.split(".")[1]
    value = {"zeros": 0, "ones": 1, "zeros_like": 0, "ones_like": 1}.get(name)
    if value is None:
        value = n.arg(1, "fill_value")
    value = complex(value)
    shape = tuple(n.out_shape or ())
    real = _real_of(n)
    if value.imag == 0:
        return Cx(_planes_filled(n, filled, shape, value.real, real))
    planes = np.empty((*shape, 2), dtype=real)
    planes[..., 0], planes[..., 1] = value.real, value.imag
    return Cx(Const.of(n.imp.fresh(n.label), planes, origin="constant"))


def _planes_filled(n: NodeCtx, filled: Callable, shape: tuple[int, ...], re: float,
                   real: str) -> Any:
    """A complex tensor of value re + 0i: the real part filled, the imaginary zeros."""
    if re == 0:
        return filled(n, (*shape, 2), 0.0, real)
    return _promote(n, filled(n, shape, re, real), real).v


# ---- element moves: the real rules on the planes ---------------------------------------------

def _plain(v: Any) -> Any:
    if isinstance(v, Cx):
        return v.v
    if isinstance(v, (tuple, list)):
        return type(v)(_plain(i) for i in v)
    return v


def _wrapped(v: Any) -> Any:
    if isinstance(v, (str, Const)):
        return Cx(v)
    if isinstance(v, tuple):
        return tuple(_wrapped(i) for i in v)
    return v


def _lifted(n: NodeCtx, args: list[Any], kwargs: dict[str, Any], op: str = "") -> Any:
    """The real rule of n's op (or `op`) on the planes: arguments as given (dims already kept
    off the trailing axis), the result's shape torch's and a trailing 2."""
    op = op or n.op
    if op not in RULES:
        raise Unsupported(f"{op} (on complex tensors)")
    shape = None if n.out_shape is None else (*n.out_shape, 2)
    ctx = NodeCtx(n.imp, n.label, op, _plain(args), _plain(kwargs), shape, n._dropouts,
                  _real_of(n), n.node, n.module, n._values)
    return _wrapped(RULES[op](ctx))


def _real_rule(n: NodeCtx, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """The real rule of n's op on real arguments made of complex ones (a real result)."""
    ctx = NodeCtx(n.imp, n.label, n.op, args, kwargs, n.out_shape, n._dropouts,
                  n.out_dtype, n.node, n.module, n._values)
    return RULES[n.op](ctx)


def _rank(n: NodeCtx) -> int:
    for a in n.args:
        for v in (a if isinstance(a, (list, tuple)) else [a]):
            if isinstance(v, Cx):
                return len(n.shape(v.v)) - 1
    raise n.fail("no complex tensor argument")


def _dim(d: Any, rank: int) -> Any:
    return d % rank if isinstance(d, int) and rank and -rank <= d < rank else d


# op -> (argument position, keyword) of its dim(s) and how much the output outranks the input
_DIMS: dict[str, tuple[int, str, int]] = {
    "aten.slice.Tensor": (1, "dim", 0), "aten.select.int": (1, "dim", 0),
    "aten.cat.default": (1, "dim", 0), "aten.flip.default": (1, "dims", 0),
    "aten.roll.default": (2, "dims", 0), "aten.sum.dim_IntList": (1, "dim", 0),
    "aten.mean.dim": (1, "dim", 0), "aten.slice_scatter.default": (2, "dim", 0),
    "aten.index_select.default": (1, "dim", 0),
    "aten.split_with_sizes.default": (2, "dim", 0), "aten.split.Tensor": (2, "dim", 0),
    "aten.stack.default": (1, "dim", 1), "aten.transpose.int": (1, "dim0", 0),
    "aten.cumsum.default": (1, "dim", 0), "aten.narrow_copy.default": (1, "dim", 0),
    "aten.unbind_copy.int": (1, "dim", 0),
}
_RESHAPES = ("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default",
             "aten.unsqueeze.default", "aten.squeeze.dim", "aten.squeeze.dims",
             "aten.squeeze.default", "aten.flatten.using_ints", "aten.view_copy.default")
_AS_IS = ("aten.clone.default", "aten.alias.default", "aten.detach.default",
          "aten.copy.default", "aten.expand.default", "aten.neg.default",
          "aten.index.Tensor", "aten.lift_fresh_copy.default", "aten.resolve_conj.default",
          "aten.resolve_neg.default")


@cx_rule(*_RESHAPES)
def reshaped(n: NodeCtx) -> Any:
    return Cx(n.emit1("Reshape", [_arg_cx(n, 0).v], {"shape": [*(n.out_shape or ()), 2]}))


@cx_rule(*_AS_IS)
def as_is(n: NodeCtx) -> Any:
    if n.op in ("aten.resolve_conj.default", "aten.resolve_neg.default",
                "aten.alias.default", "aten.lift_fresh_copy.default"):
        return n.arg(0, "self")
    real = _real_of(n)
    args = list(n.args)
    if n.op == "aten.copy.default":  # self's values replaced by src's, a complex value
        args[1] = _promote(n, n.arg(1, "src"), real)
    return _lifted(n, args, n.kwargs)


# ops that leave a 0-d tensor as it is along its one implicit dim (dim 0 or -1; index_select's
# one valid index there is 0)
_SCALAR_SAME = ("aten.sum.dim_IntList", "aten.mean.dim", "aten.cumsum.default",
                "aten.flip.default", "aten.roll.default", "aten.transpose.int",
                "aten.index_select.default")


@cx_rule(*_DIMS)
def with_dims(n: NodeCtx) -> Any:
    k, key, extra = _DIMS[n.op]
    rank = _rank(n) + extra
    if rank == 0:
        # a 0-d complex value's planes are [2]: its dim 0 (or -1), torch's implicit one, is no
        # axis of them (a cumsum or flip there would run over the real and imaginary parts)
        if n.op in _SCALAR_SAME and tuple(n.out_shape or ()) == ():
            return _arg_cx(n, 0)
        raise Unsupported(f"{n.op} (along a dim of a 0-d complex tensor)")
    args, kwargs = list(n.args), dict(n.kwargs)
    real = _real_of(n)
    if n.op in ("aten.cat.default", "aten.stack.default"):
        args[0] = [_promote(n, v, real) for v in args[0]]
    if n.op == "aten.slice_scatter.default":
        args[1] = _promote(n, n.arg(1, "src"), real)

    def fix(d: Any) -> Any:
        return [_dim(i, rank) for i in d] if isinstance(d, (list, tuple)) else _dim(d, rank)

    if n.op == "aten.transpose.int":
        args[1:3] = [fix(a) for a in args[1:3]]
    elif k < len(args):
        args[k] = fix(args[k])
    elif key in kwargs:
        kwargs[key] = fix(kwargs[key])
    if n.op in ("aten.sum.dim_IntList", "aten.mean.dim") and n.arg(1, "dim") in (None, [], ()):
        # every dim (torch's dim=None or []), but the planes'
        kwargs.pop("dim", None)
        args = [args[0], list(range(rank)), *args[2:]]
    if n.op == "aten.roll.default" and not (len(args) > 2 or "dims" in kwargs):
        raise Unsupported(f"{n.op} (of a complex tensor, flattened)")
    return _lifted(n, args, kwargs)


@cx_rule("aten.sum.default", "aten.mean.default")
def over_all(n: NodeCtx) -> Any:
    """A sum or mean of every element: over every dim but the planes'."""
    op = "aten.sum.dim_IntList" if n.op == "aten.sum.default" else "aten.mean.dim"
    if _rank(n) == 0:  # (a 0-d value's sum is itself)
        return _arg_cx(n, 0)
    return _lifted(n, [n.arg(0, "self"), list(range(_rank(n)))], dict(n.kwargs), op)


@cx_rule("aten.constant_pad_nd.default", "aten.reflection_pad1d.default",
         "aten.reflection_pad2d.default", "aten.replication_pad1d.default",
         "aten.replication_pad2d.default")
def pad(n: NodeCtx) -> Any:
    """A complex tensor padded: its planes, the trailing axis not (reflecting or repeating
    the edge moves whole numbers, both parts alike: stft's centred frames)."""
    if "constant" not in n.op:
        return _lifted(n, [n.arg(0, "self"), [0, 0, *n.ints(1, "padding")]], {})
    value = complex(n.arg(2, "value", 0.0))
    if value == 0:
        return _lifted(n, [n.arg(0, "self"), [0, 0, *n.ints(1, "pad")], 0.0], {})
    # another value: each plane padded with its part of it
    pads = n.ints(1, "pad")
    shape = None if n.out_shape is None else tuple(n.out_shape)
    parts = [RULES[n.op](NodeCtx(n.imp, n.label, n.op, [p, pads, part], {}, shape,
                                 n._dropouts, _real_of(n), n.node, n.module, n._values))
             for p, part in zip(_planes(n, _arg_cx(n, 0)), (value.real, value.imag),
                                strict=True)]
    return _joined(n, *parts)


@cx_rule("aten.diagonal.default", "aten.diagonal_copy.default")
def diagonal(n: NodeCtx) -> Any:
    """The real diagonal of the planes (the dims kept off their axis), whose diagonal's axis
    lands after the planes' axis, then those two swapped back."""
    rank = _rank(n)
    args = [n.arg(0, "self"), n.arg(1, "offset", 0), _dim(n.arg(2, "dim1", 0), rank),
            _dim(n.arg(3, "dim2", 1), rank)]
    shape = None if n.out_shape is None else (*n.out_shape[:-1], 2, n.out_shape[-1])
    ctx = NodeCtx(n.imp, n.label, "aten.diagonal.default", _plain(args), {}, shape,
                  n._dropouts, _real_of(n), n.node, n.module, n._values)
    d = RULES["aten.diagonal.default"](ctx)
    out = len(n.shape(d)) - 1
    return Cx(n.emit1("Transpose", [d], {"perm": [*range(out - 1), out, out - 1]}))


@cx_rule("aten.diagonal_scatter.default")
def diagonal_scatter(n: NodeCtx) -> Any:
    """The real diagonal_scatter on the planes, src's planes moved before its diagonal's axis
    (where the real diagonal of the planes has them)."""
    rank, real = _rank(n), _real_of(n)
    src = _promote(n, n.arg(1, "src"), real).v
    last = len(n.shape(src)) - 1
    src = n.emit1("Transpose", [src], {"perm": [*range(last - 1), last, last - 1]})
    args = [_promote(n, n.arg(0, "self"), real), src, n.arg(2, "offset", 0),
            _dim(n.arg(3, "dim1", 0), rank), _dim(n.arg(4, "dim2", 1), rank)]
    return _lifted(n, args, {})


@cx_rule("aten.unfold.default", "aten.unfold_copy.default")
def unfold(n: NodeCtx) -> Any:
    """x.unfold(dim, size, step) of a complex tensor (stft's frames): the real unfold of its
    planes, whose windows' axis lands after the planes' axis, then those two swapped back."""
    rank = _rank(n)
    args = [n.arg(0, "self"), _dim(n.arg(1, "dimension"), rank), n.arg(2, "size"),
            n.arg(3, "step")]
    shape = None if n.out_shape is None else (*n.out_shape[:-1], 2, n.out_shape[-1])
    ctx = NodeCtx(n.imp, n.label, n.op, _plain(args), {}, shape, n._dropouts, _real_of(n),
                  n.node, n.module, n._values)
    frames = RULES[n.op](ctx)
    return Cx(n.emit1("Transpose", [frames], {"perm": [*range(rank), rank + 1, rank]}))


@cx_rule("aten.repeat.default")
def repeat(n: NodeCtx) -> Any:
    return _lifted(n, [n.arg(0, "self"), [*n.ints(1, "repeats"), 1]], {})


@cx_rule("aten.permute.default", "aten.permute_copy.default")
def permute(n: NodeCtx) -> Any:
    rank = _rank(n)
    dims = [_dim(d, rank) for d in n.ints(1, "dims")]
    return Cx(n.emit1("Transpose", [n.arg(0, "self").v], {"perm": [*dims, rank]}))


# ---- the DFT ---------------------------------------------------------------------------------

def _scale(norm: int, lengths: list[int]) -> float:
    """ATen's fft_norm_mode over the transformed signal lengths: 0 none, 1 by 1/sqrt(n),
    2 by 1/n, n their product."""
    points = math.prod(lengths)
    return {0: 1.0, 1: 1.0 / math.sqrt(points), 2: 1.0 / points}[norm]


def _fft(n: NodeCtx, z: Cx, dims: list[int], forward: bool, norm: int,
         lengths: list[int] | None = None) -> Cx:
    """The FFT op over `dims` of z; the scale from `lengths` (the signal's, where it is not
    z's: a real inverse's output)."""
    shape = n.shape(z.v)
    scale = _scale(norm, lengths or [shape[d] for d in dims])
    return Cx(n.emit1("FFT", [z.v], {"axes": list(dims), "inverse": not forward,
                                     "scale": scale}))


def _dims(n: NodeCtx, rank: int) -> list[int]:
    dims = [_dim(d, rank) for d in n.ints(1, "dim")]
    if not dims or any(not isinstance(d, int) or not 0 <= d < rank for d in dims):
        raise n.fail(f"dims {n.arg(1, 'dim')} for a tensor of rank {rank}")
    return dims


@cx_rule("aten._fft_c2c.default")
def fft_c2c(n: NodeCtx) -> Any:
    z = _arg_cx(n, 0)
    norm, forward = int(n.arg(2, "normalization")), bool(n.arg(3, "forward"))
    return _fft(n, z, _dims(n, len(n.shape(z.v)) - 1), forward, norm)


@cx_rule("aten._fft_r2c.default")
def fft_r2c(n: NodeCtx) -> Any:
    """The complex DFT of (x, 0) over every dim, then, one-sided, the n // 2 + 1 first bins of
    the last (the others are their mirrors' conjugates): ATen's r2c over the last dim then c2c
    over the others, since the cut commutes with the other dims' transforms."""
    x = n.tensor(0)
    rank = len(n.shape(x))
    dims = _dims(n, rank)
    norm, onesided = int(n.arg(2, "normalization")), bool(n.arg(3, "onesided"))
    z = _fft(n, _promote(n, x, n.dtype(x)), dims, True, norm)
    last = dims[-1]
    length = n.shape(x)[last]
    if not onesided or length // 2 + 1 == length:
        return z
    return Cx(n.emit1("Slice", [z.v], {"starts": [0], "ends": [length // 2 + 1],
                                       "axes": [last]}))


def _hermitian(n: NodeCtx, z: Cx, dim: int, length: int) -> Cx:
    """The full spectrum of `length` bins along `dim` from its one-sided half: bin k past the
    half is conj(bin length - k). The imaginary parts of the zero and Nyquist bins, which a
    real signal's spectrum cannot have, then reach only the output's imaginary plane, which
    the caller drops: ignored, as pocketfft's c2r ignores them."""
    half = n.shape(z.v)[dim]
    extra = length - half
    if extra == 0:
        return z
    mirror = n.emit1("Slice", [z.v], {"starts": [extra], "ends": [0], "axes": [dim],
                                      "steps": [-1]})
    mirror = n.emit1("Mul", [mirror, n.const([1.0, -1.0], n.dtype(z.v))])
    return Cx(n.emit1("Concat", [z.v, mirror], {"axis": dim}))


@cx_rule("aten._fft_c2r.default")
def fft_c2r(n: NodeCtx) -> Any:
    """The inverse complex DFT over all but the last dim, then over the last the inverse of
    the one-sided spectrum completed to `last_dim_size` bins (Hermitian), its real plane: ATen's
    c2c then c2r. The normalisation counts the output's points."""
    z = _arg_cx(n, 0)
    rank = len(n.shape(z.v)) - 1
    dims = _dims(n, rank)
    norm, length = int(n.arg(2, "normalization")), int(n.arg(3, "last_dim_size"))
    last = dims[-1]
    half = n.shape(z.v)[last]
    if length < 1 or half != length // 2 + 1:
        raise n.fail(f"a one-sided spectrum of {half} bins for {length} points "
                     f"(want {length // 2 + 1})")
    lengths = [n.shape(z.v)[d] for d in dims[:-1]]
    if lengths:
        z = _fft(n, z, dims[:-1], False, 0)
    z = _fft(n, _hermitian(n, z, last, length), [last], False, norm, [*lengths, length])
    re, _ = _planes(n, z)
    return re


@cx_rule("aten.exp.default")
def exp(n: NodeCtx) -> Any:
    """e^(a + ib) = e^a (cos b + i sin b)."""
    re, im = _planes(n, _arg_cx(n, 0))
    size = n.emit1("Exp", [re])
    return _joined(n, n.emit1("Mul", [size, n.emit1("Cos", [im])]),
                   n.emit1("Mul", [size, n.emit1("Sin", [im])]))
