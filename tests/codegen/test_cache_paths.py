"""Cache folders and build folders the planner is handed, refused in one line before anything
is built (a hostile round's finds): $PLANNER_CACHE naming a file (was NotADirectoryError), a
file among a lock folder's parents, a file where a package's build folder goes (a damaged cache
entry), and a path holding a character CMake or Ninja reads as syntax (was "Configuring
incomplete")."""

from __future__ import annotations

import re

import pytest

from codegen.build import build, check_build_path
from codegen.errors import BuildError
from codegen.render import render
from planner.errors import UserError
from planner.io.write import cache_root, folder_lock
from tests.codegen.helpers import host_plan


def test_a_cache_variable_naming_a_file_is_refused(tmp_path, monkeypatch):
    (tmp_path / "f").write_text("data")
    monkeypatch.setenv("PLANNER_CACHE", str(tmp_path / "f"))
    with pytest.raises(UserError, match=r"^PLANNER_CACHE '.*/f': is not a folder"):
        cache_root()
    monkeypatch.setenv("PLANNER_CACHE", str(tmp_path / "new"))
    assert cache_root() == tmp_path / "new"  # a folder yet to be made is fine


def test_a_lock_under_a_file_is_refused_naming_the_folder(tmp_path):
    (tmp_path / "f").write_text("data")
    with pytest.raises(UserError, match=r"/f/sub: cannot be made \(Not a directory\)$"):
        with folder_lock(tmp_path / "f" / "sub" / "pkg"):
            pass


@pytest.mark.parametrize("char", [";", '"', "$", "\\", "\n"])
def test_build_paths_with_cmake_or_ninja_syntax_are_refused(tmp_path, char):
    with pytest.raises(BuildError, match=re.escape(f"cannot hold {char!r}")):
        check_build_path(tmp_path / f"a{char}b" / "packages")
    check_build_path(tmp_path / "a b#c'd" / "packages")  # spaces, quotes, '#': fine


def test_a_file_where_the_build_folder_goes_is_refused(mlp_graph, tmp_path):
    tree = render(host_plan(mlp_graph), tmp_path / "pkg")
    (tree.dir / "build").write_text("not a folder")
    with pytest.raises(BuildError, match=r"/pkg/build: is a file where the package's build "
                                         r"folder goes; remove it$"):
        build(tree)
