"""How many CPUs this process may actually use (``--workers auto``).

``os.cpu_count()`` counts the machine; a process pinned by ``taskset`` or a
container's cpuset may only run on some of them (``os.sched_getaffinity``,
where it exists), and a container runtime's CPU quota (cgroup v2
``cpu.max``, or v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``) limits the
time it gets on those: 2 CPUs of quota on a 64-core host is 2 workers, not
64 (each would get 1/32 of a core).  The quota is rounded up (1.5 CPUs ->
2 workers: the half is still usable) and the answer is at least 1.

Nothing here runs at import time; every file read is optional (other
platforms, no cgroup filesystem): unreadable means "no limit".
"""

from __future__ import annotations

import math
import os

__all__ = ["available_cpus", "cgroup_cpu_limit"]


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    except (OSError, ValueError):
        return None


def _v2_limit(root: str, rel: str) -> float | None:
    """The tightest ``cpu.max`` from the process's cgroup up to the root."""
    best: float | None = None
    rel = rel.strip("/")
    while True:
        text = _read(os.path.join(root, rel, "cpu.max"))
        if text is not None:
            parts = text.split()
            if len(parts) == 2 and parts[0] != "max" and parts[0].isdigit() and parts[1].isdigit():
                quota, period = int(parts[0]), int(parts[1])
                if quota > 0 and period > 0:
                    cpus = quota / period
                    best = cpus if best is None else min(best, cpus)
        if not rel:
            return best
        rel = os.path.dirname(rel)


def _v1_limit(root: str, rel: str) -> float | None:
    for base in (os.path.join(root, "cpu", rel.strip("/")), os.path.join(root, "cpu")):
        quota = _read(os.path.join(base, "cpu.cfs_quota_us"))
        period = _read(os.path.join(base, "cpu.cfs_period_us"))
        if quota is None or period is None:
            continue
        try:
            q, p = int(quota), int(period)
        except ValueError:
            continue
        if q > 0 and p > 0:
            return q / p
        return None
    return None


def cgroup_cpu_limit(
    root: str = "/sys/fs/cgroup", proc_cgroup: str = "/proc/self/cgroup"
) -> float | None:
    """CPUs of quota this process's cgroup allows (None: no quota known)."""
    text = _read(proc_cgroup)
    if text is None:
        return None
    for line in text.splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        hid, controllers, path = fields
        if hid == "0" and controllers == "":
            return _v2_limit(root, path)
        if "cpu" in controllers.split(","):
            return _v1_limit(root, path)
    return None


def available_cpus(root: str = "/sys/fs/cgroup", proc_cgroup: str = "/proc/self/cgroup") -> int:
    """One per CPU in the affinity mask (else ``cpu_count``), capped by the quota."""
    affinity = getattr(os, "sched_getaffinity", None)
    n = len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)
    limit = cgroup_cpu_limit(root, proc_cgroup)
    if limit is not None:
        n = min(n, math.ceil(limit))
    return max(1, n)
