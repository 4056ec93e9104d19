"""The recursive search below a listed folder (``?q=``): its blocking walk
and its name matcher.

The walk is breadth-first and runs in batches (:func:`scan_batch`, in the
``work`` pool): each batch scans a few directories with the listing's own
scan (:func:`serverio.fs.jobs.scan_directory`: the same containment, the
same hidden-file policy, symlinks by their resolved target), and the
caller, on the trio thread, applies the access hook's rules and ``--hide``
to each directory's entries before it matches them or descends into the
folders among them.  So a search never shows or enters what a listing of
the same folder would not show.

Bounds: the number of entries visited (``--search-max-entries``) and the
time (``--search-time``), both checked between directories and passed to
each batch; a directory seen twice (a symlink loop, by device and inode)
is not entered again.
"""

from __future__ import annotations

import fnmatch
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..http.listing import Entry
from .jobs import OwnedFd, scan_directory
from .opener import ContainedRoot

__all__ = ["BATCH_DIRS", "Scanned", "name_matcher", "scan_batch"]

# Directories per hop to the work pool: few enough that the rules are
# applied soon, many enough that the hop's cost is spread.
BATCH_DIRS = 32

_GLOB = re.compile(r"[*?\[]")


def name_matcher(q: str) -> Callable[[str], bool]:
    """``q`` as a test on a name, ignoring case: a glob when it has ``*``,
    ``?`` or ``[`` (:mod:`fnmatch` over the whole name: ``*.pdf``), else a
    substring (``report`` matches ``Q3 Report.pdf``)."""
    low = q.casefold()
    if _GLOB.search(low):
        pattern = re.compile(fnmatch.translate(low))
        return lambda name: pattern.match(name.casefold()) is not None
    return lambda name: low in name.casefold()


@dataclass(frozen=True, slots=True)
class Scanned:
    """One directory of a batch: where it is (below the searched folder),
    what it holds, and whether its scan was cut by the bound."""

    rel: tuple[str, ...]
    entries: list[Entry]
    cut: bool


def scan_batch(
    opener: ContainedRoot,
    base: Sequence[str],
    dirs: Sequence[tuple[str, ...]],
    hidden: bool,
    budget: int,
    deadline: float,
    seen: set[tuple[int, int]],
    resolving: bool,
) -> list[Scanned]:
    """Scan the directories ``dirs`` (below the folder ``base``; blocking).

    At most ``budget`` entries in all, and none after ``deadline``
    (``time.monotonic``); a directory whose (device, inode) is in ``seen``
    is skipped (a loop through symlinks), else added.  A directory that
    cannot be opened (gone, refused by the containment) is skipped.
    ``resolving``: entries carry where a symlink leads (for auth rules).

    Cancellation handling: runs in a worker thread and closes every
    descriptor it opens before returning; an abandoned call's result is
    dropped by :func:`~serverio.run_blocking` (``seen`` is the caller's
    and only this call touches it while it runs).
    """
    out: list[Scanned] = []
    for rel in dirs:
        if budget <= 0 or time.monotonic() > deadline:
            break
        relpath = "/".join((*base, *rel)) or "."
        try:
            if resolving:
                fd, led = opener.open_resolved(relpath)
            else:
                fd, led = opener.open(relpath), None
        except OSError:
            continue
        try:
            st = os.fstat(fd)
        except OSError:
            os.close(fd)
            continue
        key = (st.st_dev, st.st_ino)
        if key in seen:
            os.close(fd)
            continue
        seen.add(key)
        real: str | bool | None = (led if led is not None else None) if resolving else False
        try:
            entries, cut = scan_directory(OwnedFd(fd), opener, relpath, hidden, budget, real)
        except OSError:
            continue
        budget -= len(entries)
        out.append(Scanned(rel, entries, cut))
    return out
