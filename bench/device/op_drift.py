"""Where a mixed-precision step drifts from the emulated reference: one op at a time.

A whole-step comparison (tests/codegen/mixed_cases.py) says only that the updates differ; it
cannot tell a kernel that rounds wrongly from a correct one whose one-ulp rounding flip a later
op amplifies (BatchNorm over a batch of 4 values multiplies its input's flip by |x| / std).
This runs the step once on an executor whose every tensor keeps its own bytes, reads every
value back, and evaluates each node's reference on the executor's own inputs: an op whose
output lies outside the kernel bound (2u|want| + 2^-16 max|want| for a low-type output,
2^-16 max|want| for a float32 one: tests/codegen/mixed_kernel_cases.py) is a kernel defect;
when every op is inside it, the step's error is amplification, and `amplified` names where the
step's error grows most (the ops whose output, run on the reference's own inputs, is farthest
from the reference).

    python bench/device/op_drift.py --backend cuda --model resnet --precision bf16-mixed
    python bench/device/op_drift.py --backend cpu ...   (the control: the CPU executor passes)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from planner.graph.interpret import as_float32, random_feeds, run  # noqa: E402
from planner.ops import get_op  # noqa: E402
from tests.codegen.helpers import build_module, start_state  # noqa: E402
from tests.codegen.mixed_cases import UNIT, mixed_graph, update_errors  # noqa: E402
from tests.codegen.mixed_kernel_cases import SUM  # noqa: E402


def excess(got: np.ndarray, want: np.ndarray, low: bool, u: float) -> float:
    """max |got - want| over the kernel bound (<= 1: inside it); inf where a non-finite differs."""
    g, w = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if g.size == 0:
        return 0.0
    fin = np.isfinite(w)
    if not (np.array_equal(np.isfinite(g), fin)
            and np.array_equal(g[~fin], w[~fin], equal_nan=True)):
        return float("inf")
    g, w = g[fin], w[fin]
    if g.size == 0:
        return 0.0
    bound = (2 * u * np.abs(w) if low else 0.0) + SUM * np.max(np.abs(w)) + 1e-30
    return float(np.max(np.abs(g - w) / bound))


def drift(model: str, precision: str, backend: str, folder: Path) -> dict:
    u = UNIT[precision]
    graph = mixed_graph(model, precision)
    module = build_module(graph, folder, backend)  # every tensor its own bytes
    state, feeds = start_state(graph), random_feeds(graph, seed=2)
    ex = module.Executor()
    ex.load_params(state)
    produced = [o for n in graph.nodes for o in n.outputs]
    got = {k: np.asarray(v) for k, v in ex.step(feeds, produced).items()}
    want = run(graph, feeds, state)  # the emulated reference, end to end
    env = {**{t.name: feeds[t.name] for t in graph.tensors if t.role in ("input", "label")},
           **state, **got}
    ops = []
    for n in graph.nodes:
        ref = get_op(n.op).reference([as_float32(np.asarray(env[i])) for i in n.inputs], n.attrs)
        for name, w in zip(n.outputs, ref, strict=True):
            t = graph.tensor(name)
            w = np.asarray(w).astype(t.dtype, copy=False)
            low = t.dtype != "float32"
            ops.append({"node": n.name, "op": n.op, "tensor": name, "dtype": t.dtype,
                        "kernel": excess(got[name], w, low, u),  # on the executor's inputs
                        "step": excess(got[name], want[name], low, u)})  # end to end
    algos = {d["name"]: d["algorithm"] for d in ex.stats()["ops"] if d.get("algorithm")}
    for o in ops:
        o["algorithm"] = algos.get(o["node"], "")
    params = {k: np.asarray(v) for k, v in ex.params().items()}
    new_state = dict(state)
    for t in graph.tensors:
        if t.updates is not None and t.name in want:
            new_state[t.updates] = want[t.name]
    updates = update_errors(graph, state, params, new_state)
    return {"model": model, "precision": precision, "backend": backend, "bound_4u": 4 * u,
            "worst_update": max(updates.items(), key=lambda kv: kv[1]), "ops": ops}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="cuda", choices=("cpu", "cuda"))
    ap.add_argument("--model", default="resnet")
    ap.add_argument("--precision", default="bf16-mixed", choices=sorted(UNIT))
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        r = drift(a.model, a.precision, a.backend, Path(tmp) / "drift")
    if a.out:
        a.out.write_text(json.dumps(r) + "\n")
    bad = [o for o in r["ops"] if o["kernel"] > 1]
    print(f"{a.model} {a.precision} on {a.backend}: worst update error {r['worst_update'][1]:.4f} "
          f"of the update ({r['worst_update'][0]}; bound {r['bound_4u']:.4f}); "
          f"{len(bad)} of {len(r['ops'])} op outputs outside the kernel bound")
    print("  outside the kernel bound (on the executor's own inputs):")
    for o in sorted(bad, key=lambda o: -o["kernel"])[:a.top]:
        print(f"    {o['kernel']:10.2f}x  {o['op']:<24} {o['node']} ({o['dtype']}) "
              f"{o['algorithm']}")
    convs = sorted({(o["op"], o["algorithm"]) for o in r["ops"] if o["algorithm"]})
    print("  convolution algorithms: " + ", ".join(f"{op} {a}" for op, a in convs))
    print("  farthest from the end-to-end reference (amplified drift):")
    for o in sorted(r["ops"], key=lambda o: -o["step"])[:a.top]:
        print(f"    {o['step']:10.2f}x  kernel {o['kernel']:6.2f}x  {o['op']:<24} {o['node']} "
              f"-> {o['tensor']}")


if __name__ == "__main__":
    main()
