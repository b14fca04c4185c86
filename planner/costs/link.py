"""The link between data-parallel ranks, measured: all-reduce time against message size on a
real gloo process group, fitted to the alpha-beta model the planner prices all-reduces with
(planner.schedule.parallel):

    t(b) = 2 (r - 1) alpha + (2 (r - 1) / r) b / beta       (a ring all-reduce of b bytes)

`planner profile --all-reduce R -o link.json` runs R processes on this host (127.0.0.1),
each all-reducing float32 buffers of each size (medians of `repeats`), and writes the
fitted Interconnect; `planner plan --interconnect link.json` prices with it.

Example (a link of 10 us and 1 GB/s, measured exactly):
    >>> sizes = [4096, 65536, 1 << 20]
    >>> fit_link(sizes, [2 * 1e-5 + b / 1e9 for b in sizes], 2).latency_seconds
    1e-05
"""

from __future__ import annotations

import datetime
import os
import socket
from collections.abc import Sequence

import numpy as np

from planner.errors import UserError
from planner.target.interconnect import Interconnect

SIZES = tuple(1 << k for k in range(12, 23, 2))  # 4 KiB .. 4 MiB


def fit_link(sizes: Sequence[int], seconds: Sequence[float], ranks: int,
             source: str = "") -> Interconnect:
    """Least-squares alpha and beta (in relative error) of measured all-reduce times
    (seconds per size in bytes) over `ranks` processes; UserError when the times do not grow
    with size (no bandwidth to fit)."""
    if ranks < 2 or len(sizes) < 2:
        raise UserError("fitting a link needs 2 or more ranks and 2 or more message sizes")
    a = np.array([[2 * (ranks - 1), 2 * (ranks - 1) / ranks * b] for b in sizes], float)
    t = np.asarray(seconds, float)
    if not (t > 0).all():
        raise UserError("all-reduce times must be positive")
    # Relative errors (rows scaled by 1/t): the small messages, which fix alpha, count as
    # much as the large ones, which fix beta.
    (alpha, inverse), *_ = np.linalg.lstsq(a / t[:, None], np.ones_like(t), rcond=None)
    if inverse <= 0:
        raise UserError("all-reduce times do not grow with the message size: cannot fit a "
                        "bandwidth (measure larger sizes, or on a quieter machine)")
    return Interconnect(bandwidth=float(round(1 / inverse, 6)),
                        latency_seconds=float(round(max(alpha, 0.0), 12)), source=source)


def _rank(rank: int, ranks: int, port: int, sizes: Sequence[int], repeats: int,
          out: dict) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=ranks,
                            timeout=datetime.timedelta(seconds=60))
    try:
        import time

        times = []
        for b in sizes:
            x = torch.ones(b // 4)
            dist.all_reduce(x)  # warm-up: connections, buffers
            runs = []
            for _ in range(repeats):
                dist.barrier()
                t0 = time.perf_counter()
                dist.all_reduce(x)
                runs.append(time.perf_counter() - t0)
            times.append(float(np.median(runs)))
        if rank == 0:
            out["seconds"] = times
    finally:
        dist.destroy_process_group()


def measure_all_reduce(ranks: int, sizes: Sequence[int] = SIZES, repeats: int = 5
                       ) -> list[float]:
    """Median seconds of a sum all-reduce of each size (bytes of float32) over `ranks` gloo
    processes on this host."""
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_rank, args=(ranks, port, list(sizes), repeats, out), nprocs=ranks)
        return list(out["seconds"])


def profile_link(ranks: int, sizes: Sequence[int] = SIZES, repeats: int = 5) -> Interconnect:
    """The measured and fitted link of `ranks` gloo processes on this host."""
    seconds = measure_all_reduce(ranks, sizes, repeats)
    return fit_link(sizes, seconds, ranks, source=(
        f"measured: gloo all-reduce over {ranks} processes on this host, "
        f"{min(sizes)}-{max(sizes)} bytes, medians of {repeats}"))
