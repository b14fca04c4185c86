"""Issue 47's paper numbers: a GPT-2-small-sized model (12 layers, d 768, seq 256, batch 8 per
rank, AdamW) planned for 8-64 ranks of the xeon-8180 preset with the target's link estimate,
replicated, ZeRO-1 and ZeRO-3: the predicted step and the per-rank arena peak. Nothing runs.

    python bench/plan_zero3_ranks.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

MODEL = "zoo:gpt?batch=8&seq=256&dim=768&heads=12&layers=12"


def main() -> None:
    out = Path(tempfile.mkdtemp(prefix="zero3-ranks-"))
    print("ranks  sharding            predicted step ms  arena peak MiB")
    for ranks in (1, 8, 16, 32, 64):
        for mode in (("--shard-parameters",), ("--shard-optimizer",), ()):
            if ranks == 1 and mode:
                continue
            args = [sys.executable, "-m", "planner.cli", "plan", MODEL, "--train", "adamw",
                    "--target", "xeon-8180", "-o", str(out / f"{ranks}{''.join(mode)}.json"),
                    "--json", "--no-evaluation"]
            if ranks > 1:
                args += ["--data-parallel", str(ranks), *mode]
            run = subprocess.run(args, capture_output=True, text=True)
            name = mode[0][2:] if mode else "replicated"
            if run.returncode:
                print(f"{ranks:5d}  {name:18s}  {run.stderr.strip().splitlines()[-1]}")
                continue
            s = json.loads(run.stdout)
            print(f"{ranks:5d}  {name:18s}  {s['step_seconds'] * 1e3:17.1f}  "
                  f"{s['memory']['peak_bytes'] / 2**20:14.1f}", flush=True)


if __name__ == "__main__":
    main()
