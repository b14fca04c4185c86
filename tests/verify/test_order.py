"""verify checks exactly the ordering the executor enforces (lanes + happens-before edges),
against every pair the graph needs ordered, never trusting the plan's deps:

- the issue's reproduction: a ResNet-18 plan with one cross-lane edge removed (the consumer's
  deps kept) is refused by `verify` and `build`, naming both ops;
- a fuzz test removes random happens-before edges from real co-running CPU plans, a real GPU
  plan with offloads and prefetches on their own streams and a hand-made two-stream GPU plan,
  and checks that verify rejects exactly the plans in which some
  required pair is no longer ordered, the expected answer computed here independently with
  networkx reachability over the stated ordering and pairs read off the embedded graph.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from pathlib import Path

import networkx as nx
import pytest

from planner.cli import main
from planner.verify import verify_plan_data
from tests.offloading import offloading_plan

PLANS = Path(__file__).resolve().parent.parent.parent / "examples" / "plans"
# The BatchNorm writing layer1's output (the residual sum and its Relu folded into it: the
# tensor keeps the Relu's name) and a reader of that output on another lane.
BEFORE, TENSOR, AFTER = ("layer1/block2/bn2", "layer1/block2/relu",
                         "layer2/block1/downsample/conv")


def load(name: str) -> dict:
    return json.loads((PLANS / f"{name}.plan.json").read_text())


def problems(data: dict) -> list[str]:
    return verify_plan_data(data, [n["name"] for n in data["graph"]["nodes"]])


def without_edges(data: dict, removed: set[tuple[str, str]]) -> dict:
    out = json.loads(json.dumps(data))
    out["happens_before"] = [e for e in out["happens_before"]
                             if (e["before"], e["after"]) not in removed]
    return out


# ---- the reproduction from the issue -----------------------------------------------------------

@pytest.fixture(scope="module")
def resnet_plan(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("order") / "resnet18.plan.json"
    assert main(["plan", "zoo:resnet?depth=18&batch=16", "--train", "sgd", "--target",
                 "xeon-8180", "-o", str(path)]) == 0
    return path


def test_a_racing_plan_is_refused_by_verify_and_build(resnet_plan, tmp_path, capsys):
    data = json.loads(resnet_plan.read_text())
    ops = {o["name"]: o for o in data["ops"]}
    assert ops[BEFORE]["lane"] != ops[AFTER]["lane"]
    assert BEFORE in ops[AFTER]["deps"]  # kept: verify must not trust it
    racing = without_edges(data, {(BEFORE, AFTER)})
    found = [p for p in problems(racing) if BEFORE in p and AFTER in p]
    assert found == [f"op {AFTER!r} reads tensor {TENSOR!r} written by op {BEFORE!r}, but "
                     f"nothing the executor enforces orders them: no lane or chain of "
                     f"happens-before edges leads from {BEFORE!r} to {AFTER!r}"]
    path = tmp_path / "racing.plan.json"
    path.write_text(json.dumps(racing))
    capsys.readouterr()
    assert main(["verify", str(path)]) == 1
    out = capsys.readouterr().out
    assert f"{BEFORE!r}" in out and f"{AFTER!r}" in out
    assert main(["build", str(path), "-o", str(tmp_path / "racing")]) != 0
    err = capsys.readouterr().err
    assert "does not verify" in err and f"{BEFORE!r}" in err and f"{AFTER!r}" in err
    assert not (tmp_path / "racing").exists()


def test_a_plan_of_the_previous_schema_is_refused_in_one_line(resnet_plan, tmp_path, capsys):
    data = json.loads(resnet_plan.read_text())
    data["schema"] = "planner.plan/2"
    for op in data["ops"]:
        del op["lane"]
    path = tmp_path / "old.plan.json"
    path.write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["verify", str(path)]) != 0
    out = capsys.readouterr()
    lines = (out.out + out.err).strip().splitlines()
    assert len(lines) == 1 and "'planner.plan/2' is not 'planner.plan/3'" in lines[0]


# ---- inserted ops, as the memory section declares them ----------------------------------------

def test_a_prefetch_no_edge_orders_before_its_readers_is_named_with_them():
    data = offloading_plan()
    assert problems(data) == []
    prefetches = {m["name"]: m for m in data["memory"]["ops"] if m["kind"] == "prefetch"}
    # The prefetches run on their own stream; with no edge out of any of them, nothing orders
    # one before the ops reading the buffer it fills.
    racing = without_edges(data, {(e["before"], e["after"]) for e in data["happens_before"]
                                  if e["before"] in prefetches})
    found = problems(racing)
    buffers = {b["name"]: b for b in data["tensors"]}
    for name, m in prefetches.items():
        (filled,) = m["outputs"]
        for reader in buffers[filled]["readers"]:
            assert f"op {reader!r} reads buffer {filled!r} written by op {name!r}, but " \
                   f"nothing the executor enforces orders them" in "\n".join(found)


def test_an_inserted_op_the_buffers_do_not_account_for_is_named():
    data = offloading_plan()
    offload = next(m for m in data["memory"]["ops"] if m["kind"] == "offload")
    (source,) = offload["inputs"]
    buffer = next(b for b in data["tensors"] if b["name"] == source)
    buffer["readers"] = [r for r in buffer["readers"] if r != offload["name"]]
    host = next(b for b in data["tensors"] if b["name"] == offload["outputs"][0])
    host["writer"] = buffer["writer"]
    found = "\n".join(problems(data))
    assert f"inserted op {offload['name']!r} reads buffer {source!r}, which does not list it " \
           f"as a reader" in found
    assert f"buffer {host['name']!r} of tensor {host['tensor']!r} names writer " \
           f"{buffer['writer']!r}, but the memory section's is {offload['name']!r}" in found


# ---- the fuzz test: an independent answer ------------------------------------------------------

def stated_ordering(data: dict) -> nx.DiGraph:
    """The executor's ordering as a graph: happens-before edges, and per lane every op of one
    run before every op of the next (a run: one op, or on a CPU consecutive ops of one
    parallel-loop group, which run as one loop)."""
    g = nx.DiGraph()
    g.add_nodes_from(o["name"] for o in data["ops"])
    g.add_edges_from((e["before"], e["after"]) for e in data["happens_before"])
    lanes = defaultdict(list)
    for o in sorted(data["ops"], key=lambda o: o["order"]):
        lanes[o["lane"]].append(o)
    for ops in lanes.values():
        runs: list[list[dict]] = []
        for o in ops:
            if runs and data["backend"] == "cpu" and o["group"] and \
                    runs[-1][-1]["group"] == o["group"]:
                runs[-1].append(o)
            else:
                runs.append([o])
        for r1, r2 in zip(runs, runs[1:], strict=False):
            g.add_edges_from((a["name"], b["name"]) for a in r1 for b in r2)
    return g


def required_pairs(data: dict) -> set[tuple[str, str]]:
    """Producer before consumer, and every other reader of an overwritten value before the
    node overwriting it, read off the embedded graph."""
    nodes = data["graph"]["nodes"]
    producer = {t: n["name"] for n in nodes for t in n["outputs"]}
    updates = {t["name"]: t.get("updates") for t in data["graph"]["tensors"]}
    pairs = set()
    for n in nodes:
        pairs |= {(producer[t], n["name"]) for t in n["inputs"] if t in producer}
        for o in n["outputs"]:
            old = updates.get(o)
            pairs |= {(r["name"], n["name"]) for r in nodes
                      if old and old in r["inputs"] and r["name"] != n["name"]}
    return pairs


def inserted_pairs(data: dict) -> set[tuple[str, str]]:
    """Each buffer's writer (the inserted op the memory section says writes it, else the
    graph's producer of its tensor) before each op reading it (the buffer's readers and the
    inserted ops naming it as an input)."""
    producer = {t: n["name"] for n in data["graph"]["nodes"] for t in n["outputs"]}
    inserted = data["memory"]["ops"]
    writer = {b: m["name"] for m in inserted for b in m["outputs"]}
    pairs = set()
    for b in data["tensors"]:
        w = writer.get(b["name"]) or producer.get(b["tensor"])
        readers = set(b["readers"]) | {m["name"] for m in inserted if b["name"] in m["inputs"]}
        pairs |= {(w, r) for r in readers if w and r != w}
    return pairs


def sharing_pairs(data: dict) -> list[tuple[dict, dict]]:
    """Every two buffers of different roots whose bytes intersect, the dumb O(n^2) way."""
    bufs = [b for b in data["tensors"] if b["bytes"] > 0]
    out = []
    for i, a in enumerate(bufs):
        for b in bufs[i + 1:]:
            intersect = a["offset"] < b["offset"] + b["bytes"] and \
                b["offset"] < a["offset"] + a["bytes"]
            if intersect and a["placement"] == b["placement"] and \
                    (a["alias_of"] or a["name"]) != (b["alias_of"] or b["name"]):
                out.append((a, b))
    return out


def expect_rejected(data: dict, removed: set[tuple[str, str]], pairs, sharing) -> bool:
    g = stated_ordering(without_edges(data, removed))
    reach = {u: nx.descendants(g, u) for u in g}
    if any(b not in reach[a] for a, b in pairs):
        return True
    steps = len(data["ops"])
    names = {b["name"]: b for b in data["tensors"]}

    def ordered(a: dict, b: dict) -> bool:
        writer = names[b["alias_of"]]["writer"] if b["alias_of"] else b["writer"]
        accesses = [a["writer"]] * bool(a["writer"]) + list(a["readers"])
        return bool(writer) and a["last"] < steps and all(writer in reach[u] for u in accesses)

    return any(not (ordered(a, b) or ordered(b, a)) for a, b in sharing)


def two_stream_gpu_plan() -> dict:
    """The committed GPU plan with every third op moved to a second stream: those ops are
    ordered against the compute stream by happens-before edges alone."""
    data = load("resnet18-b16.k40c-12gb")
    for o in data["ops"]:
        if o["order"] % 3 == 1:
            o["stream"], o["lane"] = "d2h", 1
    # Its summary restated: the compute stream's work no longer fills the step.
    busy = sum(o["end"] - o["start"] for o in data["ops"] if o["stream"] == "compute")
    data["summary"]["memory"]["stall_seconds"] = data["summary"]["step_seconds"] - busy
    assert problems(data) == []
    return data


CASES = {
    "resnet18 xeon-8180": lambda: load("resnet18-b16.xeon-8180"),
    "dcgan knl-7250": lambda: load("dcgan-b8.knl-7250"),
    "resnet18 two-stream gpu": two_stream_gpu_plan,
    "resnet18 offloading gpu": offloading_plan,
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_verify_rejects_exactly_the_removals_that_unorder_a_required_pair(case):
    data = CASES[case]()
    if data["backend"] == "cpu":
        assert len({o["lane"] for o in data["ops"]}) > 1, "the plan co-runs nothing"
    pairs, sharing = required_pairs(data) | inserted_pairs(data), sharing_pairs(data)
    lane = {o["name"]: o["lane"] for o in data["ops"]}
    edges = [(e["before"], e["after"]) for e in data["happens_before"]]
    # Half the trials drop an edge that is a data or in-place pair across lanes (often the
    # only order between them), half drop random edges (often implied by others).
    crossing = [e for e in edges if e in pairs and lane[e[0]] != lane[e[1]]]
    rng = random.Random(26)
    outcomes = []
    for trial in range(14):
        pool = crossing if trial % 2 == 0 else edges
        removed = set(rng.sample(pool, 1 if trial % 4 < 2 else 3))
        want = expect_rejected(data, removed, pairs, sharing)
        found = problems(without_edges(data, removed))
        assert bool(found) == want, (case, sorted(removed), found[:3])
        for p in found:
            assert "nothing the executor enforces orders them" in p or "share" in p, p
        outcomes.append(want)
    assert any(outcomes) and not all(outcomes), "the trials must both keep and break orders"
