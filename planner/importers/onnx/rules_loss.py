"""Rules for ONNX's training losses: SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss
(opset 12+), as PyTorch exports `nn.CrossEntropyLoss` and `nn.NLLLoss` inside a model.

Both become the planner's SoftmaxCrossEntropy (mean over rows), whose scalar output
make_training_graph finds as the loss; the labels input gets role "label".

    scores (N, C)             -> SoftmaxCrossEntropy(scores, labels)
    scores (N, C, d1, ...)    -> classes moved last and rows flattened: (N * d1 * ..., C)
    NLL of LogSoftmax(x)      -> SoftmaxCrossEntropy(log_probs, labels): the log-probabilities'
                                 own logsumexp is 0, so the value is NLL's, and the gradient
                                 reaching x through the LogSoftmax is softmax(x) - onehot, as
                                 through NLL

Not supported: class weights, reduction "sum" or "none", an ignore_index that is a class id
(a negative one, PyTorch's default -100, names no class: labels holding it are refused, not
skipped), and NLL of anything but a LogSoftmax over the class axis.
"""

from __future__ import annotations

from planner.importers.onnx.context import NodeCtx, Value, rule
from planner.importers.onnx.errors import OnnxImportError, Unsupported


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
    ignore = n.attr("ignore_index")
    if ignore is not None and int(ignore) >= 0:
        raise Unsupported(f"{n.op_type} (ignore_index {int(ignore)})")
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
    shape = n.shape(0)
    classes, rows = shape[1], n.type(1).size
    if isinstance(labels, str):
        n.imp.mark_label(labels)
    if n.type(1).dtype != "int64":
        raise Unsupported(f"{n.op_type} (int32 labels)")
    if len(shape) > 2:
        perm = [0, *range(2, len(shape)), 1]
        scores = n.emit1("Transpose", [scores], {"perm": perm})
        scores = n.emit1("Reshape", [scores], {"shape": [rows, classes]})
        labels = n.emit1("Reshape", [labels], {"shape": [rows]})
    n.emit1("SoftmaxCrossEntropy", [scores, labels], output=0)
