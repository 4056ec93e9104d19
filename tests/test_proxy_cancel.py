"""The proxy's deadlines and cancellation, on trio's MockClock over memory
streams: ProxyService with a ``connect`` that hands out one end of a
memory stream pair, the test playing the upstream on the other end."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import h11
import pytest
import trio
import trio.testing

from serverio.config import Config, proxy_route
from serverio.errors import HTTPError
from serverio.http.core import RequestFacts
from serverio.http.target import parse_target
from serverio.model import BodyCut, Prepared, StreamBody
from serverio.observe.stats import ProxyStats
from serverio.pipeline.handler import ClientGone, run_watched
from serverio.pipeline.hooks import RawHead
from serverio.proxy.client import Pool
from serverio.proxy.service import ProxyService


class Harness:
    def __init__(self, root: Path, **kw: object) -> None:
        kw.setdefault("proxy", ("/api=http://127.0.0.1:9",))
        cfg = Config.of(directory=str(root), **kw).validate()
        self.ends: list[trio.abc.Stream] = []
        self.stats = ProxyStats()
        self.connect_delay = 0.0
        self.svc = ProxyService(cfg, self.stats, self._connect)
        self.pool: Pool = self.svc.pools["/api"]

    async def _connect(self, route: object) -> trio.abc.Stream:
        if self.connect_delay:
            await trio.sleep(self.connect_delay)
        ours, theirs = trio.testing.memory_stream_pair()
        self.ends.append(theirs)
        return ours

    async def forward(self, path: bytes = b"/api/x") -> tuple[object, StreamBody]:
        req = RequestFacts(method=b"GET", target=parse_target(b"GET", path))
        head = RawHead([(b"host", b"t")], b"1.1", None)
        route = self.svc.match(req)
        plan, body = await self.svc.forward(route, req, head, None, 0.0, lambda: "127.0.0.1")
        assert isinstance(body, StreamBody)
        return plan, body


async def read_request(end: trio.abc.Stream) -> h11.Connection:
    """The upstream side: read one request head (and its end)."""
    conn = h11.Connection(h11.SERVER)
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(bytes(await end.receive_some(65536)))
            continue
        if isinstance(event, h11.EndOfMessage):
            return conn


async def saw_close(end: trio.abc.Stream) -> bool:
    """The upstream side reads EOF: the proxy closed the connection."""
    try:
        while True:
            data = await end.receive_some(65536)
            if not data:
                return True
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return True


async def test_a_head_past_the_head_timeout_is_504_and_closes(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    h = Harness(root, proxy_head_timeout=5.0)
    start = trio.current_time()
    with pytest.raises(HTTPError) as err:
        await h.forward()
    assert err.value.status == 504
    assert trio.current_time() - start == pytest.approx(5.0)
    assert h.stats.timeouts_head == 1
    assert h.pool.opened == 0 and h.pool.inflight == 0 and not h.pool.idle
    assert await saw_close(h.ends[0])


async def test_a_slow_connect_is_504(root: Path, autojump_clock: trio.testing.MockClock) -> None:
    h = Harness(root, proxy_connect_timeout=2.0)
    h.connect_delay = 10.0
    with pytest.raises(HTTPError) as err:
        await h.forward()
    assert err.value.status == 504 and h.stats.timeouts_connect == 1
    assert h.pool.opened == 0 and h.pool.inflight == 0


async def test_a_cancelled_exchange_closes_the_upstream_connection(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    h = Harness(root)
    with trio.move_on_after(1.0):  # the client went away (its scope cancelled)
        await h.forward()
    assert h.stats.cancelled == 1
    assert h.pool.opened == 0 and h.pool.inflight == 0 and not h.pool.idle
    assert await saw_close(h.ends[0])


async def _answer_chunked(
    end: trio.abc.Stream, chunks: list[bytes], *, finish: bool
) -> h11.Connection:
    conn = await read_request(end)
    await end.send_all(conn.send(h11.Response(status_code=200, headers=[])))
    for c in chunks:
        await end.send_all(conn.send(h11.Data(data=c)))
    if finish:
        await end.send_all(conn.send(h11.EndOfMessage()))
    return conn


async def test_a_complete_body_pools_the_connection_and_it_is_reused(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    h = Harness(root)
    async with trio.open_nursery() as nursery:

        async def upstream_side() -> None:
            while not h.ends:  # noqa: ASYNC110 - state the peer owns
                await trio.sleep(0.01)
            conn = await _answer_chunked(h.ends[0], [b"ab", b"cd"], finish=True)
            conn.start_next_cycle()
            # The second request arrives on the same connection.
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    conn.receive_data(bytes(await h.ends[0].receive_some(65536)))
                elif isinstance(event, h11.EndOfMessage):
                    break
            await h.ends[0].send_all(
                conn.send(h11.Response(status_code=200, headers=[("content-length", "1")]))
            )
            await h.ends[0].send_all(conn.send(h11.Data(data=b"z")) + conn.send(h11.EndOfMessage()))

        nursery.start_soon(upstream_side)
        _, body = await h.forward()
        assert body.bounded and body.length is None
        got = [await body.source.next_chunk() for _ in range(3)]
        assert got == [b"ab", b"cd", b""]
        body.close()  # after the end: nothing to abandon
        assert h.pool.opened == 1 and len(h.pool.idle) == 1 and h.pool.inflight == 0
        _, body = await h.forward()
        assert body.length == 1 and await body.source.next_chunk() == b"z"
        assert await body.source.next_chunk() == b""
        body.close()
    assert h.stats.connects == 1 and h.stats.reuses == 1 and len(h.ends) == 1


async def test_closing_the_body_mid_response_never_pools_the_connection(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    h = Harness(root)
    async with trio.open_nursery() as nursery:

        async def upstream_side() -> None:
            while not h.ends:  # noqa: ASYNC110 - state the peer owns
                await trio.sleep(0.01)
            await _answer_chunked(h.ends[0], [b"ab"], finish=False)

        nursery.start_soon(upstream_side)
        _, body = await h.forward()
        assert await body.source.next_chunk() == b"ab"
        body.close()  # the client went away mid-body
    assert h.pool.opened == 0 and not h.pool.idle and h.pool.inflight == 0
    assert h.stats.cancelled == 1
    assert await saw_close(h.ends[0])


async def test_an_idle_body_is_cut_after_the_idle_timeout(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    h = Harness(root, proxy_idle_timeout=3.0)
    async with trio.open_nursery() as nursery:

        async def upstream_side() -> None:
            while not h.ends:  # noqa: ASYNC110 - state the peer owns
                await trio.sleep(0.01)
            await _answer_chunked(h.ends[0], [b"ab"], finish=False)

        nursery.start_soon(upstream_side)
        _, body = await h.forward()
        assert await body.source.next_chunk() == b"ab"
        start = trio.current_time()
        with pytest.raises(BodyCut):
            await body.source.next_chunk()
        assert trio.current_time() - start == pytest.approx(3.0)
        body.close()
    assert h.stats.timeouts_idle == 1 and h.stats.cancelled == 0
    assert h.pool.opened == 0 and h.pool.inflight == 0


async def test_a_trickle_meets_the_total_timeout(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    h = Harness(root, proxy_idle_timeout=2.0, proxy_total_timeout=10.0)
    async with trio.open_nursery() as nursery:

        async def upstream_side() -> None:
            while not h.ends:  # noqa: ASYNC110 - state the peer owns
                await trio.sleep(0.01)
            conn = await _answer_chunked(h.ends[0], [], finish=False)
            while True:
                await trio.sleep(1.0)
                await h.ends[0].send_all(conn.send(h11.Data(data=b".")))

        nursery.start_soon(upstream_side)
        _, body = await h.forward()
        got = 0
        with pytest.raises(BodyCut):
            while await body.source.next_chunk():
                got += 1
        assert 8 <= got <= 10 and trio.current_time() == pytest.approx(10.0, abs=0.1)
        body.close()
        nursery.cancel_scope.cancel()
    assert h.stats.timeouts_total == 1 and h.stats.timeouts_idle == 0


async def test_a_stale_pooled_connection_is_retried_once_on_a_new_one(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    h = Harness(root)
    async with trio.open_nursery() as nursery:

        async def upstream_side() -> None:
            while not h.ends:  # noqa: ASYNC110 - state the peer owns
                await trio.sleep(0.01)
            await _answer_chunked(h.ends[0], [b"1"], finish=True)

        nursery.start_soon(upstream_side)
        _, body = await h.forward()
        assert await body.source.next_chunk() == b"1" and await body.source.next_chunk() == b""
    assert len(h.pool.idle) == 1
    await h.ends[0].aclose()  # the upstream closed the idle connection
    async with trio.open_nursery() as nursery:

        async def second() -> None:
            while len(h.ends) < 2:  # noqa: ASYNC110 - state the peer owns
                await trio.sleep(0.01)
            await _answer_chunked(h.ends[1], [b"2"], finish=True)

        nursery.start_soon(second)
        _, body = await h.forward()
        assert await body.source.next_chunk() == b"2" and await body.source.next_chunk() == b""
        body.close()
    assert h.stats.connects == 2 and h.stats.errors_reset == 0
    assert h.pool.opened == 1  # the stale one closed, the new one pooled


async def test_past_max_inflight_without_a_queue_is_503_without_waiting(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    h = Harness(root, proxy_max_inflight=1, proxy_queue=0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(h.forward)
        await trio.sleep(0.5)
        with pytest.raises(HTTPError) as err:
            await h.forward()
        assert err.value.status == 503 and h.stats.busy == 1
        nursery.cancel_scope.cancel()
    assert h.pool.inflight == 0 and h.pool.opened == 0


async def _answer_one(end: trio.abc.Stream, body: bytes) -> None:
    """The upstream side: read one request, answer it with ``body``."""
    conn = await read_request(end)
    length = str(len(body)).encode()
    head = h11.Response(status_code=200, headers=[(b"content-length", length)])
    await end.send_all(conn.send(head))
    await end.send_all(conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage()))


async def _finished(h: Harness, into: list[bytes], name: bytes) -> None:
    """Forward one request and read its body to the end (the slot back)."""
    _, body = await h.forward()
    assert await body.source.next_chunk() == b"ok"
    assert await body.source.next_chunk() == b""
    into.append(name)


async def test_past_max_inflight_requests_wait_in_order_for_the_slot(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # --proxy-max-inflight 1: the second and third wait (no 503), and take
    # the slot first come first served as each exchange ends.
    h = Harness(root, proxy_max_inflight=1, proxy_keepalive=1)
    done: list[bytes] = []
    async with trio.open_nursery() as nursery:
        for name in (b"a", b"b", b"c"):
            nursery.start_soon(_finished, h, done, name)
            await trio.sleep(0.1)
        assert h.pool.inflight == 1 and h.pool.waiting == 2 and h.stats.queued == 2
        assert len(h.ends) == 1  # one connection: the others wait, none opened
        for _ in range(3):
            await _answer_one(h.ends[0], b"ok")  # the pooled connection serves each in turn
            await trio.sleep(0.1)
    assert done == [b"a", b"b", b"c"] and h.stats.busy == 0
    assert h.pool.inflight == 0 and h.pool.waiting == 0 and h.stats.connects == 1


async def test_a_request_waits_at_most_the_queue_timeout_then_503(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    h = Harness(root, proxy_max_inflight=1, proxy_queue_timeout=3.0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(h.forward)
        await trio.sleep(0.5)
        start = trio.current_time()
        with pytest.raises(HTTPError) as err:
            await h.forward()
        assert err.value.status == 503 and trio.current_time() - start == pytest.approx(3.0)
        assert h.stats.queued == 1 and h.stats.busy == 1 and h.pool.waiting == 0
        nursery.cancel_scope.cancel()
    assert h.pool.inflight == 0 and h.pool.opened == 0


async def test_past_the_queue_a_request_is_503_at_once(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    h = Harness(root, proxy_max_inflight=1, proxy_queue=1)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(h.forward)
        await trio.sleep(0.5)
        nursery.start_soon(h.forward)  # waits: the queue's one place
        await trio.sleep(0.5)
        start = trio.current_time()
        with pytest.raises(HTTPError) as err:
            await h.forward()
        assert err.value.status == 503 and trio.current_time() == start  # no wait
        assert h.stats.queued == 1 and h.stats.busy == 1 and h.pool.waiting == 1
        nursery.cancel_scope.cancel()
    assert h.pool.inflight == 0 and h.pool.waiting == 0 and h.pool.opened == 0


async def test_a_waiter_cancelled_leaves_the_queue_holding_no_slot(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    h = Harness(root, proxy_max_inflight=1, proxy_keepalive=1)
    done: list[bytes] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_finished, h, done, b"a")
        await trio.sleep(0.1)
        with trio.move_on_after(1.0):  # the client goes away while it waits
            await h.forward()
        assert h.pool.waiting == 0 and h.pool.inflight == 1
        await _answer_one(h.ends[0], b"ok")
    assert done == [b"a"] and h.pool.inflight == 0 and h.pool.waiting == 0


async def test_a_routes_own_deadlines_override_the_options(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # A [[proxy]] table's head-timeout (2 s) and idle-timeout (3 s) beat
    # --proxy-head-timeout / --proxy-idle-timeout (60 s each) for that route.
    route = proxy_route("/api", "http://127.0.0.1:9", "t", head_timeout=2.0, idle_timeout=3.0)
    h = Harness(root, proxy=(), proxy_routes=(route,))
    start = trio.current_time()
    with pytest.raises(HTTPError) as err:
        await h.forward()
    assert err.value.status == 504 and trio.current_time() - start == pytest.approx(2.0)
    assert h.stats.timeouts_head == 1
    async with trio.open_nursery() as nursery:

        async def upstream_side() -> None:
            while len(h.ends) < 2:  # noqa: ASYNC110 - state the peer owns
                await trio.sleep(0.01)
            conn = await read_request(h.ends[1])
            head = h11.Response(status_code=200, headers=[(b"content-length", b"9")])
            await h.ends[1].send_all(conn.send(head))  # then nothing

        nursery.start_soon(upstream_side)
        _, body = await h.forward()
        start = trio.current_time()
        with pytest.raises(BodyCut):
            await body.source.next_chunk()
        assert trio.current_time() - start == pytest.approx(3.0)
    assert h.stats.timeouts_idle == 1 and h.pool.inflight == 0


@asynccontextmanager
async def _left_as_it_ended() -> AsyncIterator[None]:
    """A transport's watch (handler.run_watched) whose client leaves just
    as the watched wait ends: the wait's result is in, then ClientGone."""
    yield
    raise ClientGone


async def _forward_watched(h: Harness, gone: Callable[[], Awaitable[None]] | None = None) -> None:
    """A proxied request in a late-watched step whose client leaves as a
    watched wait ends (and, with ``gone``, when ``gone`` returns, for a
    wait that watches in its own task): the step must not go on."""

    async def step() -> Prepared:
        await h.forward()
        raise AssertionError("the step goes on after the client left")

    await run_watched(step, _left_as_it_ended, gone)


async def test_a_connection_made_as_the_client_leaves_is_closed(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # The new connection is in when ClientGone leaves the watched connect:
    # it is closed, never left open in the pool, and the slot is free.
    h = Harness(root)
    with pytest.raises(ClientGone):
        await _forward_watched(h)
    assert h.stats.connects == 1 and h.pool.opened == 0 and h.pool.inflight == 0
    assert h.stats.cancelled == 1
    assert await saw_close(h.ends[0])


async def _forward_until_left(h: Harness, left: trio.Event, times: list[float]) -> None:
    """:func:`_forward_watched` whose client goes when ``left`` is set: it
    must end with ClientGone, at the time it appends to ``times``."""
    with pytest.raises(ClientGone):
        await _forward_watched(h, left.wait)
    times.append(trio.current_time())


async def test_a_slot_handed_over_as_the_client_leaves_is_given_back(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # The queued request's client leaves in the same scheduling round as
    # its slot is handed over (its watch's wait is over, so the hand-over's
    # cancellation never reaches it): ClientGone ends the request, the
    # slot goes on (here: free again) and nothing reaches the upstream.
    h = Harness(root, proxy_max_inflight=1, proxy_keepalive=1)
    left = trio.Event()
    times: list[float] = []
    assert h.pool.try_acquire()  # the one slot, held here
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_forward_until_left, h, left, times)
        await trio.sleep(0.1)
        assert h.pool.waiting == 1
        left.set()  # the client goes ...
        h.pool.release()  # ... as the slot is handed over, with no checkpoint between
    assert len(times) == 1 and h.pool.inflight == 0 and h.pool.waiting == 0
    assert h.ends == []  # the second never connected
    assert h.stats.cancelled == 0 and h.stats.connects == 0


async def test_a_client_leaving_its_slot_wait_leaves_the_queue_at_once(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # The waiting task watches its client itself (client_gone, no helper
    # task): a client gone while queued leaves the queue then, not when a
    # slot would have come, and takes no slot with it.
    h = Harness(root, proxy_max_inflight=1, proxy_keepalive=1)
    left = trio.Event()
    times: list[float] = []
    assert h.pool.try_acquire()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_forward_until_left, h, left, times)
        await trio.sleep(1.1)
        assert h.pool.waiting == 1
        left.set()
        await trio.sleep(0.1)
        assert times == [pytest.approx(1.1)] and h.pool.waiting == 0
        assert h.pool.inflight == 1  # still held here; nothing was handed over
    h.pool.release()
    assert h.pool.inflight == 0 and h.ends == []
