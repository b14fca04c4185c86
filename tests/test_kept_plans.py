"""Plans kept per host (planner/pipeline/kept.py): a graph planned again reads the plan kept
for it, equal to the one planning gives (byte for byte in its JSON); other options, another
target, another cost table, another graph or other planner sources are other keys; a damaged
kept plan is planned again."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.costs import CostTable
from planner.io.disk_cache import entries
from planner.pipeline import PlanOptions, plan
from planner.pipeline import kept as kept_module
from planner.pipeline.kept import FILE, kept_plan, key
from planner.schedule.options import ScheduleOptions
from planner.target import preset
from planner.zoo import build


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PLANNER_CACHE", str(tmp_path))
    return tmp_path


@pytest.fixture
def planned(monkeypatch):
    """The graphs planned (the real planning, counted)."""
    calls = []

    def counted(graph, target, costs, options):
        calls.append(graph.name)
        return plan(graph, target, costs, options)

    monkeypatch.setattr(kept_module, "plan", counted)
    return calls


def _graph(hidden: int = 4):
    return build("mlp", batch=2, hidden=[hidden], in_features=3, classes=2)


def test_a_graph_planned_again_reads_its_kept_plan(cache, planned):
    target, options = preset("xeon-8180"), PlanOptions()
    first = kept_plan(_graph(), target, None, options)
    again = kept_plan(_graph(), target, None, options)
    assert planned == [_graph().name]
    assert [e.kind for e in entries(cache)] == ["record"]
    fresh = plan(_graph(), target, None, options)
    assert again == first == fresh and again.to_json() == fresh.to_json()


def test_another_input_of_planning_is_another_plan(cache, planned, monkeypatch):
    target, options = preset("xeon-8180"), PlanOptions()
    kept_plan(_graph(), target, None, options)
    kept_plan(_graph(hidden=5), target, None, options)
    kept_plan(_graph(), preset("knl-7250"), None, options)
    kept_plan(_graph(), target, None,
              PlanOptions(schedule=ScheduleOptions(strategy="uniform")))
    kept_plan(_graph(), target, CostTable(target=target.name), options)
    assert len(planned) == 5 and len(entries(cache)) == 5
    before = key(_graph(), target, None, options)
    monkeypatch.setattr(kept_module, "_SOURCES", ["an edited planner"])
    assert key(_graph(), target, None, options) != before


def test_a_damaged_or_foreign_kept_plan_is_planned_again(cache, planned):
    target, options = preset("xeon-8180"), PlanOptions()
    first = kept_plan(_graph(), target, None, options)
    (entry,) = entries(cache)
    elsewhere = plan(_graph(), preset("knl-7250"), None, options).to_json()
    edited = first.to_json().replace(first.graph.name, "edited", 1)  # its embedded graph's
    for damage in ('{"schema": 1}', "not json", "", elsewhere, edited):
        (Path(entry.path) / FILE).write_text(damage)
        assert kept_plan(_graph(), target, None, options) == first
        assert (Path(entry.path) / FILE).read_text() == first.to_json()  # written again
    assert len(planned) == 6
