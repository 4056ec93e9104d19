"""The HTTP/2 reader's frame count (serverio.net.h2read.FrameReader), which
the control budget compares with h2's events: a frame is counted in the
read that completes it, as h2 reports it (a count at the frame's header
made each DATA frame split across two reads look like a frame without an
event: a large upload over HTTP/2 was closed with ENHANCE_YOUR_CALM when
enough of its frames were split, depending on read sizes)."""

from __future__ import annotations

from typing import cast

import h2.config
import h2.connection
import pytest

from serverio.net.h2read import FrameReader, Sink
from serverio.observe.stats import Stats

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def _frame(length: int, kind: int, flags: int = 0, sid: int = 1) -> bytes:
    return length.to_bytes(3, "big") + bytes([kind, flags]) + sid.to_bytes(4, "big") + b"x" * length


def _reader() -> FrameReader:
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    return FrameReader(
        conn, cast(Sink, None), Stats(), max_resets=1, max_control=1, block_cap=1 << 16
    )


@pytest.mark.parametrize("chunk", [1, 7, 9, 100, 4096, 10_000, 16_393, 65_536])
def test_a_frame_is_counted_in_the_read_that_completes_it(chunk: int) -> None:
    frames = [_frame(0, 4, 1, 0), _frame(16_384, 0), _frame(5, 6, 0, 0), _frame(16_384, 0, 1)]
    wire = PREFACE + b"".join(frames)
    ends = []
    at = len(PREFACE)  # the preface is no frame
    for f in frames:
        at += len(f)
        ends.append(at)
    reader = _reader()
    for start in range(0, len(wire), chunk):
        stop = min(start + chunk, len(wire))
        want = sum(1 for e in ends if start < e <= stop)
        assert reader._count_frames(wire[start:stop]) == want, (start, stop)
