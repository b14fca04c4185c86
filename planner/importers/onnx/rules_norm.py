"""Rules for normalization: BatchNormalization, LRN, InstanceNormalization and
GroupNormalization (the planner's GroupNorm).

BatchNormalization's running mean and variance become "state" tensors, not params. An
inference-mode node (what `torch.onnx.export` writes by default, and `model.eval()`) normalizes
with them (the planner's training=False): a training graph built on it trains with frozen
statistics, as PyTorch does in eval mode. A training-mode node normalizes with the batch's
statistics and updates the running ones (the planner's training=True, which make_training_graph
turns into in-place state updates); ONNX marks one by `training_mode=1` (opset 14+) or, before
opset 14, by naming the optional running-statistics outputs, which is what PyTorch writes for
`torch.onnx.export(..., training=torch.onnx.TrainingMode.TRAINING)`.

The update follows PyTorch's train(), not ONNX's text: ONNX's momentum weights the old running
value (running = momentum * running + (1 - momentum) * batch), PyTorch's the batch, so the
planner's momentum is 1 - ONNX's; and the running variance takes the batch's unbiased variance
(m / (m - 1) times the biased one, m the values per channel), as PyTorch's does, where ONNX's
reference takes the biased one.
"""

from __future__ import annotations

from planner.importers.kit import Unsupported
from planner.importers.onnx.context import NodeCtx, rule
from planner.importers.onnx.errors import OnnxImportError


@rule("BatchNormalization")
def batch_norm(n: NodeCtx) -> None:
    if n.opset < 9 and n.attr("spatial", 1) == 0:
        raise Unsupported("BatchNormalization (spatial=0)")
    training = _training_mode(n)
    momentum = float(n.attr("momentum", 0.9))
    attrs = {"epsilon": float(n.attr("epsilon", 1e-5)),
             # 7 significant digits: ONNX stores momentum as float32.
             "momentum": float(f"{1.0 - momentum:.7g}"),
             "training": training}
    inputs = [n.value(k) for k in range(5)]
    if not training:
        n.emit1("BatchNorm", inputs, attrs, output=0)
        return
    # Planner outputs: y, running mean, running var, saved mean, saved invstd. ONNX's outputs
    # 1-3 are the first four of those; its saved variance (output 4) has no planner value.
    n.emit("BatchNorm", inputs, attrs, outputs=[0, 1, 2, 3, None])


def _training_mode(n: NodeCtx) -> bool:
    if n.opset >= 14:
        return bool(n.attr("training_mode", 0))
    if n.opset < 7:
        return not n.attr("is_test", 0) and bool(n.output(1))
    return bool(n.output(1))


@rule("LRN")
def lrn(n: NodeCtx) -> None:
    attrs = {"size": int(n.require_attr("size")), "alpha": float(n.attr("alpha", 1e-4)),
             "beta": float(n.attr("beta", 0.75)), "bias": float(n.attr("bias", 1.0))}
    n.emit1("LRN", [n.value(0)], attrs, output=0)


@rule("InstanceNormalization")
def instance_normalization(n: NodeCtx) -> None:
    """InstanceNormalization(x (N, C, ...), scale, bias) is GroupNorm with one group per
    channel. Both exporters write nn.GroupNorm as Reshape (N, G, -1) -> InstanceNormalization
    with scale ones and bias zeros -> Reshape back -> Mul, Add: the G "channels" of the
    reshaped tensor are the groups, so that is this op's statistics exactly, and the constant
    scale and bias are Fill nodes (not trained)."""
    shape = n.shape(0)
    if len(shape) < 3:
        raise OnnxImportError(f"node {n.label!r} (InstanceNormalization): input of shape "
                              f"{list(shape)}; expected (N, C, d1, ...)")
    attrs = {"groups": shape[1], "epsilon": float(n.attr("epsilon", 1e-5))}
    n.emit("GroupNorm", [n.value(0), n.value(1), n.value(2)], attrs, outputs=[0, None, None])


@rule("GroupNormalization")
def group_normalization(n: NodeCtx) -> None:
    """GroupNormalization (opset 21: scale and bias per channel) is the planner's GroupNorm;
    opset 18's per-group scale and bias only where groups == channels."""
    shape = n.shape(0)
    groups = int(n.require_attr("num_groups"))
    if len(shape) < 3 or groups < 1 or shape[1] % groups:
        raise OnnxImportError(f"node {n.label!r} (GroupNormalization): {groups} groups do not "
                              f"divide the channels of an input of shape {list(shape)}")
    if n.shape(1) != (shape[1],):
        raise Unsupported("GroupNormalization (scale and bias per group)")
    attrs = {"groups": groups, "epsilon": float(n.attr("epsilon", 1e-5))}
    n.emit("GroupNorm", [n.value(0), n.value(1), n.value(2)], attrs, outputs=[0, None, None])
