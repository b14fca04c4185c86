"""Rules for ONNX's training losses: SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss
(opset 12+), as PyTorch exports `nn.CrossEntropyLoss` and `nn.NLLLoss` inside a model.

Both become the planner's SoftmaxCrossEntropy (mean over rows), whose scalar output
make_training_graph finds as the loss; the labels input gets role "label".

    scores (N, C, d1, ...)    -> SoftmaxCrossEntropy(scores, labels) with classes on axis 1
                                 and ONNX's ignore_index (absent: PyTorch's -100, which names
                                 no class)
    NLL of LogSoftmax(x)      -> SoftmaxCrossEntropy(log_probs, labels): the log-probabilities'
                                 own logsumexp is 0, so the value is NLL's, and the gradient
                                 reaching x through the LogSoftmax is softmax(x) - onehot, as
                                 through NLL

Not supported: class weights, reduction "sum" or "none", and NLL of anything but a LogSoftmax
over the class axis.
"""

from __future__ import annotations

from planner.importers.kit import Unsupported
from planner.importers.onnx.context import NodeCtx, Value, rule
from planner.importers.onnx.errors import OnnxImportError


@rule("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy(n: NodeCtx) -> None:
    _check(n)
    scores, labels = n.value(0), n.value(1)
    if n.output(1) is not None:
        n.emit1("LogSoftmax", [scores], {"axis": 1}, output=1)
    _loss(n, scores, labels)


@rule("NegativeLogLikelihoodLoss")
def negative_log_likelihood(n: NodeCtx) -> None:
    _check(n)
    log_probs = n.value(0)
    producer = n.imp.builder.producer(log_probs) if isinstance(log_probs, str) else None
    rank = len(n.shape(0))
    if producer is None or producer.op != "LogSoftmax" or \
            producer.attrs.get("axis") % rank != 1 % rank:
        raise Unsupported("NegativeLogLikelihoodLoss (of something other than a LogSoftmax "
                          "over the classes)")
    _loss(n, log_probs, n.value(1))


def _check(n: NodeCtx) -> None:
    if n.has_input(2):
        raise Unsupported(f"{n.op_type} (class weights)")
    if n.attr("reduction", "mean") != "mean":
        raise Unsupported(f"{n.op_type} (reduction {n.attr('reduction')})")
    scores, labels = n.type(0), n.type(1)
    if len(scores.shape) < 2 or labels.shape != scores.shape[:1] + scores.shape[2:]:
        raise OnnxImportError(f"node {n.label!r} ({n.op_type}): labels of shape "
                              f"{list(labels.shape)} do not fit scores of shape "
                              f"{list(scores.shape)}")
    if labels.dtype not in ("int64", "int32"):
        raise OnnxImportError(f"node {n.label!r} ({n.op_type}): labels are {labels.dtype}, not "
                              f"integer class ids")


def _loss(n: NodeCtx, scores: Value, labels: Value) -> None:
    """Output 0: the mean cross-entropy of scores (N, C, ...) against labels."""
    if isinstance(labels, str):
        n.imp.mark_label(labels)
    if n.type(1).dtype != "int64":
        raise Unsupported(f"{n.op_type} (int32 labels)")
    attrs = {"axis": 1}
    if n.attr("ignore_index") is not None:
        attrs["ignore_index"] = int(n.attr("ignore_index"))
    n.emit1("SoftmaxCrossEntropy", [scores, labels], attrs, output=0)
