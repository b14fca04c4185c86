"""Shared by the codegen tests: plan a graph for this host, render, build and load it, and
compare an executor's step with the numpy reference."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np

from codegen.build import build
from codegen.load import load
from codegen.render import render
from planner.graph.interpret import init_params, random_feeds
from planner.ir.graph import Graph
from planner.ops import get_op
from planner.pipeline import PlanOptions, plan
from planner.plan import Plan
from planner.schedule import ScheduleOptions
from planner.target.detect import detect


def host_plan(graph: Graph, strategy: str = "uniform") -> Plan:
    """The plan of `graph` for this host (analytical costs)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return plan(graph, detect(), options=PlanOptions(
            schedule=ScheduleOptions(strategy=strategy)))


# The GPU target CUDA executors are planned for in tests without a GPU (planning needs none);
# on a machine with one, its own device (the executor refuses a plan for another).
GPU_TARGET = "h100-80gb"


@cache
def gpu_test_target():
    """This machine's first GPU when it has one, else the GPU_TARGET preset."""
    from planner.errors import UserError
    from planner.target import preset
    from planner.target.presets import gpu_target

    try:
        return gpu_target(detect(measure=False))
    except UserError:
        return preset(GPU_TARGET)


def gpu_plan(graph: Graph, strategy: str = "optimized") -> Plan:
    """The plan of `graph` for the test GPU (stream schedule, conv algorithms, workspaces):
    co-running streams where they win (strategy optimized), or one stream (uniform)."""
    return plan(graph, gpu_test_target(), options=PlanOptions(
        schedule=ScheduleOptions(strategy=strategy)))


def build_module(graph: Graph, folder: Path, backend: str = "cpu", layout: str = "own"):
    """Render, build and import the executor of `graph` under `folder` (its name) for this
    host's CPUs or (backend "cuda") the GPU preset; by default every tensor with its own
    bytes, so that every value can be read back after a step."""
    planned = gpu_plan(graph) if backend == "cuda" else host_plan(graph)
    tree = render(planned, folder, layout=layout)
    return load(build(tree).dir)


def planned_graph(module) -> Graph:
    """The graph a built module's plan runs: the step graph (planner.pipeline.step_graph's
    rewrites for its target: folds, layouts), whose tensors the executor holds."""
    import json

    return Graph.model_validate(json.loads(module.plan)["graph"])


def host_with_block(block: int | None):
    """This host with its CPU's channel block set to `block` (None: no images kept blocked;
    planner.step.blocked)."""
    host = detect()
    return host.model_copy(update={"cpu": host.cpu.model_copy(update={"vector_floats": block})})


def start_state(graph: Graph, seed: int = 1) -> dict[str, np.ndarray]:
    """init_params, with zero/one-initialised params moved off their constants: a zero BN bias
    makes its gradient a near-cancelling sum whose float32 value is rounding noise (numpy's
    own float32 result is percent-level away from float64 there)."""
    state = init_params(graph, seed=seed)
    rng = np.random.default_rng(seed + 100)
    for t in graph.by_role("param"):
        if t.init in ("zeros", "ones") and t.updates is None:
            state[t.name] = (state[t.name] + rng.uniform(-0.1, 0.1, t.shape)).astype(t.dtype)
    return state


def rel_error(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| / max |want| (0 for empty or all-zero references that match), over the
    finite elements of `want`; inf where NaN or infinities differ (a masked score is -inf)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    special = ~np.isfinite(want)
    if special.any():
        if not np.array_equal(got[special], want[special], equal_nan=True):
            return float("inf")
        got, want = got[~special], want[~special]
    if want.size == 0:
        return 0.0
    scale = np.max(np.abs(want))
    diff = np.max(np.abs(got - want))
    return float(diff / scale) if scale > 0 else float(diff)


def node_errors(graph: Graph, values: dict[str, np.ndarray]) -> list[tuple[float, str]]:
    """Per node, how far the executor's outputs are from the node's reference applied to the
    executor's own inputs, so one op's error is not confused with drift from the ops before it
    (or with a ReLU whose near-zero input rounded to the other side).

    The measure is rel_error against the reference computed in float64, but an op may be as
    far off as numpy's own float32 result is (times 10): a sum that cancels (BatchNormGrad's
    dbias, BiasAddGrad) is rounding noise at any precision below float64.
    """
    out = []
    for n in graph.nodes:
        ins = [values[i] for i in n.inputs]
        op = get_op(n.op)
        exact = op.reference([_f64(x) for x in ins], n.attrs)
        single = op.reference(ins, n.attrs)
        worst = 0.0
        for name, want, near in zip(n.outputs, exact, single, strict=True):
            err = rel_error(values[name], want)
            floor = 10 * rel_error(near, want)
            worst = max(worst, err if err > floor else 0.0)
        out.append((worst, f"{n.name} ({n.op})"))
    return out


def _f64(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    return x.astype(np.float64) if x.dtype == np.float32 else x


def step_with_values(module, graph: Graph, state, feeds, **options) -> dict[str, np.ndarray]:
    """One step; the value of every tensor: feeds, the state before the step, and what each
    producer wrote (under the executor's own layout no two live tensors share bytes but
    updates, which keep their own names, and views, which hold the same values)."""
    ex = module.Executor(**options)
    ex.load_params(state)
    produced = [t.name for t in graph.tensors if t.name in graph.producer]
    values = dict(ex.step(feeds, produced))
    values.update(feeds)
    values.update(state)  # what the updated tensors held before the step
    return values


def assert_fold_keeps_bits(graph: Graph, plans: dict[str, Plan], state, feeds,
                           folder: Path) -> dict[str, object]:
    """Each of training graph `graph`'s `plans` ("folded", and "apart": the same step without
    the fold) built and stepped from `state` on `feeds`: every tensor the folded step computes
    has the bits it has in the apart one, which computes more (the fold's intermediate
    tensors), and the folded step updates every parameter. The built modules by plan name."""
    values, modules = {}, {}
    for name, p in plans.items():
        modules[name] = load(build(render(p, folder / name, layout="own")).dir)
        values[name] = step_with_values(modules[name], p.graph, state, feeds)
    folded, apart = values["folded"], values["apart"]
    assert set(folded) < set(apart)
    assert {t.updates for t in graph.tensors if t.updates and t.role == "param"} <= set(folded)
    for name, value in folded.items():
        np.testing.assert_array_equal(value, apart[name], err_msg=name)
    return modules


def assert_evaluate_matches_reference(p: Plan, graph: Graph, folder: Path,
                                      tolerance: float) -> None:
    """evaluate() of plan `p` (of training graph `graph`), built, against the numpy reference
    run of its evaluation graph on the executor's own parameters, within `tolerance` of each
    output's largest value; running statistics first moved off their start values (zero mean,
    unit variance would make BatchNorm's inference form nearly the identity)."""
    from planner.graph.evaluation import evaluation_graph
    from planner.graph.interpret import run

    module = load(build(render(p, folder, layout="own")).dir)
    ex = module.Executor(init=True)
    rng = np.random.default_rng(7)
    ex.load_params({t.name: (rng.standard_normal(t.shape) if t.name.endswith("running_mean")
                             else rng.uniform(0.5, 2.0, t.shape)).astype(np.float32)
                    for t in graph.tensors
                    if t.name.endswith(("running_mean", "running_var"))}, partial=True)
    feeds = random_feeds(graph, seed=3)
    got = ex.evaluate(feeds)
    want = run(evaluation_graph(p.graph), feeds, ex.params(), keep="outputs")
    assert set(got) == set(want)
    for name in want:
        assert rel_error(got[name], want[name]) < tolerance, name


def uniform_plan(graph: Graph, block: int | None) -> Plan:
    """`graph` planned for this host with channel block `block`, one lane of every core: each
    op's thread count its own, not moved by a fold (an optimized schedule of fewer ops may move
    a weight gradient to one thread, and oneDNN's sums of it follow the thread count: not a
    fold's bits to compare)."""
    return plan(graph, host_with_block(block),
                options=PlanOptions(schedule=ScheduleOptions(strategy="uniform")))


__all__ = ["assert_evaluate_matches_reference", "assert_fold_keeps_bits", "build_module",
           "gpu_plan", "host_plan", "host_with_block", "node_errors", "planned_graph",
           "random_feeds", "rel_error", "start_state", "step_with_values", "uniform_plan"]


def ops_on_threads(sigs, folder: Path, seed: int, threads=(1, 2)):
    """One op of each signature of `sigs` in one graph (codegen.profiling.signatures_graph),
    built and run on each thread count of `threads`, every op on that count: per signature k
    its feeds (`in{i}`), and per count its output and its stats() row (the kernel's `impl`,
    its scratch) with the executor's `unplanned_scratch_bytes` added: (feeds[k], got[t][k],
    rows[t][k])."""
    from codegen.profiling import placements_plan, signatures_graph, warmed_executor
    from tests.targets import two_cores

    graph = signatures_graph([(sig, 1) for sig in sigs])
    feeds = random_feeds(graph, seed=seed)
    got, rows = {}, {}
    for t in threads:
        p = placements_plan(graph, two_cores(), [(t, tuple(range(t)))] * len(graph.nodes))
        ex = warmed_executor(p, folder / f"t{t}", {}, feeds)
        out = ex.forward(feeds)
        stats = ex.stats()
        by_name = {r["name"]: r for r in stats["ops"]}
        got[t] = [np.asarray(out[f"s{k}_out0_0"]) for k in range(len(sigs))]
        rows[t] = [{**by_name[f"s{k}_copy0"],
                    "unplanned_scratch_bytes": stats["unplanned_scratch_bytes"]}
                   for k in range(len(sigs))]
    per_sig = [{name[len(f"s{k}_"):]: v for name, v in feeds.items()
                if name.startswith(f"s{k}_")} for k in range(len(sigs))]
    return per_sig, got, rows


def summation_bound(op: str, attrs: dict, inputs: list[np.ndarray], terms: int) -> np.ndarray:
    """Per output element, float32's bound on an op that sums `terms` rounded products (and
    addends) of its inputs: (terms + 1) u times the reference on the inputs' magnitudes (the
    sum of |products|). `inputs` float64, `attrs` normalized."""
    u = 2.0 ** -24  # float32's unit roundoff
    return (terms + 1) * u * get_op(op).reference([np.abs(v) for v in inputs], attrs)[0] + 1e-30
