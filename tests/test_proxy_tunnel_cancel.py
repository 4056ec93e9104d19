"""Proxy tunnels on trio's MockClock over memory streams: the idle deadline,
cancellation, what is delivered first, a declined switch; and the pure
field rules of a switch (serverio.proxy.routes)."""

from __future__ import annotations

from pathlib import Path

import h11
import pytest
import trio
import trio.testing
from h2.errors import ErrorCodes

from serverio.config import Config, proxy_route
from serverio.http.core import Plan, RequestFacts
from serverio.http.target import parse_target
from serverio.model import Body, StreamBody
from serverio.observe.stats import ProxyStats
from serverio.pipeline.hooks import RawHead, TunnelBody
from serverio.proxy.client import Pool
from serverio.proxy.routes import request_fields, response_fields, upgrade_token
from serverio.proxy.service import ProxyService
from serverio.proxy.tunnel import UpstreamTunnel
from tests.conftest import make_config
from tests.h2client import h2_memory

WS_HEAD = [
    (b"host", b"t"),
    (b"connection", b"Upgrade"),
    (b"upgrade", b"websocket"),
    (b"sec-websocket-key", b"dGhlIHNhbXBsZSBub25jZQ=="),
    (b"sec-websocket-version", b"13"),
]


class Harness:
    def __init__(self, root: Path, **kw: object) -> None:
        cfg = Config.of(directory=str(root), proxy=("/api=http://127.0.0.1:9",), **kw).validate()
        self.ends: list[trio.abc.Stream] = []
        self.stats = ProxyStats()
        self.svc = ProxyService(cfg, self.stats, self._connect)
        self.pool: Pool = self.svc.pools["/api"]

    async def _connect(self, route: object) -> trio.abc.Stream:
        ours, theirs = trio.testing.memory_stream_pair()
        self.ends.append(theirs)
        return ours

    async def forward(self, fields: list[tuple[bytes, bytes]] = WS_HEAD) -> tuple[Plan, Body]:
        req = RequestFacts(method=b"GET", target=parse_target(b"GET", b"/api/ws"))
        route = self.svc.match(req)
        head = RawHead(fields, b"1.1", None)
        return await self.svc.forward(route, req, head, None, 0.0, lambda: "127.0.0.1")

    async def end(self) -> trio.abc.Stream:
        while not self.ends:  # noqa: ASYNC110 - state the peer owns
            await trio.sleep(0.01)
        return self.ends[0]


async def _upstream_101(h: Harness, early: bytes = b"") -> trio.abc.Stream:
    """Play the upstream: read the request, answer 101 (and ``early``)."""
    end = await h.end()
    conn = h11.Connection(h11.SERVER)
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(bytes(await end.receive_some(65536)))
        elif event is h11.PAUSED or isinstance(event, h11.EndOfMessage):
            break
    head = [(b"connection", b"Upgrade"), (b"upgrade", b"websocket"), (b"x-up", b"1")]
    out = conn.send(h11.InformationalResponse(status_code=101, headers=head))
    await end.send_all(out + early)
    return end


async def _tunnel(h: Harness, early: bytes = b"") -> tuple[UpstreamTunnel, trio.abc.Stream]:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_upstream_101, h, early)
        plan, body = await h.forward()
    assert isinstance(body, TunnelBody) and isinstance(body.tunnel, UpstreamTunnel)
    assert plan.status == 101
    return body.tunnel, h.ends[0]


async def test_the_upstreams_first_bytes_and_the_clients_come_first(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    h = Harness(root)
    tunnel, up = await _tunnel(h, early=b"hello from upstream")
    client, ours = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(tunnel.run, ours, b"client said first")
        assert await client.receive_some(100) == b"hello from upstream"
        assert await up.receive_some(100) == b"client said first"
        await client.send_all(b"ping")
        assert await up.receive_some(100) == b"ping"
        await up.send_all(b"pong")
        assert await client.receive_some(100) == b"pong"
        # The tunnel holds its own place, not a request slot.
        assert h.svc.tunnels.open == 1 and h.svc.tunnels.held == 1 and h.pool.inflight == 0
        await up.aclose()  # the upstream closes: the tunnel ends
    assert h.svc.tunnels.open == 0 and h.pool.inflight == 0 and h.pool.opened == 0
    assert h.svc.tunnels.held == 0
    assert h.stats.tunnels == 1 and h.stats.timeouts_tunnel == 0


async def test_a_tunnel_carrying_nothing_closes_at_the_idle_deadline(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    h = Harness(root, proxy_tunnel_idle=100.0)
    tunnel, up = await _tunnel(h)
    client, ours = trio.testing.memory_stream_pair()
    start = trio.current_time()
    async with trio.open_nursery() as nursery:

        async def chatter() -> None:
            for _ in range(3):  # traffic every 80 s keeps it open past 100 s
                await trio.sleep(80)
                await client.send_all(b"x")
                assert await up.receive_some(10) == b"x"

        nursery.start_soon(chatter)
        sent = await tunnel.run(ours, b"")
    # Open through the chatter (240 s), closed 100 s after its last byte.
    assert trio.current_time() - start == pytest.approx(340)
    assert sent == 0
    assert h.stats.timeouts_tunnel == 1
    assert h.pool.opened == 0 and h.pool.inflight == 0 and h.svc.tunnels.open == 0
    with pytest.raises((trio.BrokenResourceError, trio.ClosedResourceError)):
        await up.send_all(b"too late")
        await up.send_all(b"too late")


async def test_a_cancelled_tunnel_closes_the_upstream_and_gives_the_slot_back(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    h = Harness(root)
    tunnel, up = await _tunnel(h)
    _, ours = trio.testing.memory_stream_pair()
    with trio.move_on_after(5):  # shutdown's cut, an abort
        await tunnel.run(ours, b"")
    assert h.pool.opened == 0 and h.pool.inflight == 0 and h.svc.tunnels.open == 0
    assert h.svc.tunnels.held == 0
    assert await up.receive_some(10) == b""  # the upstream saw the close


async def test_a_tunnel_never_run_is_closed_with_its_body(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    h = Harness(root)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_upstream_101, h)
        _, body = await h.forward()
    assert isinstance(body, TunnelBody)
    assert h.pool.inflight == 0 and h.svc.tunnels.held == 1 and h.pool.opened == 1
    body.close()  # e.g. the 101 head could not be written
    body.close()
    assert h.pool.opened == 0 and h.pool.inflight == 0 and h.svc.tunnels.held == 0


async def test_a_declined_switch_is_passed_on_closes_and_is_never_pooled(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    h = Harness(root)
    async with trio.open_nursery() as nursery:

        async def decline() -> None:
            end = await h.end()
            conn = h11.Connection(h11.SERVER)
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    conn.receive_data(bytes(await end.receive_some(65536)))
                elif event is h11.PAUSED or isinstance(event, h11.EndOfMessage):
                    break
            head = [(b"content-length", b"2")]
            out = conn.send(h11.Response(status_code=200, headers=head))
            out += conn.send(h11.Data(data=b"no")) + conn.send(h11.EndOfMessage())
            await end.send_all(out)

        nursery.start_soon(decline)
        plan, body = await h.forward()
    assert isinstance(body, StreamBody)
    assert plan.status == 200 and plan.close is True
    assert await body.source.next_chunk() == b"no" and await body.source.next_chunk() == b""
    body.close()
    assert not h.pool.idle and h.pool.opened == 0 and h.pool.inflight == 0
    assert h.stats.tunnels == 0 and h.svc.tunnels.held == 0  # declined: the place back


# ------------------------------------------------------------ pure fields


@pytest.mark.parametrize(
    ("fields", "version", "want"),
    [
        (WS_HEAD, b"1.1", b"websocket"),
        ([(b"connection", b"keep-alive, Upgrade"), (b"upgrade", b"foo/2")], b"1.1", b"foo/2"),
        ([(b"connection", b"upgrade"), (b"upgrade", b"a"), (b"upgrade", b"b")], b"1.1", b"a, b"),
        ([(b"connection", b"Upgrade")], b"1.1", None),  # nothing to switch to
        ([(b"upgrade", b"websocket")], b"1.1", None),  # Connection does not name it
        (WS_HEAD, b"1.0", None),  # HTTP/1.0 has no Upgrade
        (WS_HEAD, b"2", None),  # HTTP/2: malformed (RFC 9113 §8.2.2), never a switch
    ],
)
def test_which_requests_ask_to_switch(
    fields: list[tuple[bytes, bytes]], version: bytes, want: bytes | None
) -> None:
    assert upgrade_token(fields, version) == want


def test_a_switch_keeps_connection_upgrade_and_nothing_else_hop_by_hop() -> None:
    route = proxy_route("/api", "http://127.0.0.1:9", "--proxy")
    fields = [*WS_HEAD, (b"connection", b"x-secret"), (b"x-secret", b"s"), (b"keep-alive", b"5")]

    def up_fields(upgrade: bytes | None) -> list[tuple[bytes, bytes]]:
        return request_fields(
            route,
            fields,
            host=b"t",
            peer="127.0.0.1",
            trusted=False,
            tls=False,
            rewrite_host=False,
            length=None,
            has_content=False,
            upgrade=upgrade,
        )

    up = up_fields(b"websocket")
    names = [n for n, _ in up]
    assert (b"connection", b"upgrade") in up and (b"upgrade", b"websocket") in up
    assert names.count(b"connection") == 1 and names.count(b"upgrade") == 1
    assert b"x-secret" not in names and b"keep-alive" not in names
    assert (b"sec-websocket-key", b"dGhlIHNhbXBsZSBub25jZQ==") in up
    plain = up_fields(None)
    assert b"connection" not in [n for n, _ in plain] and b"upgrade" not in [n for n, _ in plain]


def test_the_101_keeps_its_upgrade_and_no_framing() -> None:
    route = proxy_route("/api", "http://127.0.0.1:9", "--proxy")
    got = [
        (b"connection", b"Upgrade, x-hop"),
        (b"upgrade", b"websocket"),
        (b"x-hop", b"1"),
        (b"sec-websocket-accept", b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo="),
        (b"content-length", b"0"),
    ]
    down, length = response_fields(route, got, switched=True)
    assert length is None
    assert (b"connection", b"upgrade") in down and (b"upgrade", b"websocket") in down
    names = [n for n, _ in down]
    assert b"x-hop" not in names and b"content-length" not in names
    assert (b"sec-websocket-accept", b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo=") in down
    plain, _ = response_fields(route, got)
    assert b"upgrade" not in [n for n, _ in plain]


async def test_over_http2_a_request_asking_to_switch_is_malformed_and_never_forwarded(
    root: Path,
) -> None:
    """RFC 9113 §8.2.2: Connection and Upgrade make an HTTP/2 request
    malformed; the stream is reset and nothing goes upstream (RFC 8441
    extended CONNECT is not offered: SETTINGS_ENABLE_CONNECT_PROTOCOL is
    never sent)."""
    cfg = make_config(root, proxy=("/api=http://127.0.0.1:9",))
    async with h2_memory(cfg) as (client, srv, _):
        client.conn.config.validate_outbound_headers = False
        client.conn.config.normalize_outbound_headers = False
        sid = client.request(
            "/api/ws", headers=[("connection", "upgrade"), ("upgrade", "websocket")]
        )
        await client.flush()
        with trio.fail_after(5):
            (r,) = await client.wait(sid)
        assert r.reset == ErrorCodes.PROTOCOL_ERROR
        assert srv.stats.proxy.requests == 0
        assert client.conn.remote_settings.enable_connect_protocol == 0  # RFC 8441: off
