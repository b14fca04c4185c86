"""CUDA kernels of the element-wise ops, generated with TVM from each op's scalar formula.

Every op with a `pointwise` formula (planner/ops/base.py, Pointwise) becomes TE computes with
symbolic sizes, so one kernel serves every shape:

  flat       y[i] = f(x0[i], x1[i], ...) over n elements (int64 indices); scalar inputs (a step
             counter) are read at element 0
  broadcast  y[i] = f(x0[off0(i)], ...): the output as R collapsed dims (d0..d{R-1}), input k's
             element at sum_j coord_j(i) * s{k}_{j} (its per-dim strides, 0 where it broadcasts);
             R = 1 (int64 indices, no division) or 2, 3, 4, 8 (int32 index math: the kernel
             checks n < 2**31 at load)

Each input is first loaded into a register stage (computed at the thread's element), so every
load of an element happens before any store: update ops run in place (p' over p) safely. Each
compute is scheduled once per threads-per-block variant (BLOCKS): the flat loop split by the
block size and bound to blockIdx.x / threadIdx.x, blocks = ceil(n / block).

The generated file, templates/cuda/runtime/kernels/generated/tvm_pointwise.cuh, holds the
`extern "C" __global__` kernels (TVM's CUDA source, its preamble replaced by one include and
`__restrict__` dropped, since outputs may alias inputs) and a table, `kTvmKernels`, naming for
each the op, dtypes, form, rank, block and argument list, which pointwise.cu launches from.

    python -m codegen.tvm_kernels --write    regenerate the file
    python -m codegen.tvm_kernels --check    exit 1 if it differs from what would be generated

Low float types (bfloat16, float16; mixed precision): a signature in them loads the low
values, computes the formula in float32 and rounds each output once. Each also gets a `v2`
variant: every input contiguous with the output, n even and the addresses 4-byte aligned, one
thread loads and stores two elements at once (`nv_bfloat162` / `half2`); pointwise.cu picks
it per step when the addresses allow, else the one-element kernel. They live in a second file,
tvm_pointwise_low.cuh, which includes cuda_bf16.h / cuda_fp16.h (the float file stays plain C
a host compiler can run: tests/codegen/test_tvm_kernels.py).

The output depends only on the ops' formulas and the TVM version (no time, no path).
"""

from __future__ import annotations

import itertools
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.dtypes import LOW_FLOATS
from planner.ops import REGISTRY
from planner.ops.base import Pointwise

OUT = (Path(__file__).resolve().parent.parent / "templates" / "cuda" / "runtime" / "kernels"
       / "generated" / "tvm_pointwise.cuh")
OUT_LOW = OUT.with_name("tvm_pointwise_low.cuh")
# Threads per block. 256 is the default; 128 and 512 let the plan trade occupancy for blocks.
BLOCKS = (128, 256, 512)
BROADCAST_RANKS = (1, 2, 3, 4, 8)
# kernels of several outputs (MaxGrad, MinGrad, PReluGrad): the common ranks
MULTI_RANKS = (1, 2, 3, 4)
CODES = {"float32": "f", "float64": "d", "int64": "l", "int32": "i", "uint64": "u",
         "bool": "b", "float16": "e", "bfloat16": "E"}   # numpy's / ml_dtypes' type chars


@dataclass(frozen=True)
class Spec:
    """One generated compute (before its block variants)."""

    ops: tuple[str, ...]      # ops sharing the formula (Dropout, DropoutGrad)
    pointwise: Pointwise
    ins: tuple[str, ...]      # input dtypes
    outs: tuple[str, ...]     # output dtypes
    form: tuple[tuple[str, Any], ...]  # structural attr values
    rank: int                 # 0 flat, else broadcast over `rank` dims
    vec: int = 1              # elements per thread (2: the low types' paired loads, flat)

    @property
    def low(self) -> bool:
        return any(d in LOW_FLOATS for d in (*self.ins, *self.outs))

    @property
    def sig(self) -> str:
        return "".join(CODES[d] for d in self.ins) + "_" + "".join(CODES[d] for d in self.outs)

    @property
    def blocks(self) -> tuple[int, ...]:
        """Its threads-per-block variants: the formula's own choice, else BLOCKS."""
        return self.pointwise.blocks or BLOCKS

    @property
    def form_text(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.form)

    def symbol(self, block: int) -> str:
        form = "".join("_" + re.sub(r"\W", "", str(v)) for _, v in self.form)
        vec = f"_v{self.vec}" if self.vec > 1 else ""
        return f"tvm_{self.ops[0]}_{self.sig}{form}_r{self.rank}{vec}_b{block}"


def _parse_signature(sig: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    ins, outs = sig.split("->")
    return tuple(d for d in ins.split(",") if d), tuple(outs.split(","))


def specs() -> list[Spec]:
    """Every compute to generate, in a fixed order (ops sorted by name)."""
    out: list[Spec] = []
    seen: dict[int, int] = {}
    groups: list[tuple[list[str], Pointwise]] = []
    for name in sorted(REGISTRY):
        pw = REGISTRY[name].pointwise
        if pw is None:
            continue
        if id(pw) in seen:
            groups[seen[id(pw)]][0].append(name)
            continue
        seen[id(pw)] = len(groups)
        groups.append(([name], pw))
    for names, pw in groups:
        forms = [[(k, v) for v in values] for k, values in pw.structural]
        for sig in pw.signatures:
            ins, outs = _parse_signature(sig)
            for arity in pw.arities or (None,):
                dtypes = ins if arity is None else ins * arity
                for form in itertools.product(*forms):
                    ranks = (BROADCAST_RANKS if len(outs) == 1 else MULTI_RANKS) \
                        if pw.broadcast else (0,)
                    for rank in ranks:
                        out.append(Spec(tuple(names), pw, dtypes, outs, tuple(form), rank))
                    if len(outs) == 1 and any(d in LOW_FLOATS for d in (*dtypes, *outs)):
                        out.append(Spec(tuple(names), pw, dtypes, outs, tuple(form), 0, 2))
    return out


# ---- TE computes ------------------------------------------------------------------------------

def _dtype_of(e) -> str:
    return str(e.ty)


class _Math:
    """The math namespace a formula sees, over TVM expressions."""

    def __init__(self, tirx, index, out_dtypes):
        self._t = tirx
        self.index = index
        self.out_dtypes = out_dtypes

    def _expr(self, v, like="float32"):
        t = self._t
        if isinstance(v, (t.expr.EqualOp, t.expr.NotEqualOp)):
            return v.asobject()
        if isinstance(v, (bool, int, float)):
            return t.const(v, like)
        return v

    def _dtype(self, *vs) -> str:
        for v in vs:
            if not isinstance(v, (bool, int, float)):
                return _dtype_of(self._expr(v))
        return "float32"

    def where(self, c, a, b):
        d = self._dtype(a, b)
        return self._t.Select(self._expr(c), self._expr(a, d), self._expr(b, d))

    def any(self, a, b):
        return self._t.Or(self._expr(a), self._expr(b))

    def all(self, a, b):
        return self._t.And(self._expr(a), self._expr(b))

    def isnan(self, x):
        x = self._expr(x)
        if not _dtype_of(x).startswith("float"):
            return self._t.const(False, "bool")  # an integer or bool is never NaN
        return self._t.isnan(x)

    def _finite_or(self, name, x, integral: bool):
        x = self._expr(x)
        if not _dtype_of(x).startswith("float"):
            return self._t.const(integral, "bool")  # an integer or bool is finite
        return getattr(self._t, name)(x)

    def isinf(self, x):
        return self._finite_or("isinf", x, False)

    def isfinite(self, x):
        return self._finite_or("isfinite", x, True)

    def not_(self, a):
        return self._t.Not(self._expr(a))

    def cast(self, x, dtype):
        x = self._expr(x, dtype)
        return x if _dtype_of(x) == dtype else x.astype(dtype)

    def u64(self, v):
        return self._t.const(v, "uint64")

    def _extern(self, name, *xs):
        xs = [self._expr(x) for x in xs]
        assert _dtype_of(xs[0]) == "float32", name
        return self._t.call_pure_extern("float32", name + "f", *xs)

    def exp(self, x): return self._t.exp(x)
    def log(self, x): return self._t.log(x)
    def log1p(self, x): return self._t.log1p(x)
    def sqrt(self, x): return self._t.sqrt(x)
    def tanh(self, x): return self._t.tanh(x)
    def erf(self, x): return self._t.erf(x)
    def abs(self, x): return self._t.abs(x)
    def pow(self, a, b): return self._t.power(a, b)
    # no TVM intrinsic: the C library's (CUDA's device erfcf / expm1f; libm's on the host)
    def erfc(self, x): return self._extern("erfc", x)
    def expm1(self, x): return self._extern("expm1", x)

    def call(self, name, *xs):
        """A C library function of the pointwise table (planner.ops.pointwise_table.LIBM):
        CUDA's <name>f, or special_math.h's planner_<name>f."""
        from planner.ops.pointwise_table import LIBM

        assert name in LIBM, name
        return self._extern(name, *xs)


def _offset(tirx, dims, ss):
    """Element offset of an input at output index i: its strides ss over the output's dims
    (coordinates by truncated division: indices are never negative)."""
    def offset(i):
        if len(ss) == 1:
            return i * ss[0]
        off = post = None
        for j in reversed(range(len(ss))):
            q = i if post is None else tirx.truncdiv(i, post)
            coord = q if j == 0 else tirx.truncmod(q, dims[j])
            off = coord * ss[j] if off is None else off + coord * ss[j]
            post = dims[j] if post is None else post * dims[j]
        return off

    return offset


def _reader(x, offset):
    """fcompute of a load stage (TE takes no default arguments)."""
    if offset is None:
        return lambda *at: x[at]
    return lambda i: x[offset(i)]


def build_compute(spec: Spec):
    """(PrimFunc, main block name, load block names) of one spec, unscheduled. Argument
    names say what each is: in{k} out{k} (buffers), p{k} (params), e{k} (extents), n, d{j},
    s{k}_{j} (input k's stride along dim j)."""
    from tvm import te, tirx

    pw = spec.pointwise
    wide = spec.rank <= 1
    idx = "int64" if wide else "int32"
    n = te.var("n", idx)
    # v2: every buffer is (n, 2), n the pairs; element (i, j) is flat index 2 i + j
    shape = (n, spec.vec) if spec.vec > 1 else (n,)
    params = [te.var(f"p{k}", dtype) for k, (_, dtype, _) in enumerate(pw.params)]
    p: dict[str, Any] = {name: v for (name, _, _), v in zip(pw.params, params, strict=True)}
    p.update(dict(spec.form))
    extents = [te.var(f"e{k}", "int64") for k in range(len(pw.extents))]
    p.update({name: v for (name, _), v in zip(pw.extents, extents, strict=True)})
    dims = [te.var(f"d{j}", idx) for j in range(spec.rank)] if spec.rank > 1 else []
    strides: list[list[Any]] = []
    ins, loads = [], []
    for k, dtype in enumerate(spec.ins):
        scalar = k in pw.scalar_inputs
        if scalar:
            ins.append(te.placeholder((1,), dtype, name=f"in{k}"))
            strides.append([])
            continue
        if spec.rank == 0:
            x = te.placeholder(shape, dtype, name=f"in{k}")
            ins.append(x)
            loads.append((k, te.compute(shape, _reader(x, None), name=f"ld{k}")))
            strides.append([])
            continue
        length = te.var(f"len{k}", idx)  # its own size (host side only)
        x = te.placeholder((length,), dtype, name=f"in{k}")
        ins.append(x)
        ss = [te.var(f"s{k}_{j}", idx) for j in range(spec.rank)]
        strides.append(ss)

        loads.append((k, te.compute((n,), _reader(x, _offset(tirx, dims, ss)), name=f"ld{k}")))
    loaded = dict(loads)

    def body(*at):
        i = at[0] * spec.vec + at[1] if spec.vec > 1 else at[0]
        m = _Math(tirx, i.astype("int64") if not wide else i, spec.outs)
        xs = [(ins[k][0] if k in pw.scalar_inputs else loaded[k][at]).asobject()
              for k in range(len(ins))]
        # low floats are computed in float32 (widening is exact), rounded once on the store
        xs = [x.astype("float32") if spec.ins[k] in LOW_FLOATS else x for k, x in enumerate(xs)]
        ys = pw.formula(m, xs, p)
        assert len(ys) == len(spec.outs), spec
        return [m.cast(y, d) for y, d in zip(ys, spec.outs, strict=True)]

    outs = te.compute(shape, body, name="out")
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    scalars = [*params, *extents, n, *dims, *[s for ss in strides for s in ss]]
    func = te.create_prim_func([*ins, *outs, *scalars])
    return func, [f"ld{k}" for k, _ in loads]


def build_multi(spec: Spec, block: int, cpu: bool = False):
    """A kernel of several outputs as TIR scheduled by hand, with the same split and binding:
    TE makes one block per output, and TVM 0.27's `merge` of their loops crashes on symbolic
    extents. Each input is loaded once (a let) before the first store. Broadcasting: as
    build_compute, ranks MULTI_RANKS."""
    from tvm import te, tirx

    pw = spec.pointwise
    assert not spec.low, spec  # no low-type kernel has several outputs
    idx = "int64" if spec.rank <= 1 else "int32"
    n = tirx.Var("n", idx)
    dims = [tirx.Var(f"d{j}", idx) for j in range(spec.rank)] if spec.rank > 1 else []
    params = [tirx.Var(f"p{k}", dtype) for k, (_, dtype, _) in enumerate(pw.params)]
    p: dict[str, Any] = {name: v for (name, _, _), v in zip(pw.params, params, strict=True)}
    p.update(dict(spec.form))
    bufs, strides = [], []
    for k, dtype in enumerate(spec.ins):
        shape = (1,) if k in pw.scalar_inputs else (tirx.Var(f"len{k}", idx),)
        bufs.append(tirx.decl_buffer(shape, dtype, name=f"in{k}"))
        strides.append([tirx.Var(f"s{k}_{j}", idx) for j in range(spec.rank)]
                       if spec.rank and k not in pw.scalar_inputs else None)
    outs = [tirx.decl_buffer((n,), d, name=f"out{k}") for k, d in enumerate(spec.outs)]
    bx, tx = te.thread_axis("blockIdx.x"), te.thread_axis("threadIdx.x")
    if cpu:  # a serial loop, for the tests' "llvm" build
        i = tirx.Var("i", idx)
    elif idx == "int64":
        i = bx.var.astype(idx) * block + tx.var.astype(idx)
    else:
        i = bx.var * block + tx.var
    lets, xs = [], []
    for k, b in enumerate(bufs):
        if k in pw.scalar_inputs:
            xs.append(tirx.BufferLoad(b, [tirx.const(0, idx)]))
            continue
        v = tirx.Var(f"x{k}", spec.ins[k])
        at = i if strides[k] is None else _offset(tirx, dims, strides[k])(i)
        lets.append((v, tirx.BufferLoad(b, [at])))
        xs.append(v)
    m = _Math(tirx, i.astype("int64"), spec.outs)
    ys = pw.formula(m, xs, p)
    stmt = tirx.SeqStmt([*[tirx.LetStmt(v, value) for v, value in lets],
                         *[tirx.BufferStore(o, m.cast(y, o.dtype), [i])
                           for o, y in zip(outs, ys, strict=True)]])
    if cpu:
        stmt = tirx.For(i, tirx.const(0, idx), n, tirx.ForKind.SERIAL, stmt)
    else:
        stmt = tirx.IfThenElse(i < n, stmt, None)
        stmt = tirx.AttrStmt(tx, "thread_extent", block, stmt)
        stmt = tirx.AttrStmt(bx, "thread_extent",
                             tirx.truncdiv(n + (block - 1), block).astype("int32"), stmt)
    args = [*bufs, *outs]
    scalars = [*params, n, *dims, *[x for ss in strides if ss is not None for x in ss]]
    func = tirx.PrimFunc(args + scalars, stmt)
    return func.with_attr({"global_symbol": spec.symbol(block), "tirx.noalias": False})


def cpu_func(spec: Spec):
    """The spec's computation unscheduled (one serial loop), to build for "llvm" in tests."""
    if len(spec.outs) > 1:
        return build_multi(spec, 1, cpu=True)
    return build_compute(spec)[0]


def _block_names(func) -> set[str]:
    """Names of the blocks of a PrimFunc (its TVMScript's `sblock("...")`s)."""
    return set(re.findall(r'sblock\("(\w+)"\)', func.script()))


def schedule(spec: Spec, block: int):
    """The spec's PrimFunc split by `block` threads and bound to blockIdx.x / threadIdx.x."""
    import tvm

    if len(spec.outs) > 1:
        return build_multi(spec, block)
    func, load_names = build_compute(spec)
    sch = tvm.s_tir.Schedule(func.with_attr("global_symbol", spec.symbol(block)))
    loop, *pair = sch.get_loops(sch.get_sblock("out"))
    bx, tx = sch.split(loop, factors=[None, block])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    if pair:  # v2: the pair is one vector load / store
        sch.vectorize(pair[0])
    present = _block_names(func)
    for name in load_names:
        if name not in present:
            continue  # an input the formula does not read (CopySignGradA's b): TE dropped it
        ld = sch.get_sblock(name)
        sch.set_scope(ld, 0, "local")
        sch.compute_at(ld, tx)
        if pair:
            sch.vectorize(sch.get_loops(ld)[-1])
    return sch.mod["main"].with_attr("global_symbol", spec.symbol(block))


# ---- the generated file -----------------------------------------------------------------------

_KERNEL = re.compile(
    r'extern "C" __global__ void __launch_bounds__\((\d+)\) (\w+)_kernel\(([^)]*)\)')
_CTYPES = {"float": "f", "double": "d", "int64_t": "l", "int": "i", "uint64_t": "u"}


def _args(params: str) -> str:
    """The kernel's argument list as `name:code` (p a device pointer, else a scalar code)."""
    out = []
    for param in params.split(","):
        words = param.replace("__restrict__", "").split()
        ctype, name = " ".join(words[:-1]), words[-1]
        if ctype.endswith("*"):
            name = name.removesuffix("_ptr")
            m = re.fullmatch(r"out_v(\d+)", name)
            out.append(("out" + m.group(1) if m else "out0" if name == "out" else name) + ":p")
        else:
            out.append(f"{name}:{_CTYPES[ctype]}")
    return ",".join(out)


def _c_double(v: float) -> str:
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return repr(float(v))


def lower(some: list[Spec]) -> tuple[dict[str, list[str]], dict[str, str]]:
    """The CUDA source TVM writes for `some` specs' kernels: each kernel's lines and its
    argument list (`name:code`), by symbol. A kernel's text does not depend on which others
    are lowered beside it, so a few specs lowered alone check the generated files' freshness
    in seconds (tests/codegen/test_tvm_kernels.py)."""
    import tvm

    funcs = {spec.symbol(block): schedule(spec, block) for spec in some for block in spec.blocks}
    mod = tvm.build(tvm.IRModule(funcs), target=tvm.target.Target({"kind": "cuda",
                                                                  "arch": "sm_90"}))
    source = mod.imports[0].inspect_source()
    body = source[source.index('extern "C"'):]
    chunks: dict[str, list[str]] = {}   # symbol -> its lines
    signatures: dict[str, str] = {}
    current: list[str] = []
    for line in body.splitlines():
        m = _KERNEL.match(line)
        if m and line.endswith(";"):
            continue  # TVM's forward declaration
        if m:
            signatures[m.group(2)] = _args(m.group(3))
            current = chunks.setdefault(m.group(2), [])
        current.append(line.replace(" __restrict__", ""))
    return chunks, signatures


def table_rows(spec: Spec, signatures: dict[str, str] | None) -> list[str]:
    """The spec's rows of kTvmKernels, one per op and block; without `signatures`, each row
    up to its argument list (what the spec alone says)."""
    pw = spec.pointwise
    params = "|".join(f"{name} {CODES[d]} {_c_double(default)}" for name, d, default in pw.params)
    extents = "|".join(f"{name} {axis}" for name, axis in pw.extents)
    rows = []
    for op in spec.ops:
        for block in spec.blocks:
            sym = spec.symbol(block)
            row = (f'    {{"{op}", "{spec.sig}", "{spec.form_text}", {spec.rank}, '
                   f'{spec.vec}, {block}, (const void*){sym}_kernel, ')
            if signatures is not None:
                row += f'"{signatures[sym]}", "{params}", "{extents}"}},'
            rows.append(row)
    return rows


def generate_files() -> dict[Path, str]:
    """Both generated files' texts: the float kernels (OUT) and the low-type ones (OUT_LOW)."""
    import tvm

    all_specs = specs()
    chunks, signatures = lower(all_specs)
    version = tvm.__version__
    texts = {}
    for path, low in ((OUT, False), (OUT_LOW, True)):
        mine = [spec for spec in all_specs if spec.low == low]
        kernels = "\n".join(line for spec in mine for block in spec.blocks
                            for line in chunks[spec.symbol(block)]).strip() + "\n"
        table = [row for spec in mine for row in table_rows(spec, signatures)]
        texts[path] = (_low_file if low else _float_file)(version, mine, kernels, table)
    return texts


def generate() -> str:
    """The float kernels' file text (OUT)."""
    return generate_files()[OUT]


_HEAD = """\
// GENERATED by `python -m codegen.tvm_kernels --write` (TVM {version}) from the ops' pointwise
// formulas (planner/ops); do not edit. `python -m codegen.tvm_kernels --check` says if stale.
// {count} computes, {kernels} kernels: threads-per-block variants {block_list} (a formula may
// take fewer: Pointwise.blocks).
#pragma once
"""

_PRAGMAS = """\
// TVM's source: float32 constants printed with double's digits (#1046), unused `cse_v` (#177)
#pragma nv_diagnostic push
#pragma nv_diag_suppress 177
#pragma nv_diag_suppress 1046
"""


def _head(version: str, count: int, kernels: int) -> str:
    return _HEAD.format(version=version, count=count, kernels=kernels, block_list=list(BLOCKS))


# TVM's CUDA source names float infinity and NaN CUDART_INF_F and CUDART_NAN_F
# (math_constants.h); a host compiler (the tests' plain-C run of the file) has them as builtins.
_INF = """#ifdef __CUDACC__
#include <math_constants.h>
#else
#define CUDART_INF_F __builtin_huge_valf()
#define CUDART_NAN_F __builtin_nanf("")
#endif
"""


def _float_file(version: str, mine: list[Spec], kernels: str, table: list[str]) -> str:
    return f"""{_head(version, len(mine), sum(len(s.blocks) for s in mine))}#include <cstdint>
{_INF}
// the special functions the pointwise table's rows call (planner_<name>f, host and device)
#include "special_math.h"

{_PRAGMAS}
{kernels}
#pragma nv_diagnostic pop

namespace planner {{

// One generated kernel: op, dtypes ("<inputs>_<outputs>", f float32, d float64, l int64,
// b bool, u uint64, E bfloat16, e float16), structural form ("approximate=tanh"), rank (0
// flat, else broadcast over that many dims), elements per thread (vec: 2 for the low types'
// paired kernels, whose `n` counts pairs), threads per block, the function, its arguments in
// order ("name:code", p a device pointer), its params ("attr code value-when-absent", by index
// p0, p1, ...) and extents ("name axis" of input 0, by index e0, ...).
struct TvmKernel {{
  const char* op;
  const char* sig;
  const char* form;
  int rank;
  int vec;
  int block;
  const void* fn;
  const char* args;
  const char* params;
  const char* extents;
}};

inline const TvmKernel kTvmKernels[] = {{
{chr(10).join(table)}
}};

}}  // namespace planner
"""


_LOW_NOTE = "// The low float types' kernels (bfloat16 E, float16 e): float32 math inside."


def _low_file(version: str, mine: list[Spec], kernels: str, table: list[str]) -> str:
    return f"""{_head(version, len(mine), sum(len(s.blocks) for s in mine))}{_LOW_NOTE}
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "tvm_pointwise.cuh"

{_PRAGMAS}
{kernels}
#pragma nv_diagnostic pop

namespace planner {{

inline const TvmKernel kTvmLowKernels[] = {{
{chr(10).join(table)}
}};

}}  // namespace planner
"""


def main(argv: list[str] | None = None) -> int:
    from codegen.generated_files import main as generated_main

    return generated_main("python -m codegen.tvm_kernels", __doc__, generate_files,
                          lambda text: f"{text.count('__global__')} kernels", argv)


if __name__ == "__main__":
    sys.exit(main())
