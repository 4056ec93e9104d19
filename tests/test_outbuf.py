"""serverio.net.outbuf: the reusable output buffer of the HTTP/2 writer."""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from serverio.net import outbuf
from serverio.net.outbuf import GROW_STEP, MAP_FROM, SPARE_MAX, OutBuffer


@pytest.fixture(autouse=True)
def _no_spares() -> Iterator[None]:
    saved = list(outbuf._spares)
    outbuf._spares.clear()
    yield
    outbuf._spares[:] = saved


def test_add_appends_and_len_counts_pending_bytes_only() -> None:
    buf = OutBuffer()
    assert len(buf) == 0 and not buf
    buf.add(b"abc")
    buf.add(memoryview(b"defg"))
    buf.add(bytearray(b"h"))
    assert len(buf) == 8
    with buf.view() as view:
        assert view.tobytes() == b"abcdefgh"
    assert len(buf.data) == GROW_STEP  # capacity in steps, not the pending size


def test_clear_keeps_capacity_and_later_adds_overwrite() -> None:
    buf = OutBuffer()
    buf.add(b"x" * 100_000)
    capacity = len(buf.data)
    data = buf.data
    buf.clear()
    assert len(buf) == 0
    buf.add(b"new")
    assert buf.data is data and len(buf.data) == capacity
    with buf.view() as view:
        assert view.tobytes() == b"new"


def test_reserve_then_fill_in_place_and_truncate() -> None:
    buf = OutBuffer()
    buf.add(b"head")
    start = buf.reserve(5)
    assert start == 4 and len(buf) == 9
    buf.data[start : start + 5] = b"12345"
    with buf.view() as view:
        assert view.tobytes() == b"head12345"
    buf.truncate(4)
    with buf.view() as view:
        assert view.tobytes() == b"head"
    buf.truncate(100)  # never grows
    assert len(buf) == 4


def test_scatter_read_into_reserved_region(tmp_path: Path) -> None:
    preadv = getattr(os, "preadv", None)
    if preadv is None:
        pytest.skip("os.preadv is not available on this platform")
    path = tmp_path / "f"
    path.write_bytes(bytes(range(256)) * 4)
    fd = os.open(path, os.O_RDONLY)
    try:
        buf = OutBuffer()
        start = buf.reserve(2 + 10 + 2 + 10)
        view = memoryview(buf.data)
        parts = [view[start + 2 : start + 12], view[start + 14 : start + 24]]
        assert preadv(fd, parts, 100) == 20
        for part in parts:
            part.release()
        view.release()
        buf.data[0:2] = b"H1"
        buf.data[12:14] = b"H2"
    finally:
        os.close(fd)
    with buf.view() as out:
        assert out.tobytes() == b"H1" + bytes(range(100, 110)) + b"H2" + bytes(range(110, 120))


def test_shrink_gives_large_buffers_to_the_spares_and_room_takes_them_back() -> None:
    first = OutBuffer()
    first.add(b"a" * (3 * GROW_STEP))
    big = first.data
    first.shrink(keep=GROW_STEP)
    assert len(first) == 0 and len(first.data) == 0
    assert outbuf._spares == [big]
    second = OutBuffer()
    second.add(b"pending")
    second.add(b"b" * (2 * GROW_STEP))  # needs room: takes the spare
    assert second.data is big and outbuf._spares == []
    with second.view() as view:
        assert view.tobytes() == b"pending" + b"b" * (2 * GROW_STEP)


def test_shrink_keeps_a_small_buffer_and_clears_it() -> None:
    buf = OutBuffer()
    buf.add(b"small")
    data = buf.data
    buf.shrink(keep=GROW_STEP)
    assert buf.data is data and len(buf) == 0
    assert outbuf._spares == []


def test_spares_are_bounded() -> None:
    buffers = [OutBuffer() for _ in range(SPARE_MAX + 5)]
    for buf in buffers:
        buf.add(b"z" * (2 * GROW_STEP))
    for buf in buffers:
        buf.shrink(keep=GROW_STEP)
    assert len(outbuf._spares) == SPARE_MAX


def test_a_spare_too_small_is_left_for_another() -> None:
    small = OutBuffer()
    small.add(b"s" * (GROW_STEP + 1))
    small.shrink(keep=GROW_STEP)
    assert len(outbuf._spares) == 1
    buf = OutBuffer()
    buf.add(b"t" * (4 * GROW_STEP))
    assert len(outbuf._spares) == 1 and len(buf.data) == 4 * GROW_STEP


def test_a_large_capacity_is_a_mapping_and_keeps_its_bytes_when_it_grows() -> None:
    """Below MAP_FROM the buffer is heap memory; from MAP_FROM on it is an
    anonymous mapping (given back to the system when dropped), and the
    pending bytes move with each growth."""
    buf = OutBuffer()
    kinds: list[type] = []
    buf.add(b"h" * 100)
    kinds.append(type(buf.data))
    buf.add(b"m" * MAP_FROM)
    kinds.append(type(buf.data))
    assert len(buf.data) >= MAP_FROM + 100
    buf.add(b"g" * (3 * GROW_STEP))
    kinds.append(type(buf.data))
    assert kinds == [bytearray, mmap.mmap, mmap.mmap]
    with buf.view() as view:
        assert view.tobytes() == b"h" * 100 + b"m" * MAP_FROM + b"g" * (3 * GROW_STEP)
    start = buf.reserve(8)
    buf.data[start : start + 8] = b"reserved"
    with buf.view() as view:
        assert view.tobytes().endswith(b"reserved")
