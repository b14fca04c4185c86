"""A training plan's file takes its evaluation's text as the evaluation record made it
(planner.plan.Evaluation.json_text, made where the evaluation is planned, in a forked child or
not): the same bytes as the canonical JSON of the plan's data, and the text travels with the
record (pickled back from the child)."""

from __future__ import annotations

import pickle

import pytest

from planner.beside import PROCESSES_ENV
from planner.frontend.options import GraphOptions
from planner.frontend.prepare import prepare
from planner.graph.optimizer import Optimizer
from planner.ir.record import canonical_json, canonical_part
from planner.pipeline import driver as pipeline
from planner.plan import Plan
from planner.target import preset


@pytest.fixture(scope="module")
def graph():
    return prepare("zoo:mlp?batch=4&hidden=8&in_features=6&classes=3",
                   GraphOptions(optimizer=Optimizer(kind="adamw")))


@pytest.mark.parametrize("processes", ["", "1"])
def test_the_plan_file_is_the_canonical_json_of_its_data(graph, monkeypatch, processes):
    monkeypatch.setattr(pipeline, "BESIDE_NODES", 0)  # forked where it can be
    monkeypatch.setenv(PROCESSES_ENV, processes)
    plan = pipeline.plan(graph, preset("knl-7250"))
    assert plan.evaluation is not None
    assert "json_text" in plan.evaluation.__dict__  # made while it was planned
    assert plan.json_data["evaluation"] == plan.evaluation.model_dump(mode="json", by_alias=True)
    assert plan.to_json() == canonical_json(plan.json_data)


def test_the_text_travels_with_the_record_and_a_copy_makes_its_own(graph):
    plan = pipeline.plan(graph, preset("knl-7250"))
    evaluation = pickle.loads(pickle.dumps(plan.evaluation))
    assert evaluation.__dict__["json_text"] == plan.evaluation.json_text
    moved = evaluation.model_copy(update={"arena_offset": evaluation.arena_offset + 64})
    assert "json_text" not in moved.__dict__
    assert moved.json_text == canonical_part(moved.model_dump(mode="json", by_alias=True), 1)
    assert f'"arena_offset": {evaluation.arena_offset + 64}' in moved.json_text


def test_a_plan_read_back_writes_the_same_bytes(graph):
    text = pipeline.plan(graph, preset("knl-7250")).to_json()
    assert Plan.from_json(text).to_json() == text
