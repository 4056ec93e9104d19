"""Live-reload event streams over HTTP/2 (h2 as the client, memory streams
and loopback sockets)."""

from __future__ import annotations

from pathlib import Path

import h2.settings
import trio
import trio.testing
from h2.errors import ErrorCodes

from serverio.app.server import Server
from serverio.live.script import SSE_KEEPALIVE, SSE_PREAMBLE, sse_reload

from .conftest import make_config
from .h2client import H2Client, H2Response, h2_memory

S = h2.settings.SettingCodes
EVENTS = "/.serverio/events"


async def _until(client: H2Client, r: H2Response, marker: bytes, limit: float = 100) -> None:
    """Pump until ``marker`` is in the body received so far."""
    with trio.fail_after(limit):
        while marker not in r.body:
            assert not r.done, (r.reset, bytes(r.body))
            assert await client.pump(), "connection closed"


async def test_event_stream_over_http2_is_served_and_exempt_from_the_idle_timeout(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    cfg = make_config(root, watch=True, keepalive_timeout=3, head_timeout=3)
    async with h2_memory(cfg) as (client, srv, conn):
        t0 = trio.current_time()
        sid = client.request(EVENTS)
        await client.flush()
        r = client.responses[sid]
        await _until(client, r, SSE_PREAMBLE)
        assert r.status == 200 and r.headers["content-type"] == "text/event-stream"
        assert r.headers["cache-control"] == "no-store" and not r.done
        # The stream is open, so the connection is not idle: keep-alive
        # comments every 15 s, far past the 3 s keep-alive timeout.
        for n in (1, 2):
            await _until(client, r, SSE_KEEPALIVE * n)
            assert trio.current_time() - t0 >= 15 * n
        assert client.goaway is None and srv.stats.timeouts.keepalive == 0
        # Other requests share the connection meanwhile.
        other = await client.get("/hello.txt")
        assert other.status == 200 and bytes(other.body) == b"hello world\n"
        assert srv.live is not None and len(srv.live.broadcast.subscribers) == 1
        seen = len(r.body)
        srv.live.publish({"a.css": "changed"})
        await _until(client, r, b"data: /a.css\n\n")
        srv.live.publish({"p.html": "changed"})
        await _until(client, r, sse_reload())
        assert bytes(r.body[seen:]) == b"event: css\ndata: /a.css\n\n" + sse_reload()
        # The client resets the stream: the subscription goes with it.
        client.conn.reset_stream(sid, ErrorCodes.CANCEL)
        await client.flush()
        with trio.fail_after(5):
            while srv.live.broadcast.subscribers:  # noqa: ASYNC110 - server state, no event
                await trio.sleep(0.01)
        assert conn._switched is not None


async def test_event_stream_over_http2_counts_toward_the_stream_limit(root: Path) -> None:
    cfg = make_config(root, watch=True, h2_max_streams=1)
    async with h2_memory(cfg) as (client, _, _):
        # Both before the server's SETTINGS arrive (h2 would hold the
        # second back otherwise): the open event stream is the one allowed.
        sid = client.request(EVENTS)
        second = client.request("/hello.txt")
        await client.flush()
        r = client.responses[sid]
        with trio.fail_after(5):
            (refused,) = await client.wait(second)
        assert refused.reset == ErrorCodes.REFUSED_STREAM
        await _until(client, r, SSE_PREAMBLE, limit=5)
        assert not r.done


async def test_a_slow_http2_event_client_drops_to_reload_then_is_reset(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    cfg = make_config(root, watch=True, write_timeout=7.0)
    # A window of 8 bytes: part of the preamble fits, then nothing more
    # until the client gives credit back, which it never does.
    async with h2_memory(cfg, settings={S.INITIAL_WINDOW_SIZE: 8}, ack=False) as (client, srv, _):
        t0 = trio.current_time()
        sid = client.request(EVENTS)
        await client.flush()
        r = client.responses[sid]
        await _until(client, r, SSE_PREAMBLE[:8], limit=5)
        live = srv.live
        assert live is not None
        with trio.fail_after(5):
            while not live.broadcast.subscribers:  # noqa: ASYNC110 - server state, no event
                await trio.sleep(0.01)
        (sub,) = live.broadcast.subscribers
        for i in range(100):
            live.publish({f"p{i}.html": "changed"})
        # Bounded: nothing queued past the limit, a reload is due instead.
        assert sub.overflowed and len(sub.queue) <= sub.limit
        with trio.fail_after(60):
            (r,) = await client.wait(sid)
        assert r.reset == ErrorCodes.CANCEL and bytes(r.body) == SSE_PREAMBLE[:8]
        assert 7.0 <= trio.current_time() - t0 < 8.0
        assert srv.stats.timeouts.write == 1 and live.broadcast.subscribers == set()


async def test_head_of_the_event_stream_over_http2_ends_at_once(root: Path) -> None:
    async with h2_memory(make_config(root, watch=True)) as (client, _, _):
        with trio.fail_after(5):
            r = await client.get(EVENTS, method="HEAD")
    assert r.status == 200 and r.ended and not r.body
    assert r.headers["content-type"] == "text/event-stream"


async def test_drain_sends_goaway_then_ends_the_http2_event_stream(root: Path) -> None:
    async with h2_memory(make_config(root, watch=True)) as (client, srv, conn):
        sid = client.request(EVENTS)
        await client.flush()
        r = client.responses[sid]
        await _until(client, r, SSE_PREAMBLE, limit=5)
        conn.drain()
        with trio.fail_after(5):
            await client.until_closed()
    assert client.goaway is not None and client.goaway.error_code == ErrorCodes.NO_ERROR
    assert client.goaway.last_stream_id == sid
    # Ended cleanly (END_STREAM), not reset.
    assert r.ended and r.reset is None and bytes(r.body) == SSE_PREAMBLE
    assert srv.live is not None and srv.live.broadcast.subscribers == set()
    assert srv.stats.responses.completed == 1


async def test_shutdown_closes_http2_event_streams_first(root: Path) -> None:
    cfg = make_config(root, watch=True, shutdown_timeout=10)
    srv = Server(cfg.evolve(host="127.0.0.1", port=0))
    async with trio.open_nursery() as nursery:
        await nursery.start(srv.serve)
        port = srv.addresses()[0][1]
        clients = []
        for _ in range(2):
            client = H2Client(await trio.open_tcp_stream("127.0.0.1", port))
            await client.start()
            sid = client.request(EVENTS)
            await client.flush()
            await _until(client, client.responses[sid], SSE_PREAMBLE, limit=5)
            clients.append((client, sid))
        assert srv.live is not None and len(srv.live.broadcast.subscribers) == 2
        start = trio.current_time()
        srv.shutdown()
        for client, sid in clients:
            with trio.fail_after(5):
                await client.until_closed()
            assert client.goaway is not None and client.responses[sid].ended
            await client.stream.aclose()
    # Long before shutdown_timeout: nothing waited for the event streams.
    assert trio.current_time() - start < 2
    assert srv.abandoned_threads == 0 and srv.live.broadcast.subscribers == set()


async def test_lame_duck_ends_a_new_http2_event_stream_at_once(root: Path) -> None:
    async with h2_memory(make_config(root, watch=True)) as (client, srv, _):
        assert (await client.get("/hello.txt")).status == 200  # the connection is up
        srv.env.draining = True  # what serve() sets when --shutdown-delay starts
        sid = client.request(EVENTS)
        await client.flush()
        with trio.fail_after(5):
            await client.until_closed()
    r = client.responses[sid]
    assert r.status == 200 and r.ended and r.reset is None
    assert client.goaway is not None and client.goaway.error_code == ErrorCodes.NO_ERROR
    assert srv.stats.conns.internal_errors == 0


async def test_client_eof_ends_the_http2_event_stream(root: Path) -> None:
    async with h2_memory(make_config(root, watch=True)) as (client, srv, _):
        sid = client.request(EVENTS)
        await client.flush()
        r = client.responses[sid]
        await _until(client, r, SSE_PREAMBLE, limit=5)
        assert isinstance(client.stream, trio.StapledStream)
        await client.stream.send_eof()
        with trio.fail_after(5):
            await client.until_closed()
    assert r.ended and r.reset is None
    assert srv.live is not None and srv.live.broadcast.subscribers == set()


async def test_http2_event_streams_past_the_budget_get_503(root: Path) -> None:
    cfg = make_config(root, watch=True, watch_max_streams=2)
    async with h2_memory(cfg) as (client, srv, _):
        live = srv.live
        assert live is not None
        first, second = client.request(EVENTS), client.request(EVENTS)
        await client.flush()
        for sid in (first, second):
            await _until(client, client.responses[sid], SSE_PREAMBLE, limit=5)
        # Two streams, one connection: one holder out of --max-connections.
        assert live.slots.open == 2 and len(live.slots) == 1
        third = client.request(EVENTS)
        await client.flush()
        with trio.fail_after(5):
            (refused,) = await client.wait(third)
        assert refused.status == 503 and refused.headers["retry-after"] == "1"
        assert refused.ended and live.slots.refused == 1
        # Ordinary requests share the connection meanwhile.
        assert (await client.get("/hello.txt")).status == 200
        # A stream that ends gives its slot back.
        client.conn.reset_stream(first, ErrorCodes.CANCEL)
        await client.flush()
        with trio.fail_after(5):
            while live.slots.open != 1:  # noqa: ASYNC110 - server state, no event
                await trio.sleep(0.01)
        again = client.request(EVENTS)
        await client.flush()
        await _until(client, client.responses[again], SSE_PREAMBLE, limit=5)
        assert live.slots.open == 2
