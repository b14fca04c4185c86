"""Honest torch.export archives of integer and index ops over constant tensors, their constant
payload bytes then edited to edge values (INT_MIN by -1, a zero divisor, indices and offsets
out of range, huge), read by `planner graph` in one child process under a memory limit: each
refused in one line naming the file (and the node), or read as data; never a signal.

The constants are torch.tensor()s of the forward (lifted tensor constants: torch.export's
trace once ran ops over them with the real kernel, planner/importers/pt2/retrace.py), buffers,
or (one file) factories whose fill values are edited in the program's JSON. An operand holds
one element, where torch's fake tensors keep a value and propagate it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
LIMIT_BYTES = (800 << 20) + (1 << 30)  # importing torch and the planner, plus 1 GiB
I64, I32 = np.iinfo(np.int64), np.iinfo(np.int32)
# Honest values no other byte run of the archive holds, edited afterwards.
K64, K32, D32 = 0x0123456789ABCDE, 0x1234567, 0x0765432


def _module(op, form: str, consts: dict[str, np.ndarray]):
    """A module adding op(*consts) (as float) to its input; the constants made in forward
    (`lifted`) or held as buffers."""

    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            if form == "buffer":
                for k, v in consts.items():
                    self.register_buffer(k, torch.from_numpy(v.copy()))

        def forward(self, x):
            if form == "buffer":
                vals = [getattr(self, k) for k in consts]
            else:
                vals = [torch.tensor(v.tolist(), dtype=getattr(torch, str(v.dtype)))
                        for v in consts.values()]
            return x + op(*vals).float().sum()

    return M()


def _div(mode):
    return lambda k, d: torch.div(k, d, rounding_mode=mode)


DIVIDING = {"div_trunc": _div("trunc"), "div_floor": _div("floor"),
            "remainder": torch.remainder, "fmod": torch.fmod}
DATA = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
INDEXING = {  # name -> (op of (data, index), honest index)
    "index_select": (lambda x, i: torch.index_select(x, 0, i), 2),
    "take": (torch.take, 2),
    "gather": (lambda x, i: torch.gather(x, 0, i), 2),
    "embedding": (lambda x, i: torch.nn.functional.embedding(i, x.reshape(4, 1)), 2),
    "index": (lambda x, i: x[i], 2),
}
BAD_INDICES = [4, -5, 2**40, I64.min]
SEGMENTS = [[0, 2**26], [0, -4], [-1, 4], [0, I64.max], [3, 1]]


def _cases():
    """(name, honest module's name, the module, honest payloads, edited payloads, refused:
    whether it must be)."""
    for name, op in DIVIDING.items():
        for form in ("lifted", "buffer"):
            consts = {"k": np.array([K64], np.int64), "d": np.array([D32], np.int32)}
            module = _module(op, form, consts)
            for k, d, refused in ((I64.min, -1, True), (7, 0, True),
                                  (I64.min, 0, True), (I64.max, -1, False)):
                yield (f"{name}_{form}_{k}_{d}", f"{name}_{form}", module,
                       [consts["k"], consts["d"]],
                       [np.array([k], np.int64), np.array([d], np.int32)], refused)
        consts = {"k": np.array([K32], np.int32), "d": np.array([D32], np.int32)}
        yield (f"{name}_int32", f"{name}_int32", _module(op, "lifted", consts),
               list(consts.values()),
               [np.array([I32.min], np.int32), np.array([-1], np.int32)], True)
    for name, (op, honest) in INDEXING.items():
        consts = {"x": DATA, "i": np.array([honest], np.int64)}
        module = _module(op, "lifted", consts)
        for bad in BAD_INDICES:
            yield (f"{name}_{bad}", name, module, [consts["i"]], [np.array([bad], np.int64)],
                   True)
    for form in ("lifted", "buffer"):
        consts = {"x": DATA, "o": np.array([0, 4], np.int64)}
        module = _module(lambda x, o: torch.segment_reduce(x, "sum", offsets=o), form, consts)
        for offsets in SEGMENTS:
            yield (f"segment_{form}_{offsets[0]}_{offsets[1]}", f"segment_{form}", module,
                   [consts["o"]], [np.array(offsets, np.int64)], True)


def _edit(src: Path, dst: Path, edits: list[tuple[bytes, bytes]]) -> None:
    """dst: src with each payload member holding exactly `old` made `new` (each found)."""
    with zipfile.ZipFile(src) as archive:
        members = {n: archive.read(n) for n in archive.namelist()}
    for old, new in edits:
        hits = [n for n, data in members.items() if data == old]
        assert len(hits) == 1, (src.name, old, hits)
        members[hits[0]] = new
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as out:
        for n, data in members.items():
            out.writestr(n, data)


class _Full(torch.nn.Module):
    """The operands made by factories of the program (their fill values in its JSON)."""

    def forward(self, x):
        k = torch.full((1,), 123456789, dtype=torch.int64)
        d = torch.full((1,), 98765, dtype=torch.int32)
        return x + torch.div(k, d, rounding_mode="trunc").float()


def _edit_program(src: Path, dst: Path, edits: list[tuple[bytes, bytes]]) -> None:
    """dst: src with the one member holding every `old` (the program's JSON) edited."""
    with zipfile.ZipFile(src) as archive:
        members = {n: archive.read(n) for n in archive.namelist()}
    (name,) = [n for n, data in members.items() if all(old in data for old, _ in edits)]
    for old, new in edits:
        members[name] = members[name].replace(old, new)
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as out:
        for n, data in members.items():
            out.writestr(n, data)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, tuple[Path, bool]]:
    folder = tmp_path_factory.mktemp("edges")
    out, exported = {}, {}
    for name, key, module, honest, edited, refused in _cases():
        if key not in exported:
            exported[key] = folder / f"honest_{key}.pt2"
            torch.export.save(torch.export.export(module, (torch.ones(1),)), exported[key])
        out[name] = (folder / f"{name}.pt2", refused)
        _edit(exported[key], out[name][0],
              [(h.tobytes(), e.tobytes()) for h, e in zip(honest, edited, strict=True)])
    honest_full = folder / "honest_full.pt2"
    torch.export.save(torch.export.export(_Full(), (torch.ones(1),)), honest_full)
    out["full_json"] = (folder / "full_json.pt2", True)
    _edit_program(honest_full, out["full_json"][0],
                  [(b"123456789", str(I64.min).encode()), (b"98765", b"-1")])
    return out


_CHILD = """
import contextlib, io, json, resource, sys
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from planner.cli.main import main
for path in sys.argv[2:]:
    print(json.dumps(["reading", path]), flush=True)  # the file a signal killed us on
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["graph", path])
    print(json.dumps([path, code, err.getvalue()]), flush=True)
"""


def test_edge_constants_are_refused_in_one_line_or_read_never_a_signal(corpus):
    paths = [str(p) for p, _ in corpus.values()]
    child = subprocess.run([sys.executable, "-c", _CHILD, str(LIMIT_BYTES), *paths],
                           capture_output=True, text=True, cwd=ROOT, timeout=600,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
    lines = [json.loads(line) for line in child.stdout.splitlines() if line.startswith("[")]
    assert child.returncode == 0, (child.returncode, lines[-1:], child.stderr[-1500:])
    results = {line[0]: line[1:] for line in lines if line[0] != "reading"}
    for name, (path, refused) in corpus.items():
        code, err = results[str(path)]
        if code == 0 and not refused:
            continue
        assert code == 2, (name, code, err)
        assert err.count("\n") == 1 and err.startswith(f"planner: error: {path}: "), (name, err)
        assert re.search(r"node '[\w.]+'", err), (name, err)


@pytest.mark.parametrize("form", ["lifted", "buffer"])
@pytest.mark.parametrize("name", ["div_trunc", "remainder"])
def test_an_edited_constant_that_is_safe_reads_as_the_module_holding_it(corpus, name, form):
    """INT_MAX by -1 is no trap: the edited archive reads as the in-process import of a module
    holding those values (the reader's constants are the file's, its ops the program's)."""
    from planner.importers.torch.convert import convert
    from planner.torch import load_pt2
    from tests.helpers.pt2_reader import canonical

    path, refused = corpus[f"{name}_{form}_{I64.max}_-1"]
    assert not refused
    module = _module(DIVIDING[name], form, {"k": np.array([I64.max], np.int64),
                                            "d": np.array([-1], np.int32)})
    want = convert(torch.export.export(module, (torch.ones(1),)), name="m").graph
    assert canonical(load_pt2(path, name="m")) == canonical(want)
