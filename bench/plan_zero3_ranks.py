"""Issue 47's paper numbers: a GPT-2-small-sized model (12 layers, d 768, seq 256, batch 8 per
rank, AdamW) planned for 8-64 ranks of the xeon-8180 preset with the target's link estimate,
replicated, ZeRO-1 and ZeRO-3: the predicted step and the per-rank arena peak. Nothing runs.
For ZeRO-3, what the prediction is made of (planner.report.explain_gather per all-gather):
the comm lane's busy time, how many gathers their readers wait for and the seconds they wait.

    python bench/plan_zero3_ranks.py [--ranks 8,16,32,64] [--lane N]

--lane N prints the N gathers whose readers wait longest, with explain's reason, per plan.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's planner, whatever else is installed

MODEL = "zoo:gpt?batch=8&seq=256&dim=768&heads=12&layers=12"


def lane(path: Path, worst: int) -> tuple[str, list[str]]:
    """The ZeRO-3 plan's comm lane in words: busy ms, gathers waited for and the wait."""
    from planner.plan import load_plan
    from planner.report.explain_gather import explain_gather

    p = load_plan(str(path))
    busy = sum(o.end - o.start for o in p.ops if not o.cpus)
    gathers = [explain_gather(p, n.name) for n in p.graph.nodes if n.op == "AllGather"]
    waits = [e for e in gathers if e["stall_seconds"] > 0]
    line = (f"  comm lane busy {busy * 1e3:.1f} ms; {len(gathers)} all-gathers, "
            f"{len(waits)} waited for, {sum(e['stall_seconds'] for e in waits) * 1e3:.1f} ms")
    rows = [f"    {e['all_gather']}: {e['bytes'] / 2**20:.1f} MiB, {e['seconds'] * 1e3:.2f} ms, "
            f"{e['prefetch']} op(s) ahead of {e['first_reader']}, waits "
            f"{e['stall_seconds'] * 1e3:.2f} ms: not earlier: {e['not_earlier']}"
            for e in sorted(waits, key=lambda e: -e["stall_seconds"])[:worst]]
    return line, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="8,16,32,64")
    ap.add_argument("--lane", type=int, default=0, metavar="N")
    args = ap.parse_args()
    out = Path(tempfile.mkdtemp(prefix="zero3-ranks-"))
    print("ranks  sharding            predicted step ms  arena peak MiB")
    for ranks in (1, *map(int, args.ranks.split(","))):
        for mode in (("--shard-parameters",), ("--shard-optimizer",), ()):
            if ranks == 1 and mode:
                continue
            path = out / f"{ranks}{''.join(mode)}.json"
            cmd = [sys.executable, "-m", "planner.cli", "plan", MODEL, "--train", "adamw",
                   "--target", "xeon-8180", "-o", str(path), "--json", "--no-evaluation"]
            if ranks > 1:
                cmd += ["--data-parallel", str(ranks), *mode]
            run = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            name = mode[0][2:] if mode else "replicated"
            if run.returncode:
                print(f"{ranks:5d}  {name:18s}  {run.stderr.strip().splitlines()[-1]}")
                continue
            s = json.loads(run.stdout)
            print(f"{ranks:5d}  {name:18s}  {s['step_seconds'] * 1e3:17.1f}  "
                  f"{s['memory']['peak_bytes'] / 2**20:14.1f}", flush=True)
            if mode == ("--shard-parameters",):
                line, rows = lane(path, args.lane)
                print("\n".join([line, *rows]), flush=True)


if __name__ == "__main__":
    main()
