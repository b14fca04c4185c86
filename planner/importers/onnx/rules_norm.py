"""Rules for normalization: BatchNormalization (inference form) and LRN.

BatchNormalization normalizes with the running statistics (the planner's training=False);
those two inputs become "state" tensors, not params. ONNX's momentum weights the old running
value (running = momentum * running + (1 - momentum) * batch), the planner's (PyTorch's) the
batch, so the planner's momentum is 1 - ONNX's: a training graph built on the import updates
the statistics as the model's authors meant.
"""

from __future__ import annotations

from planner.importers.onnx.context import NodeCtx, rule
from planner.importers.onnx.errors import Unsupported


@rule("BatchNormalization")
def batch_norm(n: NodeCtx) -> None:
    if n.opset < 9 and n.attr("spatial", 1) == 0:
        raise Unsupported("BatchNormalization (spatial=0)")
    if n.attr("training_mode", 0):
        raise Unsupported("BatchNormalization (training_mode=1)")
    momentum = float(n.attr("momentum", 0.9))
    attrs = {"epsilon": float(n.attr("epsilon", 1e-5)),
             # 7 significant digits: ONNX stores momentum as float32.
             "momentum": float(f"{1.0 - momentum:.7g}"),
             "training": False}
    n.emit1("BatchNorm", [n.value(k) for k in range(5)], attrs, output=0)


@rule("LRN")
def lrn(n: NodeCtx) -> None:
    attrs = {"size": int(n.require_attr("size")), "alpha": float(n.attr("alpha", 1e-4)),
             "beta": float(n.attr("beta", 0.75)), "bias": float(n.attr("bias", 1.0))}
    n.emit1("LRN", [n.value(0)], attrs, output=0)
