"""`planner build --sanitize address,undefined`: an MLP (in CI), LeNet and a small ResNet (the
slow tier) train two steps clean under AddressSanitizer and UndefinedBehaviorSanitizer (both
the runtime and the schedule are instrumented; a finding aborts the process). The first run
builds the instrumented runtime (35 s on 2 cores; cached afterwards).

    planner build PLAN -o DIR --sanitize address,undefined
    LD_PRELOAD=$(c++ -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0 python train.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from codegen.load import load
from codegen.package import build_package
from planner.frontend.autodiff import make_training_graph
from planner.graph.optimizer import Optimizer
from planner.zoo import build
from tests.codegen.helpers import host_plan

SANITIZE = ("address", "undefined")
MODELS = {"lenet": dict(batch=4, image=12),
          "resnet": dict(batch=2, image=32, depth=18, width=0.125, classes=10),
          "mlp": dict(batch=4, in_features=6, hidden=[5], classes=3)}
SAMPLE = "mlp"  # CI's case: the instrumented runtime's build and a small graph's schedule

TRAIN = textwrap.dedent("""
    import json, sys
    import numpy as np
    from codegen.load import load
    from planner.graph import Graph
    from planner.graph.interpret import init_params, random_feeds, train_step
    module = load(sys.argv[1])
    graph = Graph.model_validate(json.loads(module.plan)["graph"])
    ex = module.Executor()
    state = init_params(graph, seed=0)
    ex.load_params(state)
    feeds = random_feeds(graph, seed=1)
    losses = [float(ex.step(feeds)["loss"]) for _ in range(2)]
    want, _ = train_step(graph, feeds, state)
    assert np.isfinite(losses).all() and abs(losses[0] - want["loss"]) < 1e-3 * abs(want["loss"])
    print("trained", losses)
""")


def libasan() -> str:
    out = subprocess.run([os.environ.get("CXX", "c++"), "-print-file-name=libasan.so"],
                         capture_output=True, text=True)
    path = out.stdout.strip()
    if out.returncode != 0 or not os.path.isabs(path):
        pytest.skip("the C++ compiler has no AddressSanitizer runtime")
    return path


@pytest.mark.parametrize("model", [
    pytest.param(m, marks=pytest.mark.ci_sample) if m == SAMPLE else
    pytest.param(m, marks=pytest.mark.slow) for m in sorted(MODELS)])
def test_training_runs_clean_under_asan_and_ubsan(model, tmp_path):
    preload = libasan()
    graph = make_training_graph(build(model, **MODELS[model]), Optimizer(kind="sgd", lr=0.1))
    tree, result = build_package(host_plan(graph), tmp_path / model, sanitize=SANITIZE)
    with pytest.raises(ImportError, match="built with AddressSanitizer; run Python with "
                                          "LD_PRELOAD"):
        load(tree.dir)  # this process has no ASan runtime
    env = {**os.environ, "LD_PRELOAD": preload, "ASAN_OPTIONS": "detect_leaks=0",
           "UBSAN_OPTIONS": "print_stacktrace=1"}
    proc = subprocess.run([sys.executable, "-c", TRAIN, str(tree.dir)], env=env,
                          capture_output=True, text=True, timeout=600,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "trained" in proc.stdout
    assert "runtime error" not in proc.stderr and "AddressSanitizer" not in proc.stderr


def test_sanitizer_names_are_checked():
    from codegen.build import sanitizer_flags
    from codegen.errors import BuildError

    assert "-fsanitize=address" in sanitizer_flags(("address",))
    with pytest.raises(BuildError, match="cannot be combined"):
        sanitizer_flags(("address", "thread"))
    with pytest.raises(BuildError, match="unknown sanitizer"):
        sanitizer_flags(("memory",))
