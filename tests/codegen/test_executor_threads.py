"""One Executor shared by two Python threads: their steps take turns (the bindings hold a
lock per executor, waited for with the GIL released), so feeds never mix."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from planner.graph.interpret import init_params, random_feeds
from planner.zoo import build
from tests.codegen.helpers import build_module

ROUNDS = 150
# Steps long enough for the other thread to get in while one runs (the GIL is released): an
# executor without the lock gave 257 of 600 wrong results here.
WIDE = dict(batch=64, hidden=[512, 512], in_features=256, classes=10, loss=False)


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    graph = build("mlp", **WIDE)
    return graph, build_module(graph, tmp_path_factory.mktemp("wide") / "wide_mlp")


def run_threads(*targets) -> None:
    errors: list[BaseException] = []

    def guard(fn):
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the main thread
            errors.append(e)

    threads = [threading.Thread(target=guard, args=(t,)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def test_two_threads_stepping_one_inference_executor_get_their_own_results(wide):
    graph, module = wide
    ex = module.Executor()
    ex.set_variant("main")  # bit for bit: one schedule (docs/executor.md, busy machines)
    ex.load_params(init_params(graph, seed=0))
    feeds = [random_feeds(graph, seed=s)["x"] for s in (1, 2)]
    want = [ex.forward({"x": x})["logits"] for x in feeds]
    assert not np.allclose(want[0], want[1])

    def worker(k):
        def go():
            for _ in range(ROUNDS):
                np.testing.assert_array_equal(ex.forward({"x": feeds[k]})["logits"], want[k])
        return go

    run_threads(worker(0), worker(1))


def test_two_threads_training_one_executor_equal_the_same_steps_in_sequence(mlp_module,
                                                                           mlp_graph):
    feeds = random_feeds(mlp_graph, seed=3)
    state = init_params(mlp_graph, seed=0)
    shared, alone = mlp_module.Executor(), mlp_module.Executor()
    for ex in (shared, alone):
        ex.set_variant("main")  # bit for bit: one schedule (docs/executor.md, busy machines)
    shared.load_params(state)
    alone.load_params(state)
    losses: list[float] = []

    def worker():
        for _ in range(ROUNDS):
            losses.append(float(shared.step(feeds)["loss"]))

    run_threads(worker, worker)
    for _ in range(2 * ROUNDS):
        alone.step(feeds)
    assert len(losses) == 2 * ROUNDS and np.isfinite(losses).all()
    for name, value in alone.params().items():
        np.testing.assert_allclose(shared.params()[name], value, rtol=1e-6, atol=1e-7,
                                   err_msg=name)
    assert shared.stats()["steps"] == 2 * ROUNDS
