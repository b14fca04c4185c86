"""`planner build -o DIR`: refuses a folder holding something else unless --force, keeps the
previous package whole when a build fails, and serializes concurrent builds of one folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import codegen.build
import codegen.package
from codegen.errors import BuildError
from codegen.load import load
from codegen.package import build_package
from planner.cli import main
from planner.frontend.autodiff import make_training_graph
from planner.graph.interpret import init_params, random_feeds
from planner.graph.optimizer import Optimizer
from planner.zoo import build
from tests.codegen.helpers import host_plan


def plan_of(batch: int):
    graph = make_training_graph(build("mlp", batch=batch, hidden=[8], in_features=6, classes=3),
                                Optimizer(kind="sgd", lr=0.1))
    return host_plan(graph)


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    folder = tmp_path_factory.mktemp("plans")
    out = {}
    for batch in (2, 3):
        path = folder / f"b{batch}.plan.json"
        path.write_text(plan_of(batch).to_json())
        out[batch] = str(path)
    return out


def step_ok(folder) -> None:
    module = load(folder)
    graph = plan_graph(folder)
    ex = module.Executor()
    ex.load_params(init_params(graph, seed=0))
    assert float(ex.step(random_feeds(graph, seed=1))["loss"]) > 0


def plan_graph(folder):
    from planner.plan import Plan

    return Plan.from_json((folder / "plan.json").read_text()).graph


def test_a_folder_of_other_files_or_another_plan_needs_force(plans, tmp_path, capsys):
    out = tmp_path / "pkg"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(["build", plans[2], "-o", str(out)]) == 2
    assert "holds files that are not an executor; pass --force" in capsys.readouterr().err
    assert (out / "notes.txt").read_text() == "mine"
    assert main(["build", plans[2], "-o", str(out), "--force"]) == 0
    assert not (out / "notes.txt").exists()
    assert main(["build", plans[2], "-o", str(out)]) == 0       # the same plan: up to date
    assert "up to date" in capsys.readouterr().out
    assert main(["build", plans[3], "-o", str(out)]) == 2
    assert "holds the executor of another plan" in capsys.readouterr().err
    assert json.loads((out / "plan.json").read_text())["graph"]["tensors"][0]["shape"][0] == 2
    step_ok(out)


def test_a_file_in_place_of_the_folder_is_refused(plans, tmp_path, capsys):
    target = tmp_path / "pkg"
    target.write_text("not a folder")
    assert main(["build", plans[2], "-o", str(target), "--force"]) == 2
    assert "is not a folder" in capsys.readouterr().err
    assert target.read_text() == "not a folder"


@pytest.mark.parametrize("name, why", [
    ("-rf", "is not a Python module name"), ("a b", "is not a Python module name"),
    ("9lives", "is not a Python module name"), ("x\ny", "is not a Python module name"),
    ("a'b;c", "is not a Python module name"), ("caf\u00e9", "is not a Python module name"),
    ("class", "is a Python keyword"), ("json", "would shadow the module json"),
    ("os", "would shadow the module os"), ("numpy", "would shadow the module numpy"),
    ("planner", "would shadow the module planner"), ("pytest", "would shadow the module pytest"),
])
def test_a_folder_name_that_cannot_be_imported_as_printed_is_refused(plans, tmp_path, capsys,
                                                                      monkeypatch, name, why):
    def configure(*args, **kwargs):
        raise AssertionError("configured a package that cannot be imported as printed")

    monkeypatch.setattr(codegen.build, "build", configure)
    monkeypatch.setattr(codegen.package, "build", configure)
    assert main(["build", plans[2], "-o", str(tmp_path / name)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and why in lines[0] and "use e.g. -o " in lines[0], lines
    assert list(tmp_path.iterdir()) == []


def test_a_failed_build_leaves_the_previous_package_whole(plans, tmp_path, monkeypatch):
    out = tmp_path / "pkg"
    build_package(plan_of(2), out)
    before = {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    # A real compiler failure: the schedule is compiled with a header that does not exist.
    monkeypatch.setattr(codegen.build, "SCHEDULE_FLAGS",
                        ("-O1", "-include", str(tmp_path / "missing.h")))
    with pytest.raises(BuildError):
        build_package(plan_of(3), out, force=True)
    after = {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".pkg.")] == [".pkg.lock"]
    monkeypatch.undo()
    step_ok(out)


def test_concurrent_builds_into_one_folder_take_turns(plans, tmp_path):
    out = tmp_path / "pkg"
    procs = [subprocess.Popen([sys.executable, "-m", "planner.cli", "build", plans[b], "-o",
                               str(out), "--force", "--json"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for b in (2, 3)]
    results = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], results
    graph = plan_graph(out)
    assert graph.tensors[0].shape[0] in (2, 3)
    schedule = (out / "schedule.cpp").read_text()
    assert f"{graph.tensors[0].shape[0] * 6 * 4}, 2, {{{graph.tensors[0].shape[0]}, 6}}" \
        in schedule  # the schedule is of the plan beside it
    step_ok(out)


def test_loading_never_replaces_a_module_the_process_imported(tmp_path):
    """A package folder named like a module already imported (json, onnx, torch) is refused
    at load: registering it would hand that module's importers the executor."""
    import json
    import sys

    from codegen.load import load

    d = tmp_path / "json"
    d.mkdir()
    (d / "__init__.py").write_text("Executor = plan = None\n")
    with pytest.raises(ImportError, match="'json' is the module json"):
        load(d)
    assert sys.modules["json"] is json


@pytest.mark.parametrize("user", [None, "2"])
def test_the_lapack_library_starts_no_thread_pool_unless_the_user_asks(mlp_module, user):
    """The runtime's OpenBLAS (the LAPACK wheel's, which the float64 MatMul's dgemm comes from)
    loads with OPENBLAS_NUM_THREADS=1, so it starts no thread pool (codegen/backends.py: with
    one, every op of a float64 step ran ~6x slower), unless the user set their own; the
    variable is gone from os.environ after the load."""
    from pathlib import Path

    folder = Path(mlp_module.__file__).parent
    script = ("import ctypes, os, sys; from codegen.load import load; load(sys.argv[1]); "
              "from codegen.lapack import lapack; found = lapack(); "
              "lib = ctypes.CDLL(str(found.library)); "
              "print(getattr(lib, found.prefix + 'openblas_get_num_threads')(), "
              "os.environ.get('OPENBLAS_NUM_THREADS'))")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if user:
        env["OPENBLAS_NUM_THREADS"] = user
    run = subprocess.run([sys.executable, "-c", script, str(folder)], env=env,
                         capture_output=True, text=True, timeout=120, check=True)
    threads = min(int(user), os.cpu_count() or 1) if user else 1
    assert run.stdout.split() == [str(threads), str(user)]


@pytest.mark.parametrize("user", [{}, {"OMP_WAIT_POLICY": "passive"}, {"GOMP_SPINCOUNT": "7"}])
def test_the_runtime_spins_briefly_without_leaving_it_in_the_environment(mlp_module, user):
    """The package loads its OpenMP with workers spinning 3,000 times before they sleep
    (codegen/backends.py: CPU_LOAD_ENVIRONMENT) unless the user chose a wait policy or a spin
    count, and leaves os.environ as it found it: a PyTorch started from this process (a
    DataLoader worker, a benchmark's child) inheriting passive waits ran 1.08-1.69x slower.
    libgomp prints what it read at load under OMP_DISPLAY_ENV=verbose; GOMP_SPINCOUNT overrides
    OMP_WAIT_POLICY there, so the user's passive policy must leave it unset (0 spins)."""
    from pathlib import Path

    from codegen.backends import CPU_LOAD_ENVIRONMENT

    folder = Path(mlp_module.__file__).parent
    script = ("import os, sys; from codegen.load import load; load(sys.argv[1]); "
              "print(sorted(k for k in os.environ if k.startswith(('OMP_', 'GOMP_'))))")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "GOMP_"))}
    env.update(OMP_DISPLAY_ENV="verbose", **user)
    run = subprocess.run([sys.executable, "-c", script, str(folder)], env=env,
                         capture_output=True, text=True, timeout=120, check=True)
    assert run.stdout.strip() == str(sorted(["OMP_DISPLAY_ENV", *user]))
    spins = {"OMP_WAIT_POLICY": "0", "GOMP_SPINCOUNT": "7"}.get(
        next(iter(user), ""), CPU_LOAD_ENVIRONMENT["GOMP_SPINCOUNT"])
    assert f"GOMP_SPINCOUNT = '{spins}'" in run.stderr
