"""The request-body seam wired into both transports (issue 26 item 4).

End to end through the real transports over memory streams: an HTTP/1.1
:class:`~serverio.net.connection.ConnectionTask` and an HTTP/2 connection
(h2c prior knowledge through the same task), with a test-only
``Handler.receive`` step that reads the content (serverio installs none:
uploads are the next issue) and, without one, the handler's own answer (a
``POST`` to a file: 405 with ``Allow``).  Deadlines run on trio's
``MockClock(autojump_threshold=0)``.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import h2.events
import pytest
import trio
import trio.lowlevel
import trio.testing
from h2.errors import ErrorCodes
from h2.settings import SettingCodes as S

from serverio.errors import ConfigError, HTTPError
from serverio.http.core import Plan, RequestFacts, common_fields
from serverio.net.h1state import CLOSED
from serverio.pipeline.handler import BodyStep, Content

from .conftest import (
    HTTPClient,
    connect,
    make_config,
    memory_connection,
    open_fd_count,
    reset,
    running_server,
    wait_until,
)
from .h2client import H2Client, h2_memory


def bounded(test: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
    """Each test within 30 s (virtual under the MockClock): a transport
    that never answers fails the test instead of hanging it."""

    @functools.wraps(test)
    async def run(*args: Any, **kwargs: Any) -> None:
        with trio.fail_after(30):
            await test(*args, **kwargs)

    return run


class Echo:
    """A receive step for ``/echo``: reads the whole content and answers
    ``<length> <sha256>``; records what each request ended with.  With
    ``gate``, it waits for the gate before its first pull."""

    def __init__(self, gate: trio.Event | None = None) -> None:
        self.gate = gate
        self.seen: list[bytes | BaseException] = []
        self.pulled = trio.Event()

    async def __call__(self, req: RequestFacts, content: Content, now: float) -> Plan | None:
        if req.target.segments != ("echo",):
            return None
        if self.gate is not None:
            await self.gate.wait()
        data = b""
        try:
            async for chunk in content:
                self.pulled.set()
                data += chunk
        except (HTTPError, trio.BrokenResourceError) as exc:
            self.seen.append(exc)
            raise
        self.seen.append(data)
        payload = b"%d %s" % (len(data), hashlib.sha256(data).hexdigest().encode())
        headers = (
            *common_fields(now),
            (b"content-type", b"text/plain"),
            (b"content-length", b"%d" % len(payload)),
        )
        return Plan(200, headers, (payload,))


def track_resets(client: H2Client) -> dict[int, int]:
    """Every RST_STREAM the server sends, stream id -> error code (the
    client's own bookkeeping drops a reset that follows a complete
    response)."""
    resets: dict[int, int] = {}
    event = client._event

    def tracking(ev: h2.events.Event) -> None:
        if isinstance(ev, h2.events.StreamReset):
            resets[ev.stream_id or 0] = int(ev.error_code or 0)
        event(ev)

    client._event = tracking  # type: ignore[method-assign]
    return resets


async def reset_seen(client: H2Client, resets: dict[int, int], sid: int) -> int | None:
    """Pump until the server's RST_STREAM for ``sid`` arrives (bounded)."""
    with trio.move_on_after(5):
        while sid not in resets and await client.pump():
            pass
    return resets.get(sid)


def echoed(data: bytes) -> bytes:
    return b"%d %s" % (len(data), hashlib.sha256(data).hexdigest().encode())


def install(srv: object, step: BodyStep) -> None:
    srv.handler.receive = step  # type: ignore[attr-defined]


def post(target: str, headers: str = "", body: bytes = b"") -> bytes:
    return f"POST {target} HTTP/1.1\r\nHost: t\r\n{headers}\r\n".encode() + body


async def raw_until(client: HTTPClient, marker: bytes) -> bytes:
    got = b""
    while marker not in got:
        data = await client.stream.receive_some(65536)
        if not data:
            break
        got += data
    return got


# ================================================================ HTTP/1.1


@bounded
async def test_h1_content_length_body_reaches_the_handler_and_keeps_alive(root: Path) -> None:
    data = bytes(range(256)) * 300  # 76,800 bytes: several reads and chunks
    step = Echo()
    async with memory_connection(make_config(root)) as (client, srv, _):
        install(srv, step)
        await client.send_raw(post("/echo", f"Content-Length: {len(data)}\r\n", data))
        r = await client.read_response()
        nxt = await client.get("/hello.txt")
    assert r.status == 200 and r.body == echoed(data) and r.header("connection") is None
    assert step.seen == [data]
    assert nxt.status == 200 and nxt.body == b"hello world\n"


@bounded
async def test_h1_chunked_with_extensions_and_trailers_then_a_pipelined_request(
    root: Path,
) -> None:
    chunked = (
        b'5;name=value;q="quoted"\r\nhello\r\n'
        b"1\r\n \r\n"
        b"5;x\r\nworld\r\n"
        b"0\r\nX-Trailer: discarded\r\nOther: t\r\n\r\n"
    )
    pipelined = b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n"
    step = Echo()
    async with memory_connection(make_config(root)) as (client, srv, _):
        install(srv, step)
        await client.send_raw(post("/echo", "Transfer-Encoding: chunked\r\n", chunked) + pipelined)
        r = await client.read_response()
        nxt = await client.read_response()
        # Without the step (a POST to a file): 405, the chunked body drained,
        # the pipelined request after it answered.
        te = "Transfer-Encoding: chunked\r\n"
        await client.send_raw(post("/hello.txt", te, chunked) + pipelined)
        r405 = await client.read_response()
        after = await client.read_response()
    assert r.status == 200 and r.body == echoed(b"hello world") and step.seen == [b"hello world"]
    assert nxt.status == 200 and nxt.body == b"hello world\n"
    assert r405.status == 405 and r405.header("allow") == "GET, HEAD, OPTIONS"
    assert r405.header("connection") is None
    assert after.status == 200 and after.body == b"hello world\n"
    assert srv.stats.responses.completed == 4


@bounded
async def test_h1_100_continue_is_sent_only_when_the_handler_pulls(root: Path) -> None:
    step = Echo()
    async with memory_connection(make_config(root)) as (client, srv, _):
        install(srv, step)
        await client.send_raw(post("/echo", "Content-Length: 5\r\nExpect: 100-continue\r\n"))
        interim = await raw_until(client, b"\r\n\r\n")
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        await client.send_raw(b"abcde")
        r = await client.read_response()
        nxt = await client.get("/hello.txt")
    assert r.status == 200 and r.body == echoed(b"abcde") and nxt.status == 200


@bounded
async def test_h1_4xx_before_the_pull_sends_no_100_continue_and_closes(root: Path) -> None:
    """RFC 9110 §10.1.1: a final answer without reading; the body is then
    neither read nor guessed at (the client may send it or the next
    request), so the connection closes."""
    async with memory_connection(make_config(root)) as (client, _srv, _):
        await client.send_raw(post("/hello.txt", "Content-Length: 5\r\nExpect: 100-continue\r\n"))
        raw = await raw_until(client, b"405 Method Not Allowed\n")
        closed = await client.at_eof()
    assert raw.startswith(b"HTTP/1.1 405 ") and b"100 Continue" not in raw
    assert b"\r\nConnection: close\r\n" in raw and closed


@bounded
async def test_h1_too_large_declared_is_413_without_reading(root: Path) -> None:
    step = Echo()
    cfg = make_config(root, max_body_size=100)
    async with memory_connection(cfg) as (client, srv, _):
        install(srv, step)
        # No content sent at all: the answer cannot depend on reading it.
        await client.send_raw(post("/echo", "Content-Length: 101\r\nExpect: 100-continue\r\n"))
        raw = await raw_until(client, b"413 Content Too Large\n")
        closed = await client.at_eof()
    assert raw.startswith(b"HTTP/1.1 413 ") and b"100 Continue" not in raw
    assert b"\r\nConnection: close\r\n" in raw and closed
    assert len(step.seen) == 1 and getattr(step.seen[0], "status", None) == 413


@bounded
async def test_h1_too_large_streamed_is_cut_at_the_limit(root: Path) -> None:
    step = Echo()
    cfg = make_config(root, max_body_size=100)
    chunked = b"40\r\n" + b"a" * 64 + b"\r\n" + b"40\r\n" + b"b" * 64 + b"\r\n0\r\n\r\n"
    async with memory_connection(cfg) as (client, srv, _):
        install(srv, step)
        await client.send_raw(post("/echo", "Transfer-Encoding: chunked\r\n", chunked))
        r = await client.read_response()
        closed = await client.at_eof()
    assert r.status == 413 and r.header("connection") == "close" and closed
    assert getattr(step.seen[0], "status", None) == 413


@bounded
async def test_h1_idle_deadline_is_408(root: Path, autojump_clock: trio.testing.MockClock) -> None:
    step = Echo()
    cfg = make_config(root, body_timeout=7.0, body_total_timeout=100.0)
    async with memory_connection(cfg) as (client, srv, _):
        install(srv, step)
        await client.send_raw(post("/echo", "Content-Length: 10\r\n", b"abc"))
        start = trio.current_time()
        r = await client.read_response()
        took = trio.current_time() - start
        closed = await client.at_eof()
    assert r.status == 408 and r.header("connection") == "close" and closed
    assert 7.0 <= took < 7.5


@bounded
async def test_h1_total_deadline_is_408_for_a_trickle(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """One byte every 2 s beats the 5 s idle deadline but not the 9 s total."""
    step = Echo()
    cfg = make_config(root, body_timeout=5.0, body_total_timeout=9.0)
    async with memory_connection(cfg) as (client, srv, _):
        install(srv, step)
        await client.send_raw(post("/echo", "Content-Length: 100\r\n"))
        start = trio.current_time()
        async with trio.open_nursery() as nursery:

            async def trickle() -> None:
                for _ in range(100):
                    await trio.sleep(2.0)
                    try:
                        await client.send_raw(b"x")
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        return

            nursery.start_soon(trickle)
            r = await client.read_response()
            took = trio.current_time() - start
            nursery.cancel_scope.cancel()
    assert r.status == 408 and r.header("connection") == "close"
    assert 9.0 <= took < 9.5


@bounded
async def test_h1_client_gone_mid_body_ends_the_connection(root: Path) -> None:
    step = Echo()
    async with memory_connection(make_config(root)) as (client, srv, conn):
        install(srv, step)
        await client.send_raw(post("/echo", "Content-Length: 100\r\n", b"partial"))
        await step.pulled.wait()
        await client.stream.send_eof()  # type: ignore[attr-defined]  # EOF mid-body
        with trio.fail_after(5):
            while conn.life.phase != CLOSED:
                await trio.lowlevel.checkpoint()
    assert len(step.seen) == 1 and isinstance(step.seen[0], trio.BrokenResourceError)
    assert srv.stats.responses.completed == 0


@bounded
async def test_h1_keepalive_survives_a_405_to_a_small_post(root: Path) -> None:
    async with memory_connection(make_config(root)) as (client, _srv, _):
        await client.send_raw(post("/hello.txt", "Content-Length: 1000\r\n", b"z" * 1000))
        r = await client.read_response()
        nxt = await client.get("/hello.txt")
    assert r.status == 405 and r.header("allow") == "GET, HEAD, OPTIONS"
    assert r.header("connection") is None
    assert nxt.status == 200 and nxt.body == b"hello world\n"


@bounded
async def test_h1_a_405_to_a_large_post_closes(root: Path) -> None:
    """Past the drain bound (64 KiB) the rest is not read: Connection: close."""
    async with memory_connection(make_config(root)) as (client, _srv, _):
        await client.send_raw(post("/hello.txt", "Content-Length: 100000\r\n", b"z" * 1000))
        r = await client.read_response()
        closed = await client.at_eof()
    assert r.status == 405 and r.header("connection") == "close" and closed


@bounded
async def test_h1_a_405_to_a_slow_chunked_post_closes_after_the_drain_deadline(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """No length declared: the drain reads for at most its 2 s deadline,
    then closes (the answer went out first, without Connection: close)."""
    async with memory_connection(make_config(root)) as (client, _srv, _):
        await client.send_raw(post("/hello.txt", "Transfer-Encoding: chunked\r\n", b"3\r\nabc\r\n"))
        r = await client.read_response()
        start = trio.current_time()
        closed = await client.at_eof()
        took = trio.current_time() - start
    assert r.status == 405 and closed and 2.0 <= took < 2.5


# ================================================================ HTTP/2


async def h2_post(client: H2Client, path: str, headers: list[tuple[str, str]]) -> int:
    return client.request(path, "POST", headers, end_stream=False)


async def send_body(client: H2Client, sid: int, data: bytes, *, end: bool = True) -> None:
    """Send ``data`` in frames within the frame size and the windows,
    pumping (reading the server's WINDOW_UPDATEs) while they are closed."""
    sent = 0
    while sent < len(data):
        room = min(
            client.conn.local_flow_control_window(sid),
            client.conn.max_outbound_frame_size,
            len(data) - sent,
        )
        if room:
            client.conn.send_data(sid, data[sent : sent + room])
            sent += room
            await client.flush()
        elif not await client.pump():
            raise EOFError("the server closed while the body was sent")
    if end:
        client.conn.end_stream(sid)
        await client.flush()


@bounded
async def test_h2_body_reaches_the_handler(root: Path) -> None:
    data = bytes(range(256)) * 200  # 51,200 bytes, under the 65,535 window
    step = Echo()
    async with h2_memory(make_config(root)) as (client, srv, _):
        install(srv, step)
        sid = await h2_post(client, "/echo", [("content-length", str(len(data)))])
        await send_body(client, sid, data)
        (r,) = await client.wait(sid)
        nxt = await client.get("/hello.txt")
    assert r.status == 200 and bytes(r.body) == echoed(data) and r.reset is None
    assert step.seen == [data] and nxt.status == 200


@bounded
async def test_h2_window_reopens_only_as_the_handler_consumes(root: Path) -> None:
    """Flow control is the backpressure: the client fills the stream window
    (65,535 bytes); no WINDOW_UPDATE comes until the handler reads, then the
    window reopens and the rest goes through."""
    data = b"w" * 100_000
    gate = trio.Event()
    step = Echo(gate)
    async with h2_memory(make_config(root)) as (client, srv, _):
        install(srv, step)
        sid = await h2_post(client, "/echo", [("content-length", str(len(data)))])
        window = client.conn.local_flow_control_window(sid)
        assert window == 65_535
        await send_body(client, sid, data[:window], end=False)
        updates: list[h2.events.Event] = []
        # Let the server read every frame and answer what it would.
        for _ in range(5):
            await trio.testing.wait_all_tasks_blocked()
            with trio.move_on_after(0.05):
                got = await client.stream.receive_some(65536)
                updates += [
                    e
                    for e in client.conn.receive_data(got)
                    if isinstance(e, h2.events.WindowUpdated)
                ]
        assert step.seen == [] and not step.pulled.is_set()
        assert updates == [] and client.conn.local_flow_control_window(sid) == 0
        gate.set()  # the handler starts consuming: the window reopens
        await send_body(client, sid, data[window:])
        (r,) = await client.wait(sid)
    assert r.status == 200 and bytes(r.body) == echoed(data)


@bounded
async def test_h2_unread_body_is_answered_then_reset_no_error(root: Path) -> None:
    """A 405 to a POST: the response, then RST_STREAM NO_ERROR (RFC 9113
    §8.1); its window is handed back, so a second body on the connection
    (together past the 65,535-byte connection window) still gets through."""
    step = Echo()
    async with h2_memory(make_config(root)) as (client, srv, _):
        install(srv, step)
        resets = track_resets(client)
        first = await h2_post(client, "/hello.txt", [("content-length", "60000")])
        await send_body(client, first, b"a" * 60000, end=False)
        while not client.responses[first].done:
            await client.pump()
        assert await reset_seen(client, resets, first) == ErrorCodes.NO_ERROR
        second = await h2_post(client, "/echo", [("content-length", "60000")])
        await send_body(client, second, b"b" * 60000)
        rs, r2 = await client.wait(first, second)
    r1 = client.responses[first]
    assert r1.status == 405 and r1.headers.get("allow") == "GET, HEAD, OPTIONS"
    assert r1.ended and rs.status == 405
    assert r2.status == 200 and bytes(r2.body) == echoed(b"b" * 60000)
    assert client.goaway is None


@bounded
async def test_h2_too_large_declared_is_413_then_reset(root: Path) -> None:
    step = Echo()
    async with h2_memory(make_config(root, max_body_size=100)) as (client, srv, _):
        install(srv, step)
        resets = track_resets(client)
        sid = await h2_post(client, "/echo", [("content-length", "101")])
        await client.flush()
        (r,) = await client.wait(sid)
        # RST_STREAM NO_ERROR after the 413 (RFC 9113 §8.1)
        assert await reset_seen(client, resets, sid) == ErrorCodes.NO_ERROR
    assert r.status == 413 and r.ended and getattr(step.seen[0], "status", None) == 413


@bounded
async def test_h2_too_large_streamed_is_cut(root: Path) -> None:
    step = Echo()
    async with h2_memory(make_config(root, max_body_size=100)) as (client, srv, _):
        install(srv, step)
        sid = await h2_post(client, "/echo", [])
        client.conn.send_data(sid, b"x" * 150, end_stream=False)
        await client.flush()
        (r,) = await client.wait(sid)
        nxt = await client.get("/hello.txt")
    assert r.status == 413 and getattr(step.seen[0], "status", None) == 413
    assert nxt.status == 200 and client.goaway is None


@bounded
async def test_h2_idle_deadline_is_408(root: Path, autojump_clock: trio.testing.MockClock) -> None:
    step = Echo()
    cfg = make_config(root, body_timeout=7.0, keepalive_timeout=60.0)
    async with h2_memory(cfg) as (client, srv, _):
        install(srv, step)
        sid = await h2_post(client, "/echo", [("content-length", "10")])
        client.conn.send_data(sid, b"abc", end_stream=False)
        await client.flush()
        start = trio.current_time()
        (r,) = await client.wait(sid)
        took = trio.current_time() - start
    assert r.status == 408 and 7.0 <= took < 7.5


@bounded
async def test_h2_total_deadline_is_408(root: Path, autojump_clock: trio.testing.MockClock) -> None:
    step = Echo()
    cfg = make_config(root, body_timeout=5.0, body_total_timeout=9.0, keepalive_timeout=60.0)
    async with h2_memory(cfg) as (client, srv, _):
        install(srv, step)
        sid = await h2_post(client, "/echo", [])
        await client.flush()
        start = trio.current_time()
        async with trio.open_nursery() as nursery:

            async def trickle() -> None:
                for _ in range(100):
                    await trio.sleep(2.0)
                    if client.responses[sid].done:
                        return
                    client.conn.send_data(sid, b"x", end_stream=False)
                    await client.flush()

            nursery.start_soon(trickle)
            (r,) = await client.wait(sid)
            took = trio.current_time() - start
            nursery.cancel_scope.cancel()
    assert r.status == 408 and 9.0 <= took < 9.5


@bounded
async def test_h2_client_reset_mid_body_leaves_no_stream(root: Path) -> None:
    step = Echo()
    async with h2_memory(make_config(root)) as (client, srv, conn):
        install(srv, step)
        sid = await h2_post(client, "/echo", [("content-length", "100")])
        client.conn.send_data(sid, b"partial", end_stream=False)
        await client.flush()
        await step.pulled.wait()
        client.conn.reset_stream(sid, ErrorCodes.CANCEL)
        await client.flush()
        nxt = await client.get("/hello.txt")
        switched = conn._switched
        assert switched is not None
        with trio.fail_after(5):
            while switched._streams:  # type: ignore[attr-defined]
                await trio.lowlevel.checkpoint()
    assert nxt.status == 200
    # The pull was cancelled by the reset (the stream's scope) or ended by it.
    assert step.seen == [] or isinstance(step.seen[0], trio.BrokenResourceError)
    assert srv.stats.conns.internal_errors == 0


@bounded
async def test_h2_content_length_mismatch_with_a_reading_handler_resets_the_stream(
    root: Path,
) -> None:
    step = Echo()
    async with h2_memory(make_config(root), settings={S.INITIAL_WINDOW_SIZE: 65535}) as (
        client,
        srv,
        _,
    ):
        install(srv, step)
        sid = await h2_post(client, "/echo", [("content-length", "5")])
        client.conn.send_data(sid, b"abc", end_stream=True)
        await client.flush()
        (r,) = await client.wait(sid)
        nxt = await client.get("/hello.txt")
    assert r.reset == ErrorCodes.PROTOCOL_ERROR and nxt.status == 200
    assert client.goaway is None and srv.stats.h2.stream_errors == 1


@pytest.mark.parametrize("method", ["POST", "PUT"])
@bounded
async def test_h2_405_to_a_post_keeps_the_connection(root: Path, method: str) -> None:
    async with h2_memory(make_config(root)) as (client, _srv, _):
        sid = client.request("/hello.txt", method, [("content-length", "4")], end_stream=False)
        client.conn.send_data(sid, b"body", end_stream=True)
        await client.flush()
        (r,) = await client.wait(sid)
        nxt = await client.get("/hello.txt")
    assert r.status == 405 and nxt.status == 200 and client.goaway is None


# ================================================================ sockets, config


@bounded
async def test_h1_client_gone_mid_body_over_a_real_socket_leaks_no_descriptor(
    root: Path,
) -> None:
    """127.0.0.1, port 0: ten clients each send half a body to a reading
    step and hang up; the descriptors come back to the baseline and every
    step saw the client leave."""
    step = Echo()
    async with running_server(make_config(root)) as (srv, port):
        install(srv, step)
        baseline = open_fd_count()
        for _ in range(10):
            client = await connect(port)
            await client.send_raw(post("/echo", "Content-Length: 100\r\n", b"half"))
            await step.pulled.wait()
            step.pulled = trio.Event()
            await reset(client)
        await wait_until(lambda: len(step.seen) == 10)
        await wait_until(lambda: open_fd_count() <= baseline)
        ok = await connect(port)
        r = await ok.get("/hello.txt")
        await ok.stream.aclose()
    assert r.status == 200
    assert all(isinstance(e, trio.BrokenResourceError) for e in step.seen)


@pytest.mark.parametrize(
    ("field", "value", "flag"),
    [
        ("max_body_size", -1, "--max-body-size"),
        ("body_timeout", 0.0, "--body-timeout"),
        ("body_total_timeout", float("nan"), "--body-total-timeout"),
    ],
)
def test_bad_body_settings_are_one_line_errors_naming_the_flag(
    root: Path, field: str, value: float, flag: str
) -> None:
    with pytest.raises(ConfigError, match=f"^{flag} ") as info:
        make_config(root, **{field: value})
    assert "\n" not in str(info.value)
