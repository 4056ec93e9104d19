"""/metrics and /healthz on the admin listener (real sockets on 127.0.0.1)."""

from __future__ import annotations

import base64
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from serverio import Server
from serverio.app.admin import open_admin_listener, serve_admin
from serverio.fs import filecache as _filecache
from serverio.ops.metrics import BUCKETS, Histogram, counters_only, merge, render, snapshot
from serverio.ops.run import make_admin_handler, run_server

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
    assert m[("serverio_bytes_sent_total", ())] == srv.stats.responses.bytes_sent > 0
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
            r = await client.read_response()
            await client.stream.aclose()
            # RFC 9110 §15.5.6: a 405 lists the methods the target allows
            # (this endpoint's, not the file server's OPTIONS), from error_plan.
            assert r.status == 405 and r.header("allow") == "GET, HEAD"
            assert r.header("x-content-type-options") == "nosniff"
            assert r.header("date") is not None and r.header("connection") == "close"
            assert r.body == b"405 Method Not Allowed\n"
            ok = await connect(admin)
            got = await ok.get("/healthz")
            await ok.stream.aclose()
            assert got.header("date") is not None  # every answer has the common fields
            assert got.header("x-content-type-options") == "nosniff"
            assert got.header("cache-control") == "no-store"
    # The admin listener is not the public one: nothing was counted there.
    assert srv.stats.conns.accepted == 0


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


# ------------------------------------------------------------------ caches

Labels = tuple[tuple[str, str], ...]


def cache_numbers(m: dict[tuple[str, Labels], float], cache: str) -> dict[str, float]:
    """The serverio_cache_* samples of one cache, by short name."""
    out = {}
    for (name, labels), value in m.items():
        if name.startswith("serverio_cache_") and labels == (("cache", cache),):
            short = name.removeprefix("serverio_cache_").removesuffix("_total")
            out[short] = value
    return out


@pytest.fixture
def settled_files(monkeypatch: pytest.MonkeyPatch) -> None:
    # Files just written count as settled, so the warm-file cache keeps them.
    monkeypatch.setattr(_filecache, "RACY_SECONDS", -3600.0)


@pytest.mark.usefixtures("settled_files")
@pytest.mark.parametrize("fs_workers", [0, 2])
async def test_file_cache_counters_in_metrics(root: Path, fs_workers: int) -> None:
    (root / "one.txt").write_bytes(b"1" * 1000)
    (root / "two.txt").write_bytes(b"2" * 1000)
    # Room for one 1000-byte file (plus its per-entry overhead), not two.
    cfg = make_config(root, file_cache_size=3000, fs_workers=fs_workers, fs_queue=4 * fs_workers)
    async with running_server(cfg) as (srv, port):
        async with admin_for(srv) as admin:
            client = await connect(port)
            # Full, a file is stored on its second miss (admission when full).
            for path in ("/one.txt", "/one.txt", "/two.txt", "/two.txt", "/one.txt", "/one.txt"):
                r = await client.get(path)
                assert r.status == 200 and r.body == (root / path[1:]).read_bytes()
            await client.stream.aclose()
            m = samples((await admin_get(admin, "/metrics"))[2].decode())
    file = cache_numbers(m, "file")
    # Pooled mode looks the file up on the event loop and again in the
    # thread: each request still counts once.
    assert file["hits"] == 1
    assert file["misses"] == 5
    assert file["stored"] == 3
    assert file["evictions"] == 2  # two.txt pushed one.txt out, then back
    assert file["entries"] == 1
    assert file["bytes"] == srv.files.size > 1000
    assert file["capacity_bytes"] == 3000


def _text(n: int) -> bytes:
    # Base64 of random bytes: compresses by about a quarter, whatever the codec.
    return base64.b64encode(os.urandom(n))[:n]


async def test_compression_and_digest_cache_counters_in_metrics(root: Path) -> None:
    (root / "page1.txt").write_bytes(_text(4000))
    (root / "page2.txt").write_bytes(_text(4000))
    # One compressed page (about 3000 bytes) fits, two do not.
    cfg = make_config(root, file_cache_size=0, compress_cache_size=4000, digest=True)
    gzip = "Accept-Encoding: gzip\r\n"
    async with running_server(cfg) as (srv, port):
        async with admin_for(srv) as admin:
            client = await connect(port)
            for path, headers in (
                ("/page1.txt", gzip),  # compression miss, digest (gzip) miss
                ("/page1.txt", gzip),  # both hits
                ("/page2.txt", gzip),  # both misses; page1 evicted from compression
                ("/hello.txt", ""),  # too small to compress; digest (identity) miss
                ("/hello.txt", ""),  # digest hit
            ):
                r = await client.get(path, headers)
                assert r.status == 200 and r.header("repr-digest")
                assert r.header("content-encoding") == ("gzip" if headers else None)
            await client.stream.aclose()
            m = samples((await admin_get(admin, "/metrics"))[2].decode())
    compression = cache_numbers(m, "compression")
    assert compression["hits"] == 1
    assert compression["misses"] == 2
    assert compression["started"] == 2
    assert compression["stored"] == 2
    assert compression["evictions"] == 1
    assert compression["entries"] == 1
    assert compression["bytes"] == srv.content.compressed.size
    assert 2000 < compression["bytes"] <= 4000
    assert compression["capacity_bytes"] == 4000
    digest = cache_numbers(m, "digest")
    assert (digest["hits"], digest["misses"], digest["evictions"]) == (2, 3, 0)
    assert digest["entries"] == 3 and digest["bytes"] == srv.content.digests.size > 0
    file = cache_numbers(m, "file")  # off: never consulted
    assert (file["hits"], file["misses"], file["capacity_bytes"]) == (0, 0, 0)


def test_cache_numbers_merge_and_retire() -> None:
    def snap(hits: int, size: int) -> dict[str, object]:
        return {
            "stats": {},
            "caches": {"file": {"hits": hits, "misses": 1, "bytes": size, "entries": 1}},
            "pools": {},
            "open_connections": 0,
            "draining": 0,
            "abandoned_threads": 0,
            "histogram": {"counts": [0] * (len(BUCKETS) + 1), "sum": 0.0},
        }

    total = merge([snap(2, 100), snap(3, 50)])
    assert total["caches"]["file"] == {"hits": 5, "misses": 2, "bytes": 150, "entries": 2}
    # A retired worker keeps contributing its counters, not its sizes.
    assert counters_only(total)["caches"]["file"] == {"hits": 5, "misses": 2}
    m = samples(render(total))
    assert m[("serverio_cache_hits_total", (("cache", "file"),))] == 5
    assert m[("serverio_cache_bytes", (("cache", "file"),))] == 150


@pytest.mark.usefixtures("settled_files")
async def test_shutdown_summary_reports_cache_counters(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (root / "page.txt").write_bytes(_text(4000))
    cfg = make_config(root).evolve(host="127.0.0.1", port=0, verbose=True)

    async def traffic(srv: Server) -> None:
        client = await connect(srv.addresses()[0][1])
        for _ in range(3):
            assert (await client.get("/hello.txt")).status == 200
        for _ in range(2):
            r = await client.get("/page.txt", "Accept-Encoding: gzip\r\n")
            assert r.header("content-encoding") == "gzip"
        await client.stream.aclose()
        srv.shutdown()

    with trio.fail_after(10):
        assert await run_server(cfg, admin=False, extra=[traffic]) == 0
    err = capsys.readouterr().err
    # -v: the short summary line, then every counter on one line.
    lines = [ln for ln in err.splitlines() if ln.startswith("serverio: stopped:")]
    assert len(lines) == 1
    assert lines[0].startswith(
        "serverio: stopped: 5 requests, 0 client errors (4xx), 0 server errors (5xx), "
    )
    counters = [ln for ln in err.splitlines() if ln.startswith("serverio: counters:")]
    assert len(counters) == 1
    fields = dict(kv.split("=", 1) for kv in counters[0].split()[2:])
    assert fields["completed"] == "5"
    # hello.txt: one miss, two hits; page.txt: one miss, one hit.
    assert (fields["cache_file_hits"], fields["cache_file_misses"]) == ("3", "2")
    assert fields["cache_file_entries"] == "2"
    assert int(fields["cache_file_bytes"]) > 4000
    assert (fields["cache_compression_hits"], fields["cache_compression_misses"]) == ("1", "1")
    assert fields["cache_compression_entries"] == "1"
    assert fields["cache_compression_evictions"] == "0"
    assert (fields["cache_digest_hits"], fields["cache_digest_misses"]) == ("0", "0")


@pytest.mark.parametrize(
    ("host", "warns"),
    [
        ("127.0.0.1", False),
        ("127.8.9.10", False),
        ("::1", False),
        ("localhost", False),
        ("0.0.0.0", True),
        ("::", True),
        ("192.0.2.7", True),
        ("admin.example", True),
    ],
)
async def test_admin_bind_off_loopback_warns_once_at_start(
    host: str, warns: bool, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The listener itself is bound on loopback whatever the address asked
    # for (no test listens off loopback): only the warning is under test.
    import serverio.app.admin as admin_mod
    from serverio.net.listen import _bind as real_bind

    async def loopback_bind(_host: str, port: int) -> trio.SocketListener:
        return await real_bind("127.0.0.1", port)

    monkeypatch.setattr(admin_mod, "_bind", loopback_bind)
    spec = f"[{host}]:0" if ":" in host else f"{host}:0"
    with caplog.at_level("WARNING", logger="serverio"):
        listener = await open_admin_listener(spec)
    await listener.aclose()
    lines = [r.getMessage() for r in caplog.records]
    if warns:
        assert lines == [
            f"--admin-bind {host} is not a loopback address: /metrics and /healthz "
            "answer anyone who reaches it, without authentication"
        ]
    else:
        assert lines == []


def test_per_user_counters_come_from_the_site_protocol(tmp_path: Path) -> None:
    """The per-user counters are read through the exchange's SiteSteps
    protocol (``user_counts``), not an attribute of one site class: a site
    that implements the protocol only is counted (it was left out when
    the metrics looked for a ``gate`` attribute)."""

    class Counted:
        def user_counts(self) -> dict[str, tuple[int, int, int]]:
            return {"alice": (3, 1024, 1), "bob": (0, 0, 0)}

    root = tmp_path / "root"
    root.mkdir()
    srv = Server(make_config(root))
    assert "users" not in snapshot(srv) or snapshot(srv)["users"] == {}
    srv.env.site = Counted()  # type: ignore[assignment]  # the protocol's one metrics method
    got = samples(render(snapshot(srv)))
    assert got[("serverio_user_requests_total", (("user", "alice"),))] == 3
    assert got[("serverio_user_bytes_total", (("user", "alice"),))] == 1024
    assert got[("serverio_user_denied_total", (("user", "alice"),))] == 1
    assert got[("serverio_user_denied_total", (("user", "bob"),))] == 0
