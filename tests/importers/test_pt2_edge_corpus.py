"""A generated corpus of 250 .pt2 archives (tests/helpers/pt2_edge_corpus.py, seed 85): honest
torch.export programs over integer and index ops whose constants (payload bytes) or integer
literals (program JSON) are edited to edge values, each read by the importer, planned and run
on the reference interpreter in child processes under a memory limit
(tests/helpers/pt2_edge_worker.py). Every verdict is data or a refusal in one line; no child
dies by a signal, runs past its time or past its memory.

Cost: the archives are read in a few children of about 60 each, two at a time; a child that
dies (a signal, the memory limit) has its batch read again one archive per child, which names
the archive."""

from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("torch")

from tests.helpers.pt2_edge_corpus import cases, generate  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
# The child's address space: importing torch and the planner (about 0.8 GB) plus 1.5 GiB.
LIMIT_BYTES = (800 << 20) + (3 << 29)
BATCH = 63
TIMEOUT_S = 240  # a batch's; a hang shows as the timeout


def _read(paths: list[str]) -> tuple[int | None, dict[str, list[str]]]:
    """(the child's exit status, None when it ran out of time; its verdicts by path)."""
    try:
        child = subprocess.run(
            [sys.executable, "-m", "tests.helpers.pt2_edge_worker", str(LIMIT_BYTES), *paths],
            capture_output=True, text=True, cwd=ROOT, timeout=TIMEOUT_S,
            env={**os.environ, "PYTHONPATH": str(ROOT)})
    except subprocess.TimeoutExpired as e:
        out, code = (e.stdout or b"").decode(errors="replace"), None
    else:
        out, code = child.stdout, child.returncode
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("[")]
    return code, {path: [kind, words] for path, kind, words in rows}


def _batch(paths: list[str]) -> dict[str, list[str]]:
    code, verdicts = _read(paths)
    if code == 0 and len(verdicts) == len(paths):
        return verdicts
    for path in paths:  # one archive per child: the one that kills it is named
        if path not in verdicts:
            code, one = _read([path])
            verdicts[path] = one.get(path) or [
                "hang" if code is None else f"died (exit status {code})", ""]
    return verdicts


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory) -> dict[str, list[str]]:
    folder = tmp_path_factory.mktemp("edge_corpus")
    paths = [str(p) for p in generate(folder).values()]
    batches = [paths[k:k + BATCH] for k in range(0, len(paths), BATCH)]
    with ThreadPoolExecutor(2) as pool:
        out = {k: v for part in pool.map(_batch, batches) for k, v in part.items()}
    counts = collections.Counter(kind for kind, _ in out.values())
    print(f"\n{len(out)} archives: " + ", ".join(f"{k} {n}" for k, n in sorted(counts.items())))
    return out


def test_the_corpus_is_large_and_deterministic(verdicts):
    """At least 200 archives; the same seed draws the same cases (names and edited bytes),
    another seed others."""
    assert len(verdicts) >= 200
    assert list(cases(85, 250)) == list(cases(85, 250)) != list(cases(86, 250))


def test_every_archive_is_data_or_a_one_line_refusal(verdicts):
    bad = {Path(p).name: v for p, v in verdicts.items()
           if v[0] not in ("read", "planned", "run-refused", "plan-refused", "refused")}
    assert not bad, bad
    for path, (kind, words) in verdicts.items():
        if kind == "refused":  # names the node, tensor, member or entry it read
            assert re.search(r"node '|member '|input '|tensor '|entry '", words), (path, words)


# Named cases (seed 85 draws each): archive -> (verdict, what its line says)
NAMED = {
    # an int64 minimum by -1 and a zero divisor in a factory's fill: the fold guard, before
    # torch's kernel (SIGFPE) sees them
    "full_div--9223372036854775808--1": ("refused", r"node 'div' .*integer division of "
                                         r"-9223372036854775808 \(the int64 minimum\) by -1"),
    "full_div-1-0": ("refused", r"node 'div' .*integer division by zero"),
    # NaN * 2 cast to an index: torch's cast gives the int64 minimum, an index out of range
    "float_index-g5": ("refused", r"node 'index' .*-9223372036854775808 .*out of range"),
    "index_put-i9": ("refused", r"node 'index_put' .*constant index tensor .*out of range"),
    "scatter_reduce-i11": ("refused", r"node 'scatter_reduce' .*index -1 out of range"),
    # a size read with .item(), its range check deleted from the program
    "narrow_item-unranged-1": ("refused", r"sym_int_values is not empty"),
    "slice_step-0": ("refused", r"slice step must be positive"),
    # F.pad by 2**40: a graph of 8 TiB, refused by the plan, never allocated
    "pad-1099511627776": ("plan-refused", r"needs at least 8796093022240 bytes at node "
                                          r"'constant_pad_nd"),
    "zeros-size2147483648": ("planned", r"^$"),  # 16 GiB: a Fill of the step, planned
    # ids out of range in the step: the step refuses them, as torch's kernel raises
    "embedding_bag-i7": ("run-refused", r"id 2147483648 out of range \[0, 4\)"),
}


def test_the_named_cases(verdicts):
    by_name = {Path(p).stem: v for p, v in verdicts.items()}
    for name, (kind, words) in NAMED.items():
        assert name in by_name, f"{name}: not drawn (seed 85) or its family not exported"
        got_kind, got_words = by_name[name]
        assert got_kind == kind and re.search(words, got_words), (name, got_kind, got_words)


def test_the_corpus_reaches_each_verdict(verdicts):
    """Not a corpus refused wholesale: the importer reads most of the honest-shaped edits,
    and refuses the hostile ones in each door (the reader, the trace, the fold guard, the
    plan, the step)."""
    counts = collections.Counter(kind for kind, _ in verdicts.values())
    assert counts["read"] >= 60 and counts["refused"] >= 60, counts
    assert counts["run-refused"] >= 5 and counts["plan-refused"] >= 1, counts
