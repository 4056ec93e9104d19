"""``python -m serverio --check URL``: a health probe that needs no curl.

For a container's ``HEALTHCHECK`` (the Dockerfile) or any supervisor that
runs a command: one ``GET`` to ``URL``, exit status 0 if it answers 2xx
within the timeout, 1 otherwise (refused, timed out, any other status),
2 for a URL it will not probe.

It only probes ``http://`` URLs on a loopback address (``127.0.0.0/8``,
``::1`` or ``localhost``): a health check runs next to the server it checks,
and a probe that could be pointed anywhere would be a request-sending tool
for whoever controls the command line.  Redirects are not followed.
"""

from __future__ import annotations

import ipaddress
import socket
import sys
import urllib.parse

__all__ = ["CHECK_TIMEOUT", "check_url", "loopback_target"]

CHECK_TIMEOUT = 3.0  # seconds for the whole exchange


def loopback_target(url: str) -> tuple[str, int, str] | None:
    """``(host, port, path)`` of an http URL on a loopback address, else None."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port or 80
    except ValueError:
        return None
    host = parts.hostname or ""
    if parts.scheme != "http" or not host or parts.username or parts.password:
        return None
    if host == "localhost":
        host = "127.0.0.1"
    try:
        if not ipaddress.ip_address(host).is_loopback:
            return None
    except ValueError:
        return None  # a name other than localhost: never resolved
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return host, port, path


def check_url(url: str, timeout: float = CHECK_TIMEOUT) -> int:
    """Probe ``url``; the exit status (0 healthy, 1 not, 2 refused URL)."""
    target = loopback_target(url)
    if target is None:
        print("serverio: error: --check only probes http:// URLs on loopback", file=sys.stderr)
        return 2
    host, port, path = target
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    hosthdr = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    request = f"GET {path} HTTP/1.1\r\nHost: {hosthdr}\r\nConnection: close\r\n\r\n"
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect((host, port))
            sock.sendall(request.encode("latin-1"))
            head = b""
            while b"\r\n" not in head and len(head) < 4096:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                head += chunk
    except OSError:
        return 1
    status_line = head.split(b"\r\n", 1)[0].split()
    ok = len(status_line) >= 2 and status_line[0].startswith(b"HTTP/")
    return 0 if ok and status_line[1][:1] == b"2" and len(status_line[1]) == 3 else 1
