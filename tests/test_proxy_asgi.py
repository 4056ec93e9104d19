"""The reverse proxy in front of a real upstream: uvicorn serving the raw
ASGI app of tests/asgi_upstream.py (JSON, streaming, slow, SSE, early
answers), over plain HTTP/1.1, HTTP/2 from the client (h2c prior
knowledge, tests/h2client.py) and TLS on the front; and request bodies
streamed up with a bounded memory."""

from __future__ import annotations

import json
import os
import ssl
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
import trustme

from serverio import Server
from tests.asgi_upstream import uvicorn_upstream
from tests.conftest import HTTPClient, Response, connect, make_config, running_server, wait_until
from tests.h2client import H2Client

MiB = 1 << 20


@pytest.fixture(scope="module")
def asgi_port() -> Iterator[int]:
    with uvicorn_upstream() as port:
        yield port


@asynccontextmanager
async def front(root: Path, port: int, **kw: object) -> AsyncIterator[tuple[Server, int]]:
    cfg = make_config(root, proxy=(f"/api=http://127.0.0.1:{port}",), **kw)
    async with running_server(cfg) as (srv, sport):
        yield srv, sport


def _fields(body: bytes | bytearray) -> dict[str, str]:
    return {k: v for k, v in json.loads(body)["headers"]}


async def test_json_stream_slow_and_sse_over_http11(root: Path, asgi_port: int) -> None:
    async with front(root, asgi_port) as (_, port):
        client = await connect(port)
        with trio.fail_after(10):
            r = await client.get("/api/json?x=1")
            assert r.status == 200 and r.header("content-type") == "application/json"
            doc = json.loads(r.body)
            assert doc["path"] == "/api/json" and doc["query"] == "x=1"
            assert _fields(r.body)["via"] == "1.1 serverio"
            r = await client.get("/api/stream?n=5&size=3000")
            assert r.status == 200 and r.header("transfer-encoding") == "chunked"
            assert r.body == b"".join(bytes([97 + i]) * 3000 for i in range(5))
            r = await client.get("/api/slow?delay=0.2")
            assert r.status == 200 and r.body == b"slow"
            r = await client.get("/api/sse?n=3")
            assert r.header("content-type") == "text/event-stream"
            assert r.body == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"
            r = await client.get("/api/missing")
            assert r.status == 404 and r.body == b"asgi 404"
        await client.stream.aclose()


async def test_json_and_a_streamed_upload_over_http2(root: Path, asgi_port: int) -> None:
    async with front(root, asgi_port, max_body_size=8 * MiB) as (_, port):
        h2c = H2Client(await trio.open_tcp_stream("127.0.0.1", port))
        await h2c.start()
        with trio.fail_after(10):
            r = await h2c.get("/api/json")
            assert r.status == 200 and json.loads(r.body)["method"] == "GET"
            # DATA without a content-length: an HTTP/1.1 chunked body upstream.
            sid = h2c.request("/api/json", "POST", end_stream=False)
            blob = b"u" * 300_000
            sent = 0
            while sent < len(blob):
                window = min(h2c.conn.local_flow_control_window(sid), 16384)
                if window <= 0:
                    await h2c.pump()  # wait for WINDOW_UPDATE
                    continue
                h2c.conn.send_data(sid, blob[sent : sent + window])
                sent += window
                await h2c.flush()
            h2c.conn.end_stream(sid)
            await h2c.flush()
            (r,) = await h2c.wait(sid)
        assert r.status == 200, r
        doc = json.loads(r.body)
        assert doc["size"] == len(blob)
        assert _fields(r.body)["transfer-encoding"] == "chunked"
        await h2c.stream.aclose()


async def test_json_behind_tls_on_the_front(
    root: Path, asgi_port: int, ca: trustme.CA, cert_files: tuple[Path, Path]
) -> None:
    certfile, keyfile = cert_files
    async with front(root, asgi_port, certfile=str(certfile), keyfile=str(keyfile)) as (_, port):
        ctx = ssl.create_default_context()
        ca.configure_trust(ctx)
        tcp = await trio.open_tcp_stream("127.0.0.1", port)
        stream = trio.SSLStream(tcp, ctx, server_hostname="127.0.0.1", https_compatible=True)
        client = HTTPClient(stream)
        with trio.fail_after(10):
            r = await client.get("/api/json")
        assert r.status == 200
        fields = _fields(r.body)
        assert fields["x-forwarded-proto"] == "https"
        assert fields["forwarded"].endswith("proto=https")
        await trio.aclose_forcefully(stream)
        # HTTP/2 over TLS (ALPN h2) to the same upstream.
        ctx.set_alpn_protocols(["h2"])
        tcp = await trio.open_tcp_stream("127.0.0.1", port)
        stream = trio.SSLStream(tcp, ctx, server_hostname="127.0.0.1", https_compatible=True)
        await stream.do_handshake()
        assert stream.selected_alpn_protocol() == "h2"
        h2 = H2Client(stream)
        await h2.start()
        with trio.fail_after(10):
            got = await h2.get("/api/stream?n=3&size=20000")
        assert got.status == 200
        assert got.body == b"".join(bytes([97 + i]) * 20000 for i in range(3))
        await trio.aclose_forcefully(stream)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def test_a_100_mib_upload_streams_up_in_bounded_memory(root: Path, asgi_port: int) -> None:
    """The content goes up a chunk at a time as the upstream takes it: the
    server's (this process's) RSS does not grow with the body."""
    total = 100 * MiB
    piece = b"z" * MiB  # one buffer, sent 100 times
    async with front(root, asgi_port, max_body_size=200 * MiB) as (srv, port):
        client = await connect(port)
        with trio.fail_after(10):
            assert (await client.get("/api/json")).status == 200  # warm everything once
        base = peak = _rss()
        done = trio.Event()

        async def watch() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, _rss())
                await trio.sleep(0.005)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            with trio.fail_after(60):
                head = f"POST /api/json HTTP/1.1\r\nHost: t\r\nContent-Length: {total}\r\n\r\n"
                await client.send_raw(head.encode())
                for _ in range(total // MiB):
                    await client.stream.send_all(piece)
                r = await client.read_response()
            done.set()
        assert r.status == 200, r
        assert json.loads(r.body)["size"] == total
        assert srv.stats.proxy.bytes_up >= total
        growth = peak - base
        assert growth < 8 * MiB, f"RSS grew by {growth / MiB:.1f} MiB"
        await client.stream.aclose()


async def test_an_early_answer_stops_the_upload_and_is_passed_on(
    root: Path, asgi_port: int
) -> None:
    async with front(root, asgi_port, max_body_size=64 * MiB) as (srv, port):
        client = await connect(port)
        total = 32 * MiB
        head = f"POST /api/early HTTP/1.1\r\nHost: t\r\nContent-Length: {total}\r\n\r\n"
        got: list[Response] = []

        async def upload() -> None:
            try:
                await client.send_raw(head.encode())
                for _ in range(total // MiB):
                    await client.stream.send_all(b"e" * MiB)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # serverio may close once it has answered

        async with trio.open_nursery() as nursery:
            nursery.start_soon(upload)
            with trio.fail_after(20):
                got.append(await client.read_response())
            nursery.cancel_scope.cancel()
        r = got[0]
        assert r.status == 413 and r.body == b"too large, said early"
        # Far less than the body went up: the sending stopped at the answer.
        assert srv.stats.proxy.bytes_up < total
        pool = srv.services.proxy.pools["/api"] if srv.services.proxy else None
        assert pool is not None
        await wait_until(lambda: pool.inflight == 0 and not pool.idle)  # never pooled
        await client.stream.aclose()
