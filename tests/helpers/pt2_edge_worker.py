"""A child process reading .pt2 archives under a memory limit, one verdict line (JSON) each
(tests/importers/test_pt2_edge_corpus.py):

    python -m tests.helpers.pt2_edge_worker LIMIT_BYTES ARCHIVE...

| verdict     | what happened                                                               |
| ----------- | --------------------------------------------------------------------------- |
| read        | a graph made, planned for a preset target, and one step of it run by the    |
|             | numpy reference interpreter with the archive's constants                    |
| planned     | as `read`, but its tensors too large for the interpreter in this child       |
| run-refused | planned; the reference interpreter refused the step in one line (an index   |
|             | out of range in the step, as torch's kernel raises)                          |
| plan-refused| a graph made; the planner refused to plan it in one line (larger than the   |
|             | target's memory)                                                             |
| refused     | the importer refused the file: a UserError or the planner's own ValueError  |
| error       | any other exception, or a refusal over more than one line (a bug)           |

A signal, a hang or memory past the limit shows in the child's exit status, not here.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import sys
import traceback
import warnings
from pathlib import Path

# The interpreter holds every tensor of the step at once: past this, the verdict is `planned`.
EVALUATED_BYTES = 256 << 20


def verdict(path: str) -> tuple[str, str]:
    import numpy as np

    from planner.graph.interpret import random_feeds, run
    from planner.importers.pt2.archive import read_archive
    from planner.importers.pt2.retrace import retrace
    from planner.importers.torch.convert import convert
    from planner.pipeline import plan
    from planner.target import preset

    try:
        saved = read_archive(path)
        imp = convert(retrace(saved, f"{path}: member {saved.member!r}"), name=Path(path).stem)
    except Exception as e:  # noqa: BLE001 - what the corpus looks for
        return _refusal("refused", e)
    try:
        plan(imp.graph, preset("xeon-8180"))
    except Exception as e:  # noqa: BLE001
        return _refusal("plan-refused", e)
    if sum(t.nbytes for t in imp.graph.tensors) > EVALUATED_BYTES:
        return "planned", ""
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run(imp.graph, random_feeds(imp.graph, seed=0), imp.params(), keep="outputs")
    except Exception as e:  # noqa: BLE001
        return _refusal("run-refused", e)
    return "read", ""


def _refusal(kind: str, e: Exception) -> tuple[str, str]:
    """(kind, its line) for the planner's own one-line refusal: a UserError, or a ValueError
    or RuntimeError (OpError, InterpretError) raised by the planner's code; ("error", the
    traceback's tail) for anything else."""
    from planner.errors import UserError

    raised_in = traceback.extract_tb(e.__traceback__)[-1].filename
    ours = f"{os.sep}planner{os.sep}" in raised_in
    if (isinstance(e, UserError) or (isinstance(e, (ValueError, RuntimeError)) and ours)) \
            and "\n" not in str(e).strip():
        return kind, str(e)
    return "error", _trace(e)


def _trace(e: Exception) -> str:
    return "".join(traceback.format_exception(e)[-4:])


def main(argv: list[str]) -> int:
    limit = int(argv[0])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    for path in argv[1:]:
        with contextlib.redirect_stderr(io.StringIO()):  # torch's logs: not the verdict
            kind, words = verdict(path)
        print(json.dumps([path, kind, words]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
