"""Idle keep-alive connections: how much server memory does each one cost?

The harness opens N plain blocking sockets to the server, one after another,
sends one request on each, reads the whole response, and keeps the socket
open. Server RSS (whole process tree) is read before and after; the
difference divided by the connections still open is the KiB per connection.
No asyncio: plain sockets, a bounded loop, and SO_LINGER 0 so closing sends a
reset instead of leaving N client sockets in TIME_WAIT.
"""

from __future__ import annotations

import resource
import select
import socket
import struct
import time
from dataclasses import dataclass

from bench.procstat import tree_rss_kib

MAX_CONSECUTIVE_FAILURES = 20


def raise_nofile(target: int = 65536) -> int:
    """Raise this process's RLIMIT_NOFILE towards ``target``; returns the soft limit now in force.

    Child processes (the servers) inherit it.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max(soft, target)
    for limits in ((want, max(hard, want)), (min(want, hard), hard)):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, limits)
            break
        except (ValueError, OSError):
            continue
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _read_response(sock: socket.socket) -> int:
    """Read one HTTP/1.1 response with Content-Length; return its status code."""
    buf = b""
    while b"\r\n\r\n" not in buf:  # bounded by the socket timeout and the 64 KiB cap
        chunk = sock.recv(65536)
        if not chunk or len(buf) > 65536:
            raise ConnectionError("connection closed before the response head")
        buf += chunk
    head, _, body = buf.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    remaining = length - len(body)
    while remaining > 0:
        chunk = sock.recv(min(remaining, 65536))
        if not chunk:
            raise ConnectionError("connection closed inside the body")
        remaining -= len(chunk)
    return status


@dataclass
class IdleResult:
    requested: int
    opened: int
    still_open: int
    failures: int
    first_error: str
    rss_before_kib: int
    rss_after_kib: int
    open_seconds: float
    responsive_after: bool

    @property
    def kib_per_connection(self) -> float:
        return (
            (self.rss_after_kib - self.rss_before_kib) / self.still_open if self.still_open else 0.0
        )


def _count_open(socks: list[socket.socket]) -> int:
    """Sockets the server has not closed: not readable (an idle server sends nothing)."""
    poller = select.poll()
    for s in socks:
        poller.register(s, select.POLLIN | select.POLLHUP | select.POLLERR)
    closed = {fd for fd, _ in poller.poll(0)}
    return sum(1 for s in socks if s.fileno() not in closed)


def _one_request_ok(port: int, path: str) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5.0) as sock:
            sock.sendall(
                f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode()
            )
            return _read_response(sock) == 200
    except (OSError, ValueError, IndexError):
        return False


def measure_idle(
    server_pid: int,
    port: int,
    path: str,
    count: int,
    *,
    deadline_s: float = 180.0,
    settle_s: float = 1.0,
) -> IdleResult:
    """Open ``count`` idle keep-alive connections to ``port``; measure the server tree's RSS."""
    request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
    for _ in range(3):  # warm the server the same way for everyone
        _one_request_ok(port, path)
    time.sleep(settle_s)
    before = tree_rss_kib(server_pid)
    socks: list[socket.socket] = []
    failures = consecutive = 0
    first_error = ""
    started = time.monotonic()
    try:
        for _ in range(count):  # bounded by count, the deadline and the failure streak
            if time.monotonic() - started > deadline_s or consecutive >= MAX_CONSECUTIVE_FAILURES:
                break
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(10.0)
            try:
                sock.connect(("127.0.0.1", port))
                sock.sendall(request)
                status = _read_response(sock)
                if status != 200:
                    raise ConnectionError(f"status {status}")
            except (OSError, ValueError, IndexError) as exc:
                sock.close()
                failures += 1
                consecutive += 1
                first_error = first_error or repr(exc)
                continue
            consecutive = 0
            socks.append(sock)
        open_seconds = time.monotonic() - started
        time.sleep(settle_s)
        after = tree_rss_kib(server_pid)
        still_open = _count_open(socks)
        responsive = _one_request_ok(port, path)
        return IdleResult(
            requested=count,
            opened=len(socks),
            still_open=still_open,
            failures=failures,
            first_error=first_error,
            rss_before_kib=before,
            rss_after_kib=after,
            open_seconds=open_seconds,
            responsive_after=responsive,
        )
    finally:
        for sock in socks:
            sock.close()
