"""A real upstream for the reverse-proxy tests: a raw ASGI app under uvicorn.

Run by :func:`uvicorn_upstream` in a child process (uvicorn is asyncio;
the tests are trio) on a socket the test binds on 127.0.0.1 port 0 and
hands over with ``--fd``, so the port is known before the child starts
and nothing races for it.  Routes (after the ``/api`` prefix, which the
proxy passes on):

* ``/api/json``: 200, JSON: method, path, query, the request's fields and
  the size of its content;
* ``/api/stream?n=N&size=S``: 200 without a length (uvicorn frames it
  chunked), N chunks of S bytes;
* ``/api/slow?delay=D``: 200 ``slow`` after D seconds;
* ``/api/sse?n=N``: ``text/event-stream``, N events ``data: i``;
* ``/api/early``: 413 at once, before reading any of the request's
  content (an upstream that answers early);
* ``/api/ws``: a WebSocket that echoes every message (text and bytes)
  and closes when the client does; ``/api/ws?close=1`` closes itself
  after its first echo;
* anything else: 404.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qs

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


async def _body(receive: Receive) -> int:
    size = 0
    while True:
        msg = await receive()
        size += len(msg.get("body", b""))
        if not msg.get("more_body"):
            return size


async def _plain(send: Send, status: int, body: bytes, ctype: bytes = b"text/plain") -> None:
    headers = [(b"content-type", ctype), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _http(scope: Scope, receive: Receive, send: Send) -> None:
    path = scope["path"]
    query = {k: v[0] for k, v in parse_qs(scope["query_string"].decode()).items()}
    if path == "/api/json":
        size = await _body(receive)
        doc = {
            "method": scope["method"],
            "path": path,
            "query": scope["query_string"].decode(),
            "headers": [[k.decode(), v.decode()] for k, v in scope["headers"]],
            "size": size,
        }
        await _plain(send, 200, json.dumps(doc).encode(), b"application/json")
        return
    if path == "/api/early":
        await _plain(send, 413, b"too large, said early")
        return
    await _body(receive)
    if path == "/api/stream":
        n, size = int(query.get("n", "4")), int(query.get("size", "1000"))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for i in range(n):
            chunk = bytes([97 + i % 26]) * size
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    elif path == "/api/slow":
        await asyncio.sleep(float(query.get("delay", "0.2")))
        await _plain(send, 200, b"slow")
    elif path == "/api/sse":
        head = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
        await send({"type": "http.response.start", "status": 200, "headers": head})
        for i in range(int(query.get("n", "3"))):
            event = b"data: %d\n\n" % i
            await send({"type": "http.response.body", "body": event, "more_body": True})
            await asyncio.sleep(0.01)
        await send({"type": "http.response.body", "body": b""})
    else:
        await _plain(send, 404, b"asgi 404")


async def _ws(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["path"] != "/api/ws":
        await send({"type": "websocket.close", "code": 1008})
        return
    close_after_one = b"close=1" in scope["query_string"]
    msg = await receive()
    assert msg["type"] == "websocket.connect"
    await send({"type": "websocket.accept"})
    while True:
        msg = await receive()
        if msg["type"] == "websocket.disconnect":
            return
        if msg.get("text") is not None:
            await send({"type": "websocket.send", "text": msg["text"]})
        else:
            await send({"type": "websocket.send", "bytes": msg.get("bytes") or b""})
        if close_after_one:
            await send({"type": "websocket.close", "code": 1000})
            return


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """The ASGI application (``tests.asgi_upstream:app``)."""
    if scope["type"] == "http":
        await _http(scope, receive, send)
    elif scope["type"] == "websocket":
        await _ws(scope, receive, send)
    elif scope["type"] == "lifespan":
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return


@contextmanager
def uvicorn_upstream(limit: float = 20.0) -> Iterator[int]:
    """uvicorn serving :func:`app` on 127.0.0.1, port 0 (the port is
    yielded); h11 and wsproto, no optional speed-ups.  Bounded: the child
    must answer within ``limit`` seconds, and is stopped (then killed) at
    the end."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    port = sock.getsockname()[1]
    fd = sock.fileno()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": here + os.pathsep + os.environ.get("PYTHONPATH", "")}
    args = [sys.executable, "-m", "uvicorn", "tests.asgi_upstream:app", "--fd", str(fd)]
    args += ["--http", "h11", "--ws", "wsproto", "--log-level", "warning", "--lifespan", "on"]
    proc = subprocess.Popen(args, pass_fds=(fd,), env=env, cwd=here)
    try:
        deadline = time.monotonic() + limit
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"uvicorn exited with {proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as probe:
                    probe.sendall(b"GET /api/json HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
                    if probe.recv(12).startswith(b"HTTP/1.1 200"):
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not answer in time")
            time.sleep(0.05)
        sock.close()  # the child has its own copy
        yield port
    finally:
        sock.close()
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
