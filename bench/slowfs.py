"""Pluggable slow-storage hook: a FUSE mirror of the fixture that adds latency.

The FUSE filesystem belongs to the test suite (``testkit/fusefs.py``); this
module only adapts to it, so the ``slow`` workload runs when that module is
importable and FUSE works here, and is skipped *with the reason* otherwise.

Contract used from ``testkit.fusefs``:

- ``fuse_available() -> str | None``: None when a mount can work, else why not;
- ``SlowFS(backing, mountpoint, delay, kernel_cache=True)``: a context
  manager mirroring ``backing`` read-only at ``mountpoint`` while open, with
  ``delay`` seconds added to every ``open`` (one per request).  With
  ``kernel_cache`` the kernel caches entries and attributes for 1 s and file
  pages, as production network and FUSE filesystems do, so lookups, fstat
  and reads rarely reach the (Python) FUSE process.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

MODULE = "testkit.fusefs"


class SlowFsUnavailable(RuntimeError):
    """The slow-storage fixture cannot be used here; the message says why."""


def _module() -> ModuleType:
    try:
        module = importlib.import_module(MODULE)
    except ModuleNotFoundError as exc:
        raise SlowFsUnavailable(f"{MODULE} not importable ({exc.name} missing)") from exc
    except Exception as exc:  # a broken fixture module must not stop the other workloads
        raise SlowFsUnavailable(f"importing {MODULE} failed: {exc!r}") from exc
    if not callable(getattr(module, "SlowFS", None)):
        raise SlowFsUnavailable(f"{MODULE} has no SlowFS")
    return module


def availability() -> str | None:
    """None when the hook is usable, else the reason it is not."""
    try:
        module = _module()
    except SlowFsUnavailable as exc:
        return str(exc)
    check = getattr(module, "fuse_available", None)
    if callable(check):
        reason = check()
        return None if reason is None else str(reason)
    return None


def _exists_within(path: Path, timeout_s: float) -> bool:
    """``path.exists()`` on a thread, so a wedged mount cannot hang the harness."""
    seen: list[bool] = []
    thread = threading.Thread(target=lambda: seen.append(path.exists()), daemon=True)
    thread.start()
    thread.join(timeout_s)
    return bool(seen and seen[0])


@contextmanager
def slow_mount(source: Path, mountpoint: Path, delay_s: float, probe_file: str) -> Iterator[Path]:
    """Mirror ``source`` at ``mountpoint`` with ``delay_s`` per ``open``; yield the served path.

    Only ``open`` is delayed: serverio's preparation makes exactly one open
    per request (plus undelayed lookups and an fstat), so every request
    costs one delay, like a deterministic 10 ms preparation probe,
    and the expected ceiling is min(workers, clients) / delay.  Each open
    completes ``delay_s`` after it reached the FUSE process, never sooner
    (``testkit.fusefs``); the FUSE round trip comes on top.
    """
    # Kernel caching: without it, every request also makes ~4 undelayed
    # round trips (LOOKUP, GETATTR, READ) to the Python FUSE process, which
    # shares this 2-CPU machine with the server and wrk; we measured that
    # as 12% of the 16-worker ceiling (docs/history/performance-journal.md).
    fs: Any = _module().SlowFS(source, mountpoint, 0.0, kernel_cache=True)
    if not isinstance(fs, AbstractContextManager):
        raise SlowFsUnavailable(f"{MODULE}.SlowFS is not a context manager")
    set_delay: Any = getattr(fs, "set_delay", None)
    if not callable(set_delay):
        raise SlowFsUnavailable(f"{MODULE}.SlowFS has no set_delay()")
    try:
        with fs:
            set_delay(delay_s, ops=("open",))
            if not _exists_within(mountpoint / probe_file, 15.0):
                raise SlowFsUnavailable(
                    f"{mountpoint / probe_file} not visible through the FUSE mount"
                )
            yield mountpoint
    except (OSError, TimeoutError) as exc:
        raise SlowFsUnavailable(f"FUSE mount failed: {exc!r}") from exc
