"""The tunnels' own budget (issue 41 item 13), on trio's MockClock over
memory streams: idle WebSocket tunnels no longer take the request slots
(``--proxy-max-inflight``); they have ``--proxy-max-tunnels`` places, every
upstream together, and ``--proxy-max-tunnels-per-client`` of them per
client, past which a request asking to switch is a 503 at once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import h11
import pytest
import trio
import trio.testing

from serverio.config import Config
from serverio.errors import ConfigError, HTTPError
from serverio.http.core import Plan, RequestFacts
from serverio.http.target import parse_target
from serverio.model import Body, StreamBody
from serverio.observe.stats import ProxyStats
from serverio.pipeline.hooks import RawHead, TunnelBody
from serverio.proxy.service import ProxyService
from serverio.proxy.tunnel import TunnelGauge

WS_HEAD = [
    (b"host", b"t"),
    (b"connection", b"Upgrade"),
    (b"upgrade", b"websocket"),
    (b"sec-websocket-key", b"dGhlIHNhbXBsZSBub25jZQ=="),
    (b"sec-websocket-version", b"13"),
]
PLAIN_HEAD = [(b"host", b"t")]


async def _serve(stream: trio.abc.Stream, decline: bool) -> None:
    """The upstream of one connection: 101 to a request that asks to
    switch (then it holds the tunnel open, idle), else 200 ``ok``."""
    conn = h11.Connection(h11.SERVER)
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = await stream.receive_some(65536)
            if not data:
                return
            conn.receive_data(bytes(data))
            continue
        if isinstance(event, h11.Request):
            asks = any(n == b"upgrade" for n, _ in event.headers)
        elif event is h11.PAUSED or isinstance(event, h11.EndOfMessage):
            if asks and not decline:
                switch = [(b"connection", b"Upgrade"), (b"upgrade", b"websocket")]
                await stream.send_all(
                    conn.send(h11.InformationalResponse(status_code=101, headers=switch))
                )
                while await stream.receive_some(65536):  # an idle tunnel
                    pass
                return
            out = conn.send(h11.Response(status_code=200, headers=[(b"content-length", b"2")]))
            out += conn.send(h11.Data(data=b"ok")) + conn.send(h11.EndOfMessage())
            await stream.send_all(out)
            conn.start_next_cycle()


class Front:
    """A ProxyService whose upstream connections are memory streams served
    by :func:`_serve` in ``nursery``."""

    def __init__(self, root: Path, nursery: trio.Nursery, **kw: object) -> None:
        cfg = Config.of(directory=str(root), proxy=("/api=http://127.0.0.1:9",), **kw).validate()
        self.stats = ProxyStats()
        self.svc = ProxyService(cfg, self.stats, self._connect)
        self.pool = self.svc.pools["/api"]
        self.nursery = nursery
        self.decline = False  # the upstream answers a switch 200, not 101
        self.silent: list[trio.abc.Stream] | None = None  # ... or never at all

    async def _connect(self, route: object) -> trio.abc.Stream:
        ours, theirs = trio.testing.memory_stream_pair()
        if self.silent is not None:
            self.silent.append(theirs)
        else:
            self.nursery.start_soon(_serve, theirs, self.decline)
        return ours

    async def forward(self, fields: list[tuple[bytes, bytes]], client: str) -> tuple[Plan, Body]:
        req = RequestFacts(method=b"GET", target=parse_target(b"GET", b"/api/x"))
        head = RawHead(fields, b"1.1", None)
        route = self.svc.match(req)
        return await self.svc.forward(route, req, head, None, 0.0, lambda: client)

    async def tunnel(self, client: str = "127.0.0.1") -> TunnelBody:
        """A tunnel for ``client``, run (idle) in the nursery."""
        plan, body = await self.forward(WS_HEAD, client)
        assert plan.status == 101 and isinstance(body, TunnelBody)
        _, ours = trio.testing.memory_stream_pair()
        self.nursery.start_soon(body.tunnel.run, ours, b"")
        return body

    async def get(self, client: str = "127.0.0.1") -> bytes:
        plan, body = await self.forward(PLAIN_HEAD, client)
        assert plan.status == 200 and isinstance(body, StreamBody)
        got = await body.source.next_chunk()
        assert await body.source.next_chunk() == b""
        body.close()
        return got


@asynccontextmanager
async def front(root: Path, **kw: object) -> AsyncIterator[Front]:
    async with trio.open_nursery() as nursery:
        yield Front(root, nursery, **kw)
        nursery.cancel_scope.cancel()


async def test_idle_tunnels_leave_every_request_slot_free(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """The issue's case: 64 idle tunnels from one client (the default 64
    request slots) and then ``GET /api/x``: it was a 503 after
    ``--proxy-queue-timeout`` (10 s); now it is answered at once, and the
    client's tunnels past its share are 503 at once instead."""
    async with front(root) as f:
        opened = refused = 0
        for _ in range(64):
            try:
                await f.tunnel()
                opened += 1
            except HTTPError as exc:
                assert exc.status == 503 and "per-client" in exc.detail
                refused += 1
        assert (opened, refused) == (32, 32)  # --proxy-max-tunnels-per-client's default
        await trio.testing.wait_all_tasks_blocked()  # every tunnel running, idle
        assert f.pool.inflight == 0 and f.svc.tunnels.open == f.svc.tunnels.held == 32
        start = trio.current_time()
        assert await f.get() == b"ok"
        assert trio.current_time() == start  # no wait for a slot
        assert f.stats.busy == 32 and f.stats.queued == 0


async def test_tunnels_from_as_many_clients_as_slots_starve_no_request(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with front(root, proxy_max_inflight=4) as f:
        for n in range(8):  # twice the request slots, from 8 clients
            await f.tunnel(f"192.0.2.{n}")
        assert f.pool.inflight == 0 and f.pool.opened == 8
        start = trio.current_time()
        assert [await f.get() for _ in range(5)] == [b"ok"] * 5
        assert trio.current_time() == start


async def test_the_budget_and_the_per_client_share(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with front(root, proxy_max_tunnels=3, proxy_max_tunnels_per_client=2) as f:
        a1 = await f.tunnel("2001:db8::1")
        await f.tunnel("2001:db8::2")  # the same /64: the same client
        with pytest.raises(HTTPError) as caught:
            await f.tunnel("2001:db8::3")
        assert caught.value.status == 503 and "per-client" in caught.value.detail
        await f.tunnel("192.0.2.1")
        with pytest.raises(HTTPError) as caught:
            await f.tunnel("192.0.2.2")  # its first, but every place is taken
        assert caught.value.status == 503 and "--proxy-max-tunnels)" in caught.value.detail
        assert f.stats.busy == 2 and f.pool.opened == 3  # refused before any upstream work
        a1.close()  # a tunnel ends: its place is free again
        await f.tunnel("192.0.2.2")
        assert f.svc.tunnels.held == 3
        assert await f.get("2001:db8::1") == b"ok"  # requests are another budget


async def test_a_declined_or_failed_switch_gives_its_place_back(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with front(root, proxy_max_tunnels=1) as f:
        f.decline = True
        for _ in range(3):
            plan, body = await f.forward(WS_HEAD, "127.0.0.1")
            assert plan.status == 200 and plan.close
            body.close()
            assert f.svc.tunnels.held == 0
        f.decline = False
        body = await f.tunnel()
        body.close()
        assert f.svc.tunnels.held == 0
    async with front(root, proxy_max_tunnels=1, proxy_head_timeout=5.0) as f:
        f.silent = []
        with pytest.raises(HTTPError) as caught:
            await f.forward(WS_HEAD, "127.0.0.1")
        assert caught.value.status == 504
        assert f.svc.tunnels.held == 0 and f.pool.inflight == 0
        with trio.move_on_after(1):  # the client goes away during the handshake
            await f.forward(WS_HEAD, "127.0.0.1")
        assert f.svc.tunnels.held == 0 and f.pool.inflight == 0 and f.pool.opened == 0


def test_no_tunnels_at_all_and_the_bounds_of_the_settings(root: Path) -> None:
    gauge = TunnelGauge(0, 5)
    assert gauge.reserve("127.0.0.1")[1] is not None and gauge.held == 0
    for name, bad in (("proxy_max_tunnels", -1), ("proxy_max_tunnels_per_client", 0)):
        with pytest.raises(ConfigError, match=name.replace("_", "-")):
            Config.of(directory=str(root), **{name: bad}).validate()
