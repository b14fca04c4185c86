"""GPU plans choose from a profiled cost table: each convolution the fastest measured cuDNN
algorithm whose workspace fits the memory free at its step (the budget still decides), each
generated kernel its fastest measured launch configuration, every other op its measured time
alone. The tables are written as `planner profile --target gpu` writes them: JSON text in the
cost table's own format, read by the planner's reader."""

from __future__ import annotations

import json

import pytest

from codegen.render import plan_attrs
from planner.costs import graph_signatures, load_table
from planner.costs.gpu_profile import launch_blocks
from planner.frontend.autodiff import Optimizer, make_training_graph
from planner.memory import MemoryOptions
from planner.ops import get_op
from planner.pipeline import PlanOptions, plan
from planner.target import preset
from planner.verify import verify_plan
from planner.zoo import build

TARGET = preset("h100-80gb")
MiB = 1 << 20
# Per convolution: the fastest needs far more workspace than the next, which needs some.
ALGORITHMS = [("FFT", 1e-5, 512 * MiB), ("WINOGRAD_NONFUSED", 2e-5, 1 * MiB),
              ("IMPLICIT_GEMM", 9e-5, 0)]
# Per generated kernel: 512 threads per block the fastest (not the kernel's default, 256).
LAUNCHES = {128: 3e-6, 256: 2e-6, 512: 1e-6}
ALONE = 7e-6


@pytest.fixture(scope="module")
def graph():
    return make_training_graph(build("lenet", batch=4, image=8), Optimizer(kind="sgd", lr=0.1))


def write_table(path, graph, algorithms=ALGORITHMS) -> None:
    """The cost table JSON of every signature of `graph`, as profiling writes it."""
    entries = []
    for sig in {s.key: s for s in graph_signatures(graph).values()}.values():
        entry = {"signature": sig.model_dump(mode="json")}
        if get_op(sig.op).convolution:
            entry["gpu_algorithms"] = [{"algorithm": a, "seconds": t, "workspace_bytes": w}
                                       for a, t, w in algorithms]
        elif get_op(sig.op).pointwise is not None:
            entry["gpu_launches"] = [{"threads_per_block": b, "seconds": t,
                                      "blocks": launch_blocks(sig, b)}
                                     for b, t in LAUNCHES.items()]
        else:
            entry["gpu_seconds"] = ALONE
        entries.append(entry)
    path.write_text(json.dumps({"target": TARGET.name, "entries": entries,
                                "provenance": [{"target": TARGET.name, "tool": "planner",
                                                "date": "2026-01-01", "source": "test"}]}))


def make(graph, table, budget=None):
    return plan(graph, TARGET, table, PlanOptions(memory=MemoryOptions(budget_bytes=budget)))


def convs(p) -> dict[str, str]:
    return {c.node: c.algorithm for c in p.memory.convs}


def test_written_table_reads_back_canonical(graph, tmp_path):
    write_table(tmp_path / "t.json", graph)
    table = load_table(tmp_path / "t.json")
    assert type(table).from_json(table.to_json()) == table
    assert sum(1 for e in table.entries if e.gpu_seconds == ALONE) > 0


def test_fastest_measured_algorithm_without_a_budget(graph, tmp_path):
    write_table(tmp_path / "t.json", graph)
    p = make(graph, load_table(tmp_path / "t.json"))
    assert set(convs(p).values()) == {"FFT"}
    assert all(c.source == "measured" and c.workspace_bytes >= 512 * MiB
               for c in p.memory.convs)
    assert verify_plan(p) == []


def test_fastest_that_does_not_fit_the_budget_gives_way_to_the_next(graph, tmp_path):
    # The plan's peak with zero-workspace convolutions, then a budget 4 MiB above it: the
    # 512 MiB of FFT never fits, the 1 MiB of WINOGRAD_NONFUSED always does.
    write_table(tmp_path / "zero.json", graph, [ALGORITHMS[-1]])
    peak = make(graph, load_table(tmp_path / "zero.json")).summary.memory.peak_bytes
    write_table(tmp_path / "t.json", graph)
    p = make(graph, load_table(tmp_path / "t.json"), budget=peak + 4 * MiB)
    assert convs(p) and set(convs(p).values()) == {"WINOGRAD_NONFUSED"}
    assert p.summary.memory.peak_bytes <= peak + 4 * MiB
    assert verify_plan(p) == []
    # No room even for that: the zero-workspace one.
    q = make(graph, load_table(tmp_path / "t.json"), budget=peak)
    assert set(convs(q).values()) == {"IMPLICIT_GEMM"}


def test_generated_kernels_take_the_fastest_launch_and_others_their_time(graph, tmp_path):
    write_table(tmp_path / "t.json", graph)
    p = make(graph, load_table(tmp_path / "t.json"))
    nodes = {n.name: n for n in graph.nodes}
    attrs = plan_attrs(p)
    for op in p.ops:
        node = nodes.get(op.name)
        if node is None:
            continue
        pointwise = get_op(node.op).pointwise is not None
        assert op.block == (512 if pointwise else 0), op.name
        assert attrs.get(op.name, {}).get("block") == (512 if pointwise else None)
        seconds = op.end - op.start
        if pointwise:
            assert seconds == pytest.approx(LAUNCHES[512])
        elif not get_op(node.op).convolution:
            assert seconds == pytest.approx(ALONE)
    assert any(json.loads(p.to_json())["ops"][k].get("block") == 512
               for k in range(len(p.ops)))


def test_plans_without_measured_launches_keep_their_json(graph):
    p = plan(graph, TARGET)
    assert all(op.block == 0 for op in p.ops)
    assert all("block" not in op for op in json.loads(p.to_json())["ops"])


@pytest.mark.parametrize("block,cpus", [(48, ()), (2048, ()), (256, (0,))])
def test_a_plan_op_refuses_a_block_no_kernel_takes(block, cpus):
    from pydantic import ValidationError

    from planner.schedule.record import ScheduledOp

    where = {"cpus": cpus} if cpus else {"stream": "compute"}
    with pytest.raises(ValidationError, match="threads per block are for GPU ops"):
        ScheduledOp(name="r", op="Relu", block=block, start=0.0, end=1.0, **where)
