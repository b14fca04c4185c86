"""The user's memory decisions on `planner plan` (planner.memory.pins):

    --keep-tensor NAME        never recompute nor offload tensor NAME (or those under NAME/)
    --recompute PREFIX        recompute the droppable tensors named PREFIX or under PREFIX/
    --offload PREFIX          offload the checkpoints named PREFIX or under PREFIX/
    --region-budget PREFIX=BYTES   at most BYTES of live activations under PREFIX/
    --recompute-products      under a budget, matrix products and convolutions may be
                              recomputed too (cheapest seconds per byte first)
    --decisions FILE          the same as JSON:
        {"keep": ["layer1/block1/relu"], "recompute": ["layer2"], "offload": [],
         "region_budgets": {"layer3": "2MiB"}}

Each flag may be given several times; the file's decisions come first, the flags after.
"""

from __future__ import annotations

import argparse
from typing import Any

from planner.errors import UserError

KEYS = {"keep": "keep", "recompute": "recompute", "offload": "offload"}


def add_decision_flags(p: Any) -> None:
    p.add_argument("--keep-tensor", action="append", default=[], metavar="NAME",
                   help="never recompute nor offload this tensor (or those under NAME/)")
    p.add_argument("--recompute", action="append", default=[], metavar="PREFIX",
                   help="recompute the droppable tensors under this module path")
    p.add_argument("--offload", action="append", default=[], metavar="PREFIX",
                   help="offload the checkpoints under this module path to the host store")
    p.add_argument("--region-budget", action="append", default=[], metavar="PREFIX=BYTES",
                   help="at most BYTES of live activations under this module path")
    p.add_argument("--recompute-products", action="store_true",
                   help="under a budget, let matrix products and convolutions be recomputed "
                        "too (off: only cheaper ops are)")
    p.add_argument("--decisions", metavar="FILE",
                   help="keep / recompute / offload lists and region_budgets as JSON")


def memory_decisions(args: argparse.Namespace) -> dict[str, Any]:
    """MemoryOptions fields (pins, region_budgets, recompute_products) of the flags; UserError
    naming the bad one."""
    from pydantic import ValidationError

    from planner.memory.options import Pin, RegionBudget, parse_budget

    pins: list[tuple[str, str]] = []
    regions: list[tuple[str, str]] = []
    if args.decisions:
        from planner.io.read import read_json

        data = read_json(args.decisions, "decisions")
        if not isinstance(data, dict):
            raise UserError(f"--decisions {args.decisions}: expected a JSON object")
        unknown = sorted(set(data) - set(KEYS) - {"region_budgets"})
        if unknown:
            raise UserError(f"--decisions {args.decisions}: unknown key {unknown[0]!r}; known: "
                            f"{', '.join([*KEYS, 'region_budgets'])}")
        for key, decision in KEYS.items():
            names = data.get(key, [])
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise UserError(f"--decisions {args.decisions}: {key} must be a list of names")
            pins += [(decision, n) for n in names]
        budgets = data.get("region_budgets", {})
        if not isinstance(budgets, dict):
            raise UserError(f"--decisions {args.decisions}: region_budgets must be an object")
        regions += [(k, str(v)) for k, v in budgets.items()]
    pins += [("keep", n) for n in args.keep_tensor]
    pins += [("recompute", n) for n in args.recompute]
    pins += [("offload", n) for n in args.offload]
    for text in args.region_budget:
        prefix, sep, size = text.partition("=")
        if not sep or not prefix:
            raise UserError(f"--region-budget {text!r}: expected PREFIX=BYTES (a module path, "
                            f"then the bytes)")
        regions.append((prefix, size))
    for decision, name in pins:
        if not name:
            raise UserError(f"--{FLAGS[decision]} '': expected a tensor name or module path")
    seen: set[str] = set()
    for prefix, _ in regions:
        if prefix in seen:
            raise UserError(f"--region-budget {prefix}: given twice; give one budget per "
                            f"module path")
        seen.add(prefix)
    try:
        return {"pins": tuple(Pin(decision=d, name=n) for d, n in pins),
                "region_budgets": tuple(
                    RegionBudget(prefix=k, bytes=parse_budget(v, f"--region-budget {k}"))
                    for k, v in regions),
                "recompute_products": bool(getattr(args, "recompute_products", False))}
    except ValidationError as e:
        first = e.errors()[0]
        raise UserError(f"memory decision: {'.'.join(map(str, first['loc']))}: "
                        f"{first['msg']}") from None


# The flag of each decision, for messages.
FLAGS = {"keep": "keep-tensor", "recompute": "recompute", "offload": "offload"}
