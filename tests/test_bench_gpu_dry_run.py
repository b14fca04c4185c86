"""The GPU scripts' dry runs, without a GPU. bench_gpu.py --modules: a module a PyTorch user
has (the GPT block of bench/torch_modules.py) is exported through ONNX, imported, given its loss
and planned, and the dry run says what it would time, measuring nothing. The GPU window's
prepared calls (bench/device/README.md): window_checks' planning, the carried wheels' check,
the scripts' syntax and the commands' limits (prepare.sh runs the dry runs that build)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _dry_run(*args: str) -> list[str]:
    """The lines bench_gpu.py prints with `args` and --dry-run (it must exit 0)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_gpu.py"), *args,
                          "--dry-run"], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.splitlines()


def test_dry_run_plans_an_exported_module_and_lists_the_runs():
    lines = _dry_run("--modules", "gpt_block")
    assert lines[0] == "dry run for target h100-80gb: nothing is measured"
    assert lines[1].startswith("gpt_block input [8, 128, 768], loss mse: ")
    # Six in the forward (qkv, scores, weighted values, proj, fc, out), two each backward.
    assert "MatMul x18" in lines[1] and "plan predicts" in lines[1]
    assert lines[2] == ("  would time: ours streams, ours 1 stream, ours graph, torch eager, "
                        "torch graph, torch.compile max-autotune")


def test_dry_run_plans_a_mixed_precision_zoo_model():
    """--precision: our graph gets the policy's casts (and fp16's loss scaling), PyTorch's side
    runs under autocast of the same type."""
    lines = _dry_run("--models", "wide_deep", "--precision", "fp16-mixed", "--no-compile")
    assert lines[0] == "dry run for target h100-80gb, precision fp16-mixed: nothing is measured"
    assert lines[1].startswith("wide_deep {'batch': 256}: ") and " float16 tensors" in lines[1]
    assert lines[2] == ("  would time: ours streams, ours 1 stream, ours graph, ours graph 1 "
                        "stream, ours host feeds, torch eager under autocast(float16)")


def test_dry_run_plans_a_tf32_zoo_model():
    """--precision tf32: float32 tensors with the graph's math marked, PyTorch with TF32 on."""
    lines = _dry_run("--models", "wide_deep", "--precision", "tf32", "--no-compile")
    assert lines[0] == "dry run for target h100-80gb, precision tf32: nothing is measured"
    assert lines[1].startswith("wide_deep {'batch': 256}: ")
    assert " ops (0 casts; float32 tensors; TF32 math); plan predicts " in lines[1]
    assert lines[2] == ("  would time: ours streams, ours 1 stream, ours graph, ours graph 1 "
                        "stream, ours host feeds, torch eager with allow_tf32")


# ---- the GPU window's prepared calls (bench/device/README.md): their cheap dry runs ----------


def _script(name: str, *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(ROOT / "bench" / "device" / name), *args],
                          capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)


def test_window_checks_plan_the_budget_cases_for_an_h100(tmp_path):
    """The budget cases are planned for the H100 the executor accepts (the old budget test
    built an A100 plan, which an H100 refuses): offloads on the copy streams, recomputes with
    offload off, each arena under the unbudgeted one; a line per case, a JSON row per case."""
    out = _script("window_checks.py", "--dry-run", "--no-build", "--cases",
                  "r18_budget,r18_recompute,lstm", "--out", str(tmp_path / "wc.json"))
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "wc.json").read_text().splitlines()]
    by = {r["case"]: r for r in rows}
    assert list(by) == ["r18_budget", "r18_recompute", "lstm"] and "error" not in str(rows)
    offload = by["r18_budget"]
    assert {"d2h", "h2d"} <= set(offload["streams"])
    assert {"offload", "prefetch"} <= set(offload["inserted"])
    assert offload["arena_mib"] < 0.7 * offload["unbudgeted_arena_mib"]
    recompute = by["r18_recompute"]
    assert "recompute" in recompute["inserted"] and "offload" not in recompute["inserted"]
    assert recompute["arena_mib"] < recompute["unbudgeted_arena_mib"]
    assert len(by["lstm"]["streams"]) > 1  # the co-running case: its streams are checked
    assert out.stdout.splitlines()[0].startswith("r18_budget: ")


def test_window_checks_refuse_an_unknown_case():
    out = _script("window_checks.py", "--dry-run", "--no-build", "--cases", "nope")
    assert out.returncode != 0 and "unknown case(s) nope; known: r18_budget" in out.stderr


def _wheel(folder, name: str, version: str, *requires: str) -> None:
    """A wheel file holding only its METADATA: what carry_check reads."""
    import zipfile

    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    path = folder / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name.replace('-', '_')}-{version}.dist-info/METADATA", meta)


def test_carry_check_finds_wheels_that_disagree(tmp_path):
    """pydantic pins pydantic-core exactly and needs typing-extensions >= 4.16: --no-deps
    installs checks neither, so the set is checked before it travels."""
    pins = tmp_path / "wheels.txt"
    pins.write_text("# pins\npydantic==2.14.4\npydantic-core==2.50.5\ntyping-extensions==4.16.0\n")
    good = tmp_path / "good"
    good.mkdir()
    _wheel(good, "pydantic", "2.14.4", "pydantic-core==2.50.5", "typing-extensions>=4.16.0",
           "email-validator>=2; extra == 'email'")
    _wheel(good, "pydantic-core", "2.50.5", "typing-extensions>=4.16.0")
    _wheel(good, "typing-extensions", "4.16.0")
    out = _script("carry_check.py", str(pins), str(good))
    assert out.returncode == 0, out.stderr
    bad = tmp_path / "bad"
    bad.mkdir()
    _wheel(bad, "pydantic", "2.14.4", "pydantic-core==2.50.5", "typing-extensions>=4.16.0")
    _wheel(bad, "pydantic-core", "2.41.0", "typing-extensions>=4.16.0")
    _wheel(bad, "typing-extensions", "4.12.2")
    _wheel(bad, "highspy", "1.16.0", "numpy")
    out = _script("carry_check.py", str(pins), str(bad))
    assert out.returncode == 1
    problems = [line for line in out.stderr.splitlines() if line.startswith("carry_check: ")]
    assert "carry_check: pydantic-core is 2.41.0, pinned 2.50.5" in problems
    assert "carry_check: typing-extensions is 4.12.2, pinned 4.16.0" in problems
    assert any("highspy-1.16.0-py3-none-any.whl is not pinned" in p for p in problems)
    assert any(p.startswith("carry_check: pydantic 2.14.4 needs typing-extensions>=4.16.0")
               for p in problems)
    assert "highspy 1.16.0 needs numpy from the image" in out.stdout


def test_the_pinned_wheels_agree_with_each_other():
    """bench/device/wheels.txt itself: pydantic's exact pin of pydantic-core and the
    typing-extensions floor both hold for the versions listed (from pydantic's own metadata
    where this environment has the same version installed)."""
    from importlib import metadata

    from packaging.requirements import Requirement

    sys.path.insert(0, str(ROOT / "bench" / "device"))
    from carry_check import pins

    pinned = pins(ROOT / "bench" / "device" / "wheels.txt")
    assert {"pydantic", "pydantic-core", "typing-extensions", "annotated-types",
            "typing-inspection", "highspy"} <= set(pinned)
    for dist in ("pydantic", "pydantic-core", "typing-inspection"):
        if metadata.version(dist) != pinned[dist]:
            continue
        for r in map(Requirement, metadata.requires(dist) or []):
            if r.marker is None and r.name.lower().replace("_", "-") in pinned:
                assert r.specifier.contains(pinned[r.name.lower().replace("_", "-")]), (dist, r)


def test_the_device_scripts_parse_and_the_commands_fit():
    """Each call's command is one short line (the device tool takes 2,000 characters); each
    brings back at most 8 files; every script is valid bash."""
    for script in sorted((ROOT / "bench" / "device").glob("*.sh")):
        check = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert check.returncode == 0, (script.name, check.stderr)
    for call in ("call1.sh", "call2.sh", "call_cpu.sh"):
        text = (ROOT / "bench" / "device" / call).read_text()
        back = next(line for line in text.splitlines() if "Back in $OUT" in line)
        count = int(back.split("(")[1].split()[0])
        listed = back.split("):")[1].split()
        if len(listed) < count:  # the list goes on in the next comment line
            nxt = text.splitlines()[text.splitlines().index(back) + 1]
            listed += nxt.lstrip("# ").split()
        assert count == len(listed) <= 8, (call, listed)
        assert "timeout" in text and "--dry-run" in text
    readme = (ROOT / "bench" / "device" / "README.md").read_text()
    for command in ("bash bench/device/call1.sh", "bash bench/device/call_cpu.sh"):
        assert f"`{command}`" in readme and len(command) < 2000


def test_the_first_call_fits_its_window_and_names_real_tests():
    """Call 1 is the one command of the 15-minute window: it stops by itself within 8 minutes
    (its deadline caps every stage's timeout), and each line of features.txt names a test that
    exists (a wrong name would cost the window its test stage)."""
    text = (ROOT / "bench" / "device" / "call1.sh").read_text()
    deadline = int(text.split("DEADLINE=${DEADLINE:-")[1].split("}")[0])
    assert deadline <= 480
    assert text.count('timeout "$(left ') >= 4  # tests, checks and both bench stages
    for line in (ROOT / "bench" / "device" / "features.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        path, _, test = line.partition("::")
        source = (ROOT / path).read_text()
        if test:
            assert f"def {test.split('[')[0]}(" in source, line


# ---- issue 88's window: both calls' dry runs, green on this machine -------------------------


def _call(name: str, out: Path, models: str) -> subprocess.CompletedProcess:
    """bench/device/`name` --dry-run with its files in `out`, its models narrowed to `models`
    (the commands bench/device/README.md gives; prepare.sh runs them with every model)."""
    env = {**os.environ, "OUT": str(out), "MODELS": models, "PLANNER_PY": sys.executable}
    return subprocess.run(["bash", str(ROOT / "bench" / "device" / name), "--dry-run"],
                          capture_output=True, text=True, env=env, timeout=1500, cwd=ROOT)


@pytest.mark.slow  # minutes: PyTorch's side compiled on 2 cores in two modes and precisions
def test_gpu_call_dry_run_is_green(tmp_path):
    """Call 1: the features' tests collected, ResNet-50's profile counted against the store's
    table, GPT planned (fp32 and bf16-mixed) and rendered for the H100 preset, PyTorch's side
    made ready on the CPU in eager and both torch.compile modes, each one's ready time apart."""
    run = _call("call1.sh", tmp_path, "gpt")
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    assert run.stdout.rstrip().splitlines()[-1].startswith("call 1 done at ")
    assert " tests collected" in (tmp_path / "gpu_tests.log").read_text()
    profile = (tmp_path / "profile.txt").read_text()
    assert "store bench/device/costs/nvidia-h200" in profile
    assert "kept in resnet50.gpu.costs.json" in profile
    assert "kept in resnet50-bf16-mixed.gpu.costs.json" in profile
    bench = (tmp_path / "bench.txt").read_text()
    for precision in ("fp32", "bf16-mixed"):
        assert f"dry run for target h100-80gb, precision {precision}" in bench
    assert bench.count("  rendered for h100-80gb: ") == 4  # two precisions, two stages
    for row in ("torch eager ready in", "torch.compile ready in",
                "torch.compile max-autotune-no-cudagraphs ready in"):
        assert row in bench, row
    assert "failed" not in bench


@pytest.mark.slow  # a minute or two: the real bench at a tiny size on 2 cores
def test_cpu_call_dry_run_is_green(tmp_path):
    """Call 2: bench_cpu_strategies on the tiny LSTM, its row as a JSON line, and the fits
    table made from that row."""
    run = _call("call_cpu.sh", tmp_path, "lstm")
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "cpu.jsonl").read_text().splitlines()]
    assert [r["model"] for r in rows] == ["lstm"]
    row = rows[0]
    assert {"uniform", "paper", "optimized", "torch eager", row["best_grid"]} <= set(
        row["measured_ms"])
    assert all(ms > 0 for ms in row["measured_ms"].values())
    fits = (tmp_path / "fits.md").read_text().splitlines()
    line = next(f for f in fits if f.startswith("| lstm | measured |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert float(cells[5]) == pytest.approx(row["predicted_ms"]["optimized"], abs=0.006)
    assert float(cells[6]) == pytest.approx(row["measured_ms"]["optimized"], abs=0.006)
    assert cells[8].startswith(row["best_grid"])
