"""3-D convolutions (torch's aten.convolution over (N, C, D, H, W)) as the planner's 2-D ones:
one 2-D convolution per depth tap of the kernel, over the depth slices that tap reads or writes,
summed.

Convolution: for tap kd (of KD, dilation dd), output depth od reads input depth
od * sd - pd + kd * dd. After padding depth by pd on both sides, a strided Slice of x gives
those OD slices at once; they become the batch of a Conv2D, (N * OD, C, H, W), with the tap's
(O, C / groups, KH, KW) filter; the KD results are added (AddN) and the depth axis put back
after the channels.

Transposed convolution: tap kd sends input depth i to output depth i * sd - pd + kd * dd. A
ConvTranspose2D of every input slice with the tap's (C, O / groups, KH, KW) filter is spread
along depth by sd (zeros between: a Pad of a new axis, folded into depth), shifted by kd * dd
(a Pad in front), the taps' results added, and the pd padded depths cropped from both ends
(output_padding extends the far end).

A 2-D output_padding of a stride or more (torch allows it below the dilation too) is taken from
the far pad first (those rows hold computed values: the padding crops them), then the rest, past
every tap, as zero rows: ConvTranspose2D's own output_padding up to stride - 1, a Pad beyond.

Gradients are the 2-D ones' (backward data and filter per tap, through the Slices and Pads), so
forward, backward data and backward filter run oneDNN's (CPU) and cuDNN's (GPU) 2-D
convolutions, priced and planned as they are (algorithms, workspaces).
"""

from __future__ import annotations

from planner.importers.kit import Const
from planner.importers.torch.context import NodeCtx, Value


def conv3d(n: NodeCtx, x: str | Const, w: str | Const, bias: object, strides: list[int],
           pads: list[int], dilations: list[int], groups: int,
           output_padding: list[int] | None) -> Value:
    """`output_padding` None: a convolution; else a transposed one."""
    sd, pd, dd = strides[0], pads[0], dilations[0]
    attrs = {"strides": strides[1:], "pads": pads[1:] * 2, "dilations": dilations[1:],
             "groups": groups}
    if output_padding is None:
        y = _convolution(n, x, w, sd, pd, dd, attrs)
    else:
        y = _transposed(n, x, w, sd, pd, dd, output_padding[0],
                        {**attrs, "output_padding": output_padding[1:]})
    return y if bias is None else n.emit1("BiasAdd", [y, bias], {"axis": 1})


def _tap(n: NodeCtx, w: str | Const, kd: int) -> str:
    """The filter's depth tap kd as a 2-D filter."""
    a, b, _, kh, kw = n.shape(w)
    tap = n.emit1("Slice", [w], {"starts": [kd], "ends": [kd + 1], "axes": [2]})
    return n.emit1("Reshape", [tap], {"shape": [a, b, kh, kw]})


def _as_batch(n: NodeCtx, x: str) -> str:
    """(N, C, D, H, W) -> (N * D, C, H, W)."""
    batch, channels, depth, height, width = n.shape(x)
    x = n.emit1("Transpose", [x], {"perm": [0, 2, 1, 3, 4]})
    return n.emit1("Reshape", [x], {"shape": [batch * depth, channels, height, width]})


def _from_batch(n: NodeCtx, y: str, batch: int) -> str:
    """(N * D, O, H, W) -> (N, O, D, H, W)."""
    rows, out, height, width = n.shape(y)
    y = n.emit1("Reshape", [y], {"shape": [batch, rows // batch, out, height, width]})
    return n.emit1("Transpose", [y], {"perm": [0, 2, 1, 3, 4]})


def _convolution(n: NodeCtx, x: str | Const, w: str | Const, sd: int, pd: int, dd: int,
                 attrs: dict) -> str:
    depth, taps = n.shape(x)[2], n.shape(w)[2]
    out_depth = (depth + 2 * pd - dd * (taps - 1) - 1) // sd + 1
    if out_depth < 1:
        raise n.fail(f"a kernel of {taps} taps (dilation {dd}) does not fit a depth of {depth} "
                     f"with padding {pd}")
    if pd:
        x = n.emit1("Pad", [x], {"pads": [0, 0, pd, 0, 0, 0, 0, pd, 0, 0]})
    terms = []
    for kd in range(taps):
        first = kd * dd
        last = first + (out_depth - 1) * sd
        picked = n.emit1("Slice", [x], {"starts": [first], "ends": [last + 1], "axes": [2],
                                        "steps": [sd]})
        terms.append(n.emit1("Conv2D", [_as_batch(n, picked), _tap(n, w, kd)], attrs))
    y = terms[0] if len(terms) == 1 else n.emit1("AddN", terms)
    return _from_batch(n, y, n.shape(x)[0])


def _transposed(n: NodeCtx, x: str | Const, w: str | Const, sd: int, pd: int, dd: int,
                extra: int, attrs: dict) -> str:
    batch, _, depth = n.shape(x)[:3]
    taps = n.shape(w)[2]
    full = (depth - 1) * sd + dd * (taps - 1) + 1 + extra  # before cropping pd from each end
    out_depth = full - 2 * pd
    if out_depth < 1:
        raise n.fail(f"a transposed kernel of {taps} taps leaves no output depth with padding "
                     f"{pd}")
    rows = _as_batch(n, x)
    terms = []
    for kd in range(taps):
        y = _from_batch(n, conv_transpose2d(n, rows, _tap(n, w, kd), attrs), batch)
        _, out, _, oh, ow = n.shape(y)
        if sd > 1:  # input depth i at i * sd: a zero-padded axis of sd after each, folded in
            y = n.emit1("Reshape", [y], {"shape": [batch, out, depth, 1, oh * ow]})
            y = n.emit1("Pad", [y], {"pads": [0, 0, 0, 0, 0, 0, 0, 0, sd - 1, 0]})
            y = n.emit1("Reshape", [y], {"shape": [batch, out, depth * sd, oh, ow]})
            y = n.emit1("Slice", [y], {"starts": [0], "ends": [(depth - 1) * sd + 1],
                                       "axes": [2]})
        before = kd * dd
        after = full - before - ((depth - 1) * sd + 1)
        if before or after:
            y = n.emit1("Pad", [y], {"pads": [0, 0, before, 0, 0, 0, 0, after, 0, 0]})
        terms.append(y)
    y = terms[0] if len(terms) == 1 else n.emit1("AddN", terms)
    if pd:
        y = n.emit1("Slice", [y], {"starts": [pd], "ends": [pd + out_depth], "axes": [2]})
    return y


def conv_transpose2d(n: NodeCtx, x: str | Const, w: str | Const, attrs: dict) -> str:
    """ConvTranspose2D with any output_padding torch takes (module docstring)."""
    strides, pads, extra = attrs["strides"], list(attrs["pads"]), list(attrs["output_padding"])
    zeros = [0, 0]
    for j in range(2):
        if extra[j] >= strides[j]:
            cut = min(pads[2 + j], extra[j])
            pads[2 + j] -= cut
            rest = extra[j] - cut
            extra[j] = min(rest, strides[j] - 1)
            zeros[j] = rest - extra[j]
    y = n.emit1("ConvTranspose2D", [x, w], {**attrs, "pads": pads, "output_padding": extra})
    if any(zeros):
        y = n.emit1("Pad", [y], {"pads": [0, 0, 0, 0, 0, 0, *zeros]})
    return y
