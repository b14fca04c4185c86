"""bench/RESULTS.md is an index (issue 87): under 500 lines, the runs themselves in the dated
files of bench/results/, and every link of the index and of those files resolves (a file
that exists; an anchor, a heading of the file it names)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INDEX = ROOT / "bench" / "RESULTS.md"
LIMIT = 500
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but '-' and '_' dropped, spaces
    to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {anchor(line.lstrip("#")) for line in path.read_text().splitlines()
            if line.startswith("#")}


def broken(doc: Path) -> list[str]:
    """The links of `doc` that do not resolve (web addresses aside)."""
    out = []
    for target in LINK.findall(doc.read_text()):
        if re.match(r"[a-z]+://", target):
            continue
        file, _, frag = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        if not path.exists():
            out.append(f"{target}: no such file")
        elif frag and path.suffix == ".md" and frag not in anchors(path):
            out.append(f"{target}: no heading with that anchor in {path.name}")
    return out


def test_anchor_is_githubs():
    assert anchor(" Sharded data parallel against FSDP2: `bench/bench_fsdp.py`") == \
        "sharded-data-parallel-against-fsdp2-benchbench_fsdppy"


def test_the_index_is_short_and_every_link_resolves():
    lines = INDEX.read_text().splitlines()
    assert len(lines) < LIMIT, f"bench/RESULTS.md has {len(lines)} lines: move sections to " \
                               "bench/results/<date>-<name>.md and link them"
    assert broken(INDEX) == []
    # Every row of the index names its table: a dated file of bench/results/.
    rows = [line for line in lines if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) > 40
    for row in rows:
        assert "](results/" in row, row


def test_every_dated_file_links_within_the_folder():
    """The dated files link each other by name (some once linked `results/...`, as from
    bench/, and led nowhere)."""
    bad = {p.name: broken(p) for p in sorted((ROOT / "bench" / "results").glob("*.md"))}
    assert {name: links for name, links in bad.items() if links} == {}
