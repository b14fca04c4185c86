"""planner verify spells the plan format's vocabulary itself instead of importing it from the
stages it checks (docs/architecture.md): where both name the same thing, they must agree."""

from __future__ import annotations

from planner.memory.decision import TRANSFER_OPS, TRANSFER_PLACEMENTS
from planner.verify.inserted import TRANSFERS


def test_transfers_are_the_plan_formats():
    assert {k: op for k, (op, _, _) in TRANSFERS.items()} == TRANSFER_OPS
    assert {k: (a, b) for k, (_, a, b) in TRANSFERS.items()} == TRANSFER_PLACEMENTS
