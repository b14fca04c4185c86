"""Executor() range-checks the compiled schedule before it allocates or creates anything: a
schedule.cpp edited past what verify allows (a thread count beyond this machine, an offset
near 2^63, an alias larger than its root) is refused with an error naming the op or tensor,
and the Python process lives on. A plan that does not verify is never rendered."""

from __future__ import annotations

import re

import numpy as np
import pytest

from codegen.build import build
from codegen.load import load
from codegen.render import render
from planner.errors import PlanError
from planner.verify import verify_plan
from tests.codegen.helpers import host_plan


def tampered(plan, folder, edit):
    tree = render(plan, folder, layout="own")
    path = tree.dir / "schedule.cpp"
    path.write_text(edit(path.read_text()))
    return load(build(tree).dir)


def replace_first(source: str, table: str, row: str, value: int) -> str:
    """`source` with the group `v` of the first `row` match after `table` set to `value`."""
    at = source.index(table)
    m = re.search(row, source[at:])
    return source[:at + m.start("v")] + str(value) + source[at + m.end("v"):]


def test_thread_count_beyond_this_machine_is_refused(mlp_graph, tmp_path):
    def edit(src):
        return replace_first(src, "kOps[] = {", r"\{kStrings \+ \d+, kStrings \+ \d+, (?P<v>\d+),",
                             1_000_000)

    module = tampered(host_plan(mlp_graph), tmp_path / "threads", edit)
    with pytest.raises(RuntimeError, match="op .*: 1000000 threads on a host of \\d+ CPUs; "
                                           "plan it for this host"):
        module.Executor()


def test_offset_near_two_to_the_63_is_refused(mlp_graph, tmp_path):
    def edit(src):
        return replace_first(src, "kTensors[] = {", r"\{kStrings \+ \d+, (?P<v>\d+),",
                             2**63 - 64)

    module = tampered(host_plan(mlp_graph), tmp_path / "offset", edit)
    with pytest.raises(RuntimeError, match="tensor 'x': bytes "
                                           "\\[9223372036854775744, \\+\\d+\\) lie outside"):
        module.Executor()


def test_a_plan_that_does_not_verify_is_not_rendered(mlp_graph, tmp_path):
    plan = host_plan(mlp_graph)
    victim = sorted(plan.ops, key=lambda p: p.order)[1]
    # No edge into it, and a lane of its own: nothing orders it after what it reads.
    lane = 1 + max(p.lane for p in plan.ops)
    broken = plan.model_copy(update={
        "ops": tuple(p.model_copy(update={"lane": lane}) if p is victim else p
                     for p in plan.ops),
        "happens_before": tuple(e for e in plan.happens_before if e.after != victim.name)})
    with pytest.raises(PlanError, match="does not verify: .*; run `planner verify` on it"):
        render(broken, tmp_path / "broken")
    assert any(f"{victim.name!r} reads tensor" in p and "nothing the executor enforces" in p
               for p in verify_plan(broken))
    assert not (tmp_path / "broken").exists()


def test_feed_and_parameter_names_must_be_strings(mlp_module):
    ex = mlp_module.Executor()
    with pytest.raises(TypeError, match="feed names must be str, got 5"):
        ex.step({5: np.zeros(3, np.float32)})
    with pytest.raises(TypeError, match="parameter names must be str, got 5"):
        ex.load_params({5: np.zeros(3, np.float32)})
