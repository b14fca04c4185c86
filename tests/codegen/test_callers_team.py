"""A step on lanes that share no CPU lets the calling thread's OpenMP workers go first
(templates/cpu/runtime/executor.cpp, release_callers_team): in PyTorch's process PyTorch's idle
worker would spin on a CPU the step needs, and with its thread counted libgomp cuts every
team's spinning short. Where lanes share a CPU the caller's team is left as it is.

Each case runs in a fresh interpreter that imports PyTorch before the executor, as the torch
front end does (the two then share PyTorch's libgomp), makes PyTorch start its team, steps the
executor, and reports which of PyTorch's workers are left. What the test expects it derives
from the plan itself: whether two lanes run ops on one CPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from codegen.build import build
from codegen.render import render
from planner.frontend.autodiff import make_training_graph
from planner.graph.optimizer import Optimizer
from planner.pipeline import PlanOptions, plan
from planner.schedule import ScheduleOptions
from planner.target.detect import detect
from planner.zoo import build as zoo

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import importlib, json, os, sys
import torch  # first, as in a training script: the executor then loads PyTorch's libgomp
sys.path.insert(0, sys.argv[1])
module = importlib.import_module(sys.argv[2])
from planner.graph import Graph
from planner.graph.interpret import init_params, random_feeds
graph = Graph.model_validate(json.loads(module.plan)["graph"])
gomp = {line.split()[-1] for line in open("/proc/self/maps") if "libgomp" in line}
ex = module.Executor()
ex.set_variant("main")
ex.load_params(init_params(graph, seed=0))
feeds = random_feeds(graph, seed=1)
ex.step(feeds)  # the lanes' own teams start
tids = lambda: set(os.listdir("/proc/self/task"))
torch.set_num_threads(2)
before = tids()
torch.ones(1 << 22).mul_(2)  # big enough for PyTorch's OpenMP team
workers = tids() - before
ex.step(feeds)
print(json.dumps({"libgomps": len(gomp), "workers": len(workers),
                  "left": len(workers & tids())}))
"""

# The paper's schedule of this resnet gives a lane's two-thread ops a CPU the other lane runs
# on (on a 2-core host: the branch where the caller's team stays).
SCHEDULES = {
    "one lane, two threads": ScheduleOptions(strategy="uniform", intra=2, inter=1),
    "two lanes, a CPU each": ScheduleOptions(strategy="uniform", intra=1, inter=2),
    "paper": ScheduleOptions(strategy="paper"),
}


def shares_cpus(p) -> bool:
    """Whether ops of two lanes run on one CPU (the runtime's Lanes::shares_cpus, from the
    plan's placement)."""
    owner: dict[int, int] = {}
    for o in p.ops:
        for cpu in o.cpus:
            if owner.setdefault(cpu, o.lane) != o.lane:
                return True
    return False


@pytest.mark.skipif(detect().cores < 2, reason="PyTorch's team needs two CPUs")
@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
def test_the_callers_team_is_let_go_unless_lanes_share_a_cpu(schedule, tmp_path):
    graph = make_training_graph(zoo("resnet", depth=18, batch=2, image=16, width=0.125,
                                    classes=5), Optimizer(kind="sgd", lr=0.05))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = plan(graph, detect(), options=PlanOptions(schedule=SCHEDULES[schedule]))
    package = build(render(p, tmp_path / "resnet_team")).dir
    # libgomp's default count, given as the user's own: the executor then holds no parked team
    # of its own on a busy host (templates/cpu/runtime/busy_host.h), whose threads, started
    # while PyTorch's op runs, would count here as PyTorch's workers left.
    env = dict(os.environ, PYTHONPATH=str(ROOT), GOMP_SPINCOUNT="300000")
    out = subprocess.run([sys.executable, "-c", CHILD, str(package.parent), package.name],
                         capture_output=True, text=True, env=env, timeout=300, check=True)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    if seen["libgomps"] != 1 or seen["workers"] == 0:
        pytest.skip(f"PyTorch's OpenMP is not the executor's libgomp here: {seen}")
    if shares_cpus(p):
        assert seen["left"] == seen["workers"], seen
    else:
        assert seen["left"] == 0, seen
