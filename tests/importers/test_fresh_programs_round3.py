"""Fresh training programs (tests/helpers/fresh_programs.py), each run as its user writes it
through both doors, torch.compile(model, backend="planner") and planner.torch.trainer, and held
to eager PyTorch on the same data and seeds: every micro-step's loss within 1e-4 relative of
eager float32's (under autocast, 10x eager's own distance from float64 plus a bfloat16 ulp),
each eval() validation loss likewise, and every state_dict tensor after the steps within 10x
eager float32's own error against float64 plus 16 float32 ulps of its scale. A program that
is not honoured is refused in one line (an error, or the backend's PlannerFallback line that
the graph ran eagerly); EXPECTED holds which, and why.

Nine cases run in CI (both doors, three refusals); the rest in the slow tier.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.nn import functional as F  # noqa: E402

from tests.helpers import fresh_programs as fp  # noqa: E402

STEPS = 3

# (program, door) -> the verdict when not "match", and why
EXPECTED = {
    # Dynamo skips a frame holding nn.GRU / nn.LSTM while allow_rnn is False: eager, told
    ("gru_lm_tbptt", "compile"): "refused",
    ("lstm_two_layers_carry_h_c", "compile"): "refused",
    # aten.embedding_renorm_ (max_norm's in-place renormalisation of the table) is not built
    ("embedding_max_norm", "trainer"): "refused",
    ("embedding_max_norm", "compile"): "refused",
    # torch.export cannot trace Python control flow on a tensor's value; Dynamo breaks there
    ("data_dependent_branch", "trainer"): "refused",
    # a step never writes its inputs back; the backend writes them as eager does
    ("input_written_in_place", "trainer"): "refused",
    # torch.export would freeze the counter at its traced value; Dynamo retraces it
    ("python_counter_in_forward", "trainer"): "refused",
    # eager updates BatchNorm's statistics again when the backward recomputes the region; the
    # backend writes them once, as aot_eager and inductor do, and says so in one line
    ("checkpoint_around_batchnorm", "trainer"): "refused",
    ("checkpoint_around_batchnorm", "compile"): "told",
    # a hook on an activation: the trainer's step cannot apply it; the backend's graph eager
    ("gradient_reversal_hook", "trainer"): "refused",
    ("gradient_reversal_hook", "compile"): "refused",
    # ctc_loss's output shape depends on the data: torch.export cannot trace it
    ("ctc_loss", "trainer"): "refused",
}
# what the line of a refusal names (the node, the buffer, the attribute)
SAYS = {("gradient_reversal_hook", "compile"): "a gradient hook on an activation",
        ("gradient_reversal_hook", "trainer"): "Tensor.register_hook",
        ("checkpoint_around_batchnorm", "trainer"): "buffer 'block.1.",
        ("checkpoint_around_batchnorm", "compile"): "node 'tag_activation_checkpoint'",
        ("python_counter_in_forward", "trainer"): "Python attribute 'calls'",
        ("gru_lm_tbptt", "compile"): "Dynamo skipped forward",
        ("embedding_max_norm", "trainer"): "aten.embedding_renorm"}
FAST = {("nanogpt_mask_buffer_tied", "trainer"), ("sparse_autoencoder_dict_l1", "compile"),
        ("python_counter_in_forward", "trainer"), ("batchnorm_validate_every_step", "compile"),
        ("conv1d_accumulate_clip_nesterov_groups", "trainer"), ("gru_lm_tbptt", "compile"),
        ("unet_convtranspose_ignore_255", "compile"), ("activation_checkpoint", "compile"),
        ("checkpoint_around_batchnorm", "trainer")}
SAMPLE = ("nanogpt_mask_buffer_tied", "trainer")


KEYS = [(p.name, door) for p in fp.PROGRAMS + fp.PROBES for door in ("trainer", "compile")]


@pytest.mark.parametrize(("name", "door"), [
    pytest.param(*k, marks=pytest.mark.ci_sample, id="-".join(k)) if k == SAMPLE else
    pytest.param(*k, id="-".join(k)) if k in FAST else
    pytest.param(*k, marks=pytest.mark.slow, id="-".join(k)) for k in KEYS])
def test_trains_as_eager_or_is_refused_in_one_line(name, door, tmp_path):
    v = fp.run_door(fp.BY_NAME[name], door, STEPS, tmp_path)
    want = EXPECTED.get((name, door), "match")
    assert v.verdict == want, v.detail
    if want in ("refused", "told"):
        assert v.detail and "\n" not in v.detail
        assert SAYS.get((name, door), "") in v.detail


def test_the_comparison_tells_a_wrong_result():
    # a parameter nudged by 1e-4 of its scale (far above float32 noise), a loss off by 1e-3
    program = fp.BY_NAME["two_heads_huber_bce_pos_weight"]
    f32 = fp.eager(program, 2, torch.float32)
    f64 = fp.eager(program, 2, torch.float64)
    assert fp.compare(program, f32, f32, f64) == []
    nudged = fp.Outcome(list(f32.losses), dict(f32.state))
    key = "value.weight"
    nudged.state[key] = nudged.state[key] + np.float32(1e-4) * np.abs(nudged.state[key]).max()
    assert fp.compare(program, nudged, f32, f64)
    off = fp.Outcome([x * 1.001 for x in f32.losses], f32.state)
    assert fp.compare(program, off, f32, f64)


def test_a_python_counter_written_in_forward_is_refused_and_put_back(tmp_path):
    """torch.export ran the forward once: `self.calls` read at trace time would be frozen into
    every step (the losses drifted from eager's from step 1 on). Refused naming it, and the
    module is left as it was found."""
    from planner.importers.torch.context import TorchImportError
    from planner.torch import trainer

    model = fp.Annealed()
    (x,), y = fp._classes(torch.Generator().manual_seed(0), (4, 6), 3)
    with pytest.raises(TorchImportError, match=r"Python attribute 'calls' of Annealed \(0 -> 1\)"):
        trainer(model, (x,), loss=F.cross_entropy, labels=y, optimizer="sgd", lr=0.1,
                costs="analytical", out_dir=tmp_path)
    assert model.calls == 0


class Tempered(torch.nn.Module):
    """Logits divided by a temperature the user's loop anneals between steps."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(6, 3)
        self.temperature = 1.0

    def forward(self, x, temperature=None):
        return self.lin(x) / (self.temperature if temperature is None else temperature)


def _annealed(model, step, batches):
    """Eager's losses, the temperature set on the module before each step; `step(x, y, k)`
    the other door's."""
    eager = copy.deepcopy(model)
    opt = torch.optim.SGD(eager.parameters(), lr=0.1)
    ours, theirs = [], []
    for k, (x, y) in enumerate(batches):
        eager.temperature = 1.0 / (k + 1)
        value = F.cross_entropy(eager(x), y)
        opt.zero_grad()
        value.backward()
        opt.step()
        theirs.append(value.item())
        ours.append(step(x, y, k))
    return ours, theirs


def test_a_python_number_set_between_steps_is_refused_or_fed(tmp_path):
    """`model.temperature = ...` between steps: the trainer's step had frozen the traced 1.0
    (its losses off eager's from step 1 on, silently); now refused at the step, naming it. Fed
    as an input tensor instead (the refusal's advice), it trains as eager."""
    from planner.torch import trainer

    torch.manual_seed(0)
    model = Tempered()
    g = torch.Generator().manual_seed(1)
    batches = [fp._classes(g, (5, 6), 3) for _ in range(3)]
    batches = [(x, y) for (x,), y in batches]
    t = trainer(model, (batches[0][0],), loss=F.cross_entropy, labels=batches[0][1],
                optimizer="sgd", lr=0.1, costs="analytical", out_dir=tmp_path / "a")

    def attribute(x, y, k):
        model.temperature = 1.0 / (k + 1)
        return t.step(x, y)

    with pytest.raises(ValueError, match=r"^trainer: step: 'temperature' of Tempered is 0\.5, "
                                         r"not the 1\.0 the step was traced with") as e:
        _annealed(model, attribute, batches)
    assert "\n" not in str(e.value)
    model.temperature = 1.0
    fed = trainer(model, (batches[0][0], torch.tensor(1.0)), loss=F.cross_entropy,
                  labels=batches[0][1], optimizer="sgd", lr=0.1, costs="analytical",
                  out_dir=tmp_path / "b")
    ours, theirs = _annealed(
        model, lambda x, y, k: fed.step(x, torch.tensor(1.0 / (k + 1)), y), batches)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5)


def test_a_submodule_switched_to_eval_between_steps_is_refused(tmp_path):
    """`model.bn.eval()` mid-run (BatchNorm frozen after a warm-up): the step was traced in
    train(); refused naming the module's mode. model.eval() around t.evaluate is fine."""
    from planner.torch import trainer

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.BatchNorm1d(4)).train()
    x, y = torch.randn(5, 6), torch.randint(0, 4, (5,))
    t = trainer(model, (x,), loss=F.cross_entropy, labels=y, optimizer="sgd", lr=0.1,
                costs="analytical", out_dir=tmp_path)
    t.step(x, y)
    model.eval()
    t.evaluate(x, y)
    model.train()
    t.step(x, y)
    model[1].eval()
    with pytest.raises(ValueError, match=r"^trainer: step: '1\.training' \(BatchNorm1d's "):
        t.step(x, y)


def test_labels_in_a_tuple_are_refused_in_one_line(tmp_path):
    """Multi-task targets `(classes, values)`: one line naming the labels, not an
    AttributeError from deep in the planning."""
    from planner.torch import trainer

    model = fp.TwoHeads()
    x = torch.randn(4, 7)
    labels = (torch.randn(4, 2), torch.rand(4))
    with pytest.raises(ValueError, match=r"^trainer: labels is a tuple of 2; ") as e:
        trainer(model, (x,), loss=lambda out, y: F.mse_loss(out[0], y[0]), labels=labels,
                optimizer="sgd", lr=0.1, costs="analytical", out_dir=tmp_path)
    assert "\n" not in str(e.value)


@pytest.mark.slow
def test_a_gru_lm_with_dynamo_allowed_to_trace_rnns_is_planned(tmp_path, monkeypatch):
    """Dynamo's own hint for the GRU's refusal, `torch._dynamo.config.allow_rnn = True`: the
    GRU is then traced, planned (fallback off: nothing eager) and trains as eager."""
    import torch._dynamo

    monkeypatch.setattr(torch._dynamo.config, "allow_rnn", True)
    program = fp.BY_NAME["gru_lm_tbptt"]
    f32 = fp.eager(program, STEPS, torch.float32)
    f64 = fp.eager(program, STEPS, torch.float64)
    torch._dynamo.reset()
    ours = fp.eager(program, STEPS, torch.float32, wrap=lambda m: torch.compile(
        m, backend="planner", options={"costs": "analytical", "fallback": False}))
    assert fp.compare(program, ours, f32, f64) == []
