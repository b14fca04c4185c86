"""Zoo models against their published sizes: parameter counts, FLOPs, depth and structure."""

import pytest

from planner.graph import Graph, check_graph
from planner.ops import TensorType, get_op
from planner.zoo import build

LOSS_OPS = {"SoftmaxCrossEntropy", "SigmoidBCE", "MSE"}


def param_count(g: Graph) -> int:
    return sum(t.size for t in g.by_role("param"))


def forward_flops(g: Graph) -> int:
    """Sum of the op definitions' FLOPs over the forward nodes, the loss excluded."""
    tm = g.tensor_map
    total = 0
    for n in g.nodes:
        if n.op in LOSS_OPS:
            continue
        ins = [TensorType(tm[i].shape, tm[i].dtype) for i in n.inputs]
        outs = [TensorType(tm[o].shape, tm[o].dtype) for o in n.outputs]
        total += get_op(n.op).flops(ins, outs, n.attrs)
    return total


def count(g: Graph, op: str, *, excluding: str = "\0") -> int:
    return sum(n.op == op and excluding not in n.name for n in g.nodes)


def test_resnet50_params_and_flops():
    g = build("resnet", depth=50, batch=1, image=224)
    assert param_count(g) == pytest.approx(25.56e6, rel=0.01)
    assert forward_flops(g) == pytest.approx(8.2e9, rel=0.05)
    assert count(g, "Conv2D") == 53


# Parameter counts of the torchvision models (inception_v3 without its auxiliary classifier,
# 27,161,264 - 3,326,696), LeNet-5 and the DCGAN of the PyTorch examples (G + D).
PUBLISHED = [
    ("resnet", dict(depth=18), 11_689_512),
    ("resnet", dict(depth=34), 21_797_672),
    ("resnet", dict(depth=101), 44_549_160),
    ("resnet", dict(depth=152), 60_192_808),
    ("vgg16", {}, 138_357_544),
    ("alexnet", {}, 61_100_840),
    ("densenet", {}, 7_978_856),
    ("inception_v3", {}, 23_834_568),
    ("lenet", {}, 61_706),
    ("dcgan", {}, 3_576_704 + 2_765_568),
]


@pytest.mark.parametrize("name, params, expected", PUBLISHED)
def test_published_parameter_counts(name, params, expected):
    assert param_count(build(name, batch=2, **params)) == expected


@pytest.mark.parametrize("depth", [18, 34, 50, 101, 152, 200])
def test_resnet_depth_counts_weighted_layers(depth):
    g = build("resnet", depth=depth, batch=2, image=32, width=0.0625)
    # depth = convolutions on the main path + the fc layer
    assert count(g, "Conv2D", excluding="downsample") + count(g, "MatMul") == depth
    assert count(g, "BatchNorm") == count(g, "Conv2D")


def test_resnet1001_builds():
    g = check_graph(build("resnet", depth=1001, batch=16))
    assert count(g, "Conv2D", excluding="downsample") + 1 == 1001
    assert g.tensor("layer3/block323/relu").shape == (16, 1024, 14, 14)


def test_inception_v3_grid_sizes():
    g = build("inception_v3", batch=2)
    expected = {"stem/pool2": (192, 35), "mixed5d/concat": (288, 35), "mixed6a/concat": (768, 17),
                "mixed6e/concat": (768, 17), "mixed7a/concat": (1280, 8),
                "mixed7c/concat": (2048, 8)}
    for name, (c, s) in expected.items():
        assert g.tensor(name).shape == (2, c, s, s), name
    assert count(g, "Concat") == 11  # one per module (inception_e joins its pairs flat)
    small = build("inception_v3", batch=2, image=32, width=0.25)
    assert small.tensor("mixed7c/concat").shape[2:] == (7, 7)


def test_densenet_full_concatenation():
    g = build("densenet", batch=2)
    layer = g.node_map["denseblock3/layer24/concat"]
    assert len(layer.inputs) == 24  # the block input and the 23 earlier layers' features
    assert g.tensor("denseblock3/concat").shape == (2, 256 + 24 * 32, 14, 14)
    assert g.tensor("transition3/pool").shape == (2, 512, 7, 7)


def test_wide_deep_structure():
    g = build("wide_deep", batch=8, vocab=[10] * 26)
    tables = [t for t in g.by_role("param") if t.name.endswith("/table")]
    assert len(tables) == 26 and all(t.shape == (10, 16) for t in tables)
    assert g.tensor("features").shape == (8, 26 * 16 + 13)
    assert [g.tensor(f"deep/fc{i}").shape[1] for i in (1, 2, 3)] == [1024, 512, 256]
    assert g.tensor("logits").shape == (8, 1)
    assert g.node_map["loss"].op == "SigmoidBCE"


def test_dcgan_structure():
    g = build("dcgan", batch=4)
    assert [g.tensor(f"generator/relu{i}").shape for i in (1, 2, 3, 4)] == [
        (4, 512, 4, 4), (4, 256, 8, 8), (4, 128, 16, 16), (4, 64, 32, 32)]
    assert g.tensor("generator/images").shape == (4, 3, 64, 64)
    assert g.tensor("discriminator/lrelu4").shape == (8, 512, 4, 4)
    assert {n.attrs["alpha"] for n in g.nodes if n.op == "LeakyRelu"} == {0.2}
    assert g.tensor("labels").shape == g.tensor("logits").shape == (8, 1)


def test_lstm_unrolled_structure():
    g = build("lstm", hidden=200, seq=20, dropout=0.0)
    assert count(g, "MatMul") == 2 * 20 + 1  # one gates MatMul per step and layer + softmax
    assert count(g, "LSTMCell") == 2 * 20  # the gates' activations and the state: one op
    assert count(g, "Split") == 1  # the embedding over time
    assert g.tensor("logits").shape == (20 * 20, 10000)
    assert g.tensor("labels").shape == (400,) and g.tensor("labels").dtype == "int64"
    weights = {i for n in g.nodes if n.op == "MatMul" for i in n.inputs[1:]}
    assert weights == {"layer1/weight", "layer2/weight", "softmax/weight"}  # shared over steps
