"""The HTTP/1.1 request-body reader (serverio.net.h1body) over trio memory
streams: Content-Length, chunked with extensions and trailers,
100-continue, the size limit (declared and streamed), the idle and total
deadlines on trio's MockClock, the client leaving mid-body, and the
bounded drain that keeps a pipelined next request intact."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import trio
import trio.testing

from serverio.net.h1body import CONTINUE, H1Body
from serverio.net.reqbody import (
    BodyMalformed,
    BodyPolicy,
    BodyState,
    BodyTimeout,
    BodyTooLarge,
    ClientGone,
)
from serverio.wire.bodyframe import Framing, FramingKind, request_framing

NEXT = b"GET /next HTTP/1.1\r\nHost: a\r\n\r\n"
POLICY = BodyPolicy(
    max_size=1000,
    idle_timeout=10.0,
    total_timeout=60.0,
    drain_max=200,
    drain_timeout=2.0,
    chunk_max=64,
)


Stream = trio.StapledStream[trio.testing.MemorySendStream, trio.testing.MemoryReceiveStream]


@dataclass
class Wire:
    """The server end of a memory stream, counting what the body reads."""

    client: Stream
    server: Stream
    read: int = 0
    receives: int = 0
    sent: list[bytes] = field(default_factory=list)

    async def receive_some(self, n: int) -> bytes | bytearray:
        self.receives += 1
        data = await self.server.receive_some(n)
        self.read += len(data)
        return data

    async def send(self, data: bytes) -> None:
        self.sent.append(data)
        await self.server.send_all(data)


def wire() -> Wire:
    client, server = trio.testing.memory_stream_pair()
    return Wire(client, server)


def body_of(
    w: Wire, framing: Framing, buffered: bytes = b"", policy: BodyPolicy = POLICY
) -> H1Body:
    return H1Body(framing, policy, w.receive_some, buffered, send_continue=w.send)


def state(body: H1Body) -> BodyState:
    """The body's state, read afresh (mypy would keep an earlier narrowing)."""
    return body.state


async def read_all(body: H1Body) -> bytes:
    out = []
    async for chunk in body:
        assert 0 < len(chunk) <= body.policy.chunk_max
        out.append(chunk)
    return b"".join(out)


def chunked(content: bytes, size: int = 7) -> bytes:
    out = b""
    for i in range(0, len(content), size):
        piece = content[i : i + size]
        out += b'%x;ext=%d;q="a b"\r\n' % (len(piece), i) + piece + b"\r\n"
    return out + b"0\r\nDigest: sha-256=:x:\r\nX-Trailer: y\r\n\r\n"


CONTENT = bytes(range(256)) + b"the end"


# ------------------------------------------------------------ framings


@pytest.mark.parametrize("split", ["buffered", "stream", "both"])
@pytest.mark.parametrize("kind", ["length", "chunked"])
async def test_body_and_pipelined_rest(split: str, kind: str) -> None:
    """The content comes out whole, in bounded chunks; what follows it (the
    next request) is given back exactly, whichever source held it."""
    if kind == "length":
        framing = request_framing([(b"content-length", b"%d" % len(CONTENT))], b"1.1")
        wire_bytes = CONTENT
    else:
        framing = request_framing([(b"transfer-encoding", b"chunked")], b"1.1")
        wire_bytes = chunked(CONTENT)
    data = wire_bytes + NEXT
    cut = {"buffered": len(data), "stream": 0, "both": len(data) // 2}[split]
    w = wire()
    if cut < len(data):
        await w.client.send_all(data[cut:])
    body = body_of(w, framing, data[:cut])
    assert state(body) is BodyState.NOT_STARTED
    assert body.declared == (len(CONTENT) if kind == "length" else None)
    assert await read_all(body) == CONTENT
    assert state(body) is BodyState.DONE
    assert body.received == len(CONTENT)
    # The reader may have read into the next request; whatever it read of
    # it is in leftover, the rest still in the stream.
    assert body.leftover + data[cut:][w.read :] == NEXT
    assert not w.sent  # no 100-continue was asked for


async def test_no_body_is_done_at_once() -> None:
    w = wire()
    body = body_of(w, Framing(FramingKind.NONE), NEXT)
    assert state(body) is BodyState.DONE
    assert await read_all(body) == b""
    assert await body.drain()
    assert body.leftover == NEXT and w.receives == 0


async def test_content_length_zero() -> None:
    w = wire()
    body = body_of(w, Framing(FramingKind.LENGTH, 0, True), NEXT)
    assert await read_all(body) == b"" and body.leftover == NEXT
    assert not w.sent and w.receives == 0  # nothing to continue for


async def test_malformed_chunked_is_400() -> None:
    w = wire()
    await w.client.send_all(b"5\r\nhello\n0\r\n\r\n")
    body = body_of(w, Framing(FramingKind.CHUNKED))
    with pytest.raises(BodyMalformed) as info:
        await read_all(body)
    assert info.value.status == 400 and info.value.close
    assert state(body) is BodyState.FAILED
    with pytest.raises(BodyMalformed):
        await body.next_chunk()  # stays failed
    assert not await body.drain()


# ------------------------------------------------------------ 100-continue


async def test_continue_sent_once_when_asked() -> None:
    """RFC 9110 §10.1.1: 100 Continue goes out when the handler first asks
    for the content, once; the client sends the body after it."""
    w = wire()
    framing = Framing(FramingKind.LENGTH, len(CONTENT), True)
    body = body_of(w, framing)

    async def client() -> None:
        got = b""
        while len(got) < len(CONTINUE):
            got += await w.client.receive_some(100)
        assert got == CONTINUE
        await w.client.send_all(CONTENT + NEXT)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(client)
        await trio.testing.wait_all_tasks_blocked()
        assert not w.sent  # not before the handler asks
        assert await read_all(body) == CONTENT
    assert w.sent == [CONTINUE]
    assert body.continue_sent
    assert body.leftover + (CONTENT + NEXT)[w.read :] == NEXT


async def test_continue_not_asked_never_sent(autojump_clock: trio.testing.MockClock) -> None:
    """A response decided before the handler asks (a 4xx) is sent without
    100 Continue and without reading; the body cannot be drained (the next
    bytes may be content or the next request), so the connection closes."""
    w = wire()
    body = body_of(w, Framing(FramingKind.LENGTH, 10, True))
    assert not await body.drain()
    assert state(body) is BodyState.FAILED
    assert w.sent == [] and w.receives == 0
    with trio.move_on_after(1) as scope:
        await w.client.receive_some(10)
    assert scope.cancelled_caught  # nothing at all reached the client
    assert not body.continue_sent


async def test_continue_without_send_callback() -> None:
    """No callback (the transport sends nothing): the body is still read."""
    w = wire()
    await w.client.send_all(b"abc")
    body = H1Body(Framing(FramingKind.LENGTH, 3, True), POLICY, w.receive_some)
    assert await read_all(body) == b"abc"


# ------------------------------------------------------------ size


@pytest.mark.parametrize("expect", [False, True])
async def test_too_large_declared_refused_before_reading(expect: bool) -> None:
    w = wire()
    await w.client.send_all(b"x" * 2000)
    body = body_of(w, Framing(FramingKind.LENGTH, 2000, expect))
    assert body.refused() is not None
    with pytest.raises(BodyTooLarge) as info:
        await body.next_chunk()
    assert info.value.status == 413 and info.value.close
    assert w.receives == 0 and w.read == 0  # not a byte of the body was read
    assert w.sent == []  # and no 100 Continue invited it
    assert state(body) is BodyState.FAILED
    assert not await body.drain()
    assert w.receives == 0


async def test_too_large_streamed_is_cut_at_the_limit() -> None:
    """Chunked, no declared length: exactly max_size bytes reach the
    handler, then 413; it never sees a byte past the limit."""
    policy = BodyPolicy(max_size=100, chunk_max=64)
    w = wire()
    await w.client.send_all(chunked(b"y" * 300, size=30))
    body = body_of(w, Framing(FramingKind.CHUNKED), policy=policy)
    got = b""
    with pytest.raises(BodyTooLarge) as info:
        async for chunk in body:
            got += chunk
    assert info.value.status == 413
    assert got == b"y" * 100
    assert body.received == 100
    assert state(body) is BodyState.FAILED


async def test_exactly_max_size_is_fine() -> None:
    policy = BodyPolicy(max_size=90, chunk_max=64)
    w = wire()
    await w.client.send_all(chunked(b"z" * 90, size=30) + NEXT)
    body = body_of(w, Framing(FramingKind.CHUNKED), policy=policy)
    assert await read_all(body) == b"z" * 90
    assert body.leftover == NEXT


# ------------------------------------------------------------ deadlines


async def test_idle_deadline(autojump_clock: trio.testing.MockClock) -> None:
    w = wire()
    await w.client.send_all(b"abc")  # then nothing
    body = body_of(w, Framing(FramingKind.LENGTH, 10))
    start = trio.current_time()
    assert await body.next_chunk() == b"abc"
    with pytest.raises(BodyTimeout) as info:
        await body.next_chunk()
    assert info.value.status == 408 and "idle" in info.value.detail
    assert trio.current_time() - start == pytest.approx(POLICY.idle_timeout)
    assert state(body) is BodyState.FAILED


async def test_total_deadline_beats_a_trickle(autojump_clock: trio.testing.MockClock) -> None:
    """A byte every 7 s never trips the 10 s idle deadline, but the whole
    body still has total_timeout (60 s)."""
    w = wire()
    body = body_of(w, Framing(FramingKind.LENGTH, 1000))

    async def trickle() -> None:
        for _ in range(1000):
            await trio.sleep(7.0)
            await w.client.send_all(b"t")

    got = 0
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trickle)
        start = trio.current_time()
        with pytest.raises(BodyTimeout) as info:
            async for chunk in body:
                got += len(chunk)
        nursery.cancel_scope.cancel()
    assert "total" in info.value.detail
    assert trio.current_time() - start == pytest.approx(POLICY.total_timeout)
    # Every chunk arrived within the idle deadline: the trickle got through.
    assert got == 8  # at 7, 14, ..., 56 s


async def test_outer_cancel_leaves_the_body_failed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    w = wire()
    body = body_of(w, Framing(FramingKind.LENGTH, 10))
    with trio.move_on_after(1):
        await body.next_chunk()
    assert state(body) is BodyState.FAILED
    assert not await body.drain()


# ------------------------------------------------------------ client gone


@pytest.mark.parametrize("kind", ["length", "chunked"])
async def test_client_gone_mid_body(kind: str) -> None:
    w = wire()
    if kind == "length":
        framing = Framing(FramingKind.LENGTH, 100)
        await w.client.send_all(b"x" * 40)
    else:
        framing = Framing(FramingKind.CHUNKED)
        await w.client.send_all(b"64\r\n" + b"x" * 40)
    await w.client.send_eof()
    body = body_of(w, framing)
    got = b""
    with pytest.raises(ClientGone):
        async for chunk in body:
            got += chunk
    assert got == b"x" * 40
    assert state(body) is BodyState.FAILED
    assert not await body.drain()


async def test_broken_stream_is_client_gone() -> None:
    async def broken(n: int) -> bytes:
        raise trio.BrokenResourceError("reset")

    body = H1Body(Framing(FramingKind.LENGTH, 5), POLICY, broken)
    with pytest.raises(ClientGone):
        await body.next_chunk()


async def test_continue_to_a_gone_client() -> None:
    async def nothing(n: int) -> bytes:
        raise AssertionError("must not read")

    async def broken(data: bytes) -> None:
        raise trio.BrokenResourceError("reset")

    body = H1Body(Framing(FramingKind.LENGTH, 5, True), POLICY, nothing, send_continue=broken)
    with pytest.raises(trio.BrokenResourceError):
        await body.next_chunk()
    assert state(body) is BodyState.FAILED


# ------------------------------------------------------------ drain


@pytest.mark.parametrize("kind", ["length", "chunked"])
@pytest.mark.parametrize("in_buffer", [False, True])
async def test_drain_small_body_keeps_the_next_request(kind: str, in_buffer: bool) -> None:
    """A 405 to a small POST: the unread body is drained, the pipelined next
    request's bytes come back exactly, the connection can stay open."""
    content = b"k" * 150
    if kind == "length":
        framing = Framing(FramingKind.LENGTH, len(content))
        data = content + NEXT
    else:
        framing = Framing(FramingKind.CHUNKED)
        data = chunked(content) + NEXT
    w = wire()
    streamed = b"" if in_buffer else data
    await w.client.send_all(streamed)
    body = body_of(w, framing, data if in_buffer else b"")
    assert await body.drain()
    assert state(body) is BodyState.DONE
    assert body.leftover + streamed[w.read :] == NEXT
    assert await body.drain()  # again: already done


async def test_drain_partly_read_body() -> None:
    w = wire()
    await w.client.send_all(b"a" * 100 + NEXT)
    body = body_of(w, Framing(FramingKind.LENGTH, 100))
    assert await body.next_chunk() == b"a" * 64
    assert await body.drain(limit=36)
    assert body.leftover + (b"a" * 100 + NEXT)[w.read :] == NEXT


async def test_drain_refuses_a_large_declared_body_without_reading() -> None:
    w = wire()
    await w.client.send_all(b"a" * 300)
    body = body_of(w, Framing(FramingKind.LENGTH, 300))
    assert not await body.drain()  # 300 > drain_max 200
    assert w.receives == 0
    body = body_of(w, Framing(FramingKind.LENGTH, 150))
    assert not await body.drain(limit=100)  # the caller's bound is lower
    assert w.receives == 0


async def test_drain_stops_at_its_byte_bound() -> None:
    """Chunked (no declared length): the drain reads past its bound by at
    most one chunk, then gives up."""
    w = wire()
    await w.client.send_all(chunked(b"b" * 5000, size=100))
    body = body_of(w, Framing(FramingKind.CHUNKED))
    assert not await body.drain()
    assert state(body) is BodyState.FAILED
    assert body.received <= POLICY.drain_max + POLICY.chunk_max


async def test_drain_stops_at_its_time_bound(autojump_clock: trio.testing.MockClock) -> None:
    w = wire()
    await w.client.send_all(b"c" * 10)  # 10 of 100, then silence
    body = body_of(w, Framing(FramingKind.LENGTH, 100))
    start = trio.current_time()
    assert not await body.drain()
    assert trio.current_time() - start == pytest.approx(POLICY.drain_timeout)
    assert state(body) is BodyState.FAILED


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_size", -1),
        ("drain_max", -1),
        ("chunk_max", 0),
        ("idle_timeout", 0.0),
        ("total_timeout", float("nan")),
        ("drain_timeout", -1.0),
    ],
)
def test_policy_refuses_bad_values(field: str, value: float) -> None:
    from serverio.errors import ConfigError

    with pytest.raises(ConfigError, match=field):
        BodyPolicy(**{field: value})  # type: ignore[arg-type]
