"""The onnx package's one-node conformance cases (onnx/backend/test/data/pytorch-converted) as
this planner's ops see them: the op-family tests (conv, pool, norm) check their references
against the outputs the onnx package recorded."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import helper, numpy_helper

ONNX_CASES = Path(onnx.__file__).parent / "backend" / "test" / "data" / "pytorch-converted"
# ONNX attribute -> this planner's (the importer's job in general; a few names suffice here).
ONNX_ATTRS = {"kernel_shape": "kernel", "group": "groups", "strides": "strides", "pads": "pads",
              "dilations": "dilations", "output_padding": "output_padding",
              "epsilon": "epsilon", "ceil_mode": "ceil_mode",
              "count_include_pad": "count_include_pad"}


def onnx_case(name):
    """(ONNX op type, attrs renamed for this planner, input arrays, expected output) of a
    one-node conformance case."""
    model = onnx.load(ONNX_CASES / name / "model.onnx")
    (node,) = model.graph.node
    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    data = ONNX_CASES / name / "test_data_set_0"
    fed = [i.name for i in model.graph.input if i.name not in values]
    for k, i in enumerate(fed):
        values[i] = numpy_helper.to_array(onnx.load_tensor(data / f"input_{k}.pb"))
    attrs = {ONNX_ATTRS[a.name]: helper.get_attribute_value(a) for a in node.attribute
             if a.name in ONNX_ATTRS}
    if node.op_type in ("Conv", "ConvTranspose"):
        attrs.pop("kernel")
    expected = numpy_helper.to_array(onnx.load_tensor(data / "output_0.pb"))
    return node.op_type, attrs, [values[i] for i in node.input], expected
