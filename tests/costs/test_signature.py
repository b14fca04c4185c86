"""Op signatures: keys, attr normalisation through the registry, graph signatures."""

import pytest
from pydantic import ValidationError

from planner.costs import OpSignature, graph_signatures, signature_of, unique_signatures
from planner.graph import GraphBuilder
from planner.ops import TensorType


def test_key_reads_op_inputs_and_sorted_attrs():
    s = OpSignature(op="Conv2D", shapes=((1, 3, 8, 8), (4, 3, 3, 3)),
                    dtypes=("float32", "float32"), attrs={"strides": [1, 1], "groups": 1})
    assert s.key == ('Conv2D(float32[1,3,8,8], float32[4,3,3,3]) '
                     '{"groups":1,"strides":[1,1]}')
    assert OpSignature(op="Zeros").key == "Zeros()"


def test_defaults_are_spelled_out_so_equal_kernels_share_a_signature():
    x, w = TensorType((1, 3, 8, 8)), TensorType((4, 3, 3, 3))
    short = signature_of("Conv2D", [x, w], {"pads": [1, 1, 1, 1]})
    full = signature_of("Conv2D", [x, w], {"pads": [1, 1, 1, 1], "strides": [1, 1],
                                           "dilations": [1, 1], "groups": 1})
    assert short.key == full.key and short.attrs["groups"] == 1
    assert signature_of("Conv2D", [x, w]).key != short.key


def test_unknown_ops_keep_their_attrs():
    s = signature_of("FancyOp", [TensorType((2,), "int64")], {"b": 1, "a": [2]})
    assert s.attrs == {"b": 1, "a": [2]} and s.key == 'FancyOp(int64[2]) {"a":[2],"b":1}'


def test_shapes_and_dtypes_must_pair_up():
    with pytest.raises(ValidationError, match="2 shapes but 1 dtypes"):
        OpSignature(op="Add", shapes=((1,), (1,)), dtypes=("float32",))


def test_graph_signatures_repeat_for_identical_nodes():
    b = GraphBuilder("twice")
    x = b.input("x", (4, 8))
    y = b.op("Relu", [b.op("Relu", [x])])
    z = b.op("Tanh", [y])
    g = b.build(outputs=[z])
    sigs = graph_signatures(g)
    assert list(sigs) == [n.name for n in g.nodes]
    relu1, relu2, tanh = sigs.values()
    assert relu1 == relu2 and relu1.shapes == ((4, 8),) and tanh.op == "Tanh"
    assert [s.op for s in unique_signatures(list(sigs.values()))] == ["Relu", "Tanh"]


def test_a_blocked_step_gives_each_node_its_operands_layouts():
    """A step that keeps images blocked (planner.step.blocked) runs other kernels: each
    node's signature names its operands' layouts, inputs then outputs; the JSON of a plain
    one is as before, and a blocked one's plain twin is the signature of the plain step."""
    from planner.step.blocked import with_blocked

    b = GraphBuilder("c")
    x = b.input("x", (2, 16, 6, 6))
    h = b.op("Conv2D", [x, b.param("w1", (16, 16, 3, 3), init="he")], {"pads": [1, 1, 1, 1]})
    y = b.op("Conv2D", [b.op("Relu", [h]), b.param("w2", (16, 16, 3, 3), init="he")])
    g = b.build([y])
    plain, blocked = graph_signatures(g), graph_signatures(with_blocked(g, 16))
    assert [s.layouts for s in blocked.values()] == [
        ("plain", "plain", "nChw16c"), ("nChw16c", "nChw16c"), ("nChw16c", "plain", "plain")]
    assert [s.plain for s in blocked.values()] == list(plain.values())
    assert all(s.layouts == () and "layouts" not in s.model_dump() for s in plain.values())
    relu = blocked[g.nodes[1].name]
    assert relu.key.endswith(" layouts=nChw16c->nChw16c") and relu.key != relu.plain.key
    assert OpSignature.model_validate(relu.model_dump()) == relu


def test_layouts_name_every_operand_and_one_blocked():
    relu = OpSignature(op="Relu", shapes=((2, 16, 1, 1),), dtypes=("float32",))
    with pytest.raises(ValidationError, match="name every input and output"):
        OpSignature.model_validate({**relu.model_dump(), "layouts": ["nChw16c"]})
    with pytest.raises(ValidationError, match="name every input and output"):
        OpSignature.model_validate({**relu.model_dump(), "layouts": ["plain", "plain"]})
    with pytest.raises(ValidationError):
        OpSignature.model_validate({**relu.model_dump(), "layouts": ["nChw4c", "plain"]})
