"""`planner target detect | show NAME | list`: registered on the main parser by the lead's CLI.

Each subcommand prints text, or with --json the canonical JSON on stdout; bad input raises
UserError (an unknown preset lists the known ones).
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
from typing import Any

from planner.target.detect import detect
from planner.target.presets import PRESETS, load_target, preset
from planner.target.records import Target


def add_target_commands(subparsers: Any) -> None:
    """Add `target` with its subcommands to an argparse subparsers object; handlers in `run`."""
    p = subparsers.add_parser("target", help="describe hardware targets: detect this host, "
                                             "show or list presets")
    sub = p.add_subparsers(dest="target_command", required=True, metavar="SUBCOMMAND")

    d = sub.add_parser("detect", help="read this host's topology and measure its peaks "
                                      "(a few seconds), kept for `--target host`",
                       description="Measures this machine's peaks again and keeps them, "
                                   "rounded, in the cache ($PLANNER_CACHE, default "
                                   "~/.cache/planner): every `--target host` reads them, so "
                                   "the same command gives the same plan "
                                   "(planner.target.host_cache).")
    d.add_argument("--json", action="store_true", help="print the target as canonical JSON")
    d.add_argument("--no-measure", action="store_true",
                   help="estimate peaks from clock and SIMD flags instead of timing")
    d.add_argument("-o", "--output", metavar="FILE", help="write the target JSON to FILE")
    d.add_argument("--force", action="store_true", help="overwrite an existing different FILE")
    d.set_defaults(run=run_detect)

    s = sub.add_parser("show", help="show a preset (or a target JSON file)")
    s.add_argument("name", metavar="NAME", help=f"one of {', '.join(sorted(PRESETS))}, or a file")
    s.add_argument("--json", action="store_true", help="print the target as canonical JSON")
    s.set_defaults(run=run_show)

    ls = sub.add_parser("list", help="list the preset targets")
    ls.add_argument("--json", action="store_true", help="print the list as JSON")
    ls.set_defaults(run=run_list)


def run_detect(args: argparse.Namespace) -> int:
    target = detect(measure=not args.no_measure, refresh=True)
    if args.output:
        from planner.io.write import write_text

        write_text(args.output, target.to_json(), force=args.force)
    print(target.to_json() if args.json else describe(target), end="" if args.json else "\n")
    return 0


def run_show(args: argparse.Namespace) -> int:
    target = load_target(args.name)
    print(target.to_json() if args.json else describe(target), end="" if args.json else "\n")
    return 0


def run_list(args: argparse.Namespace) -> int:
    targets = [preset(name) for name in sorted(PRESETS)]
    if args.json:
        print(json.dumps([{"name": t.name, "description": t.description} for t in targets],
                         indent=2))
    else:
        width = max(len(t.name) for t in targets)
        print("\n".join(f"{t.name:<{width}}  {t.description}" for t in targets))
    return 0


def describe(t: Target, now: datetime.datetime | None = None) -> str:
    """A few lines a person reads: topology, peaks, GPUs, notes; each measured figure's age
    (at `now`, default the clock's) after its date."""
    lines = [f"target {t.name}: {t.description}" if t.description else f"target {t.name}",
             f"  host memory   {_gib(t.host_memory_bytes)}"]
    if t.cpu is not None:
        packages = len({c.package for c in t.logical_cpus})
        nodes = len({c.numa_node for c in t.logical_cpus})
        group = max(len(g) for g in t.cache_groups)
        cache = (f"L{t.cpu.cache_group_level} of {_mib(t.cpu.cache_group_bytes)}"
                 if t.cpu.cache_group_level else "no known cache")
        sharing = (f"up to {group} cores sharing {cache}" if group > 1
                   else f"one core each, private {cache}")
        lines += [
            f"  CPU           {t.cpu.model}",
            f"  logical CPUs  {len(t.logical_cpus)} ({t.cores} cores x up to {t.smt_width} "
            f"hardware threads; {packages} package(s), {nodes} NUMA node(s))",
            f"  cache groups  {len(t.cache_groups)} ({sharing})",
            f"  peak          {t.cpu.peak_flops / 1e9:,.1f} GFLOP/s FP32; memory "
            f"{t.cpu.memory_bandwidth / 1e9:,.1f} GB/s (one core {t.cpu.core_bandwidth / 1e9:.1f})",
        ]
        lines += [f"  peak {m:<9}{v / 1e9:,.1f} GFLOP/s"
                  for m, v in sorted((t.cpu.math_peak_flops or {}).items())]
        if t.cpu.machine:
            lines.append(f"  machine       {t.cpu.machine[:16]} (the identity its figures and "
                         f"kernel times are kept under; measuring again keeps it)")
    for i, g in enumerate(t.gpus):
        cc = f"compute capability {g.compute_capability or 'unknown'}"
        lines.append(f"  GPU {i}         {g.name} ({cc}): {_gib(g.memory_bytes)}, "
                     f"{g.sm_count} SMs, "
                     f"{g.peak_flops / 1e12:.2f} TFLOP/s FP32, "
                     f"{g.memory_bandwidth / 1e9:,.0f} GB/s, "
                     f"host link {g.host_link_bandwidth / 1e9:.1f} GB/s, "
                     f"pinned up to {_gib(g.pinned_host_limit_bytes)}")
        if g.math_peak_flops:
            lines.append(f"  GPU {i} peaks   " + ", ".join(
                f"{m} {v / 1e12:,.1f}" for m, v in sorted(g.math_peak_flops.items()))
                + " TFLOP/s (tensor cores, dense)")
    now = now or datetime.datetime.now(datetime.UTC)
    lines += [f"  note: {_aged(n, now)}" for n in t.notes]
    if t.provenance is not None:
        lines.append(f"  {t.provenance.method} by {t.provenance.tool} on {t.provenance.date}")
    return "\n".join(lines)


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB"


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


MEASURED = re.compile(r"measured (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")


def _aged(note: str, now: datetime.datetime) -> str:
    """`note` with each "measured <date>" followed by its age at `now` (the target keeps the
    date, so the same host gives the same plan; the age is said where it is shown).

    >>> _aged("figure x measured 2026-11-28T10:00:00Z at load 0.10 (quiet)",
    ...       datetime.datetime(2026, 11, 28, 13, 30, tzinfo=datetime.UTC))
    'figure x measured 2026-11-28T10:00:00Z (3.5 h ago) at load 0.10 (quiet)'
    """
    def age(m: re.Match[str]) -> str:
        when = datetime.datetime.strptime(m[1], "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=datetime.UTC)
        return f"{m[0]} ({_duration((now - when).total_seconds())} ago)"

    return MEASURED.sub(age, note)


def _duration(seconds: float) -> str:
    """A person's words for `seconds`.

    >>> _duration(42), _duration(600), _duration(7200), _duration(3 * 86400)
    ('42 s', '10 min', '2.0 h', '3.0 days')
    """
    if seconds < 120:
        return f"{max(0, seconds):.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"
