"""Resident memory and CPU time of a server's process tree, read from /proc.

The CPU figure of a trial is utime + stime (``/proc/PID/stat`` fields 14
and 15, plus 16 and 17, cutime and cstime: the time of children the
process has already reaped, so that a worker that exits inside the window
is not lost) summed over the server's whole process tree (serverio and its
``--workers``, nginx's master and workers, Caddy), read right before the
load generator starts and right after it exits, in clock ticks
(``os.sysconf("SC_CLK_TCK")``, 100 on Linux: 10 ms).  Divided by the
requests the generator saw answered it is the server CPU per request
(:func:`cpu_us_per_request`), a figure that does not depend on how much
CPU the load generator got.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

PROC = Path("/proc")


def _stat_fields(pid: int, proc: Path) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (field 3 on)."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may contain spaces and ")":
    # split after the last ")".
    return stat[stat.rfind(")") + 2 :].split()


def cpu_ticks(pid: int, proc: Path = PROC) -> int:
    """utime + stime + cutime + cstime of one process in clock ticks (0 when gone).

    Fields 14-17 of ``/proc/PID/stat`` (proc(5)); ``fields[0]`` below is
    field 3 (the state), so they are ``fields[11:15]``.
    """
    fields = _stat_fields(pid, proc)
    if fields is None or len(fields) < 15:
        return 0
    return sum(int(v) for v in fields[11:15])


def tree_cpu_ticks(root: int, proc: Path = PROC) -> int:
    """CPU ticks summed over ``root``'s process tree (0 when the tree is gone)."""
    return sum(cpu_ticks(pid, proc) for pid in process_tree(root, proc))


def clock_ticks_per_s() -> int:
    return int(os.sysconf("SC_CLK_TCK"))


def cpu_us_per_request(ticks: int, requests: int, hz: int) -> float | None:
    """``ticks`` of CPU over ``requests`` answered, in µs per request (None without requests)."""
    if requests <= 0 or hz <= 0:
        return None
    return ticks * 1_000_000 / hz / requests


def rss_kib(pid: int, proc: Path = PROC) -> int | None:
    """VmRSS of one process in KiB, or None when it is gone (or a zombie)."""
    try:
        text = (proc / str(pid) / "status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return None


def _parent_of(pid: int, proc: Path = PROC) -> int | None:
    fields = _stat_fields(pid, proc)
    return int(fields[1]) if fields is not None and len(fields) > 1 else None


def process_tree(root: int, proc: Path = PROC) -> list[int]:
    """``root`` and all its descendants that exist right now."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir(proc):
        if entry.name.isdigit():
            parent = _parent_of(int(entry.name), proc)
            if parent is not None:
                children.setdefault(parent, []).append(int(entry.name))
    tree: list[int] = []
    frontier = [root]
    while frontier:  # bounded: each pid is visited once
        pid = frontier.pop()
        if pid in tree:
            continue
        tree.append(pid)
        frontier.extend(children.get(pid, ()))
    return tree


def tree_rss_kib(root: int, proc: Path = PROC) -> int:
    """Sum of VmRSS over ``root``'s process tree (0 when the tree is gone)."""
    return sum(rss_kib(pid, proc) or 0 for pid in process_tree(root, proc))


class PeakRssSampler:
    """Samples a process tree's RSS on a thread while in use; keeps the maximum.

    The thread stops when the ``with`` block exits; one sample is always taken
    at entry and at exit.
    """

    def __init__(self, root: int, interval_s: float = 0.1) -> None:
        self.root = root
        self.interval_s = interval_s
        self.peak_kib = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"rss-{root}", daemon=True)

    def _sample(self) -> None:
        self.peak_kib = max(self.peak_kib, tree_rss_kib(self.root))
        self.samples += 1

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def __enter__(self) -> PeakRssSampler:
        self._sample()
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)
        self._sample()


def run_sampled(
    argv: list[str], pid: int, timeout_s: float
) -> tuple[subprocess.CompletedProcess[str] | None, int]:
    """Run a load generator to completion while sampling ``pid``'s tree RSS.

    Returns the finished process (None when it ran past ``timeout_s``) and
    the peak RSS in KiB seen meanwhile.
    """
    with PeakRssSampler(pid) as sampler:
        try:
            proc: subprocess.CompletedProcess[str] | None = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            proc = None
    return proc, sampler.peak_kib


@dataclass
class Measured:
    """What :func:`run_measured` saw of one load-generator run."""

    proc: subprocess.CompletedProcess[str] | None  # None: it ran past the timeout
    peak_rss_kib: int
    rss_start_kib: int  # the tree's RSS right before the load started
    cpu_ticks: int  # the server tree's CPU over the window
    hz: int
    # The same CPU figure for other process trees watched over the same
    # window (the proxy workloads' upstream), by root pid.
    other_cpu_ticks: dict[int, int] = field(default_factory=dict)

    def cpu_us_per_request(self, requests: int) -> float | None:
        return cpu_us_per_request(self.cpu_ticks, requests, self.hz)

    def other_cpu_us_per_request(self, pid: int, requests: int) -> float | None:
        return cpu_us_per_request(self.other_cpu_ticks.get(pid, 0), requests, self.hz)


def run_measured(
    argv: list[str], pid: int, timeout_s: float, others: Sequence[int] = ()
) -> Measured:
    """:func:`run_sampled`, and the CPU time of ``pid``'s tree (and of each
    tree in ``others``) from right before the load generator starts to right
    after it exits."""
    hz = clock_ticks_per_s()
    before = tree_cpu_ticks(pid)
    others_before = {o: tree_cpu_ticks(o) for o in others}
    rss_start = tree_rss_kib(pid)
    proc, peak = run_sampled(argv, pid, timeout_s)
    ticks = tree_cpu_ticks(pid) - before
    others_ticks = {o: tree_cpu_ticks(o) - t for o, t in others_before.items()}
    return Measured(proc, peak, rss_start, max(0, ticks), hz, others_ticks)
