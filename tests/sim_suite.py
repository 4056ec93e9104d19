"""Run the real-socket test suite under a SIMULATED platform (tests only).

    python tests/sim_suite.py unix    [pytest arguments...]
    python tests/sim_suite.py windows [pytest arguments...]

Without test paths among the arguments it runs :data:`REAL_SOCKET_SUITE`.
Both simulations cover the test process itself and every process it starts,
so in-process servers (``running_server``) and ``python -m serverio``
subprocesses see the same platform:

* ``unix`` ("unix-without-linux-extras", what macOS, FreeBSD and old Linux
  kernels look like to serverio): re-executes itself inside a private mount
  namespace (``unshare -m``) whose ``/proc`` is an empty tmpfs (a procfs
  mounted elsewhere, named by ``SERVERIO_SIM_MEASURE_PROC``, lets tests
  measure another process's RSS, as ``ps`` would on macOS), installs a
  seccomp filter (PyPI ``pyseccomp``) under which ``openat2`` fails with
  ENOSYS (filters are inherited across fork and exec), then execs pytest.
* ``windows`` ("windows-shaped"): execs pytest with ``tests/sim_site`` on
  ``PYTHONPATH``, whose ``sitecustomize`` applies tests/sim_windows.py's
  shape to every interpreter of the run.  Linux underneath: neither ntpath,
  nor case folding, nor trio's IOCP backend is exercised.

``SERVERIO_SIMULATION`` names the active simulation (see
:mod:`testkit.simulation`); tests/test_simulated_platforms.py checks that
it really is in force.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

NAMES = {"unix": "unix-without-linux-extras", "windows": "windows-shaped"}

# Every test file whose tests talk to a server over a real loopback socket
# (in-process ``running_server`` or a ``python -m serverio`` subprocess),
# plus the check that the simulation is live.  Whole files: their
# memory-stream tests run under the simulation as well.  Not here: the
# opener-level suites (test_containment, test_portability), which force
# every strategy and patch the platform seams in the normal run already.
REAL_SOCKET_SUITE = (
    "tests/test_simulated_platforms.py",
    "tests/test_sockets.py",
    "tests/test_connection_close.py",
    "tests/test_transport.py",
    "tests/test_bodies.py",
    "tests/test_listeners.py",
    "tests/test_tls.py",
    "tests/test_tlsstream.py",
    "tests/test_h2_sockets.py",
    "tests/test_activation.py",
    "tests/test_workers.py",
    "tests/test_accesslog.py",
    "tests/test_lame_duck.py",
    "tests/test_metrics.py",
    "tests/test_livereload.py",
    "tests/test_livereload_h2.py",
    "tests/test_site.py",
    "tests/test_cli.py",
    "tests/test_fleet_validators.py",
    "tests/test_listing.py",
    "tests/test_fs_pool.py",
    "tests/test_hostile_names.py",
    "tests/test_content_engine.py",
    "tests/test_filecache.py",
    "tests/test_reliability.py",
)

# Left out of one simulation, and why.  test_reliability's probe server
# reports on SIGUSR1 and its scenarios raise RLIMIT_NOFILE (resource):
# Windows has neither, so those instruments do not exist there.
NOT_UNDER = {"windows": ("tests/test_reliability.py",)}


def _pytest(which: str, args: list[str]) -> None:
    name = NAMES[which]
    if not any(not a.startswith("-") and ("/" in a or a.endswith(".py")) for a in args):
        left_out = NOT_UNDER.get(which, ())
        args = [*args, *(f for f in REAL_SOCKET_SUITE if f not in left_out)]
    os.environ["SERVERIO_SIMULATION"] = name
    os.chdir(REPO)
    os.execv(sys.executable, [sys.executable, "-m", "pytest", *args])


def _unix_inside(args: list[str]) -> None:
    import pyseccomp

    if os.listdir("/proc"):
        sys.exit("sim_suite: /proc is not empty inside the namespace")
    filt = pyseccomp.SyscallFilter(defaction=pyseccomp.ALLOW)
    filt.add_rule(pyseccomp.ERRNO(errno.ENOSYS), "openat2")
    filt.load()
    _pytest("unix", args)


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["--inside-namespace"]:
        _unix_inside(argv[1:])
    if not argv or argv[0] not in NAMES:
        sys.exit("usage: sim_suite.py {unix,windows} [pytest arguments...]")
    which, rest = argv[0], argv[1:]
    if which == "windows":
        site = str(HERE / "sim_site")
        paths = [site, str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(":"))]
        os.environ["PYTHONPATH"] = ":".join(paths)
        _pytest("windows", rest)
    # A procfs for the measuring side only (testkit.simulation.measuring_proc):
    # mounted inside the namespace, gone with it.
    measure = tempfile.mkdtemp(prefix="serverio-sim-proc-")
    os.environ["SERVERIO_SIM_MEASURE_PROC"] = measure
    script = (
        'mount -t proc proc "$SERVERIO_SIM_MEASURE_PROC" && mount -t tmpfs none /proc'
        ' && exec "$0" "$@"'
    )
    me = [sys.executable, str(Path(__file__).resolve()), "--inside-namespace"]
    try:
        code = subprocess.call(["unshare", "-m", "sh", "-c", script, *me, *rest])
    finally:
        os.rmdir(measure)
    sys.exit(code)


if __name__ == "__main__":
    main()
