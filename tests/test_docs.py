"""The README is the way in: short, and every docs/ page reachable from it; no link in the
README or docs/ points at a file that is not there."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _links(page: Path) -> list[Path]:
    return [(page.parent / m).resolve() for m in LINK.findall(page.read_text())
            if "://" not in m]


def test_readme_is_short():
    assert len((ROOT / "README.md").read_bytes()) < 12 * 1024


def test_every_docs_page_is_linked_from_the_readme():
    linked = set(_links(ROOT / "README.md"))
    pages = {p.resolve() for p in (ROOT / "docs").glob("*.md")}
    assert pages - linked == set(), "docs pages the README does not link"


def test_links_resolve():
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        missing = [str(t.relative_to(ROOT)) for t in _links(page) if not t.exists()]
        assert missing == [], f"{page.name} links to missing files"
