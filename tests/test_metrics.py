"""/metrics and /healthz on the admin listener (real sockets on 127.0.0.1)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio
from prometheus_client.parser import text_string_to_metric_families

from serverio import Server
from serverio.net.admin import open_admin_listener, serve_admin
from serverio.ops.metrics import BUCKETS, Histogram, merge, render, snapshot
from serverio.ops.run import make_admin_handler

from .conftest import connect, make_config, running_server, wait_until


@asynccontextmanager
async def admin_for(srv: Server) -> AsyncIterator[int]:
    listener = await open_admin_listener("127.0.0.1:0")
    port = listener.socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_admin, listener, make_admin_handler(srv, lambda: False))
        try:
            yield port
        finally:
            nursery.cancel_scope.cancel()


async def admin_get(port: int, path: str, method: str = "GET") -> tuple[int, str, bytes]:
    client = await connect(port)
    r = await client.get(path, method=method)
    await client.stream.aclose()
    return r.status, r.header("content-type") or "", r.body


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def test_metrics_parse_and_count(root: Path) -> None:
    async with running_server(make_config(root, fs_workers=2, fs_queue=4)) as (srv, port):
        async with admin_for(srv) as admin:
            client = await connect(port)
            for _ in range(3):
                assert (await client.get("/hello.txt")).status == 200
            assert (await client.get("/nope")).status == 404
            await client.stream.aclose()
            status, ctype, body = await admin_get(admin, "/metrics")
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
    m = samples(body.decode())
    assert m[("serverio_accepted_total", ())] == 1
    assert m[("serverio_completed_total", ())] == 4
    assert m[("serverio_client_errors_total", ())] == 1
    assert m[("serverio_timeouts_total", (("kind", "head"),))] == 0
    assert m[("serverio_bytes_sent_total", ())] == srv.stats.bytes_sent > 0
    assert m[("serverio_pool_submitted_total", (("pool", "fs"),))] == 4
    assert m[("serverio_pool_workers", (("pool", "fs"),))] == 2
    assert ("serverio_pool_running", (("pool", "work"),)) in m
    assert ("serverio_pool_late_closed_total", (("pool", "fs"),)) in m
    assert m[("serverio_response_seconds_count", ())] == 4
    assert m[("serverio_response_seconds_bucket", (("le", "+Inf"),))] == 4
    buckets = [m[("serverio_response_seconds_bucket", (("le", repr(b)),))] for b in BUCKETS]
    assert buckets == sorted(buckets)  # cumulative


async def test_admin_other_paths_and_methods(root: Path) -> None:
    async with running_server(make_config(root)) as (srv, _):
        async with admin_for(srv) as admin:
            assert (await admin_get(admin, "/nope"))[0] == 404
            assert (await admin_get(admin, "/healthz", "HEAD"))[0] == 200
            client = await connect(admin)
            await client.send_raw(b"POST /metrics HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n")
            assert (await client.read_response()).status == 405
            await client.stream.aclose()
    # The admin listener is not the public one: nothing was counted there.
    assert srv.stats.accepted == 0


async def test_healthz_flips_to_503_while_draining(root: Path) -> None:
    (root / "huge.bin").write_bytes(b"x" * 8_000_000)
    cfg = make_config(root, shutdown_timeout=30, write_timeout=30, host="127.0.0.1", port=0)
    srv = Server(cfg)
    async with trio.open_nursery() as nursery:
        await nursery.start(srv.serve)
        port = srv.addresses()[0][1]
        async with admin_for(srv) as admin:
            assert (await admin_get(admin, "/healthz"))[:1] == (200,)
            busy = await connect(port)
            await busy.send_raw(b"GET /huge.bin HTTP/1.1\r\nHost: t\r\n\r\n")
            await wait_until(lambda: any(c.in_flight for c in srv.connections))
            srv.shutdown()
            await wait_until(lambda: srv.draining)
            status, _, body = await admin_get(admin, "/healthz")
            assert (status, body) == (503, b"draining\n")
            m = samples((await admin_get(admin, "/metrics"))[2].decode())
            assert m[("serverio_draining", ())] == 1
            r = await busy.read_response()  # the drain lets it finish
            assert len(r.body) == 8_000_000
            await busy.stream.aclose()


def test_histogram_buckets_and_merge() -> None:
    h = Histogram()
    for v in (0.0001, 0.0005, 0.002, 100.0):
        h.observe(v)
    assert h.counts[0] == 2  # le=0.0005 is inclusive
    assert h.counts[-1] == 1  # +Inf
    snap = {
        "stats": {"accepted": 2},
        "pools": {"fs": {"submitted": 1, "peak_running": 3, "running": 1}},
        "open_connections": 1,
        "draining": 0,
        "abandoned_threads": 0,
        "histogram": {"counts": h.counts, "sum": h.sum},
    }
    total = merge([snap, snap])
    assert total["stats"]["accepted"] == 4
    assert total["pools"]["fs"] == {"submitted": 2, "peak_running": 3, "running": 2}
    m = samples(render(total))
    assert m[("serverio_response_seconds_count", ())] == 8


async def test_snapshot_covers_every_pool(root: Path) -> None:
    srv = Server(make_config(root))
    assert set(snapshot(srv)["pools"]) == {"fs", "work"}
