"""bench/bench_fixed_set.py: its table (every engine's ms, theirs over ours, the geometric
means) from given step times, bad arguments as one-line errors, and (slow) its quick run end to
end: one table per condition, every model and engine measured. Shapes, not timings."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("threadpoolctl")

BENCH = Path(__file__).resolve().parents[1] / "bench" / "bench_fixed_set.py"


@pytest.fixture(scope="module")
def bench():
    # In this process: the bench's imports (PyTorch, the planner) cost a subprocess seconds.
    sys.path.insert(0, str(BENCH.parent))
    try:
        import bench_fixed_set
    finally:
        sys.path.remove(str(BENCH.parent))
    return bench_fixed_set


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def test_the_table_gives_theirs_over_ours_and_their_geometric_means(bench):
    names = bench.engines((1, 2))
    assert names == ("trainer", "backend", "eager 1t", "eager 2t", "inductor 1t", "inductor 2t")
    rows = {"a": dict(zip(names, (0.010, 0.020, 0.030, 0.040, 0.025, 0.050), strict=True)),
            "b": dict(zip(names, (0.008, 0.004, 0.006, 0.012, 0.016, 0.009), strict=True))}
    lines = bench.table(rows, {"a": 0.5, "b": 4.25}, names, (1, 2)).splitlines()
    head = _cells(lines[0])
    ratios = ["eager 2t/trainer", "inductor 2t/trainer", "best/trainer",
              "eager 2t/backend", "inductor 2t/backend", "best/backend"]
    assert head == ["model", *(f"{e} ms" for e in names), *ratios, "load"]
    assert len(lines) == 2 + len(rows) + 1 and all(len(_cells(x)) == len(head) for x in lines)
    want = {}
    for line, (label, ms) in zip(lines[2:4], rows.items(), strict=True):
        cells = dict(zip(head, _cells(line), strict=True))
        assert cells["model"] == label and float(cells["load"]) == {"a": 0.5, "b": 4.25}[label]
        best = min(ms["eager 1t"], ms["eager 2t"], ms["inductor 1t"], ms["inductor 2t"])
        for col in ratios:
            theirs, ours = col.split("/")
            r = (best if theirs == "best" else ms[theirs]) / ms[ours]
            assert float(cells[col]) == pytest.approx(r, abs=0.005)
            want.setdefault(col, []).append(r)
    means = dict(zip(head, _cells(lines[-1]), strict=True))
    assert means["model"] == "geomean" and means["trainer ms"] == ""
    for col, rs in want.items():  # the product's root, by hand
        assert float(means[col]) == pytest.approx(math.sqrt(rs[0] * rs[1]), abs=0.005)


def test_ours_alone_give_their_times_and_no_ratio(bench):
    """--engines trainer,backend (an A/B of ours without PyTorch's compiles): the two
    engines' columns, no ratio column (nothing of theirs to divide), no `best`."""
    names = ("trainer", "backend")
    rows = {"a": {"trainer": 0.010, "backend": 0.0205}}
    lines = bench.table(rows, {"a": 0.5}, names, (1, 2)).splitlines()
    assert _cells(lines[0]) == ["model", "trainer ms", "backend ms", "load"]
    assert _cells(lines[2]) == ["a", "10.0", "20.5", "0.50"]
    assert _cells(lines[3]) == ["geomean", "", "", ""]


@pytest.mark.parametrize(("argv", "error"), [
    (["--models", "nope"], "--models: unknown model 'nope'"),
    (["--neighbours", "0,loaders"], "--neighbours: 'loaders' is neither a count nor loaderW"),
    (["--threads", "1,x"], "--threads: '1,x' is not a list of thread counts"),
    (["--engines", "backend,eager 3t"], "--engines: unknown engine 'eager 3t'")])
def test_bad_arguments_are_one_line_errors(bench, monkeypatch, argv, error):
    monkeypatch.setattr(sys, "argv", [str(BENCH), *argv])
    with pytest.raises(SystemExit) as exit_:
        bench.arguments()
    assert str(exit_.value).startswith(error) and "\n" not in str(exit_.value)


def test_the_set_is_named_and_its_models_known(bench):
    from cpu_modules import FRESH, MODULES, STRATEGIES

    assert set(MODULES) <= set(bench.SET)  # the nn.Module table whole
    assert set(bench.SET) & set(STRATEGIES) and set(bench.SET) & set(FRESH)
    assert set(bench.QUICK) < set(bench.SET) and len(bench.QUICK) == 2


@pytest.mark.slow  # minutes: two models' six engines, each in a process of its own
def test_quick_run():
    run = subprocess.run([sys.executable, str(BENCH), "--quick", "--rounds", "1",
                          "--steps", "1", "--neighbours", "0,1"],
                         capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stderr[-2000:]
    out = run.stdout.splitlines()
    assert [x for x in out if x.startswith("### ")] == [
        "### quiet", "### beside 1 busy neighbours (2-thread numpy matmul loops)"]
    tables = [k for k, x in enumerate(out) if x.startswith("| model |")]
    assert len(tables) == 3  # two conditions and the first steps
    for k in tables[:2]:
        head = _cells(out[k])
        rows = [_cells(x) for x in out[k + 2:k + 5]]
        assert [r[0] for r in rows] == ["transformer_encoder", "gpt", "geomean"]
        for r in rows[:2]:
            assert len(r) == len(head)
            cells = dict(zip(head, r, strict=True))
            # Times in 0.1 ms are all > 0; a ratio in 0.01 may round to 0.00 (a loaded host)
            assert all(float(v) > 0 for k, v in cells.items() if k.endswith(" ms"))
            assert all(float(v) >= 0 for k, v in cells.items() if "/" in k or k == "load")
        assert len(rows[2]) == len(head) and all(
            float(v) >= 0 for k, v in zip(head, rows[2], strict=True) if "/" in k)
