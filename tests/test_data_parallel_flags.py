"""The data-parallel flags are declared once (planner.cli.data_parallel), and `planner plan`
and `planner fit` both parse them into the same DataParallelOptions fields."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

from planner.cli.data_parallel import add_data_parallel_flags

ROOT = Path(__file__).resolve().parent.parent
FLAGS = ("--data-parallel", "--ranks-per-host", "--interconnect", "--bucket-bytes",
         "--shard-optimizer", "--shard-parameters")


def _declared(flag: str) -> list[str]:
    """Where a call's first argument is `flag` in planner/cli/ (a declaration of it)."""
    out = []
    for f in sorted((ROOT / "planner" / "cli").rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and node.args
                    and any(isinstance(a, ast.Constant) and a.value == flag
                            for a in node.args[:2])):
                out.append(f"{f.name}:{node.lineno}")
    return out


def test_each_data_parallel_flag_is_declared_once():
    for flag in FLAGS:
        assert [p.split(":")[0] for p in _declared(flag)] == ["data_parallel.py"], flag


def test_plan_and_fit_parse_the_same_flags():
    from planner.cli.main import build_parser

    parser = build_parser()
    args = ["--data-parallel", "4", "--shard-optimizer"]
    plan = parser.parse_args(["plan", "zoo:mlp", "--target", "knl-7250", "-o", "p.json", *args])
    fit = parser.parse_args(["fit", "zoo:mlp", "--target", "knl-7250", "--budget", "1GiB", *args])
    for ns in (plan, fit):
        assert (ns.data_parallel, ns.shard_optimizer, ns.shard_parameters) == (4, True, False)
    assert plan.ranks_per_host == 1 and not hasattr(fit, "ranks_per_host")


def test_layout_flags_only_where_asked():
    with_layout, without = argparse.ArgumentParser(), argparse.ArgumentParser()
    add_data_parallel_flags(with_layout, "N ranks")
    add_data_parallel_flags(without, "N ranks", layout=False)
    assert with_layout.parse_args(["--bucket-bytes", "64"]).bucket_bytes == 64
    assert not hasattr(without.parse_args([]), "bucket_bytes")
