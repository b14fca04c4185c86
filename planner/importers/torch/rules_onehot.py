"""F.one_hot kept whole (torch.export decomposes it into comparisons with an arange and two
`_assert_async` range checks, which have no planner op: the refusal named internals the user
never wrote). A class index is checked as PyTorch checks it: negative or >= num_classes
refused, here by an IndexGather of the class numbers at the indices (planner/ops/index.py:
a constant index at import, a computed one when the step runs, naming the node), whose result
(the index itself, exact in float32 below 2**24 classes) is compared with every class.
"""

from __future__ import annotations

import numpy as np

from planner.importers.torch.context import NodeCtx, Value, rule
from planner.importers.torch.rules_index import gather_rows_checked

ONEHOT_PRESERVED = ("one_hot.default",)


@rule("aten.one_hot.default")
def one_hot(n: NodeCtx) -> Value:
    index = n.tensor(0)
    classes = int(n.arg(1, "num_classes", -1))
    if classes < 0:
        raise n.fail("one_hot without num_classes (its size would depend on the indices' "
                     "values): pass num_classes")
    if not 0 < classes < 2**24:
        raise n.fail(f"one_hot of {classes} classes (the planner takes 1 to 2**24 - 1)")
    if n.dtype(index) != "int64":
        raise n.fail(f"one_hot of {n.dtype(index)} indices (torch takes int64)")
    numbers = n.const(np.arange(classes, dtype=np.float32), "float32")
    picked = gather_rows_checked(n, numbers, index)
    column = n.emit1("Reshape", [picked], {"shape": [*n.shape(index), 1]})
    return n.emit1("Cast", [n.emit1("Equal", [column, numbers])], {"to": "int64"})
