"""The attention softmax fusion (planner/frontend/passes/softmax_fusion.py): it fires on the zoo's
GPT and BERT training and inference graphs and on torch.export's scaled_dot_product_attention, the
fused graph computes the same bits in the reference interpreter, and chains it must not fuse
stay as they are."""

from __future__ import annotations

import numpy as np
import pytest

from planner.frontend import passes as front_end_passes
from planner.frontend.autodiff import make_training_graph
from planner.frontend.passes.softmax_fusion import fuse_softmax
from planner.graph import GraphBuilder, check_graph
from planner.graph.interpret import init_params, random_feeds, run
from planner.graph.optimizer import Optimizer
from planner.zoo import build as zoo

SIZE = dict(batch=2, seq=8, dim=16, heads=2, layers=2, vocab=23)
CHAIN_OPS = {"Softmax", "SoftmaxGrad", "CausalMask"}


def _unfused_training_graph(graph, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(front_end_passes, "fuse_softmax", lambda g: g)
        return make_training_graph(graph, Optimizer(kind="sgd", lr=0.1))


def _same_values(a, b, seed=0):
    """Every output and every updated state of graphs a and b, run from the same feeds and
    params by the reference interpreter: the same bits."""
    feeds, params = random_feeds(a, seed=seed), init_params(a, seed=seed)
    out_a, out_b = run(a, feeds, dict(params)), run(b, feeds, dict(params))
    names = [*a.outputs, *(t.name for t in a.tensors if t.updates)]
    assert names
    for name in names:
        np.testing.assert_array_equal(out_a[name], out_b[name], err_msg=name)


@pytest.mark.parametrize("model,causal", [("gpt", True), ("bert", False)])
def test_fires_on_zoo_training_graphs_with_the_same_values(model, causal, monkeypatch):
    forward = zoo(model, **SIZE)
    fused = make_training_graph(forward, Optimizer(kind="sgd", lr=0.1))
    check_graph(fused)
    ops = [n.op for n in fused.nodes]
    assert ops.count("ScaledSoftmax") == ops.count("ScaledSoftmaxGrad") == SIZE["layers"]
    assert not CHAIN_OPS & set(ops)
    attrs = {(n.attrs["causal"], round(n.attrs["scale"], 6)) for n in fused.nodes
             if n.op.startswith("ScaledSoftmax")}
    assert attrs == {(causal, round(1 / np.sqrt(SIZE["dim"] // SIZE["heads"]), 6))}
    unfused = _unfused_training_graph(forward, monkeypatch)
    assert len(unfused.nodes) - len(fused.nodes) == SIZE["layers"] * (4 if causal else 2)
    assert fuse_softmax(unfused) == fused  # the pass alone, after autodiff: the same graph
    _same_values(unfused, fused)


def test_fires_on_an_inference_graph_and_keeps_names():
    g = zoo("gpt", **SIZE)
    fused = check_graph(fuse_softmax(g))
    nodes = [n for n in fused.nodes if n.op == "ScaledSoftmax"]
    assert len(nodes) == SIZE["layers"]
    for n in nodes:  # the Softmax's node and output; the chain's first input
        assert g.node_map[n.name].op == "Softmax" and n.outputs == g.node_map[n.name].outputs
        assert g.producer[n.inputs[0]].op == "MatMul"
    assert fuse_softmax(fused) == fused
    _same_values(g, fused, seed=1)


def _chain(*, mask_value=None, axis=-1, output_scaled=False, reread=False, order="scale-mask"):
    b = GraphBuilder("attn")
    x = b.input("scores", (2, 3, 3))
    first, second = ("Scale", "CausalMask") if order == "scale-mask" else ("CausalMask", "Scale")
    attrs = {"Scale": {"factor": 0.5}, "CausalMask": {"value": mask_value}}
    s = b.op(first, [x], attrs[first], name="a")
    m = b.op(second, [s], attrs[second], name="b")
    y = b.op("Softmax", [m], {"axis": axis}, name="p")
    outs = [y, s] if output_scaled else [y]
    if reread:
        outs.append(b.op("Relu", [s], name="other"))
    return b.build(outputs=outs)


@pytest.mark.parametrize("graph,left", [
    (_chain(mask_value=-3.0), {"Scale", "CausalMask", "Softmax"}),  # another mask value
    (_chain(axis=1), {"Scale", "CausalMask", "Softmax"}),            # not the last axis
    (_chain(order="mask-scale"), {"CausalMask", "ScaledSoftmax"}),  # mask then scale: scale only
    (_chain(output_scaled=True), {"Scale", "ScaledSoftmax"}),        # scaled scores an output
    (_chain(reread=True), {"Scale", "ScaledSoftmax", "Relu"}),       # scaled scores read again
], ids=["mask-value", "axis", "order", "output", "reread"])
def test_what_must_not_fuse_stays(graph, left):
    fused = check_graph(fuse_softmax(graph))
    assert {n.op for n in fused.nodes} == left
    _same_values(graph, fused)


def test_a_gradient_chain_without_a_scale_fuses_alone():
    b = GraphBuilder("bwd")
    dy, y = b.input("dy", (2, 4, 4)), b.input("y", (2, 4, 4))
    g = b.op("SoftmaxGrad", [dy, y], {"axis": 2}, name="g", role="grad")
    dx = b.op("CausalMask", [g], {"value": 0.0}, name="dx", role="grad")
    graph = b.build(outputs=[dx])
    fused = check_graph(fuse_softmax(graph))
    assert [(n.name, n.op, n.inputs, n.attrs) for n in fused.nodes] == [
        ("dx", "ScaledSoftmaxGrad", ("dy", "y"), {"causal": True, "scale": 1.0})]
    _same_values(graph, fused)


def test_fires_on_torch_exports_scaled_dot_product_attention():
    """planner.torch writes F.scaled_dot_product_attention(is_causal=True) as Scale ->
    CausalMask -> Softmax; a mask as masked_fill on a boolean buffer (Where) is not fused."""
    torch = pytest.importorskip("torch")
    from planner.importers.torch.convert import convert
    from planner.torch.training import export

    class Attention(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = torch.nn.Linear(8, 8)

        def forward(self, x):
            q = self.proj(x).view(2, 4, 2, 4).transpose(1, 2)
            y = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
            return y.sum()

    def mse(out, target):
        return torch.nn.functional.mse_loss(out, target)

    x = torch.randn(2, 4, 8)
    graph = convert(export(Attention(), (x,), mse, torch.zeros(())), name="attn").graph
    training = make_training_graph(graph, Optimizer(kind="sgd", lr=0.1))
    ops = [n.op for n in training.nodes]
    assert ops.count("ScaledSoftmax") == ops.count("ScaledSoftmaxGrad") == 1
    assert not CHAIN_OPS & set(ops)
    assert next(n for n in training.nodes if n.op == "ScaledSoftmax").attrs == {
        "causal": True, "scale": 0.5}


def test_the_command_line_fuses_inference_graphs_and_keeps_what_it_is_asked_to(tmp_path):
    """`planner graph` writes, and `planner plan` plans, the fused inference graph; a tensor
    `--keep` names is an output, so the chain is fused after it."""
    import json

    from planner.cli import main

    spec = "zoo:gpt?batch=2&seq=4&dim=8&heads=2&layers=1&vocab=11"
    assert main(["graph", spec, "-o", str(tmp_path / "g.json")]) == 0
    ops = [n["op"] for n in json.loads((tmp_path / "g.json").read_text())["nodes"]]
    assert "ScaledSoftmax" in ops and not CHAIN_OPS & set(ops)
    for keep in (None, "block1/attn/scaled"):
        out = tmp_path / f"{keep is None}.plan.json"
        args = ["plan", spec, "--target", "xeon-8180", "-o", str(out)]
        assert main(args + (["--keep", keep] if keep else [])) == 0
        nodes = json.loads(out.read_text())["graph"]["nodes"]
        fused = next(n for n in nodes if n["op"] == "ScaledSoftmax")
        assert fused["attrs"]["scale"] == (1.0 if keep else 0.5) and fused["attrs"]["causal"]
        assert ("Scale" in {n["op"] for n in nodes}) == (keep is not None)
