"""A plain proxied GET's head is written without h11 (serverio.proxy.client
``_plain_head``): the same bytes h11 writes, h11's state untouched (IDLE,
the same h11 connection for the next exchange), and h11 told of the
request only when the fast response reader hands the response over to it,
which then reads it exactly as before.  A request h11's state machine has
something to note in (framing, a switch, Connection, Expect, TE), or whose
request line or Host is not plain, is still serialised by h11."""

from __future__ import annotations

import h11
import pytest
import trio
import trio.testing

from serverio.observe.stats import ProxyStats
from serverio.proxy.client import UpstreamConn, UpstreamError, _plain_head

from .test_proxy_fastresponse import CHUNKED, CL5, OK

Fields = list[tuple[bytes, bytes]]


def _by_h11(method: bytes, target: bytes, fields: Fields) -> bytes:
    conn = h11.Connection(h11.CLIENT)
    return conn.send(h11.Request(method=method, target=target, headers=fields)) + conn.send(
        h11.EndOfMessage()
    )


@pytest.mark.parametrize(
    "fields",
    [
        [(b"host", b"up:8000")],
        [(b"host", b"up"), (b"user-agent", b"wrk"), (b"via", b"1.1 serverio")],
        # Host not first: h11 writes it first, so does the plain head.
        [(b"accept", b"*/*"), (b"host", b"up"), (b"x-real-ip", b"::1"), (b"cookie", b"a=b; c=d")],
        [(b"host", b"up"), (b"forwarded", b'for="[::1]";host="up";proto=http'), (b"x", b"")],
    ],
)
@pytest.mark.parametrize("target", [b"/", b"/a%20b?q=1&r=%2F", b"*", b"/~x/y.bin"])
def test_a_plain_head_is_the_bytes_h11_writes(fields: Fields, target: bytes) -> None:
    assert _plain_head(b"GET", target, fields) == _by_h11(b"GET", target, fields)


@pytest.mark.parametrize(
    ("method", "target", "fields"),
    [
        (b"GET", b"/", [(b"host", b"up"), (b"content-length", b"0")]),
        (b"GET", b"/", [(b"host", b"up"), (b"transfer-encoding", b"chunked")]),
        (b"GET", b"/", [(b"host", b"up"), (b"upgrade", b"websocket")]),
        (b"GET", b"/", [(b"host", b"up"), (b"connection", b"close")]),
        (b"GET", b"/", [(b"host", b"up"), (b"expect", b"100-continue")]),
        (b"GET", b"/", [(b"host", b"up"), (b"te", b"trailers")]),
        (b"GET", b"/", [(b"host", b"up"), (b"host", b"evil")]),  # two Hosts
        (b"GET", b"/", [(b"user-agent", b"x")]),  # no Host
        (b"GET", b"/a b", [(b"host", b"up")]),  # a space in the target
        (b"GET", b"/\x7f", [(b"host", b"up")]),
        (b"GET", b"", [(b"host", b"up")]),
        (b"GET /x HTTP/1.1\r\nX:", b"/", [(b"host", b"up")]),  # not a token
        (b"", b"/", [(b"host", b"up")]),
    ],
)
def test_what_h11_notes_or_refuses_is_left_to_h11(
    method: bytes, target: bytes, fields: Fields
) -> None:
    assert _plain_head(method, target, fields) is None


def test_what_the_plain_head_declines_for_its_grammar_h11_refuses() -> None:
    for method, target in ((b"GET", b"/a b"), (b"G T", b"/"), (b"GET", b"")):
        with pytest.raises(h11.LocalProtocolError):
            _by_h11(method, target, [(b"host", b"up")])


async def _read_to_end(conn: UpstreamConn) -> tuple[int, bytes]:
    head = await conn.read_head()
    body = b""
    while True:
        event = await conn.next_event()
        if isinstance(event, h11.Data):
            body += event.data
        else:
            assert isinstance(event, h11.EndOfMessage)
            return head.status_code, body


async def test_a_plain_get_leaves_h11_idle_and_its_connection_is_pooled() -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    conn = UpstreamConn(ours)
    first = conn.h11
    stats = ProxyStats()
    fields = [(b"host", b"up"), (b"user-agent", b"t")]
    for n in range(4):
        await conn.send_request(b"GET", b"/%d" % n, fields, None, stats, checked=True)
        sent = await theirs.receive_some(65536)
        assert sent == _by_h11(b"GET", b"/%d" % n, fields)
        assert conn.h11.our_state is h11.IDLE  # h11 never saw the request
        await theirs.send_all(CHUNKED if n % 2 else CL5)
        assert await _read_to_end(conn) == (200, b"hello world" if n % 2 else b"hello")
        assert conn.reusable
        conn.next_cycle()
        assert conn.h11 is first  # no new h11 connection per exchange


@pytest.mark.parametrize(
    ("answer", "outcome", "pooled"),
    [
        # h11 reads these (the fast reader hands over): h11 is told of the
        # GET first, so it frames them as the answer to a GET.
        (b"HTTP/1.1 100 Continue\r\n\r\n" + CL5, (200, b"hello"), True),
        (OK + b"Transfer-Encoding: chunked\r\n\r\n1;x\r\na\r\n0\r\n\r\n", (200, b"a"), False),
        (OK + b"Connection: close\r\nContent-Length: 1\r\n\r\nz", (200, b"z"), False),
        (OK + b"Content-Length: 2\r\n\r\nabEXTRA", (200, b"ab"), False),
    ],
)
async def test_a_plain_get_whose_answer_h11_reads(
    answer: bytes, outcome: tuple[int, bytes], pooled: bool
) -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    conn = UpstreamConn(ours)
    await conn.send_request(b"GET", b"/", [(b"host", b"up")], None, ProxyStats(), checked=True)
    await theirs.receive_some(65536)
    await theirs.send_all(answer)
    assert await _read_to_end(conn) == outcome
    assert conn.reusable is pooled
    if pooled:  # h11's own cycle: the next request is h11's IDLE one again
        conn.next_cycle()
        await conn.send_request(b"GET", b"/2", [(b"host", b"up")], None, ProxyStats(), True)
        assert (await theirs.receive_some(65536)).startswith(b"GET /2 HTTP/1.1\r\n")
        await theirs.send_all(CL5)
        assert await _read_to_end(conn) == (200, b"hello")


@pytest.mark.parametrize(
    "answer",
    [
        OK + b"Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
        OK + b"Transfer-Encoding: gzip\r\n\r\nhello",
        OK + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n",
    ],
)
async def test_a_plain_get_whose_answer_h11_rejects_is_a_framing_error(answer: bytes) -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    conn = UpstreamConn(ours)
    await conn.send_request(b"GET", b"/", [(b"host", b"up")], None, ProxyStats(), checked=True)
    await theirs.receive_some(65536)
    await theirs.send_all(answer)
    with pytest.raises(UpstreamError) as caught:
        await _read_to_end(conn)
    assert caught.value.kind == "framing"
    assert not conn.reusable


async def test_a_request_h11_must_note_is_still_h11s() -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    conn = UpstreamConn(ours)
    fields = [(b"host", b"up"), (b"connection", b"close")]
    await conn.send_request(b"GET", b"/", fields, None, ProxyStats(), checked=True)
    assert await theirs.receive_some(65536) == _by_h11(b"GET", b"/", fields)
    assert conn.h11.our_state is h11.MUST_CLOSE  # h11 saw it: never pooled
    await theirs.send_all(CL5)
    assert await _read_to_end(conn) == (200, b"hello")
    assert not conn.reusable
