"""The GPU profiling driver (planner.costs.gpu_profile) without a GPU: what it asks the
measurer for, in batches; what it writes (canonical, merged with the table it resumes);
failures kept apart; and `planner profile --target` refusing what cannot be profiled here in
one line. The measurer of these tests returns fixed numbers, like the CPU driver's doctest:
the driver's bookkeeping is under test, not the kernels (tests/cuda/test_gpu_profile.py
runs the real one)."""

from __future__ import annotations

import pytest

from planner.cli import main
from planner.costs.gpu_profile import GpuMeasurement, batches, profile_gpu, signature_bytes
from planner.costs.records import ConvAlgoSample, CostTable, LaunchSample
from planner.costs.signature import OpSignature
from planner.target import preset

TARGET = preset("h100-80gb")


def relu(n: int) -> OpSignature:
    return OpSignature(op="Relu", shapes=((n,),), dtypes=("float32",))


def matmul(n: int) -> OpSignature:
    return OpSignature(op="MatMul", shapes=((n, n), (n, n)), dtypes=("float32", "float32"))


class Measurer:
    """Records the batches it is given; answers each signature with its size in seconds."""

    def __init__(self, fail: frozenset[str] = frozenset()) -> None:
        self.batches: list[list[str]] = []
        self.fail = fail

    def __call__(self, batch):
        self.batches.append([s.key for s in batch])
        out = {}
        for s in batch:
            n = s.shapes[0][0]
            if s.key in self.fail:
                out[s.key] = "cuDNN said no"
            elif s.op in ("Relu", "Gelu"):  # pointwise kernels: launch configurations
                out[s.key] = GpuMeasurement(launches=(
                    LaunchSample(threads_per_block=128, blocks=1, seconds=n * 1e-9),))
            else:
                out[s.key] = GpuMeasurement(seconds=n * 1e-6)
        return out


def test_signature_bytes_count_inputs_and_each_copys_outputs():
    assert signature_bytes(relu(10)) == 80
    assert signature_bytes(relu(10), copies=3) == 40 + 3 * 40
    assert signature_bytes(matmul(4)) == 3 * 64


def test_batches_keep_order_and_bound_their_bytes():
    sigs = [relu(n) for n in (100, 100, 300, 50, 1000)]
    got = batches(sigs, 4000)
    assert [s for b in got for s in b] == sigs
    assert all(sum(signature_bytes(s) for s in b) <= 4000 or len(b) == 1 for b in got)
    assert [len(b) for b in got] == [3, 1, 1]


def test_profile_writes_each_kind_skips_what_is_there_and_keeps_failures():
    sigs = [relu(8), matmul(4), relu(8), relu(16)]
    measure = Measurer(fail=frozenset({relu(16).key}))
    saved = []
    run = profile_gpu(sigs, TARGET, measure, progress=None, checkpoint=saved.append,
                      date="2026-01-01")
    assert run.measured == 2 and run.skipped == 0 and run.complete
    assert run.failures == ((relu(16).key, "cuDNN said no"),)
    assert run.table.entry(relu(8)).gpu_launches[0].seconds == 8e-9
    assert run.table.entry(matmul(4)).gpu_seconds == 4e-6
    assert relu(16) not in run.table and saved[-1] == run.table
    # Each distinct signature asked for once.
    assert sorted(k for b in measure.batches for k in b) == sorted(
        {s.key for s in sigs})
    # Resumed: only the failed one is asked for again; the rest of the table is kept.
    again = Measurer()
    second = profile_gpu(sigs, TARGET, again, table=run.table, progress=None,
                         date="2026-01-02")
    assert again.batches == [[relu(16).key]]
    assert second.skipped == 2 and second.measured == 1
    assert {e.key for e in second.table.entries} == {s.key for s in sigs}
    text = second.table.to_json()
    assert CostTable.from_json(text).to_json() == text


def test_a_batch_that_raises_fails_its_signatures_only():
    def measure(batch):
        if any(s.op == "MatMul" for s in batch):
            raise RuntimeError("the executor did not load")
        return Measurer()(batch)

    run = profile_gpu([relu(8), matmul(4)], TARGET, measure, progress=None,
                      batch_bytes=1, date="2026-01-01")
    assert run.measured == 1
    assert [k for k, _ in run.failures] == [matmul(4).key]
    assert "did not load" in run.failures[0][1]


def test_a_conv_measurement_becomes_algorithm_samples():
    conv = OpSignature(op="Conv2D", shapes=((1, 1, 4, 4), (1, 1, 3, 3)),
                       dtypes=("float32", "float32"), attrs={"strides": [1, 1]})
    algos = (ConvAlgoSample(algorithm="FFT", seconds=1e-5, workspace_bytes=1024),
             ConvAlgoSample(algorithm="IMPLICIT_GEMM", seconds=2e-5, workspace_bytes=0))
    run = profile_gpu([conv], TARGET, lambda b: {conv.key: GpuMeasurement(algorithms=algos)},
                      progress=None, date="2026-01-01")
    assert [a.algorithm for a in run.table.entry(conv).gpu_algorithms] == [
        "FFT", "IMPLICIT_GEMM"]


def test_progress_names_each_batch(capsys):
    import sys

    profile_gpu([relu(8), matmul(4)], TARGET, Measurer(), progress=sys.stderr,
                date="2026-01-01")
    err = capsys.readouterr().err
    assert "0/2 2 signature(s): MatMul, Relu" in err and "2 signature(s) measured" in err


@pytest.mark.parametrize("target,says", [
    ("h100-80gb", "profiling runs kernels on this machine's GPU; use --target gpu"),
    ("xeon-8180", "profiling runs kernels on this machine; use --target host"),
])
def test_profile_refuses_targets_of_other_machines_in_one_line(capsys, tmp_path, target, says):
    out = tmp_path / "t.json"
    code = main(["profile", "zoo:mlp?batch=2", "--target", target, "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_profile_gpu_without_a_gpu_is_refused_in_one_line(capsys, tmp_path, monkeypatch):
    """Detection as on a machine without nvidia-smi (this one, or CI)."""
    import planner.target.detect as detect

    real = detect.detect
    monkeypatch.setattr(detect, "detect", lambda measure=True: real(
        measure=False, nvidia_smi=str(tmp_path / "no-nvidia-smi")))
    code = main(["profile", "zoo:mlp?batch=2", "--target", "gpu", "-o", str(tmp_path / "t")])
    err = capsys.readouterr().err
    assert code == 2 and "--target gpu: no NVIDIA GPU detected" in err
    assert len(err.strip().splitlines()) == 1


def test_profile_cli_on_a_gpu_target_writes_the_measurers_table(tmp_path, capsys):
    """`planner profile --target FILE` (this machine's GPU target, saved as `planner target
    detect` would give it) through the GPU measurer it is handed: what the CLI passes it and
    what it writes. The measurer is Measurer above, in codegen's place."""
    import argparse
    import json

    from planner.cli.costs import add_cost_commands
    from planner.costs import load_table
    from planner.costs.profile import Measurers

    gpu_file = tmp_path / "gpu.json"
    gpu_file.write_text(TARGET.model_copy(update={"name": "gpu"}).model_dump_json())
    made = {}

    def gpu(target, work, **kw):
        made.update(kw, target=target.name)
        m = Measurer()
        m.bytes_of = lambda sig: 1
        return m

    parser = argparse.ArgumentParser()
    add_cost_commands(parser.add_subparsers(dest="command"),
                      lambda: Measurers(kernel_timer=None, in_step=None, gpu=gpu))
    out = tmp_path / "t.json"
    # A Gelu of its own (an MLP's Relus run inside their MatMuls: fold_bias.py).
    args = parser.parse_args(["profile", "zoo:gpt?batch=1&seq=4&dim=8&heads=2&layers=1&vocab=11",
                              "--target", str(gpu_file),
                              "-o", str(out), "--repeats", "2", "--max-workspace", "1MiB",
                              "--json"])
    assert args.run(args) == 0
    report = json.loads(capsys.readouterr().out)
    table = load_table(out)
    assert table.target == "gpu" and report["measured"] == len(table.entries) > 0
    assert made == {"target": "gpu", "steps": 2, "max_workspace_bytes": 1 << 20,
                    "progress": None}
    assert any(e.gpu_launches for e in table.entries)
    assert any(e.gpu_seconds for e in table.entries)
    assert out.read_text() == table.to_json()


def test_merge_keeps_a_time_alone_unless_the_update_measured_one():
    from planner.costs.records import CostEntry, merge

    sig = matmul(4)

    def table(**kw):
        return CostTable(target=TARGET.name, entries=(CostEntry(signature=sig, **kw),))

    launch = (LaunchSample(threads_per_block=128, blocks=1, seconds=1e-6),)
    assert merge(table(gpu_seconds=1e-6), table(gpu_launches=launch)).entry(sig) == \
        CostEntry(signature=sig, gpu_seconds=1e-6, gpu_launches=launch)
    assert merge(table(gpu_seconds=1e-6), table(gpu_seconds=2e-6)).entry(sig).gpu_seconds == 2e-6
