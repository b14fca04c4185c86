"""The data-parallel flags (DataParallelOptions' fields), declared once for every command that
plans for several ranks (`planner plan`, `planner fit`)."""

from __future__ import annotations

from typing import Any

from planner.cli.flags import field_flag
from planner.schedule.parallel import DataParallelOptions


def add_data_parallel_flags(p: Any, ranks_help: str, layout: bool = True) -> None:
    """--data-parallel N (`ranks_help` says what N does for the command), --shard-optimizer and
    --shard-parameters; with `layout`, where the ranks run and how they talk too:
    --ranks-per-host, --interconnect, --bucket-bytes."""
    field_flag(p, "--data-parallel", DataParallelOptions, "ranks", type=int, default=1,
               metavar="N", help=ranks_help)
    if layout:
        field_flag(p, "--ranks-per-host", DataParallelOptions, "ranks_per_host", type=int,
                   default=1, metavar="L",
                   help="--data-parallel: L of the N processes share one host (torchrun "
                        "--nproc-per-node L); each plans for and runs on its 1/L of the cores "
                        "(planner.target.shares)")
        p.add_argument("--interconnect", metavar="FILE",
                       help="--data-parallel: the link between ranks, measured (planner "
                            "profile --all-reduce N -o FILE); default: the target's estimate")
        field_flag(p, "--bucket-bytes", DataParallelOptions, "bucket_bytes", type=int,
                   metavar="BYTES",
                   help="--data-parallel: gradient bucket size (default: from the cost model)")
    p.add_argument("--shard-optimizer", action="store_true",
                   help="--data-parallel: ZeRO-1: reduce-scatter the gradients, each process "
                        "updates its 1/N of the parameters holding 1/N of the optimizer "
                        "state, then all-gathers them")
    p.add_argument("--shard-parameters", action="store_true",
                   help="--data-parallel: ZeRO-3: each process holds 1/N of the parameters, "
                        "gradients and optimizer state; parameter buckets are all-gathered "
                        "before their readers and freed after (CPU targets)")
