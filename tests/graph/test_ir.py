"""Graph records, canonical JSON and validation rules (each error names node and tensor)."""

import json

import pytest
from pydantic import ValidationError

from planner.graph import Graph, GraphBuilder, GraphError, Node, Tensor, check_graph, to_networkx


def small_graph() -> Graph:
    b = GraphBuilder("small")
    x = b.input("x", (4, 3))
    w = b.param("w", (3, 5), init="glorot")
    bias = b.param("b", (5,), init="zeros")
    h = b.op("MatMul", [x, w], name="fc")
    h = b.op("BiasAdd", [h, bias])
    y = b.op("Relu", [h])
    return b.build(outputs=[y])


def test_builder_infers_shapes_and_fills_attrs():
    g = small_graph()
    assert g.tensor("relu").shape == (4, 5)
    assert g.node_map["fc"].attrs == {"transpose_a": False, "transpose_b": False}
    assert [n.name for n in g.nodes] == ["fc", "biasadd", "relu"]


def test_canonical_json_round_trip_is_byte_identical():
    g = small_graph()
    text = g.to_json()
    again = Graph.from_json(text)
    assert again == g
    assert again.to_json() == text
    assert json.loads(text)["kind"] == "inference"


def test_canonical_json_does_not_depend_on_attr_insertion_order():
    g = small_graph()
    node = g.nodes[0]
    flipped = node.model_copy(update={"attrs": dict(reversed(list(node.attrs.items())))})
    g2 = g.model_copy(update={"nodes": (flipped, *g.nodes[1:])})
    assert g2.to_json() == g.to_json()


def test_records_are_frozen():
    g = small_graph()
    with pytest.raises(ValidationError, match="frozen"):
        g.name = "other"  # type: ignore[misc]


def test_networkx_view_has_one_edge_per_producer_consumer_pair():
    nxg = to_networkx(small_graph())
    assert list(nxg.edges) == [("fc", "biasadd"), ("biasadd", "relu")]
    assert nxg.nodes["fc"]["op"] == "MatMul"


def replace_node(g: Graph, name: str, **update) -> Graph:
    nodes = tuple(n.model_copy(update=update) if n.name == name else n for n in g.nodes)
    return g.model_copy(update={"nodes": nodes})


def test_valid_graphs_pass_unchanged():
    """The checker returns the very graph it was given, for a forward graph and for a training
    graph (in-place updates, optimizer state, a tensor read by several nodes), and a node
    changed into another valid op still passes: its rules are about validity, not names."""
    from planner.frontend.autodiff import make_training_graph
    from planner.frontend.loss import attach_loss
    from planner.graph.optimizer import Optimizer

    g = small_graph()
    assert check_graph(g) is g
    trained = make_training_graph(attach_loss(g, "mse", "relu"), Optimizer(kind="adam"))
    assert any(t.updates for t in trained.tensors)
    assert check_graph(trained) is trained
    other = replace_node(g, "relu", op="Sigmoid")
    assert check_graph(other) is other



@pytest.mark.parametrize("mutate, message", [
    (lambda g: replace_node(g, "relu", op="Frobnicate"), r"node 'relu': unknown op 'Frobnicate'"),
    (lambda g: replace_node(g, "relu", inputs=("nope",)), r"node 'relu': input tensor 'nope'"),
    (lambda g: replace_node(g, "relu", outputs=("fc",)), r"'fc' is produced twice"),
    (lambda g: replace_node(g, "fc", attrs={"transpose_b": True, "transpose_a": False}),
     r"node 'fc': .*MatMul"),
    (lambda g: replace_node(g, "fc", attrs={"bogus": 1}), r"node 'fc': .*unknown attribute"),
    (lambda g: replace_node(g, "relu", inputs=("x", "x")), r"node 'relu': Relu takes 1 input"),
])
def test_validation_errors_name_node_and_tensor(mutate, message):
    with pytest.raises(GraphError, match=message):
        check_graph(mutate(small_graph()))


def test_declared_shape_mismatch_is_reported():
    g = small_graph()
    tensors = tuple(t.model_copy(update={"shape": (4, 6)}) if t.name == "relu" else t
                    for t in g.tensors)
    with pytest.raises(GraphError, match=r"'relu' is declared with shape \[4, 6\] but Relu gives"):
        check_graph(g.model_copy(update={"tensors": tensors}))


def test_declared_dtype_mismatch_is_reported():
    g = small_graph()
    tensors = tuple(t.model_copy(update={"dtype": "float64"}) if t.name == "relu" else t
                    for t in g.tensors)
    with pytest.raises(GraphError, match=r"'relu' is declared float64 but Relu gives float32"):
        check_graph(g.model_copy(update={"tensors": tensors}))


def test_cycle_is_reported_with_its_nodes():
    t = lambda n: Tensor(name=n, shape=(2,))  # noqa: E731
    g = Graph(tensors=(t("a"), t("b")), nodes=(
        Node(name="p", op="Relu", inputs=("b",), outputs=("a",)),
        Node(name="q", op="Relu", inputs=("a",), outputs=("b",))))
    with pytest.raises(GraphError, match=r"cycle: (p -> q -> p|q -> p -> q)"):
        check_graph(g)


def test_out_of_order_nodes_are_reported():
    g = small_graph()
    g = g.model_copy(update={"nodes": (g.nodes[1], g.nodes[0], g.nodes[2])})
    with pytest.raises(GraphError, match=r"node 'biasadd': input tensor 'fc' is used before"):
        check_graph(g)


def test_producing_a_param_without_updates_is_rejected():
    g = small_graph()
    tensors = tuple(t.model_copy(update={"role": "param"}) if t.name == "relu" else t
                    for t in g.tensors)
    with pytest.raises(GraphError, match=r"node 'relu': output tensor 'relu' has role 'param'"):
        check_graph(g.model_copy(update={"tensors": tensors}))


def test_graph_output_must_exist():
    g = small_graph().model_copy(update={"outputs": ("ghost",)})
    with pytest.raises(GraphError, match=r"graph output 'ghost'"):
        check_graph(g)


def in_place_graph(reader_after: bool) -> Graph:
    b = GraphBuilder("inplace")
    w = b.param("w", (3,), init="ones")
    nxt = b.add_tensor(Tensor(name="w:next", shape=(3,), role="param", updates="w"))
    nodes = [Node(name="upd", op="Relu", inputs=(w,), outputs=(nxt,))]
    reader = Node(name="late", op="Relu", inputs=(w,), outputs=("r",))
    b.add_tensor(Tensor(name="r", shape=(3,)))
    nodes = nodes + [reader] if reader_after else [reader] + nodes
    return Graph(tensors=tuple(b._tensors.values()), nodes=tuple(nodes))


def test_in_place_update_is_accepted_after_all_readers():
    check_graph(in_place_graph(reader_after=False))


def test_reading_a_param_after_its_in_place_update_is_rejected():
    with pytest.raises(GraphError, match=r"node 'late' reads 'w' after node 'upd' updated it"):
        check_graph(in_place_graph(reader_after=True))
