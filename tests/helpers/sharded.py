"""ZeRO-3 ranks' shards put back together (tests/codegen/test_sharded_*.py)."""

from __future__ import annotations

import numpy as np

from planner.runtime.sharded import gather_params


def gathered(package, outs, tmp_path, tag):
    """Every rank's shards put back together (the same whole parameters for each rank's
    slot, as check_numbers compares them), written as npz files."""
    plan = (package / "plan.json").read_text()
    shards = [dict(np.load(o)) for o in outs]
    whole = gather_params(plan, shards)
    paths = []
    for r, own in enumerate(shards):
        rest = {k: v for k, v in own.items() if not k.startswith("shard/")}
        path = tmp_path / f"{tag}_whole{r}.npz"
        np.savez(path, **rest, **whole)
        paths.append(path)
    return paths
