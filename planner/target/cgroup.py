"""The cgroup CPU quota of this process: how many cores' worth of time it may use.

cgroup v2: the process's cgroup comes from the "0::/path" line of /proc/self/cgroup and its
quota from `cpu.max` ("max 100000": none; "150000 100000": 1.5 cores). cgroup v1: the line
naming the `cpu` controller, then `cpu.cfs_quota_us` (-1: none) over `cpu.cfs_period_us`.
A file that cannot be read means no quota; one that cannot be parsed is ignored, and the
reason is returned so detection says it in the target's notes (never an exception).

The functions take the roots as arguments, so they are tested on fake trees.
"""

from __future__ import annotations

from pathlib import Path


def cpu_quota(proc_root: Path = Path("/proc"),
              cgroup_root: Path = Path("/sys/fs/cgroup")) -> tuple[float | None, str]:
    """(cores of quota or None, a one-line note saying what was read).

    >>> cpu_quota(Path("/nonexistent"), Path("/nonexistent"))
    (None, 'no cgroup CPU quota (cannot read /nonexistent/self/cgroup)')
    """
    try:
        lines = (proc_root / "self/cgroup").read_text().splitlines()
    except OSError:
        return None, f"no cgroup CPU quota (cannot read {proc_root / 'self/cgroup'})"
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        rel = path.strip().lstrip("/")
        if hierarchy == "0" and controllers == "":
            return _v2(cgroup_root, rel)
        if "cpu" in controllers.split(","):
            return _v1(cgroup_root, controllers, rel)
    return None, "no cgroup CPU quota (no cpu controller in /proc/self/cgroup)"


def parse_cpu_max(text: str) -> float | None:
    """cgroup v2 `cpu.max` -> cores, None for "max"; ValueError when malformed.

    >>> parse_cpu_max("max 100000"), parse_cpu_max("150000 100000\\n")
    (None, 1.5)
    """
    fields = text.split()
    if len(fields) not in (1, 2):
        raise ValueError(f"cpu.max {text.strip()!r}: expected '<quota|max> [period]'")
    if fields[0] == "max":
        return None
    return _ratio(fields[0], fields[1] if len(fields) == 2 else "100000", "cpu.max")


def parse_cfs(quota_text: str, period_text: str) -> float | None:
    """cgroup v1 `cpu.cfs_quota_us`, `cpu.cfs_period_us` -> cores, None for -1.

    >>> parse_cfs("-1\\n", "100000\\n"), parse_cfs("200000", "100000")
    (None, 2.0)
    """
    if quota_text.strip() == "-1":
        return None
    return _ratio(quota_text.strip(), period_text.strip(), "cpu.cfs_quota_us")


def _ratio(quota: str, period: str, name: str) -> float:
    if not (quota.isdigit() and period.isdigit()) or int(period) == 0 or int(quota) == 0:
        raise ValueError(f"{name}: quota {quota!r} over period {period!r} is not two "
                         "positive integers")
    return int(quota) / int(period)


def _v2(root: Path, rel: str) -> tuple[float | None, str]:
    # The effective quota is the tightest along the path up to the root.
    folder, best, where = root / rel, None, ""
    while True:
        try:
            text = (folder / "cpu.max").read_text()
        except OSError:
            text = None
        if text is not None:
            try:
                cores = parse_cpu_max(text)
            except ValueError as e:
                return None, f"cgroup CPU quota ignored: {e} in {folder / 'cpu.max'}"
            if cores is not None and (best is None or cores < best):
                best, where = cores, f"{folder / 'cpu.max'}: {text.strip()}"
        if folder == root or folder.parent == folder:
            break
        folder = folder.parent
    if best is None:
        return None, "no cgroup CPU quota (cgroup v2 cpu.max is max)"
    return best, f"cgroup CPU quota {best:g} cores ({where})"


def _v1(root: Path, controllers: str, rel: str) -> tuple[float | None, str]:
    for mount in (root / controllers, root / "cpu", root / "cpu,cpuacct"):
        folder = mount / rel
        try:
            quota = (folder / "cpu.cfs_quota_us").read_text()
            period = (folder / "cpu.cfs_period_us").read_text()
        except OSError:
            continue
        try:
            cores = parse_cfs(quota, period)
        except ValueError as e:
            return None, f"cgroup CPU quota ignored: {e} in {folder}"
        if cores is None:
            return None, "no cgroup CPU quota (cgroup v1 cpu.cfs_quota_us is -1)"
        return cores, (f"cgroup CPU quota {cores:g} cores ({folder}: "
                       f"{quota.strip()} / {period.strip()} us)")
    return None, "no cgroup CPU quota (cgroup v1 cpu files not found)"
