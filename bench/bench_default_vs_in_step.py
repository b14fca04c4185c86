"""The default trainer plan (times measured per signature, kept per host) against the plan of
`costs="in-step"` (the module's own step profiled), issue 51's acceptance: the same module
(conv_mlp below) planned by the default once (a fresh cache) and
by two in-step profiles, on this host.

    PYTHONPATH=. python bench/bench_default_vs_in_step.py [--pairs 60]

Printed: the plans' decisions outside the noise of the repeated in-step profiles
(`outside_noise`: an op's thread count or a convolution's layout on which both in-step plans
agree and the default does not), per signature the default's measured time over the first
in-step profile's (one and two threads; the second in-step profile's likewise: their noise),
each table's contention figures, the first in-step table planned with the default's
contention figures instead of its own (which of the two differences moves the plan), every
plan's predicted step, and the executors' real steps taken in turns (bench/paired_steps.py:
the median of the per-pair ratios and its quartiles).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def conv_mlp():
    import torch

    torch.manual_seed(5)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
        torch.nn.Linear(16 * 8 * 8, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))


def decisions(plan) -> dict[tuple[str, str, str], object]:
    """What a cost table decides in a plan of the host: each graph op's thread count and each
    convolution's kernel layout, in the step and in its evaluation."""
    from planner.costs.conv_layouts import CONVOLUTIONS

    out: dict[tuple[str, str, str], object] = {}
    for part, p in (("step", plan), ("evaluation", plan.evaluation.plan)):
        nodes = {n.name: n for n in p.graph.nodes}
        out |= {(part, "threads", op.name): op.threads for op in p.ops if op.name in nodes}
        out |= {(part, "layout", n.name): n.attrs.get("layout", "its own")
                for n in nodes.values() if n.op in CONVOLUTIONS}
    return out


def ratios(table, reference, threads: int) -> list[float]:
    """Per signature both tables measured on `threads` compact threads: `table`'s seconds over
    `reference`'s."""
    def seconds(entry):
        return {s.threads: s.seconds for s in entry.cpu if s.affinity == "compact"}

    other = {e.key: seconds(e) for e in reference.entries}
    return [seconds(e)[threads] / other[e.key][threads] for e in table.entries
            if threads in seconds(e) and threads in other.get(e.key, {})]


def outside_noise(plan, repeats) -> list[str]:
    """The decisions of `plan` that none of the plans `repeats` (the same module priced by
    repeated in-step profiles) made: where the repeated profiles agree, a plan within their
    noise agrees too; where they differ, the decision is noise and either value is."""
    theirs = [decisions(r) for r in repeats]
    return [f"{part} {what} of {name}: {value!r}, in-step {[t.get(key) for t in theirs]}"
            for key, value in sorted(decisions(plan).items())
            for part, what, name in [key]
            if all(t.get(key) != value for t in theirs)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=60)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    os.environ.pop("PLANNER_COSTS", None)
    import torch

    import planner.costs.host_costs as host_costs
    from bench.paired_steps import paired
    from planner.pipeline import plan
    from planner.torch import trainer
    from tests.importers.torch_training_check import LR

    work = Path(tempfile.mkdtemp(prefix="default-vs-in-step-"))
    host_costs.cache_root = lambda: work / "cache"  # a host that has measured nothing yet
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(16, 3, 8, 8, generator=g), torch.randint(0, 10, (16,), generator=g)
    made = {}
    for name, costs in (("default", None), ("in-step 1", "in-step"), ("in-step 2", "in-step")):
        folder = work / name.replace(" ", "")
        t = trainer(conv_mlp(), (x,), loss=torch.nn.functional.cross_entropy, labels=y,
                    lr=LR["sgd"], out_dir=folder, costs=costs)
        package = next(p for p in folder.iterdir() if p.name.startswith("torch_"))
        made[name] = (t.plan, package, folder)
    plans = {k: v[0] for k, v in made.items()}
    repeats = [plans["in-step 1"], plans["in-step 2"]]
    print(f"load average {os.getloadavg()[0]:.1f}; {len(decisions(plans['default']))} "
          f"decisions per plan")
    print(f"default outside the in-step noise: {len(outside_noise(plans['default'], repeats))}; "
          f"in-step 2 unlike in-step 1: {len(outside_noise(plans['in-step 2'], repeats[:1]))}")
    from codegen.build import runtime_key

    store = host_costs.read_store(_host(), runtime_key()).table
    first = _table(made["in-step 1"][2])
    second = _table(made["in-step 2"][2])
    for threads in (1, 2):
        for name, t in (("default", store), ("in-step 2", second)):
            r = sorted(ratios(t, first, threads))
            print(f"per signature, {name} / in-step 1 at {threads} thread(s): median "
                  f"{statistics.median(r):.2f}, quartiles {_q(r)}, {len(r)} signatures")
    for name, t in (("default", store), ("in-step 1", first), ("in-step 2", second)):
        print(f"{name} contention {t.contention}, co-run slowdown {t.corun_slowdown}, "
              f"hand-off {t.handoff_seconds}, team scale {t.team_scale}")
    swapped = first.model_copy(update=store.host_figures())
    p = plan(plans["in-step 1"].graph, _host(), swapped)
    print(f"in-step 1's times with the default's contention: {_shape(p)}, outside the noise "
          f"{len(outside_noise(p, repeats))}")
    for name, pl in plans.items():
        print(f"{name}: {_shape(pl)}")
    for a, b in (("default", "in-step 1"), ("default", "in-step 2"),
                 ("in-step 1", "in-step 2")):
        times = paired(made[a][1], made[b][1], args.pairs)
        steps = sorted(p / q for p, q in zip(times["A"], times["B"], strict=True))
        print(f"measured step {a} / {b}: median {statistics.median(steps):.3f}, quartiles "
              f"{_q(steps)} ({len(steps)} pairs; {statistics.median(times['A']) * 1e6:.0f} "
              f"vs {statistics.median(times['B']) * 1e6:.0f} us); load average "
              f"{os.getloadavg()[0]:.1f}")


def _host():
    from planner.target.presets import load_target

    return load_target("host")


def _table(folder: Path):
    from planner.costs import load_table

    return load_table(folder / "costs.json")


def _q(values: list[float]) -> str:
    q1, _, q3 = statistics.quantiles(values, n=4)
    return f"{q1:.2f}-{q3:.2f}"


def _shape(p) -> str:
    return (f"predicted step {p.summary.step_seconds * 1e6:.0f} us, "
            f"{len({o.lane for o in p.ops})} lane(s), threads {sorted({o.threads for o in p.ops})}")


if __name__ == "__main__":
    main()
