"""serverio.net.h1state: the HTTP/1.1 connection's phase table, its guard,
and the transitions a real connection walks over memory streams: keep-alive
(BUSY goes on to the next request), close (every reason to close moves
BUSY to LAST) and upgrade (a 101 hands the connection to its tunnel)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from serverio.app.server import Server
from serverio.config import Config
from serverio.http.core import Plan, RequestFacts
from serverio.model import Body
from serverio.net.h1state import (
    BUSY,
    CLOSED,
    DRAIN,
    FIRST,
    HANDSHAKE,
    HEAD,
    IDLE,
    LAST,
    SLACK,
    STREAM,
    SWITCHED,
    TRANSITIONS,
    TUNNEL,
    Lifetime,
    Phase,
)
from serverio.pipeline.handler import Handler, watching_client
from serverio.pipeline.hooks import Hooks, RawHead, TunnelBody, Upload

from .conftest import HTTPClient, make_config, memory_connection, wait_until

Step = tuple[Phase, Phase]


def test_every_phase_has_a_row_and_the_constants_are_the_members() -> None:
    assert set(TRANSITIONS) == set(Phase)
    members = [FIRST, HANDSHAKE, IDLE, HEAD, BUSY, STREAM, SWITCHED, CLOSED, DRAIN, TUNNEL, LAST]
    assert members == list(Phase)


def test_every_phase_is_reachable_from_first_and_only_closed_is_final() -> None:
    seen = {FIRST}
    todo = [FIRST]
    while todo:
        for nxt in TRANSITIONS[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    assert seen == set(Phase)
    assert {p for p, nxt in TRANSITIONS.items() if not nxt} == {CLOSED}
    assert all(FIRST not in nxt for nxt in TRANSITIONS.values())


def test_the_last_request_leads_only_to_the_end() -> None:
    # Keep-alive off: no next request (IDLE, HEAD), no drain of unread
    # content, no way back to keep-alive; an event stream and a tunnel
    # close the connection too.
    assert TRANSITIONS[LAST] == {STREAM, TUNNEL, CLOSED}
    assert LAST in TRANSITIONS[BUSY] and TUNNEL in TRANSITIONS[BUSY]
    assert [p for p, nxt in TRANSITIONS.items() if LAST in nxt] == [BUSY]
    for end in (STREAM, TUNNEL):
        assert TRANSITIONS[end] == {CLOSED}
    life = Lifetime()
    life.phase = LAST
    assert life.in_flight  # a drain lets the last answer finish


@pytest.mark.parametrize("old", list(Phase))
@pytest.mark.parametrize("new", list(Phase))
def test_to_allows_exactly_the_table(old: Phase, new: Phase) -> None:
    life = Lifetime()
    life.phase = old
    if new in TRANSITIONS[old]:
        life.to(new)
        assert life.phase is new
    else:
        with pytest.raises(RuntimeError, match=f"{old.name} -> {new.name}"):
            life.to(new)
        assert life.phase is old


@pytest.mark.parametrize("old", list(Phase))
def test_close_after_is_busy_to_last_once(old: Phase) -> None:
    life = Lifetime()
    life.phase = old
    if old in (BUSY, LAST):
        life.close_after()
        life.close_after()  # a second reason to close changes nothing
        assert life.phase is LAST
    else:
        with pytest.raises(RuntimeError, match=f"{old.name} -> LAST"):
            life.close_after()


# ---------------------------------------------------------------- a real connection


@pytest.fixture
def steps(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Step]]:
    """Every transition a Lifetime makes (``to`` and ``arm``)."""
    seen: list[Step] = []
    to, arm = Lifetime.to, Lifetime.arm

    def recording_to(self: Lifetime, new: Phase) -> None:
        old = self.phase
        to(self, new)
        seen.append((old, new))

    def recording_arm(self: Lifetime, phase: Phase, timeout: float) -> None:
        old = self.phase
        arm(self, phase, timeout)
        seen.append((old, phase))

    monkeypatch.setattr(Lifetime, "to", recording_to)
    monkeypatch.setattr(Lifetime, "arm", recording_arm)
    yield seen


async def _closed(client: HTTPClient) -> bool:
    """The server closed the connection (EOF after the last response)."""
    with trio.fail_after(5):
        return await client.stream.receive_some(100) == b""


def _get(target: str = "/hello.txt", fields: str = "", version: str = "1.1") -> bytes:
    return f"GET {target} HTTP/{version}\r\nHost: t\r\n{fields}\r\n".encode()


async def test_keep_alive_goes_on_to_the_next_request(root: Path, steps: list[Step]) -> None:
    async with memory_connection(make_config(root)) as (client, _, conn):
        for _ in range(3):
            r = await client.get("/hello.txt")
            assert r.status == 200 and r.header("connection") is None
        await wait_until(lambda: conn.life.phase is IDLE)  # waiting for a fourth
    assert (BUSY, LAST) not in steps
    # Each answered request went back to waiting for the next one.
    assert [s for s in steps if s[0] is BUSY] == [(BUSY, IDLE)] * 3


@pytest.mark.parametrize(
    ("request_bytes", "kw", "status"),
    [
        (_get(fields="Connection: close\r\n"), {}, 200),  # RFC 9112 §9.6
        (_get(version="1.0"), {}, 200),  # HTTP/1.0 without keep-alive, RFC 9112 §9.3
        (_get(fields="Connection: keep-alive, close\r\n", version="1.0"), {}, 200),
        (_get(), {"max_requests": 1}, 200),  # --max-requests reached
        (_get("/a\\b"), {}, 400),  # no request facts: the error is the last answer
    ],
    ids=["close", "http10", "http10-close", "max-requests", "no-facts"],
)
async def test_each_reason_to_close_moves_busy_to_last(
    root: Path, steps: list[Step], request_bytes: bytes, kw: dict[str, object], status: int
) -> None:
    async with memory_connection(make_config(root, **kw)) as (client, _, conn):
        await client.send_raw(request_bytes)
        r = await client.read_response()
        assert r.status == status
        assert r.header("connection") == "close"
        assert await _closed(client)
        await wait_until(lambda: conn.life.phase is CLOSED)
    assert steps.count((BUSY, LAST)) == 1
    assert steps[-1] == (BUSY, LAST)  # then only the end (run's finally: CLOSED)


async def test_a_drained_body_keeps_the_connection_and_an_undrainable_one_closes(
    root: Path, steps: list[Step]
) -> None:
    async with memory_connection(make_config(root)) as (client, _, _):
        small = b"POST /hello.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n" + b"z" * 10
        await client.send_raw(small)
        assert (await client.read_response()).status == 405
        assert (await client.get("/hello.txt")).status == 200
    # BUSY -> DRAIN -> BUSY (the unread content drained), then the next request.
    assert [s for s in steps if DRAIN in s] == [(BUSY, DRAIN), (DRAIN, BUSY)]
    assert (BUSY, LAST) not in steps
    steps.clear()
    async with memory_connection(make_config(root)) as (client, _, _):
        # Past BodyPolicy.drain_max: not worth reading to keep the connection.
        huge = b"POST /hello.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 100000000\r\n\r\n"
        await client.send_raw(huge)
        r = await client.read_response()
        assert r.status == 405 and r.header("connection") == "close"
    assert (BUSY, LAST) in steps and not any(DRAIN in s for s in steps)


class _Tunnel:
    """A tunnel that greets the client and ends."""

    def __init__(self) -> None:
        self.ran = False
        self.closed = False

    async def run(self, client: trio.abc.Stream, initial: bytes) -> int:
        self.ran = True
        await client.send_all(b"tunnel bytes")
        return 12

    def close(self) -> None:
        self.closed = True


class _Switch:
    """A proxy hook: a 101 with a tunnel for /ws; for /wait, a 200 once
    :attr:`go` is set (the request waits, its client watched meanwhile)."""

    def __init__(self) -> None:
        self.tunnel = _Tunnel()
        self.waiting = trio.Event()
        self.go = trio.Event()

    def match(self, req: RequestFacts) -> object | None:
        return req.target.segments[0] if req.target.segments in (("ws",), ("wait",)) else None

    def fallback(self, req: RequestFacts) -> object | None:
        return None

    async def forward(
        self,
        route: object,
        req: RequestFacts,
        head: RawHead,
        content: Upload | None,
        now: float,
        client: object,
        authed: bool = False,
    ) -> tuple[Plan, Body]:
        if route == "wait":
            self.waiting.set()
            async with watching_client():  # as the proxy waits for its upstream
                await self.go.wait()
            return Plan(200, ((b"content-length", b"2"),)), Body((b"ok",))
        fields = ((b"connection", b"upgrade"), (b"upgrade", b"websocket"))
        return Plan(101, fields), TunnelBody(self.tunnel)


def _switching(cfg: Config, hook: _Switch) -> Server:
    srv = Server(cfg)
    old = srv.handler
    srv.services.handler = srv.env.handler = Handler(
        cfg,
        lambda: srv.opener,
        fs=old.fs,
        files=old.files,
        content=old.content,
        hooks=Hooks(proxy=hook),
    )
    return srv


@pytest.mark.parametrize("close", [False, True], ids=["upgrade", "upgrade-close"])
async def test_a_101_hands_the_connection_to_its_tunnel(
    root: Path, steps: list[Step], close: bool
) -> None:
    hook = _Switch()
    cfg = make_config(root)
    tokens = "upgrade, close" if close else "upgrade"
    ask = _get("/ws", f"Connection: {tokens}\r\nUpgrade: websocket\r\n")
    async with memory_connection(cfg, server=_switching(cfg, hook)) as (client, _, conn):
        await client.send_raw(ask + _get())  # a request after it is never read
        got = b""
        with trio.fail_after(5):
            while not got.endswith(b"tunnel bytes"):
                got += await client.stream.receive_some(1000)
            assert await client.stream.receive_some(100) == b""
        await wait_until(lambda: conn.life.phase is CLOSED)
    head = got.split(b"\r\n\r\n")[0].lower()
    assert head.startswith(b"http/1.1 101 ") and b"connection: close" not in head
    assert hook.tunnel.ran and hook.tunnel.closed
    want = [(BUSY, LAST), (LAST, TUNNEL)] if close else [(BUSY, TUNNEL)]
    assert steps[-len(want) :] == want


async def test_a_client_that_half_closed_while_it_waited_gets_the_last_answer(
    root: Path, steps: list[Step]
) -> None:
    # RFC 9112 §9.6: the client may close its sending side first and still
    # read the answer; nothing pipelined, so it is the connection's last.
    hook = _Switch()
    cfg = make_config(root)
    async with memory_connection(cfg, server=_switching(cfg, hook)) as (client, _, conn):
        await client.send_raw(_get("/wait"))
        with trio.fail_after(5):
            await hook.waiting.wait()
        await client.stream.send_eof()  # type: ignore[attr-defined]
        await wait_until(lambda: conn.reader.peer_eof)  # the watcher saw the half-close
        hook.go.set()
        r = await client.read_response()
        assert (r.status, r.body) == (200, b"ok") and r.header("connection") == "close"
        assert await _closed(client)
    assert steps[-1] == (BUSY, LAST)


async def test_a_read_deadline_is_moved_only_past_its_slack(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Lifetime.arm leaves a deadline that is at most timeout x SLACK
    sooner than asked (a keep-alive connection re-arms it per request);
    one later than asked, or sooner by more, is moved; after a lift the
    next arm sets it."""
    life = Lifetime()
    with trio.CancelScope() as scope:
        life.scope = scope
        start = trio.current_time()
        life.arm(HEAD, 64)
        life.to(BUSY)
        life.arm(IDLE, 64)
        assert scope.deadline == start + 64
        await trio.sleep(0.5)  # within 64 s x 1/64
        life.to(BUSY)
        life.arm(IDLE, 64)
        assert scope.deadline == start + 64  # left: 0.5 s sooner than asked
        assert 0.5 <= 64 * SLACK
        await trio.sleep(1.0)  # 1.5 s after it was set: past the slack
        life.to(BUSY)
        life.arm(IDLE, 64)
        assert scope.deadline == start + 65.5
        life.arm(HEAD, 10)  # sooner than the one there: moved
        assert scope.deadline == start + 11.5
        life.to(BUSY)
        life.lift()
        assert scope.deadline == math.inf
        life.arm(IDLE, 64)
        assert scope.deadline == start + 65.5
