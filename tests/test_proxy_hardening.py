"""The reverse proxy's round-4 hardening (issue 41): an upstream answer with
both Content-Length and Transfer-Encoding, credentials serverio consumed,
X-Real-IP, the case rule of proxied paths; end to end, a real serverio in
front of tests/proxy_upstream.py on loopback port 0, HTTP/1.1 and HTTP/2
clients.  The tunnel budget's tests are in tests/test_proxy_tunnel_budget.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from serverio import Server
from tests.conftest import HTTPClient, connect, make_config, running_server
from tests.h2client import h2_memory
from tests.proxy_upstream import Upstream, upstream


@asynccontextmanager
async def proxied(root: Path, **kw: object) -> AsyncIterator[tuple[Upstream, Server, HTTPClient]]:
    async with upstream() as up:
        cfg = make_config(root, proxy=(f"/api=http://127.0.0.1:{up.port}",), **kw)
        async with running_server(cfg) as (srv, port):
            client = await connect(port)
            try:
                yield up, srv, client
            finally:
                await client.stream.aclose()


# ------------------------------------------ Content-Length with Transfer-Encoding


async def test_both_framings_from_the_upstream_are_a_502_and_the_connection_is_closed(
    root: Path,
) -> None:
    """RFC 9112 §6.3 item 3: such a response "ought to be handled as an
    error"; before, it was passed on with the upstream's Content-Length (5)
    and the de-chunked body (2 bytes), then cut."""
    async with proxied(root) as (up, srv, client):
        r = await client.get("/api/clte")  # a GET: the fast reader defers to h11
        assert r.status == 502 and b"ab" not in r.body
        assert r.header("content-length") == str(len(r.body))
        assert srv.stats.proxy.errors_framing == 1
        await client.send_raw(  # with content: h11 reads the answer from the start
            b"POST /api/clte HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello"
        )
        r = await client.read_response()
        assert r.status == 502 and srv.stats.proxy.errors_framing == 2
        r = await client.get("/api/json")  # the client's connection serves on
        assert r.status == 200
    # Never reused: each /clte answer's connection saw no further request.
    assert up.after_clte == 0 and up.connections == 3


async def test_both_framings_are_a_502_for_an_http2_client(root: Path) -> None:
    async with upstream() as up:
        cfg = make_config(root, proxy=(f"/api=http://127.0.0.1:{up.port}",))
        async with h2_memory(cfg) as (client, srv, _):
            try:
                r = await client.get("/api/clte")
                assert r.status == 502 and r.ended and b"ab" not in r.body
                assert r.headers["content-length"] == str(len(r.body))
                r = await client.get("/api/json")
                assert r.status == 200
            finally:
                assert srv.env.handler.proxy is not None
                srv.env.handler.proxy.close_idle()  # type: ignore[attr-defined]
    assert up.after_clte == 0 and up.connections == 2
