"""PyTorch's OpInfo database through the torch front end (issue 46): every float32 OpInfo of
op_db, up to 3 of its samples each (and, issue 57, up to 8 of its held-out reference inputs),
exported, imported and run forward and backward on the reference interpreter against torch in
float64 (tests/importers/opinfo_cases.py); prints the issue's table, the families' clean/tried
counts and the ATen ops refused most often, per input set.

    python bench/opinfo_sweep.py [--jobs 2] [--inputs sample|reference|both] [--write]
                                 [--top N] [--stages reference|planned|built|matches]
                                 [--dtype float32|complex64] [NAME ...]

--write rewrites the input set's expectations file (tests/importers/opinfo_expectations.json,
opinfo_reference_expectations.json: what tests/importers/test_opinfo.py expects of each
OpInfo) and, for the sample inputs, docs/supported-ops.md, whose per-family counts come from
it: `make opinfo` runs both sets with --write on two processes.

--stages planned|built|matches (issue 86) goes on past the reference interpreter, one sample
per OpInfo, up to that stage: planned for this host, built into the CPU executor (a package
per fixed group of OpInfos, kept in the host's package cache by its plan's digest, so that a
rerun compiles nothing), run forward and backward against torch (tests/helpers/
opinfo_stages.py); prints the staged counts and the time per OpInfo. With --write (at
matches) it rewrites tests/importers/opinfo_staged_expectations.json and docs/opinfo-stages.md:
`make opinfo-staged`.

--dtype complex64 (issue 86) sweeps the OpInfos that support complex64 instead, their samples
drawn in complex64, complex tensors held and given out as their planes (tests/importers/
opinfo_cases.py says how), into the complex64 expectations files (opinfo_complex64_*.json)
and docs/opinfo-complex64.md: `make opinfo-complex64` runs both input sets and the stages.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.importers.opinfo_cases import (  # noqa: E402
    DTYPES,
    Expected,
    expectations_json,
    expectations_path,
    load_expectations,
    sweep,
    table,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="processes (default: 2, or 1 on one core)")
    parser.add_argument("--write", action="store_true",
                        help="rewrite the expectations file and docs/supported-ops.md")
    parser.add_argument("--top", type=int, default=25, help="how many refused ops to list")
    parser.add_argument("--inputs", choices=("sample", "reference", "both"), default="sample",
                        help="the OpInfos' sample inputs, their held-out reference inputs, "
                             "or both in turn (default: sample)")
    parser.add_argument("--stages", choices=("reference", "planned", "built", "matches"),
                        default="reference",
                        help="the last stage: the reference interpreter's check (default), "
                             "or on through planning, the executor's build, its run")
    parser.add_argument("--dtype", choices=DTYPES, default="float32",
                        help="the dtype the OpInfos' samples are drawn in (default: float32)")
    parser.add_argument("names", nargs="*", help="only these OpInfos (default: all)")
    args = parser.parse_args(argv)
    if args.stages != "reference":
        if args.inputs != "sample" or (args.write and args.stages != "matches"):
            parser.error("--stages: the sample inputs only, and --write at matches only")
        return _staged(args)
    for inputs in (("sample", "reference") if args.inputs == "both" else (args.inputs,)):
        print(f"## {inputs} inputs")
        _sweep(args, inputs)
    return 0


def _sweep(args: argparse.Namespace, inputs: str) -> None:
    start = time.perf_counter()
    count = [0]

    def progress(o) -> None:
        count[0] += 1
        print(f"[{count[0]}] {o.name}: {o.status}", file=sys.stderr, flush=True)

    outcomes = sweep(args.names or None, jobs=args.jobs, progress=progress, inputs=inputs,
                     dtype=args.dtype)
    seconds = time.perf_counter() - start
    print(table(outcomes, args.dtype))
    refused = collections.Counter(
        op for o in outcomes if o.status == "refused"
        for op in re.findall(r"(aten\.[A-Za-z0-9_]+\.[A-Za-z0-9_]+)", o.detail.split(" (node")[0]))
    print(f"\nATen ops refused, by OpInfos they block (top {args.top}):")
    for op, n in refused.most_common(args.top):
        print(f"  {n:>4}  {op}")
    path = expectations_path(inputs, args.dtype)
    old = load_expectations(path)
    changed = [o.name for o in outcomes if o.name in old and old[o.name].outcome != o.expectation]
    print(f"\n{len(changed)} OpInfos differ from {path.name}"
          + (f": {', '.join(changed[:40])}" if changed else ""))
    if args.write:
        rows = dict(old) if args.names else {}  # a subset updates its rows only
        rows.update({o.name: Expected(o.family, o.expectation) for o in outcomes})
        path.write_text(expectations_json(rows), encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")
        if inputs == "sample" and args.dtype == "float32":
            from planner.importers.supported_ops import supported_ops_page

            (ROOT / "docs" / "supported-ops.md").write_text(supported_ops_page(),
                                                            encoding="utf-8")
            print("wrote docs/supported-ops.md")
    load = os.getloadavg()
    print(f"({seconds:.0f} s on {args.jobs} processes; load average {load[0]:.2f} "
          f"{load[1]:.2f} {load[2]:.2f})\n")


def _staged(args: argparse.Namespace) -> int:
    """The staged sweep; exit status 1 when a value is off or a stage crashes, at any stage
    (said on stderr too)."""
    from planner.importers.opinfo_stages_page import (
        load_expectations,
        staged_expectations,
        table,
    )
    from tests.helpers.opinfo_stages import expectations_json, staged_sweep

    start = time.perf_counter()
    count = [0]

    def progress(s) -> None:
        count[0] += 1
        print(f"[{count[0]}] {s.name}: {s.stage}{' (' + s.line + ')' if s.line else ''} "
              f"{s.seconds:.1f} s, {time.perf_counter() - start:.0f} s in all",
              file=sys.stderr, flush=True)

    outcomes = staged_sweep(args.names or None, jobs=args.jobs, stop=args.stages,
                            progress=progress, dtype=args.dtype)
    seconds = time.perf_counter() - start
    rows = {s.name: (s.family, *s.expectation) for s in outcomes}
    print("\n".join(table(rows, args.dtype)))
    expectations = staged_expectations(args.dtype)
    old = load_expectations(expectations)
    changed = [n for n in rows if n in old and old[n] != rows[n]]
    print(f"\n{len(changed)} OpInfos differ from {expectations.name}"
          + (f": {', '.join(changed[:40])}" if changed else ""))
    if args.write:
        kept = dict(old) if args.names else {}  # a subset updates its rows only
        expectations.write_text(expectations_json(kept | rows), encoding="utf-8")
        from planner.importers.opinfo_stages_page import opinfo_stages_page

        (ROOT / "docs" / "opinfo-stages.md").write_text(opinfo_stages_page(), encoding="utf-8")
        print(f"wrote {expectations.relative_to(ROOT)} and docs/opinfo-stages.md")
    load = os.getloadavg()
    per = sorted(s.seconds for s in outcomes)
    print(f"({seconds:.0f} s on {args.jobs} processes for {len(outcomes)} OpInfos: "
          f"{seconds / max(len(outcomes), 1):.2f} s an OpInfo; median check "
          f"{per[len(per) // 2] if per else 0:.2f} s, slowest {per[-1] if per else 0:.1f} s; "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f})\n")
    off = [f"{s.name}: {s.stage}: {s.line}" for s in outcomes
           if s.line.startswith(("wrong:", "crash:"))]
    if off:
        print(f"SILENTLY WRONG OR CRASHING ({len(off)}):\n  "
              + "\n  ".join(off), file=sys.stderr)
    return 1 if off else 0


if __name__ == "__main__":
    raise SystemExit(main())
