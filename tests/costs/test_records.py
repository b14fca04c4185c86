"""CostTable records: canonical JSON, validation, merge, save and load."""

import pytest
from pydantic import ValidationError

from planner.costs import (
    ConvAlgoSample,
    CostEntry,
    CostTable,
    CpuSample,
    LaunchSample,
    OpSignature,
    Provenance,
    load_table,
    merge,
    save_table,
)
from planner.errors import UserError

RELU = OpSignature(op="Relu", shapes=((1024,),), dtypes=("float32",))
CONV = OpSignature(op="Conv2D", shapes=((1, 3, 8, 8), (4, 3, 3, 3)),
                   dtypes=("float32", "float32"), attrs={"groups": 1})


def sample(k, seconds, affinity="compact"):
    return CpuSample(threads=k, affinity=affinity, seconds=seconds, repeats=3)


def table(*entries, date="2025-01-02"):
    return CostTable(target="host", entries=entries,
                     provenance=(Provenance(target="host", tool="planner 0.1.0", date=date),))


def rich_table():
    return table(
        CostEntry(signature=RELU, cpu=(sample(5, 1 / 3), sample(1, 0.1, "spread"),
                                       sample(1, 0.1))),
        CostEntry(signature=CONV, cpu=(sample(2, 2.5e-5),),
                  gpu_algorithms=(ConvAlgoSample(algorithm="WINOGRAD", seconds=1e-5,
                                                 workspace_bytes=1 << 20),
                                  ConvAlgoSample(algorithm="IMPLICIT_GEMM", seconds=3e-5,
                                                 workspace_bytes=0)),
                  gpu_launches=(LaunchSample(threads_per_block=256, blocks=80, seconds=2e-5),)))


def test_json_is_byte_identical_across_save_and_load(tmp_path):
    t = rich_table()
    path = tmp_path / "costs.json"
    save_table(t, path)
    loaded = load_table(path)
    assert loaded == t
    save_table(loaded, tmp_path / "again.json")
    assert (tmp_path / "again.json").read_bytes() == path.read_bytes()


def test_order_of_construction_does_not_change_the_json():
    a = rich_table()
    b = CostTable(target="host", entries=tuple(reversed(a.entries)), provenance=a.provenance)
    assert a.to_json() == b.to_json()
    relu = a.entry(RELU)
    assert [(s.affinity, s.threads) for s in relu.cpu] == [
        ("compact", 1), ("compact", 5), ("spread", 1)]
    assert sum('"signature"' in line for line in a.to_json().splitlines()) == 2  # one a line


def test_duplicates_and_bad_values_are_rejected_by_name():
    with pytest.raises(ValidationError, match=r"CPU sample \('compact', 1\) listed twice"):
        CostEntry(signature=RELU, cpu=(sample(1, 1.0), sample(1, 2.0)))
    with pytest.raises(ValidationError, match="signature .*Relu.* listed twice"):
        table(CostEntry(signature=RELU), CostEntry(signature=RELU))
    with pytest.raises(ValidationError, match="seconds"):
        sample(1, 0.0)
    with pytest.raises(ValidationError, match="provenance from target 'knl'"):
        CostTable(target="host", provenance=(Provenance(target="knl", tool="t", date="d"),))


def test_lookup_by_signature():
    t = rich_table()
    assert RELU in t and t.entry(CONV).gpu_launches[0].blocks == 80
    other = OpSignature(op="Relu", shapes=((2048,),), dtypes=("float32",))
    assert other not in t and t.entry(other) is None and len(t) == 2


def test_merge_keeps_both_and_the_update_wins_on_the_same_sample():
    base = table(CostEntry(signature=RELU, cpu=(sample(1, 1.0), sample(5, 0.5))),
                 date="2025-01-01")
    update = table(CostEntry(signature=RELU, cpu=(sample(5, 0.4), sample(9, 0.3))),
                   CostEntry(signature=CONV, cpu=(sample(1, 2.0),)), date="2025-02-01")
    merged = merge(base, update)
    assert [(s.threads, s.seconds) for s in merged.entry(RELU).cpu] == [
        (1, 1.0), (5, 0.4), (9, 0.3)]
    assert CONV in merged
    assert [p.date for p in merged.provenance] == ["2025-01-01", "2025-02-01"]
    assert merge(merged, update) == merged  # idempotent
    with pytest.raises(ValueError, match="different targets"):
        merge(base, CostTable(target="knl-7250"))


def test_loading_a_bad_file_names_the_file_and_field(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(rich_table().to_json().replace('"threads":5', '"threads":0'))
    with pytest.raises(UserError, match=r"bad.json.*threads"):
        load_table(bad)
    with pytest.raises(UserError, match="cannot read"):
        load_table(tmp_path / "missing.json")


def test_a_blocked_signature_the_table_lacks_is_priced_by_its_plain_twin():
    """A table measured before signatures carried layouts (or a preset's) still prices a
    blocked step's kernels: by the same kernel's plain time (CostTable.entry); `in` asks for
    the signature itself, so a host's store measures the blocked one."""
    x = OpSignature(op="Relu", shapes=((2, 16, 4, 4),), dtypes=("float32",))
    blocked = x.model_copy(update={"layouts": ("nChw16c", "nChw16c")})
    assert blocked.key != x.key and blocked.plain == x
    t = table(CostEntry(signature=x, cpu=(sample(1, 2e-6),)))
    assert t.entry(blocked) is t.entry(x) and blocked not in t and x in t
    both = merge(t, table(CostEntry(signature=blocked, cpu=(sample(1, 1e-6),))))
    assert both.entry(blocked).cpu[0].seconds == 1e-6 and both.entry(x).cpu[0].seconds == 2e-6
