"""HTTP/2 output memory: busy connections share one budget, so many
streams of large bodies hold a bounded amount of output each."""

from __future__ import annotations

from pathlib import Path

import h2.settings
import pytest

from serverio.fs.reads import pread
from serverio.net import h2conn, h2write
from serverio.net.h2conn import H2Connection
from serverio.net.outbuf import GROW_STEP

from .conftest import make_config
from .h2client import h2_memory

S = h2.settings.SettingCodes
BIG_WINDOW = {S.INITIAL_WINDOW_SIZE: (1 << 31) - 1}


def test_a_writer_share_shrinks_with_the_busy_writers_within_its_bounds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    writer = object.__new__(h2write.Writer)
    for busy, want in (
        (0, h2write.OUT_BUDGET),
        (1, h2write.OUT_BUDGET),
        (h2write.OUT_TOTAL // h2write.OUT_BUDGET, h2write.OUT_BUDGET),
        (128, h2write.OUT_TOTAL // 128),
        (100_000, h2write.OUT_FLOOR),
    ):
        monkeypatch.setattr(h2write, "_busy", [busy])
        assert writer.budget() == want


async def test_with_many_busy_connections_a_large_body_goes_in_small_rounds(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """512 other busy writers: this one's share is the floor, so each read
    is at most that (with its frame heads) and the output buffers never
    grow past it by more than one growth step; the body arrives whole, and
    the writer is not counted busy once the connection is over."""
    others = 512
    monkeypatch.setattr(h2write, "_busy", [others])
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
    cfg = make_config(root, small_file_size=1024)  # big.bin read from its descriptor
    capacity = 0
    async with h2_memory(cfg, settings=BIG_WINDOW) as (client, _, conn):
        client.conn.increment_flow_control_window((1 << 31) - 1 - 65535)
        await client.flush()
        r = await client.get("/big.bin")
        h = getattr(conn, "_switched", None)
        assert isinstance(h, H2Connection)
        writer = h._writer
        capacity = max(len(writer.out.data), len(writer._spare.data))
    assert r.status == 200 and bytes(r.body) == (root / "big.bin").read_bytes()
    assert max(reads) <= h2write.OUT_FLOOR
    assert capacity <= h2write.OUT_FLOOR + GROW_STEP
    assert h2write.busy_writers() == others


async def test_alone_a_writer_keeps_the_full_round(root: Path) -> None:
    """No other busy writer: the share is the whole OUT_BUDGET, and the
    counter is back where it was after the connection."""
    before = h2write.busy_writers()
    cfg = make_config(root, small_file_size=1024)
    async with h2_memory(cfg, settings=BIG_WINDOW) as (client, _, conn):
        client.conn.increment_flow_control_window((1 << 31) - 1 - 65535)
        await client.flush()
        r = await client.get("/big.bin")
        h = getattr(conn, "_switched", None)
        assert isinstance(h, H2Connection)
        assert h._writer.budget() == h2write.OUT_BUDGET
    assert r.status == 200 and bytes(r.body) == (root / "big.bin").read_bytes()
    assert h2write.busy_writers() == before
