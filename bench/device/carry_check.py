"""What a GPU call carries, checked before it leaves (bench/device/prepare.sh):

    python bench/device/carry_check.py PINS WHEEL_DIR    the wheels agree with the pins and
                                                         with each other
    python bench/device/carry_check.py --tree ROOT       what travels fits the device tool

The wheels are installed there with --no-deps, so nothing checks their requirements on the
way: here, every pin has one wheel of exactly its version (two versions of one package stop
the whole install), no other wheel lies there, and each wheel's requirements (for CPython 3.12
on Linux) are met by the set, or named as the image's to provide. Exit 1 naming each problem.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

# The device tool's limit on the working tree plus carried folders (its README).
TRAVEL_LIMIT = 64 * 2**20
CARRIED = (".whl", ".whl-cpu", ".rt")
# Python 3.12 on x86-64 Linux: the GPU image's interpreter (its KINDS.md).
ENVIRONMENT = {**default_environment(), "python_version": "3.12", "python_full_version": "3.12.3",
               "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
               "implementation_name": "cpython", "extra": ""}


def pins(path: Path) -> dict[str, str]:
    """name -> version of every `name==version` line (comments and blanks skipped)."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            out[canonicalize_name(name)] = version.strip()
    return out


def requirements(wheel: Path) -> list[Requirement]:
    """The wheel's Requires-Dist that apply on the GPU image (no extras)."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        fields = Parser().parsestr(z.read(meta).decode())
    reqs = [Requirement(r) for r in fields.get_all("Requires-Dist") or []]
    return [r for r in reqs if r.marker is None or r.marker.evaluate(ENVIRONMENT)]


def check_wheels(pinned: dict[str, str], folder: Path) -> list[str]:
    problems, have = [], {}
    for wheel in sorted(folder.glob("*.whl")):
        name, version, _, _ = parse_wheel_filename(wheel.name)
        if name in have:
            problems.append(f"two wheels of {name}: {have[name][0]} and {version}")
        have[name] = (str(version), wheel)
    for name, version in pinned.items():
        if name not in have:
            problems.append(f"no wheel of {name}=={version}")
        elif have[name][0] != version:
            problems.append(f"{name} is {have[name][0]}, pinned {version}")
    for name in sorted(set(have) - set(pinned)):
        problems.append(f"{have[name][1].name} is not pinned in the list: remove it")
    for name, (version, wheel) in sorted(have.items()):
        for r in requirements(wheel):
            dep = canonicalize_name(r.name)
            if dep not in have:
                print(f"  {name} {version} needs {r} from the image")
            elif not r.specifier.contains(have[dep][0], prereleases=True):
                problems.append(f"{name} {version} needs {r}; the wheel is {have[dep][0]}")
    return problems


def check_tree(root: Path) -> list[str]:
    files = subprocess.run(["git", "-C", str(root), "ls-files", "-co", "--exclude-standard", "-z"],
                           capture_output=True, text=True, check=True).stdout.split("\0")
    size = sum((root / f).stat().st_size for f in files if f and (root / f).is_file())
    carried = sum(p.stat().st_size for c in CARRIED if (root / c).is_dir()
                  for p in (root / c).rglob("*") if p.is_file())
    print(f"  the tree {size / 2**20:.1f} MiB + carried {carried / 2**20:.1f} MiB "
          f"(limit {TRAVEL_LIMIT / 2**20:.0f} MiB)")
    if size + carried > TRAVEL_LIMIT:
        return [f"{(size + carried) / 2**20:.1f} MiB would travel, over the limit"]
    return []


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--tree":
        problems = check_tree(Path(argv[1]))
    elif len(argv) == 2:
        problems = check_wheels(pins(Path(argv[0])), Path(argv[1]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    for p in problems:
        print(f"carry_check: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
