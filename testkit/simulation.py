"""Which SIMULATED platform the test run is under, and portable probes.

``tests/sim_suite.py`` sets ``SERVERIO_SIMULATION`` to the name of the
simulation it runs the real-socket suite under; the normal run has none.
Tests read :data:`ACTIVE` to assert what the simulated platform must do
differently (a refusal where Windows lacks the feature, the buffered body
path where there is no ``sendfile``), never to skip silently.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Final

UNIX: Final = "unix-without-linux-extras"
WINDOWS: Final = "windows-shaped"

ACTIVE: Final = os.environ.get("SERVERIO_SIMULATION", "")
# True under the windows-shaped simulation AND on real Windows (the Wine
# run, tests/wine): tests take their Windows branches on both.
REAL_WINDOWS: Final = sys.platform == "win32"
WINDOWS_SHAPED: Final = ACTIVE == WINDOWS or REAL_WINDOWS
UNIX_WITHOUT_LINUX_EXTRAS: Final = ACTIVE == UNIX

# Upper bound of the descriptor probe where no directory lists them.
_PROBE_LIMIT: Final = 1 << 16


def open_fds() -> set[int]:
    """The descriptors open in this process.

    ``/proc/self/fd`` (Linux) or ``/dev/fd`` (macOS, FreeBSD with fdescfs)
    where they list descriptors; elsewhere (an empty ``/proc``, where Linux's
    ``/dev/fd`` is a dangling link) every descriptor below the soft limit is
    probed with ``fstat``.  The listing's own descriptor is not counted.
    """
    for listing in ("/proc/self/fd", "/dev/fd"):
        try:
            names = os.listdir(listing)
        except OSError:
            continue
        if names:
            fds = set()
            for name in names:
                fd = int(name)
                try:
                    os.fstat(fd)
                except OSError:
                    continue  # the listing's own descriptor, closed since
                fds.add(fd)
            return fds
    try:
        limit = min(os.sysconf("SC_OPEN_MAX"), _PROBE_LIMIT)
    except (AttributeError, ValueError, OSError):
        limit = _PROBE_LIMIT
    found = set()
    for fd in range(limit):
        try:
            os.fstat(fd)
        except OSError:
            continue
        found.add(fd)
    return found


def open_fd_count() -> int:
    return len(open_fds())


def measuring_proc() -> str | None:
    """A procfs through which a test measures *another* process (RSS,
    descriptors): ``/proc`` where it is populated; under the
    unix-without-linux-extras simulation, the instance that
    tests/sim_suite.py mounted outside ``/proc`` for the measuring side
    only (the way ``ps`` measures on macOS without a ``/proc``).  serverio
    itself only ever looks at ``/proc``.  None where neither exists."""
    if REAL_WINDOWS:  # Wine's Z:\proc is the Linux host's, not this platform's
        return None
    for candidate in ("/proc", os.environ.get("SERVERIO_SIM_MEASURE_PROC", "")):
        if candidate and os.path.isdir(os.path.join(candidate, "self", "fd")):
            return candidate
    return None


def status_kib(pid: int, field: str) -> int:
    """A ``VmRSS``/``VmHWM``-style field of ``pid``'s status, in KiB."""
    base = measuring_proc()
    if base is None:
        raise OSError("no procfs to measure another process through")
    with open(os.path.join(base, str(pid), "status"), encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


WORKERS_REFUSAL: Final = (
    "serverio: error: --workers needs SO_REUSEPORT, which this platform does not support"
)


def windows_refuses_workers(root: str | os.PathLike[str], *argv: str) -> bool:
    """Under the windows-shaped simulation, check that ``--workers 2`` (with
    ``argv``) is refused with its one-line error and exit status 2, and
    return True: the caller's test of the feature ends there.  Elsewhere
    return False and check nothing."""
    if not WINDOWS_SHAPED:
        return False
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "serverio", "0", "-d", str(root), *argv, "--workers", "2"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert (r.returncode, r.stdout, r.stderr.splitlines()) == (2, "", [WORKERS_REFUSAL])
    return True


FDS_REFUSAL: Final = (
    "serverio: error: --fd and LISTEN_FDS need inherited POSIX descriptors, which win32 lacks"
)


def windows_refuses_fds(
    root: str | os.PathLike[str], *argv: str, env: dict[str, str] | None = None
) -> bool:
    """On real Windows, check that serving inherited sockets (``argv``: ``--fd
    N``, or LISTEN_FDS in ``env``) is refused with its one-line error and exit
    status 2, and return True: the caller's test of the feature ends there.
    Elsewhere return False and check nothing."""
    if not REAL_WINDOWS:
        return False
    import subprocess

    r = subprocess.run(
        [sys.executable, "-m", "serverio", "-d", str(root), *argv],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert (r.returncode, r.stdout, r.stderr.splitlines()) == (2, "", [FDS_REFUSAL])
    return True


def stop_gracefully(proc: Any, admin: str | None = None) -> None:
    """Start ``proc``'s graceful drain: SIGTERM on POSIX; on Windows, which
    has no external SIGTERM (``send_signal(SIGTERM)`` is TerminateProcess,
    exit 1 at once), ``POST /shutdown`` to its loopback admin endpoint
    ``admin`` (``http://127.0.0.1:PORT/``)."""
    if not REAL_WINDOWS:
        import signal

        proc.send_signal(signal.SIGTERM)
        return
    import http.client
    import urllib.parse

    assert admin is not None, "on Windows a graceful stop needs the admin endpoint"
    parts = urllib.parse.urlsplit(admin)
    assert parts.hostname is not None and parts.port is not None
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.request("POST", "/shutdown")
        assert conn.getresponse().status == 202
    finally:
        conn.close()
