"""SingleFlightCache on its own: bounds, LRU order, single-flight, cancellation."""

from __future__ import annotations

import errno
import gzip
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trio
import trio.testing

from serverio import PoolSaturated
from serverio.concurrency.flight import SingleFlightCache
from serverio.fs import jobs as jobs_mod
from serverio.pipeline import content as content_mod

from .conftest import make_config, memory_connection, open_fd_count

Job = Callable[[], Awaitable[bytes | None]]


def const(value: bytes | None) -> Callable[[], Job]:
    def make() -> Job:
        async def job() -> bytes | None:
            return value

        return job

    return make


def gated(event: trio.Event, value: bytes, runs: list[int]) -> Callable[[], Job]:
    def make() -> Job:
        async def job() -> bytes | None:
            runs.append(1)
            await event.wait()
            return value

        return job

    return make


async def test_lru_bound_in_bytes() -> None:
    cache: SingleFlightCache[str, bytes] = SingleFlightCache("t", 10, len)
    async with cache.running():
        for key in "abc":
            assert await cache.get_or_run(key, const(key.encode() * 4)) == key.encode() * 4
        # 12 bytes > 10: "a" (least recently used) went.
        assert cache.get("a") is None and cache.size == 8 and cache.stats.evicted == 1
        assert cache.get("b") == b"bbbb"  # b is now the most recent
        await cache.get_or_run("d", const(b"dddd"))
        assert cache.get("c") is None and cache.get("b") == b"bbbb"
        # Larger than the whole cache: returned, not stored.
        assert await cache.get_or_run("big", const(b"x" * 11)) == b"x" * 11
        assert cache.get("big") is None and cache.stats.oversized == 1


async def test_single_flight_and_cancelled_waiters() -> None:
    cache: SingleFlightCache[str, bytes] = SingleFlightCache("t", 100, len)
    event = trio.Event()
    runs: list[int] = []
    results: list[bytes | None] = []
    async with cache.running():
        async with trio.open_nursery() as n:
            scopes = []
            for _ in range(5):
                scope = trio.CancelScope()
                scopes.append(scope)

                async def waiter(scope: trio.CancelScope = scope) -> None:
                    with scope:
                        results.append(await cache.get_or_run("k", gated(event, b"v", runs)))

                n.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked()
            assert runs == [1] and cache.stats.joined == 4
            for scope in scopes[:3]:
                scope.cancel()  # three requesters go away; the job goes on
            await trio.testing.wait_all_tasks_blocked()
            assert cache.in_flight == 1
            event.set()
        assert results == [b"v", b"v"] and cache.get("k") == b"v"


async def test_job_with_no_waiters_fills_cache() -> None:
    cache: SingleFlightCache[str, bytes] = SingleFlightCache("t", 100, len)
    event = trio.Event()
    runs: list[int] = []
    async with cache.running():
        with trio.CancelScope() as scope:
            scope.cancel()
            await cache.get_or_run("k", gated(event, b"late", runs))
        await trio.testing.wait_all_tasks_blocked()
        assert cache.in_flight == 1 and runs == [1]
        event.set()
        await trio.testing.wait_all_tasks_blocked()
        assert cache.get("k") == b"late" and cache.in_flight == 0


async def test_failures_are_not_cached(caplog: pytest.LogCaptureFixture) -> None:
    cache: SingleFlightCache[str, bytes] = SingleFlightCache("t", 100, len)

    def raising(exc: Exception) -> Callable[[], Job]:
        def make() -> Job:
            async def job() -> bytes | None:
                raise exc

            return job

        return make

    async with cache.running():
        assert await cache.get_or_run("k", const(None)) is None
        assert await cache.get_or_run("k", raising(PoolSaturated("work"))) is None
        with caplog.at_level(logging.ERROR, logger="serverio"):
            assert await cache.get_or_run("k", raising(ValueError("bug"))) is None
        assert "t job failed" in caplog.text and "ValueError" in caplog.text
        assert cache.stats.failed == 2 and cache.stats.saturated == 1
        assert await cache.get_or_run("k", const(b"ok")) == b"ok"  # retried, then cached


async def test_make_job_raising_leaves_no_flight() -> None:
    cache: SingleFlightCache[str, bytes] = SingleFlightCache("t", 100, len)

    def broken() -> Job:
        raise OSError(errno.EMFILE, "no fds")

    async with cache.running():
        with pytest.raises(OSError):
            await cache.get_or_run("k", broken)
        assert cache.in_flight == 0
        assert await cache.get_or_run("k", const(b"v")) == b"v"


async def test_no_nursery_means_no_job() -> None:
    cache: SingleFlightCache[str, bytes] = SingleFlightCache("t", 100, len)
    assert await cache.get_or_run("k", const(b"v")) is None
    assert cache.stats.unavailable == 1 and cache.stats.started == 0


async def test_shutdown_wakes_waiters_with_none() -> None:
    cache: SingleFlightCache[str, bytes] = SingleFlightCache("t", 100, len)
    got: list[bytes | None] = []
    async with trio.open_nursery() as n:
        async with cache.running():

            async def waiter() -> None:
                got.append(await cache.get_or_run("k", gated(trio.Event(), b"v", [])))

            n.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked()
        # Leaving running() cancelled the job; its waiter got None.
    assert got == [None] and cache.in_flight == 0


# ------------------------------------------------- through the content service


async def test_dup_failure_falls_back(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Larger than --small-file-size: its bytes are not in memory, so the
    # compression and digest jobs need a duplicate of the descriptor.
    (root / "app.js").write_text("let x = 1;\n" * 10_000)

    def no_fds(fd: int) -> int:
        raise OSError(errno.EMFILE, "Too many open files")

    baseline = open_fd_count()
    async with memory_connection(make_config(root, digest=True)) as (client, srv, _):
        monkeypatch.setattr(os, "dup", no_fds)
        r = await client.get("/app.js", "Accept-Encoding: gzip\r\n")
        monkeypatch.undo()
        assert r.status == 200 and r.header("content-encoding") is None
        assert r.header("repr-digest") is None
        assert srv.stats.content.compress_fallbacks == 1 and srv.stats.content.digest_omitted == 1
        assert srv.content.compressed.in_flight == 0
    assert open_fd_count() <= baseline


async def test_a_small_file_read_in_the_hop_is_compressed_from_those_bytes(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not cached yet (just written), but read whole for its ETag: the
    compression and the digest work from those bytes, no duplicate
    descriptor and no second read."""
    (root / "app.js").write_text("let x = 1;\n" * 100)

    def no_fds(fd: int) -> int:
        raise OSError(errno.EMFILE, "Too many open files")

    async with memory_connection(make_config(root, digest=True)) as (client, srv, _):
        monkeypatch.setattr(os, "dup", no_fds)
        r = await client.get("/app.js", "Accept-Encoding: gzip\r\n")
        monkeypatch.undo()
        assert r.status == 200 and r.header("content-encoding") == "gzip"
        assert gzip.decompress(r.body) == b"let x = 1;\n" * 100
        assert r.header("repr-digest") is not None
        assert srv.stats.content.compress_fallbacks == 0 and srv.stats.content.digest_omitted == 0


@pytest.mark.parametrize(("err", "status"), [(errno.EMFILE, 503), (errno.ENOENT, 404)])
async def test_listing_scan_errors_map_to_status(
    root: Path, monkeypatch: pytest.MonkeyPatch, err: int, status: int
) -> None:
    def failing(owned: jobs_mod.OwnedFd, *args: object) -> jobs_mod.Scan:
        owned.release()
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr(content_mod, "scan_listing", failing)
    async with memory_connection(make_config(root)) as (client, _, _):
        r = await client.get("/noindex/")
    assert r.status == status and str(root).encode() not in r.body
    assert r.body.startswith(f"{status} ".encode()) and len(r.body) < 64  # the fixed text
