"""Fair use of the write slots (issue 41 item 14; serverio.upload.slots).

A client may hold at most its share of ``--max-uploads``
(``--max-uploads-per-client``, half by default): past it 503 while other
clients still get slots.  An upload must keep up ``--min-upload-rate``
once the client was waited for ``RATE_GRACE`` seconds: a trickle is cut
with 408 long before ``--body-total-timeout``, over HTTP/1.1 and HTTP/2
(MockClock over memory streams), and a slow disk never counts against
the client.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from serverio.app.server import Server
from serverio.errors import ConfigError, HTTPError
from serverio.upload.slots import RATE_GRACE, ClientSlots, PacedContent, client_share

from .conftest import make_config, memory_connection, wait_until
from .h2client import h2_memory
from .test_upload import temps, upload_config
from .test_upload_writer import Chunks, Rig, put

# A trickle of 100 bytes every 5 s is cut soon after the grace: long before
# the 300 s body total deadline.  (Not to the second: time also passes
# while the pool's threads open and write, the server's time, never counted
# against the client.)
CUT_BY = 60.0

# The trickle tests jump the mock clock only after this much real idle time,
# not at once: with an immediate jump, every pool hop (a thread writing a
# chunk) let the clock run to the client's next send, so the client's bytes
# were already there when the server asked: a loaded machine made the
# trickle look fast (cut at 525 s, after the trickle ended, seen in runs).
# A hop is far shorter than this; each 5 s send then costs this much real time.
REAL_IDLE = 0.2


@pytest.mark.parametrize(
    ("max_uploads", "per_client", "share"),
    [(16, 0, 8), (1, 0, 1), (3, 0, 1), (16, 4, 4), (4, 9, 4), (16, 16, 16)],
)
def test_the_share(max_uploads: int, per_client: int, share: int) -> None:
    assert client_share(max_uploads, per_client) == share


def test_client_slots_count_per_client() -> None:
    slots = ClientSlots(2)
    a, b = "10.0.0.1:5000", "10.0.0.2:5001"  # keyed by address, not port
    assert slots.take(a) == slots.take(a) == "10.0.0.1"
    assert slots.take(a) is None  # its share
    assert slots.take(b) == "10.0.0.2"  # another client is not affected
    slots.give("10.0.0.1")
    assert slots.take(a) == "10.0.0.1"
    for key in ("10.0.0.1", "10.0.0.1", "10.0.0.2"):
        slots.give(key)
    assert slots.held == {}
    assert slots.take("") == "-"  # unknown: one shared key


def test_bad_settings_name_the_flag(root: Path) -> None:
    with pytest.raises(ConfigError, match="--max-uploads-per-client"):
        make_config(root, upload=True, max_uploads_per_client=-1)
    with pytest.raises(ConfigError, match="--min-upload-rate"):
        make_config(root, upload=True, min_upload_rate=-5)


# ------------------------------------------------------------ the per-client share


async def test_a_client_past_its_share_gets_503_and_another_client_a_slot(root: Path) -> None:
    """Through the write step: RequestFacts.client names the client, as
    the driver's Write need (serverio.pipeline.driver) sets it."""
    rig = Rig(root, max_uploads=4, min_upload_rate=0)  # share: 2
    gate = trio.Event()

    class Held(Chunks):
        async def next_chunk(self) -> bytes | None:
            await gate.wait()
            return await super().next_chunk()

    got: dict[str, list[int]] = {"a": [], "b": []}

    async def write(who: str, name: str, content: Chunks) -> None:
        req = put(f"/{name}", client="198.51.100." + who)
        got[who].append((await rig.run(req, content)).status)

    try:
        async with trio.open_nursery() as nursery:
            for i in range(2):
                nursery.start_soon(write, "a", f"a{i}.txt", Held([b"x"]))
            await wait_until(lambda: rig.up.in_flight == 2)
            await write("a", "a2.txt", Chunks([b"x"]))  # a's third: over its share
            assert got["a"] == [503]
            await write("b", "b.txt", Chunks([b"y"]))  # b is served meanwhile
            assert got["b"] == [201]
            gate.set()
        assert sorted(got["a"]) == [201, 201, 503]
        assert rig.up.clients.held == {} and rig.up.in_flight == 0
    finally:
        rig.close()


async def test_h1_one_client_cannot_take_every_slot(root: Path) -> None:
    """16 slow PUTs from one client (16 connections): the first 8 (the
    default share of --max-uploads 16) stream, the others get 503 at once
    with Retry-After; when they end, the client gets slots again."""
    cfg = upload_config(root, min_upload_rate=0)
    srv = Server(cfg)
    uploads = srv.services.uploads
    assert uploads is not None
    async with AsyncExitStack() as stack:
        clients = []
        for i in range(16):
            client, _srv, _ = await stack.enter_async_context(memory_connection(cfg, server=srv))
            await client.send_raw(put_head(f"/slow{i}.bin", 10) + b"12345")
            clients.append(client)
            if i < 8:
                await wait_until(lambda n=i + 1: uploads.in_flight == n)  # type: ignore[misc]
            else:
                r = await client.read_response()
                assert r.status == 503 and r.header("retry-after") == "1", i
        assert uploads.in_flight == 8 and list(uploads.clients.held.values()) == [8]
        for client in clients[:8]:
            await client.send_raw(b"67890")
            assert (await client.read_response()).status == 201
        assert uploads.clients.held == {}
        client, _srv, _ = await stack.enter_async_context(memory_connection(cfg, server=srv))
        await client.send_raw(put_head("/again.bin", 1) + b"z")
        assert (await client.read_response()).status == 201
    assert temps(root) == []


def put_head(path: str, length: int) -> bytes:
    return f"PUT {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {length}\r\n\r\n".encode()


# ------------------------------------------------------------ the minimum rate


async def trickle(send: Callable[[bytes], Any], every: float, piece: bytes, times: int) -> None:
    for _ in range(times):
        await trio.sleep(every)
        try:
            await send(piece)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return


async def test_h1_a_trickling_put_is_cut_at_the_minimum_rate(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """100 bytes every 5 s (the 30 s idle deadline never fires, the 300 s
    total one would take minutes): cut with 408 soon after the grace,
    nothing left behind."""
    autojump_clock.autojump_threshold = REAL_IDLE
    cfg = upload_config(root, min_upload_rate=1000, body_timeout=30.0)
    async with memory_connection(cfg) as (client, srv, _):
        head = b"PUT /slow.bin HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n"
        await client.send_raw(head + b"x" * 100)
        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trickle, client.send_raw, 5.0, b"x" * 100, 100)
            r = await client.read_response()
            took = trio.current_time() - start
            nursery.cancel_scope.cancel()
        assert srv.stats.writes.aborted == 1
    assert r.status == 408 and r.header("connection") == "close"
    assert RATE_GRACE <= took < CUT_BY
    assert temps(root) == [] and not (root / "slow.bin").exists()


async def test_h1_an_upload_at_the_rate_is_not_cut(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """2000 bytes a second for 60 s, over a 1000 bytes/s minimum: 201."""
    cfg = upload_config(root, min_upload_rate=1000)
    data = os.urandom(120_000)
    async with memory_connection(cfg) as (client, _srv, _):
        head = b"PUT /steady.bin HTTP/1.1\r\nHost: t\r\nContent-Length: 120000\r\n\r\n"
        await client.send_raw(head)
        async with trio.open_nursery() as nursery:

            async def steady() -> None:
                for i in range(0, len(data), 2000):
                    await trio.sleep(1.0)
                    await client.send_raw(data[i : i + 2000])

            nursery.start_soon(steady)
            r = await client.read_response()
    assert r.status == 201 and (root / "steady.bin").read_bytes() == data


async def test_h2_a_trickling_put_is_cut_and_the_connection_lives_on(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    autojump_clock.autojump_threshold = REAL_IDLE
    cfg = upload_config(root, min_upload_rate=1000)
    async with h2_memory(cfg) as (client, srv, _):
        sid = client.request("/slow.bin", "PUT", [("content-length", "100000")], end_stream=False)
        client.conn.send_data(sid, b"x" * 100)
        await client.flush()

        async def send(piece: bytes) -> None:
            client.conn.send_data(sid, piece)
            await client.flush()

        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trickle, send, 5.0, b"x" * 100, 100)
            (r,) = await client.wait(sid)
            took = trio.current_time() - start
            nursery.cancel_scope.cancel()
        assert r.status == 408 and RATE_GRACE <= took < CUT_BY
        assert (await client.get("/hello.txt")).status == 200
        assert srv.stats.writes.aborted == 1
    assert temps(root) == [] and not (root / "slow.bin").exists()


async def test_a_form_post_is_held_to_the_rate_too(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    autojump_clock.autojump_threshold = REAL_IDLE
    from .test_upload_form import form_body
    from .test_upload_form_wire import h1_post

    cfg = upload_config(root, min_upload_rate=1000)
    body = form_body(("file", "slow.bin", b"x" * 50_000))
    raw = h1_post("/", body)
    async with memory_connection(cfg) as (client, _srv, _):
        await client.send_raw(raw[:400])
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trickle, client.send_raw, 5.0, b"x" * 50, 1000)
            r = await client.read_response()
            nursery.cancel_scope.cancel()
    assert r.status == 408 and temps(root) == []


async def test_a_slow_disk_does_not_count_against_the_client(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The time between pulls (the pool's steps) is the server's: only the
    waits inside pulls count."""

    class Instant(Chunks):
        pass

    content = Instant([b"x"] * 5)
    paced = PacedContent(content, rate=1000, grace=1.0)
    for _ in range(5):
        assert await paced.next_chunk() == b"x"
        await trio.sleep(60)  # a disk that takes a minute per chunk
    assert await paced.next_chunk() is None and paced.received == 5

    class Stalled(Chunks):
        async def next_chunk(self) -> bytes | None:
            await trio.sleep(3600)
            return None

    start = trio.current_time()
    with pytest.raises(HTTPError) as info:
        await PacedContent(Stalled([]), rate=1000, grace=1.0).next_chunk()
    assert info.value.status == 408 and info.value.close
    assert trio.current_time() - start == pytest.approx(1.0)
