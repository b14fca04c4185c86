"""Round 5 of the hostile-input and careless-user findings (issue 63), the parts that need no
build: every error names its input (flag, file, path), no measurement is lost to a failed
write, a read-only cache plans from what it holds, the fold guard's checks, multinomial's
refusals and torch's trace log held quiet. The crafted model files are
tests/importers/test_pt2_corpus_round5.py; the executor's state checks
tests/codegen/test_state_round5.py; data-parallel plans tests/schedule/test_dp_variants.py."""

from __future__ import annotations

import errno
import logging
import os

import numpy as np
import pytest

from planner.cli.main import main
from planner.costs.records import CostEntry, CostTable, CpuSample
from planner.errors import NotWritten, UserError
from planner.io.write import atomic_write


def refused(capsys, argv: list[str]) -> str:
    """The one-line error of a command that must refuse (exit 2)."""
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.count("\n") == 0, err
    return err


# ---- every error names its input -------------------------------------------------------------

def test_an_out_of_range_growth_interval_names_the_flag(tmp_path, capsys):
    err = refused(capsys, ["plan", "zoo:mlp?batch=2&hidden=4&in_features=3&classes=2",
                           "--train", "sgd", "--precision", "fp16-mixed",
                           "--loss-scale-growth-interval", "99999999999999999999",
                           "--target", "xeon-8180", "-o", str(tmp_path / "p.json")])
    assert err.startswith("planner: error: --loss-scale-growth-interval 99999999999999999999: ")
    assert "16777216" in err  # the float32 clean-step count's last exact integer


def test_an_unreadable_graph_file_is_named(capsys):
    err = refused(capsys, ["graph", "/proc/self/mem"])
    assert err == "planner: error: /proc/self/mem: cannot read (Input/output error)"


def test_a_full_disk_names_the_path_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    target = tmp_path / "plan.json"
    with pytest.raises(NotWritten, match=f"^{target}: not written \\(No space left on "
                                         "device\\)$") as e:
        atomic_write(target, "{}")
    assert isinstance(e.value, OSError) and isinstance(e.value, UserError)
    assert list(tmp_path.iterdir()) == []


def test_a_file_where_the_folder_should_be_is_named(tmp_path):
    (tmp_path / "a").write_text("")
    with pytest.raises(NotWritten, match="a/b.json: not written"):
        atomic_write(tmp_path / "a" / "b.json", "{}")


def test_the_fake_tensor_log_is_quiet_before_the_one_line_error(capfd):
    torch = pytest.importorskip("torch")
    from planner.importers.torch.context import TorchImportError
    from planner.torch.training import export

    with pytest.raises(TorchImportError, match="a and b must have same reduction dim"):
        export(torch.nn.Linear(3, 2), [torch.ones(4, 5)], None, None)
    out, err = capfd.readouterr()
    assert "Traceback" not in err and "fake_tensor" not in err, err
    assert not logging.getLogger("torch._subclasses.fake_tensor").disabled  # restored


# ---- no measurement lost; a read-only cache reads what it holds -----------------------------

def _graph():
    from planner.frontend.autodiff import make_training_graph
    from planner.graph.optimizer import Optimizer
    from planner.zoo import build

    return make_training_graph(build("mlp", batch=4, hidden=[8], in_features=4, classes=2),
                               Optimizer(kind="sgd", lr=0.1))


def _timed(signatures, target, progress=None) -> CostTable:
    """Measurements as a host store keeps them (one time per signature: the store's input,
    not what is under test)."""
    return CostTable(target=target.name, entries=tuple(
        CostEntry(signature=s, cpu=(CpuSample(threads=1, affinity="compact",
                                              seconds=1e-6 * (k + 1)),))
        for k, s in enumerate(signatures)))


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setattr("planner.costs.host_costs.cache_root", lambda: tmp_path)
    from planner.costs.host_costs import store_path
    from planner.target.detect import detect

    host = detect()
    return host, store_path(host)


def test_a_folder_in_the_stores_place_is_refused_before_measuring(store):
    from planner.costs.host_costs import host_table

    host, path = store
    path.mkdir(parents=True)
    asked = []

    def measure(signatures, target, progress=None):
        asked.append(signatures)
        return _timed(signatures, target)

    with pytest.raises(UserError, match=f"^{path}: is a directory$"):
        host_table([_graph()], host, measure, load=0.0)
    assert asked == []  # nothing measured, so nothing lost


def test_measurements_that_cannot_be_kept_still_price_the_plan(store, monkeypatch, capsys):
    import sys

    from planner.costs import host_costs

    host, path = store

    def full(where, text):
        raise NotWritten(f"{where}: not written (No space left on device)")

    monkeypatch.setattr(host_costs, "atomic_write", full)
    priced = host_costs.host_table([_graph()], host, _timed, progress=sys.stderr, load=0.0)
    assert priced.measured and len(priced.table.entries) == len(priced.measured)
    assert f"{path}: not written (No space left on device)" in capsys.readouterr().err


def test_a_read_only_cost_store_plans_from_what_it_holds(store):
    """The lock file cannot be made (a folder in its place stands for a read-only cache,
    where even root cannot create it): the kept measurements are read unlocked."""
    from planner.costs.host_costs import host_table

    host, path = store
    graph = _graph()
    first = host_table([graph], host, _timed, load=0.0)
    lock = path.parent / f".{path.stem}.lock"
    lock.unlink()
    lock.mkdir()

    def never(*args, **kwargs):
        raise AssertionError("a kept signature measured again")

    again = host_table([graph], host, never, load=0.0)
    assert again.measured == () and again.table == first.table


def test_a_read_only_host_cache_keeps_the_hosts_digest(tmp_path, monkeypatch):
    from planner.target import host_cache

    monkeypatch.setattr(host_cache, "cache_root", lambda: tmp_path)
    runs = iter(range(1, 100))

    def measure():
        k = next(runs)
        return host_cache.HostMeasurement(core_bandwidth=1e9 * k, memory_bandwidth=2e9,
                                          gemm_flops_all_cores=1e11, gemm_flops_one_core=1e10,
                                          mhz=2000.0, date="2026-11-26")

    kept = host_cache.kept_measurement("k", measure)
    path = host_cache.entry_path("k")
    lock = path.parent / f".{path.name}.lock"
    lock.unlink()
    lock.mkdir()  # no lock file can be made now
    assert host_cache.kept_measurement("k", measure) == kept  # read, not measured anew
    assert host_cache.kept_measurement("k", measure) == kept


# ---- folding trusts no value ------------------------------------------------------------------

def test_the_fold_guard_checks_divisors_and_indices():
    from planner.importers.torch.fold_guard import FoldRefused, allowed_to_fold, check_operands

    pytest.importorskip("torch")
    values = {"k": np.array([np.iinfo(np.int32).min, 3], np.int32),
              "z": np.array([1, 0], np.int64), "f": np.array([1.0, 0.0], np.float32),
              "i": np.array([0, 4], np.int64), "x": np.zeros((4, 2), np.float32)}
    value = values.get
    with pytest.raises(FoldRefused, match="-2147483648 \\(the int32 minimum\\) by -1"):
        check_operands("aten.div.Tensor_mode", ["k", -1], {"rounding_mode": "trunc"}, value)
    with pytest.raises(FoldRefused, match="integer division by zero"):
        check_operands("aten.remainder.Tensor", ["z", "z"], {}, value)
    check_operands("aten.div.Tensor", ["f", "f"], {}, value)  # float: inf and NaN, no trap
    with pytest.raises(FoldRefused, match="index 4 out of range for dim 0 of size 4"):
        check_operands("aten.index_select.default", ["x", 0, "i"], {}, value)
    with pytest.raises(FoldRefused, match="index 4 out of range for dim 0 of size 4"):
        check_operands("aten.embedding.default", ["x", "i"], {}, value)
    check_operands("aten.index_select.default", ["x", 1, "z"], {}, value)
    assert not allowed_to_fold("aten.segment_reduce.default")
    assert not allowed_to_fold("aten.index_put.default")
    assert allowed_to_fold("aten.add.Tensor") and allowed_to_fold("aten.sum.dim_IntList")


def test_an_arange_larger_than_declared_is_not_folded():
    """The output's size comes from the operands on the meta device, not from the file's
    metadata: arange(0, 2^40) is not made at import whatever shape the file declares."""
    torch = pytest.importorskip("torch")
    from planner.importers.torch.fold_guard import predicted_elements

    def meta(v):
        if isinstance(v, (tuple, list)):
            return type(v)(meta(i) for i in v)
        return torch.empty((3, 1), device="meta") if v == "a" else v

    # made on the meta device too: an arange of 2^31 elements takes no memory to size
    assert predicted_elements(torch.ops.aten.arange.start_step, (0, 2**40, 1), {},
                              meta) == 2**40
    assert predicted_elements(torch.ops.aten.full.default, ([16384, 32768], 0.0), {},
                              meta) == 2**29
    assert predicted_elements(torch.ops.aten.add.Tensor, ("a", "a"), {}, meta) == 3
    # a data-dependent shape: the meta kernel cannot say, so it is not folded
    assert predicted_elements(torch.ops.aten.nonzero.default, ("a",), {}, meta) is None


# ---- multinomial refuses what torch refuses ---------------------------------------------------

@pytest.fixture(scope="module")
def multinomial():
    torch = pytest.importorskip("torch")
    from planner.importers.torch.convert import convert

    class M(torch.nn.Module):
        def forward(self, p):
            return torch.multinomial(p, 3, replacement=True), torch.multinomial(p, 2)

    return convert(torch.export.export(M(), (torch.ones(2, 4),)))


@pytest.mark.parametrize("row", [[np.nan, 1, 1, 1], [1, -1, 1, 1], [1, np.inf, 1, 1],
                                 [0, 0, 0, 0]])
def test_multinomial_refuses_what_torch_refuses(multinomial, row):
    torch = pytest.importorskip("torch")
    from planner.graph import run
    from planner.ops.base import OpError

    p = np.array([[0.1, 0.2, 0.3, 0.4], row], np.float32)
    with pytest.raises(RuntimeError):  # torch's own refusal, for the record
        torch.multinomial(torch.from_numpy(p), 3, replacement=True)
    with pytest.raises(OpError, match="probability tensor contains either inf, nan or "
                                      "element < 0, or a row sums to 0"):
        run(multinomial.graph, {multinomial.inputs[0]: p}, multinomial.params(),
            keep="outputs")
    assert any(n.name.endswith("/invalid_probabilities") for n in multinomial.graph.nodes)


def test_multinomial_of_distributions_draws_as_before(multinomial):
    from planner.graph import run

    p = np.array([[0.1, 0.2, 0.3, 0.4], [1, 0, 0, 0]], np.float32)
    out = run(multinomial.graph, {multinomial.inputs[0]: p}, multinomial.params(),
              keep="outputs")
    with_replacement, without = out.values()
    assert with_replacement.shape == (2, 3) and without.shape == (2, 2)
    assert (with_replacement[1] == 0).all()  # the one category of row 2
    assert ((0 <= with_replacement) & (with_replacement < 4)).all()
    assert len(set(without[0].tolist())) == 2
