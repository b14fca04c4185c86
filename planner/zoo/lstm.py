"""LSTM language model for Penn Treebank (Zaremba et al. 2014), unrolled over `seq` steps.

    tokens (batch, seq) int64 -> embedding (vocab x hidden) -> dropout
    -> Split over time, Reshape to (batch, hidden) per step
    -> layer1..L, each an LSTM cell per step t (weights shared across steps):
         gates = Concat(x_t, h_{t-1}) @ weight (input + hidden, 4 hidden) + bias
         h_t, c_t = LSTMCell(gates, c_{t-1}), gate blocks i, f, g, o (PyTorch's order):
         c_t = sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g);   h_t = sigmoid(o) * tanh(c_t)
       with dropout on each h_t passed to the next layer (non-recurrent connections only)
    -> Concat of the last layer's h_t over time, Reshape (batch x seq, hidden), dropout
    -> softmax/fc (hidden, vocab) = logits (batch x seq, vocab)
    loss = SoftmaxCrossEntropy(logits, labels (batch x seq,) int64): the mean over every step;
    labels are the next-token targets (batch, seq) flattened row-major, `targets.reshape(-1)`.

The initial states layer<l>/h0 and layer<l>/c0 (batch, hidden) are inputs, so truncated
backpropagation through time can carry the state from one batch to the next; the final states
layer<l>/step<seq>/h and .../c are graph outputs, after the logits and before the loss.

Defaults are the paper's medium configuration (hidden 650, 35 steps, dropout 0.5, batch 20);
the small one is `hidden=200, seq=20, dropout=0`. Dropout seeds are fixed and distinct per node
(training graphs add the step count to them, so each step draws fresh masks).

Example:
    >>> g = lstm(batch=2, seq=3, hidden=8, vocab=50)
    >>> g.outputs[0], g.tensor("logits").shape, g.tensor("layer2/step3/h").shape
    ('logits', (6, 50), (2, 8))
"""

from __future__ import annotations

import itertools

from planner.graph import Graph, GraphBuilder
from planner.zoo.common import graph_name, require, require_positive
from planner.zoo.layers import classify, linear
from planner.zoo.layers import dropout as dropout_layer


def lstm(*, batch: int = 20, seq: int = 35, hidden: int = 650, layers: int = 2,
         vocab: int = 10000, dropout: float = 0.5, loss: bool = True) -> Graph:
    """PTB word-level LSTM language model; outputs (logits, final states..., loss)."""
    name = graph_name(lstm, locals())
    require_positive("lstm", batch=batch, seq=seq, hidden=hidden, layers=layers, vocab=vocab)
    require(0 <= dropout < 1, "lstm", "dropout", f"must be in [0, 1), got {dropout}")
    b = GraphBuilder(name)
    seeds = itertools.count(1)

    def drop(x: str, name: str) -> str:
        return dropout_layer(b, x, dropout, next(seeds), name) if dropout > 0 else x

    tokens = b.input("tokens", (batch, seq), dtype="int64")
    table = b.param("embedding/table", (vocab, hidden), init="embedding")
    x = drop(b.op("Embedding", [table, tokens], name="embedding"), "embedding/dropout")
    steps = b.op_n("Split", [x], {"axis": 1, "sizes": [1] * seq}, name="embedding/split")
    xs = [b.op("Reshape", [s], {"shape": [batch, hidden]}, name=f"embedding/step{t}")
          for t, s in enumerate(steps, start=1)]
    finals = []
    for layer in range(1, layers + 1):
        with b.scope(f"layer{layer}"):
            weight = b.param("weight", (2 * hidden, 4 * hidden), init="glorot")
            bias = b.param("bias", (4 * hidden,), init="zeros")
            h, c = b.input("h0", (batch, hidden)), b.input("c0", (batch, hidden))
            outs = []
            for t, x_t in enumerate(xs, start=1):
                with b.scope(f"step{t}"):
                    h, c = cell(b, x_t, h, c, weight, bias, hidden)
                    outs.append(drop(h, "dropout") if layer < layers else h)
            finals += [h, c]
            xs = outs
    x = b.op("Concat", xs, {"axis": 1}, name="outputs")
    x = drop(b.op("Reshape", [x], {"shape": [batch * seq, hidden]}, name="outputs/reshape"),
             "outputs/dropout")
    logits = linear(b, x, vocab, name="softmax", init="glorot", output="logits")
    outputs = classify(b, logits, loss)
    return b.build([outputs[0], *finals, *outputs[1:]])


def cell(b: GraphBuilder, x: str, h: str, c: str, weight: str, bias_param: str,
         hidden: int) -> tuple[str, str]:
    """One LSTM step: (h_t, c_t) from x_t and (h_{t-1}, c_{t-1}), gates from one MatMul, the
    rest in one LSTMCell."""
    gates = b.op("MatMul", [b.op("Concat", [x, h], {"axis": 1}, name="concat"), weight],
                 name="gates")
    gates = b.op("BiasAdd", [gates, bias_param], {"axis": 1}, name="gates/bias_add")
    h, c, _ = b.op_n("LSTMCell", [gates, c], {"order": "ifgo"}, name="cell",
                     outputs=[b.scoped(k) for k in ("h", "c", "acts")])
    return h, c
