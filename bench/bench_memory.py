"""Memory planning benchmark (issue 6): tables against seed 001 (SuperNeurons).

    python bench/bench_memory.py [arena] [alexnet] [sweep] [milp] [table5] [table4]

With no section named, all run (table5 and table4 search over many plans: minutes).

    arena    arena / LOAD of every zoo graph, training (momentum) and inference, planned on
             knl-7250 (optimized co-running schedule) and k40c-12gb (GPU stream, no budget)
    alexnet  AlexNet at batch 200 on k40c-12gb, seed 001 Fig. 10: naive, liveness, + offload,
             + recompute (each technique run to exhaustion), the per-op lower bound, and the
             plan at the smallest feasible budget, beside the seed's megabytes
    sweep    AlexNet at batch 200: budgets from loose to infeasible; planned peak, predicted
             step time, offloads, recomputes, stalls and workspaces (tightening never raises
             the peak; less room for workspaces slows the convolutions)
    milp     the greedy's recompute seconds against the exact MILP on small graphs
    table5   `planner fit --vary batch` on k40c-12gb within 11 GiB (multiples of 16), beside the
             seed's Table 5
    table4   `planner fit --vary depth` at batch 16 on k40c-12gb within 11 GiB, beside Table 4

Times are predicted by the cost model (analytical rooflines and cuDNN family defaults; no GPU
profile), so only the memory columns compare with the seed's measurements.
"""

from __future__ import annotations

import sys
import time
import warnings

import numpy as np

from planner.costs import CostModel
from planner.fit import fit
from planner.frontend.options import GraphOptions
from planner.frontend.prepare import prepare
from planner.graph.optimizer import Optimizer
from planner.memory import InfeasibleBudget, MemoryOptions
from planner.memory.budget.search import State
from planner.memory.milp import greedy_recompute, profile_with, recompute_milp
from planner.memory.stash import analyze
from planner.pipeline import PlanOptions, plan
from planner.schedule.streams import compute_steps
from planner.target import preset
from planner.zoo import MODELS, build

GPU = "k40c-12gb"
BUDGET = 11 << 30
MB = 1e6  # the seed's Fig. 10 megabytes
MiB = 1 << 20

# Seed 001 Table 5: largest batch on a 12 GB K40 (Caffe, MXNet, Torch, TensorFlow, SuperNeurons)
TABLE5 = {"alexnet": (768, 768, 1024, 1408, 1792), "vgg16": (48, 64, 48, 80, 224),
          "resnet-50": (24, 80, 32, 128, 384), "resnet-101": (16, 48, 16, 80, 256),
          "resnet-152": (16, 32, 16, 48, 176)}
SPECS = {"alexnet": "zoo:alexnet", "vgg16": "zoo:vgg16", "resnet-50": "zoo:resnet?depth=50",
         "resnet-101": "zoo:resnet?depth=101", "resnet-152": "zoo:resnet?depth=152"}
# Table 4: deepest ResNet at batch 16 (Caffe, MXNet, Torch, TensorFlow, SuperNeurons)
TABLE4 = (148, 480, 152, 592, 1920)


def arena() -> None:
    print("arena / LOAD on zoo graphs (training: momentum; default sizes)")
    print(f"{'graph':<24}{'target':<11}{'nodes':>7}{'naive MiB':>11}{'LOAD MiB':>10}"
          f"{'arena MiB':>11}{'arena/LOAD':>11}  heuristic")
    cpu, gpu = CostModel(preset("knl-7250")), CostModel(preset(GPU))
    worst = 0.0
    for name in MODELS:
        for train in (True, False):
            g = build(name)
            if train:
                g = prepare(g, GraphOptions(optimizer=Optimizer(kind="momentum")))
            for label, model in (("knl-7250", cpu), (GPU, gpu)):
                p = plan(g, model.target)
                m = p.summary.memory
                worst = max(worst, m.arena_bytes / m.load_bytes)
                kind = "train" if train else "infer"
                print(f"{name + ' ' + kind:<24}{label:<11}{len(g.nodes):>7}"
                      f"{m.naive_bytes / MiB:>11.1f}{m.load_bytes / MiB:>10.1f}"
                      f"{m.arena_bytes / MiB:>11.1f}{m.arena_bytes / m.load_bytes:>11.4f}"
                      f"  {m.allocator}", flush=True)
    print(f"worst arena / LOAD: {worst:.4f}\n")


def exhausted(stash, offload: bool, recompute: bool) -> State:
    state = State(stash, preset(GPU).gpus[0].host_link_bandwidth, offload=offload,
                  recompute=recompute, host_limit=preset(GPU).gpus[0].pinned_host_limit_bytes)
    while (move := state.best_move()) is not None:
        state.apply(move)
    return state


def alexnet() -> None:
    model = CostModel(preset(GPU))
    print("AlexNet, batch 200, k40c-12gb (seed 001 Fig. 10); MB = 10^6 bytes")
    for optimizer in ("sgd", "momentum"):
        g = prepare(build("alexnet", batch=200), GraphOptions(optimizer=Optimizer(kind=optimizer)))
        free = plan(g, model.target).summary.memory
        stash = analyze(compute_steps(g, model))
        live = State(stash, 1.0).load()
        off = exhausted(stash, True, False).load()
        rec = exhausted(stash, True, True).load()
        try:
            plan(g, model.target, options=PlanOptions(memory=MemoryOptions(budget_bytes=1)))
        except InfeasibleBudget as e:
            low = e.smallest_bytes
        best = plan(g, model.target, options=PlanOptions(
            memory=MemoryOptions(budget_bytes=low))).summary.memory
        bound = free.per_op_bound_bytes
        print(f"  {optimizer}: params + optimizer state {stash.persistent_bytes / MB:,.1f} MB")
        print(f"  {'':<30}{'ours MB':>10}{'vs naive':>10}{'/ bound':>9}{'seed MB':>10}"
              f"{'vs naive':>10}")
        for label, ours, seed in (("naive (own bytes each)", free.naive_bytes, 2189.437),
                                  ("liveness", live, 1489.355),
                                  ("+ offload", off, 1132.155),
                                  ("+ recompute", rec, 886.0),
                                  ("plan at smallest budget", best.peak_bytes, None)):
            cut = 1 - ours / free.naive_bytes
            seed_text = f"{seed:>10.1f}{1 - seed / 2189.437:>10.1%}" if seed else ""
            print(f"  {label:<30}{ours / MB:>10.1f}{cut:>10.1%}{ours / bound:>9.3f}"
                  f"{seed_text}")
        print(f"  per-op lower bound {bound / MB:,.1f} MB (largest op's operands + resident); "
              f"smallest feasible budget {low / MB:,.1f} MB = {low / bound:.3f} x bound; "
              f"{best.offloaded_tensors} offloads, {best.recompute_ops} recompute ops\n")


def sweep() -> None:
    model = CostModel(preset(GPU))
    g = prepare(build("alexnet", batch=200), GraphOptions(optimizer=Optimizer(kind="momentum")))
    free = plan(g, model.target)
    print("AlexNet, batch 200, momentum, k40c-12gb: tightening the budget")
    print(f"{'budget MiB':>11}{'peak MiB':>10}{'step ms':>9}{'stall ms':>9}{'offloads':>9}"
          f"{'recomp':>7}{'ws MiB':>8}")
    print(f"{'none':>11}{free.summary.memory.peak_bytes / MiB:>10.1f}"
          f"{free.summary.step_seconds * 1e3:>9.1f}{0:>9.1f}{0:>9}{0:>7}"
          f"{sum(c.workspace_bytes for c in free.memory.convs) / MiB:>8.1f}")
    peaks = []
    for budget_mib in (2048, 1600, 1400, 1300, 1200, 1100, 1060, 1040, 1020, 1000):
        try:
            p = plan(g, model.target, options=PlanOptions(
                memory=MemoryOptions(budget_bytes=budget_mib * MiB)))
        except InfeasibleBudget as e:
            print(f"{budget_mib:>11}  infeasible: smallest feasible "
                  f"{e.smallest_bytes / MiB:.1f} MiB")
            continue
        m = p.summary.memory
        peaks.append(m.peak_bytes)
        print(f"{budget_mib:>11}{m.peak_bytes / MiB:>10.1f}{p.summary.step_seconds * 1e3:>9.1f}"
              f"{m.stall_seconds * 1e3:>9.1f}{m.offloaded_tensors:>9}{m.recompute_ops:>7}"
              f"{sum(c.workspace_bytes for c in p.memory.convs) / MiB:>8.1f}")
    print(f"peaks never rise as the budget tightens: {peaks == sorted(peaks, reverse=True)}\n")


def milp() -> None:
    model = CostModel(preset(GPU))
    print("recomputation: greedy against the exact MILP (HiGHS, 10 s limit), recompute only")
    print(f"{'graph':<34}{'segments':>9}{'budgets':>8}{'worst greedy/MILP':>19}"
          f"{'mean':>7}{'MILP s':>8}")
    cases = [("lenet b32", "lenet", dict(batch=32)),
             ("alexnet b16 63px w/8", "alexnet", dict(batch=16, image=63, width=0.125,
                                                      classes=4)),
             ("resnet-18 b4 32px w/4", "resnet", dict(batch=4, image=32, width=0.25, depth=18,
                                                      classes=4)),
             ("inception_v3 b2 75px w/8", "inception_v3", dict(batch=2, image=75, width=0.125,
                                                               classes=4)),
             ("densenet b2 32px w/4", "densenet", dict(batch=2, image=32, width=0.25,
                                                       classes=4))]
    for strategy in ("cost-aware", "memory-centric"):
        for label, name, params in cases:
            g = prepare(build(name, **params), GraphOptions(optimizer=Optimizer(kind="sgd")))
            stash = analyze(compute_steps(g, model), strategy)
            top = State(stash, 1.0, offload=False).load()
            bottom = profile_with(stash, range(len(stash.segments))).load()
            ratios, seconds = [], 0.0
            for f in np.linspace(0, 1, 9)[1:-1]:
                budget = int(bottom + f * (top - bottom))
                t0 = time.perf_counter()
                exact = recompute_milp(stash, budget)
                seconds = max(seconds, time.perf_counter() - t0)
                greedy = greedy_recompute(stash, budget)
                ratios.append(greedy.seconds / exact.seconds if exact.seconds else 1.0)
            print(f"{label + ' ' + strategy:<34}{len(stash.segments):>9}{len(ratios):>8}"
                  f"{max(ratios):>19.4f}{np.mean(ratios):>7.3f}{seconds:>8.2f}", flush=True)
    print()


def table5() -> None:
    target = preset(GPU)
    print("largest batch within 11 GiB on k40c-12gb (fp32, momentum; params, gradients, "
          "optimizer state, activations and workspaces on the device); seed 001 Table 5")
    print(f"{'model':<12}{'Caffe':>7}{'MXNet':>7}{'Torch':>7}{'TF':>7}{'SuperN.':>9}"
          f"{'ours':>7}{'peak GiB':>10}{'step s':>8}{'plans':>7}{'search s':>10}")
    for label, spec in SPECS.items():
        t0 = time.perf_counter()
        r = fit(spec, target, BUDGET, "batch", multiple=16)
        seed = TABLE5[label]
        print(f"{label:<12}" + "".join(f"{v:>7}" for v in seed[:4]) + f"{seed[4]:>9}"
              f"{r.value:>7}{r.peak_bytes / (1 << 30):>10.2f}{r.step_seconds:>8.2f}"
              f"{len(r.trials):>7}{time.perf_counter() - t0:>10.0f}", flush=True)
    print()


def table4() -> None:
    print("deepest ResNet at batch 16 within 11 GiB on k40c-12gb (momentum); seed 001 Table 4")
    t0 = time.perf_counter()
    r = fit("zoo:resnet?batch=16", preset(GPU), BUDGET, "depth")
    print(f"{'Caffe':>7}{'MXNet':>7}{'Torch':>7}{'TF':>7}{'SuperN.':>9}{'ours':>7}"
          f"{'peak GiB':>10}{'step s':>8}{'plans':>7}{'search s':>10}")
    print("".join(f"{v:>7}" for v in TABLE4[:4]) + f"{TABLE4[4]:>9}{r.value:>7}"
          f"{r.peak_bytes / (1 << 30):>10.2f}{r.step_seconds:>8.2f}{len(r.trials):>7}"
          f"{time.perf_counter() - t0:>10.0f}")
    for t in r.trials:
        print(f"  depth {t.value:>5}: {'fits' if t.fits else 'does not fit'}"
              + (f", peak {t.peak_bytes / (1 << 30):.2f} GiB" if t.fits else ""))
    print()


SECTIONS = {"arena": arena, "alexnet": alexnet, "sweep": sweep, "milp": milp,
            "table5": table5, "table4": table4}


def main() -> None:
    warnings.simplefilter("ignore")
    chosen = [a for a in sys.argv[1:] if a in SECTIONS] or list(SECTIONS)
    for name in chosen:
        SECTIONS[name]()


if __name__ == "__main__":
    main()
