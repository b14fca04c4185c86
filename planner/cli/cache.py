"""`planner cache list | prune [--max-bytes N] | warm`: what the planner keeps on disk.

    $ planner cache list
    package      0.4 MiB   3 min ago  dynamo_1f0c...
    runtime      9.9 MiB    5 s ago  cpu-runtime-1915be609784655f
    total       10.3 MiB  2 entries (1 package, 1 runtime)
    $ planner cache prune --max-bytes 100MiB     # least recently used first
    $ planner cache warm                         # build the kernel library ahead

The entries and their bound are planner.io.disk_cache's; the runtime this environment builds is
never pruned. Registered on the main parser with the kernel library's hooks (`folder`: the
folder of this environment's runtime, nothing built; `build`: build it, progress on a
callable), which code generation provides (planner/cli/main.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from planner.io.disk_cache import Entry, describe, entries, max_bytes, parse_bytes, prune
from planner.io.write import cache_root

RuntimeHooks = Callable[[], tuple[Callable[[], Path], Callable[[Callable[[str], None]], Path]]]


def add_cache_commands(sub: Any, hooks: RuntimeHooks) -> None:
    p = sub.add_parser("cache", help="list, prune or warm the planner's cache (built packages "
                                     "and kernel libraries)",
                       description="The cache folder ($PLANNER_CACHE, default ~/.cache/planner) "
                                   "keeps built executor packages by plan digest and the kernel "
                                   "library per host; a new package prunes it to "
                                   "$PLANNER_CACHE_MAX_BYTES (default 2GiB), least recently "
                                   "used first.")
    cache = p.add_subparsers(dest="cache_command", required=True, metavar="SUBCOMMAND")
    ls = cache.add_parser("list", help="the kept packages and runtimes: size, last use, total")
    ls.add_argument("--json", action="store_true", help="print the entries as JSON")
    ls.set_defaults(run=run_list)
    pr = cache.add_parser("prune", help="remove the least recently used entries until the "
                                        "cache is within a size")
    pr.add_argument("--max-bytes", metavar="N", type=_bytes, default=None,
                    help="the size to prune to: bytes, or with KiB, MiB or GiB (default "
                         "$PLANNER_CACHE_MAX_BYTES, else 2GiB); 0 removes all but what is in "
                         "use and this environment's runtime")
    pr.add_argument("--json", action="store_true", help="print what was removed as JSON")
    pr.set_defaults(run=lambda args: run_prune(args, hooks))
    w = cache.add_parser("warm", help="build this host's kernel library and measure its peaks "
                                      "now (minutes, once), so no first plan, trainer or "
                                      "torch.compile call waits on them")
    w.add_argument("--json", action="store_true", help="print the result as JSON")
    w.set_defaults(run=lambda args: run_warm(args, hooks))


def _bytes(text: str) -> int:
    try:
        return parse_bytes(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def run_list(args: argparse.Namespace) -> int:
    listed = entries()
    if args.json:
        print(json.dumps(_summary(listed), indent=2, sort_keys=True))
    else:
        print(f"{cache_root()} (bound {max_bytes() / 2**20:.0f} MiB, PLANNER_CACHE_MAX_BYTES)")
        print(describe(listed))
    return 0


def run_prune(args: argparse.Namespace, hooks: RuntimeHooks) -> int:
    folder, _ = hooks()
    limit = max_bytes() if args.max_bytes is None else args.max_bytes
    removed = prune(limit, keep=frozenset({folder().name}))
    left = entries()
    if args.json:
        print(json.dumps({"removed": [e.model_dump() for e in removed],
                          "max_bytes": limit, **_summary(left)}, indent=2, sort_keys=True))
        return 0
    for e in removed:
        print(f"removed {e.kind} {e.name} ({e.bytes / 2**20:.1f} MiB)")
    total = sum(e.bytes for e in left)
    over = " (the rest is in use)" if total > limit else ""
    print(f"{len(removed)} removed; {total / 2**20:.1f} MiB kept in {len(left)} entries, "
          f"bound {limit / 2**20:.1f} MiB{over}")
    return 0


def run_warm(args: argparse.Namespace, hooks: RuntimeHooks) -> int:
    folder, build = hooks()
    start = time.perf_counter()
    said: list[str] = []

    def say(line: str) -> None:
        said.append(line)
        print(line, file=sys.stderr if args.json else sys.stdout, flush=True)

    module = build(say)
    from planner.target.detect import detect

    detect()  # this host's peaks, measured once and kept for `--target host`
    seconds = time.perf_counter() - start
    built = any(line.startswith("building ") for line in said)
    if args.json:
        print(json.dumps({"runtime": str(module), "built": built, "seconds": round(seconds, 3)},
                         indent=2, sort_keys=True))
    else:
        print(f"the kernel library is ready ({'built' if built else 'already built'}): "
              f"{folder()}")
    return 0


def _summary(listed: tuple[Entry, ...]) -> dict[str, Any]:
    return {"cache": str(cache_root()), "entries": [e.model_dump() for e in listed],
            "total_bytes": sum(e.bytes for e in listed), "bound_bytes": max_bytes()}
