"""A bounded, seeded fuzzer of the .pt2 reader: zip-level mutations of an honest archive (flipped,
cut, inserted, repeated and saturated bytes) and schema-level mutations of its program (a field
removed, added, or given another kind of value; a target swapped), each loaded by
planner.torch.load_pt2. Every outcome is a Graph or a one-line planner error (UserError or the
planner's own ValueErrors), never another exception, and the archive's live payloads (a pickled
sample input and guards_code that torch would run) never run: the marker never appears."""

from __future__ import annotations

import json
import pickle
import random
import zipfile
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from planner.errors import UserError  # noqa: E402
from planner.torch import load_pt2  # noqa: E402
from tests.helpers.pt2_archives import Mkdir, zip_members  # noqa: E402

CASES = 40  # per fuzzer: a few seconds each in CI


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)
        self.bn = torch.nn.BatchNorm1d(3)

    def forward(self, x):
        return self.bn(self.fc(x)).relu()


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """(archive members, marker): an honest archive made live: its sample inputs a pickle
    making the marker, its guards_code code making it."""
    folder = tmp_path_factory.mktemp("fuzz")
    marker = folder / "ran"
    path = folder / "base.pt2"
    torch.export.save(torch.export.export(_Net(), (torch.randn(2, 4),)), str(path))
    with zipfile.ZipFile(path) as archive:
        members = {n: archive.read(n) for n in archive.namelist()}
    root = next(iter(members)).split("/", 1)[0]
    members[f"{root}/data/sample_inputs/model.pt"] = pickle.dumps(Mkdir(marker))
    program = json.loads(members[f"{root}/models/model.json"])
    program["guards_code"] = [f"__import__('os').mkdir({str(marker)!r})"]
    members[f"{root}/models/model.json"] = json.dumps(program).encode()
    return members, marker, root


def _load(data: bytes, path: Path, marker: Path, what: str) -> None:
    path.write_bytes(data)
    try:
        load_pt2(path)
    except UserError as e:
        assert "\n" not in str(e), what
    except ValueError as e:  # the planner's own: TorchImportError, GraphError, ...
        assert type(e).__module__.startswith("planner."), (what, repr(e))
        assert "\n" not in str(e), what
    assert not marker.exists(), what


def _mutate_bytes(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    at = rng.randrange(len(data))
    kind = rng.choice(["flip", "cut", "insert", "delete", "repeat", "saturate"])
    if kind == "flip":
        return data[:at] + bytes([data[at] ^ (1 << rng.randrange(8))]) + data[at + 1:], \
            f"flip byte {at}"
    if kind == "cut":
        return data[:at], f"cut at {at}"
    if kind == "insert":
        return data[:at] + rng.randbytes(rng.randrange(1, 64)) + data[at:], f"insert at {at}"
    if kind == "delete":
        return data[:at] + data[at + rng.randrange(1, 64):], f"delete at {at}"
    if kind == "repeat":
        return data[:at] + data[at:at + 64] + data[at:], f"repeat at {at}"
    return data[:at] + b"\xff\xff\xff\xff" + data[at + 4:], f"saturate at {at}"


def test_zip_level_mutations(base, tmp_path):
    members, marker, _ = base
    honest = zip_members(members)
    rng = random.Random(49)
    # the signatures of every record are where a zip reader's decisions are: hit them often
    heads = [i for i in range(len(honest) - 4) if honest[i:i + 2] == b"PK"]
    for case in range(CASES):
        data, what = _mutate_bytes(honest, rng)
        if case % 2:  # a mutation at a record's header
            at = rng.choice(heads) + rng.randrange(46)
            data = honest[:at] + bytes([rng.randrange(256)]) + honest[at + 1:]
            what = f"set byte {at}"
        _load(data, tmp_path / "z.pt2", marker, what)


_VALUES = [None, True, -1, 0, 2 ** 70, 1.5, "NaN", "", [], {}, [{}], {"as_int": 3},
           {"as_expr": {"expr_str": "__import__('os').mkdir('x')"}},
           {"as_graph": {"name": "g; import os", "graph": {}}},
           {"as_custom_obj": {"name": "o", "class_fqn": "os.system"}}, "x" * 300,
           "torch.ops.higher_order.cond", "torch.ops.aten.mul.Tensor", "builtins.eval",
           "torch.ops.aten.__class__.default", "torch.ops.aten.empty.memory_format"]


def _paths(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for k, v in enumerate(doc):
            yield from _paths(v, (*prefix, k))


def _mutate_program(program, rng: random.Random) -> str:
    paths = [p for p in _paths(program) if p]
    path = rng.choice(paths)
    parent = program
    for key in path[:-1]:
        parent = parent[key]
    key = path[-1]
    kind = rng.choice(["delete", "add", "replace", "replace"])
    if kind == "delete":
        del parent[key]
    elif kind == "add" and isinstance(parent, dict):
        parent[rng.choice(["hack", "__class__", "as_expr", "guards"])] = rng.choice(_VALUES)
    else:
        parent[key] = rng.choice(_VALUES)
    return f"{kind} {'.'.join(map(str, path))}"


def test_schema_level_mutations(base, tmp_path):
    members, marker, root = base
    name = f"{root}/models/model.json"
    rng = random.Random(4949)
    for _ in range(CASES):
        program = json.loads(members[name])
        what = _mutate_program(program, rng)
        _load(zip_members({**members, name: json.dumps(program).encode()}), tmp_path / "s.pt2",
              marker, what)
