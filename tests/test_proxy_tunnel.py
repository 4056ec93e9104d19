"""WebSocket / Upgrade tunnels through the reverse proxy, end to end: a real
serverio (127.0.0.1, port 0) in front of a real upstream, uvicorn serving
the raw ASGI app of tests/asgi_upstream.py (its websocket echo), with a
wsproto client; plain HTTP/1.1 and TLS on the front."""

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
from serverio.ops.metrics import render, snapshot
from serverio.proxy.service import ProxyService
from tests.asgi_upstream import uvicorn_upstream
from tests.conftest import connect, make_config, open_fd_count, running_server, wait_until
from tests.wsclient import Rejected, WSClient, at_eof, masked_text_frame


@pytest.fixture(scope="module")
def asgi_port() -> Iterator[int]:
    with uvicorn_upstream() as port:
        yield port


def _proxy(srv: Server) -> ProxyService:
    proxy = srv.services.proxy
    assert proxy is not None
    return proxy


@asynccontextmanager
async def front(root: Path, port: int, **kw: object) -> AsyncIterator[tuple[Server, int]]:
    cfg = make_config(root, proxy=(f"/api=http://127.0.0.1:{port}",), **kw)
    async with running_server(cfg) as (srv, sport):
        yield srv, sport


async def open_ws(port: int, target: str = "/api/ws") -> WSClient:
    client = await connect(port)
    ws = WSClient(client.stream)
    with trio.fail_after(10):
        await ws.handshake(target)
    return ws


async def test_a_websocket_echoes_through_the_proxy(root: Path, asgi_port: int) -> None:
    async with front(root, asgi_port) as (srv, port):
        ws = await open_ws(port)
        assert ws.accepted is not None
        # The upstream's 101 came through with its own fields, and Via.
        fields = {k.lower(): v for k, v in ws.accepted.extra_headers}
        assert fields[b"via"] == b"1.1 serverio"
        assert _proxy(srv).tunnels.open == 1
        with trio.fail_after(10):
            for i in range(20):
                await ws.send(f"hello {i}")
                assert await ws.receive() == f"hello {i}"
            blob = os.urandom(200_000)  # several reads each way
            await ws.send(blob)
            assert await ws.receive() == blob
            await ws.close()
            assert await ws.receive() is None  # the upstream's Close came back
            assert ws.closed is not None and ws.closed.code == 1000
            assert await at_eof(ws.stream)  # and then serverio closed the connection
        await wait_until(lambda: _proxy(srv).tunnels.open == 0)
        stats = srv.stats.proxy
        assert stats.tunnels == 1
        assert stats.bytes_up > 200_000 and stats.bytes_down > 200_000
        pool = _proxy(srv).pools["/api"]
        assert pool.inflight == 0 and pool.opened == 0  # the slot back, the socket closed
        await ws.stream.aclose()


async def test_bytes_sent_with_the_handshake_reach_the_upstream(root: Path, asgi_port: int) -> None:
    """A frame in the same write as the request head is read past the head
    by serverio (h11 keeps it in ``trailing_data``) and delivered first."""
    async with front(root, asgi_port) as (_, port):
        client = await connect(port)
        ws = WSClient(client.stream)
        with trio.fail_after(10):
            await ws.handshake("/api/ws", early=masked_text_frame("eager"))
            assert await ws.receive() == "eager"
            await ws.send("then")
            assert await ws.receive() == "then"
        await client.stream.aclose()


async def test_the_client_hanging_up_closes_the_upstream_side(root: Path, asgi_port: int) -> None:
    async with front(root, asgi_port) as (srv, port):
        before = open_fd_count()
        ws = await open_ws(port)
        await ws.send("x")
        with trio.fail_after(10):
            assert await ws.receive() == "x"
        await ws.stream.aclose()  # no Close frame: just gone
        await wait_until(lambda: _proxy(srv).tunnels.open == 0)
        pool = _proxy(srv).pools["/api"]
        await wait_until(lambda: pool.inflight == 0 and pool.opened == 0)
        await wait_until(lambda: open_fd_count() <= before)  # both sockets closed, nothing leaked


async def test_the_upstream_closing_ends_the_tunnel(root: Path, asgi_port: int) -> None:
    async with front(root, asgi_port) as (srv, port):
        ws = await open_ws(port, "/api/ws?close=1")
        with trio.fail_after(10):
            await ws.send("once")
            assert await ws.receive() == "once"
            assert await ws.receive() is None  # its Close frame ...
            assert await at_eof(ws.stream)  # ... and the end of both connections
        await wait_until(lambda: _proxy(srv).tunnels.open == 0)
        await ws.stream.aclose()


async def test_an_upstream_that_declines_is_a_normal_response_then_close(
    root: Path, asgi_port: int
) -> None:
    async with front(root, asgi_port) as (srv, port):
        client = await connect(port)
        ws = WSClient(client.stream)
        with trio.fail_after(10), pytest.raises(Rejected) as got:
            await ws.handshake("/api/nows")  # the app closes before accepting: 403
        assert got.value.status == 403
        with trio.fail_after(10):
            assert await at_eof(client.stream)  # not kept: the client asked to switch
        assert srv.stats.proxy.tunnels == 0
        pool = _proxy(srv).pools["/api"]
        await wait_until(lambda: pool.inflight == 0 and not pool.idle)  # never pooled
        await client.stream.aclose()


async def test_a_plain_request_is_still_stripped_of_upgrade(root: Path, asgi_port: int) -> None:
    """Connection: Upgrade only survives with an Upgrade field (a tunnel);
    HTTP/1.0 cannot switch (RFC 9110 §7.8), so its fields are dropped."""
    async with front(root, asgi_port) as (_, port):
        client = await connect(port)
        await client.send_raw(
            b"GET /api/json HTTP/1.0\r\nHost: t\r\n"
            b"Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
        )
        with trio.fail_after(10):
            r = await client.read_response()
        assert r.status == 200
        seen = {k.lower(): v for k, v in json.loads(r.body)["headers"]}
        assert "upgrade" not in seen and "connection" not in seen
        await client.stream.aclose()


async def test_a_tunnel_gets_the_shutdown_timeout_then_is_closed(
    root: Path, asgi_port: int
) -> None:
    cfg = make_config(
        root, proxy=(f"/api=http://127.0.0.1:{asgi_port}",), shutdown_timeout=1.0
    ).evolve(host="127.0.0.1", port=0)
    srv = Server(cfg)
    async with trio.open_nursery() as nursery:
        await nursery.start(srv.serve)
        ws = await open_ws(srv.addresses()[0][1])
        srv.shutdown()
        start = trio.current_time()
        with trio.fail_after(10):
            await ws.send("still here")  # draining: the tunnel is in flight, not cut
            assert await ws.receive() == "still here"
            assert await at_eof(ws.stream)  # then cut, at the shutdown timeout
        waited = trio.current_time() - start
        assert 0.8 <= waited < 5, waited
        await ws.stream.aclose()
    assert _proxy(srv).tunnels.open == 0
    assert _proxy(srv).pools["/api"].opened == 0


async def test_a_websocket_over_tls_on_the_front(
    root: Path, asgi_port: int, ca: trustme.CA, cert_files: tuple[Path, Path]
) -> None:
    certfile, keyfile = cert_files
    async with front(root, asgi_port, certfile=str(certfile), keyfile=str(keyfile)) as (srv, port):
        ctx = ssl.create_default_context()
        ca.configure_trust(ctx)
        ctx.set_alpn_protocols(["http/1.1"])
        tcp = await trio.open_tcp_stream("127.0.0.1", port)
        stream = trio.SSLStream(tcp, ctx, server_hostname="127.0.0.1", https_compatible=True)
        ws = WSClient(stream)
        with trio.fail_after(10):
            await ws.handshake("/api/ws")
            for i in range(5):
                await ws.send(b"tls %d" % i)
                assert await ws.receive() == b"tls %d" % i
            await ws.close()
            assert await ws.receive() is None
        await wait_until(lambda: _proxy(srv).tunnels.open == 0)
        await trio.aclose_forcefully(stream)


async def test_metrics_show_tunnels_open_and_opened(root: Path, asgi_port: int) -> None:
    async with front(root, asgi_port) as (srv, port):
        ws = await open_ws(port)
        text = render(snapshot(srv))
        assert "serverio_proxy_tunnels_open 1" in text
        assert "serverio_proxy_tunnels_total 1" in text
        await ws.close()
        with trio.fail_after(10):
            assert await ws.receive() is None
        await wait_until(lambda: _proxy(srv).tunnels.open == 0)
        assert "serverio_proxy_tunnels_open 0" in render(snapshot(srv))
        await ws.stream.aclose()


async def test_with_the_fallback_a_websocket_goes_upstream_even_where_a_file_is(
    root: Path, asgi_port: int
) -> None:
    """The dev-server pattern (--proxy-fallback): a hot-reload socket may sit
    at a path the files answer (vite's is at the base, ``/``); a request
    asking to switch protocols is the fallback's, a plain GET the file's."""
    (root / "api").mkdir()
    (root / "api" / "ws").write_text("a file")
    cfg = make_config(root, proxy_fallback=f"http://127.0.0.1:{asgi_port}")
    async with running_server(cfg) as (srv, port):
        client = await connect(port)
        with trio.fail_after(10):
            assert (await client.get("/api/ws")).body == b"a file"
        await client.stream.aclose()
        ws = await open_ws(port, "/api/ws")
        with trio.fail_after(10):
            await ws.send("through the fallback")
            assert await ws.receive() == "through the fallback"
        assert srv.stats.proxy.tunnels == 1
        await ws.stream.aclose()
