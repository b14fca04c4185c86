"""CI (`make test`) runs a representative of every opt-in tier: each test module with a case of
an opt-in marker (tests/conftest.py's OPT_IN: slow, nvcc, opinfo_full, compile_full) has a case
marked `ci_sample` that no opt-in marker keeps out of `make test`, or is named in UNSAMPLED
with the reason CI cannot run one. A ci_sample may name other modules of its tier that it
stands for (`pytest.mark.ci_sample("tests/codegen/other.py")`).

The modules are found from the markers in the sources (no list of tiers kept by hand); what
CI's samples cost is in docs/development.md."""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

from tests.conftest import OPT_IN

ROOT = Path(__file__).resolve().parent.parent

# Modules whose opt-in cases have no representative in CI, and why.
CUDA_BUILD = ("builds the CUDA runtime (80 s of nvcc per architecture); CI compiles the kernel "
              "sources to PTX (tests/codegen/test_tvm_kernels.py::test_cuda_sources_compile, "
              "skipped without nvcc)")
BENCH = "runs the benchmark itself (a minute or more on 2 cores)"
UNSAMPLED = {
    "tests/cuda/test_cuda_build.py": CUDA_BUILD,
    "tests/cuda/test_cuda_data_parallel.py": CUDA_BUILD,
    "tests/cuda/test_cuda_losses_random.py": CUDA_BUILD,
    "tests/cuda/test_gpu_profile.py": CUDA_BUILD,
    "tests/test_bench_fixed_set.py": BENCH,
    "tests/test_bench_gpu_dry_run.py": BENCH,
    "tests/test_bench_neighbours.py": BENCH,
    "tests/test_bench_onednn_profile.py": BENCH,
    "tests/test_bench_vs_compile.py": BENCH,
    "tests/test_bench_wait_policy.py": BENCH,
    "tests/codegen/test_artifact_integrity.py": "builds a CPU runtime in a cache of its own",
    "tests/codegen/test_pinned_exec.py": "AlexNet planned and built twice",
    "tests/codegen/test_train_digits_example.py": "the example's whole training runs",
    "tests/codegen/test_train_torch_run_example.py": "the example's whole training runs",
    "tests/importers/test_batchnorm_modes.py": "the backend's pieces around a graph break",
    "tests/importers/test_torch_shapes.py": "a transformer at three lengths; a fresh process",
    "tests/test_plan_settings.py": "a bf16-mixed trainer build",
    "tests/test_torch_compile_arena.py": "a fresh interpreter's torch import and build",
}


def _mark(node: ast.AST) -> str | None:
    """`pytest.mark.NAME` or `pytest.mark.NAME(...)`: NAME."""
    if isinstance(node, ast.Call):
        node = node.func
    if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
            and node.value.attr == "mark" and getattr(node.value.value, "id", "") == "pytest"):
        return node.attr
    return None


def _is_param(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
        and node.func.attr == "param"


def _marks_in(node: ast.AST) -> set[str]:
    return {m for n in ast.walk(node) if (m := _mark(n))}


def _samples(decorator: ast.AST, kept_out: bool, rel: str) -> tuple[list[list[str]], bool]:
    """The ci_samples under one decorator of a test (the modules each stands for), and whether
    the decorator holds an opt-in mark anywhere (on the test or on one of its cases)."""
    samples, opt_in = [], bool(_marks_in(decorator) & set(OPT_IN))

    def visit(node: ast.AST, param_marks: set[str]) -> None:
        if _is_param(node):
            param_marks = {m for kw in node.keywords if kw.arg == "marks"
                           for m in _marks_in(kw.value)}
        if _mark(node) == "ci_sample":
            if not kept_out and not param_marks & set(OPT_IN):
                named = [a.value for a in getattr(node, "args", [])]
                samples.append([rel, *named])
            return
        for child in ast.iter_child_nodes(node):
            visit(child, param_marks)

    visit(decorator, set())
    return samples, opt_in


def scan(path: Path, root: Path = ROOT) -> tuple[bool, list[list[str]]]:
    """Whether the module has opt-in cases, and its ci_samples that run in `make test`."""
    rel = path.relative_to(root).as_posix()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    module_marks = {m for n in tree.body if isinstance(n, ast.Assign)
                    and getattr(n.targets[0], "id", "") == "pytestmark" for m in _marks_in(n)}
    opt_in, samples = bool(module_marks & set(OPT_IN)), []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef) or not node.name.startswith("test_"):
            continue
        direct = {_mark(d) for d in node.decorator_list}
        kept_out = bool((direct | module_marks) & set(OPT_IN))
        for decorator in node.decorator_list:
            found, held = _samples(decorator, kept_out, rel)
            samples += found
            opt_in |= held
    return opt_in, samples


@lru_cache(maxsize=1)  # one scan of the sources for the module's tests
def _tiers() -> tuple[frozenset[str], dict[str, list[str]]]:
    opt_in, represented = set(), {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        held, samples = scan(path)
        if held:
            opt_in.add(path.relative_to(ROOT).as_posix())
        for sample in samples:
            for module in sample:
                represented.setdefault(module, []).append(sample[0])
    return frozenset(opt_in), represented


def test_every_opt_in_module_has_a_sample_in_ci():
    opt_in, represented = _tiers()
    assert len(opt_in) > 30  # the scan sees the tiers' modules
    missing = sorted(opt_in - set(represented) - set(UNSAMPLED))
    assert missing == [], f"modules with opt-in cases and no ci_sample: {missing}"


def test_the_unsampled_list_is_current():
    """An UNSAMPLED module still has opt-in cases, and none of them is sampled yet (a module
    that gains a sample leaves the list)."""
    opt_in, represented = _tiers()
    assert sorted(set(UNSAMPLED) - opt_in) == []
    assert sorted(set(UNSAMPLED) & set(represented)) == []


def test_every_sample_stands_for_an_opt_in_module():
    opt_in, represented = _tiers()
    assert sorted(set(represented) - opt_in) == []


def test_a_sample_kept_out_of_ci_does_not_count(tmp_path):
    """A ci_sample under a slow mark (on its test or its own case) represents nothing; one
    case beside a slow case does."""
    source = '''
import pytest
@pytest.mark.parametrize("n", [pytest.param(1, marks=pytest.mark.ci_sample),
                               pytest.param(2, marks=pytest.mark.slow)])
def test_a(n): pass
@pytest.mark.slow
@pytest.mark.ci_sample
def test_b(): pass
@pytest.mark.parametrize("n", [pytest.param(1, marks=[pytest.mark.slow, pytest.mark.ci_sample])])
def test_c(n): pass
'''
    (tmp_path / "test_x.py").write_text(source, encoding="utf-8")
    opt_in, samples = scan(tmp_path / "test_x.py", tmp_path)
    assert opt_in and samples == [["test_x.py"]]
