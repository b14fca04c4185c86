"""Many small inference graphs as one: each part's tensor and node names prefixed, so that one
plan, one build and one run of the executor cover them all (the ONNX conformance suites through
the generated executor: tests/codegen/test_onnx_conformance.py, node_executor.py)."""

from __future__ import annotations

from planner.graph import check_graph
from planner.ir.graph import Graph


def prefixed(prefix: str, g: Graph) -> Graph:
    """`g` with every tensor and node name (inputs, outputs, updates too) prefixed."""
    def p(name: str | None) -> str | None:
        return None if name is None else prefix + name

    return g.model_copy(update={
        "tensors": tuple(t.model_copy(update={"name": p(t.name), "updates": p(t.updates)})
                         for t in g.tensors),
        "nodes": tuple(n.model_copy(update={"name": p(n.name),
                                            "inputs": tuple(map(p, n.inputs)),
                                            "outputs": tuple(map(p, n.outputs))})
                       for n in g.nodes),
        "outputs": tuple(map(p, g.outputs))})


def merge(name: str, parts: dict[str, Graph]) -> Graph:
    """One inference graph of every part, its names prefixed by the part's key."""
    graphs = [prefixed(prefix, g) for prefix, g in parts.items()]
    return check_graph(Graph(name=name, kind="inference",
                             tensors=tuple(t for g in graphs for t in g.tensors),
                             nodes=tuple(n for g in graphs for n in g.nodes),
                             outputs=tuple(o for g in graphs for o in g.outputs)))


def executor_mismatches(name: str, runs: list, folder) -> list[str]:
    """OpInfo-style runs (tests/importers/opinfo_cases.Run), labelled as (label, run), merged
    into one build of the CPU executor and run once: what is off against torch's float64
    values (opinfo_cases.compare, with a floor of 1e-4 of the scale: vectorised
    transcendental functions are not correctly rounded)."""
    import numpy as np

    from tests.codegen.helpers import build_module
    from tests.importers.opinfo_cases import EPS32, compare

    merged = merge(name, {f"s{k}/": r.graph for k, (_, r) in enumerate(runs)})
    executor = build_module(merged, folder / name).Executor()
    executor.load_params({f"s{k}/{n}": v for k, (_, r) in enumerate(runs)
                          for n, v in r.params.items()})
    # a cotangent no gradient reads (slogdet's sign) is no input of the built graph
    read = {t.name for t in merged.by_role("input")}
    out = executor.forward({f"s{k}/{n}": v for k, (_, r) in enumerate(runs)
                            for n, v in r.feeds.items() if f"s{k}/{n}" in read})
    bad = [compare(f"{label}: {tensor}", np.asarray(out[f"s{k}/{tensor}"]), t32, t64,
                   ulps=1e-4 / EPS32)
           for k, (label, r) in enumerate(runs) for tensor, (t32, t64) in r.torch.items()]
    return [b for b in bad if b]
