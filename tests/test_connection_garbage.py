"""A connection that ends leaves no cyclic garbage (issue 47).

serverio freezes what the collector tracks (serverio.observe.collector)
while connections are open; a frozen cycle is never collected, so the
objects of a connection must be freed by reference counting when it
ends, or every freeze under load would keep the connections open at that
moment for the life of the process (an HTTP/2 connection's output
buffers with them: h2load runs of 64 KiB at 2,048 streams left RSS 115,
211, then 266 MiB after each run before the fix).  The clients are other
processes (h2load, or a small Python client for the endings h2load
cannot make: the server's keep-alive close, a failed TLS handshake, an
event stream's client leaving), so everything the collector finds here
is the server's; the types it found are in the failure message.
"""

from __future__ import annotations

import functools
import gc
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import trio

from serverio import Server

from .conftest import make_config, running_server, wait_until

REQUESTS = 64


def _found() -> tuple[int, Counter[str]]:
    """Unreachable objects the collector finds now, and their types."""
    gc.set_debug(gc.DEBUG_SAVEALL)  # keep what it finds, to name it
    try:
        found = gc.collect()
        kinds = Counter(type(o).__name__ for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    return found, kinds


async def _garbage_after_loads(
    srv: Server, argv: list[str], *, h2load: bool = True
) -> tuple[int, Counter[str]]:
    """Run the client ``argv`` twice (the first warms what is made once:
    caches, first-use state), the collector off during the second; what
    it finds once the connections of the second ended.  ``h2load``: the
    client is h2load, whose every request must have succeeded."""
    for run in ("warm-up", "measured"):
        if run == "measured":
            gc.collect()
            gc.disable()
        try:
            done = await trio.run_process(argv, capture_stdout=True)
            if h2load:
                assert f"{REQUESTS} succeeded".encode() in done.stdout, done.stdout[-400:]
            await wait_until(lambda: not srv.admission.connections, limit=10)
            if run == "measured":
                return _found()
        finally:
            gc.enable()
    raise AssertionError("unreachable")


def _named(kinds: Counter[str]) -> str:
    return ", ".join(f"{kind} {n}" for kind, n in kinds.most_common())


@pytest.mark.parametrize(
    ("protocol", "tls"), [("h2", False), ("h1", False), ("h2", True), ("h1", True)]
)
async def test_ended_connections_leave_no_cyclic_garbage(
    root: Path, cert_files: tuple[Path, Path], protocol: str, tls: bool
) -> None:
    if shutil.which("h2load") is None:
        pytest.skip("h2load is not installed (nghttp2-client)")
    if tls:
        certfile, keyfile = cert_files
        cfg = make_config(root, certfile=str(certfile), keyfile=str(keyfile))
    else:
        cfg = make_config(root)
    async with running_server(cfg) as (srv, port):
        scheme = "https" if tls else "http"
        argv = ["h2load", "-n", str(REQUESTS), "-c", "8", "-m", "4"]
        argv += ["--h1"] if protocol == "h1" else []
        argv.append(f"{scheme}://127.0.0.1:{port}/hello.txt")
        found, kinds = await _garbage_after_loads(srv, argv)
    assert srv.stats.h2.connections == (16 if protocol == "h2" else 0)
    assert found == 0, _named(kinds)


async def test_proxied_exchanges_leave_no_cyclic_garbage(root: Path) -> None:
    """The reverse proxy's side: client connections that end, and the
    upstream connections of its pool (an upstream in a process of its
    own, serverio serving the same files)."""
    if shutil.which("h2load") is None:
        pytest.skip("h2load is not installed (nghttp2-client)")
    argv = [sys.executable, "-m", "serverio", "0", "-b", "127.0.0.1", "-d", str(root)]
    async with trio.open_nursery() as nursery:
        upstream = await nursery.start(
            functools.partial(trio.run_process, argv, stdout=subprocess.PIPE, check=False)
        )
        try:
            assert upstream.stdout is not None
            line = b""
            with trio.fail_after(20):
                while b"http://" not in line:
                    line += await upstream.stdout.receive_some(4096)
            up = int(line.split(b"http://127.0.0.1:")[1].split(b"/")[0])
            cfg = make_config(root, proxy=(f"/=http://127.0.0.1:{up}",))
            async with running_server(cfg) as (srv, port):
                get = ["h2load", "--h1", "-n", str(REQUESTS), "-c", "8", "-m", "1"]
                get.append(f"http://127.0.0.1:{port}/hello.txt")
                found, kinds = await _garbage_after_loads(srv, get)
                assert srv.stats.proxy.requests >= 2 * REQUESTS
        finally:
            upstream.terminate()
    assert found == 0, _named(kinds)


# Other ways a connection ends, driven by a client in a process of its own
# (argv: mode, port, connections): the server closes idle keep-alive
# connections at their deadline; a plain-HTTP client meets a failed TLS
# handshake; an event stream's client leaves after the stream's head.
_CLIENT = r"""
import socket, sys
mode, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
for s in socks:
    s.settimeout(20)
    path = "/.serverio/events" if mode == "events" else "/hello.txt"
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
for s in socks:
    got = b""
    while b"\r\n\r\n" not in got:
        data = s.recv(65536)
        if not data:
            break
        got += data
    if mode == "events":
        assert b"text/event-stream" in got, got  # a stream, left after its head
    elif mode == "idle":
        assert got.startswith(b"HTTP/1.1 200 "), got
        while s.recv(65536):  # the rest, then the server's close at its deadline
            pass
    s.close()
"""


@pytest.mark.parametrize("mode", ["idle", "not-tls", "events"])
async def test_other_endings_leave_no_cyclic_garbage(
    root: Path, cert_files: tuple[Path, Path], mode: str
) -> None:
    if mode == "not-tls":
        certfile, keyfile = cert_files
        cfg = make_config(root, certfile=str(certfile), keyfile=str(keyfile))
    else:
        cfg = make_config(root, keepalive_timeout=0.3, watch=mode == "events")
    async with running_server(cfg) as (srv, port):
        argv = [sys.executable, "-c", _CLIENT, mode, str(port), "8"]
        found, kinds = await _garbage_after_loads(srv, argv, h2load=False)
    if mode == "idle":
        assert srv.stats.timeouts.keepalive == 16
    elif mode == "not-tls":
        assert srv.stats.conns.tls_handshake_failures == 16
    assert found == 0, _named(kinds)
