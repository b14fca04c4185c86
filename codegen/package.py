"""`planner build -o DIR` without losing anything.

    DIR absent, empty, or holding this plan's executor   build (in place when the plan is the
                                                         same: the cache makes that instant)
    DIR holding another plan's executor or other files   refused unless --force (the default
                                                         folder, generated/NAME: replaced
                                                         when it holds only what a build
                                                         writes, BUILT)
    DIR not a folder                                     refused

A new plan is rendered and compiled in a sibling temporary folder, which replaces DIR only once
the build succeeded: a failed build leaves the previous package whole. Builds into one folder
hold a lock (`.DIR.lock` beside it), so concurrent ones take turns. Nothing in DIR is read
but through planner.io.write.holds (regular files of the expected size only).
"""

from __future__ import annotations

import dataclasses
import keyword
import os
import shutil
import stat
import tempfile
from pathlib import Path

from codegen.build import RUNTIME_BUILDS, BuildResult, Progress, build
from codegen.render import RenderedTree, module_name, render, shadows
from planner.errors import UserError
from planner.io.write import folder_lock, holds
from planner.plan import Plan


def build_package(plan: Plan, out: str | Path, force: bool = False,
                  replace_executors: bool = False, progress: Progress | None = None,
                  sanitize: tuple[str, ...] = ()) -> tuple[RenderedTree, BuildResult]:
    """Render and build `plan`'s executor into `out` (see the module docstring).

    replace_executors: another plan's executor in `out` may be replaced without `force` (the
    default folder generated/NAME, which only `planner build` writes).
    """
    # Refuse a GPU nvcc cannot build for before rendering anything.
    RUNTIME_BUILDS[plan.backend].arch(plan.target.compute_capability, plan.target.name)
    out = Path(out)
    name = package_name(out)
    with folder_lock(out):
        text = plan.to_json()
        _check_folder(out, text, force, replace_executors)
        if holds(out / "plan.json", text):
            tree = render(plan, out)
            return tree, build(tree, progress, sanitize)
        staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.new-"))
        try:
            os.chmod(staging, 0o777 & ~_umask())
            tree = render(plan, staging, name=name)
            result = build(tree, progress, sanitize)
            _replace(out, staging)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return (dataclasses.replace(tree, dir=out),
            dataclasses.replace(result, dir=out,
                                schedule=out / "build" / result.schedule.name))


def package_name(out: Path) -> str:
    """The module name of a package built into folder `out`: the folder's name, which must be
    an ASCII identifier, not a keyword, and not the name of a module it would shadow when
    imported (the standard library's, numpy, torch, this project's, any installed package's).
    UserError in one line, suggesting a name, before anything is configured.

    >>> package_name(Path("generated/lenet")), package_name(Path("gen/lenet_2"))
    ('lenet', 'lenet_2')
    >>> package_name(Path("gen/json"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    planner.errors.UserError: gen/json: 'json' would shadow the module json when imported; ...
    >>> package_name(Path("gen/__init__"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    planner.errors.UserError: gen/__init__: '__init__' would be spelled 'init' in the ...
    """
    name = out.name
    if not (name.isascii() and name.isidentifier()):
        why = "is not a Python module name (ASCII letters, digits and _, not first a digit)"
    elif keyword.iskeyword(name):
        why = "is a Python keyword"
    elif shadows(name) or name in _installed_packages():
        why = f"would shadow the module {name} when imported"
    elif module_name(name) != name:  # the name the sources spell, so the import line works
        why = (f"would be spelled {module_name(name)!r} in the generated sources (no leading "
               f"or trailing _, at most 64 characters: __init__, __main__ and _private names "
               f"are not packages)")
    else:
        return name
    raise UserError(f"{_shown(out)}: {name!r} {why}; use e.g. -o "
                    f"{_shown(out.parent / module_name(name))}")


def _shown(path: Path) -> str:
    # A path as typed, unless it holds characters a terminal would act on (bidi overrides,
    # controls): then escaped, so the message reads as what the path really is.
    text = str(path)
    return text if text.isprintable() else ascii(text)


def _installed_packages() -> frozenset[str]:
    from importlib.metadata import packages_distributions

    return frozenset(packages_distributions())


def _check_folder(out: Path, text: str, force: bool, replace_executors: bool) -> None:
    try:
        st = out.stat()
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        raise UserError(f"{out}: exists and is not a folder; not building over it")
    if not any(out.iterdir()) or holds(out / "plan.json", text) or force:
        return
    executor = (out / "plan.json").is_file() and (out / "__init__.py").is_file()
    others = sorted(p.name for p in out.iterdir() if p.name not in BUILT)
    if executor and replace_executors and not others:
        return
    what = "the executor of another plan" if executor else "files that are not an executor"
    theirs = f" and {others[0]!r}, which no build wrote" if executor and others else ""
    raise UserError(f"{out}: holds {what}{theirs}; pass --force to replace it")


# What a build writes in its folder (codegen.render's files, the build folder, Python's byte
# code): an executor holding anything else holds the user's files too (a checkpoint, a run's
# logs), and the default folder is replaced only without them.
BUILT = frozenset({"schedule.cpp", "evaluation.cpp", "CMakeLists.txt", "__init__.py",
                   "plan.json", "build", "__pycache__"})


def _replace(out: Path, new: Path) -> None:
    """Put folder `new` where `out` is, removing the old `out` only after the move."""
    if not out.exists():
        os.rename(new, out)
        return
    old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.old-"))
    os.rename(out, old / "dir")
    try:
        os.rename(new, out)
    except OSError:
        os.rename(old / "dir", out)
        raise
    finally:
        shutil.rmtree(old, ignore_errors=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
