"""bench/bench_first_step.py's pieces that can be held without running its minutes-long
loops: the dynamic-padding workload's lengths (real text: at least 20 distinct), and the
table its rows print as."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from bench_first_step import most_per_graph, table  # noqa: E402
from first_step_loop import paragraph_lengths  # noqa: E402


def test_the_padded_lengths_are_many_and_bounded():
    lengths = paragraph_lengths(1600, seed=2)
    batches = [max(lengths[k:k + 8]) for k in range(0, 1600, 8)]
    assert len(set(batches)) >= 20 and min(lengths) >= 8 and max(lengths) <= 96
    assert paragraph_lengths(50, seed=2) == lengths[:50]  # the same draw every run


def test_a_failed_run_is_one_row_saying_why():
    rows = [{"engine": "eager", "first_step_s": 1.0, "total_s": 2.0, "steady_ms": 3.0,
             "peak_rss_mib": 4.0, "built": 0, "most_per_graph": 0, "measuring_after_s": 0.0},
            {"engine": "planner", "error": "exit 1: UserError: x"}]
    text = table("cnn", rows)
    assert "| eager | 1.0 | 2.0 | 3 | 4 | 0 (0) | 0.0 |" in text and "| planner | exit 1: " in text


def test_builds_are_counted_per_graph(tmp_path):
    """Three packages of a forward (a static plan, a range, its measured plan), one of a
    backward, one unreadable: the most of one graph is 3."""
    import json

    for name, graph in (("a", "g/forward"), ("b", "g/forward"), ("c", "g/forward"),
                        ("d", "g/backward"), ("e", None)):
        folder = tmp_path / "packages" / name
        folder.mkdir(parents=True)
        if graph is not None:
            (folder / "plan.json").write_text(json.dumps({"graph": {"name": graph}}))
    assert most_per_graph(tmp_path, {"a", "b", "c", "d", "e"}) == 3
    assert most_per_graph(tmp_path, {"d", "e"}) == 1 and most_per_graph(tmp_path, set()) == 0
