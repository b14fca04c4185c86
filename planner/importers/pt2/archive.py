"""A .pt2 archive (torch.export.save) read as data: members from
planner/importers/pt2/ziparchive.py, the program from planner/importers/pt2/saved.py, weights and
constants as raw little-endian bytes of their declared dtype, sizes, strides and storage offset.
torch never sees the file.

| member (under the archive's one root folder)            | read as                          |
| ------------------------------------------------------- | -------------------------------- |
| `archive_format`, `byteorder`                            | `pt2`, `little` (else refused)   |
| `archive_version`, `.data/version`, `.data/serialization_id` | short text, not used        |
| `models/<m>.json` (exactly one model)                    | the program (saved.py)           |
| `data/{weights,constants}/<m>_{weights,constants}_config.json` | payload tables            |
| `data/weights/weight_N`, `data/constants/tensor_N`       | raw tensor storage               |
| `data/sample_inputs/<m>.pt`, `extra/*`                   | never read (a pickle, free text) |

Refused, naming the member and field: pickled payloads (`use_pickle`), the legacy
`data/weights/<m>.pt` and `data/constants/<m>.pt`, TorchBind and opaque objects
(`custom_obj_N`, `opaque_obj_N`), AOTInductor libraries and any member the table does not list.

>>> payload_name("weight_3"), payload_name("opaque_obj_0")
(True, False)
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from planner.errors import UserError
from planner.importers.pt2.saved import Meta, SavedProgram, parse_program, tensor_meta
from planner.importers.pt2.ziparchive import read_zip

_PLAIN = {"archive_format": b"pt2", "byteorder": b"little", "archive_version": None,
          ".data/version": None, ".data/serialization_id": None}
_PAYLOAD = re.compile(r"(weight|tensor)_[0-9]{1,9}")
_MODEL = re.compile(r"models/([A-Za-z0-9_]{1,64})\.json")


def payload_name(name: str) -> bool:
    """Whether a payload's path_name is a raw tensor file (never a pickled object)."""
    return _PAYLOAD.fullmatch(name) is not None


@dataclass(frozen=True)
class SavedArchive:
    """A .pt2 archive's program and its weights and constants (state_dict name -> array)."""

    program: SavedProgram
    tensors: dict[str, np.ndarray]
    member: str  # the program's zip member, for messages


def read_archive(path: str | Path) -> SavedArchive:
    """The program and tensors of a .pt2 archive, or a UserError naming the member and field."""
    zipped = read_zip(path, "saved torch.export program")
    roots = {name.split("/", 1)[0] for name in zipped}
    if len(roots) != 1 or any("/" not in name for name in zipped):
        raise UserError(f"{path}: not a saved torch.export program (its members are not under "
                        "one folder)")
    (root,) = roots
    members = {name.split("/", 1)[1]: data for name, data in zipped.items()}

    def refuse(member: str, why: str) -> UserError:
        return UserError(f"{path}: member {f'{root}/{member}'!r} {why}; the planner reads only "
                         "tensors and JSON from a model file (docs/security.md)")

    models = [m.group(1) for m in map(_MODEL.fullmatch, members) if m]
    if len(models) != 1:
        raise UserError(f"{path}: not a saved torch.export program ({len(models)} programs "
                        "under models/; the planner reads an archive of one)")
    (model,) = models
    for name, want in _PLAIN.items():
        data = members.get(name)
        if data is not None and (len(data) > 64 or (want is not None and data.strip() != want)):
            raise refuse(name, f"holds {data[:64]!r}, not {want!r}" if want else "is not a "
                         "short version string")
    for legacy in (f"data/weights/{model}.pt", f"data/constants/{model}.pt"):
        if legacy in members:
            raise refuse(legacy, "is a pickle (the legacy weights or constants format)")
    program_member = f"models/{model}.json"
    program = parse_program(_json(members, program_member, refuse),
                            f"{path}: member {f'{root}/{program_member}'!r}")
    read = {program_member, *_PLAIN}
    tensors: dict[str, np.ndarray] = {}
    for folder, kind in (("data/weights", "weights"), ("data/constants", "constants")):
        config = f"{folder}/{model}_{kind}_config.json"
        if config not in members:
            raise refuse(program_member, f"comes without {config}")
        read.add(config)
        for fqn, (payload, meta) in _payloads(_json(members, config, refuse), config,
                                              refuse).items():
            member = f"{folder}/{payload}"
            if member not in members:
                raise refuse(config, f"entry {fqn!r} names payload {payload!r}, which the "
                             "archive lacks")
            read.add(member)
            tensors[fqn] = strided(members[member], meta, lambda why, m=member, f=fqn:
                                   refuse(m, f"(entry {f!r}) {why}"))
    ignored = {n for n in members if n.startswith("extra/")}
    ignored.add(f"data/sample_inputs/{model}.pt")
    for name in sorted(set(members) - read - ignored):
        raise refuse(name, "is not a part of a program the planner reads (it could hold code: "
                     "AOTInductor libraries, pickled objects)")
    return SavedArchive(program, tensors, f"{root}/{program_member}")


def _json(members: dict[str, bytes], name: str, refuse) -> Any:
    try:
        return json.loads(members[name].decode("utf-8"),
                          parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise refuse(name, f"is not JSON ({type(e).__name__}: {str(e)[:80]})") from None


def _payloads(doc: Any, config: str, refuse) -> dict[str, tuple[str, Meta]]:
    """state_dict name -> (payload file, declared tensor) of one payload config."""
    entries = doc.get("config") if isinstance(doc, dict) and list(doc) == ["config"] else None
    if not isinstance(entries, dict):
        raise refuse(config, "is not a table {'config': {...}} of payloads")
    out = {}
    for fqn, meta in entries.items():
        where = f"entry {fqn[:80]!r}"
        if not isinstance(meta, dict) or set(meta) != {"path_name", "is_param", "use_pickle",
                                                         "tensor_meta"}:
            raise refuse(config, f"{where} is not a payload record (path_name, is_param, "
                         "use_pickle, tensor_meta)")
        if meta["use_pickle"] is not False:
            raise refuse(config, f"{where} is pickled (field use_pickle: "
                         f"{json.dumps(meta['use_pickle'])})")
        name = meta["path_name"]
        if not isinstance(name, str) or not payload_name(name):
            raise refuse(config, f"{where} field path_name is {str(name)[:80]!r}, not a raw "
                         "tensor file (weight_N or tensor_N; custom and opaque objects are "
                         "refused)")
        if meta["tensor_meta"] is None:
            raise refuse(config, f"{where} field tensor_meta is null (not a tensor)")
        out[fqn] = (name, tensor_meta(meta["tensor_meta"], f"member {config!r}",
                                      f"{where}.tensor_meta"))
    return out


def strided(data: bytes, meta: Meta, refuse) -> np.ndarray:
    """The tensor a payload's storage holds at the declared sizes, strides and offset (as
    torch.as_strided reads it), copied out; refused where the view leaves the storage or is
    larger than it.

    >>> strided(np.arange(6, dtype="<f4").tobytes(), Meta("float32", (2, 2), (1, 3), 1), None)
    array([[1., 4.],
           [2., 5.]], dtype=float32)
    """
    dtype = np.dtype(meta.dtype)
    dtype = dtype.newbyteorder("<") if dtype.itemsize > 1 and dtype.kind in "iuf" else dtype
    count = math.prod(meta.shape)
    if len(data) % dtype.itemsize:
        raise refuse(f"holds {len(data)} bytes, not a whole number of {meta.dtype} elements")
    storage = len(data) // dtype.itemsize
    if count == 0:
        return np.zeros(meta.shape, dtype=dtype.newbyteorder("="))
    last = meta.offset + sum((d - 1) * s for d, s in zip(meta.shape, meta.strides, strict=True))
    if last >= storage or count > storage:
        raise refuse(f"declares {meta.dtype} sizes {list(meta.shape)}, strides "
                     f"{list(meta.strides)} and offset {meta.offset}, past its {storage} "
                     "elements")
    flat = np.frombuffer(data, dtype=dtype)
    view = np.lib.stride_tricks.as_strided(
        flat[meta.offset:], shape=meta.shape,
        strides=tuple(s * dtype.itemsize for s in meta.strides), writeable=False)
    return np.array(view, dtype=dtype.newbyteorder("="), order="C", copy=True)
