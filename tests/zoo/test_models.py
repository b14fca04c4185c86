"""Every zoo model: builds and validates at default sizes, follows the graph conventions, and runs
through the reference interpreter at small sizes."""

import numpy as np
import pytest

from planner.graph import check_graph
from planner.graph.interpret import init_params, random_feeds, run
from planner.zoo import MODELS, build
from tests.zoo.small_configs import SMALL

# Beyond SMALL: a deeper ResNet, the standard Inception stem, LeNet at MNIST size, DCGAN without
# its loss, a three-layer LSTM.
EXTRA_SMALL = [
    ("resnet", dict(batch=2, image=16, width=0.0625, depth=50, classes=5)),
    ("inception_v3", dict(batch=2, image=75, width=0.0625, classes=5)),  # the standard stem
    ("lenet", dict(batch=2, image=28, width=0.5)),
    ("dcgan", dict(batch=2, image=16, width=0.0625, nz=4, loss=False)),
    ("lstm", dict(batch=2, seq=2, hidden=3, layers=3, vocab=7, dropout=0.0)),
]

WEIGHT_INITS = {"he", "glorot", "normal"}


@pytest.fixture(scope="module", params=sorted(MODELS))
def default_graph(request):
    return build(request.param)


def test_the_zoo_builds_each_small_config_as_asked(default_graph):
    # Every model has a small configuration (so the forward test below covers it), and the
    # zoo honours it: its inputs carry that batch, and the graph is smaller than the default.
    name = default_graph.name
    params = SMALL[name]
    small = check_graph(build(name, **params))
    assert {t.shape[0] for t in small.by_role("input")} == {params["batch"]}
    assert sum(t.nbytes for t in small.tensors) < sum(t.nbytes for t in default_graph.tensors)


def test_default_build_validates(default_graph):
    g = default_graph
    assert check_graph(g) is g
    assert g.kind == "inference"
    assert g.outputs[0] == "logits" and g.outputs[-1] == "loss"
    assert g.tensor("loss").shape == ()


def test_default_build_roles_and_inits(default_graph):
    g = default_graph
    assert g.by_role("input") and g.by_role("label") and g.by_role("param")
    for t in g.by_role("input"):
        assert (t.dtype == "float32" and len(t.shape) in (2, 4)) or t.dtype == "int64", t.name
    for t in g.by_role("param"):
        leaf = t.name.rsplit("/", 1)[-1]
        if leaf == "bias" or (leaf == "weight" and len(t.shape) == 1):
            assert t.init == "zeros", t.name
        elif leaf == "scale":
            assert t.init == "ones", t.name
        elif leaf == "table":
            assert t.init == "embedding", t.name
        else:
            assert leaf == "weight" and t.init in WEIGHT_INITS, t.name
    for t in g.by_role("state"):
        leaf = t.name.rsplit("/", 1)[-1]
        assert (leaf, t.init) in {("running_mean", "zeros"), ("running_var", "ones")}, t.name
    for n in g.nodes:
        if n.op == "BatchNorm":
            assert n.attrs["training"] is True
            assert [g.tensor(i).role for i in n.inputs[3:]] == ["state", "state"]


def test_default_build_dropout_seeds_are_distinct(default_graph):
    seeds = [n.attrs["seed"] for n in default_graph.nodes if n.op == "Dropout"]
    assert len(seeds) == len(set(seeds))
    expect_dropout = {"alexnet", "vgg16", "lstm", "inception_v3"}
    assert bool(seeds) == (default_graph.name in expect_dropout)


def test_loss_false_drops_loss_and_labels():
    for name, params in SMALL.items():
        g = build(name, **{**params, "loss": False})
        check_graph(g)
        assert "loss" not in g.outputs and not g.by_role("label"), name
        assert not any(n.op in ("SoftmaxCrossEntropy", "SigmoidBCE") for n in g.nodes), name


@pytest.mark.parametrize("name, params", [*SMALL.items(), *EXTRA_SMALL],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_small_forward_matches_declared_shapes(name, params):
    g = check_graph(build(name, **params))
    values = run(g, random_feeds(g, seed=1), init_params(g, seed=2))
    for out in g.outputs:
        assert values[out].shape == g.tensor(out).shape, out
        assert values[out].dtype == np.dtype(g.tensor(out).dtype), out
        assert np.all(np.isfinite(values[out])), out
    if params.get("loss", True):
        assert values["loss"] > 0
    logits = values["logits"]
    assert np.std(logits) > 0  # the forward did not collapse to a constant


def test_scoped_node_names():
    names = {n.name for n in build("resnet", depth=50, batch=2).nodes}
    assert {"stem/conv1", "layer3/block2/conv1", "layer3/block2/bn1", "layer3/block2/add",
            "layer2/block1/downsample/conv", "fc"} <= names
    names = {n.name for n in build("inception_v3", batch=2).nodes}
    assert {"mixed5b/branch5x5_2", "mixed6b/branch7x7dbl_5/bn", "mixed7c/concat"} <= names
