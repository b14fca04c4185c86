"""The per-host cost store under attack (issue 85, item 6; planner.costs.host_costs and
store_salvage), in one process: a store cut short, edited or hostile (wrong types, huge, negative
or NaN times and loads, another target, bytes that are not UTF-8, not JSON at all) is refused
in one warning line naming the file, every measurement in it that is valid on its own still
prices the plan without being measured again, the rest is measured again, and the store is
written back whole. Real processes planning at once, a full disk and a read-only cache through
`planner plan` are tests/costs/test_store_processes.py."""

from __future__ import annotations

import io
import json

import pytest

from planner.costs.host_costs import BUSY, HostCosts, host_table, read_store, store_path
from planner.costs.records import CostEntry, CostTable, CpuSample
from planner.frontend.autodiff import make_training_graph
from planner.graph.optimizer import Optimizer
from planner.target.detect import detect
from planner.zoo import build


def _graph():
    return make_training_graph(build("mlp", batch=4, hidden=[8], in_features=4, classes=2),
                               Optimizer(kind="sgd", lr=0.1))


class Measured:
    """Measurements as a host store keeps them (one time per signature, by its position: the
    store's input, not what is under test), and which signatures were asked for."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def __call__(self, signatures, target, progress=None) -> CostTable:
        self.asked += [s.key for s in signatures]
        return CostTable(target=target.name, entries=tuple(
            CostEntry(signature=s, cpu=(CpuSample(threads=1, affinity="compact",
                                                  seconds=1e-6 * (k + 1)),))
            for k, s in enumerate(signatures)))


@pytest.fixture
def kept(tmp_path, monkeypatch):
    """A store written by a plan on a quiet machine: (host, its path, its JSON data)."""
    monkeypatch.setattr("planner.costs.host_costs.cache_root", lambda: tmp_path)
    host = detect()
    host_table([_graph()], host, Measured(), load=0.0)
    path = store_path(host)
    return host, path, json.loads(path.read_text())


def _again(host, path):
    """Plan again on the damaged store: (what was measured, the one line said, the store
    read back afterwards)."""
    said = io.StringIO()
    measure = Measured()
    host_table([_graph()], host, measure, progress=said, load=0.0)
    lines = said.getvalue().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"planner: warning: {path}: not a valid cost store (")
    quiet = io.StringIO()
    after = read_store(host, progress=quiet)
    assert quiet.getvalue() == ""  # written back whole: valid again
    return measure.asked, lines[0], after


def _edit(path, data, edit):
    edit(data)
    path.write_text(json.dumps(data))


def test_a_store_cut_short_keeps_every_entry_before_the_cut(kept):
    host, path, data = kept
    text = path.read_text()
    entries = data["table"]["entries"]
    keys = [e["signature"] for e in entries]
    cut = text.index('"signature"', text.index('"entries"'))  # inside the first entry ...
    for _ in range(5):                                        # ... on to inside the sixth
        cut = text.index('"signature"', cut + 1)
    path.write_text(text[:cut])
    asked, line, after = _again(host, path)
    assert "kept 5 of its 6 measurement(s)" in line and "not valid JSON" in line
    assert len(asked) == len(keys) - 5                       # only what was cut off
    assert len(after.table) == len(keys)
    # The loads (written before the table) came through: the kept five stay quiet ones.
    assert all(after.loads[e.key] == 0.0 for e in after.table.entries)


@pytest.mark.parametrize("name, edit, why", [
    ("wrong type", lambda d: d["table"]["entries"][0]["cpu"][0].update(seconds="fast"),
     "field table.entries.0.cpu.0.seconds: Input should be a valid number"),
    ("negative time", lambda d: d["table"]["entries"][1]["cpu"][0].update(seconds=-1.0),
     "greater than or equal to 0.000000000001"),
    ("huge time", lambda d: d["table"]["entries"][2]["cpu"][0].update(seconds=1e300),
     "less than or equal to 3600"),
    ("huge thread count", lambda d: d["table"]["entries"][0]["cpu"][0].update(threads=2**62),
     "less than or equal to 65536"),
    ("huge scratch", lambda d: d["table"]["entries"][0]["cpu"][0].update(scratch_bytes=2**70),
     "scratch_bytes"),
])
def test_an_entry_that_is_not_a_measurement_is_measured_again_alone(kept, name, edit, why):
    host, path, data = kept
    total = len(data["table"]["entries"])
    _edit(path, data, edit)
    asked, line, after = _again(host, path)
    assert why in line and f"kept {total - 1} of its {total} measurement(s)" in line, line
    assert len(asked) == 1 and len(after.table) == total


def test_nan_and_infinite_numbers_are_refused(kept):
    host, path, data = kept
    total = len(data["table"]["entries"])
    key = next(iter(data["loads"]))
    data["loads"][key] = float("nan")                       # json writes NaN
    data["table"]["entries"][3]["cpu"][0]["seconds"] = float("inf")
    data["fits"] = {"a" * 32: {"figures": {"contention": float("nan")}, "load": 0.0},
                    "b" * 32: {"figures": {"contention": 0.1}, "load": 0.0}}
    path.write_text(json.dumps(data))
    assert "NaN" in path.read_text() and "Infinity" in path.read_text()
    asked, line, after = _again(host, path)
    assert f"kept {total - 1} of its {total} measurement(s)" in line
    # The entry without its load is kept as a busy one, so this quiet machine measures it
    # again too; the one with an infinite time is measured again.
    assert len(asked) == 2 and key in asked
    assert list(after.fits) == ["b" * 32]  # the fit with a NaN figure dropped


def test_a_load_without_a_value_is_kept_busy_until_a_quiet_machine_measures_it(kept):
    host, path, data = kept
    key = next(iter(data["loads"]))
    _edit(path, data, lambda d: d["loads"].update({key: -3.0}))
    said = io.StringIO()
    busy = Measured()
    host_table([_graph()], host, busy, progress=said, load=BUSY + 1)  # a busy machine
    assert busy.asked == [] and "kept 15 of its 15" in said.getvalue()
    assert read_store(host).loads[key] > BUSY


@pytest.mark.parametrize("name, text, why", [
    ("not JSON", b"\x00\xffgarbage", "not UTF-8 text (byte 0xff at offset 1)"),
    ("a list", b"[1, 2, 3]", "field document"),
    ("nested deep", b"[" * 100000, "JSON nested too deeply"),
    ("empty", b"", "not valid JSON"),
])
def test_a_file_that_holds_no_store_is_measured_anew(kept, name, text, why):
    host, path, data = kept
    total = len(data["table"]["entries"])
    path.write_bytes(text)
    asked, line, after = _again(host, path)
    assert why in line and "kept 0 of its" in line, line
    assert len(asked) == total and len(after.table) == total


def test_another_targets_store_and_a_non_utf8_signature_are_not_kept(kept):
    host, path, data = kept
    total = len(data["table"]["entries"])
    _edit(path, data, lambda d: d["table"].update(target="knl-7250"))
    _, line, _ = _again(host, path)
    assert "holds the costs of target 'knl-7250', not 'host'" in line
    assert f"kept 0 of its {total}" in line
    data = json.loads(path.read_text())
    raw = path.read_text().replace('"op":"ReluGrad"', '"op":"ReluGrad\\udc80"', 1)
    assert raw != path.read_text()
    path.write_text(raw)
    asked, line, after = _again(host, path)
    assert "lone surrogate" in line and len(asked) == 1  # the bad key: no text to write back


def test_a_hostile_key_is_said_in_printable_text(kept):
    host, path, data = kept
    _edit(path, data, lambda d: d["loads"].update({"\x1b[2J\nforged line": "x"}))
    _, line, _ = _again(host, path)  # one line (asserted there), with no escape in it
    assert "\x1b" not in line and "?[2J?forged line" in line


def test_a_store_past_its_size_bound_is_not_read(kept, monkeypatch):
    host, path, data = kept
    monkeypatch.setattr("planner.costs.host_costs.MAX_STORE_BYTES", 100)
    said = io.StringIO()
    assert read_store(host, progress=said).table.entries == ()
    assert "larger than 0 MiB" in said.getvalue()


def test_a_valid_store_reads_without_a_word(kept):
    host, path, data = kept
    said = io.StringIO()
    store = read_store(host, progress=said)
    assert said.getvalue() == "" and store == HostCosts.model_validate(data)
