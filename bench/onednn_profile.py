"""Where a model's oneDNN time goes, primitive by primitive: its main schedule run under
`ONEDNN_VERBOSE=profile_exec` and oneDNN's own per-call times summed by primitive kind and, for
reorders, by source -> destination layout (issue 60: the layout reorders around each
convolution that planner/step/blocked.py keeps images blocked to avoid).

    PYTHONPATH=. python bench/onednn_profile.py [--models resnet-50,resnet18] [--steps 5]

Per model (bench_roofline's `_made`: bench_neighbours' zoo graphs and bench/cpu_modules.py's
nn.Modules, SGD, default measured costs), in a process of its own with the variable set before
oneDNN loads: the main schedule forced, 5 warm-up steps, then `--steps` steps whose verbose
lines are summed. Printed per model: ms per step and calls per step of each primitive kind
(convolution by direction, reorder, sgemm of the columns kernels, ...) and of the heaviest
reorders by layout pair (abcd: plain NCHW or OIHW; aBcd16b: nChw16c; ABcd16b16a: a blocked
weight layout).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
START, END = "=====onednn_profile: steps start", "=====onednn_profile: steps end"


def summed(lines: list[str], steps: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """(kind -> [ms per step, calls per step], reorder "src -> dst" -> the same) of the verbose
    `exec` lines between the markers.

    >>> lines = [START,
    ...   "onednn_verbose,exec,cpu,reorder,jit:uni,undef,src_f32::blocked:abcd::f0 "
    ...   "dst_f32::blocked:aBcd16b::f0,,,4x16x8x8,0.5",
    ...   "onednn_verbose,exec,cpu,convolution,jit:avx512_core,forward_training,src,,,mb4,1.5",
    ...   END]
    >>> kinds, reorders = summed(lines, 1)
    >>> kinds["convolution forward_training"], reorders["abcd -> aBcd16b"]
    ([1.5, 1.0], [0.5, 1.0])
    """
    kinds: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    reorders: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    inside = False
    for line in lines:
        if line.startswith(START) or line.startswith(END):
            inside = line.startswith(START)
            continue
        fields = line.split(",")
        if not inside or len(fields) < 6 or fields[:2] != ["onednn_verbose", "exec"]:
            continue
        try:
            ms = float(fields[-1])
        except ValueError:
            continue
        kind = fields[3] if fields[3] in ("reorder", "gemm_api") else f"{fields[3]} {fields[5]}"
        for table, key in ((kinds, kind),) + (
                ((reorders, " -> ".join(re.findall(r"blocked:(\w+)", line))),)
                if fields[3] == "reorder" else ()):
            table[key][0] += ms / steps
            table[key][1] += 1 / steps
    return dict(kinds), dict(reorders)


def _run_one(label: str, steps: int) -> None:
    """(In the child, ONEDNN_VERBOSE set.) The model's main schedule: warm-up, then marked
    steps."""
    import tempfile
    import warnings

    sys.path.insert(0, str(HERE.parent))
    sys.path.insert(0, str(HERE))
    warnings.simplefilter("ignore")
    from bench_roofline import _made

    _, ex, step = _made(label, Path(tempfile.mkdtemp()), "measured")
    ex.set_variant("main")
    for _ in range(5):
        step()
    print(START, flush=True)
    for _ in range(steps):
        step()
    print(END, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet-50,resnet18")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return _run_one(args.child, args.steps)
    print(f"load average {os.getloadavg()[0]:.2f}; ms and calls per step, main schedule, "
          f"{args.steps} steps")
    for label in args.models.split(","):
        run = subprocess.run([sys.executable, __file__, "--child", label, "--steps",
                              str(args.steps)], capture_output=True, text=True,
                             env={**os.environ, "ONEDNN_VERBOSE": "profile_exec"})
        if run.returncode != 0:
            print(f"{label}: failed: {run.stderr.strip().splitlines()[-1:]}")
            continue
        kinds, reorders = summed(run.stdout.splitlines(), args.steps)
        print(f"\n{label}: oneDNN {sum(v[0] for v in kinds.values()):.2f} ms a step")
        for name, (ms, calls) in sorted(kinds.items(), key=lambda kv: -kv[1][0]):
            print(f"  {name:40s} {ms:8.3f} ms {calls:6.0f} calls")
        for name, (ms, calls) in sorted(reorders.items(), key=lambda kv: -kv[1][0])[:8]:
            print(f"    reorder {name:32s} {ms:8.3f} ms {calls:6.0f} calls")


if __name__ == "__main__":
    main()
