"""Unix-without-Linux-extras launcher: a SIMULATION, used only by tests.

Meant to run inside a private mount namespace whose ``/proc`` is an empty
tmpfs (``unshare -m`` + ``mount -t tmpfs``, see
tests/test_simulated_platforms.py): it installs a seccomp filter (PyPI
``pyseccomp``) under which ``openat2`` fails with ENOSYS, as on a kernel
older than 5.6 or a BSD, then runs ``python -m serverio`` with the same
arguments.  Before serving it prints ``simulation: unix-without-linux-extras
strategy=... proc_entries=N`` on stderr, so the test can check both
conditions held.
"""

from __future__ import annotations

import errno
import os
import runpy
import sys

import pyseccomp


def main() -> None:
    filt = pyseccomp.SyscallFilter(defaction=pyseccomp.ALLOW)
    filt.add_rule(pyseccomp.ERRNO(errno.ENOSYS), "openat2")
    filt.load()
    from serverio.fs.opener import RootOpener

    directory = sys.argv[sys.argv.index("-d") + 1] if "-d" in sys.argv else "."
    probe = RootOpener(directory, follow_symlinks=False)
    entries = len(os.listdir("/proc"))
    print(
        f"simulation: unix-without-linux-extras strategy={probe.strategy} proc_entries={entries}",
        file=sys.stderr,
        flush=True,
    )
    probe.close()
    sys.argv = ["serverio", *sys.argv[1:]]
    runpy.run_module("serverio", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
