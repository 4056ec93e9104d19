"""The write workloads' load client: plain sockets, no HTTP library.

wrk cannot send a 1 GiB body from a file or count a fixed number of PUTs
to distinct paths, so the WebDAV workloads (bench/davrun.py) use this
client, run by the harness on the load CPU:

- :func:`put_file`: one PUT whose body goes out with ``os.sendfile`` from
  a file (the client spends almost no CPU on a 1 GiB body);
- :func:`put_many`: N PUTs of small bodies over C keep-alive connections
  driven by one thread with :mod:`selectors` (no GIL contention between
  client threads), each connection taking the next path when its answer
  is complete;
- :func:`request`: one request on a connection (PROPFIND), its whole
  answer read.

Answers are parsed by :class:`ResponseParser` (status, fields, a body
framed by ``Content-Length`` or chunked, RFC 9112 §6-7), so every status
is checked and a connection is reused only after a complete answer.
"""

from __future__ import annotations

import os
import selectors
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

__all__ = [
    "ClientError",
    "ManyResult",
    "Response",
    "ResponseParser",
    "connect",
    "put_file",
    "put_many",
    "request",
    "request_head",
]


class ClientError(RuntimeError):
    """The server broke the exchange (closed early, unparsable answer)."""


@dataclass
class Response:
    status: int
    headers: dict[str, str]  # lower-case names; repeated fields joined by ", "
    body: bytes

    @property
    def closes(self) -> bool:
        return "close" in self.headers.get("connection", "").lower()


def request_head(method: str, path: str, host: str, fields: Sequence[tuple[str, str]]) -> bytes:
    """An HTTP/1.1 request head (``fields`` as given, then the blank line)."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    lines += [f"{name}: {value}" for name, value in fields]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class ResponseParser:
    """Incremental HTTP/1.1 response parser: :meth:`feed` bytes, then
    :meth:`next` gives a complete :class:`Response` or None (more needed).

    ``head_only``: the answer to a HEAD (no body whatever the fields say).
    Interim 1xx answers are skipped.
    """

    def __init__(self) -> None:
        self.buf = bytearray()
        self.eof = False

    def feed(self, data: bytes) -> None:
        if data:
            self.buf += data
        else:
            self.eof = True

    def next(self) -> Response | None:
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if self.eof:
                    raise ClientError(
                        f"connection closed before a response head ({len(self.buf)} B)"
                    )
                return None
            status, headers = _parse_head(bytes(self.buf[:end]))
            if 100 <= status < 200:
                del self.buf[: end + 4]
                continue
            got = self._body(end + 4, headers)
            if got is None:
                return None
            body, used = got
            del self.buf[:used]
            return Response(status, headers, body)

    def _body(self, start: int, headers: dict[str, str]) -> tuple[bytes, int] | None:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            return self._chunked(start)
        if "content-length" in headers:
            n = int(headers["content-length"])
            if len(self.buf) - start < n:
                if self.eof:
                    raise ClientError("connection closed inside a response body")
                return None
            return bytes(self.buf[start : start + n]), start + n
        if not self.eof:  # framed by the close (RFC 9112 §6.3 item 8)
            return None
        return bytes(self.buf[start:]), len(self.buf)

    def _chunked(self, pos: int) -> tuple[bytes, int] | None:
        parts: list[bytes] = []
        buf = self.buf
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                self._more()
                return None
            size = int(bytes(buf[pos:eol]).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                # Trailer section, then the final CRLF.
                end = buf.find(b"\r\n\r\n", eol)
                if end < 0:
                    self._more()
                    return None
                return b"".join(parts), end + 4
            if len(buf) < eol + 2 + size + 2:
                self._more()
                return None
            parts.append(bytes(buf[eol + 2 : eol + 2 + size]))
            pos = eol + 2 + size + 2

    def _more(self) -> None:
        """More bytes are needed: fine unless the connection has ended."""
        if self.eof:
            raise ClientError("connection closed inside a chunked body")


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise ClientError(f"not an HTTP/1.1 status line: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise ClientError(f"bad response field line: {line[:80]!r}")
        key = name.strip().lower()
        value = value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return int(parts[1]), headers


def connect(port: int, host: str = "127.0.0.1", timeout_s: float = 120.0) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=timeout_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def read_response(sock: socket.socket, parser: ResponseParser) -> Response:
    """Read from ``sock`` until ``parser`` has a complete answer."""
    while (resp := parser.next()) is None:
        parser.feed(sock.recv(1 << 18))
    return resp


def request(
    sock: socket.socket,
    port: int,
    method: str,
    path: str,
    fields: Sequence[tuple[str, str]] = (),
    body: bytes = b"",
) -> Response:
    """One request on ``sock`` (keep-alive), its whole answer."""
    all_fields = (
        [*fields, ("Content-Length", str(len(body)))] if body or method != "GET" else fields
    )
    sock.sendall(request_head(method, path, f"127.0.0.1:{port}", all_fields) + body)
    return read_response(sock, ResponseParser())


def put_file(port: int, path: str, source: str) -> tuple[Response, float]:
    """PUT ``source``'s bytes at ``path`` on a fresh connection, the body
    sent with ``socket.sendfile`` (``os.sendfile``); the answer and the seconds from the first
    byte sent to the answer read."""
    size = os.path.getsize(source)
    with connect(port, timeout_s=600.0) as sock, open(source, "rb") as f:
        head = request_head(
            "PUT",
            path,
            f"127.0.0.1:{port}",
            [("Content-Type", "application/octet-stream"), ("Content-Length", str(size))],
        )
        started = time.perf_counter()
        sock.sendall(head)
        # socket.sendfile: os.sendfile, waiting for the socket when it is full.
        sent = sock.sendfile(f, 0, size)
        if sent != size:
            raise ClientError(f"the server stopped reading at {sent} of {size} bytes")
        resp = read_response(sock, ResponseParser())
        return resp, time.perf_counter() - started


@dataclass
class ManyResult:
    seconds: float
    statuses: dict[int, int] = field(default_factory=dict)
    reconnects: int = 0

    @property
    def requests(self) -> int:
        return sum(self.statuses.values())


@dataclass
class _Conn:
    sock: socket.socket
    parser: ResponseParser
    out: memoryview
    busy: bool = False


def put_many(
    port: int,
    paths: Sequence[str],
    body_of: Callable[[int], bytes],
    connections: int,
    timeout_s: float = 120.0,
) -> ManyResult:
    """PUT ``body_of(i)`` at ``paths[i]`` for every i, over ``connections``
    keep-alive connections at once (one request in flight on each); a
    connection the server closes (``Connection: close`` or EOF after an
    answer) is replaced.  Raises :class:`ClientError` past ``timeout_s``."""
    sel = selectors.DefaultSelector()
    host = f"127.0.0.1:{port}"
    todo = iter(range(len(paths)))
    result = ManyResult(0.0)
    deadline = time.monotonic() + timeout_s
    conns: list[_Conn] = []

    def start(conn: _Conn) -> bool:
        i = next(todo, None)
        if i is None:
            return False
        body = body_of(i)
        head = request_head(
            "PUT",
            paths[i],
            host,
            [("Content-Type", "application/octet-stream"), ("Content-Length", str(len(body)))],
        )
        conn.out, conn.busy = memoryview(head + body), True
        sel.modify(conn.sock, selectors.EVENT_WRITE, conn)
        return True

    def fresh() -> _Conn:
        sock = connect(port)
        sock.setblocking(False)
        conn = _Conn(sock, ResponseParser(), memoryview(b""))
        sel.register(sock, selectors.EVENT_READ, conn)
        conns.append(conn)
        return conn

    started = time.perf_counter()
    try:
        for _ in range(min(connections, len(paths))):
            start(fresh())
        while any(c.busy for c in conns):
            if time.monotonic() > deadline:
                raise ClientError(f"put_many: not done within {timeout_s:.0f}s")
            for key, events in sel.select(timeout=1.0):
                conn: _Conn = key.data
                if events & selectors.EVENT_WRITE:
                    n = conn.sock.send(conn.out)
                    conn.out = conn.out[n:]
                    if not conn.out:
                        sel.modify(conn.sock, selectors.EVENT_READ, conn)
                    continue
                data = conn.sock.recv(65536)
                conn.parser.feed(data)
                resp = conn.parser.next()
                if resp is None:
                    continue
                conn.busy = False
                result.statuses[resp.status] = result.statuses.get(resp.status, 0) + 1
                if resp.closes or conn.parser.eof:
                    sel.unregister(conn.sock)
                    conn.sock.close()
                    conns.remove(conn)
                    conn = fresh()
                    result.reconnects += 1
                start(conn)
        result.seconds = time.perf_counter() - started
        return result
    finally:
        for c in conns:
            c.sock.close()
        sel.close()
