"""The columns convolutions (templates/cpu/runtime/kernels/conv_columns.cpp) against oneDNN's own
kernels for the same forward, data- and weight-gradient convolutions, op by op on this host:
ResNet-18's (width 0.5, 64 px, batch 8) and ResNet-50's (width 0.25, 64 px, batch 4)
last-stage convolutions on 2x2 maps, and a few on larger maps (where the columns' copies start
to cost what the batching gains: why the profile measures them on maps of at most
planner.costs.conv_layouts.COLUMNS_AREA pixels).

    PYTHONPATH=. python bench/bench_conv_columns.py [--rounds 5] [--steps 20] [--cases 2x2]
    PYTHONPATH=. python bench/bench_conv_columns.py --cases "64->3"

Each case is one Conv2D and its two gradients, each built twice (layout `any`: oneDNN's
pick; `columns`), each on one thread and on two; the rounds alternate the builds, and each
reads the op's time in the executor's own stats over --steps steps (the median), so load from
other jobs falls on both. Printed: per case, op and thread count the medians over rounds (us)
and columns / oneDNN. The image cases (IMAGE_CASES: a data gradient or transposed
convolution onto an image of a few channels) compare oneDNN's with the image-by-image kernel
(`image_columns`) the same way; on plain operands, where a step that keeps dy blocked gives
oneDNN's kernel no reorder of it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from codegen.profiling import copies_graph, placements_plan, warmed_executor  # noqa: E402
from planner.costs.signature import OpSignature  # noqa: E402
from planner.graph.interpret import random_feeds  # noqa: E402
from planner.ops import get_op  # noqa: E402
from planner.target.detect import detect  # noqa: E402

OPS = ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter")
# name: (x shape, w shape, geometry)
CASES = {
    "resnet18 3x3 256 2x2": ((8, 256, 2, 2), (256, 256, 3, 3), {"pads": [1, 1, 1, 1]}),
    "resnet18 3x3/2 128->256 4x4": ((8, 128, 4, 4), (256, 128, 3, 3),
                                    {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "resnet18 1x1/2 128->256": ((8, 128, 4, 4), (256, 128, 1, 1), {"strides": [2, 2]}),
    "resnet50 3x3 128 2x2": ((4, 128, 2, 2), (128, 128, 3, 3), {"pads": [1, 1, 1, 1]}),
    "resnet50 1x1 128->512 2x2": ((4, 128, 2, 2), (512, 128, 1, 1), {}),
    "resnet50 1x1 512->128 2x2": ((4, 512, 2, 2), (128, 512, 1, 1), {}),
    "resnet18 3x3 128 4x4": ((8, 128, 4, 4), (128, 128, 3, 3), {"pads": [1, 1, 1, 1]}),
    "resnet50 3x3 64 4x4": ((4, 64, 4, 4), (64, 64, 3, 3), {"pads": [1, 1, 1, 1]}),
    "resnet50 1x1 64->256 4x4": ((4, 64, 4, 4), (256, 64, 1, 1), {}),
    "resnet18 3x3 64 8x8": ((8, 64, 8, 8), (64, 64, 3, 3), {"pads": [1, 1, 1, 1]}),
    "resnet18 3x3 32 16x16": ((8, 32, 16, 16), (32, 32, 3, 3), {"pads": [1, 1, 1, 1]}),
    # DCGAN's (batch 32) discriminator's last stride-2 convolution, both halves of its batch:
    # 4x4 maps of 512 channels, a weight tensor (8 MB) read again for every image
    "dcgan 4x4/2 256->512 4x4": ((64, 256, 8, 8), (512, 256, 4, 4),
                                 {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
}
# The image-by-image data gradients (`image_columns`) against oneDNN's, onto images of a few
# channels: DCGAN's (batch 32, 64 px) discriminator's first layer seen from its gradient (both
# halves of its batch) and its generator's last transposed convolution. name: (op, input
# shapes, geometry)
IMAGE_CASES = {
    "dcgan d-conv1 data gradient 64->3": (
        "Conv2DBackpropInput", ((64, 64, 32, 32), (64, 3, 4, 4)),
        {"pads": [1, 1, 1, 1], "strides": [2, 2], "input_shape": [64, 3, 64, 64]}),
    "dcgan g-deconv5 64->3": (
        "ConvTranspose2D", ((32, 64, 32, 32), (64, 3, 4, 4)),
        {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
}


def executor(case, op, layout, threads, folder):
    x, w, geometry = case
    attrs = {"strides": [1, 1], "pads": [0, 0, 0, 0], "dilations": [1, 1], "groups": 1,
             **geometry, "layout": layout}
    forward = get_op("Conv2D")
    y = forward.reference([np.zeros(x), np.zeros(w)], forward.normalize_attrs(attrs))[0].shape
    shapes, attrs = {
        "Conv2D": ((x, w), attrs),
        "Conv2DBackpropInput": ((y, w), {**attrs, "input_shape": list(x)}),
        "Conv2DBackpropFilter": ((x, y), {**attrs, "filter_shape": list(w)})}[op]
    return signature_executor(op, shapes, attrs, threads, folder)


def signature_executor(op, shapes, attrs, threads, folder):
    """One op of these input shapes and attrs on `threads` threads, built and warmed: (its
    executor, its feeds)."""
    sig = OpSignature(op=op, shapes=shapes, dtypes=("float32",) * len(shapes), attrs=attrs)
    graph = copies_graph(sig, 1)
    feeds = random_feeds(graph, seed=0)
    plan = placements_plan(graph, detect(), [(threads, tuple(range(threads)))])
    return warmed_executor(plan, folder, {}, feeds), feeds


def op_seconds(ex, feeds, steps):
    times = []
    for _ in range(steps):
        ex.forward(feeds)
        (op,) = ex.stats()["ops"]
        times.append(op["end"] - op["start"])
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--cases", default="", help="only the cases whose names hold one of these "
                    "comma-separated words")
    args = ap.parse_args()
    words = [w for w in args.cases.split(",") if w]
    def wanted(name: str) -> bool:
        return not words or any(w in name for w in words)

    cases = {k: v for k, v in CASES.items() if wanted(k)}
    image_cases = {k: v for k, v in IMAGE_CASES.items() if wanted(k)}
    counts = [t for t in (1, 2) if t <= (os.cpu_count() or 1)]
    work = Path(tempfile.mkdtemp(prefix="bench-columns-"))
    built = {}
    for name, case in cases.items():
        for op in OPS:
            for layout in ("any", "columns"):
                for t in counts:
                    built[name, op, layout, t] = executor(case, op, layout, t,
                                                          work / f"{len(built)}")
        print(f"built {name}", file=sys.stderr)
    for name, (op, shapes, geometry) in image_cases.items():
        for layout in ("any", "image_columns"):
            for t in counts:
                built[name, op, layout, t] = signature_executor(
                    op, shapes, {**geometry, "layout": layout}, t, work / f"{len(built)}")
        print(f"built {name}", file=sys.stderr)
    seconds = {key: [] for key in built}
    for r in range(args.rounds):
        keys = list(built) if r % 2 == 0 else list(reversed(built))
        for key in keys:
            seconds[key].append(op_seconds(*built[key], args.steps))
    print(f"load average {os.getloadavg()[0]:.2f}; {args.rounds} rounds x {args.steps} steps;"
          " medians, us")
    print(f"{'case':34s} {'op':>19s} {'threads':>7s} {'oneDNN':>9s} {'columns':>9s} "
          f"{'ratio':>7s}")
    rows = [(name, op, "columns") for name in cases for op in OPS]
    rows += [(name, op, "image_columns") for name, (op, _, _) in image_cases.items()]
    for name, op, layout in rows:
        for t in counts:
            a = statistics.median(seconds[name, op, "any", t]) * 1e6
            c = statistics.median(seconds[name, op, layout, t]) * 1e6
            print(f"{name:34s} {op:>19s} {t:7d} {a:9.1f} {c:9.1f} {c / a:7.2f}")


if __name__ == "__main__":
    main()
