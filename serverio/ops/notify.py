"""systemd's readiness protocol (sd_notify(3)) without a dependency.

A ``Type=notify`` unit sets ``$NOTIFY_SOCKET``; the service sends one
datagram per state change to that AF_UNIX socket: ``READY=1`` once it
listens (systemd then starts the units ordered after it, and
``systemctl start`` returns), ``STOPPING=1`` when the graceful drain begins.
A name starting with ``@`` is in the Linux abstract namespace (a leading NUL
byte on the wire).  Without the variable, or on a platform with no AF_UNIX
datagrams (Windows), :func:`notify` does nothing: the same binary runs
under any supervisor.

The send is one non-blocking ``sendto`` on a local socket, so it is made
from the trio thread; a failure (no listener, a full queue) is ignored, as
libsystemd's ``sd_notify`` reports but never raises: readiness is advice to
the supervisor, never a reason to stop serving.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

__all__ = ["notify"]


def _address(name: str) -> str | bytes | None:
    if name.startswith("@"):
        return b"\0" + name[1:].encode()  # abstract namespace (Linux)
    if name.startswith("/"):
        return name
    return None  # vsock and other forms (systemd 254+) are not spoken here


def notify(message: str, environ: Mapping[str, str] | None = None) -> bool:
    """Send ``message`` (``READY=1``, ``STOPPING=1``) to ``$NOTIFY_SOCKET``;
    True if it was sent.  Never raises for a missing or broken socket."""
    env = os.environ if environ is None else environ
    address = _address(env.get("NOTIFY_SOCKET", ""))
    af_unix: int | None = getattr(socket, "AF_UNIX", None)  # not on Windows
    if address is None or af_unix is None:
        return False
    try:
        with socket.socket(af_unix, socket.SOCK_DGRAM | getattr(socket, "SOCK_CLOEXEC", 0)) as s:
            s.setblocking(False)
            s.sendto(message.encode(), address)
    except OSError:
        return False
    return True
