"""Data-parallel scaling as the planner predicts it: ResNet-50 and BERT-base on the GPU
presets, 1 to 256 GPUs, every all-reduce a ring on the preset's interconnect
(planner.target.interconnect), next to published DDP / Horovod scaling efficiencies.
Planning only: no GPU, no network; every number in the table is a prediction.

    python bench/bench_dp_scaling.py [--presets v100-16gb,a100-80gb,h100-80gb]
                                     [--ranks 1,8,16,32,64,128,256] [--models resnet-50,bert]
                                     [--bucket-bytes N]

Each row is `planner plan GRAPH --train T --target PRESET --data-parallel N` (the per-GPU
batch fixed: weak scaling, as DDP and Horovod measure), the predicted step of the plan:
  step       the planned step (the simulator's: backward on the compute stream, the buckets'
             all-reduces on the comm stream, the updates after both)
  eff        scaling efficiency, the throughput per GPU against one GPU: step(1) / step(N)
  comm       the all-reduces' time, summed (alpha-beta ring: 2 (N - 1) (alpha + b / (N beta)))
  hidden     the share of it behind backward: 1 - (step(N) - step(1)) / comm
  buckets    how many buckets the planner cut the gradients into (b >= 9 N alpha beta)
The ring's link: NVLink up to 8 GPUs (one node), the node's InfiniBand NICs beyond (the slowest
hop of a ring that crosses nodes: the ring is priced on it alone, planner.target.interconnect).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.frontend.options import GraphOptions  # noqa: E402
from planner.frontend.prepare import prepare  # noqa: E402
from planner.graph.optimizer import Optimizer  # noqa: E402
from planner.pipeline import PlanOptions, plan  # noqa: E402
from planner.plan import Plan  # noqa: E402
from planner.schedule.parallel import DataParallelOptions  # noqa: E402
from planner.target import preset  # noqa: E402
from planner.target.interconnect import interconnect, ring_link  # noqa: E402
from planner.zoo import build as zoo  # noqa: E402

# Per GPU: ResNet-50 on 224 x 224 images, 32 a GPU (the batch of the DDP paper's and Horovod's
# ResNet runs is not what is compared: efficiency is per-GPU throughput against one GPU);
# BERT-base (12 layers, 768 wide, 30522 tokens) on 128-token sequences, 16 a GPU, Adam.
MODELS = {
    "resnet-50": ("resnet", dict(depth=50, batch=32), "sgd"),
    "bert": ("bert", dict(batch=16, seq=128, dim=768, heads=12, layers=12, vocab=30522),
             "adam"),
}

# Published scaling efficiencies (measured, other hardware: not the same experiment).
PUBLISHED = (
    "Published (measured on real clusters; other GPUs and networks than the presets):",
    "  Horovod's README and docs/benchmarks (Sergeev & Del Balso's project, arXiv:1802.05799):",
    "    128 servers x 4 Pascal GPUs (512 GPUs), RoCE-capable 25 Gbit/s network:",
    "    90% scaling efficiency for Inception V3 and for ResNet-101, 68% for VGG-16;",
    "    the same page's earlier version, 32 servers x 4 Pascal GPUs (128 GPUs): 90%, 90%, 79%.",
    "  PyTorch DDP (Li et al., 'PyTorch Distributed: Experiences on Accelerating Data Parallel",
    "    Training', VLDB 2020): ResNet50 and BERT with NCCL and Gloo up to 256 GPUs; the",
    "    abstract: 'near-linear scalability using 256 GPUs'. Its figures give per-iteration",
    "    latency, not an efficiency number, so none is quoted here.",
)


def graph_of(model: str):
    name, params, optimizer = MODELS[model]
    return prepare(zoo(name, **params), GraphOptions(optimizer=Optimizer(kind=optimizer)))


def planned(graph, target: str, ranks: int, bucket: int | None) -> Plan:
    """The verified plan of `graph` on `target` over `ranks` GPUs."""
    return plan(graph, preset(target), options=PlanOptions(
        data_parallel=DataParallelOptions(ranks=ranks, bucket_bytes=bucket)))


def comm_seconds(p: Plan) -> float:
    """The plan's all-reduces' predicted time, summed."""
    return sum(op.end - op.start for op in p.ops if op.op == "AllReduce")


def rows(model: str, target: str, ranks: list[int], bucket: int | None) -> list[str]:
    graph = graph_of(model)
    one = planned(graph, target, 1, None).summary.step_seconds
    out = []
    for n in ranks:
        p = planned(graph, target, n, bucket) if n > 1 else None
        step = p.summary.step_seconds if p else one
        comm = comm_seconds(p) if p else 0.0
        hidden = 1 - (step - one) / comm if comm > 0 else float("nan")
        buckets = sum(1 for op in p.ops if op.op == "AllReduce") if p else 0
        link = interconnect(preset(target))
        via = "-" if n == 1 else ("NVLink" if ring_link(link, n) is link.node else "IB")
        out.append(f"| {model} | {target} | {n} | {step * 1e3:.1f} | {one / step:.1%} | "
                   f"{comm * 1e3:.2f} | {'-' if n == 1 else f'{max(0.0, hidden):.0%}'} | "
                   f"{buckets} | {via} |")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", default="v100-16gb,a100-80gb,h100-80gb")
    ap.add_argument("--ranks", default="1,8,16,32,64,128,256")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--bucket-bytes", type=int, default=None,
                    help="fixed bucket size instead of the planner's (DDP's default: 26214400)")
    args = ap.parse_args()
    ranks = [int(r) for r in args.ranks.split(",")]
    t0 = time.perf_counter()
    print("PREDICTED by the planner's cost model and simulator (planning only, no GPU run); "
          f"buckets: {args.bucket_bytes or 'the planner'}")
    for target in args.presets.split(","):
        link = interconnect(preset(target))
        print(f"  {target}: {link.source}; within a node {link.node.source if link.node else '-'}")
    print()
    print("| model | preset | GPUs | step ms | eff | comm ms | hidden | buckets | ring on |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for model in args.models.split(","):
        for target in args.presets.split(","):
            for line in rows(model, target, ranks, args.bucket_bytes):
                print(line, flush=True)
    print()
    print("\n".join(PUBLISHED))
    print(f"\n({time.perf_counter() - t0:.0f} s of planning)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
