"""docs/supported-ops.md, generated from the two front ends' rule tables: the ATen ops the
torch.export importer converts (planner/importers/torch/rules.py), the ONNX ops the ONNX importer
converts or folds (planner/importers/onnx), and what is left. `python -m
planner.importers.supported_ops -o docs/supported-ops.md` writes it;
tests/importers/test_supported_ops_page.py checks that the file is current.

    >>> "| aten.index.Tensor | index |" in supported_ops_page()
    True
"""

from __future__ import annotations

import json
from pathlib import Path

# What tests/importers/test_opinfo.py expects of each OpInfo of PyTorch's op_db (written by
# `make opinfo`): the per-family counts below come from it; absent outside a checkout.
OPINFO_EXPECTATIONS = (Path(__file__).resolve().parents[2] / "tests" / "importers"
                       / "opinfo_expectations.json")

# Known gaps, each refused with a one-line error naming the node (and for ATen its module
# path): the rules' own refusals, worded for a user.
LEFT = (
    "ATen `index.Tensor` with indices on non-adjacent axes, or a boolean mask over other "
    "than x's leading dims",
    "sizes that depend on the data other than masked_select's, nonzero's (argwhere's) and "
    "`x[mask]`'s (`unique`, `tensor_split` by a tensor, a size made by `.item()`), and of "
    "those three any reader but pointwise and row-wise ops, sum and mean (each planned at "
    "its bound with a count: docs/pytorch.md), or the size read as a number",
    "ATen `as_strided` views that overlap, broadcast (stride 0) or run backwards: only a "
    "Reshape/Slice/Transpose chain of its input is expressible",
    "`F.cross_entropy` with class weights, label smoothing, probabilities as targets, a "
    "reduction other than mean, or an `ignore_index` inside the class range",
    "`F.mse_loss` with a reduction other than mean or a broadcast target; other losses are "
    "written from the ops above (a loss of several terms is any float scalar the module or "
    "its loss function returns first)",
    "3-D convolution and pooling; adaptive average pooling to anything but 1x1; "
    "`max_pool` indices and `max.dim` indices",
    "`scaled_dot_product_attention` with a boolean mask or grouped-query heads",
    "arithmetic (add, mul, floor division, fmod, ...) on computed integer tensors, and "
    "bitwise ops on integer tensors (comparisons, logic and casts of them are supported); "
    "float64 tensors on the CUDA executor, and on the CPU executor outside the ops of a "
    "float64 MLP's or small CNN's step (matmul, bias, the pointwise activations and table, "
    "sums, convolutions, normalisations, softmaxes, pools, the losses, SGD / Adam: "
    "docs/executor.md, \"dtypes\"; the reference interpreter runs them all)",
    "random ops in forward (`randn_like`: feed the noise as an input, as a VAE's "
    "reparametrization can); data-dependent control flow",
    "ONNX: Gather of a computed integer tensor; GatherND, ScatterND and ScatterElements on "
    "computed tensors (folded on constants only); Loop, If, Scan and the ops not listed",
)


def onnx_table() -> list[str]:
    """The ONNX ops table (also in docs/ops.md, codegen/ops_table.py)."""
    import planner.importers.onnx.convert  # noqa: F401  (registering the rules)
    from planner.importers.onnx.context import RULES
    from planner.importers.onnx.fold import FOLDABLE

    lines = ["| ONNX op | planner ops | folded |", "| --- | --- | --- |"]
    return lines + [f"| {op} | {'x' if op in RULES else ''} | {'x' if op in FOLDABLE else ''} |"
                    for op in sorted(set(RULES) | set(FOLDABLE))]


def aten_table() -> list[str]:
    """The ATen ops with a rule: the overload, the rule (a function of
    planner/importers/torch/rules.py) and whether the importer keeps it whole instead of
    decomposing it (convert.PRESERVED)."""
    from planner.importers.torch.context import RULES
    from planner.importers.torch.convert import PRESERVED

    lines = ["| ATen op | rule | kept whole |", "| --- | --- | --- |"]
    return lines + [f"| {op} | {RULES[op].__name__} | "
                    f"{'x' if op.removeprefix('aten.') in PRESERVED else ''} |"
                    for op in sorted(RULES)]


def complex_table() -> list[str]:
    """The ATen ops with a rule for complex values (planner/importers/torch/rules_complex.py,
    the elementary functions rules_complex_math.py), by rule (an op's row of the ATen table
    above is its rule for real values)."""
    import planner.importers.torch.convert  # noqa: F401  (every rule module registered)
    from planner.importers.torch.rules_complex import CX_RULES

    lines = ["### Complex tensors and the DFT", "",
             "A complex64 (complex128) value inside the program is a float32 (float64) tensor",
             "of one more, trailing, axis of 2 (`view_as_real`'s layout), and each op below",
             "lowers to real planner ops; the DFT family (`torch.fft.fft`, `ifft`, `rfft`,",
             "`irfft`, `hfft`, `ihfft` and their 2-D and n-D forms, every `norm`, `n`/`s`) is",
             "the planner's FFT op (pocketfft on the CPU, any length; cuFFT on CUDA, float32,",
             "compiled but not yet run on a GPU), real transforms through",
             "it and slices or a Hermitian completion (docs/front-end.md). A complex model",
             "input or trained parameter is refused in one line (take `view_as_real` of it); a",
             "complex model output is given out as complex64 by the trainer (the import's",
             "planes) and refused by torch.compile's pieces and `.pt2` files; a complex",
             "buffer is a constant of the step (under torch.compile, an input fed as its",
             "planes).", "",
             "| rule | its ATen ops on complex values |", "| --- | --- |"]
    by_rule: dict[str, list[str]] = {}
    for op in sorted(CX_RULES):
        by_rule.setdefault(CX_RULES[op].__name__, []).append(op)
    return lines + [f"| {rule} | {', '.join(ops)} |" for rule, ops in sorted(by_rule.items())]


def opinfo_section(path: Path = OPINFO_EXPECTATIONS) -> list[str]:
    """Pass counts per family of the OpInfo conformance suite, from its expectations file
    (OpInfo name -> [family, outcome]); [] without the file."""
    if not path.exists():
        return []
    rows = json.loads(path.read_text(encoding="utf-8")).values()
    families = sorted({family for family, _ in rows})
    tried = [(f, o) for f, o in rows if o != "export"]
    lines = ["## PyTorch's OpInfo database", "",
             "Every float32 OpInfo of PyTorch's `op_db` (up to 3 of its own sample inputs,",
             "float tensors as parameters of a module calling the op) exported by",
             "torch.export, imported, and run forward and backward on the reference",
             "interpreter against torch in float64 (tests/importers/test_opinfo.py; `make",
             "opinfo` reruns all and rewrites the counts). *Tried*: exportable by",
             "torch.export; *pass*: forward and backward equal to torch on every sample",
             "(for random ops and `empty`, whose values torch does not fix, their shapes);",
             "*refused*: one line naming the op; *off*: silently wrong or a crash. How far",
             "each goes on through planning and the CPU executor, and the expected-failure",
             "list: [opinfo-stages.md](opinfo-stages.md).", "",
             f"{sum(o == 'pass' for _, o in tried)} of {len(tried)} exportable OpInfos pass "
             f"({len(rows)} float32 OpInfos in op_db).", "",
             "| family | pass | refused | off | tried |", "| --- | --- | --- | --- | --- |"]
    for family in families:
        mine = [o for f, o in tried if f == family]
        off = sum(o.startswith(("wrong:", "crash:")) for o in mine)
        lines.append(f"| {family} | {mine.count('pass')} | {len(mine) - mine.count('pass') - off}"
                     f" | {off} | {len(mine)} |")
    return lines + [""]


def supported_ops_page() -> str:
    """docs/supported-ops.md's text."""
    lines = ["# Supported ops of the two front ends", "",
             "Generated by `python -m planner.importers.supported_ops -o docs/supported-ops.md`",
             "from the importers' rule tables; tests/importers/test_supported_ops_page.py fails",
             "when it is stale. The planner ops these become, and the backends with a kernel for",
             "each, are in docs/ops.md.", "",
             "## PyTorch (torch.export)", "",
             "`planner.torch.trainer(module, ...)` and `.pt2` files: the program is decomposed to",
             "core ATen, keeping the ops marked *kept whole* (the planner has them as one op). Any",
             "op whose inputs are all constants (a mask built from `arange`, `tril`, comparisons)",
             "is evaluated by torch at import instead, whatever it is. An op not listed is",
             "refused with one line naming the op, the node and its module path",
             "(`layers.3.attn`).", "",
             "The loss is whatever float scalar the traced program returns first: PyTorch's",
             "losses with their options (planner/importers/torch/rules_losses.py; a",
             "`reduction='none'` loss reduced by the module's own arithmetic included), or a loss",
             "of several terms such as a VAE's `F.mse_loss(recon, x) + beta * kl`, which the",
             "import marks as the graph's loss (`Graph.loss`); with `loss=None` the module",
             "returns its own.", "",
             "Random ops (rand, randn, bernoulli, normal, uniform_, randint, randperm) draw",
             "from the planner's counter-based generator keyed by (seed, step, rank), as",
             "Dropout does: torch's distributions, not torch's bits (docs/pytorch.md).",
             "Bool and integer tensors: comparisons (`eq`, `ne`, `lt`, `le`, `gt`, `ge`, Tensor",
             "and Scalar), `logical_*`, bitwise ops on bool, `isnan` / `isinf` / `isfinite`",
             "give bool tensors; casts (`.to()`, `_to_copy`) go between bool, int32, int64,",
             "float32, bfloat16 and float16 either way (float to int truncates toward zero,",
             "non-zero and NaN are true); a mask feeds `where`, `masked_fill` and arithmetic,",
             "with PyTorch's type promotion (a bool or int tensor meeting a float one is cast to",
             "the float type). An op given a dtype it does not take is refused in one line",
             "naming the op, the node, its module path and the dtype. The element-wise rows",
             "(`log1p`, `atan2`, `remainder`, ...) are planner/ops/pointwise_table.py's.",
             ""]
    lines += aten_table()
    lines += ["", *complex_table()]
    lines += ["", "## ONNX", "",
              "*planner ops*: the node becomes one or more planner ops; *folded*: evaluated at",
              "import when its inputs are constants (shape arithmetic), and refused otherwise",
              "unless it also has planner ops.", ""]
    lines += onnx_table()
    lines += ["", *opinfo_section(), "## What is left", ""]
    lines += [f"- {gap}" for gap in LEFT]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from planner.io.write import write_generated_page

    return write_generated_page(argv, "write docs/supported-ops.md", supported_ops_page())


if __name__ == "__main__":
    raise SystemExit(main())
