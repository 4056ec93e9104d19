"""Resident memory of a server's process tree, read from /proc."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path
from types import TracebackType

PROC = Path("/proc")


def rss_kib(pid: int) -> int | None:
    """VmRSS of one process in KiB, or None when it is gone (or a zombie)."""
    try:
        text = (PROC / str(pid) / "status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return None


def _parent_of(pid: int) -> int | None:
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may contain spaces: split after it.
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[1]) if len(fields) > 1 else None


def process_tree(root: int) -> list[int]:
    """``root`` and all its descendants that exist right now."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir(PROC):
        if entry.name.isdigit():
            parent = _parent_of(int(entry.name))
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


def tree_rss_kib(root: int) -> int:
    """Sum of VmRSS over ``root``'s process tree (0 when the tree is gone)."""
    return sum(rss_kib(pid) or 0 for pid in process_tree(root))


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
