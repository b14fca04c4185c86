"""verify requires the collectives of a data-parallel plan in one order and reading their
bucket's gradients (issue 32): the LeNet plan with --data-parallel 2 --bucket-bytes 4096 has
all-reduces on one lane; moved to lanes of their own with nothing between them, it used to
verify and build, and two ranks then issued them in different orders (gloo aborted both)."""

from __future__ import annotations

from planner.verify import verify_plan_data
from tests.verify.plans import plan_data


def _collectives(data):
    return [o for o in sorted(data["ops"], key=lambda o: o["order"]) if o["op"] == "AllReduce"]


def _spread(data):
    """Every all-reduce but the first on a lane of its own, the edges between them dropped."""
    ops = _collectives(data)
    names = {o["name"] for o in ops}
    lanes = 1 + max(o["lane"] for o in data["ops"])
    for k, o in enumerate(ops[1:]):
        o["lane"] = lanes + k
    data["happens_before"] = [e for e in data["happens_before"]
                              if not (e["before"] in names and e["after"] in names)]
    return data, [o["name"] for o in ops]


def test_the_data_parallel_plan_verifies_with_its_collectives_in_one_order():
    data = plan_data("parallel")
    assert len(_collectives(data)) >= 3
    assert verify_plan_data(data) == []


def test_collectives_on_lanes_of_their_own_are_refused_naming_the_pairs():
    data, names = _spread(plan_data("parallel"))
    problems = verify_plan_data(data)
    assert problems and all(p.startswith("collectives ") for p in problems), problems
    # The first two are now ordered by nothing, and each of the others is unordered with some
    # collective before it (backward's data and the arena's reuse order some pairs, through
    # the update that reads one bucket and the gradients of another, or a shared area).
    assert any(f"{names[0]!r} and {names[1]!r} are not ordered" in p for p in problems), problems
    for k, b in enumerate(names[1:], start=1):
        assert any(f"{a!r} and {b!r} are not ordered" in p for a in names[:k]
                   for p in problems), problems
    assert all("\n" not in p for p in problems)


def test_one_edge_between_two_lanes_orders_that_pair_only():
    data, names = _spread(plan_data("parallel"))
    data["happens_before"].append({"before": names[0], "after": names[1]})
    problems = verify_plan_data(data)
    assert not any(f"{names[0]!r} and {names[1]!r}" in p for p in problems)
    assert any(f"{names[1]!r} and {names[2]!r}" in p for p in problems)


def _node(data, name):
    return next(n for n in data["graph"]["nodes"] if n["name"] == name)


def test_an_update_reading_an_unreduced_gradient_is_refused():
    """Re-derived from the graph's gradients, not the collectives' inputs: an SGD update
    pointed back at the gradient backward wrote steps each rank on its own."""
    data = plan_data("parallel")
    update = next(n for n in data["graph"]["nodes"] if n["op"] == "SGD")
    reduced = update["inputs"][1]
    ar = next(n for n in data["graph"]["nodes"] if reduced in n["outputs"])
    raw = ar["inputs"][ar["outputs"].index(reduced)]
    update["inputs"][1] = raw
    problems = verify_plan_data(data)
    assert any(f"op {update['name']!r} updates a parameter with gradient {raw!r}" in p
               for p in problems), problems


def test_a_bucket_holding_a_parameter_is_refused():
    """An all-reduce summing a parameter (of its gradient's shape) in place of the gradient."""
    data = plan_data("parallel")
    ar = next(n for n in data["graph"]["nodes"] if n["op"] == "AllReduce")
    grad = ar["inputs"][0]
    param = next(n for n in data["graph"]["nodes"] if n["op"] == "SGD"
                 and ar["outputs"][0] in n["inputs"])["inputs"][0]
    ar["inputs"][0] = param
    problems = verify_plan_data(data)
    assert any(f"collective {ar['name']!r} reduces tensor {param!r}, which is not a gradient"
               in p for p in problems), (grad, problems)
