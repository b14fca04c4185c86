"""PyTorch's training semantics through planner.torch.trainer on the CPU executor: a matrix of
small modules, one semantic each (tests/helpers/training_semantics.py: frozen parameters and
submodules, no_grad / inference_mode / set_grad_enabled teachers, a no_grad pseudo-label from
the same model, an eval() submodule, reassigned and in-place buffers, a BatchNorm called twice
per step, tied weights, detach, straight-through, the same tensor passed twice, the step's
outputs fed back, an EMA target network), each stepped against PyTorch float32 with float64 as
the noise floor (each step's loss and outputs, the state_dict after the steps, and evaluate()
against model.eval()); the user's module is left as trainer() found it (modes, requires_grad,
parameters and buffers) until load_into.

Beside the matrix: requires_grad_() changed between two trainers takes effect, Python's
random and time in forward warn naming the line, and what cannot be honoured is refused in
one line.
"""

from __future__ import annotations

import random
import re
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import planner.errors  # noqa: E402
import planner.torch  # noqa: E402
from planner.torch import TorchImportError, convert  # noqa: E402
from planner.torch.training import PREFIX, export  # noqa: E402
from tests.helpers.training_semantics import (  # noqa: E402
    BY_NAME,
    CASES,
    FROZEN_TEACHER,
    MLP,
    Case,
    Distill,
    mismatches,
    planner_steps,
    planner_trainer,
    snapshot,
    torch_run,
)

nn = torch.nn


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_trains_as_pytorch(case: Case, tmp_path):
    model = case.make()
    before = snapshot(model)
    t = planner_trainer(case, model, out_dir=tmp_path, costs="analytical")
    assert snapshot(model) == before, "trainer() changed the module"
    ours = planner_steps(case, t)
    assert snapshot(model) == before, "stepping changed the module before load_into"
    f32, f64 = torch_run(case, torch.float32), torch_run(case, torch.float64)
    assert mismatches(ours, f32, f64) == []
    start = model.state_dict()
    for key, value in ours.state.items():  # arrays all, 0-d ones too (num_batches_tracked)
        assert torch.from_numpy(value).shape == start[key].shape, key
    for key in case.unchanged:  # frozen: not a bit moved
        np.testing.assert_array_equal(ours.state[key], start[key].numpy(), err_msg=key)
    t.load_into(model, copy=True)
    assert snapshot(model)[:2] == before[:2], "load_into changed modes or requires_grad"
    for key, value in model.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), ours.state[key], err_msg=key)


def test_requires_grad_changed_between_trainers_takes_effect(tmp_path):
    case = BY_NAME["frozen_submodule"]
    model = case.make()
    frozen = planner_trainer(case, model, out_dir=tmp_path, costs="analytical")
    assert not any(t.name.startswith(PREFIX + "backbone") for t in frozen.graph.by_role("param"))
    model.backbone.requires_grad_(True)
    thawed = Case("thawed", lambda: _thawed(case), case.batches, case.loss)
    t = planner_trainer(thawed, model, out_dir=tmp_path, costs="analytical")
    ours = planner_steps(thawed, t)
    assert mismatches(ours, torch_run(thawed, torch.float32),
                      torch_run(thawed, torch.float64)) == []
    assert not np.array_equal(ours.state["backbone.0.weight"],
                              model.state_dict()["backbone.0.weight"].numpy())


def _thawed(case: Case) -> nn.Module:
    model = case.make()
    model.backbone.requires_grad_(True)
    return model


class Forcing(nn.Module):
    """Teacher forcing drawn with Python's random, and a time read: frozen at trace time."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        if random.random() < 0.5:
            x = x * 2
        return self.lin(x)


def test_python_random_in_forward_warns_naming_the_line():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        export(Forcing(), (torch.randn(2, 3),), torch.nn.functional.mse_loss,
               torch.randn(2, 3))
    lines = [str(w.message) for w in caught if "random.random" in str(w.message)]
    assert len(lines) == 1, [str(w.message) for w in caught]
    assert re.search(r"^Forcing: forward calls random\.random at .*test_training_semantics\.py"
                     r":\d+: torch\.export ran it once", lines[0])
    line = int(lines[0].split(".py:")[1].split(":")[0])
    with open(__file__) as f:
        assert "random.random()" in f.read().splitlines()[line - 1]


class WritesWeight(nn.Module):
    """A trained parameter overwritten in forward: not what an optimizer step is."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        with torch.no_grad():
            self.lin.weight.mul_(0.5)
        return self.lin(x)


class ClampedUnderNoGrad(nn.Module):
    """An activation changed in place under no_grad: PyTorch's gradient is that of the value
    before the change, which no graph reading the changed value has."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        y = self.lin(x)
        with torch.no_grad():
            y.clamp_(0, 1)
        return y * 2


class ZeroedUnderNoGrad(ClampedUnderNoGrad):
    """The same through a view (an indexed write), which the region does not return."""

    def forward(self, x):
        y = self.lin(x)
        with torch.no_grad():
            y[:, 0] = 0.0
        return y * 2


@pytest.mark.parametrize(("module", "says"), [
    (ZeroedUnderNoGrad, r"node 'linear': changed in place under torch\.no_grad\(\)"),
    (WritesWeight, r"parameter 'lin\.weight': overwritten in forward .* set its "
                   r"requires_grad=False"),
    (ClampedUnderNoGrad, r"node 'linear': changed in place under torch\.no_grad\(\)"),
])
def test_what_cannot_be_honoured_is_refused_in_one_line(module, says):
    program = torch.export.export(module(), (torch.randn(2, 3),))
    with pytest.raises(TorchImportError, match=says) as e:
        convert(program)
    assert "\n" not in str(e.value)


class Regrown(nn.Module):
    """A buffer reassigned to another shape: no step can keep it in the buffer's bytes."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.register_buffer("seen", torch.zeros(3))

    def forward(self, x):
        self.seen = torch.cat([self.seen, x.detach().mean(0)])
        return self.lin(x)


def test_a_buffer_reassigned_to_another_shape_is_refused_in_one_line():
    with pytest.raises(TorchImportError, match=r"^Regrown: buffer 'seen' of Regrown: "
                                               r"reassigned in forward to torch\.float32 \[6\]"):
        export(Regrown(), (torch.randn(2, 3),), torch.nn.functional.mse_loss,
               torch.randn(2, 3))


def test_no_grad_region_is_detached_and_frozen_parameters_are_state():
    """The import itself, without a build: a no_grad teacher's results reach the loss through a
    StopGradient, and a frozen parameter is a state tensor (no gradient, no update)."""
    model = BY_NAME["no_grad_teacher"].make()
    model.student.lin1.weight.requires_grad_(False)
    graph = convert(torch.export.export(model, (torch.randn(4, 5),))).graph
    assert graph.tensor("student.lin1.weight").role == "state"
    assert graph.tensor("student.lin2.weight").role == "param"
    teacher_reads = {n.name for n in graph.nodes
                     if any(i.startswith("teacher.") for i in n.inputs)}
    assert teacher_reads and any(n.op == "StopGradient" for n in graph.nodes)
    assert isinstance(MLP(), nn.Module)


def _doc_example(title: str) -> str:
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "pytorch.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.S)
    found = [b for b in blocks if b.startswith(f"# example: {title}\n")]
    assert len(found) == 1, title
    return found[0]


@pytest.mark.parametrize("title", ["fine-tuning", "distillation"])
def test_docs_examples_run(title):
    exec(compile(_doc_example(title), f"docs/pytorch.md ({title})", "exec"), {})


def _student_adam(model: nn.Module) -> torch.optim.Optimizer:
    # PyTorch's distillation tutorial: the optimizer holds the student's parameters only and
    # the teacher keeps requires_grad=True; weight decay would move a teacher it updated
    return torch.optim.Adam(model.student.parameters(), lr=0.01, weight_decay=0.1)


def test_a_no_grad_teacher_outside_the_optimizer_is_a_constant(tmp_path):
    case = BY_NAME["no_grad_teacher"]
    model = case.make()
    assert all(p.requires_grad for p in model.teacher.parameters())
    inputs, labels = case.batches()[0]
    t = planner.torch.trainer(model, inputs, loss=case.loss, labels=labels,
                              optimizer=_student_adam(model), out_dir=tmp_path,
                              costs="analytical")
    # a constant of the step: no update, no optimizer state
    assert not any(x.name.startswith("optim/" + PREFIX + "teacher") for x in t.graph.tensors)
    assert not any(x.updates and x.updates.startswith(PREFIX + "teacher")
                   for x in t.graph.tensors)
    ours = planner_steps(case, t)
    adam = Case(case.name, case.make, case.batches, case.loss,
                reference=lambda ps: torch.optim.Adam(ps[:4], lr=0.01, weight_decay=0.1))
    assert [n for n, _ in case.make().named_parameters()][:4] == [
        "student.lin1.weight", "student.lin1.bias", "student.lin2.weight", "student.lin2.bias"]
    assert mismatches(ours, torch_run(adam, torch.float32), torch_run(adam, torch.float64)) == []
    start = model.state_dict()
    for key in FROZEN_TEACHER:
        np.testing.assert_array_equal(ours.state[key], start[key].numpy(), err_msg=key)


class TeacherWithGradient(Distill):
    """The teacher's output reaches the loss with gradients on: torch.optim, holding the
    student only, would leave the teacher where it is; the planner would train it."""

    def forward(self, x):
        return self.student(x), self.teacher(x)


def test_a_parameter_with_a_gradient_outside_the_optimizer_is_refused():
    model = TeacherWithGradient()
    case = BY_NAME["no_grad_teacher"]
    inputs, labels = case.batches()[0]
    with pytest.raises(planner.errors.UserError) as e:
        planner.torch.trainer(model, inputs, loss=case.loss, labels=labels,
                              optimizer=_student_adam(model), costs="analytical")
    assert "\n" not in str(e.value)
    assert re.search(r"^optimizer Adam: parameter 'teacher\.lin1\.weight' gets a gradient .* "
                     r"in no param group, so torch.optim would not update it; add it to a "
                     r"group or call teacher\.lin1\.weight\.requires_grad_\(False\)$",
                     str(e.value)), str(e.value)
