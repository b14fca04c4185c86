"""Nothing lost: CLI writes are atomic, a target that is not a regular file is refused before
it is read (a FIFO would block, /dev/full would swallow the plan), and a failed write leaves
the old file whole."""

from __future__ import annotations

import os
import stat

import pytest

from planner.cli import main
from planner.errors import UserError
from planner.io.write import atomic_write, holds, write_text


def test_a_fifo_or_device_target_is_refused_without_reading_it(tmp_path, capsys):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)  # reading it would block for ever: the test would hang
    for target in (str(fifo), "/dev/full"):
        for force in ([], ["--force"]):
            code = main(["graph", "zoo:mlp?batch=2", "-o", target, *force])
            err = capsys.readouterr().err
            assert code == 2 and "is not a regular file" in err
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_a_failed_write_leaves_the_old_file_and_no_fragment(tmp_path, monkeypatch):
    target = tmp_path / "plan.json"
    target.write_text("old\n")

    def broken_fsync(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="No space left"):
        write_text(str(target), "new and longer text\n", force=True)
    assert target.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["plan.json"]


def test_writes_replace_whole_files_and_keep_their_mode(tmp_path):
    target = tmp_path / "a.json"
    target.write_text("x" * 100)
    target.chmod(0o640)
    atomic_write(target, "short\n")
    assert target.read_text() == "short\n" and stat.S_IMODE(target.stat().st_mode) == 0o640
    assert holds(target, "short\n") and not holds(target, "short!\n")
    assert not holds(tmp_path, "") and not holds(tmp_path / "absent", "")


def test_different_existing_file_needs_force(tmp_path):
    target = tmp_path / "a.json"
    target.write_text("mine\n")
    with pytest.raises(UserError, match="exists and differs; pass --force"):
        write_text(str(target), "theirs\n")
    assert write_text(str(target), "theirs\n", force=True)
    assert not write_text(str(target), "theirs\n")
