"""Data-parallel step time on this host: the planner's executors on a gloo group against
PyTorch DDP, with the same processes, threads per process and global batch.

    python bench/bench_data_parallel.py [--steps 6] [--rounds 2] [--models resnet-18,lstm,gpt]
                                        [--procs 1,2]

For each model and P = 1, 2 processes (--procs) (each on 1/P of the cores: ours planned with
--data-parallel P --ranks-per-host P, torch with set_num_threads(cores / P)), the global batch
is split P ways. Rounds alternate ours and DDP; a row is the median over rounds of rank 0's
median step. For P >= 2 also ours with --shard-optimizer (ZeRO-1: reduce-scatter, each rank
updates its 1/P, all-gather; column "ZeRO-1 ms"), in the same alternating rounds.
Communication hidden behind compute:
  ours   from stats(): the share of the all-reduces' measured time during which a compute op
         ran (examples/train_digits_ddp.hidden_communication), last step of each round;
  DDP    from timing: 1 - (step - step under no_sync()) / (one all-reduce of all gradients,
         flat), clipped to [0, 1] (exposed communication over the communication alone).
Both sides' OpenMP threads wait as the generated package's do (codegen/backends.py:
CPU_LOAD_ENVIRONMENT, a short spin before sleeping). P = 4 needs 4 cores (each rank plans on
its share of whole cores: a 2-core host refuses it); `--procs 1,2,4` on the device machine
(bench/device/cpu_bench.sh). Each process is started by this script (`--worker`), rendezvous
on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_transformer import CONFIG as GPT  # noqa: E402
from bench_transformer import torch_model  # noqa: E402

from codegen.backends import CPU_LOAD_ENVIRONMENT  # noqa: E402
from codegen.build import build  # noqa: E402
from codegen.load import load  # noqa: E402
from codegen.render import render  # noqa: E402
from planner.frontend.options import GraphOptions  # noqa: E402
from planner.frontend.prepare import prepare  # noqa: E402
from planner.graph.interpret import init_params, random_feeds  # noqa: E402
from planner.graph.optimizer import Optimizer  # noqa: E402
from planner.pipeline import PlanOptions, plan  # noqa: E402
from planner.schedule.parallel import DataParallelOptions  # noqa: E402
from planner.target.detect import detect  # noqa: E402
from planner.zoo import build as zoo  # noqa: E402

# Small configurations (this 2-core host); `batch` is the global batch. The GPT is
# bench_transformer's, whose nn.Module is the torch side (the graph translator lacks
# LayerNorm); the others run on torch through that translator (bench/torch_baseline.py's).
MODELS = {
    "resnet-18": ("resnet", dict(depth=18, batch=8, image=32, classes=10)),
    "lstm": ("lstm", dict(batch=8, seq=16, hidden=128, layers=2, vocab=1000)),
    "gpt": ("gpt", GPT),
}
SGD = Optimizer(kind="sgd", lr=0.01)


def forward(model: str, ranks: int):
    name, config = MODELS[model]
    return zoo(name, **{**config, "batch": config["batch"] // ranks})


def package(model: str, ranks: int, folder: Path, shard: bool = False) -> Path:
    graph = prepare(forward(model, ranks), GraphOptions(optimizer=SGD))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = plan(graph, detect(), options=PlanOptions(data_parallel=DataParallelOptions(
            ranks=ranks, ranks_per_host=ranks, shard_optimizer=shard)))
    name = f"{model.replace('-', '_')}_dp{ranks}" + ("_zero1" if shard else "")
    return build(render(p, folder / name)).dir


def _hidden_communication():
    path = ROOT / "examples" / "train_digits_ddp.py"
    spec = importlib.util.spec_from_file_location("train_digits_ddp", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.hidden_communication


def _median_step(step, steps: int) -> float:
    step()  # warm-up
    step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def worker_ours(pkg: str, model: str, ranks: int, steps: int) -> dict:
    graph = prepare(forward(model, ranks), GraphOptions(optimizer=SGD))
    ex = load(pkg).Executor()  # joins the default group (and this rank's cores)
    ex.load_params(init_params(graph, seed=0))
    feeds = random_feeds(graph, seed=1)
    out = {"step_s": _median_step(lambda: ex.step(feeds), steps)}
    total, hidden = _hidden_communication()(ex.stats())
    out.update(comm_s=total, hidden_s=hidden)
    return out


def worker_ddp(model: str, ranks: int, steps: int) -> dict:
    import torch
    import torch.distributed as dist

    from tests.torch_translator import TORCH_OPS, torch_forward

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // ranks))
    fwd = forward(model, ranks)
    state = init_params(fwd, seed=0)
    names = [t.name for t in fwd.by_role("param")]
    ops = {**TORCH_OPS, "Dropout": lambda xs, a: [
        torch.nn.functional.dropout(xs[0], a["rate"], training=True)]}

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ps = torch.nn.ParameterList(torch.nn.Parameter(torch.tensor(state[n]))
                                             for n in names)
            self.rest = {k: torch.tensor(v) for k, v in state.items() if k not in names}

        def forward(self, feeds):
            return torch_forward(fwd, {**self.rest, **feeds, **dict(zip(names, self.ps,
                                                                       strict=True))},
                                 ops)["loss"]

    feeds = {k: torch.tensor(v) for k, v in random_feeds(fwd, seed=1).items()}
    if model == "gpt":
        net, inputs = torch_model("gpt"), (feeds["tokens"], feeds["labels"].reshape(-1))
    else:
        net, inputs = Net(), (feeds,)
    ddp = torch.nn.parallel.DistributedDataParallel(net) if ranks > 1 else net
    opt = torch.optim.SGD(net.parameters(), lr=SGD.lr)

    def step() -> None:
        opt.zero_grad()
        ddp(*inputs).backward()
        opt.step()

    out = {"step_s": _median_step(step, steps), "comm_s": 0.0, "hidden_s": 0.0}
    if ranks > 1:
        def compute_only() -> None:
            with ddp.no_sync():
                step()

        alone = _median_step(compute_only, steps)
        flat = torch.cat([p.grad.reshape(-1) for p in net.parameters()])
        comm = _median_step(lambda: dist.all_reduce(flat), steps)
        exposed = max(0.0, out["step_s"] - alone)
        out.update(comm_s=comm, hidden_s=max(0.0, comm - exposed))
    return out


def worker(argv: list[str]) -> int:
    import torch.distributed as dist

    kind, pkg, model, ranks, steps, out_path = argv
    ranks, steps = int(ranks), int(steps)
    if ranks > 1:
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    result = (worker_ours(pkg, model, ranks, steps) if kind in ("ours", "zero1")
              else worker_ddp(model, ranks, steps))
    if ranks == 1 or dist.get_rank() == 0:
        Path(out_path).write_text(json.dumps(result))
    if ranks > 1:
        dist.barrier()
        dist.destroy_process_group()
    return 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(rank: int, ranks: int, port: int) -> dict[str, str]:
    """The environment of rank `rank` of `ranks` processes on this host, each on 1/ranks of
    the cores, rendezvous on 127.0.0.1:port."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCAL_")}
    # Both sides' OpenMP threads wait as the generated package's do (a short spin, then
    # sleep: long spinning teams collapse with other processes on the cores).
    env.update(CPU_LOAD_ENVIRONMENT)
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
               WORLD_SIZE=str(ranks), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(ranks),
               PYTHONPATH=str(ROOT), OMP_NUM_THREADS=str(max(1, (os.cpu_count() or 1)
                                                             // ranks)))
    return env


def run_ranks(script: str, kind: str, pkg: Path | str, model: str, ranks: int, steps: int,
              out: Path, timeout: float = 900) -> None:
    """`script --worker kind pkg model ranks steps out` as `ranks` processes of one group on
    this host; SystemExit naming the run where a rank fails."""
    port = _free_port()
    procs = [subprocess.Popen([sys.executable, script, "--worker", kind, str(pkg), model,
                               str(ranks), str(steps), str(out)],
                              env=rank_env(rank, ranks, port), cwd=ROOT)
             for rank in range(ranks)]
    for p in procs:
        if p.wait(timeout=timeout) != 0:
            raise SystemExit(f"{kind} {model} x{ranks}: a rank exited {p.returncode}")


def launch(kind: str, pkg: Path | str, model: str, ranks: int, steps: int, out: Path) -> dict:
    run_ranks(__file__, kind, pkg, model, ranks, steps, out)
    return json.loads(out.read_text())


def main() -> None:
    if sys.argv[1:2] == ["--worker"]:
        raise SystemExit(worker(sys.argv[2:]))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--procs", default="1,2", help="process counts P, comma-separated")
    args = parser.parse_args()
    print(f"host: {os.cpu_count()} logical CPUs; load average before: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'model':<11}{'P':>2}{'global batch':>13}{'ours ms':>9}{'DDP ms':>8}"
          f"{'ours/DDP':>9}{'ours comm ms':>13}{'hidden':>7}{'DDP comm ms':>12}{'hidden':>7}"
          f"{'ZeRO-1 ms':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            for ranks in map(int, args.procs.split(",")):
                pkgs = {"ours": package(model, ranks, Path(tmp)), "ddp": ""}
                if ranks > 1:
                    pkgs["zero1"] = package(model, ranks, Path(tmp), shard=True)
                rows: dict[str, list[dict]] = {kind: [] for kind in pkgs}
                for r in range(args.rounds):
                    for kind in list(pkgs)[::1 if r % 2 == 0 else -1]:
                        rows[kind].append(launch(kind, pkgs[kind] or pkgs["ours"], model,
                                                 ranks, args.steps, Path(tmp) / f"{kind}.json"))

                def med(kind: str, key: str, rows=rows) -> float:
                    return float(np.median([x[key] for x in rows[kind]]))

                def share(kind: str) -> str:
                    comm = med(kind, "comm_s")
                    return f"{med(kind, 'hidden_s') / comm:7.0%}" if comm > 0 else f"{'-':>7}"

                ours, ddp = med("ours", "step_s"), med("ddp", "step_s")
                print(f"{model:<11}{ranks:>2}{MODELS[model][1]['batch']:>13}{ours * 1e3:>9.1f}"
                      f"{ddp * 1e3:>8.1f}{ours / ddp:>9.2f}{med('ours', 'comm_s') * 1e3:>13.2f}"
                      f"{share('ours')}{med('ddp', 'comm_s') * 1e3:>12.2f}{share('ddp')}"
                      + (f"{med('zero1', 'step_s') * 1e3:>10.1f}" if rows.get("zero1")
                         else f"{'-':>10}"), flush=True)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
