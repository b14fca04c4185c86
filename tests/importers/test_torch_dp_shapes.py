"""Data parallel under torchrun with the last, smaller batch of an epoch: two ranks (gloo, CPU)
each train through trainer(data_parallel=True, shard_parameters=True) from a DistributedSampler
and a DataLoader with drop_last=False, so every rank's epoch ends on a batch of 2 rows; the
trainer plans that shape once (rank 0's plan on both ranks), hands the ranks' shards over, and
ends where torch's DistributedDataParallel does (each rank's mean, gradients averaged over the
ranks). Batches of different sizes on the ranks (at a step, or as a new trainer's example)
are refused on every rank in one line naming them, never a hang, and change nothing.

Tolerance: tests/importers/torch_step.py's `mismatches`, DDP in float64 the exact answer and
DDP in float32 its rounding (10x that plus 16 ulps of each tensor's scale)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from tests.importers.torch_step import Step, mismatches  # noqa: E402


def test_the_last_smaller_batch_trains_on_every_rank_as_ddp(tmp_path):
    from tests.codegen.dp_harness import launch_ranks

    rng = np.random.default_rng(0)  # 36 rows: 18 a rank, batches of 8, 8 and 2
    np.savez(tmp_path / "data.npz", x=rng.standard_normal((36, 6)).astype(np.float32),
             y=rng.integers(0, 3, 36))
    outs = [tmp_path / f"rank{r}.npz" for r in range(2)]
    runs = launch_ranks(["epoch-zero3"] * 2, tmp_path / "data.npz", outs, timeout_s=120,
                        local=[{"LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": "2"} for r in range(2)],
                        worker="tests.importers.dp_shapes_worker")
    for run in runs:
        assert run.returncode == 0, run.stdout[-3000:]
        assert run.stdout.count("new input shapes [2, 6], [2]") == 1, run.stdout[-3000:]
    got = [dict(np.load(o)) for o in outs]
    ours = [{k[5:]: v for k, v in g.items() if k.startswith("ours:")} for g in got]
    assert ours[0] and all(np.array_equal(ours[0][k], ours[1][k]) for k in ours[0])
    for rank, g in enumerate(got):
        assert list(g["kept"]) == [8, 2] and int(g["planned"][0]) == 2  # the second epoch: none
        side = {p: {k[len(p) + 1:]: v for k, v in g.items() if k.startswith(p + ":")}
                for p in ("f32", "f64", "after")}
        loss, loss32, loss64 = (float(v) for v in g["losses"])  # this rank's last batch's
        assert mismatches(Step(loss, ours[rank]), Step(loss32, side["f32"]),
                          Step(loss64, side["f64"])) == [], rank
        said = list(g["said"])
        assert said[0].startswith("UserError: data_parallel: the ranks' batches differ (rank 0: "
                                  "step [8, 6], [8]; rank 1: step [2, 6], [2]); "), said[0]
        assert "rank 0: step [4, 6], [4]; rank 1: step [3, 6], [3]" in said[1], said[1]
        assert "DistributedSampler pads" in said[1] and "\n" not in said[1]
        assert "rank 0: plan [8, 6], [8]; rank 1: plan [7, 6], [7]" in said[2], said[2]
        assert all(np.array_equal(side["after"][k], v) for k, v in ours[rank].items())


def test_shard_layouts_of_two_batch_sizes_agree_and_other_buckets_do_not():
    # What decides whether ZeRO-3's shards may move between two shapes' plans: the buckets
    # (members, shapes, order) of the plans for 8 and 2 rows a rank are one layout; buckets of
    # another size lay the same parameters out otherwise, and hand_over refuses that.
    import warnings

    from planner.pipeline import PlanOptions, plan
    from planner.schedule.parallel import DataParallelOptions
    from planner.target.detect import detect
    from planner.torch.shapes import shard_layout
    from tests.codegen.dp_harness import mlp_graph

    def layout(batch, bucket_bytes=None):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return shard_layout(plan(mlp_graph("adam", batch), detect(), options=PlanOptions(
                data_parallel=DataParallelOptions(ranks=2, shard_parameters=True,
                                                  bucket_bytes=bucket_bytes))).graph)

    eight = layout(8)
    assert len({k[1] for k in eight}) >= 2 and eight == layout(2)
    assert layout(8, bucket_bytes=4) != eight
