"""3-D convolutions (torch's aten.convolution over (N, C, D, H, W)) as the planner's 2-D ones:
one Conv2D per depth tap of the kernel, over the depth slices that tap reads, summed.

For tap kd (of KD, dilation dd), output depth od reads input depth od * sd - pd + kd * dd: after
padding depth by pd on both sides, a strided Slice of x gives those OD slices at once. They
become the batch of a Conv2D, (N * OD, C, H, W), with the tap's (O, C / groups, KH, KW) filter;
the KD results are added (AddN) and the depth axis put back after the channels. Gradients are
the 2-D ones' (backward data and filter per tap, through the Slices and the Pad), so forward,
backward data and backward filter run oneDNN's (CPU) and cuDNN's (GPU) 2-D convolutions, priced
and planned as they are (algorithms, workspaces). Transposed 3-D convolutions are refused.
"""

from __future__ import annotations

from planner.importers.onnx.errors import Unsupported
from planner.importers.onnx.values import Const
from planner.torch.context import NodeCtx, Value


def conv3d(n: NodeCtx, x: str | Const, w: str | Const, bias: object, strides: list[int],
           pads: list[int], dilations: list[int], groups: int, transposed: bool) -> Value:
    if transposed:
        raise Unsupported(f"{n.op} (3-D transposed)")
    batch, _, depth, height, width = n.shape(x)
    out, per_group, taps, kh, kw = n.shape(w)
    sd, pd, dd = strides[0], pads[0], dilations[0]
    out_depth = (depth + 2 * pd - dd * (taps - 1) - 1) // sd + 1
    if out_depth < 1:
        raise n.fail(f"a kernel of {taps} taps (dilation {dd}) does not fit a depth of {depth} "
                     f"with padding {pd}")
    if pd:
        x = n.emit1("Pad", [x], {"pads": [0, 0, pd, 0, 0, 0, 0, pd, 0, 0]})
    attrs = {"strides": strides[1:], "pads": pads[1:] * 2, "dilations": dilations[1:],
             "groups": groups}
    terms = []
    for kd in range(taps):
        first = kd * dd
        last = first + (out_depth - 1) * sd
        picked = n.emit1("Slice", [x], {"starts": [first], "ends": [last + 1], "axes": [2],
                                        "steps": [sd]})
        picked = n.emit1("Transpose", [picked], {"perm": [0, 2, 1, 3, 4]})
        picked = n.emit1("Reshape", [picked], {"shape": [batch * out_depth, n.shape(picked)[2],
                                                         height, width]})
        tap = n.emit1("Slice", [w], {"starts": [kd], "ends": [kd + 1], "axes": [2]})
        tap = n.emit1("Reshape", [tap], {"shape": [out, per_group, kh, kw]})
        terms.append(n.emit1("Conv2D", [picked, tap], attrs))
    y = terms[0] if len(terms) == 1 else n.emit1("AddN", terms)
    _, _, oh, ow = n.shape(y)
    y = n.emit1("Reshape", [y], {"shape": [batch, out_depth, out, oh, ow]})
    y = n.emit1("Transpose", [y], {"perm": [0, 2, 1, 3, 4]})
    return y if bias is None else n.emit1("BiasAdd", [y, bias], {"axis": 1})
