"""A cold first step (issue 83's acceptance): from process start to the end of a first training
step, with nothing compiled before, for Inductor and for `torch.compile(model,
backend="planner")`, each model in a fresh process of its own.

    python bench/bench_cold_first_step.py [--models mobilenet_v2,resnet18,transformer_encoder]
        [--engines inductor,planner,eager]

Cold means: Inductor gets a new, empty cache directory (TORCHINDUCTOR_CACHE_DIR: no FX-graph,
AOTAutograd or kernel cache), the backend a new, empty planner cache folder (PLANNER_CACHE: its
kernel library built first, then every plan and package, the host's kernels measured in the
background as on a new machine). Both import torch and the model in the same child script, run
one step of the same loop (forward, cross entropy, backward, AdamW) on bench/cpu_modules.py's
model and batch, and print the time since their process started and their peak RSS (the
child's ru_maxrss, the compiler processes' not counted: Inductor's workers and the planner's
CMake/g++ are children of theirs). Eager is given for scale. The load average is printed before
and after; each row is one run (a cold build is minutes of 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

CHILD = r"""
import json, os, resource, sys, time
start = float(sys.argv[3])
sys.path.insert(0, sys.argv[4])
import torch
from cpu_modules import example
engine = sys.argv[2]
model, inputs, y, loss_fn = example(sys.argv[1])
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
if engine == "inductor":
    run = torch.compile(model)
elif engine == "planner":
    import planner.torch  # registers the backend
    run = torch.compile(model, backend="planner")
else:
    run = model
loss = loss_fn(run(*inputs), y)
loss.backward()
opt.step()
float(loss)
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print("RESULT " + json.dumps({"first_step_s": time.time() - start, "peak_rss_mib": rss}),
      flush=True)
os._exit(0)  # the backend's background measuring child is not waited for
"""


def cold_run(model: str, engine: str) -> dict:
    """One cold first step of `engine` on `model` in a fresh process, with empty caches."""
    env = dict(os.environ)
    scratch = Path(tempfile.mkdtemp(prefix=f"cold-{engine}-"))
    env["TORCHINDUCTOR_CACHE_DIR"] = str(scratch / "inductor")
    env["PLANNER_CACHE"] = str(scratch / "planner")
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent), env.get("PYTHONPATH", "")])
    start = time.time()
    proc = subprocess.run([sys.executable, "-c", CHILD, model, engine, repr(start), str(HERE)],
                          env=env, capture_output=True, text=True, timeout=3600)
    line = next((s for s in proc.stdout.splitlines() if s.startswith("RESULT ")), None)
    if line is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise SystemExit(f"{model} {engine}: no result (exit {proc.returncode}): {tail}")
    return {"model": model, "engine": engine, **json.loads(line.removeprefix("RESULT "))}


def table(rows: list[dict], engines: list[str]) -> str:
    head = ("| model | " + " | ".join(f"{e} first step (s) | {e} peak RSS (MiB)" for e in engines)
            + " |\n| --- |" + " ---: | ---: |" * len(engines))
    out = [head]
    for model in dict.fromkeys(r["model"] for r in rows):
        cells = {r["engine"]: r for r in rows if r["model"] == model}
        out.append(f"| {model} | " + " | ".join(
            f"{cells[e]['first_step_s']:.1f} | {cells[e]['peak_rss_mib']:.0f}" for e in engines)
            + " |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mobilenet_v2,resnet18,transformer_encoder")
    ap.add_argument("--engines", default="inductor,planner,eager")
    args = ap.parse_args()
    engines = args.engines.split(",")
    print(f"load average before: {os.getloadavg()}", flush=True)
    rows = []
    for model in args.models.split(","):
        for engine in engines:
            rows.append(cold_run(model, engine))
            print(f"  {model} {engine}: {rows[-1]}", flush=True)
    print(f"load average after: {os.getloadavg()}\n")
    print(table(rows, engines))


if __name__ == "__main__":
    main()
