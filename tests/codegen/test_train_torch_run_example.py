"""examples/train_torch_run.py: a PyTorch script (DataLoader, AdamW with parameter groups, a
torch scheduler, clipping, evaluation and a checkpoint each epoch) on the generated executor
learns the digits, and resumed from its epoch-1 checkpoint ends where the whole run ends
(bit for bit in tests/codegen/test_resume.py; here within 1e-5, see the example)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

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
    assert "resumed from epoch 1: " in out
    assert (tmp_path / "epoch3.pt").exists()
