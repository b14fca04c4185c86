"""A seeded generator of .pt2 archives with edge values in the constants of integer and index
ops (tests/importers/test_pt2_edge_corpus.py).

Each family is a small honest torch.export program over one integer or index op whose operands
are constant tensors (made in forward: lifted constants; or buffers), exported once. Its archive
is then copied with one or more constant payloads (the raw bytes of data/constants/tensor_N or
data/weights/weight_N) replaced by edge values of the same dtype and element count: the
integer extremes, -1, 0, indices and offsets just out of range and far out of range, huge
sizes; NaN and infinities for float constants that an index is computed from. A few families
are edited in the program's JSON instead (the literal sizes and fill values of factories).

The same seed gives the same files (names and bytes): the cases are drawn by
random.Random(seed) from the families in a fixed order.
"""

from __future__ import annotations

import random
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

I64, I32 = np.iinfo(np.int64), np.iinfo(np.int32)


@dataclass(frozen=True)
class Family:
    """One honest program: `op(x, *constants)` added to (or indexing) the input x."""

    name: str
    op: Callable
    consts: dict[str, np.ndarray]  # honest values, each distinct in its bytes
    shape: tuple[int, ...] = (4,)  # the input's
    form: str = "lifted"  # "lifted" (torch.tensor in forward) or "buffer"


def _i64(*v: int) -> np.ndarray:
    return np.array(v, np.int64)


def _families() -> list[Family]:  # noqa: PLR0915 - one table
    import torch

    f = torch.nn.functional
    data = np.array([1.5, 2.5, 3.5, 4.5], np.float32)
    out = []
    for mode in ("trunc", "floor", None):
        out.append(Family(f"div_{mode}", lambda x, k, d, m=mode:
                          x + torch.div(k, d, rounding_mode=m).float().sum(),
                          {"k": _i64(7001, -7002), "d": _i64(3, 5)}))
    out += [
        Family("remainder", lambda x, k, d: x + torch.remainder(k, d).float().sum(),
               {"k": _i64(7011, -7012), "d": _i64(4, 6)}),
        Family("fmod_i32", lambda x, k, d: x + torch.fmod(k, d).float().sum(),
               {"k": np.array([7021, -7022], np.int32), "d": np.array([7, 9], np.int32)}),
        Family("floor_divide", lambda x, k, d: x + torch.floor_divide(k, d).float().sum(),
               {"k": _i64(7031, -7032), "d": _i64(11, 13)}, form="buffer"),
        Family("div_step", lambda x, d: torch.div(x.long(), d, rounding_mode="floor").float(),
               {"d": _i64(3, 2, 5, 7)}),
        Family("remainder_step", lambda x, d: torch.remainder(x.long(), d).float(),
               {"d": _i64(17, 19, 23, 29)}),
        Family("index_select", lambda x, i: torch.index_select(x, 0, i),
               {"i": _i64(2, 0, 3)}),
        Family("index_select_const", lambda x, t, i: x + torch.index_select(t, 0, i).sum(),
               {"t": data, "i": _i64(1, 3)}),
        Family("gather", lambda x, i: torch.gather(x, 1, i),
               {"i": _i64(1, 0, 3, 2, 0, 1, 2, 3).reshape(2, 4)}, shape=(2, 4)),
        Family("scatter", lambda x, i, s: torch.scatter(x, 0, i, s),
               {"i": _i64(3, 1), "s": np.array([8.25, 9.25], np.float32)}),
        Family("scatter_add", lambda x, i: torch.scatter_add(x, 0, i, x[:2]),
               {"i": _i64(0, 2)}, form="buffer"),
        Family("index_put", lambda x, i, v: torch.index_put(x, (i,), v),
               {"i": _i64(2, 1), "v": np.array([5.75, 6.75], np.float32)}),
        Family("index_put_acc", lambda x, i: torch.index_put(x, (i,), x[:2], accumulate=True),
               {"i": _i64(3, 0)}),
        Family("embedding", lambda x, i: f.embedding(i, x.reshape(4, 1)).sum(1),
               {"i": _i64(3, 2, 1)}),
        Family("embedding_const", lambda x, w, i: x + f.embedding(i, w).sum(),
               {"w": data.reshape(2, 2), "i": _i64(1, 0, 1)}, form="buffer"),
        Family("embedding_bag", lambda x, i, o: f.embedding_bag(i, x.reshape(4, 1), o),
               {"i": _i64(0, 1, 2, 3), "o": _i64(0, 2)}),
        Family("scatter_reduce", lambda x, i: x.scatter_reduce(0, i, x, "amax"),
               {"i": _i64(1, 1, 0, 2)}),
        Family("take_along_dim", lambda x, i: torch.take_along_dim(x, i, dim=0),
               {"i": _i64(3, 3, 0)}),
        Family("take", lambda x, i: torch.take(x, i), {"i": _i64(-1, 2)}),
        Family("index", lambda x, i: x[i], {"i": _i64(1, -2)}),
        Family("index_2d", lambda x, i, j: x[i, j], {"i": _i64(1, 0), "j": _i64(3, 2)},
               shape=(2, 4)),
        Family("index_add", lambda x, i: torch.index_add(x, 0, i, x[:2]), {"i": _i64(1, 3)}),
        Family("index_copy", lambda x, i: torch.index_copy(x, 0, i, x[2:]),
               {"i": _i64(0, 1)}),
        Family("index_fill", lambda x, i: torch.index_fill(x, 0, i, 0.5), {"i": _i64(2, 3)}),
        Family("cumsum_int", lambda x, c: x + torch.cumsum(c, 0).float(),
               {"c": _i64(7041, 7042, 7043, 7044)}),
        Family("cumsum_index", lambda x, c: x[torch.cumsum(c, 0)], {"c": _i64(0, 1, 1)}),
        Family("segment_offsets", lambda x, o: torch.segment_reduce(x, "sum", offsets=o),
               {"o": _i64(0, 1, 4)}),
        Family("segment_lengths", lambda x, n: torch.segment_reduce(x, "max", lengths=n),
               {"n": _i64(3, 1)}),
        Family("segment_const", lambda x, t, n: x + torch.segment_reduce(t, "sum", lengths=n).sum(),
               {"t": data, "n": _i64(2, 2)}),
        Family("shift_left", lambda x, k, s: x + torch.bitwise_left_shift(k, s).float().sum(),
               {"k": _i64(7051, 7052), "s": _i64(2, 3)}),
        Family("shift_right", lambda x, k, s: x + torch.bitwise_right_shift(k, s).float().sum(),
               {"k": np.array([7061, -7062], np.int32), "s": np.array([1, 4], np.int32)}),
        Family("shift_step", lambda x, s: torch.bitwise_left_shift(x.long(), s).float(),
               {"s": _i64(1, 2, 3, 4)}),
        Family("bitwise", lambda x, a, b: x + ((a & b) | (a ^ ~b)).float().sum(),
               {"a": _i64(7071, 7072), "b": _i64(7073, -7074)}),
        Family("abs_neg", lambda x, k: x + (torch.abs(k) - torch.neg(k)).float().sum(),
               {"k": _i64(7081, -7082)}),
        Family("clamp_index", lambda x, i: x[torch.clamp(i, 0, 3)], {"i": _i64(7091, -7092)}),
        Family("float_index", lambda x, g: x[(g * 2).long()],
               {"g": np.array([0.5, 1.25], np.float32)}),
        Family("float_index_step", lambda x, g: x[(g + x[:2] * 0).long().clamp(0, 3)],
               {"g": np.array([1.75, 0.25], np.float32)}),
        Family("one_hot", lambda x, i: x + f.one_hot(i, 4).sum(0).float(), {"i": _i64(3, 1)}),
        Family("searchsorted", lambda x, b: torch.searchsorted(b, x).float(),
               {"b": np.array([0.5, 1.0, 2.0], np.float32)}),
        Family("bucketize_index", lambda x, b: x[torch.bucketize(x, b).clamp(max=3)],
               {"b": np.array([0.25, 0.75], np.float32)}),
        Family("masked_fill", lambda x, m: x.masked_fill(m != 0, -1.0),
               {"m": np.array([0, 1, 0, 1], np.uint8)}),
        Family("gcd", lambda x, a, b: x + torch.gcd(a, b).float().sum(),
               {"a": _i64(7101, 7102), "b": _i64(7103, 7104)}),
        Family("pow_int", lambda x, a, b: x + torch.pow(a, b).float().sum(),
               {"a": _i64(7111, 7112), "b": _i64(2, 1)}),
    ]
    return out


def _edges(honest: np.ndarray) -> list[np.ndarray]:
    """The edge values a constant of this dtype and count is edited to."""
    n = honest.size
    if honest.dtype.kind == "f":
        vals = [np.nan, np.inf, -np.inf, -0.0, 3.0e38, -1.0e30, 2.0**40]
    elif honest.dtype == np.uint8:
        vals = [255, 0, 1]
    else:
        info = np.iinfo(honest.dtype)
        vals = [info.min, info.max, -1, 0, 4, -5, 64, 2**31 if info.bits == 64 else 2**20,
                info.max // 2]
    out = [np.full(n, v, honest.dtype) for v in vals]
    if n > 1 and honest.dtype.kind != "f":  # one bad element among honest ones
        for v in vals[:4]:
            mixed = honest.copy().reshape(-1)
            mixed[-1] = v
            out.append(mixed)
    return [o.reshape(honest.shape) for o in out]


@dataclass(frozen=True)
class Case:
    name: str
    family: str
    edits: tuple[tuple[bytes, bytes], ...]  # (honest payload, edited payload)
    where: str = "payload"  # or "program": bytes replaced in the program's JSON


def cases(seed: int, count: int) -> Iterator[Case]:
    """`count` cases drawn by the seed: every family's every edge on each constant first (one
    constant edited), then random pairs of edited constants, then the program edits."""
    rng = random.Random(seed)
    singles, pairs = [], []
    for fam in _families():
        edges = {k: _edges(v) for k, v in fam.consts.items()}
        for k, options in edges.items():
            for j, e in enumerate(options):
                singles.append(Case(f"{fam.name}-{k}{j}", fam.name,
                                    ((fam.consts[k].tobytes(), e.tobytes()),)))
        if len(edges) > 1:
            for j in range(3):
                picks = {k: rng.randrange(len(v)) for k, v in edges.items()}
                pairs.append(Case(f"{fam.name}-all{j}", fam.name, tuple(
                    (fam.consts[k].tobytes(), edges[k][p].tobytes())
                    for k, p in picks.items())))
    program = [c for c in _program_cases() if c.family not in LITERAL_DRAWN or
               rng.random() < LITERAL_DRAWN[c.family]]
    rng.shuffle(singles)
    chosen = singles[:max(0, count - len(pairs) - len(program))] + pairs + program
    return iter(sorted(chosen, key=lambda c: c.name))


# Factories whose sizes and fill values are literals of the program's JSON, edited there.
_FACTORY_SIZE, _FACTORY_FILL = 4099, 123457
# Each literal family's share of its LITERALS edits drawn (CI time: each costs a trace).
LITERAL_DRAWN = dict.fromkeys(("narrow_start", "narrow_length", "slice_start", "slice_end",
                               "slice_step", "select", "topk", "unfold_size", "unfold_step",
                               "roll", "repeat", "cumsum_dim", "diagonal", "tril", "view",
                               "expand", "pad", "kthvalue"), 0.5)
# The integer literals edited in a program's arguments (2**64: not a 64-bit integer).
LITERALS = (I64.min, I64.max, -1, 0, 2**40, -(2**40), 2**64)


def _literal_families() -> list[tuple[Family, str, str]]:
    """(program, argument name, its honest value as the program's JSON spells it): one call
    of an op whose integer arguments are literals (sizes, dims, offsets, counts)."""
    import torch

    f = torch.nn.functional
    square = (4, 4)
    table = [
        ("narrow_start", lambda x: x.narrow(0, 1, 2), "start", "1", (4,)),
        ("narrow_length", lambda x: x.narrow(0, 1, 2), "length", "2", (4,)),
        ("slice_start", lambda x: x[1:3], "start", "1", (4,)),
        ("slice_end", lambda x: x[1:3], "end", "3", (4,)),
        ("slice_step", lambda x: x[::2], "step", "2", (4,)),
        ("select", lambda x: x[2], "index", "2", (4,)),
        ("topk", lambda x: torch.topk(x, 2).values, "k", "2", (4,)),
        ("unfold_size", lambda x: x.unfold(0, 2, 1), "size", "2", (4,)),
        ("unfold_step", lambda x: x.unfold(0, 2, 1), "step", "1", (4,)),
        ("roll", lambda x: torch.roll(x, 1), "shifts", "[1]", (4,)),
        ("repeat", lambda x: x.repeat(2), "repeats", "[2]", (4,)),
        ("cumsum_dim", lambda x: torch.cumsum(x, 0), "dim", "0", (4,)),
        ("diagonal", lambda x: torch.diagonal(x, 1), "offset", "1", square),
        ("tril", lambda x: torch.tril(x, 1), "diagonal", "1", square),
        ("view", lambda x: x.view(2, 2), "size", "[2, 2]", (4,)),
        ("expand", lambda x: x.expand(3, 4), "size", "[3, 4]", (4,)),
        ("pad", lambda x: f.pad(x, (1, 2)), "pad", "[1, 2]", (4,)),
        ("kthvalue", lambda x: torch.kthvalue(x, 2).values, "k", "2", (4,)),
    ]
    return [(Family(name, op, {}, shape), arg, honest) for name, op, arg, honest, shape in table]


def _program_families() -> list[Family]:
    import torch

    n, v = _FACTORY_SIZE, _FACTORY_FILL

    def item(x, c):  # a size read from a buffer's value: torch.export's unbacked symbol
        s = c.item()
        torch._check(s >= 0)
        torch._check(s <= 2)
        return x.narrow(0, s, 2)

    return [
        Family("full", lambda x: x + torch.full((n,), v, dtype=torch.int64)[:4].float(), {}),
        Family("arange", lambda x: x + torch.arange(n)[:4].float(), {}),
        Family("zeros", lambda x: x + torch.zeros(n, 2)[:4, 0], {}),
        Family("full_div", lambda x: x + torch.div(torch.full((1,), v), torch.full((1,), n),
                                                   rounding_mode="trunc").float(), {}),
        Family("narrow_item", item, {"c": _i64(1)}, form="buffer"),
        *(fam for fam, _, _ in _literal_families()),
    ]


def _program_cases() -> Iterator[Case]:
    size, fill = str(_FACTORY_SIZE).encode(), str(_FACTORY_FILL).encode()
    for fam in ("full", "arange", "zeros"):
        for v in (-1, 0, 2**31, 2**40, I64.max, 2**64):
            yield Case(f"{fam}-size{v}", fam, ((size, str(v).encode()),), "program")
    for a, b in ((I64.min, -1), (1, 0), (I64.min, 0), (I64.max, I64.min)):
        yield Case(f"full_div-{a}-{b}", "full_div",
                   ((fill, str(a).encode()), (size, str(b).encode())), "program")
    # its range check gone, the buffer's value edited: the size is the file's alone
    ranges = b'"range_constraints": {"u0": {"min_val": 0, "max_val": 2}}'
    for v in (I64.min, -1, 3, 2**40):
        yield Case(f"narrow_item-unranged{v}", "narrow_item", (
            (ranges, b'"range_constraints": {}'),
            (_i64(1).tobytes(), _i64(v).tobytes())), "both")
    for fam, arg, honest in _literal_families():
        for v in LITERALS:
            kind = "as_ints" if honest.startswith("[") else "as_int"
            edited = f"[{v}, {v}]" if honest.count(",") else f"[{v}]" if kind == "as_ints" \
                else str(v)
            pattern = f'"name": "{arg}", "arg": {{"{kind}": '
            yield Case(f"{fam.name}-{v}", fam.name, (
                (f"{pattern}{honest}}}".encode(), f"{pattern}{edited}}}".encode()),), "program")


def _module(fam: Family):
    import torch

    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            if fam.form == "buffer":
                for k, v in fam.consts.items():
                    self.register_buffer(k, torch.from_numpy(v.copy()))

        def forward(self, x):
            if fam.form == "buffer":
                vals = [getattr(self, k) for k in fam.consts]
            else:
                vals = [torch.tensor(v.tolist(), dtype=getattr(torch, str(v.dtype)))
                        for v in fam.consts.values()]
            return fam.op(x, *vals)

    return M()


def export(fam: Family, path: Path) -> None:
    import torch

    x = torch.arange(1, 1 + int(np.prod(fam.shape)), dtype=torch.float32).reshape(fam.shape)
    torch.export.save(torch.export.export(_module(fam), (x,)), path)


def edit(src: Path, dst: Path, case: Case) -> None:
    """dst: src with the case's edits (each payload member holding exactly the honest bytes
    replaced; or the bytes replaced in the program's JSON)."""
    with zipfile.ZipFile(src) as archive:
        members = {n: archive.read(n) for n in archive.namelist()}
    program = [n for n in members if n.endswith(".json") and "/models/" in n]
    edits = list(case.edits)
    if case.where == "both":  # the first edit in the program, the others in payloads
        _replace(members, program[0], *edits.pop(0), case.name)
    if case.where in ("payload", "both"):
        for old, new in edits:
            hits = [n for n, data in members.items() if data == old]
            if len(hits) != 1:
                raise AssertionError(f"{case.name}: {len(hits)} payloads hold the honest value")
            members[hits[0]] = new
    else:
        for old, new in edits:
            _replace(members, program[0], old, new, case.name)
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as out:
        for n, data in members.items():
            out.writestr(n, data)


def _replace(members: dict[str, bytes], name: str, old: bytes, new: bytes, case: str) -> None:
    if old not in members[name]:
        raise AssertionError(f"{case}: the program lacks {old!r}")
    members[name] = members[name].replace(old, new)


def generate(folder: Path, seed: int = 85, count: int = 250) -> dict[str, Path]:
    """Case name -> the archive written under `folder`; families that torch.export cannot
    export on this torch are left out (named in `folder / 'skipped.txt'`)."""
    families = {f.name: f for f in (*_families(), *_program_families())}
    honest: dict[str, Path | None] = {}
    skipped, out = [], {}
    for case in cases(seed, count):
        if case.family not in honest:
            path = folder / f"honest-{case.family}.pt2"
            try:
                export(families[case.family], path)
                honest[case.family] = path
            except Exception as e:  # noqa: BLE001 - torch.export's limits vary by version
                honest[case.family] = None
                skipped.append(f"{case.family}: {type(e).__name__}: {str(e)[:120]!r}")
        if honest[case.family] is None:
            continue
        out[case.name] = folder / f"{case.name}.pt2"
        edit(honest[case.family], out[case.name], case)
    (folder / "skipped.txt").write_text("\n".join(skipped) + "\n")
    return out
