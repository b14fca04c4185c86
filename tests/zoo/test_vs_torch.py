"""Zoo forward passes against PyTorch modules holding the same parameters.

The op references are checked against torch one by one in tests/ops; these check the wiring:
gate order and concatenation layout of the unrolled LSTM, and LeNet's layer sequence.
"""

import numpy as np
import pytest

from planner.graph.interpret import init_params, random_feeds, run
from planner.zoo import build

torch = pytest.importorskip("torch")
F = torch.nn.functional


def tensors(values, *names):
    return [torch.from_numpy(np.asarray(values[n], dtype=np.float64)) for n in names]


def test_lstm_matches_torch_lstm():
    batch, seq, hidden, layers, vocab = 3, 4, 5, 2, 13
    g = build("lstm", batch=batch, seq=seq, hidden=hidden, layers=layers, vocab=vocab,
              dropout=0.0)
    feeds, params = random_feeds(g, seed=3), init_params(g, seed=4)
    params = {k: v + 0.1 * np.random.default_rng(5).standard_normal(v.shape).astype(v.dtype)
              for k, v in params.items()}  # non-zero biases too
    ours = run(g, feeds, params)

    cell = torch.nn.LSTM(hidden, hidden, layers, batch_first=True).double()
    with torch.no_grad():
        for k in range(layers):
            weight, bias = tensors(params, f"layer{k + 1}/weight", f"layer{k + 1}/bias")
            getattr(cell, f"weight_ih_l{k}").copy_(weight[:hidden].T)
            getattr(cell, f"weight_hh_l{k}").copy_(weight[hidden:].T)
            getattr(cell, f"bias_ih_l{k}").copy_(bias)
            getattr(cell, f"bias_hh_l{k}").zero_()
        table, w_out, b_out = tensors(params, "embedding/table", "softmax/weight",
                                      "softmax/bias")
        h0 = torch.stack(tensors(feeds, *(f"layer{k + 1}/h0" for k in range(layers))))
        c0 = torch.stack(tensors(feeds, *(f"layer{k + 1}/c0" for k in range(layers))))
        tokens = torch.from_numpy(feeds["tokens"])
        out, (h, c) = cell(F.embedding(tokens, table), (h0, c0))
        logits = out.reshape(batch * seq, hidden) @ w_out + b_out
        loss = F.cross_entropy(logits, torch.from_numpy(feeds["labels"]))

    np.testing.assert_allclose(ours["logits"], logits.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ours["loss"], loss.item(), rtol=1e-5)
    for k in range(layers):
        np.testing.assert_allclose(ours[f"layer{k + 1}/step{seq}/h"], h[k].numpy(), rtol=1e-4,
                                   atol=1e-6)
        np.testing.assert_allclose(ours[f"layer{k + 1}/step{seq}/c"], c[k].numpy(), rtol=1e-4,
                                   atol=1e-6)


def test_lenet_matches_torch():
    g = build("lenet", batch=3, image=28, width=0.5)
    feeds, params = random_feeds(g, seed=1), init_params(g, seed=2)
    ours = run(g, feeds, params)

    def conv(x, name, pad):
        w, b = tensors(params, f"{name}/weight", f"{name}/bias")
        return F.relu(F.conv2d(x, w, b, padding=pad))

    def fc(x, name):
        w, b = tensors(params, f"{name}/weight", f"{name}/bias")
        return x @ w + b

    with torch.no_grad():
        x = F.max_pool2d(conv(*tensors(feeds, "images"), "conv1", 2), 2)
        x = F.max_pool2d(conv(x, "conv2", 0), 2).flatten(1)
        logits = fc(F.relu(fc(F.relu(fc(x, "fc1")), "fc2")), "fc3")
        loss = F.cross_entropy(logits, torch.from_numpy(feeds["labels"]))
    np.testing.assert_allclose(ours["logits"], logits.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ours["loss"], loss.item(), rtol=1e-5)
