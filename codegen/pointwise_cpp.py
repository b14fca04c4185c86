"""CPU kernels of the pointwise table's ops, rendered from each row's scalar formula as C++.

Every op of planner/ops/pointwise_table.py (its rows and their gradient ops) becomes, per
signature, a functor whose operator() is the formula evaluated over `CppMath`, a math namespace
whose values are C++ expressions; templates/cpu/runtime/pointwise_family.h's loop runs them
(flat or broadcast, vectorizable, OpenMP above a grain). The rendered files,
templates/cpu/runtime/kernels/pointwise_table_<k>.cpp (SHARDS of them), are checked in and
register each op with the CPU runtime (`r["Op"] = ...`, which codegen.backends reads).

The same run writes the CUDA runtime's registrations of the ops
(templates/cuda/runtime/kernels/pointwise_table.cu), whose kernels codegen/tvm_kernels.py
generates from the same formulas.

    python -m codegen.pointwise_cpp --write    regenerate the files
    python -m codegen.pointwise_cpp --check    exit 1 if they differ from what would be generated

Op and attribute names come from the registry; nothing of a graph reaches the source.

Example:
    >>> from planner.ops.pointwise_table import TABLE
    >>> print(functor_body(TABLE["Log1p"], ("float32",), "float32"))
    const float t0 = std::log1p(x0);
    return t0;
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from planner.ops import REGISTRY
from planner.ops.pointwise_table import LIBM, TABLE, Row

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
KERNELS = TEMPLATES / "cpu" / "runtime" / "kernels"
# The CPU functors are written in SHARDS files, kernels/pointwise_table_<k>.cpp, each a like
# share of the functors: in one file they were ~58 s of one compiler's time on the 2-core
# VM, a third of the kernel library's, in one of the runtime's kernel unity groups
# (templates/cpu/runtime/CMakeLists.txt: dealt in turn), which the other cores then waited on;
# in shares, each group of 2 or 4 gets one or two.
SHARDS = 4
OUT = tuple(KERNELS / f"pointwise_table_{k}.cpp" for k in range(SHARDS))
# The CUDA runtime's registrations of the same ops, whose kernels codegen/tvm_kernels.py
# generates from the same formulas.
OUT_CUDA = TEMPLATES / "cuda" / "runtime" / "kernels" / "pointwise_table.cu"

CTYPES = {"float32": "float", "float64": "double", "int64": "int64_t", "int32": "int32_t",
          "bool": "bool"}
# pointwise_family.h's signature codes
CODES = {"float32": "f", "float64": "d", "int64": "l", "int32": "i", "bool": "?"}
# The float types' C type and literal suffix (float64: the CPU's twins of float32 rows).
FLOAT_CTYPES = {"float32": ("float", "f"), "float64": ("double", "")}
# C++ for the C library functions of LIBM that are not std::<name> (lgamma's glibc form keeps
# the sign in a local, not the global signgam, which the team's threads would race on).
_SPECIAL = {"lgamma": "planner_lgamma"}


def _cpp_name(name: str) -> str:
    """The C++ function of a LIBM name: special_math.h's planner_<name>f, else the C library's."""
    if name.startswith("planner_"):
        return name + "f"
    return _SPECIAL.get(name, "std::" + name)


class Body:
    """The statements of one functor: each sub-expression bound once to a local `t<k>`."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def bind(self, text: str, dtype: str) -> CExpr:
        name = f"t{len(self.lines)}"
        self.lines.append(f"const {CTYPES[dtype]} {name} = {text};")
        return CExpr(name, dtype, self)


class CExpr:
    """A C++ value of one C type: an input, a constant or a local of its functor's body."""

    def __init__(self, text: str, dtype: str, body: Body | None = None) -> None:
        self.text, self.dtype, self.body = text, dtype, body

    def _bin(self, op: str, other, result: str | None = None, swap: bool = False) -> CExpr:
        other = literal(other, self.dtype)
        a, b = (other, self) if swap else (self, other)
        return _body(self, other).bind(f"{a.text} {op} {b.text}", result or self.dtype)

    def __add__(self, o): return self._bin("+", o)
    def __radd__(self, o): return self._bin("+", o, swap=True)
    def __sub__(self, o): return self._bin("-", o)
    def __rsub__(self, o): return self._bin("-", o, swap=True)
    def __mul__(self, o): return self._bin("*", o)
    def __rmul__(self, o): return self._bin("*", o, swap=True)
    def __truediv__(self, o): return self._bin("/", o)
    def __rtruediv__(self, o): return self._bin("/", o, swap=True)
    def __lt__(self, o): return self._bin("<", o, "bool")
    def __le__(self, o): return self._bin("<=", o, "bool")
    def __gt__(self, o): return self._bin(">", o, "bool")
    def __ge__(self, o): return self._bin(">=", o, "bool")
    def __eq__(self, o): return self._bin("==", o, "bool")  # type: ignore[override]
    def __ne__(self, o): return self._bin("!=", o, "bool")  # type: ignore[override]
    def __neg__(self): return _body(self).bind(f"-{self.text}", self.dtype)
    __hash__ = None  # type: ignore[assignment]


def _body(*vs) -> Body:
    return next(v.body for v in vs if isinstance(v, CExpr) and v.body is not None)


def literal(v, dtype: str) -> CExpr:
    """A Python number as a C++ constant of `dtype` (an expression stays as it is)."""
    if isinstance(v, CExpr):
        return v
    if dtype == "bool":
        return CExpr("true" if v else "false", "bool")
    if dtype in FLOAT_CTYPES:
        ctype, suffix = FLOAT_CTYPES[dtype]
        v = float(v)
        if math.isnan(v):
            return CExpr(f"std::numeric_limits<{ctype}>::quiet_NaN()", dtype)
        if math.isinf(v):
            sign = "-" if v < 0 else ""
            return CExpr(f"({sign}std::numeric_limits<{ctype}>::infinity())", dtype)
        return CExpr(f"{v!r}{suffix}", dtype)
    if float(v) != int(v):
        raise ValueError(f"constant {v!r} in an {dtype} formula")
    return CExpr(f"{CTYPES[dtype]}{{{int(v)}}}", dtype)


class CppMath:
    """The math namespace over C++ expressions (planner.ops.base.Pointwise's `m`)."""

    def __init__(self, body: Body) -> None:
        self.body = body

    @staticmethod
    def _dtype(*vs) -> str:
        return next((v.dtype for v in vs if isinstance(v, CExpr)), "float32")

    def where(self, c, a, b):
        d = self._dtype(a, b)
        return self.body.bind(f"{literal(c, 'bool').text} ? {literal(a, d).text} : "
                              f"{literal(b, d).text}", d)

    def any(self, a, b):
        return self.body.bind(f"{literal(a, 'bool').text} || {literal(b, 'bool').text}", "bool")

    def all(self, a, b):
        return self.body.bind(f"{literal(a, 'bool').text} && {literal(b, 'bool').text}", "bool")

    def not_(self, a):
        return self.body.bind(f"!{literal(a, 'bool').text}", "bool")

    def _pred(self, name: str, x) -> CExpr:
        if x.dtype not in FLOAT_CTYPES:  # an integer or bool is finite, never NaN
            return literal(name == "isfinite", "bool")
        return self.body.bind(f"std::{name}({x.text})", "bool")

    def isnan(self, x): return self._pred("isnan", x)
    def isinf(self, x): return self._pred("isinf", x)
    def isfinite(self, x): return self._pred("isfinite", x)

    def cast(self, x, dtype):
        x = literal(x, dtype)
        return x if x.dtype == dtype else self.body.bind(f"static_cast<{CTYPES[dtype]}>({x.text})",
                                                         dtype)

    def _fn(self, name: str, *xs) -> CExpr:
        d = self._dtype(*xs)
        args = ", ".join(literal(x, d).text for x in xs)
        return self.body.bind(f"{_cpp_name(name)}({args})", d)

    def call(self, name: str, *xs):
        if name not in LIBM:
            raise ValueError(f"{name!r} is not a C library function of the table (LIBM)")
        return self._fn(name, *xs)

    def exp(self, x): return self._fn("exp", x)
    def log(self, x): return self._fn("log", x)
    def log1p(self, x): return self._fn("log1p", x)
    def expm1(self, x): return self._fn("expm1", x)
    def sqrt(self, x): return self._fn("sqrt", x)
    def tanh(self, x): return self._fn("tanh", x)
    def erf(self, x): return self._fn("erf", x)
    def erfc(self, x): return self._fn("erfc", x)
    def abs(self, x): return self._fn("abs", x)
    def pow(self, a, b): return self._fn("pow", a, b)


def functor_body(row: Row, ins: tuple[str, ...], out: str) -> str:
    """The C++ statements of the row's output at one element, inputs x0, x1, ..., ending in
    its return."""
    body = Body()
    m = CppMath(body)
    xs = [CExpr(f"x{k}", d, body) for k, d in enumerate(ins)]
    (y,) = row.formula(m, xs, {})
    y = m.cast(y, out)
    return "\n".join([*body.lines, f"return {y.text};"])


def _signatures(row: Row) -> list[tuple[tuple[str, ...], str]]:
    """The row's kernel signatures, and on the CPU a float64 one where the row takes float64
    and its formula calls only the C library's own functions (special_math.h's and lgamma's
    are float-only): a float64 model's Sin, Cos, Square ... (docs/executor.md, "dtypes")."""
    out = []
    for sig in row.signatures():
        ins, outs = sig.split("->")
        out.append((tuple(ins.split(",")), outs))
    if "float64" in row.dtypes:
        ins = ("float64",) * row.arity
        out_dtype = row.out_dtype("float64")
        if "planner_" not in functor_body(row, ins, out_dtype):
            out.append((ins, out_dtype))
    return out


def _declared(row: Row) -> str:
    """The dtype sets of its kernels, as the registration declares them
    (templates/common/kernel_dtypes.h)."""
    sets = [",".join(sorted({*ins, out})) for ins, out in _signatures(row)]
    return "|".join(dict.fromkeys(sets))


def _functor(name: str, ins: tuple[str, ...], out: str, body: str) -> str:
    params = ", ".join(f"{CTYPES[d]} x{k}" for k, d in enumerate(ins))
    return (f"struct {name} {{\n"
            f"  explicit {name}(const Node&) {{}}\n"
            f"  {CTYPES[out]} operator()({params}) const {{\n"
            + "".join(f"    {line}\n" for line in body.splitlines())
            + "  }\n"
            "};\n")


def generate_cuda() -> str:
    """The text of the CUDA runtime's kernels/pointwise_table.cu: each op's generated TVM
    kernel (flat or broadcast, as its Pointwise says), launched by pointwise.h's
    GeneratedLaunch."""
    names, registrations = [], []
    for op in sorted(TABLE):
        names.append(f'constexpr char kPwt{op}[] = "{op}";')
        form = "true" if REGISTRY[op].pointwise.broadcast else "false"
        registrations.append(f'  r["{op}"] = table_kernel<kPwt{op}, {form}>;')
    return _CUDA_FILE.format(count=len(TABLE), names="\n".join(names),
                             registrations="\n".join(registrations))


def generate_files() -> dict[Path, str]:
    return {**dict(zip(OUT, generate(), strict=True)), OUT_CUDA: generate_cuda()}


def shards(ops: list[str], count: int) -> list[list[str]]:
    """`ops` (in order) cut into `count` runs of about as many functors (signatures) each.

    >>> runs = shards(sorted(TABLE), 2)
    >>> sorted(op for run in runs for op in run) == sorted(TABLE), all(runs)
    (True, True)
    """
    weights = [len(_signatures(TABLE[op])) for op in ops]
    total, runs, done = sum(weights), [[] for _ in range(count)], 0
    for op, w in zip(ops, weights, strict=True):
        runs[min(count - 1, done * count // max(total, 1))].append(op)
        done += w
    return runs


def generate() -> list[str]:
    """The texts of kernels/pointwise_table_<k>.cpp, k < SHARDS: every op of the table once."""
    return [_shard(k, ops) for k, ops in enumerate(shards(sorted(TABLE), SHARDS))]


def _shard(k: int, ops: list[str]) -> str:
    functors, factories, registrations = [], [], []
    for op in ops:
        row = TABLE[op]
        kinds = []
        for ins, out in _signatures(row):
            sig = "".join(CODES[d] for d in ins) + "_" + CODES[out]
            name = f"Pwt{op}_{sig.replace('?', 'b')}"
            functors.append(_functor(name, ins, out, functor_body(row, ins, out)))
            types = ", ".join([CTYPES[out]] + [CTYPES[d] for d in ins])
            kinds.append(f'      {{"{sig}", &make_pointwise<{name}, {types}>}},')
        factories.append(f"KernelPtr pwt_{op}(const Node& n) {{\n"
                         f"  static const PointwiseKind kinds[] = {{\n" + "\n".join(kinds)
                         + f"\n  }};\n  return pick_pointwise(n, \"{op}\", kinds);\n}}\n")
        registrations.append(f'  r["{op}"] = {{pwt_{op}, "{_declared(row)}"}};')
    return _FILE.format(count=len(ops), total=len(TABLE), shard=k, shards=SHARDS,
                        functors="\n".join(functors), factories="\n".join(factories),
                        registrations="\n".join(registrations))


_FILE = """\
// GENERATED by `python -m codegen.pointwise_cpp --write` from the pointwise table's formulas
// (planner/ops/pointwise_table.py); do not edit. `python -m codegen.pointwise_cpp --check` says
// if stale. Share {shard} of {shards}: {count} of the table's {total} ops, each a functor per
// signature run by pointwise_family.h's loop.
#include <cmath>
#include <cstdint>
#include <limits>

#include "../pointwise_family.h"
#include "special_math.h"

namespace planner {{
namespace {{

{functors}
{factories}
}}  // namespace

PLANNER_REGISTER_KERNELS(pointwise_table_{shard}) {{
{registrations}
}}

}}  // namespace planner
"""


_CUDA_FILE = """\
// GENERATED by `python -m codegen.pointwise_cpp --write` from the pointwise table
// (planner/ops/pointwise_table.py); do not edit. {count} ops, each launching the kernel
// codegen/tvm_kernels.py generated from its formula (generated/tvm_pointwise.cuh).
#include "../kernel.h"
#include "pointwise.h"

namespace planner {{
namespace {{

std::vector<Shape> table_shapes(const std::vector<TensorRef>& ts) {{
  std::vector<Shape> out;
  for (const TensorRef& t : ts) out.push_back(t.shape);
  return out;
}}

class TableKernel : public Kernel {{
 public:
  TableKernel(const Node& n, const char* op, bool broadcast)
      : launch_(n, op, n.in, n.out,
                broadcast ? Geometry::broadcast(n.out[0].shape, table_shapes(n.in))
                          : Geometry::flat(n.out[0].size()),
                broadcast) {{}}
  void run(const Run& r) override {{ launch_.run(r); }}

 private:
  GeneratedLaunch launch_;
}};

template <const char* Op, bool Broadcast> KernelPtr table_kernel(const Node& n) {{
  return std::make_unique<TableKernel>(n, Op, Broadcast);
}}

{names}

}}  // namespace

PLANNER_REGISTER_KERNELS(pointwise_table) {{
{registrations}
}}

}}  // namespace planner
"""


def main(argv: list[str] | None = None) -> int:
    from codegen.generated_files import main as generated_main

    return generated_main("python -m codegen.pointwise_cpp", __doc__, generate_files,
                          lambda text: f"{text.count(chr(10) + '  r[')} ops", argv)


if __name__ == "__main__":
    sys.exit(main())
