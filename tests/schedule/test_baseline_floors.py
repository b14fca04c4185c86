"""The optimized search leaves out the baselines its best schedule already beats by min_gain
(optimized.baseline_runs): their step floors must be lower bounds on every simulator's step, and
leaving them out must change no choice."""

from __future__ import annotations

import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.costs import CostModel
from planner.graph.deps import predecessors
from planner.schedule.bound import capacity, lower_bound
from planner.schedule.contention import Contention, simulate_contended
from planner.schedule.costs import op_costs
from planner.schedule.cpu import run_placements
from planner.schedule.optimized import baseline_runs, optimized
from planner.schedule.options import SMT_SLOWDOWN, ScheduleOptions
from planner.schedule.placement import Placement, in_order
from planner.schedule.simulate import simulate, step_floor, sure_floor
from planner.schedule.uniform import grid_pairs, uniform, uniform_floor
from planner.target import preset
from tests.schedule.conftest import toy_target, training
from tests.zoo.small_configs import SMALL


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.sets(st.integers(0, 5), min_size=1), st.sampled_from(
    [0.5, 1.0, 1.0 + 1e-13, 2.0, 3.25]), st.booleans()), min_size=1, max_size=12),
    st.randoms())
def test_the_step_floor_bounds_every_simulator(ops, rnd):
    # Placements in execution order, each after its dependencies (some on second hardware
    # threads): no simulator, SMT interference or bandwidth contention, ends them sooner.
    placements = [Placement((i,), tuple(sorted(cores)), "compact", seconds, float(i), smt)
                  for i, (cores, seconds, smt) in enumerate(ops)]
    preds = tuple(tuple(sorted(rnd.sample(range(i), rnd.randint(0, min(i, 2)))))
                  for i in range(len(ops)))
    floor = sure_floor(step_floor(placements, preds), len(placements))
    assert floor <= simulate(placements, preds, 6, SMT_SLOWDOWN).step_seconds
    alone = [p._replace(smt=False) for p in placements]
    busy = Contention(node_bytes=tuple(rnd.uniform(0, 4e9) for _ in ops), memory=2e9,
                      per_core=1e9, kappa=1.0, sigma=0.5)
    assert sure_floor(step_floor(alone, preds), len(alone)) <= simulate_contended(
        alone, preds, 6, busy).step_seconds


def test_the_floor_of_a_chain_is_its_length_and_of_a_lane_its_ops():
    ps = [Placement((0,), (0, 1), "compact", 1.0, 0.0),
          Placement((1,), (0,), "compact", 2.0, 1.0),
          Placement((2,), (1,), "compact", 0.5, 1.0, smt=True),
          Placement((3,), (1,), "compact", 0.25, 1.5, smt=True)]
    assert step_floor(ps, ((), (0,), (), ())) == 3.0
    # A group's nodes count on their cores, not along the chain.
    grouped = [Placement((0, 1), (0,), "compact", 2.0, 0.0)]
    assert step_floor(grouped, ((), (0,))) == 2.0


@pytest.mark.parametrize("model", ["lenet", "inception_v3"])
def test_the_uniform_floor_bounds_its_simulated_step(model):
    g = training(model, **SMALL[model])
    target = toy_target()
    costs, preds = op_costs(g, CostModel(target)), predecessors(g)
    for a, b in grid_pairs(target.cores):
        ps = in_order(uniform(costs, preds, target.cache_groups, a, b))
        step = simulate(ps, preds, target.cores, SMT_SLOWDOWN).step_seconds
        assert sure_floor(uniform_floor(costs, preds, a, b), len(preds)) <= step
        assert uniform_floor(costs, preds, a, b) == pytest.approx(step) or b > 1


TARGETS = {"toy8": toy_target(), "toy16": toy_target(16), "xeon-8180": preset("xeon-8180"),
           "knl-7250": preset("knl-7250")}


@pytest.mark.parametrize("min_gain", [0.0, 0.05, 0.5])
@pytest.mark.parametrize("where", list(TARGETS))
@pytest.mark.parametrize("model", ["lenet", "inception_v3", "wide_deep", "lstm"])
def test_leaving_out_beaten_baselines_changes_no_choice(model, where, min_gain):
    g, target = training(model, **SMALL[model]), TARGETS[where]
    options = ScheduleOptions(min_gain=min_gain)
    model_ = CostModel(target)
    costs, preds = op_costs(g, model_), predecessors(g)
    bound = lower_bound(costs, preds, capacity(target.cores, target.smt_width, SMT_SLOWDOWN))
    op_types = [n.op for n in g.nodes]
    groups, smt, cores = target.cache_groups, target.smt_width > 1, target.cores
    simulated: list[list[Placement]] = []

    def timed(ps):
        ps = in_order(ps)
        simulated.append(ps)
        return run_placements(ps, preds, cores, SMT_SLOWDOWN).step_seconds, ps

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        chosen = optimized(costs, preds, op_types, groups, smt, cores, options, timed,
                           bound.durations)
        tried = len(simulated)
        own = optimized(costs, preds, op_types, groups, smt, cores, options, timed,
                        bound.durations, baselines=False)
        ran = len(simulated) - tried
        every = baseline_runs(costs, preds, op_types, groups, smt, cores, options, timed)
    own_step = timed(own)[0]
    base = min(every, key=lambda r: r[0])
    # The rule with every baseline scheduled and simulated, as before any was left out.
    assert chosen == (own if own_step <= base[0] * (1 - min_gain) else base[1])
    assert ran <= tried <= ran + len(every)
    if (model, min_gain) == ("inception_v3", 0.0):
        # The search's schedule of a branchy graph beats every baseline by far: none is run.
        assert tried == ran
