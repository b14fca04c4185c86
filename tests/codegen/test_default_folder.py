"""`planner build PLAN` into its default folder (generated/NAME) replaces another plan's
executor only when the folder holds nothing but what a build writes: the user's files in it
(a checkpoint, a run's logs) are never deleted without --force, as with -o."""

from __future__ import annotations

from pathlib import Path

from codegen.render import module_name
from planner.cli import main
from planner.frontend.autodiff import make_training_graph
from planner.graph.optimizer import Optimizer
from planner.plan import Plan
from planner.zoo import build
from tests.codegen.helpers import host_plan


def plan_of(lr: float) -> Plan:
    """Plans of one graph name (one default folder) that differ in their learning rate."""
    graph = make_training_graph(build("mlp", batch=2, hidden=[8], in_features=6, classes=3),
                                Optimizer(kind="sgd", lr=lr))
    return host_plan(graph)


def test_the_default_folder_keeps_the_users_files(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    paths = {}
    for k, lr in ((2, 0.1), (3, 0.2)):
        paths[k] = tmp_path / f"p{k}.plan.json"
        paths[k].write_text(plan_of(lr).to_json())
    names = {module_name(Plan.from_json(p.read_text()).graph.name) for p in paths.values()}
    assert len(names) == 1  # one default folder for both plans
    folder = Path("generated") / names.pop()
    assert main(["build", str(paths[2])]) == 0
    assert main(["build", str(paths[3])]) == 0  # only what a build wrote: replaced
    capsys.readouterr()
    (folder / "checkpoint.npz").write_bytes(b"weights")
    (folder / "runs").mkdir()
    (folder / "runs" / "log.txt").write_text("epoch 1")
    assert main(["build", str(paths[2])]) == 2
    err = capsys.readouterr().err
    assert "holds the executor of another plan and 'checkpoint.npz', which no build wrote; " \
           "pass --force" in err
    assert (folder / "checkpoint.npz").read_bytes() == b"weights"
    assert (folder / "runs" / "log.txt").read_text() == "epoch 1"
    # The same plan builds in place, keeping them.
    assert main(["build", str(paths[3])]) == 0
    assert (folder / "checkpoint.npz").exists()
    assert main(["build", str(paths[2]), "--force"]) == 0
    assert not (folder / "checkpoint.npz").exists()
