"""bench_dp_scaling.py's planning path: GPU data-parallel plans whose all-reduces take the
time a ring takes on the preset's links, checked against the alpha-beta formula computed
here by hand from the datasheet numbers the preset cites (not through the planner's
functions)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from planner.frontend.autodiff import make_training_graph
from planner.graph.optimizer import Optimizer
from planner.zoo import build

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_dp_scaling",
                                                  ROOT / "bench" / "bench_dp_scaling.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_dp_scaling", module)
    spec.loader.exec_module(module)
    return module


def _hand(nbytes: int, ranks: int) -> float:
    # DGX A100 (planner.target.interconnect): NVLink 3 at 80% of 300 GB/s, 1 us a step,
    # within a node of 8; 8 x 200 Gb/s HDR InfiniBand at 80% (160 GB/s), 5 us, beyond.
    alpha, beta = (1e-6, 0.8 * 300e9) if ranks <= 8 else (5e-6, 0.8 * 8 * 200e9 / 8)
    return 2 * (ranks - 1) * alpha + 2 * (ranks - 1) / ranks * nbytes / beta


def test_all_reduce_times_follow_the_ring_on_the_preset_links(bench):
    g = make_training_graph(build("mlp", batch=4, hidden=[256, 256], in_features=128,
                                  classes=10), Optimizer(kind="sgd"))
    sizes = {t.name: t.nbytes for t in g.tensors}
    comm = {}
    for ranks in (2, 8, 16, 64):
        p = bench.planned(g, "a100-80gb", ranks, bucket=64 * 1024)
        ars = [op for op in p.ops if op.op == "AllReduce"]
        nodes = {n.name: n for n in p.graph.nodes}
        assert len(ars) == 2 and all(op.stream == "comm" for op in ars)  # fc3 + fc2 | fc1
        for op in ars:
            nbytes = sum(sizes[g_] for g_ in nodes[op.name].inputs)
            assert op.end - op.start == pytest.approx(_hand(nbytes, ranks), rel=1e-9)
        comm[ranks] = bench.comm_seconds(p)
    total = sum(t.nbytes for t in g.tensors if t.role == "param" and t.updates is None)
    # The buckets together hold every gradient once: the sum is one ring over all of them
    # plus the latency terms of the second bucket.
    for ranks, seconds in comm.items():
        alpha = 1e-6 if ranks <= 8 else 5e-6
        assert seconds == pytest.approx(_hand(total, ranks) + 2 * (ranks - 1) * alpha,
                                        rel=1e-9)
    # Leaving the node costs: 16 ranks on InfiniBand take longer than 8 on NVLink.
    assert comm[2] < comm[8] < comm[16] < comm[64]


def test_the_bench_rows_for_one_and_two_gpus(bench):
    lines = bench.rows("resnet-50", "h100-80gb", [1, 2], None)
    one, two = (line.strip("| ").split(" | ") for line in lines)
    assert one[:3] == ["resnet-50", "h100-80gb", "1"] and one[4] == "100.0%"
    assert two[2] == "2" and two[-1] == "NVLink" and int(two[-2]) >= 1
    # Two GPUs are no faster per GPU than one, and the ring on NVLink costs little.
    assert float(two[3]) >= float(one[3]) and float(two[4].rstrip("%")) > 95
