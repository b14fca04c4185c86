"""A trainer run with the user's own objects, stopped at an epoch's end and resumed in a fresh
trainer, equals the uninterrupted run bit for bit: torch.optim.AdamW with two param groups
(built by identity, no decay on biases and norms), clip_grad_norm beside it, a
CosineAnnealingLR stepped every batch, a BatchNorm (its num_batches_tracked, a counter the
executor does not hold) and a Dropout (the executor's random stream), a smaller last batch each
epoch and an evaluate() at each epoch's end. The checkpoint is the trainer's state_dict with
the optimizer's and the scheduler's beside it, as PyTorch's idiom saves them."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional
nn = torch.nn

from planner.torch import trainer  # noqa: E402

EPOCHS, STOP = 4, 2


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.2),
                         nn.Linear(16, 3))


def _data():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(n, 6, generator=g), torch.randint(0, 3, (n,), generator=g))
            for n in (8, 8, 8, 5)]  # the last batch smaller, as a DataLoader's


def _objects(model):
    matrices = [p for p in model.parameters() if p.dim() > 1]
    rest = [p for p in model.parameters() if p.dim() <= 1]
    opt = torch.optim.AdamW([{"params": matrices}, {"params": rest, "weight_decay": 0.0}],
                            lr=1e-2, weight_decay=0.1)
    return opt, torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=EPOCHS * 4)


def _trainer(model, opt, data, tmp_path):
    x, y = data[0]
    return trainer(model, (x,), loss=F.cross_entropy, labels=y, optimizer=opt,
                   clip_grad_norm=1.0, costs="analytical", out_dir=tmp_path)


def _epochs(t, sched, data, first, last):
    for _ in range(first, last):
        for x, y in data:
            t.step(x, y)
            sched.step()
        t.evaluate(*data[0])
        t.evaluate(data[0][0][:3], data[0][1][:3])  # a batch size of its own


def test_a_run_resumed_at_an_epochs_end_equals_the_uninterrupted_one_bit_for_bit(tmp_path):
    data = _data()
    model = _model()
    opt, sched = _objects(model)
    whole = _trainer(model, opt, data, tmp_path)
    _epochs(whole, sched, data, 0, EPOCHS)
    want = whole.params()

    model = _model()
    opt, sched = _objects(model)
    stopped = _trainer(model, opt, data, tmp_path)
    _epochs(stopped, sched, data, 0, STOP)
    checkpoint = {"trainer": stopped.state_dict(), "optimizer": opt.state_dict(),
                  "scheduler": sched.state_dict()}
    del stopped

    model = _model()
    opt, sched = _objects(model)
    resumed = _trainer(model, opt, data, tmp_path)
    resumed.load_state_dict(checkpoint["trainer"])
    opt.load_state_dict(checkpoint["optimizer"])
    sched.load_state_dict(checkpoint["scheduler"])
    _epochs(resumed, sched, data, STOP, EPOCHS)
    got = resumed.params()
    assert set(got) == set(want) == set(_model().state_dict())
    for key, value in want.items():
        np.testing.assert_array_equal(got[key], value, err_msg=key)
    assert got["1.num_batches_tracked"] == EPOCHS * len(data)
    assert resumed.steps == whole.steps


def test_a_checkpoint_without_the_trainers_entry_is_refused(tmp_path):
    data = _data()
    model = _model()
    t = _trainer(model, _objects(model)[0], data, tmp_path)
    with pytest.raises(ValueError, match=r"^load_state_dict: no 'trainer' entry"):
        t.load_state_dict(t.executor.state_dict())
    with pytest.raises(ValueError,
                       match=r"trainer steps must be an int in \[0, 2\*\*63\), got -1"):
        t.load_state_dict({**t.executor.state_dict(), "trainer": {"steps": -1}})
