"""Content features through the engine: compression and its single-flight
cache, sidecars, digests, listings, downloads, SPA fallback.

Memory streams (no sockets) and a real ``work`` pool; blocking jobs are
gated with ``threading.Event`` so concurrency is arranged, never slept for.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import brotli
import pytest
import trio
import trio.testing
import zstandard

from serverio import Config, Server, run_blocking
from serverio.http import codecs as codecs_mod
from serverio.http.core import content_digest
from serverio.net.connection import ConnectionTask
from testkit import simulation

from .conftest import (
    HTTPClient,
    Response,
    connect,
    make_config,
    open_fd_count,
    reset,
    running_server,
    wait_until,
)

# A name HTML would misread; Windows forbids "<" and ">" in names, so there
# the ampersand and the apostrophe stand in for them.
HOSTILE = "<script>x.txt" if os.name != "nt" else "&script'x.txt"

TEXT = ("serverio compresses text on the fly; " * 400).encode()  # ~14 KiB
GZ = "Accept-Encoding: gzip\r\n"

Connect = Callable[[], Awaitable[tuple[HTTPClient, trio.CancelScope]]]


@asynccontextmanager
async def memory_server(cfg: Config) -> AsyncIterator[tuple[Server, Connect]]:
    """One Server (with its cache-job nursery) and any number of in-memory
    connections to it; each connection runs in its own cancel scope."""
    srv = Server(cfg)
    _ = srv.opener
    async with srv.handler.running(), trio.open_nursery() as nursery:

        async def connect() -> tuple[HTTPClient, trio.CancelScope]:
            client, theirs = trio.testing.memory_stream_pair()
            conn = ConnectionTask(srv.env, theirs, "memory")
            scope = trio.CancelScope()

            async def run() -> None:
                with scope:
                    await conn.run()

            nursery.start_soon(run)
            return HTTPClient(client, theirs), scope

        try:
            yield srv, connect
        finally:
            nursery.cancel_scope.cancel()
    srv.opener.close()


async def fetch(cfg: Config, *requests: tuple[str, str]) -> list[Response]:
    async with memory_server(cfg) as (_, connect):
        client, _ = await connect()
        return [await client.get(target, headers) for target, headers in requests]


@pytest.fixture
def text_root(root: Path) -> Path:
    (root / "app.js").write_bytes(TEXT)
    (root / "tiny.css").write_bytes(b"a{}" * 10)  # 30 bytes: below the minimum
    (root / "pic.png").write_bytes(b"\x89PNG" + os.urandom(4000))
    return root


class Gate:
    """Make a codec block until released, and count its calls."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.calls = 0
        self._lock = threading.Lock()

    def wrap(self, fn: Callable[[bytes], bytes]) -> Callable[[bytes], bytes]:
        def gated(data: bytes) -> bytes:
            with self._lock:
                self.calls += 1
            assert self.event.wait(10), "gate never opened"
            return fn(data)

        return gated


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[Gate]:
    g = Gate()
    monkeypatch.setitem(codecs_mod.CODECS, "gzip", g.wrap(codecs_mod.CODECS["gzip"]))
    yield g
    g.event.set()  # never leave a worker thread blocked


# ------------------------------------------------------------- compression


async def test_codings_decode_to_the_file(text_root: Path) -> None:
    cfg = make_config(text_root)
    gz, br, zst, ident, plain = await fetch(
        cfg,
        ("/app.js", GZ),
        ("/app.js", "Accept-Encoding: br\r\n"),
        ("/app.js", "Accept-Encoding: zstd\r\n"),
        ("/app.js", "Accept-Encoding: identity\r\n"),
        ("/app.js", ""),
    )
    assert gzip.decompress(gz.body) == TEXT and gz.header("content-encoding") == "gzip"
    assert brotli.decompress(br.body) == TEXT and br.header("content-encoding") == "br"
    assert zstandard.ZstdDecompressor().decompress(zst.body) == TEXT
    assert zst.header("content-encoding") == "zstd"
    for r in (gz, br, zst):
        assert int(r.header("content-length") or 0) == len(r.body) < len(TEXT)
        assert r.header("vary") == "Accept-Encoding"
    # Identity: same Vary, no coding, the file's own ETag.
    for r in (ident, plain):
        assert r.body == TEXT and r.header("content-encoding") is None
        assert r.header("vary") == "Accept-Encoding"
    etag = plain.header("etag") or ""
    assert gz.header("etag") == etag[:-1] + '-gzip"'
    assert br.header("etag") == etag[:-1] + '-br"'
    assert len({etag, gz.header("etag"), br.header("etag"), zst.header("etag")}) == 4


async def test_what_is_not_compressed(text_root: Path) -> None:
    big_only = make_config(text_root, compress_max_size=1000)
    (tiny, png, rng, bounded) = await fetch(
        make_config(text_root),
        ("/tiny.css", GZ),
        ("/pic.png", GZ),
        ("/app.js", GZ + "Range: bytes=0-99\r\n"),
        ("/app.js", GZ),
    )
    [over_max] = await fetch(big_only, ("/app.js", GZ))
    assert tiny.header("content-encoding") is None and tiny.header("vary") == "Accept-Encoding"
    assert png.header("content-encoding") is None and png.header("vary") is None
    # A Range request gets the identity representation (206, Vary kept).
    assert rng.status == 206 and rng.body == TEXT[:100] and rng.header("content-encoding") is None
    assert rng.header("vary") == "Accept-Encoding"
    assert bounded.header("content-encoding") == "gzip"
    assert over_max.header("content-encoding") is None and over_max.body == TEXT


async def test_head_mirrors_get(text_root: Path) -> None:
    async with memory_server(make_config(text_root)) as (_, connect):
        client, _ = await connect()
        get = await client.get("/app.js", GZ)
        head = await client.get("/app.js", GZ, method="HEAD")
    assert head.body == b""
    for name in ("content-encoding", "content-length", "etag", "vary", "content-type"):
        assert head.header(name) == get.header(name), name


async def test_304_per_representation(text_root: Path) -> None:
    async with memory_server(make_config(text_root)) as (srv, connect):
        client, _ = await connect()
        gz = await client.get("/app.js", GZ)
        ident = await client.get("/app.js")
        started = srv.content.compressed.stats.started
        same = await client.get("/app.js", f"{GZ}If-None-Match: {gz.header('etag')}\r\n")
        other = await client.get("/app.js", f"{GZ}If-None-Match: {ident.header('etag')}\r\n")
        back = await client.get("/app.js", f"If-None-Match: {gz.header('etag')}\r\n")
    assert same.status == 304 and same.header("etag") == gz.header("etag")
    assert same.header("vary") == "Accept-Encoding"
    assert other.status == 200 and other.header("content-encoding") == "gzip"
    assert back.status == 200 and back.body == TEXT
    assert srv.content.compressed.stats.started == started == 1


async def test_cache_hit_has_no_thread_hop(text_root: Path) -> None:
    async with memory_server(make_config(text_root)) as (srv, connect):
        client, _ = await connect()
        first = await client.get("/app.js", GZ)
        submitted = srv.work.stats.submitted
        for _ in range(5):
            again = await client.get("/app.js", GZ)
            assert again.body == first.body
        assert srv.work.stats.submitted == submitted  # hits never touch the work pool
        stats = srv.content.compressed.stats
        assert stats.started == 1 and stats.hits == 5
        assert srv.stats.content.compressed_responses == 6


async def test_cache_keyed_by_identity(text_root: Path) -> None:
    async with memory_server(make_config(text_root)) as (srv, connect):
        client, _ = await connect()
        a = await client.get("/app.js", GZ)
        (text_root / "app.js").write_bytes(TEXT + b"// changed\n")
        b = await client.get("/app.js", GZ)
    assert gzip.decompress(b.body) == TEXT + b"// changed\n"
    assert a.header("etag") != b.header("etag")
    assert srv.content.compressed.stats.started == 2


async def test_cache_bounded_lru(text_root: Path) -> None:
    for i in range(4):
        (text_root / f"f{i}.txt").write_bytes(os.urandom(600).hex().encode())  # 1200 B, ~700 gz
    async with memory_server(make_config(text_root, compress_cache_size=1600)) as (srv, connect):
        client, _ = await connect()
        for i in range(4):
            assert (await client.get(f"/f{i}.txt", GZ)).header("content-encoding") == "gzip"
        cache = srv.content.compressed
        assert cache.size <= 1600 and len(cache) == 2 and cache.stats.evicted == 2
        await client.get("/f3.txt", GZ)  # hit
        await client.get("/f0.txt", GZ)  # evicted earlier: a new job
    assert cache.stats.hits == 1 and cache.stats.started == 5


# ----------------------------------------------------------- single flight


async def test_cold_miss_storm_compresses_once(text_root: Path, gate: Gate) -> None:
    """256 concurrent requests for one uncached file: exactly one compression."""
    n = 256
    async with memory_server(make_config(text_root)) as (srv, connect):
        cache = srv.content.compressed
        results: list[Response] = []

        async def one() -> None:
            client, _ = await connect()
            results.append(await client.get("/app.js", GZ))

        async with trio.open_nursery() as storm:
            for _ in range(n):
                storm.start_soon(one)
            # Every request is waiting on the one job before it may finish.
            await wait_until(lambda: cache.stats.joined == n - 1)
            gate.event.set()
    assert gate.calls == 1
    assert cache.stats.started == 1 and cache.stats.joined == n - 1
    assert len(results) == n and all(gzip.decompress(r.body) == TEXT for r in results)
    assert srv.work.stats.submitted == 1


async def test_cancelled_requester_does_not_cancel_the_job(text_root: Path, gate: Gate) -> None:
    async with memory_server(make_config(text_root)) as (srv, connect):
        cache = srv.content.compressed
        first, first_scope = await connect()
        await first.send_raw(b"GET /app.js HTTP/1.1\r\nHost: t\r\n" + GZ.encode() + b"\r\n")
        await wait_until(lambda: cache.in_flight == 1 and gate.calls == 1)
        first_scope.cancel()  # the first requester's task is cancelled
        await wait_until(lambda: first_scope.cancelled_caught)
        assert cache.in_flight == 1
        second, _ = await connect()
        await second.send_raw(b"GET /app.js HTTP/1.1\r\nHost: t\r\n" + GZ.encode() + b"\r\n")
        await wait_until(lambda: cache.stats.joined == 1)
        gate.event.set()
        r = await second.read_response()
    assert gzip.decompress(r.body) == TEXT
    assert gate.calls == 1 and cache.stats.started == 1


async def test_job_without_waiters_fills_cache_and_closes_its_fd(
    text_root: Path, gate: Gate
) -> None:
    async with memory_server(make_config(text_root)) as (srv, connect):
        cache = srv.content.compressed
        baseline = open_fd_count()
        client, scope = await connect()
        await client.send_raw(b"GET /app.js HTTP/1.1\r\nHost: t\r\n" + GZ.encode() + b"\r\n")
        await wait_until(lambda: gate.calls == 1)
        scope.cancel()
        await wait_until(lambda: scope.cancelled_caught)
        gate.event.set()
        await wait_until(lambda: len(cache) == 1 and cache.in_flight == 0)
        await wait_until(lambda: srv.work.running == 0)
        # The requester's fd and the job's duplicate are both closed (the
        # memory stream pair holds no fd).
        assert open_fd_count() == baseline
        again, _ = await connect()
        r = await again.get("/app.js", GZ)
    assert gzip.decompress(r.body) == TEXT and cache.stats.started == 1 and cache.stats.hits == 1


async def test_shutdown_mid_job_closes_fd_once(text_root: Path, gate: Gate) -> None:
    """Jobs die with the server's job nursery; the abandoned thread closes
    its descriptor when it ends, the queued job before it ever runs."""
    cfg = make_config(text_root, work_workers=1, work_queue=4)
    (text_root / "other.js").write_bytes(TEXT + b"2")
    srv = Server(cfg)
    _ = srv.opener
    baseline = open_fd_count()
    async with trio.open_nursery() as nursery:
        scope = trio.CancelScope()

        async def serve_memory() -> None:
            with scope:
                async with srv.handler.running(), trio.open_nursery() as conns:
                    for target in ("/app.js", "/other.js"):
                        client, theirs = trio.testing.memory_stream_pair()
                        conns.start_soon(ConnectionTask(srv.env, theirs, "m").run)
                        await HTTPClient(client).send_raw(
                            f"GET {target} HTTP/1.1\r\nHost: t\r\n{GZ}\r\n".encode()
                        )
                    await trio.sleep_forever()

        nursery.start_soon(serve_memory)
        # One job runs (blocked in the codec), the other waits in the queue.
        await wait_until(lambda: gate.calls == 1 and srv.work.queued == 1)
        scope.cancel()
    assert srv.work.stats.cancelled_waiting == 1 and srv.work.stats.abandoned == 1
    gate.event.set()
    await wait_until(lambda: srv.work.running == 0)
    assert open_fd_count() == baseline
    assert gate.calls == 1
    srv.opener.close()


async def test_saturated_work_pool_serves_identity(text_root: Path) -> None:
    cfg = make_config(text_root, work_workers=1, work_queue=0, digest=True)
    hold = threading.Event()
    async with memory_server(cfg) as (srv, connect):
        async with trio.open_nursery() as n:
            n.start_soon(run_blocking, srv.work, hold.wait, 10)
            await wait_until(lambda: srv.work.running == 1)
            client, _ = await connect()
            r = await client.get("/app.js", GZ)
            listing, _ = await connect()
            lst = await listing.get("/noindex/")
            hold.set()
        again, _ = await connect()
        later = await again.get("/app.js", GZ)
    assert r.status == 200 and r.body == TEXT and r.header("content-encoding") is None
    assert r.header("vary") == "Accept-Encoding" and r.header("repr-digest") is None
    assert srv.stats.content.compress_fallbacks == 1 and srv.stats.content.digest_omitted == 1
    assert srv.content.compressed.stats.saturated == 1
    assert lst.status == 503 and lst.header("retry-after") == "1"
    # Not cached as a failure: the next request compresses.
    assert later.header("content-encoding") == "gzip" and later.header("repr-digest")


# ---------------------------------------------------------------- sidecars


async def test_precompressed_sidecars(text_root: Path) -> None:
    gz_bytes = gzip.compress(TEXT, 9)
    br_bytes = brotli.compress(TEXT)
    (text_root / "app.js.gz").write_bytes(gz_bytes)
    (text_root / "app.js.br").write_bytes(br_bytes)
    os.utime(text_root / "app.js", ns=(10**18, 10**18))
    os.utime(text_root / "app.js.gz", ns=(10**18 + 1, 10**18 + 1))
    os.utime(text_root / "app.js.br", ns=(10**18, 10**18))
    cfg = make_config(text_root)
    async with memory_server(cfg) as (srv, connect):
        client, _ = await connect()
        gz = await client.get("/app.js", GZ)
        br = await client.get("/app.js", "Accept-Encoding: gzip, br\r\n")
        gz304 = await client.get("/app.js", f"{GZ}If-None-Match: {gz.header('etag')}\r\n")
        direct = await client.get("/app.js.gz")
    assert gz.body == gz_bytes and gz.header("content-length") == str(len(gz_bytes))
    assert br.body == br_bytes and br.header("content-encoding") == "br"
    # The sidecar's own validator: the hash of its bytes, marked with its coding.
    assert gz.header("etag") == '"' + content_digest(gz_bytes).hex() + '-gzip"'

    assert gz304.status == 304
    assert direct.header("content-type") == "application/gzip" and direct.body == gz_bytes
    assert srv.content.compressed.stats.started == 0  # nothing compressed on the fly
    # Older than the file: stale, ignored (compressed on the fly instead).
    os.utime(text_root / "app.js.gz", ns=(10**18 - 1, 10**18 - 1))
    [stale] = await fetch(cfg, ("/app.js", GZ))
    assert gzip.decompress(stale.body) == TEXT and stale.body != gz_bytes
    # --no-precompressed: ignored.
    [off] = await fetch(make_config(text_root, precompressed=False), ("/app.js", GZ))
    assert off.body != gz_bytes and gzip.decompress(off.body) == TEXT


async def test_sidecar_follows_containment(text_root: Path) -> None:
    outside = text_root.parent / "outside"
    (outside / "evil.gz").write_bytes(gzip.compress(b"OUTSIDE"))
    (text_root / "app.js.gz").symlink_to(outside / "evil.gz")
    [r] = await fetch(make_config(text_root, compress_max_size=0), ("/app.js", GZ))
    assert r.body == TEXT and r.header("content-encoding") is None


# ------------------------------------------------------------------ digest


def _digest(r: Response) -> tuple[str, bytes]:
    value = r.header("repr-digest") or ""
    alg, _, rest = value.partition("=")
    assert rest.startswith(":") and rest.endswith(":"), value
    return alg, base64.b64decode(rest[1:-1])


async def test_repr_digest_matches_received_bytes(text_root: Path) -> None:
    (text_root / "big.js").write_bytes(TEXT * 20)  # > small_file_size: sendfile path
    cfg = make_config(text_root, digest=True)
    ident, gz, rng, sha512, big, nodigest, tiny_head, tiny = await fetch(
        cfg,
        ("/app.js", ""),
        ("/app.js", GZ),
        ("/app.js", "Range: bytes=10-19\r\n"),
        ("/app.js", "Want-Repr-Digest: sha-512=5, sha-256=1\r\n"),
        ("/big.js", ""),
        ("/app.js", "Want-Repr-Digest: md5=9\r\n"),
        ("/hello.txt", "X: 1\r\n"),
        ("/hello.txt", ""),
    )
    assert _digest(ident) == ("sha-256", hashlib.sha256(ident.body).digest())
    # The coded representation's digest is over the bytes as sent.
    assert _digest(gz) == ("sha-256", hashlib.sha256(gz.body).digest())
    # 206: the digest of the whole representation, not of the part.
    assert rng.status == 206 and _digest(rng) == ("sha-256", hashlib.sha256(TEXT).digest())
    assert _digest(sha512) == ("sha-512", hashlib.sha512(TEXT).digest())
    assert _digest(big) == ("sha-256", hashlib.sha256(big.body).digest())
    assert nodigest.header("repr-digest") is None
    assert _digest(tiny) == ("sha-256", hashlib.sha256(b"hello world\n").digest())
    assert tiny_head.header("repr-digest") == tiny.header("repr-digest")


async def test_digest_cached_and_off_by_default(text_root: Path) -> None:
    async with memory_server(make_config(text_root, digest=True)) as (srv, connect):
        client, _ = await connect()
        a = await client.get("/app.js")
        b = await client.get("/app.js")
        head = await client.get("/app.js", method="HEAD")
    assert a.header("repr-digest") == b.header("repr-digest") == head.header("repr-digest")
    assert srv.content.digests.stats.started == 1 and srv.content.digests.stats.hits == 2
    [off] = await fetch(make_config(text_root), ("/app.js", ""))
    assert off.header("repr-digest") is None


# ----------------------------------------------------------------- listing


@pytest.fixture
def tree(root: Path) -> Path:
    d = root / "noindex"
    (d / "sub").mkdir()
    (d / "b.bin").write_bytes(b"x" * 5000)
    (d / ".dot").write_text("hidden")
    (d / HOSTILE).write_text("evil")
    (d / "in-link").symlink_to("a.txt")
    (d / "out-link").symlink_to(root.parent / "outside" / "secret.txt")
    (d / "dangling").symlink_to("nowhere")
    os.mkfifo(d / "fifo")
    return root


async def test_listing_html(tree: Path) -> None:
    [r] = await fetch(make_config(tree), ("/noindex/", ""))
    page = r.body.decode()
    assert r.status == 200 and r.header("content-type") == "text/html; charset=utf-8"
    assert r.header("vary") == "Accept" and (r.header("etag") or "").startswith('W/"')
    assert r.header("last-modified") is None
    assert 'href="./sub/"' in page and 'href="./a.txt"' in page and 'href="./in-link"' in page
    if os.name == "nt":  # no "<" or ">" in Windows names
        assert 'href="./%26script\'x.txt"' in page or 'href="./%26script%27x.txt"' in page
        assert "&amp;script" in page and "&script" not in page
    else:
        assert 'href="./%3Cscript%3Ex.txt"' in page and "&lt;script&gt;x.txt" in page
        # The page's own scripts (the theme's in the head, the filter), no name.
        assert page.count("<script>") == 2
    for absent in (".dot", "out-link", "dangling", "fifo"):
        assert absent not in page
    # Directories first.
    assert page.index('href="./sub/"') < page.index('href="./a.txt"')


async def test_listing_json_sort_and_policies(tree: Path) -> None:
    cfg = make_config(tree)
    by_accept, by_query, by_size, html_wins = await fetch(
        cfg,
        ("/noindex/", "Accept: application/json\r\n"),
        ("/noindex/?format=json", ""),
        ("/noindex/?format=json&sort=size&order=desc", ""),
        ("/noindex/?format=html", "Accept: application/json\r\n"),
    )
    doc = json.loads(by_accept.body)
    assert by_accept.header("content-type") == "application/json"
    assert [e["name"] for e in doc["entries"]] == [
        "sub",
        HOSTILE,
        "a.txt",
        "b.bin",
        "in-link",
    ]
    assert json.loads(by_query.body) == doc
    assert [e["name"] for e in json.loads(by_size.body)["entries"]] == [
        "sub",
        "b.bin",
        HOSTILE,
        "in-link",  # 2 bytes (it resolves to a.txt): the name breaks the tie, descending
        "a.txt",
    ]
    assert html_wins.header("content-type") == "text/html; charset=utf-8"
    # --hidden and --follow-symlinks widen what is listed, as what is served.
    [wide] = await fetch(
        make_config(tree, hidden=True, follow_symlinks=True), ("/noindex/?format=json", "")
    )
    names = {e["name"] for e in json.loads(wide.body)["entries"]}
    assert {".dot", "out-link"} <= names and "dangling" not in names and "fifo" not in names


async def test_listing_root_shows_well_known_only(tree: Path) -> None:
    (tree / "index.html").unlink()
    [r] = await fetch(make_config(tree), ("/?format=json", ""))
    names = {e["name"] for e in json.loads(r.body)["entries"]}
    assert ".well-known" in names and ".secret" not in names


async def test_listing_304_truncation_and_off(tree: Path) -> None:
    async with memory_server(make_config(tree, listing_max_entries=2)) as (_, connect):
        client, _ = await connect()
        first = await client.get("/noindex/")
        again = await client.get("/noindex/", f"If-None-Match: {first.header('etag')}\r\n")
        js = await client.get("/noindex/?format=json")
    assert again.status == 304 and again.header("vary") == "Accept"
    assert "Listing truncated" in first.body.decode()
    doc = json.loads(js.body)
    assert doc["truncated"] is True and len(doc["entries"]) == 2
    off = await fetch(make_config(tree, listing=False), ("/noindex/", ""), ("/noindex", ""))
    assert off[0].status == 404 and off[1].status == 301


# ---------------------------------------------------------------- download


@pytest.mark.skipif(
    simulation.WINDOWS_SHAPED,
    reason="names with undecodable bytes, ':' or control characters cannot exist on Windows",
)
async def test_download_disposition(root: Path) -> None:
    evil = 'q"uote\r\nSet-Cookie: x=1.txt'
    (root / evil).write_text("payload")
    (root / "pkg.zip").write_bytes(b"PK")
    cfg = make_config(root, download=("*.zip",))
    plain, asked, glob, weird = await fetch(
        cfg,
        ("/hello.txt", ""),
        ("/hello.txt?download", ""),
        ("/pkg.zip", ""),
        ("/q%22uote%0D%0ASet-Cookie%3A%20x%3D1.txt?download=1", ""),
    )
    assert plain.header("content-disposition") is None
    assert asked.header("content-disposition") == (
        "attachment; filename=\"hello.txt\"; filename*=UTF-8''hello.txt"
    )
    assert (glob.header("content-disposition") or "").startswith('attachment; filename="pkg.zip"')
    assert weird.status == 200 and weird.body == b"payload"
    assert "set-cookie" not in weird.headers
    value = weird.header("content-disposition") or ""
    assert value == (
        'attachment; filename="q_uote__Set-Cookie: x=1.txt"; '
        "filename*=UTF-8''q%22uote%0D%0ASet-Cookie%3A%20x%3D1.txt"
    )


# --------------------------------------------------------------------- SPA


async def test_spa_fallback(root: Path) -> None:
    outside = root.parent / "outside"
    (root / "out-dir").symlink_to(outside)
    cfg = make_config(root, spa="index.html")
    route, deep, head, asset, hidden, escaped, real, dir_ = await fetch(
        cfg,
        ("/app/users/42", ""),
        ("/app/users/", ""),
        ("/x", "X: 1\r\n"),
        ("/app.js", ""),
        ("/.hidden/route", ""),
        ("/out-dir/route", ""),
        ("/hello.txt", ""),
        ("/noindex/", ""),
    )
    for r in (route, deep, head):
        assert r.status == 200 and r.body == b"<h1>home</h1>\n"
        assert r.header("content-type") == "text/html; charset=utf-8"
    assert asset.status == 404 and hidden.status == 404
    assert escaped.status == 404  # the requested path failed containment
    assert real.body == b"hello world\n" and dir_.status == 200  # existing paths unchanged
    [off] = await fetch(make_config(root), ("/app/users/42", ""))
    assert off.status == 404


async def test_spa_file_must_pass_containment(root: Path) -> None:
    (root / "shell.html").symlink_to(root.parent / "outside" / "secret.txt")
    [r] = await fetch(make_config(root, spa="shell.html"), ("/route", ""))
    assert r.status == 404 and b"OUTSIDE" not in r.body


# ------------------------------------------------- real sockets, pooled hop


async def test_real_sockets_with_fs_pool(text_root: Path) -> None:
    """Follow-ups after a pooled preparation hop, over a real socket (sendfile)."""
    big = TEXT * 30  # > small_file_size: the identity body goes out by sendfile
    (text_root / "big.js").write_bytes(big)
    cfg = make_config(text_root, fs_workers=2, fs_queue=8, digest=True)
    async with running_server(cfg) as (srv, port):
        client = await connect(port)
        gz = await client.get("/big.js", GZ)
        ident = await client.get("/big.js")
        lst = await client.get("/noindex/?format=json")
        await client.stream.aclose()
    assert gzip.decompress(gz.body) == big
    assert _digest(gz) == ("sha-256", hashlib.sha256(gz.body).digest())
    assert ident.body == big and _digest(ident) == ("sha-256", hashlib.sha256(big).digest())
    if simulation.WINDOWS_SHAPED:  # no os.sendfile: the portable buffered path
        sent = srv.stats.responses
        assert sent.sendfile_responses == 0 and sent.buffered_responses >= 1
    else:
        assert srv.stats.responses.sendfile_responses == 1
    assert [e["name"] for e in json.loads(lst.body)["entries"]] == ["a.txt"]
    assert srv.fs.stats.submitted == 3


async def test_client_hangup_while_waiting(text_root: Path, gate: Gate) -> None:
    """A client that hangs up stops waiting at once: its queued listing scan
    leaves the work queue, its wait on a compression job ends, and the job
    still finishes and fills the cache."""
    cfg = make_config(text_root, work_workers=1, work_queue=4)
    async with memory_server(cfg) as (srv, connect):
        cache = srv.content.compressed
        gz, _ = await connect()
        await gz.send_raw(b"GET /app.js HTTP/1.1\r\nHost: t\r\n" + GZ.encode() + b"\r\n")
        await wait_until(lambda: gate.calls == 1)  # the one worker is busy compressing
        lst, _ = await connect()
        await lst.send_raw(b"GET /noindex/ HTTP/1.1\r\nHost: t\r\n\r\n")
        await wait_until(lambda: srv.work.queued == 1)
        await reset(lst)
        await reset(gz)
        await wait_until(lambda: srv.stats.conns.cancelled == 2)
        assert srv.work.queued == 0 and srv.work.stats.cancelled_waiting == 1
        assert cache.in_flight == 1  # nobody waits, the job goes on
        gate.event.set()
        await wait_until(lambda: len(cache) == 1)
    assert srv.stats.content.listings == 0 and srv.stats.responses.completed == 0
