"""The reverse proxy for HTTP/2 clients (h2c prior knowledge over memory
streams) in front of a real HTTP/1.1 upstream on loopback port 0."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio
from h2.errors import ErrorCodes

from serverio import AccessLog, Server
from serverio.config import Config
from serverio.proxy.client import Pool
from serverio.proxy.service import ProxyService
from tests.conftest import make_config, wait_until
from tests.h2client import h2_memory
from tests.proxy_upstream import upstream


# h2_memory runs no Server.serve (whose end closes the pooled upstream
# connections), so each test closes them itself.
@asynccontextmanager
async def _closing(srv: Server) -> AsyncIterator[None]:
    try:
        yield
    finally:
        assert srv.env.handler.proxy is not None
        srv.env.handler.proxy.close_idle()  # type: ignore[attr-defined]


async def test_an_h2_get_goes_upstream_as_http11(root: Path) -> None:
    async with upstream() as up:
        cfg = make_config(root, proxy=(f"/api=http://127.0.0.1:{up.port}",))
        async with h2_memory(cfg) as (client, srv, _), _closing(srv):
            r = await client.get("/api/json?a=1", [("cookie", "a=1"), ("cookie", "b=2")])
            assert r.status == 200 and json.loads(r.body)["target"] == "/api/json?a=1"
            assert "connection" not in r.headers and "keep-alive" not in r.headers
            assert r.headers["via"] == "1.1 serverio"
            assert r.headers["x-content-type-options"] == "nosniff"  # as over HTTP/1.1
            seen = up.seen[0]
            assert seen.header("host") == "localhost"  # :authority
            assert seen.header("cookie") == "a=1; b=2"  # RFC 9113 §8.2.3
            r = await client.get("/api/stream?n=10&size=10000")
            assert r.status == 200 and len(r.body) == 100_000 and r.ended
            assert r.body[-10000:] == b"J" * 10000
            assert srv.stats.proxy.reuses == 1


async def test_h2_data_becomes_an_http11_body(root: Path) -> None:
    async with upstream() as up:
        cfg = make_config(root, proxy=(f"/api=http://127.0.0.1:{up.port}",))
        async with h2_memory(cfg) as (client, srv, _), _closing(srv):
            sid = client.request("/api/echo", "POST", end_stream=False)
            client.conn.send_data(sid, b"hello ", end_stream=False)
            client.conn.send_data(sid, b"world", end_stream=True)
            await client.flush()
            (r,) = await client.wait(sid)
            assert r.status == 200 and json.loads(r.body)["size"] == 11
            sid = client.request("/api/echo", "PUT", [("content-length", "3")], end_stream=False)
            client.conn.send_data(sid, b"abc", end_stream=True)
            await client.flush()
            (r,) = await client.wait(sid)
            assert r.status == 200
    assert up.seen[0].body == b"hello world"
    assert up.seen[0].header("transfer-encoding") == "chunked"
    assert up.seen[1].body == b"abc" and up.seen[1].header("content-length") == "3"


async def test_rst_stream_closes_the_upstream_connection(root: Path) -> None:
    async with upstream() as up:
        cfg = make_config(root, proxy=(f"/api=http://127.0.0.1:{up.port}",))
        async with h2_memory(cfg) as (client, srv, _), _closing(srv):
            sid = client.request("/api/never")
            await client.flush()
            with trio.fail_after(5):
                await up.started.wait()
            client.conn.reset_stream(sid, ErrorCodes.CANCEL)
            await client.flush()
            with trio.fail_after(5):
                while up.closed_by_peer == 0:  # noqa: ASYNC110 - state the peer owns
                    await trio.sleep(0.01)
            pool = next(iter(srv.env.handler.proxy.pools.values()))  # type: ignore[union-attr]
            assert pool.opened == 0 and pool.inflight == 0
            assert srv.stats.proxy.cancelled == 1
            r = await client.get("/api/json")  # the connection serves on
            assert r.status == 200


async def test_an_upstream_reset_mid_body_resets_the_stream(root: Path) -> None:
    async with upstream() as up:
        cfg = make_config(root, proxy=(f"/api=http://127.0.0.1:{up.port}",))
        async with h2_memory(cfg) as (client, srv, _), _closing(srv):
            sid = client.request("/api/reset")
            await client.flush()
            with trio.fail_after(5):
                (r,) = await client.wait(sid)
            assert r.status == 200 and not r.ended
            assert r.reset == ErrorCodes.CANCEL
            assert srv.stats.proxy.errors_reset == 1
            r = await client.get("/api/badframe")
            assert r.status == 502


async def test_an_h2_proxied_body_is_logged_and_counted_with_its_size(root: Path) -> None:
    """The access log's size of a proxied HTTP/2 response is its body's,
    complete (chunked upstream, known length upstream) or cut (the
    upstream reset mid-body: the bytes sent, marked cut); /metrics'
    bytes_sent counts them."""
    out = io.StringIO()
    async with upstream() as up:
        cfg = make_config(root, proxy=(f"/api=http://127.0.0.1:{up.port}",))
        srv = Server(cfg, access_log=AccessLog("json", out))
        async with h2_memory(cfg, server=srv) as (client, _, _), _closing(srv):
            before = srv.stats.responses.bytes_sent
            r = await client.get("/api/stream?n=7&size=10000")
            assert r.ended and len(r.body) == 70_000
            r = await client.get("/api/length?size=12345")
            assert r.ended and len(r.body) == 12345
            sid = client.request("/api/reset")
            await client.flush()
            with trio.fail_after(5):
                (cut,) = await client.wait(sid)
            assert cut.reset == ErrorCodes.CANCEL and cut.body == b"0123456789"
            await wait_until(lambda: out.getvalue().count("\n") == 3)
            assert srv.stats.responses.bytes_sent - before > 70_000 + 12345 + 10
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(r["target"], r["bytes"], r.get("cut", False)) for r in records] == [
        ("/api/stream?n=7&size=10000", 70_000, False),
        ("/api/length?size=12345", 12345, False),
        ("/api/reset", 10, True),
    ]
    assert all(r["version"] == "2.0" for r in records)


async def test_an_h2_path_no_request_line_could_carry_is_a_400_and_never_goes_upstream(
    root: Path,
) -> None:
    # HTTP/2 carries :path as a field value, so a space, a control byte or
    # a non-ASCII byte can arrive in it where no HTTP/1.1 request line
    # could carry one (RFC 9112 §3.2).  The HTTP/2 head reader refuses it
    # (wire/h2head.py: visible ASCII only): a 400, and nothing reaches the
    # upstream (without that check h11 refuses the upstream request: 502).
    async with upstream() as up:
        cfg = make_config(root, proxy=(f"/api=http://127.0.0.1:{up.port}",))
        async with h2_memory(cfg) as (client, srv, _), _closing(srv):
            for path in ("/api/json?a b", "/api/json?a\x01b", "/api/json?\u00e9", "/api/json?a\tb"):
                r = await client.get(path)
                assert r.status == 400, path
            assert up.seen == []
            r = await client.get('/api/json?a"b<')  # visible ASCII: forwarded as it is
            assert r.status == 200 and json.loads(r.body)["target"] == '/api/json?a"b<'


# ------------------------------------------------------ the slot hand-overs
# The pool hands a freed slot to the oldest waiting request by cancelling
# that request's wait (serverio.proxy.client.Pool.release), and a request
# that leaves as the slot is handed to it gives it on (Pool.acquire).
# tests/test_proxy_cancel.py checks both on memory streams under MockClock;
# these check them from an HTTP/2 client's streams in front of a real
# loopback upstream.


def _one_slot(root: Path, port: int) -> Config:
    """--proxy-max-inflight 1 and a 30 s queue timeout (a wait that ends
    only by it shows as a fail_after of 5 s)."""
    return make_config(
        root,
        proxy=(f"/api=http://127.0.0.1:{port}",),
        proxy_max_inflight=1,
        proxy_queue_timeout=30.0,
    )


def _pool(srv: Server) -> Pool:
    proxy = srv.env.handler.proxy
    assert isinstance(proxy, ProxyService)
    return next(iter(proxy.pools.values()))


async def test_a_freed_slot_goes_at_once_to_the_oldest_stream_still_waiting(root: Path) -> None:
    # --proxy-max-inflight 1: stream A holds the slot, B then C wait; B is
    # reset while it waits.  When A ends its slot goes at once (not after
    # the 30 s queue timeout) to C, the oldest stream still waiting, never
    # to B, which left.
    async with upstream() as up:
        async with h2_memory(_one_slot(root, up.port)) as (client, srv, _), _closing(srv):
            pool = _pool(srv)
            a = client.request("/api/slow?delay=0.5")
            await client.flush()
            with trio.fail_after(5):
                await up.started.wait()
            b = client.request("/api/json?b")
            await client.flush()
            await wait_until(lambda: pool.waiting == 1)
            c = client.request("/api/json?c")
            await client.flush()
            await wait_until(lambda: pool.waiting == 2)
            client.conn.reset_stream(b, ErrorCodes.CANCEL)
            await client.flush()
            await wait_until(lambda: pool.waiting == 1)
            with trio.fail_after(5):  # well before the queue timeout
                ra, rc = await client.wait(a, c)
            assert (ra.status, bytes(ra.body)) == (200, b"slow")
            assert rc.status == 200 and json.loads(rc.body)["target"] == "/api/json?c"
            assert [s.target for s in up.seen] == ["/api/slow?delay=0.5", "/api/json?c"]
            assert srv.stats.proxy.queued == 2 and srv.stats.proxy.busy == 0
            assert pool.inflight == 0 and pool.waiting == 0


async def test_a_slot_handed_to_a_stream_reset_as_it_is_handed_is_given_back(
    root: Path,
) -> None:
    # Stream A holds the only slot (its upstream never answers), B waits;
    # one write resets both.  The server cancels both streams in one step;
    # when A's task unwinds first it hands its slot to B, whose own reset
    # then ends its wait: B must give the slot on (Pool.acquire), or it is
    # lost for good.  Which of the two tasks runs first is trio's choice
    # (it shuffles each batch), so the round is repeated: a lost slot shows
    # as inflight 1 after a round, and every round ends with a working
    # request.
    async with upstream() as up:
        async with h2_memory(_one_slot(root, up.port)) as (client, srv, _), _closing(srv):
            pool = _pool(srv)
            for round_ in range(24):
                a = client.request("/api/never")
                await client.flush()
                await wait_until(lambda: pool.inflight == 1 and pool.opened == 1)
                b = client.request("/api/json")
                await client.flush()
                await wait_until(lambda: pool.waiting == 1)
                client.conn.reset_stream(a, ErrorCodes.CANCEL)
                client.conn.reset_stream(b, ErrorCodes.CANCEL)
                await client.flush()
                await wait_until(lambda: pool.waiting == 0 and pool.opened == 0)
                # B's task may not have run yet when A's side is done: the
                # slot comes back within the bound, or it was lost for good
                # (then wait_until fails: 5 s, far more than a round needs).
                try:
                    await wait_until(lambda: pool.inflight == 0)
                except trio.TooSlowError:
                    raise AssertionError(f"round {round_}: the slot was lost") from None
                with trio.fail_after(5):
                    r = await client.get("/api/json")
                assert r.status == 200, round_
            assert srv.stats.proxy.queued == 24 and srv.stats.proxy.busy == 0
