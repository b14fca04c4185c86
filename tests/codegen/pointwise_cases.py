"""The pointwise table's ops as op-kernel cases (tests/codegen/op_cases.py): per row, a case
per dtype family its kernels take, inputs sampled where the row says it is defined, a second
input broadcast along the first axis; per gradient op, dy, the row's inputs and (where the
derivative reads it) y = the row's output, recomputed from the (poisoned) inputs."""

from __future__ import annotations

import numpy as np

from planner.ops import get_op, special_table
from planner.ops.pointwise_table import ROWS, Row

# a row's domain -> op_cases' input kinds (ids(5): int64 in [0, 5))
_KINDS = {"normal": "normal", "positive": "positive", "unit": "unit", "sym": "sym",
          "gt1": "gt1", "bool": "bool", "int": ("ids", 5)}


def _shapes(arity: int) -> list[tuple[int, ...]]:
    """(3, 8), then (8,) broadcast along it, then (3, 1) across it."""
    return [(3, 8), (8,), (3, 1)][:arity]


def _case(kinds) -> tuple:
    return ([(s, k) for s, k in zip(_shapes(len(kinds)), kinds, strict=True)], {})


def _row_cases(row: Row) -> list[tuple]:
    domain = [_KINDS[d] for d in row.inputs_domain]
    if row.accepts == "float":
        return [_case(domain)]
    # float inputs (NaN and infinities poisoned in) and int64 ones, or the row's own (bool)
    floats, ints = _case(["normal"] * row.arity), _case([_KINDS["int"]] * row.arity)
    return [floats, ints] if domain == floats[0] or set(row.inputs_domain) == {"normal"} \
        else [floats, _case(domain)]


def _grad_cases(row: Row) -> dict[str, list[tuple]]:
    out = {}
    if row.grads is None:
        return out
    xs = [_KINDS[d] for d in row.inputs_domain]
    extra = ["normal"] if row.uses_y else []
    for k, d in enumerate(row.grads):
        if d is None or d == 1:
            continue
        shapes = [(3, 8), *_shapes(row.arity), *([(3, 8)] if row.uses_y else [])]
        kinds = ["normal", *xs, *extra]
        out[row.grad_name(k)] = [([(s, kk) for s, kk in zip(shapes, kinds, strict=True)], {})]
    return out


def table_cases() -> dict[str, list[tuple]]:
    cases: dict[str, list[tuple]] = {}
    for row in (*ROWS, *special_table.ROWS):
        cases[row.name] = _row_cases(row)
        cases.update(_grad_cases(row))
    return cases


# gradient op -> its forward row, for the ops whose last input is y
USES_Y = {row.grad_name(k): row for row in (*ROWS, *special_table.ROWS)
          if row.uses_y and row.grads
          for k, d in enumerate(row.grads) if d not in (None, 1)}


def derive(op: str, xs: list[np.ndarray]) -> list[np.ndarray]:
    """y recomputed from the inputs, for a gradient op that reads it."""
    row = USES_Y.get(op)
    if row is not None:
        with np.errstate(all="ignore"):
            xs[-1] = get_op(row.name).reference(xs[1:1 + row.arity], {})[0]
    return xs
