"""HTTP/2 response framing: the direct frame path, its fallback, and the
one-step small response."""

from __future__ import annotations

import os
import socket
import struct
from pathlib import Path

import h2.settings
import hpack
import pytest
import trio
from h2.errors import ErrorCodes

from serverio.errors import HTTPError
from serverio.fs.reads import pread
from serverio.http.core import Plan
from serverio.net import h2answer, h2conn, h2write, outbuf
from serverio.net.connection import H2_PREFACE
from serverio.net.h2conn import H2Connection
from serverio.net.h2state import Stream

from .conftest import make_config, running_server, wait_until
from .h2client import H2Client, H2Response, h2_memory

S = h2.settings.SettingCodes


class _Steps(trio.abc.Instrument):
    """Counts the scheduling steps of every task whose name contains ``part``."""

    def __init__(self, part: str) -> None:
        self.part = part
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if self.part in task.name:
            self.steps += 1


def _frame(kind: int, flags: int, sid: int, payload: bytes) -> bytes:
    """One HTTP/2 frame (RFC 9113 §4.1)."""
    return (
        struct.pack(">I", len(payload))[1:]
        + bytes((kind, flags))
        + struct.pack(">I", sid)
        + payload
    )


class _Spawned(trio.abc.Instrument):
    """Names the tasks spawned while installed."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.names.append(task.name)


async def _twenty(client: H2Client, *instruments: trio.abc.Instrument) -> list[H2Response]:
    """Twenty GETs of /data.bin in flight at once, ``instruments`` installed meanwhile."""
    for instrument in instruments:
        trio.lowlevel.add_instrument(instrument)
    try:
        sids = [client.request("/data.bin") for _ in range(20)]
        await client.flush()
        return await client.wait(*sids)
    finally:
        for instrument in instruments:
            trio.lowlevel.remove_instrument(instrument)


async def test_a_small_warm_response_is_answered_by_the_reader_without_a_task(
    root: Path,
) -> None:
    """A warm file whose whole body fits in one frame is answered where
    its HEADERS are read: no stream task is spawned, nothing else runs for
    it; every answer is whole, counted and logged."""
    cfg = make_config(root)
    spawned = _Spawned()
    steps = _Steps("_serve_stream")
    async with h2_memory(cfg) as (client, srv, _):
        r = await client.get("/data.bin")  # warm-up: first-use work of the handler
        assert r.status == 200
        before = srv.stats.h2.streams, srv.stats.responses.completed
        rs = await _twenty(client, spawned, steps)
        after = srv.stats.h2.streams, srv.stats.responses.completed
    assert all(r.status == 200 and r.ended and len(r.body) == 1024 for r in rs)
    assert not [n for n in spawned.names if "_serve_stream" in n]
    assert steps.steps == 0
    assert after[0] - before[0] == 20 and after[1] - before[1] == 20


async def test_a_small_response_the_reader_leaves_is_framed_in_one_step_of_its_task(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the reader does not answer a stream itself (here: told it
    cannot send at once), the stream's task frames HEADERS and the single
    DATA frame itself: it never waits for the writer, so it runs once."""
    monkeypatch.setattr(h2conn, "at_once", lambda writer, st, source: None)
    cfg = make_config(root)
    steps = _Steps("_serve_stream")
    async with h2_memory(cfg) as (client, _, _):
        r = await client.get("/data.bin")
        assert r.status == 200
        rs = await _twenty(client, steps)
    assert all(r.status == 200 and len(r.body) == 1024 for r in rs)
    assert steps.steps == 20


async def test_a_body_larger_than_a_frame_gets_a_task(root: Path) -> None:
    """A body that cannot go whole at once (300,000 bytes, 65,535-byte
    windows) is sent by its stream's task, which waits for the windows."""
    cfg = make_config(root)
    spawned = _Spawned()
    async with h2_memory(cfg) as (client, _, _):
        await client.get("/big.bin")
        trio.lowlevel.add_instrument(spawned)
        try:
            r = await client.get("/big.bin")
        finally:
            trio.lowlevel.remove_instrument(spawned)
    assert r.status == 200 and bytes(r.body) == (root / "big.bin").read_bytes()
    assert sum("_serve_stream" in n for n in spawned.names) == 1


async def test_a_bug_in_the_readers_answer_resets_only_that_stream(
    root: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An exception in the answer the reader makes is the stream's
    INTERNAL_ERROR, as in a stream task: the connection and the other
    streams go on."""
    cfg = make_config(root)
    real = h2answer.StreamAnswer.start

    def start(self: h2answer.StreamAnswer, st: Stream, now: float) -> h2answer.Started:
        if st.head.path == b"/hello.txt":
            raise RuntimeError("a bug")
        return real(self, st, now)

    monkeypatch.setattr(h2answer.StreamAnswer, "start", start)
    async with h2_memory(cfg) as (client, srv, _):
        bad = client.request("/hello.txt")
        good = client.request("/data.bin")
        await client.flush()
        rb, rg = await client.wait(bad, good)
        again = await client.get("/data.bin")
        errors = srv.stats.conns.internal_errors
    assert rb.reset == ErrorCodes.INTERNAL_ERROR and not rb.status
    assert rg.status == 200 and again.status == 200 and len(again.body) == 1024
    assert errors == 1
    assert "internal error in an HTTP/2 stream" in caplog.text


async def test_a_stream_reset_in_the_read_of_its_headers_gets_no_answer(root: Path) -> None:
    """HEADERS and the client's RST_STREAM in one read: h2 has closed the
    stream when the reader answers it, so nothing is sent on it (no frame
    on a closed stream, RFC 9113 §5.1) and it is not logged; the
    connection goes on."""
    cfg = make_config(root)
    async with h2_memory(cfg) as (client, srv, _):
        await client.get("/data.bin")
        before = srv.stats.responses.completed
        sid = client.request("/data.bin")
        client.conn.reset_stream(sid)
        await client.flush()
        r = await client.get("/hello.txt")
        after = srv.stats.responses.completed
        got = client.responses[sid]
    assert r.status == 200 and client.goaway is None
    assert not got.status and not got.body
    assert after - before == 1


@pytest.mark.slow
async def test_answers_the_reader_makes_for_a_client_that_reads_nothing_stay_in_budget(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that sends 3,000 requests for a one-frame file in one go
    and reads nothing (a real socket, which fills): the reader answers
    while the output is under its budget, then hands the streams to tasks,
    which wait for the writer; the pending output never goes past the
    budget by more than a few answers (without the check, one read of
    requests would queue ~48 MiB of answers)."""
    (root / "frame.bin").write_bytes(b"f" * h2write.FRAME_CHUNK)
    inline = [0]
    real_now = h2write.Writer.respond_now

    def respond_now(self: h2write.Writer, st: Stream, plan: Plan, data: bytes) -> bool:
        inline[0] += 1
        return real_now(self, st, plan, data)

    most = [0]
    real_add = outbuf.OutBuffer.add

    def add(self: outbuf.OutBuffer, chunk: bytes | bytearray | memoryview) -> None:
        real_add(self, chunk)
        most[0] = max(most[0], len(self))

    monkeypatch.setattr(h2write.Writer, "respond_now", respond_now)
    monkeypatch.setattr(outbuf.OutBuffer, "add", add)
    cfg = make_config(root)
    encoder = hpack.Encoder()
    fields = [(b":method", b"GET"), (b":scheme", b"http"), (b":authority", b"localhost")]
    fields.append((b":path", b"/frame.bin"))
    window = struct.pack(">HI", 0x4, 2**31 - 1)
    async with running_server(cfg) as (_, port):
        sock = trio.socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        with sock, trio.fail_after(20):
            await sock.connect(("127.0.0.1", port))
            out = bytearray(H2_PREFACE)
            out += _frame(0x4, 0, 0, window)
            out += _frame(0x8, 0, 0, struct.pack(">I", 2**31 - 1 - 65535))
            for i in range(3000):
                block = encoder.encode(fields)
                out += _frame(0x1, 0x5, 1 + 2 * i, block)
            view = memoryview(out)
            while view:
                view = view[await sock.send(view) :]
            await wait_until(lambda: inline[0] > 0 and most[0] >= h2write.OUT_FLOOR)
            await trio.sleep(0.5)  # the reader takes what else it would
    assert inline[0] > 0
    assert most[0] <= h2write.OUT_BUDGET + 4 * h2write.FRAME_CHUNK


@pytest.mark.parametrize("direct", [True, False])
async def test_direct_and_public_h2_calls_frame_the_same_responses(
    root: Path, monkeypatch: pytest.MonkeyPatch, direct: bool
) -> None:
    """The frames written straight into h2's buffer (after its state
    machines) and those h2's own send_headers/send_data build give the same
    answers: small, flow-controlled large, empty, HEAD, and a header block
    larger than a frame (HEADERS + CONTINUATION, RFC 9113 §6.10)."""
    if not direct:
        monkeypatch.setattr(h2conn, "_direct_ok", lambda conn: False)
    big_value = "v" * 20000  # > SETTINGS_MAX_FRAME_SIZE (16,384)
    cfg = make_config(root, headers=(f"X-Large: {big_value}",))
    (root / "empty.txt").write_bytes(b"")
    async with h2_memory(cfg) as (client, _, conn):
        small = await client.get("/data.bin")
        large = await client.get("/big.bin")  # waits on the 65,535-byte windows
        empty = await client.get("/empty.txt")
        head = await client.get("/big.bin", method="HEAD")
        again = await client.get("/data.bin")
        h = getattr(conn, "_switched", None)
        assert isinstance(h, H2Connection)
        assert h._direct is direct
    assert small.status == 200 and bytes(small.body) == (root / "data.bin").read_bytes()
    assert large.status == 200 and bytes(large.body) == (root / "big.bin").read_bytes()
    assert empty.status == 200 and empty.ended and not empty.body
    assert head.status == 200 and head.data_frames == 0
    assert again.status == 200 and bytes(again.body) == bytes(small.body)
    for r in (small, large, empty, head, again):
        assert r.headers["x-large"] == big_value


async def test_header_table_size_from_the_client_reaches_the_encoder(root: Path) -> None:
    """SETTINGS_HEADER_TABLE_SIZE 0: the encoder signals the size update
    and indexes nothing; the client's decoder stays in step."""
    cfg = make_config(root)
    async with h2_memory(cfg, settings={S.HEADER_TABLE_SIZE: 0}) as (client, _, conn):
        for _ in range(3):
            r = await client.get("/data.bin")
            assert r.status == 200 and len(r.body) == 1024
        h = getattr(conn, "_switched", None)
        assert isinstance(h, H2Connection)
        assert h._encoder.header_table_size == 0
    assert client.conn.decoder.header_table_size == 0


async def test_a_large_body_is_read_a_round_quantum_at_a_time(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With open windows, each round reads up to ROUND_QUANTUM bytes of the
    file in one positional read and frames them (frames stay <= 16 KiB)."""
    reads: list[int] = []

    def counting(fd: int, n: int, offset: int) -> bytes:
        reads.append(n)
        return pread(fd, n, offset)

    monkeypatch.setattr(h2conn, "pread", counting)
    real_preadv = h2conn._PREADV
    if real_preadv is not None:

        def counting_v(fd: int, parts: list[memoryview], offset: int) -> int:
            reads.append(sum(map(len, parts)))
            return real_preadv(fd, parts, offset)

        monkeypatch.setattr(h2conn, "_PREADV", counting_v)
    size = (root / "big.bin").stat().st_size
    cfg = make_config(root, small_file_size=1024)  # big.bin is read from its descriptor
    big_window = {S.INITIAL_WINDOW_SIZE: (1 << 31) - 1}
    async with h2_memory(cfg, settings=big_window) as (client, _, _):
        client.conn.increment_flow_control_window((1 << 31) - 1 - 65535)
        await client.flush()
        r = await client.get("/big.bin")
    assert r.status == 200 and bytes(r.body) == (root / "big.bin").read_bytes()
    assert sum(reads) == size
    assert len(reads) == -(-size // h2conn.ROUND_QUANTUM)  # 2 reads for 300,000 bytes
    assert r.data_frames == -(-size // h2conn.FRAME_CHUNK)


async def test_a_file_that_shrinks_mid_body_resets_only_its_stream(root: Path) -> None:
    """The scatter read of a round that comes up short (the file was
    truncated after the head went out) writes nothing: the plain read then
    finds the truncation, counts it, and resets that stream alone; the
    connection goes on serving."""
    cfg = make_config(root, small_file_size=1024)  # big.bin is read from its descriptor
    big = root / "big.bin"
    async with h2_memory(cfg) as (client, _, conn):
        client.ack = False  # the first 65,535 bytes exhaust the windows
        sid = client.request("/big.bin")
        await client.flush()
        r = client.responses[sid]
        while len(r.body) < 65535:
            assert await client.pump()
        os.truncate(big, 100_000)
        client.conn.increment_flow_control_window(1 << 20)
        client.conn.increment_flow_control_window(1 << 20, stream_id=sid)
        await client.flush()
        (r,) = await client.wait(sid)
        client.ack = True
        again = await client.get("/data.bin")
        h = getattr(conn, "_switched", None)
        assert isinstance(h, H2Connection)
        truncated = h.env.stats.responses.truncated
    assert r.reset is not None and not r.ended
    assert len(r.body) <= 100_000
    assert truncated == 1
    assert again.status == 200 and len(again.body) == 1024


async def test_a_repeated_head_gets_the_facts_it_got_before(root: Path) -> None:
    """A stream's RequestFacts are made once per distinct head: the same
    head (RequestHeads gives a repeated block's head again) with the same
    request side gets the same facts; a head with content to follow, or
    another head, gets its own; a refused head is refused each time."""
    cfg = make_config(root)
    async with h2_memory(cfg) as (client, _, conn):
        await client.get("/data.bin")
        h = getattr(conn, "_switched", None)
        assert isinstance(h, H2Connection)
        answers = h._answers
        block = [(b":method", b"GET"), (b":scheme", b"http"), (b":path", b"/data.bin")]
        head = h._heads.parse(block)
        assert h._heads.parse(list(block)) is head
        facts, fields = answers.facts(Stream(101, head, True))
        assert answers.facts(Stream(103, head, True)) == (facts, fields)
        assert answers.facts(Stream(105, head, True))[0] is facts
        with_body, _ = answers.facts(Stream(107, head, False))
        assert with_body.has_body and not facts.has_body
        other = h._heads.parse([*block[:2], (b":path", b"/hello.txt")])
        assert answers.facts(Stream(109, other, True))[0].target.relpath != facts.target.relpath
        bad = h._heads.parse([*block[:2], (b":path", b"/a\x7fb")])
        for sid in (111, 113):
            with pytest.raises(HTTPError):
                answers.facts(Stream(sid, bad, True))


def test_response_fields_are_made_once_for_the_same_fields() -> None:
    """The same field tuple and status give the same list again (a warm
    plan's answers); another status or tuple a list of its own; a list
    given (interim fields) is read each time, never remembered."""
    plan_fields = ((b"Content-Type", b"text/plain"), (b"Connection", b"close"), (b"ETag", b'"1"'))
    first = h2write.response_fields(200, plan_fields)
    assert first == ((b":status", b"200"), (b"content-type", b"text/plain"), (b"etag", b'"1"'))
    assert h2write.response_fields(200, plan_fields) is first
    assert h2write.response_fields(304, plan_fields)[0] == (b":status", b"304")
    assert h2write.response_fields(200, tuple(plan_fields)) == first
    given = [(b"Link", b"</a>; rel=preload")]
    assert h2write.response_fields(103, given) == ((b":status", b"103"), (b"link", given[0][1]))
    given[0] = (b"Link", b"</b>; rel=preload")
    assert h2write.response_fields(103, given)[1] == (b"link", b"</b>; rel=preload")
