"""The `--write` / `--check` command line of a generator of checked-in sources
(codegen/tvm_kernels.py, codegen/pointwise_cpp.py).

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> out = Path(tempfile.mkdtemp()) / "x.h"
    >>> main("python -m codegen.x", "generates x.h", lambda: {out: "int x;\\n"},
    ...      lambda text: "1 line", ["--check"])
    1
    >>> main("python -m codegen.x", "", lambda: {out: "int x;\\n"}, lambda text: "1 line",
    ...      ["--write"])
    wrote x.h: 1 line
    0
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path


def main(prog: str, doc: str, generate: Callable[[], dict[Path, str]],
         count: Callable[[str], str], argv: list[str] | None = None) -> int:
    """Write each generated file (`--write`, saying `count(text)` of it), or exit 1 naming a
    file that differs from what would be generated (`--check`)."""
    ap = argparse.ArgumentParser(prog=prog, description=doc,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="regenerate the files")
    mode.add_argument("--check", action="store_true", help="exit 1 if a file is stale")
    args = ap.parse_args(argv)
    stale = 0
    for path, text in generate().items():
        if args.write:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.name}: {count(text)}")
            continue
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if current != text:
            print(f"{path.name} is stale: run {prog} --write", file=sys.stderr)
            stale = 1
    return stale
