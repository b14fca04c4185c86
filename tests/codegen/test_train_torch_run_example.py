"""examples/train_torch_run.py: a PyTorch script (DataLoader, AdamW with parameter groups, a
torch scheduler, clipping, evaluation and a checkpoint each epoch) on the generated executor
learns the digits, and resumed from its epoch-1 checkpoint ends where the whole run ends bit
for bit; two runs in two processes, one beside a busy neighbour, end with the same bits."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sklearn")
pytest.importorskip("torch")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_torch_run.py"


@pytest.mark.slow
def test_example_learns_and_resumes_bit_for_bit(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("train_torch_run", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    status = module.main(["--epochs", "3", "--check", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "resumed from epoch 1: bit for bit the whole run" in out
    assert (tmp_path / "epoch3.pt").exists()


@pytest.mark.slow
def test_two_processes_one_beside_a_busy_neighbour_end_with_the_same_bits(tmp_path):
    root = EXAMPLE.parents[1]
    saved = []
    for k, neighbours in enumerate((0, 1)):
        # A neighbour spinning on a core: what made the executor switch schedules (and
        # bits) before the main schedule became the default.
        busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(neighbours)]
        try:
            out = tmp_path / f"run{k}.npz"
            subprocess.run([sys.executable, str(EXAMPLE), "--epochs", "1", "--out",
                            str(tmp_path / f"run{k}"), "--save", str(out)],
                           check=True, cwd=root, timeout=600, capture_output=True,
                           env={**os.environ, "PYTHONPATH": str(root)})
        finally:
            for p in busy:
                p.kill()
                p.wait()
        saved.append(dict(np.load(out)))
    assert set(saved[0]) == set(saved[1])
    for name, want in saved[0].items():
        np.testing.assert_array_equal(saved[1][name], want, err_msg=name)
