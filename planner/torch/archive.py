"""A .pt2 archive inspected before torch sees it: a model file may hold tensors, JSON and text,
never code.

torch.export.load runs code from the archive in several places: pickled weights and constants
(`use_pickle: true`, legacy `data/weights/<model>.pt` and `data/constants/<model>.pt`, opaque
and TorchBind objects) go through an unrestricted unpickler, sample inputs fall back to one when
the restricted unpickler refuses them, symbolic shape expressions go through sympy's `eval`, and
`data/aotinductor/` holds shared libraries that are loaded. So the archive is read into memory
once, every member is checked against what a planner-readable program holds, and only those
same bytes are handed to torch (docs/security.md).

>>> safe_target("torch.ops.aten.relu.default"), safe_target("torch.os.system")
(True, False)
"""

from __future__ import annotations

import io
import json
import re
import warnings
import zipfile
from pathlib import Path
from typing import Any

from planner.errors import UserError

# Members every archive written by torch.export.save has, holding version strings only.
_PLAIN = frozenset({"archive_format", "archive_version", "byteorder", ".data/version",
                    ".data/serialization_id"})
# ATen, prims and control-flow operators: torch's own ops, resolved by name, never a module path.
_TARGET = re.compile(r"torch\.ops\.(aten|prims|higher_order)(\.[A-Za-z][A-Za-z0-9_]*){1,2}")
_GETITEM = "_operator.getitem"
# A payload path inside data/weights or data/constants: a flat file name.
_PAYLOAD = re.compile(r"[A-Za-z0-9_]+")


def safe_target(target: str) -> bool:
    """Whether a node's target names one of torch's operators and nothing else."""
    return target == _GETITEM or _TARGET.fullmatch(target) is not None


def read_archive(path: str | Path) -> bytes:
    """The bytes of a .pt2 archive after every member has been checked; UserError naming the
    member (and what it holds) otherwise."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror})") from None
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        names = archive.namelist()
    except (zipfile.BadZipFile, ValueError, EOFError) as e:
        raise UserError(f"{path}: not a saved torch.export program (not a zip archive: "
                        f"{e})") from None
    members = _members(path, names)
    try:
        _check(path, archive, members)
    except (zipfile.BadZipFile, ValueError, EOFError, KeyError) as e:
        raise UserError(f"{path}: not a saved torch.export program ({type(e).__name__}: "
                        f"{e})") from None
    return data


def _members(path: str | Path, names: list[str]) -> dict[str, str]:
    """Archive-relative name -> zip member name; torch reads every record under one root."""
    roots = {name.split("/", 1)[0] for name in names}
    if len(roots) != 1 or any("/" not in name for name in names):
        raise UserError(f"{path}: not a saved torch.export program (its members are not under "
                        "one folder)")
    members = {name.split("/", 1)[1]: name for name in names}
    if len(members) != len(names):
        raise UserError(f"{path}: not a saved torch.export program (a member is listed twice)")
    return members


def _refuse(path: str | Path, member: str, why: str) -> UserError:
    return UserError(f"{path}: member {member!r} {why}; the planner reads only tensors and "
                     "JSON from a model file (docs/security.md)")


def _check(path: str | Path, archive: zipfile.ZipFile, members: dict[str, str]) -> None:
    def text(name: str) -> Any:
        try:
            return json.loads(archive.read(members[name]).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise _refuse(path, members[name], f"is not JSON ({e})") from None

    models = [n[len("models/"):-len(".json")] for n in members
              if n.startswith("models/") and n.endswith(".json")]
    if not models:
        raise UserError(f"{path}: not a saved torch.export program (no models/<name>.json; an "
                        "archive of another format or torch version)")
    allowed = set(_PLAIN) | {n for n in members if n.startswith("extra/")}
    for model in models:
        for legacy in (f"data/weights/{model}.pt", f"data/constants/{model}.pt"):
            if legacy in members:
                raise _refuse(path, members[legacy], "is a pickle (the legacy weights or "
                              "constants format, unpickled without restriction)")
        allowed.add(f"models/{model}.json")
        _check_program(path, members[f"models/{model}.json"], text(f"models/{model}.json"))
        for folder, kind in (("data/weights", "weights"), ("data/constants", "constants")):
            config = f"{folder}/{model}_{kind}_config.json"
            if config not in members:
                raise _refuse(path, members[f"models/{model}.json"], f"has no {config}")
            allowed.add(config)
            allowed |= _check_payloads(path, members, folder, config, text(config))
        inputs = f"data/sample_inputs/{model}.pt"
        if inputs in members:
            _check_sample_inputs(path, members[inputs], archive.read(members[inputs]))
            allowed.add(inputs)
    for name in sorted(set(members) - allowed):
        raise _refuse(path, members[name], "is not a part of a program the planner reads (it "
                      "could hold code: AOTInductor libraries, pickled objects)")


def _check_payloads(path: str | Path, members: dict[str, str], folder: str, config: str,
                    payload: Any) -> set[str]:
    """The tensor files a weights or constants config names; each must be raw tensor bytes."""
    entries = payload.get("config") if isinstance(payload, dict) else None
    if not isinstance(entries, dict):
        raise _refuse(path, members[config], "has no 'config' table")
    files = set()
    for fqn, meta in entries.items():
        where = f"entry {fqn!r}"
        if not isinstance(meta, dict):
            raise _refuse(path, members[config], f"{where} is not a table")
        if meta.get("use_pickle") is not False:
            raise _refuse(path, members[config], f"{where} is pickled (use_pickle: "
                          f"{json.dumps(meta.get('use_pickle'))}; unpickled without "
                          "restriction)")
        name = meta.get("path_name")
        if not isinstance(name, str) or not _PAYLOAD.fullmatch(name) or \
                not (name.startswith("weight_") or name.startswith("tensor_")):
            raise _refuse(path, members[config], f"{where} names payload {name!r}, not a raw "
                          "tensor file (weight_N or tensor_N)")
        if not isinstance(meta.get("tensor_meta"), dict):
            raise _refuse(path, members[config], f"{where} has no tensor_meta")
        if f"{folder}/{name}" not in members:
            raise _refuse(path, members[config], f"{where} names payload {name!r}, which the "
                          "archive lacks")
        files.add(f"{folder}/{name}")
    return files


def _check_sample_inputs(path: str | Path, member: str, data: bytes) -> None:
    """torch reads sample inputs with its restricted unpickler and, when that refuses them,
    again without restriction: refused here unless the restricted one accepts them."""
    import torch
    try:
        with warnings.catch_warnings():  # its notes on pickle protocols are not the refusal
            warnings.simplefilter("ignore")
            torch.load(io.BytesIO(data), weights_only=True)
    except Exception as e:  # the restricted unpickler's refusal, whatever its type
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise _refuse(path, member, f"is a pickle of more than tensors ({first})") from None


def _check_program(path: str | Path, member: str, program: Any) -> None:
    """Node targets name torch operators; no symbolic expression (sympy evaluates it as Python,
    and the planner plans static shapes only)."""
    stack = [program]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            if {"target", "inputs", "outputs"} <= item.keys():
                target = item["target"]
                if not isinstance(target, str) or not safe_target(target):
                    raise _refuse(path, member, f"node {item.get('name')!r} calls {target!r}, "
                                  "not a torch operator")
            if "expr_str" in item:
                raise _refuse(path, member, f"holds symbolic shape {item['expr_str']!r} "
                              "(export with static shapes)")
            if item.get("range_constraints"):
                raise _refuse(path, member, "has range constraints of symbolic shapes "
                              "(export with static shapes)")
            stack.extend(item.values())
