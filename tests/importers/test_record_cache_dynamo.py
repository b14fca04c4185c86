"""torch.compile's graphs through the records kept per host (record_cache.py): a second
process importing the same Dynamo graph reads the record the first kept, decomposing
nothing, into the same graph (a no_grad region's StopGradient included); the backend's
decomposition table is part of the key, so another table is another record."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from planner.importers.torch import fma, record_cache  # noqa: E402
from planner.importers.torch.convert import recorded  # noqa: E402
from planner.io.disk_cache import entries  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

# One process of a user's script: Dynamo's graph of a small model (a no_grad region inside)
# imported as the backend imports it, its decompositions counted.
CHILD = """
import hashlib, json, torch
from planner.importers.torch import convert
from planner.torch.dynamo_import import import_piece
decomposed, pieces = [], []
real = convert.decompose
def counted(program, extra=None):
    decomposed.append(1)
    return real(program, extra)
convert.decompose = counted
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.fc = torch.nn.Linear(4 * 6 * 6, 5)
    def forward(self, x):
        h = self.conv(x).relu()
        with torch.no_grad():
            scale = h.abs().mean() + 1.0
        return self.fc((h / scale).flatten(1))
def backend(gm, args):
    pieces.append(import_piece(gm, args, "planner_0"))
    return gm.forward
torch.manual_seed(0)
torch.compile(Net(), backend=backend)(torch.randn(2, 3, 8, 8))
(piece,) = pieces
print(json.dumps({"decomposed": len(decomposed),
                  "graph": hashlib.sha256(piece.graph.to_json().encode()).hexdigest(),
                  "ops": sorted({n.op for n in piece.graph.nodes}),
                  "inputs": piece.inputs, "outputs": piece.outputs}))
"""


def _process(cache: Path) -> dict:
    run = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                         timeout=600, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "PLANNER_CACHE": str(cache)})
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_a_second_process_reads_the_dynamo_graphs_record(tmp_path):
    first = _process(tmp_path)
    second = _process(tmp_path)
    assert first["decomposed"] == 1 and second["decomposed"] == 0
    assert [e.kind for e in entries(tmp_path)] == ["record"]
    assert second == {**first, "decomposed": 0}
    assert "StopGradient" in first["ops"]  # the no_grad region's result, detached either way


class Fma(torch.nn.Module):
    def forward(self, a, b, c):
        return torch.ops.prims.fma(a, b, c).relu()


def _program():
    import torch._prims  # noqa: F401  (registers prims.fma)

    args = tuple(torch.full((3,), v) for v in (1.5, 2.0, -4.0))
    return torch.export.export(Fma(), args)


def _other_fma(a, b, c):
    return a * b + c


def test_another_decomposition_table_is_another_record(cache, decompositions):
    program = _program()
    table = {torch.ops.prims.fma.default: fma.fma}
    keys = {record_cache.key(program, "", table), record_cache.key(program, "", None),
            record_cache.key(program, "", {**table, torch.ops.aten.relu.default: fma.fma})}
    assert len(keys) == 3
    first = recorded(_program(), extra=table)
    again = recorded(_program(), extra=table)
    assert len(decompositions) == 1 and again.calls == first.calls
    recorded(_program())  # torch's table alone: prims.fma stays one call
    assert len(decompositions) == 2 and len(entries(cache)) == 2
    assert [c.target for c in first.calls] == ["aten.mul.Tensor", "aten.add.Tensor",
                                               "aten.relu.default"]


def test_a_decomposition_from_outside_the_importer_is_not_kept(cache, decompositions):
    # its code is not among the sources the key digests: no key stands for it
    table = {torch.ops.prims.fma.default: _other_fma}
    assert record_cache.folder(_program(), "", table) is None
    recorded(_program(), extra=table)
    recorded(_program(), extra=table)
    assert len(decompositions) == 2 and entries(cache) == ()
