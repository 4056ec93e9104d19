"""The upstream response fast reader against h11, the judge.

Every input is read twice: by h11 alone (an ``h11.Connection`` in the
client role after a GET), and by :class:`ResponseReader` with the hand-off
to h11 that :class:`~serverio.proxy.client.UpstreamConn` does.  Both must
give the same outcome (status, reason, fields, body bytes, whether the
message ended, whether h11 rejected it), whole, byte by byte and split at
random places, with and without an EOF after the bytes.  What the fast
path accepted itself (no hand-off) is counted, so that the corpus is known
to exercise it.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import AsyncIterator

import h11
import pytest
import trio
import trio.testing

from serverio.observe.stats import ProxyStats
from serverio.proxy.client import UpstreamConn, UpstreamError
from serverio.wire.fastresponse import (
    BODY,
    DEFER,
    DEFERRED,
    DONE,
    HEAD,
    MAX_HEAD,
    TRANSITIONS,
    FastPhase,
    FastResponse,
    ResponseReader,
    parse_response,
)

Outcome = tuple[object, ...]


def _client() -> h11.Connection:
    c = h11.Connection(h11.CLIENT)
    c.send(h11.Request(method=b"GET", target=b"/", headers=[(b"host", b"up")]))
    c.send(h11.EndOfMessage())
    return c


def _drain(c: h11.Connection, out: list[object]) -> bool:
    """Events into ``out`` until h11 needs data; False once it ended/failed."""
    while True:
        try:
            event = c.next_event()
        except h11.RemoteProtocolError:
            out.append("error")
            return False
        if event is h11.NEED_DATA or event is h11.PAUSED:
            return True
        out.append(event)
        if isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
            return False


def _outcome(events: list[object]) -> Outcome:
    head: object = None
    body = b""
    end = "open"
    for e in events:
        if isinstance(e, (h11.Response, h11.InformationalResponse, FastResponse)):
            if isinstance(e, h11.InformationalResponse):
                head = ("info", e.status_code)
                continue
            head = (e.status_code, bytes(e.reason), [(bytes(n), bytes(v)) for n, v in e.headers])
        elif isinstance(e, h11.Data):
            body += bytes(e.data)
        elif isinstance(e, h11.EndOfMessage):
            end = "end"
        elif isinstance(e, h11.ConnectionClosed):
            end = "closed"
        elif e == "error":
            end = "error"
    return head, body, end


def by_h11(pieces: list[bytes], eof: bool) -> Outcome:
    c = _client()
    out: list[object] = []
    live = True
    for p in [*pieces, *([b""] if eof else [])]:
        if not live:
            break
        c.receive_data(p)
        live = _drain(c, out)
    return _outcome(out)


def by_fast(pieces: list[bytes], eof: bool) -> tuple[Outcome, bool, bool]:
    """The outcome, whether the head was the fast path's, and whether the
    whole message was (no hand-off at all)."""
    reader: ResponseReader | None = ResponseReader()
    c = _client()
    out: list[object] = []
    fast_head = False
    live = True
    for p in [*pieces, *([b""] if eof else [])]:
        if not live:
            break
        if reader is not None:
            reader.feed(p)
            while True:
                event = reader.event()
                if event is None:
                    break
                if event is DEFER:
                    c, _ = reader.handoff(c)
                    reader = None
                    live = _drain(c, out)
                    break
                if isinstance(event, FastResponse):
                    fast_head = True
                out.append(event)
                if isinstance(event, h11.EndOfMessage):
                    live = False
                    break
        else:
            c.receive_data(p)
            live = _drain(c, out)
    return _outcome(out), fast_head, reader is not None


def _splits(raw: bytes, rng: random.Random) -> list[list[bytes]]:
    ways = [[raw], [raw[i : i + 1] for i in range(len(raw))]]
    for _ in range(3):
        cuts = sorted(rng.sample(range(1, len(raw)), min(3, len(raw) - 1))) if len(raw) > 1 else []
        bounds = [0, *cuts, len(raw)]
        ways.append([raw[a:b] for a, b in itertools.pairwise(bounds)])
    return ways


def _agree(raw: bytes, rng: random.Random) -> tuple[int, int]:
    """Both readers agree on every split of ``raw``; returns how many
    reads had a fast head and how many were fast throughout."""
    heads = whole = 0
    for pieces in _splits(raw, rng):
        for eof in (False, True):
            want = by_h11(pieces, eof)
            got, fast_head, fast_all = by_fast(pieces, eof)
            assert got == want, (raw, pieces, eof)
            heads += fast_head
            whole += fast_all
    return heads, whole


OK = b"HTTP/1.1 200 OK\r\n"
CL5 = OK + b"Content-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello"
CHUNKED = OK + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"

ORDINARY = [
    CL5,
    CHUNKED,
    OK + b"Content-Length: 0\r\n\r\n",
    b"HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\nVia: 1.1 a\r\n\r\nno!",
    b"HTTP/1.1 503\r\nContent-Length: 1\r\n\r\nx",  # no reason
    b"HTTP/1.1 200 \r\nContent-Length: 1\r\n\r\nx",  # an empty reason
    OK + b"content-length: 2\r\nX-E:\r\nX-S:  \t \r\nX-In: a  b\t\tc\r\n\r\nab",
    OK + b"Set-Cookie: a=1\r\nSet-Cookie: b=2\r\nContent-Length: 1\r\n\r\nz",
    OK + b"Connection: close\r\nContent-Length: 1\r\n\r\nz",
    OK + b"Connection: keep-alive\r\nContent-Length: 1\r\n\r\nz",
    OK + b"Transfer-Encoding: chunked\r\n\r\nA\r\n0123456789\r\n0\r\n\r\n",
    OK + b"Transfer-Encoding: chunked\r\n\r\n00a\r\n0123456789\r\n000\r\n\r\n",
    OK + b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    OK + b"Content-Length: 1024\r\n\r\n" + bytes(range(256)) * 4,
    OK + b"Content-Length: 2\r\n\r\nabEXTRA",  # bytes past the end
]

HOSTILE = [
    # framing h11 decides (or rejects)
    OK + b"Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
    OK + b"Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
    OK + b"Content-Length: 5, 5\r\n\r\nhello",
    OK + b"Content-Length: +5\r\n\r\nhello",
    OK + b"Content-Length: 0x5\r\n\r\nhello",
    OK + b"Content-Length: 99999999999999999999999\r\n\r\nhello",
    OK + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    OK + b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
    OK + b"Transfer-Encoding: Chunked\r\n\r\n0\r\n\r\n",
    OK + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    OK + b"Transfer-Encoding: identity\r\n\r\nhello",
    OK + b"\r\nbody until the close",  # no framing: read to EOF
    # chunk syntax
    OK + b"Transfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\n\r\n",
    OK + b"Transfer-Encoding: chunked\r\n\r\n5 \r\nhello\r\n0\r\n\r\n",
    OK + b"Transfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n",
    OK + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n",
    OK + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\n0\r\n\r\n",
    OK + b"Transfer-Encoding: chunked\r\n\r\n6\r\nhello\r\n0\r\n\r\n",
    OK + b"Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
    OK + b"Transfer-Encoding: chunked\r\n\r\n-1\r\nh\r\n0\r\n\r\n",
    OK + b"Transfer-Encoding: chunked\r\n\r\n" + b"0" * 30 + b"1\r\nh\r\n0\r\n\r\n",
    OK + b"Transfer-Encoding: chunked\r\n\r\n0\r\nTrailer: x\r\n\r\n",
    OK + b"Transfer-Encoding: chunked\r\n\r\n0\r\nbad trailer\r\n\r\n",
    OK + b"Transfer-Encoding: chunked\r\n\r\n1\r\na\r\n",  # no last chunk (EOF)
    OK + b"Transfer-Encoding: chunked\r\n\r\n",
    OK + b"Content-Length: 10\r\n\r\nshort",
    # status lines
    b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx",
    b"HTTP/1.1 200 OK\nContent-Length: 1\n\nx",  # bare LF
    b"HTTP/1.1 200 OK\r\nContent-Length: 1\n\r\nx",
    b"HTTP/1.1 20 OK\r\nContent-Length: 1\r\n\r\nx",
    b"HTTP/1.1 2000 OK\r\nContent-Length: 1\r\n\r\nx",
    b"HTTP/1.1  200 OK\r\nContent-Length: 1\r\n\r\nx",
    b"HTTP/1.1 200 \xffOK\r\nContent-Length: 1\r\n\r\nx",
    b"HTTP/1.1 200 O\tK\r\nContent-Length: 1\r\n\r\nx",
    b"HTTP/1.1 200 O\x00K\r\nContent-Length: 1\r\n\r\nx",
    b"HTTP/2.0 200 OK\r\nContent-Length: 1\r\n\r\nx",
    b"http/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx",
    b"HTTP/1.1 999 ?\r\nContent-Length: 1\r\n\r\nx",
    b"HTTP/1.1 099 ?\r\nContent-Length: 1\r\n\r\nx",
    # bodiless and informational statuses
    b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\nhello",
    b"HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"HTTP/1.1 100 Continue\r\n\r\n" + CL5,
    b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + CHUNKED,
    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\nxx",
    # fields
    OK + b"Content-Length: 1\r\nX-Fold: a\r\n b\r\n\r\nx",  # obs-fold
    OK + b" Content-Length: 1\r\n\r\nx",
    OK + b"Content-Length : 1\r\n\r\nx",
    OK + b"Content-Length: 1\r\nX-Bin: \x80\x81\r\n\r\nx",
    OK + b"Content-Length: 1\r\nX-Ctl: a\x01b\r\n\r\nx",
    OK + b"Content-Length: 1\r\nX-Nul: a\x00b\r\n\r\nx",
    OK + b"Content-Length: 1\r\nX-CR: a\rb\r\n\r\nx",
    OK + b"Content-Length: 1\r\nNo colon\r\n\r\nx",
    OK + b"Content-Length: 1\r\n: empty name\r\n\r\nx",
    OK + b"Content-Length: 1\r\nX(y): z\r\n\r\nx",
    OK + b"Content-Length: 1\r\n" + b"X-Many: v\r\n" * 40 + b"\r\nx",
    OK + b"Content-Length: 1\r\nX-Big: " + b"v" * (MAX_HEAD + 10) + b"\r\n\r\nx",
    b"\r\n" + CL5,  # a leading blank line
    b"garbage\r\n\r\n",
    b"\nTTP/1.1 200 OK\r\nContent-Length: 1\r\n",  # h11 rejects before a blank line
    b"\tTTP/1.1 200 OK\r\nContent-Length: 5\r\n",
    b"",
]


def test_ordinary_responses_are_fast_and_exact() -> None:
    rng = random.Random(1)
    for raw in ORDINARY:
        heads, whole = _agree(raw, rng)
        assert heads > 0 and whole > 0, raw  # read by the fast path alone at least once


def test_hostile_responses_are_h11s_verdict() -> None:
    rng = random.Random(2)
    for raw in HOSTILE:
        _agree(raw, rng)


@pytest.mark.parametrize(
    "raw",
    [r for r in HOSTILE if r.startswith(OK) and b"\r\n\r\n" in r and b"\n " not in r],
)
def test_the_fast_path_never_accepts_what_h11_rejects(raw: bytes) -> None:
    """Whatever h11 rejects (on any split), the fast path's result is the
    same rejection: it never passes on a framing h11 refuses."""
    rng = random.Random(3)
    for pieces in _splits(raw, rng):
        want = by_h11(pieces, True)
        got, _, _ = by_fast(pieces, True)
        assert got == want
        if want[2] == "error":
            assert got[2] == "error"


def test_accepted_heads_carry_h11s_fields_and_framing() -> None:
    head = parse_response(CL5)
    assert head is not None
    assert (head.status_code, head.reason, head.length, head.keep_alive) == (200, b"OK", 5, True)
    assert head.headers == [(b"content-length", b"5"), (b"content-type", b"text/plain")]
    chunked = parse_response(CHUNKED)
    assert chunked is not None and chunked.length is None
    closing = parse_response(OK + b"Connection: Keep-Alive, CLOSE\r\nContent-Length: 0\r\n\r\n")
    assert closing is not None and not closing.keep_alive
    for declined in (b"HTTP/1.1 204 X\r\n\r\n", OK + b"\r\n", b"HTTP/1.1 100 C\r\n\r\n"):
        assert parse_response(declined) is None


def test_the_whole_1k_answer_is_read_without_h11() -> None:
    raw = OK + b"Content-Length: 1024\r\nContent-Type: x\r\n\r\n" + b"a" * 1024
    _, fast_head, fast_all = by_fast([raw], False)
    assert fast_head and fast_all
    raw = CHUNKED
    _, fast_head, fast_all = by_fast([raw], False)
    assert fast_head and fast_all


def test_a_big_chunk_is_streamed_as_it_arrives() -> None:
    size = 200_000
    raw = OK + b"Transfer-Encoding: chunked\r\n\r\n%x\r\n" % size + b"b" * size + b"\r\n0\r\n\r\n"
    pieces = [raw[i : i + 4096] for i in range(0, len(raw), 4096)]
    got, fast_head, fast_all = by_fast(pieces, False)
    assert got == by_h11(pieces, False)
    assert fast_head and fast_all
    assert got[1] == b"b" * size and got[2] == "end"
    # Cut inside the chunk's data (then EOF): h11's verdict, from where it was.
    cut = pieces[:10]
    assert by_fast(cut, True)[0] == by_h11(cut, True)
    assert by_h11(cut, True)[2] == "error"


# ---------------------------------------------------------------- the phase machine


def test_the_phase_table_has_a_row_per_phase_and_two_final_phases() -> None:
    assert set(TRANSITIONS) == set(FastPhase)
    assert [HEAD, BODY, DONE, DEFERRED] == list(FastPhase)
    assert {p for p, nxt in TRANSITIONS.items() if not nxt} == {DONE, DEFERRED}
    assert all(HEAD not in nxt for nxt in TRANSITIONS.values())  # one response per reader


@pytest.mark.parametrize("old", list(FastPhase))
@pytest.mark.parametrize("new", list(FastPhase))
def test_a_transition_the_table_does_not_list_is_refused(old: FastPhase, new: FastPhase) -> None:
    reader = ResponseReader()
    reader.phase = old
    if new in TRANSITIONS[old]:
        reader._to(new)
        assert reader.phase is new
    else:
        with pytest.raises(RuntimeError, match=f"{old.name} -> {new.name}"):
            reader._to(new)
        assert reader.phase is old


def _phases(raw: bytes, eof: bool = False) -> list[FastPhase]:
    """The phases a reader walks through for ``raw`` fed byte by byte."""
    reader = ResponseReader()
    seen = [reader.phase]
    for i in range(len(raw) + eof):
        reader.feed(raw[i : i + 1])
        while True:
            event = reader.event()
            if reader.phase is not seen[-1]:
                seen.append(reader.phase)
            if event is None or event is DEFER or isinstance(event, h11.EndOfMessage):
                break
    return seen


def test_the_phases_walked_and_when_the_connection_is_reusable() -> None:
    sized = OK + b"Content-Length: 3\r\n\r\nabc"
    assert _phases(sized) == [HEAD, BODY, DONE]
    assert _phases(CHUNKED) == [HEAD, BODY, DONE]
    assert _phases(b"HTTP/1.1 200 OK\r\n\r\n") == [HEAD, DEFERRED]  # no framing: h11's
    assert _phases(OK + b"Content-Length: 3\r\n\r\nab", eof=True) == [HEAD, BODY, DEFERRED]
    # After DONE nothing more is read; after DEFERRED every event is DEFER.
    reader = ResponseReader()
    reader.feed(sized)
    assert isinstance(reader.event(), FastResponse)
    assert reader.event() == h11.Data(data=b"abc")
    assert isinstance(reader.event(), h11.EndOfMessage)
    assert reader.phase is DONE and reader.event() is None and reader.reusable
    deferred = ResponseReader()
    deferred.feed(b"HTTP/1.0 200 OK\r\n\r\n")
    assert deferred.event() is DEFER and deferred.event() is DEFER
    assert deferred.phase is DEFERRED and not deferred.reusable
    # Reusable: read to the end, nothing past it, keep-alive (RFC 9112 §9.3).
    for raw, reusable in [
        (sized, True),
        (sized + b"HTTP/1.1", False),  # bytes past the end
        (OK + b"Connection: close\r\nContent-Length: 3\r\n\r\nabc", False),
        (OK + b"Content-Length: 3\r\n\r\nab", False),  # not at its end yet
    ]:
        reader = ResponseReader()
        reader.feed(raw)
        while (event := reader.event()) is not None and not isinstance(event, h11.EndOfMessage):
            pass
        assert reader.reusable is reusable, raw


def test_random_mutations_agree() -> None:
    """Seeded byte mutations of the corpus, each read on several splits:
    agree or defer (600 here; a one-off local run of 20,000 other seeded
    mutations agreed as well)."""
    rng = random.Random(4)
    alphabet = b"\r\n \t:;,0123456789aAfFxz\x00\x7f\x80"
    base = [r for r in ORDINARY + HOSTILE if r]
    for _ in range(600):
        raw = bytearray(rng.choice(base))
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(raw))
            op = rng.randrange(3)
            if op == 0:
                raw[i] = rng.choice(alphabet)
            elif op == 1:
                raw.insert(i, rng.choice(alphabet))
            elif len(raw) > 1:
                del raw[i]
        _agree(bytes(raw), rng)


# ------------------------------------------------ the client's use of it


async def _exchange(answer: bytes, method: bytes = b"GET") -> tuple[UpstreamConn, object, bytes]:
    """One exchange on an UpstreamConn over memory streams: the head, the
    body read to its end (or the UpstreamError), and the request bytes."""
    ours, theirs = trio.testing.memory_stream_pair()
    conn = UpstreamConn(ours)
    await conn.send_request(method, b"/x", [(b"host", b"up")], None, ProxyStats())
    sent = await theirs.receive_some(65536)
    await theirs.send_all(answer)
    head = await conn.read_head()
    body = b""
    try:
        while True:
            event = await conn.next_event()
            if isinstance(event, h11.Data):
                body += event.data
            else:
                assert isinstance(event, h11.EndOfMessage)
                break
    except UpstreamError as exc:
        return conn, exc, bytes(sent)
    return conn, (head.status_code, body), bytes(sent)


async def test_a_fast_exchange_is_pooled_and_the_next_one_works() -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    conn = UpstreamConn(ours)
    stats = ProxyStats()
    for n in range(3):
        await conn.send_request(b"GET", b"/%d" % n, [(b"host", b"up")], None, stats)
        sent = await theirs.receive_some(65536)
        assert sent.startswith(b"GET /%d HTTP/1.1\r\n" % n)
        await theirs.send_all(CHUNKED if n % 2 else CL5)
        head = await conn.read_head()
        assert isinstance(head, FastResponse)
        while not isinstance(await conn.next_event(), h11.EndOfMessage):
            pass
        assert conn.reusable
        conn.next_cycle()


@pytest.mark.parametrize(
    "answer",
    [
        OK + b"Connection: close\r\nContent-Length: 1\r\n\r\nz",
        OK + b"Content-Length: 2\r\n\r\nabEXTRA",  # bytes past the end
        OK + b"Transfer-Encoding: chunked\r\n\r\n1;x\r\na\r\n0\r\n\r\n",  # h11's body rest
    ],
)
async def test_what_the_fast_path_cannot_vouch_for_is_not_pooled(answer: bytes) -> None:
    conn, outcome, _ = await _exchange(answer)
    assert not isinstance(outcome, UpstreamError)
    assert not conn.reusable


async def test_a_head_request_and_an_informational_head_are_h11s() -> None:
    conn, outcome, _ = await _exchange(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", b"HEAD")
    assert outcome == (200, b"")  # no content for HEAD (RFC 9110 §9.3.2), h11 knows
    assert conn.reusable
    conn.next_cycle()
    conn, outcome, _ = await _exchange(b"HTTP/1.1 100 Continue\r\n\r\n" + CL5)
    assert outcome == (200, b"hello")


@pytest.mark.parametrize(
    "answer",
    [
        OK + b"Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
        OK + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n",
        OK + b"Transfer-Encoding: gzip\r\n\r\nhello",
        OK + b"X-Nul: a\x00b\r\nContent-Length: 1\r\n\r\nx",
    ],
)
async def test_what_h11_rejects_is_a_framing_error(answer: bytes) -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    conn = UpstreamConn(ours)
    await conn.send_request(b"GET", b"/", [(b"host", b"up")], None, ProxyStats())
    await theirs.receive_some(65536)
    await theirs.send_all(answer)
    with pytest.raises(UpstreamError) as caught:
        await conn.read_head()
        while not isinstance(await conn.next_event(), h11.EndOfMessage):
            pass
    assert caught.value.kind == "framing"
    assert not conn.reusable


CLTE = [
    OK + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n",
    OK + b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n2\r\nab\r\n0\r\n\r\n",
    OK + b"Content-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n",
]


@pytest.mark.parametrize("answer", CLTE)
def test_both_framings_are_deferred_to_h11_which_reads_them_chunked(answer: bytes) -> None:
    """Content-Length with Transfer-Encoding: the fast path never accepts
    it (it defers; the judge and it agree), and h11 reads the body by the
    chunked coding with the Content-Length still among the fields (RFC
    9112 §6.3 item 3): why the upstream client refuses such a head."""
    assert parse_response(answer) is None
    rng = random.Random(5)
    heads, _ = _agree(answer, rng)
    assert heads == 0  # never the fast path's own
    head, body, end = by_h11([answer], False)
    assert body == b"ab" and end == "end"
    assert isinstance(head, tuple)
    names = [name for name, _ in head[2]]
    assert b"content-length" in names and b"transfer-encoding" in names


async def _content() -> AsyncIterator[bytes]:
    yield b"abc"


@pytest.mark.parametrize("answer", CLTE)
@pytest.mark.parametrize("method", [b"GET", b"POST", b"HEAD"])
async def test_both_framings_are_a_framing_error_never_pooled(answer: bytes, method: bytes) -> None:
    """GET: read by the fast reader, which defers to h11; POST (content):
    by h11 from the start; HEAD: h11's too.  Each refuses the head
    (UpstreamError ``framing``: the proxy's 502) and the connection is
    never reused."""
    ours, theirs = trio.testing.memory_stream_pair()
    conn = UpstreamConn(ours)
    fields = [(b"host", b"up")]
    content = None
    if method == b"POST":
        fields.append((b"content-length", b"3"))
        content = _content()
    await conn.send_request(method, b"/", fields, content, ProxyStats())
    await theirs.receive_some(65536)
    await theirs.send_all(answer)
    with pytest.raises(UpstreamError) as caught:
        await conn.read_head()
    assert caught.value.kind == "framing"
    assert "Transfer-Encoding" in str(caught.value)
    assert not conn.reusable
