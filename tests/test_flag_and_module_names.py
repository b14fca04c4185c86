"""Issue 32: a numeric flag an options record refuses is named in the one-line error, on
every command that takes it; `planner build -o DIR` prints an import line that works, or
refuses the folder's name in one line before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from codegen.package import package_name
from codegen.render import module_name
from planner.cli import main
from planner.errors import UserError

PLAN = Path(__file__).resolve().parent.parent / "examples" / "plans" / \
    "lenet-digits.xeon-8180.plan.json"
MLP = "zoo:mlp?batch=4&hidden=8&in_features=6&classes=3"
PLAN_ARGS = ["plan", MLP, "--train", "sgd", "--target", "xeon-8180"]
FIT_ARGS = ["fit", "zoo:mlp?batch=4", "--target", "xeon-8180", "--budget", "1GiB"]
PROFILE_ARGS = ["profile", MLP, "--target", "host"]


def _error(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize(("args", "flag", "value"), [
    (PLAN_ARGS, "--data-parallel", "0"),
    (PLAN_ARGS, "--bucket-bytes", "-1"),
    (PLAN_ARGS, "--ranks-per-host", "0"),
    (PLAN_ARGS, "--intra", "0"),
    (PLAN_ARGS, "--inter", "-2"),
    (PLAN_ARGS, "--min-team-us", "-5"),
    (FIT_ARGS, "--data-parallel", "0"),
    (FIT_ARGS, "--multiple", "0"),
    (PROFILE_ARGS, "--repeats", "0"),
    (PROFILE_ARGS, "--interval", "0"),
    (PROFILE_ARGS, "--max-threads", "0"),
])
def test_a_refused_numeric_flag_is_named(tmp_path, capsys, args, flag, value):
    output = ["-o", str(tmp_path / "p.json")] if args[0] in ("plan", "profile") else []
    err = _error(capsys, [*args, *output, flag, value])
    assert f"planner: error: {flag}" in err, err
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize("name", ["__init__", "__main__", "_x", "x_", "__x", "class", "1x",
                                  "x\u202ey", "x-y", "a" * 65])
def test_a_folder_name_that_is_not_its_import_name_is_refused(tmp_path, capsys, name):
    out = tmp_path / "gen" / name
    with pytest.raises(UserError) as refused:
        package_name(out)
    message = str(refused.value)
    assert "\u202e" not in message  # shown escaped, not acted on by the terminal
    assert ascii(name).strip("'") in message or name in message
    err = _error(capsys, ["build", str(PLAN), "-o", str(out)])
    assert "\u202e" not in err
    assert not out.exists() and not any(out.parent.glob(".*"))  # nothing written


@pytest.mark.parametrize("name", ["lenet", "lenet_2", "my_model", "x" * 64])
def test_a_folder_name_is_the_name_the_sources_spell(tmp_path, name):
    assert package_name(tmp_path / name) == name == module_name(name)
