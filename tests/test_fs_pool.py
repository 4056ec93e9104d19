"""The fs pool against a real FUSE filesystem: delays, stalls, late fds.

These tests mount testkit/fusefs.py's passthrough filesystem (a separate
process) and serve it with a real Server on 127.0.0.1.  Nothing here asserts
on timings: every wait is on an observable state (blocked counts, pool
counters), bounded by a generous limit.  They skip with a reason when FUSE is
unavailable; .ci/run installs fuse3 so CI runs them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from serverio import Config, ConfigError
from testkit.fusefs import SlowFS, slowfs  # noqa: F401 - the fixture

from .conftest import connect, make_config, open_fd_count, reset, running_server, wait_until

pytestmark = pytest.mark.slow


def fill(fs: SlowFS, names: int = 20) -> Path:
    backing = fs.backing
    for i in range(names):
        (backing / f"f{i}.txt").write_text(f"file {i}\n")
    (backing / "big.bin").write_bytes(b"b" * 200_000)
    return fs.mountpoint


async def test_a_never_more_than_n_concurrent_ops(slowfs: SlowFS) -> None:  # noqa: F811
    mnt = fill(slowfs)
    slowfs.set_delay(0.02)
    n = 3
    cfg = make_config(mnt, fs_workers=n, fs_queue=64)
    statuses: list[int] = []
    async with running_server(cfg) as (_, port):
        slowfs.reset_stats()

        async def one(i: int) -> None:
            client = await connect(port)
            for j in range(3):
                r = await client.get(f"/f{(i + j) % 20}.txt")
                statuses.append(r.status)
            await client.stream.aclose()

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for i in range(12):
                    nursery.start_soon(one, i)
    stats = slowfs.stats()
    assert statuses == [200] * 36
    assert stats["calls"] >= 36
    assert 1 <= stats["peak_in_flight"] <= n


async def test_b_saturation_503_and_loop_stays_responsive(slowfs: SlowFS) -> None:  # noqa: F811
    mnt = fill(slowfs)
    cfg = make_config(mnt, fs_workers=2, fs_queue=1)
    async with running_server(cfg) as (srv, port):
        slowfs.block()
        hung = [await connect(port) for _ in range(3)]
        for i, c in enumerate(hung):
            await c.send_raw(f"GET /f{i}.txt HTTP/1.1\r\nHost: t\r\n\r\n".encode())
        await wait_until(lambda: slowfs.stats()["blocked"] >= 2, 15)
        await wait_until(lambda: srv.fs.queued == 1, 15)
        # Workers busy, queue full: the next file request gets 503 at once.
        extra = await connect(port)
        with trio.fail_after(5):
            r = await extra.get("/f5.txt")
            assert await extra.at_eof()
        assert r.status == 503
        assert r.header("retry-after") == "1" and r.header("connection") == "close"
        # Requests that need no filesystem work are answered meanwhile.
        other = await connect(port)
        with trio.fail_after(5):
            assert (await other.get("/x", method="OPTIONS")).status == 204
            assert (await other.get("/x", method="DELETE")).status == 405
        slowfs.release()
        with trio.fail_after(15):
            for c in hung:
                assert (await c.read_response()).status == 200
        # Recovery: tokens are back, service is normal.
        with trio.fail_after(15):
            assert (await other.get("/f7.txt")).status == 200
        for c in (*hung, extra, other):
            await c.stream.aclose()
    assert srv.fs.stats.rejected == 1


async def test_c_disconnect_while_hung_late_fd_closed(slowfs: SlowFS) -> None:  # noqa: F811
    mnt = fill(slowfs)
    cfg = make_config(mnt, fs_workers=1, fs_queue=0)
    async with running_server(cfg) as (srv, port):
        baseline = open_fd_count()
        slowfs.block()
        client = await connect(port)
        # big.bin stays open after preparation (streamed with sendfile), so
        # the abandoned thread produces a real fd that must be late-closed.
        await client.send_raw(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
        await wait_until(lambda: slowfs.stats()["blocked"] >= 1, 15)
        await reset(client)
        # The connection task is cleaned up at once, while the thread is
        # still stuck in open() and still holds its token.
        await wait_until(lambda: not srv.connections, 5)
        assert srv.fs.running == 1 and srv.fs.stats.abandoned == 1
        slowfs.release()
        await wait_until(lambda: srv.fs.running == 0, 15)
        assert srv.fs.stats.late_closed == 1
        await wait_until(lambda: open_fd_count() == baseline, 5)


async def test_d_inline_mode_serves(slowfs: SlowFS) -> None:  # noqa: F811
    mnt = fill(slowfs)
    async with running_server(make_config(mnt, fs_workers=0)) as (srv, port):
        client = await connect(port)
        assert (await client.get("/f1.txt")).body == b"file 1\n"
        assert (await client.get("/big.bin")).body == b"b" * 200_000
        await client.stream.aclose()
    assert srv.fs.inline and srv.fs.stats.submitted == 0


async def test_shutdown_abandons_stuck_threads(slowfs: SlowFS) -> None:  # noqa: F811
    """Shutdown does not wait forever for a thread stuck in a syscall."""
    from serverio import Server

    mnt = fill(slowfs)
    cfg = make_config(mnt, fs_workers=1, fs_queue=0, shutdown_timeout=0.3, host="127.0.0.1", port=0)
    srv = Server(cfg)
    slowfs.block()
    with trio.fail_after(15):
        async with trio.open_nursery() as nursery:
            await nursery.start(srv.serve)
            client = await connect(srv.addresses()[0][1])
            await client.send_raw(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
            await wait_until(lambda: slowfs.stats()["blocked"] >= 1, 10)
            srv.shutdown()
    assert srv.abandoned_threads == 1
    # Cut while waiting in the watcher nursery: counted as cancelled even
    # though the Cancelled arrived wrapped in an exception group.
    assert srv.stats.conns.cancelled == 1
    await client.stream.aclose()
    slowfs.release()
    await wait_until(lambda: srv.fs.running == 0, 15)
    assert srv.fs.stats.late_closed == 1


async def test_response_pending_at_shutdown_says_close(slowfs: SlowFS) -> None:  # noqa: F811
    mnt = fill(slowfs)
    cfg = make_config(mnt, fs_workers=1, fs_queue=0, shutdown_timeout=20, host="127.0.0.1", port=0)
    from serverio import Server

    srv = Server(cfg)
    slowfs.block()
    async with trio.open_nursery() as nursery:
        await nursery.start(srv.serve)
        client = await connect(srv.addresses()[0][1])
        await client.send_raw(b"GET /f1.txt HTTP/1.1\r\nHost: t\r\n\r\n")
        await wait_until(lambda: slowfs.stats()["blocked"] >= 1, 10)
        srv.shutdown()
        await trio.sleep(0.05)
        slowfs.release()
        with trio.fail_after(10):
            r = await client.read_response()
        assert r.status == 200 and r.header("connection") == "close"
        await client.stream.aclose()


def test_e_invalid_policies_rejected(tmp_path: Path) -> None:
    for kw in (
        {"fs_workers": -1},
        {"fs_workers": 0, "fs_queue": 4},
        {"fs_workers": 4, "fs_queue": -2},
        {"fs_workers": 5000},
        {"work_workers": 0, "work_queue": 1},
    ):
        with pytest.raises(ConfigError):
            Config.of(directory=str(tmp_path), **kw).validate()
