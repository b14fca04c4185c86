"""`planner target detect | show | list` through the subcommands this package registers."""

import argparse
import json

import pytest

from planner.cli.target import add_target_commands
from planner.errors import UserError
from planner.target import Target, preset
from planner.target.presets import PRESETS


def run(capsys, *argv):
    parser = argparse.ArgumentParser(prog="planner")
    add_target_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(list(argv))
    code = args.run(args)
    return code, capsys.readouterr().out


def test_list_names_every_preset(capsys):
    code, out = run(capsys, "target", "list")
    assert code == 0 and all(name in out for name in PRESETS)
    code, out = run(capsys, "target", "list", "--json")
    assert sorted(p["name"] for p in json.loads(out)) == sorted(PRESETS)


def test_show_json_is_the_canonical_target(capsys):
    code, out = run(capsys, "target", "show", "knl-7250", "--json")
    assert code == 0 and out == preset("knl-7250").to_json()


def test_show_text_summarises_topology_and_gpus(capsys):
    _, out = run(capsys, "target", "show", "knl-7250")
    assert "272" in out and "68 cores" in out and "34" in out
    _, out = run(capsys, "target", "show", "p100-16gb")
    assert "56 SMs" in out


def test_show_unknown_name_is_a_user_error_listing_presets(capsys):
    with pytest.raises(UserError, match="xeon-8180"):
        run(capsys, "target", "show", "knl")


def test_detect_json_lists_this_hosts_cpus_and_writes_a_file(capsys, tmp_path):
    out_file = tmp_path / "host.json"
    code, out = run(capsys, "target", "detect", "--json", "--no-measure", "-o", str(out_file))
    t = Target.from_json(out)
    assert code == 0 and t.name == "host" and len(t.logical_cpus) >= 1
    assert Target.from_json(out_file.read_text()).logical_cpus == t.logical_cpus
