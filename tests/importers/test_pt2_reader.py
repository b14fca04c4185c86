"""The planner's own .pt2 reader: honest archives (the importer's zoo of modules, weight_norm, a
cast, a decomposed program, BatchNorm in training mode) give the Graph the in-process path
gives; ambiguous zips, special files and a zip bomb are refused in one line."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tracemalloc
import zipfile
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from planner.errors import UserError  # noqa: E402
from planner.torch import load_pt2  # noqa: E402
from tests.helpers.pt2_archives import zip_members  # noqa: E402
from tests.helpers.pt2_reader import same_as_in_process  # noqa: E402
from tests.importers.torch_models import MODELS, model_case  # noqa: E402


class _Held(torch.nn.Module):
    """The held-out classes of the issue: weight_norm, a cast, BatchNorm training."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.utils.parametrizations.weight_norm(torch.nn.Linear(4, 2))
        self.old = torch.nn.utils.weight_norm(torch.nn.Linear(2, 2))

    def forward(self, x):
        y = self.bn(self.conv(x)).relu().mean((2, 3))
        return self.old(self.fc(y.float()))


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("decomposed", [False, True])
def test_held_out_classes_import_as_the_in_process_path(train, decomposed, tmp_path):
    torch.manual_seed(0)
    module = _Held().train(train)
    same_as_in_process(module, torch.randn(2, 3, 8, 8), tmp_path, decomposed)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_zoo_archives_import_as_the_in_process_path(name, tmp_path):
    model, x, _ = model_case(name)
    same_as_in_process(model.train(), torch.from_numpy(x), tmp_path)


@pytest.mark.parametrize("label", ["lstm", "dcgan", "wide_deep"])
def test_bench_zoo_twins_import_as_the_in_process_path(label, tmp_path):
    """The nn.Module twins of the zoo's models (bench/zoo_modules.py; resnet-50 too, by hand:
    10 s)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from zoo_modules import _MAKERS

    from tests.helpers.zoo_sizes import SIZES

    model, inputs, _, _, _ = _MAKERS[label](**SIZES[label])
    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    same_as_in_process(model.train(), inputs, tmp_path)


def test_planner_graph_and_plan_read_an_archive(tmp_path):
    path = tmp_path / "held.pt2"
    torch.export.save(torch.export.export(_Held(), (torch.randn(2, 3, 8, 8),)), str(path))
    for command in (["graph", str(path)], ["plan", str(path), "--train", "sgd", "--loss",
                                           "mse", "--target", "xeon-8180", "-o",
                                           str(tmp_path / "plan.json")]):
        out = subprocess.run([sys.executable, "-m", "planner.cli", *command],
                             capture_output=True, text=True, check=False)
        assert out.returncode == 0, out.stderr


# ---- zip-level refusals ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def honest(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("honest") / "h.pt2"
    torch.export.save(torch.export.export(torch.nn.Linear(4, 3), (torch.randn(2, 4),)),
                      str(path))
    return path.read_bytes()


def _refused(tmp_path, data: bytes, match: str) -> str:
    path = tmp_path / "x.pt2"
    path.write_bytes(data)
    with pytest.raises(UserError, match=match) as refused:
        load_pt2(path)
    assert "\n" not in str(refused.value)
    return str(refused.value)


def _members(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return {n: z.read(n) for n in z.namelist()}


def test_appended_and_prepended_bytes_are_refused(honest, tmp_path):
    legacy = zip_members({"h/data/weights/model.pt": b"pickle"})
    _refused(tmp_path, honest + legacy, "start|before the central directory|belong to no")
    _refused(tmp_path, b"\0" * 16 + honest, "zip64 end record|starts at byte|belong to no")
    _refused(tmp_path, honest + b"\0", "bytes after the end record")


def test_central_entry_and_local_header_must_agree(honest, tmp_path):
    data = bytearray(honest)
    local = data.find(b"models/model.json") - 30 - len("h/")
    assert data[local:local + 4] == b"PK\x03\x04"
    data[local + 30 + len("h/")] = ord("M")  # the local header names another member
    _refused(tmp_path, bytes(data), "its local header names another member")


def test_duplicate_member_is_refused(honest, tmp_path):
    members = _members(honest)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z, pytest.warns(UserWarning):
        for name, data in members.items():
            z.writestr(name, data)
        z.writestr("h/models/model.json", b"{}")
    _refused(tmp_path, buf.getvalue(), "listed twice")


@pytest.mark.parametrize("name", ["/abs/x", "h/../x", "h\\x", "h/a\x01"])
def test_paths_outside_the_archive_are_refused(honest, name, tmp_path):
    members = _members(honest)
    members[name] = b""
    _refused(tmp_path, zip_members(members), "not a plain relative file path")


def test_symlink_member_is_refused(honest, tmp_path):
    buf = io.BytesIO(honest)
    members = _members(honest)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
        link = zipfile.ZipInfo("h/extra/link")
        link.create_system = 3
        link.external_attr = 0o120777 << 16
        z.writestr(link, b"/etc/passwd")
    _refused(tmp_path, buf.getvalue(), "symlink")


def test_encrypted_member_is_refused(honest, tmp_path):
    data = bytearray(zip_members(_members(honest)))
    at = data.find(b"PK\x01\x02")
    data[at + 8] |= 1  # the central entry's encryption flag
    _refused(tmp_path, bytes(data), "encrypted")


def test_zip_bomb_is_refused_before_it_inflates(honest, tmp_path):
    """A 500 MB member deflated to about 0.5 MB: refused from its declared sizes, without the
    memory to inflate it."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in _members(honest).items():
            z.writestr(name, data)
        with z.open("h/extra/bomb", "w", force_zip64=True) as bomb_member:
            for _ in range(500):
                bomb_member.write(bytes(1 << 20))
    bomb = buf.getvalue()
    assert len(bomb) < 1 << 20
    tracemalloc.start()
    try:
        _refused(tmp_path, bomb, "zip bomb")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, peak


def test_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "model.pt2"
    os.mkfifo(fifo)
    code = f"from planner.torch import load_pt2; load_pt2({str(fifo)!r})"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=False)
    assert "not a regular file" in out.stderr, out.stderr


def test_big_endian_archive_is_refused(honest, tmp_path):
    members = _members(honest)
    members["h/byteorder"] = b"big"
    _refused(tmp_path, zip_members(members), "member 'h/byteorder' holds b'big'")


def test_payload_shorter_than_its_declared_view_is_refused(honest, tmp_path):
    members = _members(honest)
    members["h/data/weights/weight_0"] = members["h/data/weights/weight_0"][:8]
    _refused(tmp_path, zip_members(members), r"past its 2 elements")


def test_input_too_large_to_trace_is_refused(tmp_path):
    """Shapes are plain integers the planner plans with; one torch cannot even allocate to
    trace is refused by name, not a raw allocator error."""
    real = tmp_path / "real.pt2"
    torch.export.save(torch.export.export(torch.nn.Linear(4, 3), (torch.randn(2, 4),)),
                      str(real))
    members = _members(real.read_bytes())
    name = next(n for n in members if n.endswith("models/model.json"))
    program = json.loads(members[name])
    values = program["graph_module"]["graph"]["tensor_values"]
    user = program["graph_module"]["signature"]["input_specs"][-1]["user_input"]
    values[user["arg"]["as_tensor"]["name"]]["sizes"] = [{"as_int": 1 << 39}, {"as_int": 1 << 30}]
    members[name] = json.dumps(program).encode()
    _refused(tmp_path, zip_members(members), "input 'input' of shape .* cannot be allocated")
