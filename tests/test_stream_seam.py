"""The streamed-body seam (docs/architecture.md "The streamed-body seam"):
one body type, :class:`serverio.model.StreamBody` (a
:class:`~serverio.model.ChunkSource`, a known or unknown length, a close,
:class:`~serverio.model.BodyCut`), sent by one HTTP/1.1 path
(``Emitter.emit_stream``) and one HTTP/2 path (``h2stream.send_stream``).

A fake proxy hook answers ``/s`` with a scripted source, so every rule is
checked on both protocols without an upstream: framing by length and
version, a source longer or shorter than its length cut, a cut source, the
pull deadline (the transport's for a source that does not bound its own,
none for one that does), the flow-control window waited on by event (no
polling), the client gone closing the source in the stream's own task,
and the access log and ``bytes_sent`` counting every byte.  Memory
streams, MockClock where time matters."""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Callable
from pathlib import Path

import h2.errors
import pytest
import trio
import trio.lowlevel
import trio.testing

from serverio import AccessLog, Server
from serverio.http.core import Plan, RequestFacts
from serverio.model import Body, BodyCut, StreamBody

from .conftest import make_config, memory_connection, wait_until
from .h2client import h2_memory

CANCEL = h2.errors.ErrorCodes.CANCEL
INTERNAL_ERROR = h2.errors.ErrorCodes.INTERNAL_ERROR


class Source:
    """A scripted chunk source: ``script`` items are chunks, exceptions
    (raised) or floats (sleep that long first); then the end, or with
    ``hang`` a pull that never returns; ``endless`` repeats 16 KiB chunks."""

    def __init__(
        self,
        script: list[bytes | float | BaseException],
        *,
        hang: bool = False,
        endless: bool = False,
    ) -> None:
        self.script = list(script)
        self.hang = hang
        self.endless = endless
        self.pulls = 0
        self.closed = 0
        self.closed_by: str | None = None  # the task that closed it

    async def next_chunk(self) -> bytes:
        self.pulls += 1
        await trio.lowlevel.checkpoint()
        while self.script:
            item = self.script.pop(0)
            if isinstance(item, float):
                await trio.sleep(item)
                continue
            if isinstance(item, BaseException):
                raise item
            return item
        if self.endless:
            return b"e" * 16384
        if self.hang:
            await trio.sleep_forever()
        return b""

    def close(self) -> None:
        self.closed += 1
        self.closed_by = trio.lowlevel.current_task().name


class FakeProxy:
    """The pipeline's proxy hook for ``/s``: each request gets the next
    (plan, body) that ``make`` builds."""

    def __init__(self, make: Callable[[], tuple[Plan, Body]]) -> None:
        self.make = make

    def match(self, req: RequestFacts) -> object | None:
        return "s" if req.target.segments[:1] == ("s",) else None

    def fallback(self, req: RequestFacts) -> object | None:
        return None

    async def forward(self, *_: object) -> tuple[Plan, Body]:
        return self.make()


def _plan(length: int | None) -> Plan:
    headers: tuple[tuple[bytes, bytes], ...] = ((b"content-type", b"application/octet-stream"),)
    if length is not None:
        headers += ((b"content-length", b"%d" % length),)
    return Plan(200, headers, ())


def _server(
    root: Path, source: Source, length: int | None, *, bounded: bool = False, **kw: object
) -> tuple[Server, io.StringIO]:
    out = io.StringIO()
    cfg = make_config(root, **kw)
    srv = Server(cfg, access_log=AccessLog("json", out))
    # The proxy hook a server's stage list is built from (on its first
    # request: serverio.pipeline.stages.stages_of).
    fake = FakeProxy(lambda: (_plan(length), StreamBody(source, length, bounded=bounded)))
    handler = srv.handler
    handler.hooks = dataclasses.replace(handler.hooks, proxy=fake)
    handler.proxy = fake
    handler.stages = None
    return srv, out


async def _raw(client: object, request: bytes) -> bytes:
    """Send ``request`` and read until the server closes."""
    stream = client.stream  # type: ignore[attr-defined]
    await stream.send_all(request)
    raw = b""
    with trio.fail_after(30):
        while data := await stream.receive_some(65536):
            raw += data
    return raw


def _log(out: io.StringIO) -> dict[str, object]:
    """The access log's one record of ``/s``."""
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    [rec] = [r for r in records if r["target"] == "/s"]
    return rec  # type: ignore[no-any-return]


class _Failed(BodyCut):
    """The server could not make the rest (as an archive's ArchiveCut)."""

    failed = True


GET_CLOSE = b"GET /s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"

# ------------------------------------------------------------------ framing


async def test_a_declared_length_goes_as_content_length_http1(root: Path) -> None:
    src = Source([b"a" * 20000, b"b" * 10000])
    srv, out = _server(root, src, 30000)
    async with memory_connection(srv.env.config, server=srv) as (client, _, _):
        raw = await _raw(client, GET_CLOSE)
    head, body = raw.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200 ") and b"Content-Length: 30000" in head
    assert b"transfer-encoding" not in head.lower()
    assert body == b"a" * 20000 + b"b" * 10000
    # Every byte written is counted (head and body), and the log has the body.
    assert srv.stats.responses.bytes_sent == len(raw)
    rec = _log(out)
    assert rec["bytes"] == 30000 and "cut" not in rec
    assert src.closed == 1


async def test_unknown_length_is_chunked_for_http11_and_counted_with_its_framing(
    root: Path,
) -> None:
    src = Source([b"x" * 5000, b"y" * 7])
    srv, out = _server(root, src, None)
    async with memory_connection(srv.env.config, server=srv) as (client, _, _):
        raw = await _raw(client, GET_CLOSE)
    head, body = raw.split(b"\r\n\r\n", 1)
    assert b"transfer-encoding: chunked" in head.lower()
    assert body == b"1388\r\n" + b"x" * 5000 + b"\r\n7\r\nyyyyyyy\r\n0\r\n\r\n"
    # The framing is on the wire too: bytes_sent counts it.
    assert srv.stats.responses.bytes_sent == len(raw)
    assert _log(out)["bytes"] == 5007


async def test_unknown_length_to_http10_is_close_delimited(root: Path) -> None:
    src = Source([b"x" * 5000, b"y" * 7])
    srv, _ = _server(root, src, None)
    async with memory_connection(srv.env.config, server=srv) as (client, _, _):
        raw = await _raw(client, b"GET /s HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
    head, body = raw.split(b"\r\n\r\n", 1)
    assert b"transfer-encoding" not in head.lower() and b"Connection: close" in head
    assert body == b"x" * 5000 + b"y" * 7
    assert srv.stats.responses.bytes_sent == len(raw)


async def test_a_known_length_keeps_the_connection_and_serves_the_next(root: Path) -> None:
    srv, _ = _server(root, Source([b"z" * 10]), 10)
    async with memory_connection(srv.env.config, server=srv) as (client, _, _):
        r = await client.get("/s")
        assert r.status == 200 and r.body == b"z" * 10
        assert (await client.get("/hello.txt")).body == b"hello world\n"


@pytest.mark.parametrize("length", [30000, None])
async def test_http2_both_lengths_end_the_stream_and_are_logged(
    root: Path, length: int | None
) -> None:
    src = Source([b"a" * 20000, b"b" * 10000])
    srv, out = _server(root, src, length)
    async with h2_memory(srv.env.config, server=srv) as (client, _, _):
        before = srv.stats.responses.bytes_sent
        r = await client.get("/s")
        assert r.status == 200 and r.ended and r.reset is None
        assert r.body == b"a" * 20000 + b"b" * 10000
        assert (r.headers.get("content-length") == "30000") == (length is not None)
        assert "transfer-encoding" not in r.headers
        await wait_until(lambda: srv.stats.responses.bytes_sent - before >= 30000)
    rec = _log(out)
    assert rec["version"] == "2.0" and rec["bytes"] == 30000 and "cut" not in rec
    assert src.closed == 1


# ------------------------------------------------------------------ cuts


async def test_more_than_the_declared_length_is_never_written(root: Path) -> None:
    """The excess would be read as the next response (HTTP/1.1) or make
    the stream malformed (HTTP/2, RFC 9113 §8.1.1): the response is cut."""
    src = Source([b"a" * 8, b"b" * 8])
    srv, out = _server(root, src, 10)
    async with memory_connection(srv.env.config, server=srv) as (client, _, _):
        raw = await _raw(client, b"GET /s HTTP/1.1\r\nHost: t\r\n\r\n")  # keep-alive asked
    assert raw.split(b"\r\n\r\n", 1)[1] == b"a" * 8  # then the close
    rec = _log(out)
    assert rec["cut"] is True and rec["bytes"] == 8
    assert src.closed == 1

    src = Source([b"a" * 8, b"b" * 8])
    srv, out = _server(root, src, 10)
    async with h2_memory(srv.env.config, server=srv) as (client, _, _):
        r = await client.get("/s")
        assert r.reset == CANCEL and not r.ended and r.body == b"a" * 8
        assert (await client.get("/hello.txt")).status == 200  # the connection serves on
    assert _log(out)["cut"] is True
    assert src.closed == 1


async def test_a_source_ending_short_of_its_length_is_a_cut(root: Path) -> None:
    src = Source([b"a" * 8])
    srv, out = _server(root, src, 20)
    async with memory_connection(srv.env.config, server=srv) as (client, _, _):
        raw = await _raw(client, b"GET /s HTTP/1.1\r\nHost: t\r\n\r\n")
    assert raw.split(b"\r\n\r\n", 1)[1] == b"a" * 8  # short of 20, then the close
    assert _log(out)["cut"] is True

    srv, out = _server(root, Source([b"a" * 8]), 20)
    async with h2_memory(srv.env.config, server=srv) as (client, _, _):
        r = await client.get("/s")
        assert r.reset == CANCEL and not r.ended
    rec = _log(out)
    assert rec["cut"] is True and rec["bytes"] == 8


async def test_a_body_cut_mid_body_ends_the_response_incomplete(root: Path) -> None:
    src = Source([b"a" * 8, BodyCut("upstream reset")])
    srv, out = _server(root, src, None)
    async with memory_connection(srv.env.config, server=srv) as (client, _, _):
        raw = await _raw(client, b"GET /s HTTP/1.1\r\nHost: t\r\n\r\n")
    assert raw.endswith(b"8\r\naaaaaaaa\r\n")  # no last-chunk: incomplete (RFC 9112 §8)
    rec = _log(out)
    assert rec["cut"] is True and rec["bytes"] == 8
    assert srv.stats.responses.bytes_sent == len(raw)  # a cut response's bytes count too
    assert src.closed == 1

    for failure, code in (
        (BodyCut("upstream gone"), CANCEL),
        (_Failed("member changed"), INTERNAL_ERROR),
        (RuntimeError("bug"), INTERNAL_ERROR),
    ):
        src = Source([b"a" * 8, failure])
        srv, out = _server(root, src, None)
        async with h2_memory(srv.env.config, server=srv) as (client, _, _):
            r = await client.get("/s")
            assert r.reset == code and not r.ended and r.body == b"a" * 8
            # A failed cut (the server could not make the rest) is "truncated".
            assert srv.stats.responses.truncated == (code == INTERNAL_ERROR)
        rec = _log(out)
        assert rec["cut"] is True and rec["bytes"] == 8
        assert src.closed == 1


# ------------------------------------------------------------------ deadlines


@pytest.mark.parametrize("bounded", [False, True])
async def test_the_pull_deadline_is_the_transports_unless_the_source_bounds_it(
    root: Path, autojump_clock: trio.testing.MockClock, bounded: bool
) -> None:
    """An archive's source (not bounded) that makes no chunk for
    --write-timeout is cut and counted as a write timeout; a proxied one
    (bounded: --proxy-idle-timeout is its own) may pause longer."""
    src = Source([b"a" * 8, 20.0, b"b" * 8])
    srv, _ = _server(root, src, None, bounded=bounded, write_timeout=5.0)
    async with memory_connection(srv.env.config, server=srv) as (client, _, _):
        raw = await _raw(client, GET_CLOSE)
    assert raw.endswith(b"0\r\n\r\n") == bounded
    assert srv.stats.timeouts.write == (0 if bounded else 1)

    src = Source([b"a" * 8, 20.0, b"b" * 8])
    srv, _ = _server(root, src, None, bounded=bounded, write_timeout=5.0)
    async with h2_memory(srv.env.config, server=srv) as (client, _, _):
        with trio.fail_after(60):
            r = await client.get("/s")
        assert r.ended == bounded and (r.reset is None if bounded else r.reset == CANCEL)
        assert r.body == (b"a" * 8 + b"b" * 8 if bounded else b"a" * 8)
    assert srv.stats.timeouts.write == (0 if bounded else 1)


class _Steps(trio.abc.Instrument):
    """Counts the steps of the HTTP/2 stream tasks."""

    def __init__(self) -> None:
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name.endswith("_serve_stream"):
            self.steps += 1


async def test_a_shut_window_is_waited_on_by_event_never_polled(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """The stream's task sleeps while the client keeps its window shut: a
    WINDOW_UPDATE wakes the writer, nothing wakes the task meanwhile (the
    old proxied path looked again every 50 ms)."""
    src = Source([b"w" * 100_000, b"v" * 1000])
    srv, out = _server(root, src, 101_000, bounded=True, write_timeout=60.0)
    async with h2_memory(srv.env.config, server=srv, ack=False) as (client, _, _):
        sid = client.request("/s")
        await client.flush()
        r = client.responses[sid]
        with trio.fail_after(5):
            while len(r.body) < 65535:  # the initial windows, then it stalls
                assert await client.pump()
        steps = _Steps()
        trio.lowlevel.add_instrument(steps)
        try:
            await trio.sleep(10)  # mock time: 200 looks of a 50 ms poll
        finally:
            trio.lowlevel.remove_instrument(steps)
        assert steps.steps <= 2
        assert len(r.body) == 65535 and not r.done
        client.ack = True
        client.conn.increment_flow_control_window(1 << 20)
        client.conn.increment_flow_control_window(1 << 20, sid)
        await client.flush()
        (r,) = await client.wait(sid)
        assert r.ended and r.body == b"w" * 100_000 + b"v" * 1000
    assert _log(out)["bytes"] == 101_000
    assert srv.stats.timeouts.write == 0


# ------------------------------------------------------------------ cancellation


async def test_a_client_gone_mid_body_closes_the_source_in_the_stream_task_http1(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    src = Source([], endless=True)
    srv, out = _server(root, src, None)
    async with memory_connection(srv.env.config, server=srv, lockstep=True) as (client, _, _):
        await client.send_raw(b"GET /s HTTP/1.1\r\nHost: t\r\n\r\n")
        got = 0
        while got < 100_000:
            got += len(await client.stream.receive_some(16384))
        await client.stream.aclose()  # the server's next write fails
        await wait_until(lambda: src.closed == 1)
    assert src.closed == 1
    # Closed by the connection's own task (its finally), not by the teardown.
    assert src.closed_by is not None and "ConnectionTask.run" in src.closed_by
    assert _log(out)["cut"] is True


async def test_rst_stream_while_a_chunk_is_made_closes_the_source_in_the_stream_task(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    src = Source([b"a" * 100], hang=True)
    srv, out = _server(root, src, None, bounded=True)
    async with h2_memory(srv.env.config, server=srv) as (client, _, _):
        sid = client.request("/s")
        await client.flush()
        r = client.responses[sid]
        with trio.fail_after(5):
            while len(r.body) < 100:
                assert await client.pump()
        await wait_until(lambda: src.pulls == 2)  # waiting in the second pull
        client.conn.reset_stream(sid, CANCEL)
        await client.flush()
        await wait_until(lambda: src.closed == 1)
        assert src.closed_by is not None and src.closed_by.endswith("_serve_stream")
        assert (await client.get("/hello.txt")).status == 200  # the connection serves on
    assert src.closed == 1
    rec = _log(out)
    assert rec["cut"] is True and rec["bytes"] == 100


# ------------------------------------------------------------------ archives


async def test_an_archive_is_logged_and_counted_on_both_protocols(root: Path) -> None:
    """A folder archive (the other StreamBody): its whole wire bytes in
    bytes_sent over HTTP/1.1 (head and chunk framing too), its body size
    in the access log of both protocols."""
    out = io.StringIO()
    cfg = make_config(root, archives=True)
    srv = Server(cfg, access_log=AccessLog("json", out))
    async with memory_connection(cfg, server=srv) as (client, _, _):
        raw = await _raw(
            client, b"GET /noindex/?archive=zip HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
        )
    assert srv.stats.responses.bytes_sent == len(raw)
    head, framed = raw.split(b"\r\n\r\n", 1)
    assert b"transfer-encoding: chunked" in head.lower() and framed.endswith(b"0\r\n\r\n")
    size = json.loads(out.getvalue())["bytes"]
    assert 0 < size < len(framed)
    srv = Server(cfg, access_log=AccessLog("json", out))  # the first one's opener is closed
    async with h2_memory(cfg, server=srv) as (h2c, _, _):
        r = await h2c.get("/noindex/?archive=zip")
        assert r.ended and r.body.startswith(b"PK")
    rec = json.loads(out.getvalue().splitlines()[1])
    assert rec["version"] == "2.0" and rec["bytes"] == len(r.body) == size


# ------------------------------------------------- a chunk already in hand


class ReadySource(Source):
    """A source that already holds its first chunk (as the proxy's
    Downstream does when the upstream's head, body and end came in one
    read): ``ready_chunk`` hands it over without an await."""

    def __init__(self, first: bytes | None, script: list[bytes | float | BaseException]) -> None:
        super().__init__(script)
        self.first = first
        self.ready_calls = 0

    def ready_chunk(self) -> bytes | None:
        self.ready_calls += 1
        return self.first


def _recording(server_end: trio.abc.Stream) -> list[bytes]:
    """Record what the server writes on its end of a memory stream pair."""
    sent: list[bytes] = []
    real = server_end.send_all

    async def send_all(data: bytes | bytearray | memoryview) -> None:
        sent.append(bytes(data))
        await real(data)

    server_end.send_all = send_all  # type: ignore[method-assign]
    return sent


@pytest.mark.parametrize(
    ("first", "script", "length", "writes"),
    [
        # head + the chunk in hand in one write, then nothing (its length is met)
        (b"z" * 10, [], 10, 1),
        # chunked: head + the framed chunk in one write, the last-chunk after
        (b"z" * 10, [], None, 2),
        # the end already known (an empty body): the head alone, once
        (b"", [], 0, 1),
        # nothing in hand: the head first (an SSE head never waits for the
        # first event), then the pulled chunk
        (None, [b"z" * 10], 10, 2),
    ],
)
async def test_a_chunk_in_hand_goes_with_the_head_in_one_write(
    root: Path,
    first: bytes | None,
    script: list[bytes | float | BaseException],
    length: int | None,
    writes: int,
) -> None:
    src = ReadySource(first, script)
    srv, out = _server(root, src, length)
    async with memory_connection(srv.env.config, server=srv) as (client, _, _):
        assert client.server_end is not None
        sent = _recording(client.server_end)
        raw = await _raw(client, GET_CLOSE)
    head, body = raw.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200 ")
    want = (first or b"") + b"".join(s for s in script if isinstance(s, bytes))
    assert body == (want if length is not None else b"a\r\n" + want + b"\r\n0\r\n\r\n")
    assert len(sent) == writes and b"".join(sent) == raw and src.ready_calls == 1
    assert srv.stats.responses.bytes_sent == len(raw) and _log(out)["bytes"] == len(want)
