"""A .pt2 model file never runs code: each crafted kind of archive (a real exported program,
then modified so that loading it would create a marker directory) is refused by the planner's
own reader in one line naming the member and field, or imported as data, and the marker is
never created. Where torch.export.load (or the program it gives) runs the crafted code, the test
shows that too, so the crafted file is known to be live."""

from __future__ import annotations

import json
import os
import pickle
import struct
import subprocess
import sys
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from planner.errors import UserError  # noqa: E402
from planner.torch import load_pt2  # noqa: E402
from tests.helpers.pt2_archives import Mkdir, zip_members  # noqa: E402


class _Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)
        self.register_buffer("shift", torch.ones(3))

    def forward(self, x):
        return torch.relu(self.fc(x)) + self.shift


def _weights_pickled(members: dict[str, bytes], payload: bytes) -> str:
    name = "data/weights/model_weights_config.json"
    config = json.loads(members[name])
    entry = config["config"]["fc.weight"]
    entry["use_pickle"] = True
    members[f"data/weights/{entry['path_name']}"] = payload
    members[name] = json.dumps(config).encode()
    return name


def _legacy_constants(members: dict[str, bytes], payload: bytes) -> str:
    members["data/constants/model.pt"] = payload
    return "data/constants/model.pt"


def _legacy_weights(members: dict[str, bytes], payload: bytes) -> str:
    members["data/weights/model.pt"] = payload
    return "data/weights/model.pt"


def _sample_inputs_pickled(members: dict[str, bytes], payload: bytes) -> str:
    members["data/sample_inputs/model.pt"] = payload
    return "data/sample_inputs/model.pt"


def _opaque_constant(members: dict[str, bytes], payload: bytes) -> str:
    name = "data/constants/model_constants_config.json"
    config = json.loads(members[name])
    config["config"]["obj"] = {"path_name": "opaque_obj_0", "is_param": False,
                               "use_pickle": True, "tensor_meta": None}
    members["data/constants/opaque_obj_0"] = payload
    members[name] = json.dumps(config).encode()
    return name


def _code(marker: Path) -> str:
    return f"__import__('os').mkdir({str(marker)!r})"


def _program(members: dict[str, bytes], change: Callable[[dict], None]) -> str:
    program = json.loads(members["models/model.json"])
    change(program)
    members["models/model.json"] = json.dumps(program).encode()
    return "models/model.json"


def _symbolic_expression(members: dict[str, bytes], marker: Path) -> str:
    def change(program: dict) -> None:
        values = program["graph_module"]["graph"]["tensor_values"]
        first = values[sorted(values)[0]]
        first["sizes"][0] = {"as_expr": {"expr_str": _code(marker), "hint": {"as_int": 2}}}
    return _program(members, change)


def _guards_code(members: dict[str, bytes], marker: Path) -> str:
    return _program(members, lambda p: p.update(guards_code=[_code(marker)]))


def _forward_arg_names(members: dict[str, bytes], marker: Path) -> str:
    def change(program: dict) -> None:
        entry = program["graph_module"]["module_call_graph"][0]["signature"]
        entry["forward_arg_names"] = [f"x=({_code(marker)})"]
    return _program(members, change)


def _higher_order(kwarg: bool) -> Callable[[dict[str, bytes], Path], str]:
    """A node calling a higher-order op whose subgraph name (or a keyword argument's name)
    is code, which torch.fx's code generation would write into the module's source."""
    def craft(members: dict[str, bytes], marker: Path) -> str:
        def change(program: dict) -> None:
            graph = program["graph_module"]["graph"]
            sub = {"inputs": [], "outputs": [], "nodes": [], "tensor_values": {},
                   "sym_int_values": {}, "sym_bool_values": {}}
            name = f"g; {_code(marker)}" if not kwarg else "true_fn"
            inputs = [{"name": name if kwarg else "true_fn",
                       "arg": {"as_graph": {"name": name, "graph": sub}}, "kind": 1}]
            if kwarg:
                inputs.append({"name": f"k=({_code(marker)})", "arg": {"as_int": 1},
                               "kind": 2})
            graph["nodes"].insert(0, {"target": "torch.ops.higher_order.cond",
                                      "inputs": inputs, "outputs": [], "metadata": {},
                                      "name": "cond"})
        return _program(members, change)
    return craft


def _aten_kwarg_name(members: dict[str, bytes], marker: Path) -> str:
    def change(program: dict) -> None:
        node = program["graph_module"]["graph"]["nodes"][-1]
        node["inputs"].append({"name": f"self=({_code(marker)})", "arg": {"as_int": 1},
                               "kind": 2})
    return _program(members, change)


# each kind: how to craft it from a real archive's members (with a pickle that makes the
# marker, or the marker's path for code strings), what the planner does with it
# ("refused", naming the member it returns, or "imported": read as data, the code never run)
KINDS: dict[str, tuple[Callable[..., str], str]] = {
    "weights use_pickle": (_weights_pickled, "refused"),
    "legacy constants": (_legacy_constants, "refused"),
    "legacy weights": (_legacy_weights, "refused"),
    "pickled sample inputs": (_sample_inputs_pickled, "imported"),
    "opaque object constant": (_opaque_constant, "refused"),
    "symbolic expression": (_symbolic_expression, "refused"),
    "guards_code": (_guards_code, "imported"),
    "forward_arg_names": (_forward_arg_names, "imported"),
    "higher-order subgraph name": (_higher_order(kwarg=False), "refused"),
    "higher-order kwarg name": (_higher_order(kwarg=True), "refused"),
    "aten kwarg name": (_aten_kwarg_name, "refused"),
}
CODE_STRINGS = {"symbolic expression", "guards_code", "forward_arg_names",
                "higher-order subgraph name", "higher-order kwarg name", "aten kwarg name"}
# torch.export.load, then the program's module and decomposition, runs these as they are
LIVE_UNDER_TORCH = {"weights use_pickle", "legacy constants", "legacy weights",
                    "pickled sample inputs", "opaque object constant", "symbolic expression",
                    "guards_code"}


@pytest.fixture(scope="module")
def real(tmp_path_factory) -> Path:
    """A real exported program's archive, read by every test, written once."""
    path = tmp_path_factory.mktemp("real") / "real.pt2"
    torch.export.save(torch.export.export(_Model(), (torch.randn(2, 4),)), str(path))
    return path


def _rewrite(src: Path, dst: Path, change: Callable[[dict[str, bytes]], str]) -> str:
    """dst: src with its members changed; returns the changed member's zip name."""
    with zipfile.ZipFile(src) as archive:
        root = archive.namelist()[0].split("/", 1)[0]
        members = {n.split("/", 1)[1]: archive.read(n) for n in archive.namelist()}
    changed = change(members)
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as out:
        for name, data in members.items():
            out.writestr(f"{root}/{name}", data)
    return f"{root}/{changed}"


def _craft(real: Path, tmp_path: Path, kind: str) -> tuple[Path, str, Path]:
    marker = tmp_path / "ran"
    craft, _ = KINDS[kind]
    payload = pickle.dumps(Mkdir(marker))
    change = ((lambda m: craft(m, marker)) if kind in CODE_STRINGS
              else (lambda m: craft(m, payload)))
    path = tmp_path / "crafted.pt2"
    member = _rewrite(real, path, change)
    return path, member, marker


def _torch_runs(path: Path) -> None:
    try:
        program = torch.export.load(str(path))
        program.module()
        program.run_decompositions()
    except Exception:  # noqa: S110 - most crafted kinds then fail; that the code ran is the point
        pass


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_crafted_archive_runs_nothing(real, kind, tmp_path):
    path, member, marker = _craft(real, tmp_path, kind)
    if kind in LIVE_UNDER_TORCH:  # the crafted archive is live: torch runs its code
        _torch_runs(path)
        assert marker.exists(), f"{kind}: the crafted archive should run code under torch"
        os.rmdir(marker)

    if KINDS[kind][1] == "imported":
        assert load_pt2(path).tensor("fc.weight").role == "param"
    else:
        with pytest.raises(UserError) as refused:
            load_pt2(path)
        message = str(refused.value)
        assert repr(member) in message and "\n" not in message
    assert not marker.exists()


@pytest.mark.parametrize("entry", ["graph", "plan", "load_graph"])
def test_every_entry_point_runs_nothing(real, entry, tmp_path):
    """`planner graph`, `planner plan` and planner.frontend.load.load_graph read the same way."""
    for kind in ("guards_code", "higher-order subgraph name"):
        path, _, marker = _craft(real, tmp_path, kind)
        if entry == "load_graph":
            from planner.frontend.load import load_graph
            try:
                load_graph(str(path))
            except UserError:
                pass
        else:
            extra = ["--train", "sgd", "--loss", "mse", "--target", "xeon-8180", "-o",
                     str(tmp_path / "p.json")] if entry == "plan" else []
            out = subprocess.run([sys.executable, "-m", "planner.cli", entry, str(path), *extra],
                                 capture_output=True, text=True, check=False)
            assert out.returncode in (0, 2), out.stderr
            assert len(out.stderr.strip().splitlines()) <= 1, out.stderr
        assert not marker.exists(), (entry, kind)


def test_cli_refuses_in_one_line_and_runs_nothing(real, tmp_path):
    path, member, marker = _craft(real, tmp_path, "weights use_pickle")
    out = subprocess.run([sys.executable, "-m", "planner.cli", "graph", str(path)],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 2, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert repr(member) in out.stderr and "'fc.weight' is pickled" in out.stderr
    assert not marker.exists()


def test_shared_library_member_is_refused(real, tmp_path):
    def add_library(members: dict[str, bytes]) -> str:
        members["data/aotinductor/model/model.so"] = b"\x7fELF"
        return "data/aotinductor/model/model.so"

    path = tmp_path / "aoti.pt2"
    member = _rewrite(real, path, add_library)
    with pytest.raises(UserError, match="not a part of a program the planner reads") as refused:
        load_pt2(path)
    assert repr(member) in str(refused.value)


def test_non_operator_target_is_refused_naming_the_node(real, tmp_path):
    def call_mkdir(members: dict[str, bytes]) -> str:
        program = json.loads(members["models/model.json"])
        node = program["graph_module"]["graph"]["nodes"][0]
        node["target"] = "torch.os.mkdir"
        members["models/model.json"] = json.dumps(program).encode()
        return "models/model.json"

    path = tmp_path / "target.pt2"
    _rewrite(real, path, call_mkdir)
    with pytest.raises(UserError, match="node 'linear'.target is 'torch.os.mkdir', not an ATen"):
        load_pt2(path)


def test_newer_schema_is_refused_naming_the_version(real, tmp_path):
    def newer_schema(members: dict[str, bytes]) -> str:
        program = json.loads(members["models/model.json"])
        program["schema_version"] = {"major": 999, "minor": 0}
        members["models/model.json"] = json.dumps(program).encode()
        return "models/model.json"

    path = tmp_path / "newer.pt2"
    _rewrite(real, path, newer_schema)
    with pytest.raises(UserError, match=r"schema_version 999\.0; the planner reads"):
        load_pt2(path)


def test_a_real_archive_still_loads(real):
    graph = load_pt2(real)
    assert graph.tensor("fc.weight").role == "param"
    assert graph.tensor("shift").shape == (3,)


def _hidden_record(archive: bytes, name: str, data: bytes) -> bytes:
    """`archive` with a second local record for `name` (holding `data`) placed before the
    central directory, and the central entry re-pointed at it: a reader of local headers and
    a reader of the central directory see different members."""
    end = archive.rfind(b"PK\x05\x06")
    count, _, cd = struct.unpack_from("<HII", archive, end + 10)
    raw = name.encode()
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0, zlib.crc32(data),
                        len(data), len(data), len(raw), 0) + raw + data
    out = bytearray(archive[:cd] + local + archive[cd:])
    entry = cd + len(local)
    for _ in range(count):
        nlen, elen, clen = struct.unpack_from("<HHH", out, entry + 28)
        if out[entry + 46:entry + 46 + nlen] == raw:
            struct.pack_into("<I", out, entry + 42, cd)
            struct.pack_into("<III", out, entry + 16, zlib.crc32(data), len(data), len(data))
        entry += 46 + nlen + elen + clen
    struct.pack_into("<I", out, end + len(local) + 16, cd + len(local))
    return bytes(out)


@pytest.mark.parametrize("variant", ["appended archive", "prepended archive", "hidden record"])
def test_concat_differential_is_refused(real, variant, tmp_path):
    """Two readers that would read different members (the issue's "concat" file): refused,
    whichever member a reader would pick, and the pickle never runs."""
    marker = tmp_path / "ran"
    payload = pickle.dumps(Mkdir(marker))
    honest = real.read_bytes()
    with zipfile.ZipFile(real) as archive:
        root = archive.namelist()[0].split("/", 1)[0]
    evil = zip_members({f"{root}/data/weights/model.pt": payload})
    data = {"appended archive": lambda: honest + evil,
            "prepended archive": lambda: evil + honest,
            "hidden record": lambda: _hidden_record(zip_members(_read_all(real)),
                                                    f"{root}/data/weights/weight_0",
                                                    payload)}[variant]()
    path = tmp_path / "concat.pt2"
    path.write_bytes(data)
    why = {"appended archive": "central directory does not end where",
           "prepended archive": "zip64 end record that does not end",
           "hidden record": "bytes no entry accounts for"}[variant]
    with pytest.raises(UserError, match=f"not a saved torch.export program.*{why}") as refused:
        load_pt2(path)
    assert "\n" not in str(refused.value)
    assert not marker.exists()


def _read_all(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        return {n: archive.read(n) for n in archive.namelist()}
