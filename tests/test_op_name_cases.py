"""A ratchet on op-name special cases outside planner/ops/ (tests/helpers/op_name_cases.py: a
comparison against an op type's name in planner/ or codegen/): the count may fall, never grow.
A fact about an op goes to its definition (an OpDef field every reader asks, planner/ops/);
when a change removes cases, lower LIMIT to the new count.

Issue 87 counted 177 on this rule; OpDef.recompute_reads, running_statistics, ring_traffic,
evaluation_identity, the table's `convolution` and its attribute defaults took 22 of them."""

from __future__ import annotations

from tests.helpers.op_name_cases import cases, count

LIMIT = 155


def test_the_op_name_cases_do_not_grow():
    found = count()
    total = sum(len(mine) for mine in found.values())
    print(f"op-name special cases outside planner/ops/: {total} (limit {LIMIT})")
    worst = sorted(found.items(), key=lambda kv: -len(kv[1]))[:5]
    assert total <= LIMIT, (f"{total} op-name comparisons outside planner/ops/ (limit {LIMIT}); "
                            f"most in {[(rel, len(m)) for rel, m in worst]}: give the op an "
                            f"OpDef field instead")


def test_the_count_sees_each_form():
    names = frozenset({"BatchNorm", "Relu", "Conv2D"})
    source = ('FOLDS = ("Relu", "Conv2D")\n'
              'a = n.op == "BatchNorm"\n'
              'b = "Relu" != n.op\n'
              'c = n.op in {"Conv2D", "Softplus"}\n'
              'd = n.op in frozenset(("Relu",))\n'
              'e = n.op in FOLDS\n'
              'f = n.op == "Softplus"\n'
              'g = x == "relu"\n')
    assert cases(source, names) == [(2, ("BatchNorm",)), (3, ("Relu",)), (4, ("Conv2D",)),
                                    (5, ("Relu",)), (6, ("Relu", "Conv2D"))]
