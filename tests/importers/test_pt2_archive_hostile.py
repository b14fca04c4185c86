"""A .pt2 model file never runs code: each crafted kind of archive (a real exported program,
then modified so that loading it would create a marker directory) is shown to run code under
torch.export.load, then refused by the planner in one line naming the member, with the marker
never created."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from planner.errors import UserError  # noqa: E402
from planner.torch import load_pt2  # noqa: E402


class _Mkdir:
    """Unpickled, creates the marker directory: the stand-in for any code a pickle could run."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


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


def _symbolic_expression(members: dict[str, bytes], marker: Path) -> str:
    program = json.loads(members["models/model.json"])
    values = program["graph_module"]["graph"]["tensor_values"]
    first = values[sorted(values)[0]]
    first["sizes"][0] = {"as_expr": {"expr_str": f"__import__('os').mkdir({str(marker)!r})",
                                     "hint": {"as_int": 2}}}
    members["models/model.json"] = json.dumps(program).encode()
    return "models/model.json"


# each kind: how to craft it from a real archive's members; returns the member it changed
KINDS: dict[str, Callable[..., str]] = {
    "weights use_pickle": _weights_pickled,
    "legacy constants": _legacy_constants,
    "legacy weights": _legacy_weights,
    "pickled sample inputs": _sample_inputs_pickled,
    "opaque object constant": _opaque_constant,
    "symbolic expression": _symbolic_expression,
}


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
    craft = KINDS[kind]
    payload = pickle.dumps(_Mkdir(marker))
    change = ((lambda m: craft(m, marker)) if kind == "symbolic expression"
              else (lambda m: craft(m, payload)))
    path = tmp_path / "crafted.pt2"
    member = _rewrite(real, path, change)
    return path, member, marker


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_crafted_archive_is_refused_before_it_runs(real, kind, tmp_path):
    path, member, marker = _craft(real, tmp_path, kind)
    # the crafted archive is live: torch.export.load runs its code
    try:
        torch.export.load(str(path))
    except Exception:  # noqa: S110 - most crafted kinds then fail; that the code ran is the point
        pass
    assert marker.exists(), f"{kind}: the crafted archive should run code under torch"
    os.rmdir(marker)

    with pytest.raises(UserError) as refused:
        load_pt2(path)
    assert not marker.exists()
    message = str(refused.value)
    assert repr(member) in message and "\n" not in message


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
    with pytest.raises(UserError, match="node 'linear' calls 'torch.os.mkdir'"):
        load_pt2(path)


def test_torchs_warnings_are_part_of_the_refusal(real, tmp_path, capfd):
    """torch refuses a newer schema with "check the warnings above"; the warning is the reason."""
    def newer_schema(members: dict[str, bytes]) -> str:
        program = json.loads(members["models/model.json"])
        program["schema_version"] = {"major": 999, "minor": 0}
        members["models/model.json"] = json.dumps(program).encode()
        return "models/model.json"

    path = tmp_path / "newer.pt2"
    _rewrite(real, path, newer_schema)
    with pytest.raises(UserError, match=r"torch warned: .*schema version.*999") as refused:
        load_pt2(path)
    assert "\n" not in str(refused.value)
    assert "Traceback" not in capfd.readouterr().err


def test_a_real_archive_still_loads(real):
    graph = load_pt2(real)
    assert graph.tensor("fc.weight").role == "param"
    assert graph.tensor("shift").shape == (3,)
