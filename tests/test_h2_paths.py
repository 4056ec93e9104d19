"""HTTP/2 response framing: the direct frame path, its fallback, and the
one-step small response."""

from __future__ import annotations

import os
from pathlib import Path

import h2.settings
import pytest
import trio

from serverio.fs.reads import pread
from serverio.net import h2conn
from serverio.net.h2conn import H2Connection

from .conftest import make_config
from .h2client import h2_memory

S = h2.settings.SettingCodes


class _Steps(trio.abc.Instrument):
    """Counts the scheduling steps of every task whose name contains ``part``."""

    def __init__(self, part: str) -> None:
        self.part = part
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if self.part in task.name:
            self.steps += 1


async def test_a_small_response_is_served_in_one_step_of_its_stream_task(root: Path) -> None:
    """HEADERS and the single DATA frame of a small body are framed by the
    stream's task itself: it never waits for the writer, so it runs once."""
    cfg = make_config(root)
    steps = _Steps("_serve_stream")
    async with h2_memory(cfg) as (client, _, _):
        r = await client.get("/data.bin")  # warm-up: first-use work of the handler
        assert r.status == 200
        trio.lowlevel.add_instrument(steps)
        try:
            sids = [client.request("/data.bin") for _ in range(20)]
            await client.flush()
            rs = await client.wait(*sids)
        finally:
            trio.lowlevel.remove_instrument(steps)
    assert all(r.status == 200 and len(r.body) == 1024 for r in rs)
    assert steps.steps == 20


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
