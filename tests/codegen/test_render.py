"""Rendering a plan into executor sources: no compiler needed."""

from __future__ import annotations

import re

import pytest

from codegen import support
from codegen.backends import Runtime
from codegen.errors import UnsupportedError
from codegen.layout import arena_layout, own_layout
from codegen.render import c_string, encode_attrs, module_name, render, render_files
from planner.errors import PlanError
from planner.frontend.autodiff import make_training_graph
from planner.graph.optimizer import Optimizer
from planner.ir.graph import Graph, Node, Tensor
from planner.zoo import build
from tests.codegen.helpers import host_plan


@pytest.fixture(scope="module")
def mlp_plan():
    g = make_training_graph(build("mlp", batch=2, hidden=[4], in_features=3, classes=2),
                            Optimizer(kind="sgd", lr=0.1))
    return host_plan(g)


def test_tree_holds_the_schedule_cmake_package_and_plan(mlp_plan, tmp_path):
    tree = render(mlp_plan, tmp_path / "mlp-small")
    assert tree.name == "mlp_small"
    assert sorted(p.name for p in tree.dir.iterdir()) == sorted(tree.files)
    schedule = tree.files["schedule.cpp"]
    assert {(p.name, p.op, p.threads) for p in mlp_plan.ops} == set(schedule_ops(schedule))
    assert tree.files["plan.json"] == mlp_plan.to_json()
    assert "def Executor(concurrent=True, init=False, seed=0, **options)" in \
        tree.files["__init__.py"]


def test_ops_appear_in_plan_order(mlp_plan):
    schedule = render_files(mlp_plan, "m")["schedule.cpp"]
    ops = sorted(mlp_plan.ops, key=lambda p: p.order)
    assert [(p.name, p.op, p.threads) for p in ops] == schedule_ops(schedule)


def schedule_ops(source: str) -> list[tuple[str, str, int]]:
    """(name, op, threads) of every kOps row of a schedule.cpp, its strings read from kBytes."""
    blob = bytes(int(b) for b in re.findall(r"\d+", source.split("kBytes[] = {")[1]
                                            .split("}")[0]))

    def at(k: str) -> str:
        k = int(k)
        return blob[k:blob.index(b"\0", k)].decode()

    ops = source.split("kOps[] = {")[1].split("};")[0]
    return [(at(a), at(b), int(c)) for a, b, c in
            re.findall(r"\{kStrings \+ (\d+), kStrings \+ (\d+), (\d+),", ops)]


def test_rendering_is_deterministic_and_unchanged_files_are_not_rewritten(mlp_plan, tmp_path):
    first = render(mlp_plan, tmp_path / "m")
    stamp = {f: (tmp_path / "m" / f).stat().st_mtime_ns for f in first.files}
    second = render(mlp_plan, tmp_path / "m")
    assert first.files == second.files
    assert stamp == {f: (tmp_path / "m" / f).stat().st_mtime_ns for f in first.files}


def test_updates_share_their_target_bytes_and_views_their_input(mlp_plan):
    g = mlp_plan.graph
    lay = own_layout(g)
    for t in g.tensors:
        if t.updates:
            assert lay.offsets[t.name] == lay.offsets[t.updates]
            assert lay.alias_of[t.name] == t.updates
    roots = [t for t in g.tensors if t.name not in lay.alias_of]
    spans = sorted((lay.offsets[t.name], lay.offsets[t.name] + t.nbytes) for t in roots)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))
    assert all(lay.offsets[t.name] % 64 == 0 for t in g.tensors)
    assert lay.bytes >= spans[-1][1]


def test_memory_plan_offsets_replace_our_layout(mlp_plan):
    g = mlp_plan.graph
    planned = tuple({"tensor": t.name, "offset": 128 * i, "placement": "device"}
                    for i, t in enumerate(g.tensors))
    lay = arena_layout(g, planned)
    assert lay.offsets[g.tensors[3].name] == 384
    # A copy of a tensor (a recompute's, a prefetch's, an offload's host slot) is a row of its
    # own at its planned offset, in the arena or the host store.
    x = g.tensors[0]
    copies = ({"name": f"{x.name}@host", "tensor": x.name, "offset": 0, "placement": "host"},
              {"name": f"{x.name}@prefetch", "tensor": x.name, "offset": 4096,
               "placement": "device"})
    lay = arena_layout(g, planned + copies)
    assert [(c.name, c.offset, c.host) for c in lay.copies] == [
        (f"{x.name}@host", 0, True), (f"{x.name}@prefetch", 4096, False)]
    assert lay.host_bytes == -(-x.nbytes // 64) * 64
    assert lay.bytes >= 4096 + x.nbytes


def test_an_incomplete_memory_plan_is_refused_naming_the_tensor(mlp_plan):
    g = mlp_plan.graph
    last = g.tensors[-1].name
    planned = tuple({"tensor": t.name, "offset": 128 * i, "placement": "device"}
                    for i, t in enumerate(g.tensors))
    with pytest.raises(PlanError, match=f"gives tensor '{re.escape(last)}' no device offset"):
        arena_layout(g, planned[:-1])
    with pytest.raises(PlanError, match="no memory plan"):
        arena_layout(g, ())


def test_every_unsupported_op_and_dtype_is_named_at_once(tmp_path):
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "eltwise.cpp").write_text(
        'PLANNER_REGISTER_KERNELS(eltwise) {\n  r["Relu"] = relu;\n}\n')
    only_relu = Runtime("cpu", "CPU", "planner_cpu_rt", tmp_path, tmp_path, frozenset({"float32"}))
    g = Graph(name="g", tensors=(Tensor(name="x", shape=(2,), role="input"),
                                 Tensor(name="y", shape=(2,)), Tensor(name="z", shape=(2,)),
                                 Tensor(name="w", shape=(2,), dtype="int64")),
              nodes=(Node(name="e", op="Exp", inputs=("x",), outputs=("y",)),
                     Node(name="s", op="Sqrt", inputs=("y",), outputs=("z",)),
                     Node(name="r", op="Relu", inputs=("z",), outputs=("w",))),
              outputs=("w",))
    assert only_relu.ops == {"Relu"}
    with pytest.raises(UnsupportedError) as e:
        support.check(g, only_relu)
    assert "op Exp (node 'e')" in str(e.value) and "op Sqrt (node 's')" in str(e.value)
    assert "dtype int64 not supported (tensor 'w')" in str(e.value)


def test_unsupported_dtype_is_named():
    """float64 runs where a kernel declares it (Relu does, LeakyRelu does not): the op, the
    dtype and the node named."""
    g = Graph(name="g", tensors=(Tensor(name="x", shape=(2,), dtype="float64", role="input"),
                                 Tensor(name="y", shape=(2,), dtype="float64")),
              nodes=(Node(name="r", op="LeakyRelu", inputs=("x",), outputs=("y",)),),
              outputs=("y",))
    with pytest.raises(UnsupportedError,
                       match=r"no kernel for op LeakyRelu in float64 \(node 'r'\)"):
        render_files(host_plan(g), "g")


def test_a_gpu_plan_renders_for_cuda_and_an_unknown_backend_is_refused():
    from codegen.backends import runtime_for
    from planner.pipeline import plan
    from planner.target import preset

    p = plan(build("mlp", batch=2, hidden=[4], in_features=3, classes=2), preset("k40c-12gb"))
    assert "planner_cuda_rt" in render_files(p, "mlp")["__init__.py"]
    with pytest.raises(UnsupportedError, match="is a tpu plan"):
        runtime_for(p.model_copy(update={"backend": "tpu"}))


def test_attrs_are_spelled_out_and_slices_resolved():
    conv = Node(name="c", op="Conv2D", inputs=("x", "w"), outputs=("y",),
                attrs={"strides": [2, 2]})
    assert encode_attrs(None, conv) == "dilations=1,1;groups=1;pads=0,0,0,0;strides=2,2"
    g = Graph(name="g", tensors=(Tensor(name="x", shape=(4, 10), role="input"),
                                 Tensor(name="y", shape=(4, 3))),
              nodes=(Node(name="s", op="Slice", inputs=("x",), outputs=("y",),
                          attrs={"starts": [-4], "ends": [100], "axes": [1],
                                 "steps": [2]}),), outputs=("y",))
    text = encode_attrs(g, g.nodes[0])
    assert "begin=0,6;" in text and "step=1,2" in text


def test_names_become_identifiers_and_c_strings():
    assert module_name("3-layer mlp") == "plan_3_layer_mlp"
    assert module_name("class") == "plan_class"
    assert c_string('a"b\\c?\n') == '"a\\"b\\\\c\\077\\012"'
