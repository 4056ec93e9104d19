"""Socket activation: serve on listening sockets we inherited instead of binding.

Two sources, both giving file descriptors of sockets that are already bound
and listening:

* ``--fd N`` (repeatable): any supervisor (a shell with ``3<>``, s6, runit,
  a test with ``pass_fds``);
* systemd's protocol (sd_listen_fds(3)): ``LISTEN_PID`` is our pid and
  ``LISTEN_FDS`` says how many sockets start at fd 3.  The variables are
  removed from the environment after use, so no child process (a worker, a
  CGI-like helper) mistakes them for its own.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import MutableMapping, Sequence

import trio

from ..errors import ConfigError

__all__ = ["SD_LISTEN_FDS_START", "listeners_from_fds", "systemd_fds"]

SD_LISTEN_FDS_START = 3


def systemd_fds(
    environ: MutableMapping[str, str] | None = None, pid: int | None = None
) -> list[int]:
    """The fds systemd passed to *this* process (empty if none); consumes the
    ``LISTEN_*`` variables when they are ours.

    Raises :class:`ConfigError` when the variables are ours but malformed.
    """
    env = os.environ if environ is None else environ
    pid = os.getpid() if pid is None else pid
    if "LISTEN_FDS" not in env:
        return []
    listen_pid = env.get("LISTEN_PID", "")
    if not listen_pid.isdigit() or int(listen_pid) != pid:
        # Meant for another process (our parent, typically): leave them.
        return []
    count = env.get("LISTEN_FDS", "")
    for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        env.pop(name, None)
    if not count.isdigit() or int(count) < 1:
        raise ConfigError(f"LISTEN_FDS must be a positive integer, got {count!r}")
    return list(range(SD_LISTEN_FDS_START, SD_LISTEN_FDS_START + int(count)))


def listeners_from_fds(fds: Sequence[int]) -> list[trio.SocketListener]:
    """Wrap inherited listening sockets.

    Raises :class:`ConfigError` for an fd that is not an open, listening
    stream socket (a wrong ``--fd`` number should fail at start-up, clearly).
    """
    out: list[trio.SocketListener] = []
    if fds and os.name != "posix":
        # Windows sockets are handles, not inheritable descriptor numbers.
        raise ConfigError(
            f"--fd and LISTEN_FDS need inherited POSIX descriptors, which {sys.platform} lacks"
        )
    for fd in fds:
        try:
            sock = socket.socket(fileno=fd)
        except OSError as exc:
            raise ConfigError(f"--fd {fd}: not a socket ({exc.strerror or exc})") from None
        try:
            listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
        except OSError:
            listening = 0
        if sock.type != socket.SOCK_STREAM or not listening:
            sock.detach()  # not ours to close
            raise ConfigError(f"--fd {fd}: not a listening stream socket")
        # The fd must not leak into processes we start later.
        os.set_inheritable(fd, False)
        out.append(trio.SocketListener(trio.socket.from_stdlib_socket(sock)))
    return out
