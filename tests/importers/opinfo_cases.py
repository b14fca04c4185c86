"""PyTorch's own operator test database (`op_db` of torch.testing._internal.
common_methods_invocations) through the torch front end: the harness of
tests/importers/test_opinfo.py and bench/opinfo_sweep.py.

For each OpInfo (float32, CPU, its first SAMPLES sample inputs; or, `inputs="reference"`, up to
REFERENCE_SAMPLES of its held-out `reference_inputs`: those after the samples its
reference_inputs_func repeats from sample_inputs, which hold exact zeros, ties and extremal
values), every sample becomes a tiny
nn.Module whose float tensor arguments are parameters (other tensors are buffers), calling the
op and returning its tensor results. The module is exported by torch.export, converted by
planner.importers.torch.convert (the trainer's own import), and run on the numpy reference
interpreter forward and backward: the vector-Jacobian product of fixed random cotangents, with
respect to every parameter (planner.frontend.autodiff.gradients). Both are compared with the same
module in float64 in torch (the exact answer to float32 precision).

A factory's float result without a dtype (a window, linspace) takes torch's default dtype,
float64 in the float64 run. Where torch's own suite marks torch's backward wrong (an
expectedFailure of TestBwdGradients.test_fn_grad: as_strided_scatter's), a gradient may match
the finite difference of torch's float64 forward instead.

Tolerance: a float32 implementation differs from float64 by rounding; torch's own float32 run
of the same module shows how large that is (`noise` = max |t32 - t64| of the tensor). The
planner computes in other orders, so its rounding differs but is of the same size: it may be
off by 10 x noise plus 16 float32 ulps of the tensor's scale (torch_step.mismatches' rule).
Where torch's float64 value is not finite the planner's must be the same NaN or infinity;
where only torch's float32 overflows, the element is not compared. Integer and bool results
are compared exactly. An op drawing random numbers (a `nondeterministic_seeded` ATen op in
the program) cannot share torch's stream, and `empty` leaves memory as it finds it: only
shapes and dtypes are compared there.

Outcome of an OpInfo, over its samples that torch can export:
    none     (reference inputs only) the OpInfo has no held-out reference inputs;
    pass     every sample imports and matches forward and backward;
    export   torch.export fails on every sample (not this project's to fix);
    refused  a planner error, one line (the first failing sample's);
    wrong    imported and ran, but a value is off (silently wrong);
    crash    any other exception (an IndexError, numpy's) instead of a one-line refusal.
Its `expectation` is the line tests/importers/opinfo_expectations.json holds for it.

The complex64 sweep (`dtype="complex64"`, issue 86): each OpInfo supporting complex64, its
samples drawn in complex64. A complex argument is held as a real parameter of its planes
([..., 2], torch.view_as_real's layout) that the module views as complex in forward (what the
importer asks of a user's complex weight: convert refuses a trained complex parameter), and a
complex result is given out as its planes (convert's `complex_outputs`). The gradient of the
planes for the planes' real random cotangent is torch's conjugate-Wirtinger one: torch's own run
of the module differentiates through view_as_complex and view_as_real, so the reference is the
view_as_real of torch's complex128 gradient (and its complex64 run the noise), compared as
above. Its expectations are tests/importers/opinfo_complex64_expectations.json and
opinfo_complex64_reference_expectations.json.
"""

from __future__ import annotations

import json
import math
import warnings
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

SAMPLES = 3
REFERENCE_SAMPLES = 8  # held-out reference inputs per OpInfo, at most
INPUTS = ("sample", "reference")
# ATen ops whose values torch leaves undefined (uninitialized memory): compared like random ops.
UNINITIALIZED = frozenset({"empty", "empty_like", "empty_strided", "new_empty",
                           "new_empty_strided", "empty_permuted"})
EPS32 = float(np.finfo(np.float32).eps)
EXPECTATIONS = Path(__file__).with_name("opinfo_expectations.json")
REFERENCE_EXPECTATIONS = Path(__file__).with_name("opinfo_reference_expectations.json")
# The sweeps, by the dtype their samples are drawn in (module docstring).
DTYPES = ("float32", "complex64")


def expectations_path(inputs: str = "sample", dtype: str = "float32") -> Path:
    """The expectations file of an input set of the `dtype` sweep."""
    path = EXPECTATIONS if inputs == "sample" else REFERENCE_EXPECTATIONS
    return path if dtype == "float32" else path.with_name(
        path.name.replace("opinfo_", f"opinfo_{dtype}_", 1))
MAX_LINE = 300  # an expectation line is cut here: a refusal names the op in its first words

# Family of an OpInfo: the first row whose test holds (name prefixes, exact names, OpInfo
# classes); rows follow the families. "elementwise" catches the remaining ufuncs.
FAMILIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("random", ("=normal", "normal.", "=bernoulli", "=multinomial", "rand", "=uniform",
                "=cauchy", "=exponential", "=geometric", "=log_normal", "nn.functional.dropout",
                "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout",
                "nn.functional.rrelu", "=svd_lowrank", "=pca_lowrank",
                "nn.functional.fractional_max_pool")),
    ("casts", ("=bfloat16", "=bool", "=byte", "=char", "=double", "=float", "=half", "=int",
               "=long", "=short", "=cdouble", "=cfloat", "=chalf", "=to")),
    ("losses", ("nn.functional.cross_entropy", "nn.functional.linear_cross_entropy",
                "nn.functional.binary_cross_entropy", "nn.functional.kl_div", "_loss")),
    ("embedding", ("nn.functional.embedding",)),
    ("pooling", ("nn.functional.adaptive_", "nn.functional.avg_pool", "nn.functional.max_pool",
                 "nn.functional.max_unpool", "max_pool2d_with_indices_backward")),
    ("convolution", ("nn.functional.conv", "nn.functional.unfold")),
    ("comparison and logic", ("=eq", "=ne", "=lt", "=le", "=gt", "=ge", "logical_", "=isnan",
                              "=isinf", "=isfinite", "=isposinf", "=isneginf", "=isreal",
                              "=isclose", "=allclose", "=equal", "=signbit", "=isin")),
    ("index", ("=gather", "scatter", "index_", "=take", "=take_along_dim", "=put",
               "=__getitem__", "_unsafe_masked_index", "=masked_select", "=masked_scatter",
               "=nonzero", "=nonzero_static", "=argwhere", "=masked_fill")),
    ("sort", ("=sort", "=argsort", "=msort", "=topk", "=kthvalue", "=median", "=nanmedian",
              "=mode", "=cummax", "=cummin", "=argmax", "=argmin", "^max.", "^min.",
              "=maximum", "=minimum", "=fmax", "=fmin", "=aminmax", "unique", "=searchsorted",
              "=bucketize", "quantile", "=histc", "histogram")),
    ("special", ("special.", "polygamma", "mvlgamma", "=igamma", "=igammac", "=i0",
                 "=digamma", "=lgamma", "=erf", "=erfc", "=erfinv", "=xlogy", "=sinc")),
    ("fft", ("fft.", "=stft", "signal.windows.")),
    ("masked", ("masked.",)),
    ("matmul", ("=addmm", "addmm.", "=addmv", "=addbmm", "=baddbmm", "=dot", "=vdot", "=bmm",
                "bmm.", "=mv", "=addr", "=mm", "=matmul", "=__rmatmul__", "=inner", "=outer",
                "=kron", "=einsum", "=tensordot", "linalg.multi_dot", "linalg.vecdot",
                "nn.functional.linear", "nn.functional.bilinear",
                "nn.functional.scaled_dot_product_attention",
                "nn.functional.multi_head_attention_forward")),
    ("linalg", ("linalg.", "cholesky", "=lu", "lu_", "=qr", "=svd", "=geqrf", "=ormqr",
                "=triangular_solve", "=pinverse", "=matrix_exp", "=logdet", "=cdist",
                "nn.functional.pdist", "=cross", "=cov", "=corrcoef")),
    ("reductions", ("#ReductionOpInfo", "=sum_to_size", "=cumsum", "=cumprod", "=logcumsumexp",
                    "=logsumexp", "var_mean", "std_mean", "=norm", "norm.", "=dist",
                    "=trace", "=renorm", "=trapz", "=trapezoid", "=cumulative_trapezoid",
                    "=diff", "=gradient")),
    ("resampling", ("nn.functional.interpolate", "nn.functional.upsample", "_upsample",
                    "grid_sample", "grid_sampler", "nn.functional.pixel_", "channel_shuffle")),
    ("normalization and activation", ("softmax", "softmin", "_norm", "nn.functional.normalize",
                                      "nn.functional.", "=sigmoid", "=logit", "=glu")),
    ("factories", ("=arange", "=linspace", "linspace.", "=logspace", "logspace.", "=zeros",
                   "=ones", "=empty", "=full", "=eye", "_like", "new_", "=scalar_tensor",
                   "=empty_strided", "=empty_permuted", "=item", "=fill", "=zero_")),
    ("elementwise", ("#UnaryUfuncInfo", "#BinaryUfuncInfo", "=addcmul", "=addcdiv", "=lerp",
                     "=clamp", "=where", "=nan_to_num", "=frexp", "=ldexp", "=logaddexp2",
                     "=float_power", "=polar", "=hypot", "jiterator")),
)


def family_of(name: str, kind: str = "OpInfo") -> str:
    """The family of an OpInfo by its full name and class name ("shape and view" when no row
    matches). A row's test: "=name" the name, "#Class" the class, "^start" how the name
    starts, anything else a part of it.

    >>> family_of("gather"), family_of("nn.functional.max_pool2d"), family_of("cat")
    ('index', 'pooling', 'shape and view')
    >>> family_of("max.binary"), family_of("softmax.with_dtype")
    ('sort', 'normalization and activation')
    >>> family_of("sum", "ReductionOpInfo"), family_of("exp", "UnaryUfuncInfo")
    ('reductions', 'elementwise')
    """
    for family, tests in FAMILIES:
        for t in tests:
            if (t.startswith("=") and name == t[1:]) or (t.startswith("#") and kind == t[1:]) \
                    or (t.startswith("^") and name.startswith(t[1:])) \
                    or (t[0] not in "=#^" and t in name):
                return family
    return "shape and view"


@dataclass(frozen=True)
class Outcome:
    """What happened to one OpInfo: `status` (pass | export | refused | wrong | crash),
    `detail` (the line saying why, with numbers), the samples tried, and whether every
    exportable sample imported (converted and differentiated)."""

    name: str
    family: str
    status: str
    detail: str = ""
    samples: int = 0
    imported: bool = False

    @property
    def expectation(self) -> str:
        """The stable line the expectations file holds: pass | export | the refusal line |
        `wrong: <which tensor>` | `crash: <exception>` (numbers of a mismatch left out)."""
        if self.status in ("pass", "export", "none"):
            return self.status
        line = self.detail.splitlines()[0] if self.detail else ""
        if self.status == "wrong":
            line = "wrong: " + line.split(": error", 1)[0]
        elif self.status == "crash":
            line = "crash: " + line
        return line[:MAX_LINE]


def full_name(op: Any) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def opinfos(dtype: str = "float32") -> list[Any]:
    """The OpInfos of op_db that support `dtype` (float32, complex64) on the CPU."""
    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    return [op for op in op_db if getattr(torch, dtype) in op.supported_dtypes("cpu")]


def by_name(dtype: str = "float32") -> dict[str, Any]:
    return {full_name(op): op for op in opinfos(dtype)}


def _grads(op: Any, dtype: str) -> bool:
    """Does the check differentiate the OpInfo in the `dtype` sweep (a complex64 one only where
    torch's backward supports complex64)?"""
    import torch

    if not op.supports_autograd:
        return False
    backward = getattr(op, "supported_backward_dtypes", None)  # (none: a call written by hand)
    return dtype == "float32" or backward is None or getattr(torch, dtype) in backward("cpu")


# ---- one sample -------------------------------------------------------------------------------

class _Skip(Exception):
    """The sample cannot be exported by torch (status "export")."""


def _planner_errors() -> tuple[type, ...]:
    from planner.errors import PlanError, UserError
    from planner.frontend.autodiff import AutodiffError
    from planner.graph.builder import GraphBuildError
    from planner.graph.validate import GraphError
    from planner.importers.onnx.errors import OnnxImportError
    from planner.importers.torch.context import TorchImportError
    from planner.ops.base import OpError

    return (TorchImportError, AutodiffError, GraphBuildError, GraphError, OpError,
            OnnxImportError, UserError, PlanError)


def _module(op: Any, sample: Any, dtype: Any, grads: bool, planes: bool = False
            ) -> tuple[Any, list[str]]:
    """An nn.Module calling `op` on `sample` with its tensors in `dtype` (floats; others as
    they are): float tensors are parameters p0, p1, ... (requiring grad when `grads`), other
    tensors buffers b0, ...; returns it and its parameter names. With `planes` (the complex64
    sweep), a complex tensor is a parameter too, of its planes in `dtype`, viewed as complex
    (complex64 from float32, complex128 from float64) in forward."""
    import torch
    from torch.utils import _pytree as pytree

    leaves, spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
    viewed = {k for k, v in enumerate(leaves)
              if planes and isinstance(v, torch.Tensor) and v.is_complex()}

    class Op(torch.nn.Module):
        def forward(self) -> Any:
            own = [(torch.view_as_complex(getattr(self, n)) if k in viewed else getattr(self, n))
                   if n else v for k, (n, v) in enumerate(zip(names, leaves, strict=True))]
            x, args, kwargs = pytree.tree_unflatten(own, spec)
            out = op.op(x, *args, **kwargs)
            return tuple(t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor))

    m = Op()
    names: list[str] = []
    params: list[str] = []
    for k, v in enumerate(leaves):
        if not isinstance(v, torch.Tensor):
            names.append("")
        elif v.is_floating_point() or k in viewed:
            names.append(f"p{len(params)}")
            params.append(names[-1])
            value = torch.view_as_real(v.detach().resolve_conj()) if k in viewed else v.detach()
            m.register_parameter(names[-1], torch.nn.Parameter(
                value.to(dtype).clone(), requires_grad=grads))
        else:
            names.append(f"b{sum(n.startswith('b') for n in names)}")
            m.register_buffer(names[-1], v.detach().clone())
    return m, params


def pytree_leaves(tree: Any) -> list[Any]:
    from torch.utils import _pytree as pytree

    return pytree.tree_leaves(tree)


def _torch_run(op: Any, sample: Any, dtype: Any, grads: bool, cotangents: Sequence[Any] | None,
               planes: bool = False
               ) -> tuple[list[np.ndarray], dict[str, np.ndarray], list[bool]]:
    """torch's outputs in `dtype`, its gradients with respect to each parameter for the
    cotangents (None: zeros where no gradient reaches), and which outputs are differentiable
    (`planes`: _module's)."""
    import torch

    m, params = _module(op, sample, dtype, grads, planes)
    # a factory's float result (a window, linspace without a dtype) takes the default dtype:
    # float64 in the float64 run, whose values are then the exact answer too
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype if dtype in (torch.float32, torch.float64) else default)
    try:
        outs = m()
    finally:
        torch.set_default_dtype(default)
    diff = [o.requires_grad for o in outs]
    g: dict[str, np.ndarray] = {}
    if grads and cotangents is not None and any(diff):
        ys = [o for o, d in zip(outs, diff, strict=True) if d]
        cs = [_complex_cotangent(c, o).to(o.dtype)
              for o, c, d in zip(outs, cotangents, diff, strict=True) if d]
        ps = [getattr(m, p) for p in params]
        got = torch.autograd.grad(ys, ps, cs, allow_unused=True)
        # (force: torch's gradient of a constant op, sgn's, is a ZeroTensor)
        g = {p: (np.zeros(tuple(getattr(m, p).shape)) if v is None
                 else v.detach().numpy(force=True)) for p, v in zip(params, got, strict=True)}
    # numpy has no bfloat16: such an output is compared as its exact float32 value; a complex
    # one as its planes, the import's (convert's complex_outputs)
    return [(o.detach().float() if o.dtype == torch.bfloat16 else
             torch.view_as_real(o.detach().resolve_conj()) if o.is_complex() else
             o.detach()).numpy() for o in outs], g, diff


def _complex_cotangent(c: Any, o: Any) -> Any:
    """The cotangent of output `o` as torch takes it: a complex output's from its planes (the
    import's cotangent of them is torch's complex one's view_as_real)."""
    import torch

    if o.is_complex() and not c.is_complex():
        return torch.view_as_complex(c.to(torch.float64 if o.dtype == torch.complex128
                                          else torch.float32).contiguous())
    return c


def _autograd_known_wrong(op: Any) -> bool:
    """Does torch's own suite mark the OpInfo's backward wrong (an expectedFailure of
    TestBwdGradients.test_fn_grad, gradcheck's analytical-against-numerical check, on the CPU)?
    as_strided_scatter's passes dy to self where src overwrites it: there the finite difference
    is the reference too (eager autograd's CopySlices, of the in-place code export turns into
    it, gives that one)."""
    import unittest

    return any(getattr(d, "cls_name", None) == "TestBwdGradients"
               and getattr(d, "test_name", None) == "test_fn_grad"
               and getattr(d, "active_if", False) and getattr(d, "device_type", None) in
               (None, "cpu") and unittest.expectedFailure in getattr(d, "decorators", ())
               for d in getattr(op, "decorators", ()))


def _finite_difference(op: Any, sample: Any, param: str, cotangents: Sequence[Any],
                       limit: int = 4096, planes: bool = False) -> np.ndarray | None:
    """The vector-Jacobian product for `param` by central differences of torch's float64
    forward (None past `limit` elements): the reference where torch's backward is known
    wrong."""
    import torch

    m, _ = _module(op, sample, torch.float64, False, planes)
    p = getattr(m, param)
    if p.numel() > limit:
        return None
    cs = [_complex_cotangent(c, o) for c, o in zip(cotangents, m(), strict=True)]

    def value() -> float:
        with torch.no_grad():
            return float(sum((_planes(o) * _planes(c)).sum() for o, c in zip(m(), cs,
                                                                             strict=True)
                             if o.is_floating_point() or o.is_complex()))

    flat = p.data.view(-1)
    out = np.zeros(p.numel())
    for i in range(p.numel()):
        x = float(flat[i])
        h = 1e-6 * max(1.0, abs(x))
        flat[i] = x + h
        up = value()
        flat[i] = x - h
        out[i] = (up - value()) / (2 * h)
        flat[i] = x
    return out.reshape(tuple(p.shape))


def _planes(t: Any) -> Any:
    """A real tensor in float64, a complex one as its planes (view_as_real)."""
    import torch

    return torch.view_as_real(t.resolve_conj()).double() if t.is_complex() else t.double()


def compare(what: str, ours: np.ndarray, t32: np.ndarray, t64: np.ndarray,
            ulps: float = 16) -> str:
    """'' when `ours` is within the tolerance of the module docstring (its floor `ulps`
    float32 ulps of the tensor's scale), else what is off."""
    if ours.shape != t64.shape:
        return f"{what}: shape {list(ours.shape)}, torch's {list(t64.shape)}"
    if t64.dtype.kind not in "fc":
        if ours.dtype.kind != t64.dtype.kind and not (t64.dtype.kind in "iu"
                                                     and ours.dtype.kind in "iu"):
            return f"{what}: dtype {ours.dtype}, torch's {t64.dtype}"
        bad = np.asarray(ours != t64)
        return f"{what}: {int(bad.sum())} elements differ" if bad.any() else ""
    ours, t32, want = (np.asarray(a, np.float64) for a in (ours, t32, t64))
    finite = np.isfinite(want)
    special = ~finite & ~(np.isnan(want) & np.isnan(ours)) & (ours != want)
    if special.any():
        k = int(np.argmax(special))
        return f"{what}: error at element {k}: {ours.flat[k]} where torch has {want.flat[k]}"
    compared = finite & np.isfinite(t32)
    if not compared.any():
        return ""
    w, o, n = want[compared], ours[compared], t32[compared]
    with np.errstate(invalid="ignore", over="ignore"):
        err = float(np.max(np.abs(o - w)))
        noise = float(np.max(np.abs(n - w)))
    scale = float(np.max(np.abs(w)))
    if not math.isfinite(err) or err > 10 * noise + ulps * EPS32 * scale:
        return f"{what}: error {err:.3g}, torch float32 noise {noise:.3g}, scale {scale:.3g}"
    return ""


def _seeded(op: Any, inputs: str = "sample", dtype: str = "float32") -> Any:
    """The OpInfo's sample inputs (in `dtype`, CPU), from a seed of its name: the same values
    on every run; `inputs="reference"`: its held-out reference inputs (held_out)."""
    import torch

    torch.manual_seed(zlib.crc32(full_name(op).encode()))
    if inputs == "reference":
        return held_out(op, dtype)
    return op.sample_inputs("cpu", getattr(torch, dtype), requires_grad=_grads(op, dtype))


def held_out(op: Any, dtype: str = "float32") -> Iterator[Any]:
    """The OpInfo's reference inputs past those equal to its sample inputs: reference_inputs
    funcs mostly repeat sample_inputs first (the same values from the same seed), then add
    their own; none when the OpInfo has no reference_inputs_func. Without requires_grad: some
    reference generators fail with it (an int64 tensor asked to require grad); the harness
    makes its own parameters of the float tensors."""
    import torch

    if op.reference_inputs_func is None:
        return
    seed = zlib.crc32(full_name(op).encode())
    torch.manual_seed(seed)
    samples = list(op.sample_inputs("cpu", getattr(torch, dtype), requires_grad=False))
    torch.manual_seed(seed)
    for k, ref in enumerate(op.reference_inputs("cpu", getattr(torch, dtype),
                                                requires_grad=False)):
        if k < len(samples) and _same_sample(ref, samples[k]):
            continue
        samples = []  # past the repeated prefix
        yield ref


def _same_sample(a: Any, b: Any) -> bool:
    leaves = [pytree_leaves((s.input, s.args, s.kwargs)) for s in (a, b)]
    if len(leaves[0]) != len(leaves[1]):
        return False
    import torch

    for u, v in zip(*leaves, strict=True):
        if isinstance(u, torch.Tensor) != isinstance(v, torch.Tensor):
            return False
        if isinstance(u, torch.Tensor):
            if u.shape != v.shape or u.dtype != v.dtype or u.layout != v.layout or \
                    (u.layout == torch.strided and not torch.equal(u.detach(), v.detach())):
                return False
        elif not (u is v or (type(u) is type(v) and _equal(u, v))):
            return False
    return True


def _equal(u: Any, v: Any) -> bool:
    try:
        return bool(u == v)
    except Exception:
        return False


def _refusal(e: Exception) -> tuple[str, str]:
    """A planner error's line: a refusal, or a crash where the importer wrapped an internal
    exception of a rule (`cannot convert: IndexError: ...`)."""
    line = str(e).splitlines()[0] if str(e) else type(e).__name__
    return ("crash" if ": cannot convert: " in line else "refused"), line


@dataclass(frozen=True)
class Run:
    """A passing sample as the executor check needs it: the forward-and-backward graph, its
    params and feeds (the cotangents), and torch's float32 and float64 values of each output
    of the graph that the check compares (the op's outputs, the parameters' gradients)."""

    graph: Any
    params: dict[str, np.ndarray]
    feeds: dict[str, np.ndarray]
    torch: dict[str, tuple[np.ndarray, np.ndarray]]
    values: bool = True  # False: a random op's run, whose shapes alone are compared


def check_sample(op: Any, sample: Any, seed: int = 0, runs: list[Run] | None = None,
                 random_runs: bool = False, dtype: str = "float32") -> tuple[str, str]:
    """One sample: (status, detail) as in the module docstring, status never "export" but
    raising _Skip when torch cannot export it. A passing sample whose values are compared (not
    a random op's, unless `random_runs`: then with `values` False) is appended to `runs` when
    given. `dtype`: the sweep's (complex64: its complex tensors as planes, module docstring)."""
    import torch

    from planner.frontend.autodiff import gradients
    from planner.graph.interpret import run
    from planner.importers.torch.convert import convert

    grads = _grads(op, dtype)
    planes = dtype != "float32"
    leaves = pytree_leaves((sample.input, sample.args, sample.kwargs))
    if any(isinstance(v, torch.Tensor) and v.layout != torch.strided for v in leaves):
        # torch.export aborts the process on sparse tensors (a c10::Error in autograd's
        # input metadata), which is torch's own limit
        raise _Skip("sparse tensors")
    module, params = _module(op, sample, torch.float32, grads, planes)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            outs = module()
            if not outs:
                raise _Skip("returns no tensor")
            program = torch.export.export(module, ())
    except _Skip:
        raise
    except Exception as e:  # torch's own failure: the OpInfo is "not exportable"
        raise _Skip(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
    user = [getattr(s.arg, "name", None) for s in program.graph_signature.output_specs
            if s.kind.name == "USER_OUTPUT"]
    first: dict[Any, int] = {}  # a tensor returned twice is one graph output
    for k, n in enumerate(user):
        first.setdefault(n, k)
    distinct = sorted(set(first.values()))
    random = any(isinstance(n.target, torch._ops.OpOverload)
                 and (torch.Tag.nondeterministic_seeded in n.target.tags
                      or n.target._opname in UNINITIALIZED)
                 for n in program.graph.nodes if n.op == "call_function")
    errors = _planner_errors()
    rng = np.random.default_rng(seed)
    for node in program.graph.nodes:
        # A refusal would name this file's line (the op's call here) as the user's: dropped,
        # so that the expected lines do not move with this file.
        node.meta.pop("stack_trace", None)
    try:
        imported = convert(program, name="opinfo", complex_outputs=True)
        names = list(imported.graph.outputs)
        if len(names) != len(distinct):
            return "crash", (f"the import gave {len(names)} outputs for torch's "
                             f"{len(distinct)}")
        diff_t = [outs[k].requires_grad for k in distinct]
        of = [n for n, d in zip(names, diff_t, strict=True)
              if d and imported.graph.tensor(n).dtype.startswith("float")]
        wrt = [p for p in params if any(t.name == p for t in imported.graph.by_role("param"))]
        graph, gnames = gradients(imported.graph, wrt=wrt, of=of) if (of and wrt) else \
            (imported.graph, {})
    except errors as e:
        return _refusal(e)
    except Exception as e:
        return "crash", f"import: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    # in each output's own dtype (a float16 or bfloat16 result's feed is one); torch reads the
    # same values as float32, exactly
    cot = {n: rng.standard_normal(graph.tensor(n).shape).astype(graph.tensor(n).dtype)
           for n in of}
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            feeds = {f"grad/{n}": v for n, v in cot.items()}
            got = run(graph, feeds, imported.params())
    except errors as e:
        return _refusal(e)
    except Exception as e:
        return "crash", f"run: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    # torch's cotangent for each of its outputs: ours where the import differentiates it.
    by_pos = dict(zip(distinct, names, strict=True))
    cotangents = [torch.from_numpy(cot[by_pos[first[user[k]]]].astype(np.float32))
                  if by_pos.get(first[user[k]])
                  in cot else torch.zeros(outs[k].shape, dtype=outs[k].dtype)
                  for k in range(len(user))]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            o32, g32, _ = _torch_run(op, sample, torch.float32, grads, cotangents, planes)
            o64, g64, _ = _torch_run(op, sample, torch.float64, grads, cotangents, planes)
    except Exception as e:  # torch's own backward fails (a reference input's broadcast clamp)
        raise _Skip(f"torch's own run: {type(e).__name__}: "
                    f"{str(e).splitlines()[0] if str(e) else ''}") from None
    for k, n in zip(distinct, names, strict=True):
        mine = np.asarray(got[n])
        if random:
            if mine.shape != o64[k].shape:
                return "wrong", (f"output {k}: shape {list(mine.shape)}, torch's "
                                 f"{list(o64[k].shape)}")
            continue
        bad = compare(f"output {k}", mine, o32[k], o64[k])
        if bad:
            return "wrong", bad
    if not random:
        for p in wrt:
            mine = got[gnames[p]] if gnames.get(p) else np.zeros(g64[p].shape) if p in g64 \
                else None
            if mine is None:
                continue
            bad = compare(f"gradient of {p}", np.asarray(mine), g32[p], g64[p])
            if bad and _autograd_known_wrong(op):
                fd = _finite_difference(op, sample, p, cotangents, planes=planes)
                if fd is not None:  # the reference of this gradient, the executor's too
                    g32[p], g64[p] = fd.astype(np.float32), fd
                    bad = compare(f"gradient of {p}", np.asarray(mine), g32[p], g64[p])
            if bad:
                return "wrong", bad
    if runs is not None and (random_runs or not random):
        refs = {n: (o32[k], o64[k]) for k, n in zip(distinct, names, strict=True)}
        refs |= {gnames[p]: (g32[p], g64[p]) for p in wrt if gnames.get(p) and p in g64}
        runs.append(Run(graph, imported.params(), feeds, refs, values=not random))
    return "pass", ""


def check_call(fn: Any, x: Any, *args: Any, dtype: str = "float32", **kwargs: Any
               ) -> tuple[str, str]:
    """check_sample of `fn(x, *args, **kwargs)` (a module's op written by hand, not an OpInfo)
    in the `dtype` sweep: (status, detail); status "export" when torch cannot export it.

    >>> import torch
    >>> check_call(torch.tanh, torch.linspace(-2.0, 2.0, 5))
    ('pass', '')
    """
    from types import SimpleNamespace

    op = SimpleNamespace(op=fn, supports_autograd=True)
    try:
        return check_sample(op, SimpleNamespace(input=x, args=args, kwargs=kwargs),
                            dtype=dtype)
    except _Skip as e:
        return "export", str(e)


def check_opinfo(op: Any, samples: int | None = None, runs: list[Run] | None = None,
                 inputs: str = "sample", dtype: str = "float32") -> Outcome:
    """The outcome of one OpInfo over its first `samples` samples of the input set `inputs`
    (module docstring; SAMPLES sample inputs, REFERENCE_SAMPLES held-out reference inputs) in
    the `dtype` sweep; its passing samples are appended to `runs` when given (check_sample)."""
    if samples is None:
        samples = SAMPLES if inputs == "sample" else REFERENCE_SAMPLES
    name, family = full_name(op), family_of(full_name(op), type(op).__name__)
    tried = exported = 0
    first_skip = ""
    results: list[tuple[str, str]] = []
    try:
        chosen = list(_first(_seeded(op, inputs, dtype), samples))
    except Exception as e:  # the OpInfo's own sample generator fails on this torch
        return Outcome(name, family, "export", f"{inputs} inputs: {type(e).__name__}: {e}")
    if not chosen and inputs == "reference":
        return Outcome(name, family, "none", "no held-out reference inputs")
    for k, sample in enumerate(chosen):
        tried += 1
        try:
            status, detail = check_sample(op, sample, seed=k, runs=runs, dtype=dtype)
        except _Skip as e:
            first_skip = first_skip or f"sample {k}: {e}"
            continue
        exported += 1
        results.append((status, f"sample {k}: {detail}" if status in ("wrong",) else detail))
    if not exported:
        return Outcome(name, family, "export", first_skip or "no samples", tried)
    imported = all(s in ("pass", "wrong") for s, _ in results)
    for status in ("crash", "wrong", "refused"):
        for s, detail in results:
            if s == status:
                return Outcome(name, family, status, detail, tried, imported)
    return Outcome(name, family, "pass", "", tried, imported)


def _first(it: Iterable[Any], n: int) -> Iterator[Any]:
    for k, v in enumerate(it):
        if k >= n:
            return
        yield v


def check_named(name: str, inputs: str = "sample", dtype: str = "float32") -> Outcome:
    """check_opinfo of the OpInfo named `name` (a pool worker's task)."""
    return check_opinfo(by_name(dtype)[name], inputs=inputs, dtype=dtype)


# ---- the sweep and its table ------------------------------------------------------------------

TIMEOUT = 600.0  # seconds without a finished OpInfo before its worker is taken for hung


def sweep(names: Sequence[str] | None = None, jobs: int = 1,
          progress: Any = None, inputs: str = "sample", dtype: str = "float32") -> list[Outcome]:
    """check_opinfo of every OpInfo of the `dtype` sweep (or those named) on the input set
    `inputs`, in name order, on `jobs` worker processes (`python -m tests.importers.opinfo_cases
    INPUTS DTYPE`, an OpInfo a line in, an Outcome a line out). An OpInfo whose worker dies
    (a signal inside torch) or goes TIMEOUT seconds without an answer is a crash; a new worker
    takes the rest.
    `progress(outcome)` is called as each one finishes."""
    ops = by_name(dtype)
    names = sorted(ops) if names is None else sorted(names)
    families = {n: family_of(n, type(ops[n]).__name__) for n in names}
    shards = [names[k::max(jobs, 1)] for k in range(max(jobs, 1))]
    done = in_threads(shards, lambda shard, record: _run_shard(shard, families, record,
                                                               [inputs, dtype]), progress)
    return [done[n] for n in names]


def in_threads(shards: Sequence[Any], run: Callable[[Any, Callable[[Any], None]], None],
               progress: Callable[[Any], None] | None = None) -> dict[str, Any]:
    """`run(shard, record)` for every shard, each on a thread of its own (each drives a worker
    process); what they `record` (results with a `name`), by name, `progress` told of each as
    it comes."""
    import threading

    done: dict[str, Any] = {}
    lock = threading.Lock()

    def record(result: Any) -> None:
        with lock:
            done[result.name] = result
            if progress is not None:
                progress(result)

    threads = [threading.Thread(target=run, args=(shard, record)) for shard in shards]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return done


def _run_shard(names: list[str], families: dict[str, str], record: Any,
               args: list[str]) -> None:
    import subprocess
    import sys
    import threading

    root = Path(__file__).resolve().parents[2]
    pending = list(names)
    while pending:
        proc = subprocess.Popen([sys.executable, "-m", "tests.importers.opinfo_cases", *args],
                                cwd=root, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("\n".join(pending) + "\n")
        proc.stdin.close()
        timer = threading.Timer(TIMEOUT, proc.kill)
        timer.start()
        for line in proc.stdout:
            if not line.startswith("{"):
                continue
            timer.cancel()
            o = Outcome(**json.loads(line))
            pending.remove(o.name)
            record(o)
            timer = threading.Timer(TIMEOUT, proc.kill)
            timer.start()
        timer.cancel()
        code = proc.wait()
        if pending:  # the worker died on pending[0] (or hung on it)
            name = pending.pop(0)
            why = f"the process died ({code})" if code != -9 else \
                f"no answer in {TIMEOUT:.0f} s"
            record(Outcome(name, families[name], "crash", why))


def _worker() -> None:
    """The worker: the input set and the dtype as its arguments, OpInfo names on stdin, one
    Outcome as JSON a line on stdout."""
    import dataclasses
    import sys

    inputs = sys.argv[1] if len(sys.argv) > 1 else "sample"
    dtype = sys.argv[2] if len(sys.argv) > 2 else "float32"
    if inputs not in INPUTS or dtype not in DTYPES:
        raise SystemExit(f"inputs {inputs!r} is not one of {', '.join(INPUTS)}, or dtype "
                         f"{dtype!r} not one of {', '.join(DTYPES)}")
    out, sys.stdout = sys.stdout, sys.stderr  # what torch prints does not mix with the answers
    ops = by_name(dtype)
    for name in sys.stdin.read().split():
        o = check_opinfo(ops[name], inputs=inputs, dtype=dtype)
        out.write(json.dumps(dataclasses.asdict(o)) + "\n")
        out.flush()


@dataclass(frozen=True)
class Expected:
    """An OpInfo's row of the expectations file."""

    family: str
    outcome: str  # Outcome.expectation


def load_expectations(path: Path = EXPECTATIONS) -> dict[str, Expected]:
    """OpInfo name -> its expected outcome ({} before the first sweep)."""
    if not path.exists():
        return {}
    rows = json.loads(path.read_text(encoding="utf-8"))
    return {name: Expected(*row) for name, row in rows.items()}


def expectations_json(rows: dict[str, Expected]) -> str:
    """The expectations file: OpInfo name -> [family, expectation line], by name, a row a
    line (so that a change of one OpInfo is one line of a diff)."""
    lines = [f"{json.dumps(n)}: {json.dumps([rows[n].family, rows[n].outcome])}"
             for n in sorted(rows)]
    return "{\n" + ",\n".join(lines) + "\n}\n"


FAST_PER_FAMILY = 4  # 78 OpInfos; the whole sweep: make opinfo


def fast_subset(expected: dict[str, Expected], per_family: int = FAST_PER_FAMILY) -> list[str]:
    """A fixed, family-balanced selection: `per_family` OpInfos of each family, evenly spaced
    in name order (all of a smaller family).

    >>> rows = {f"op{k}": Expected("a" if k < 8 else "b", "pass") for k in range(10)}
    >>> fast_subset(rows, 3)
    ['op0', 'op2', 'op5', 'op8', 'op9']
    """
    chosen: list[str] = []
    families = sorted({e.family for e in expected.values()})
    for family in families:
        names = sorted(n for n, e in expected.items() if e.family == family)
        step = max(len(names) / per_family, 1.0)
        chosen += sorted({names[int(k * step)] for k in range(min(per_family, len(names)))})
    return chosen


def table(outcomes: Sequence[Outcome], dtype: str = "float32") -> str:
    """The issue's table: OpInfos exportable, imported on every sample, equal to torch forward
    and backward, silently wrong, crashing; then clean/tried per family (tried: exportable,
    with held-out inputs for the reference set)."""
    tried = [o for o in outcomes if o.status not in ("export", "none")]
    n = max(len(tried), 1)

    def row(what: str, k: int, names: Sequence[str] = ()) -> str:
        listed = f" ({', '.join(names)})" if names else ""
        return f"| {what} | {k} ({100 * k / n:.0f}%){listed} |"

    wrong = [o.name for o in tried if o.status == "wrong"]
    crash = [o.name for o in tried if o.status == "crash"]
    lines = ["| | OpInfos |", "| --- | --- |",
             f"| {dtype} OpInfos in op_db | {len(outcomes)} |",
             *([f"| with held-out reference inputs | "
                f"{sum(o.status != 'none' for o in outcomes)} |"]
               if any(o.status == "none" for o in outcomes) else []),
             f"| exportable by torch.export | {len(tried)} |",
             row("import on every sample", sum(o.imported for o in tried)),
             row("forward and backward equal to torch on every sample",
                 sum(o.status == "pass" for o in tried)),
             row("silently wrong", len(wrong), wrong),
             row("crash instead of a refusal", len(crash), crash),
             row("refused in one line", sum(o.status == "refused" for o in tried)),
             "", "| family | clean / tried |", "| --- | --- |"]
    for family in sorted({o.family for o in outcomes}):
        mine = [o for o in tried if o.family == family]
        lines.append(f"| {family} | {sum(o.status == 'pass' for o in mine)} / {len(mine)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    _worker()
