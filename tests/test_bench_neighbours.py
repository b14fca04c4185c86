"""bench/bench_neighbours.py runs end to end at its tiniest: one model, no neighbour and a
DataLoader of one worker, one round of one step; every engine's time is measured and the JSON
rows match the table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("threadpoolctl")

BENCH = Path(__file__).resolve().parents[1] / "bench" / "bench_neighbours.py"


@pytest.mark.slow
def test_tiny_run(tmp_path):
    out = tmp_path / "rows.json"
    run = subprocess.run([sys.executable, str(BENCH), "--models", "lstm",
                          "--neighbours", "0,loader1", "--rounds", "1", "--steps", "1",
                          "--json", str(out)],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]
    rows = json.loads(out.read_text())
    assert [r["neighbours"] for r in rows] == ["0", "loader1"]
    for r in rows:
        assert r["ours"] > 0 and r["ours main"] > 0 and r["eager"] > 0 and r["load"] >= 0
        assert r["schedule"].startswith("ran ")  # which schedule the default executor ran
        assert f"{r['eager'] / r['ours']:.2f}" in run.stdout


@pytest.mark.parametrize(("argv", "error"), [
    (["--models", "nope"], "unknown model 'nope'"),
    (["--neighbours", "2,loaders"], "'loaders' is neither a count nor loaderW")])
def test_bad_arguments_are_one_line_errors(monkeypatch, capsys, argv, error):
    # In this process: the bench's imports (PyTorch, torchvision) cost a subprocess ~15 s.
    sys.path.insert(0, str(BENCH.parent))
    monkeypatch.setattr(sys, "argv", [str(BENCH), *argv])
    try:
        import bench_neighbours
    finally:
        sys.path.remove(str(BENCH.parent))
    with pytest.raises(SystemExit) as exit_:
        bench_neighbours.main()
    assert error in str(exit_.value) and "\n" not in str(exit_.value)
