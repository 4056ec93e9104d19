"""Workload definitions and the per-server probes that decide whether a server can run one.

A probe talks to the server once with urllib-level tooling before any load:
it checks the response is right for the workload (200 with the full body,
304 for a validator, 206 for a range, gzip for Accept-Encoding, a listing
for a directory) and returns extra request headers (the server's own ETag).
A server that fails the probe is *skipped with the reason*, never measured
serving the wrong thing.
"""

from __future__ import annotations

import gzip
import http.client
import importlib
import ssl
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from bench.fixtures import (
    ASSET_COUNT,
    LISTING_DIR,
    LISTING_ENTRIES,
    MANY_COUNT,
    TREE_DIRS,
    Fixture,
    asset_paths,
    many_asset_paths,
    many_plain_paths,
    tree_bytes,
    tree_name,
)

Feature = Literal["plain", "etag", "range", "gzip", "listing", "assets"]
WorkloadKind = Literal["wrk", "idle", "slow", "h2load", "proxy"]

RANGE_START, RANGE_END = 100, 1099


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    kind: WorkloadKind = "wrk"
    path: str = "/1k.bin"
    file: str | None = "1k.bin"
    connections: int = 64
    churn: bool = False
    headers: tuple[tuple[str, str], ...] = ()
    feature: Feature = "plain"
    # When set, only servers carrying one of these tags take part.
    server_tags: frozenset[str] | None = None
    # Appended to every serverio variant's command line for this workload.
    serverio_args: tuple[str, ...] = ()
    skip_reason_for_others: str = ""
    # h2load workloads: concurrent streams per connection (h2load -m), the
    # paths requested round robin (default: ``path``), and h2load --h1 (the
    # same load generator speaking HTTP/1.1, for the h2-vs-h1 comparison).
    streams: int = 1
    paths: tuple[str, ...] = ()
    h1: bool = False
    # The requests accept codings whose precompressed sidecars the fixture
    # has: servers with a sidecar-serving configuration (Caddy's
    # bench/configs/Caddyfile.precompressed) start with it.
    precompressed: bool = False
    # Cores the servers get: 1 is the harness's pinning (server on one CPU,
    # the load generator on the other); 2 leaves everything unpinned, the
    # load generator with 2 threads, and the servers start with 2 workers
    # (the runner tags the spec "cores2": nginx worker_processes 2, Caddy
    # GOMAXPROCS=2; serverio's --workers 2 is in ``serverio_args``).
    cores: int = 1
    # The many-files workloads: the servers serve a tree of this many 1 KiB
    # files (bench/fixtures.py tree_root) instead of the fixture, requested
    # at random (bench/wrk.py random_tree_script); 0: the fixture.
    tree: int = 0
    # Over TLS (https://): the probe connects with TLS, accepting the
    # servers' self-signed certificates.
    tls: bool = False

    def request_paths(self) -> list[str]:
        return list(self.paths) or [self.path]

    def request_headers(self) -> tuple[tuple[str, str], ...]:
        churn = (("Connection", "close"),) if self.churn else ()
        return churn + self.headers


H2_ONLY_REASON = "no HTTP/2 entry for this server"
PROXY_ONLY_REASON = "no reverse-proxy entry for this server"
IDENTITY = (("Accept-Encoding", "identity"),)
ASSETS_ACCEPT_ENCODING = "br;q=1, gzip;q=0.8"
# Shared by the HTTP/2 workloads: only servers tagged "h2" take part.
_H2: dict[str, Any] = {
    "server_tags": frozenset({"h2"}),
    "skip_reason_for_others": H2_ONLY_REASON,
}

WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload(
            "1k", "1 KiB file, 64 keep-alive connections (also: serverio pool vs inline, warm)"
        ),
        Workload(
            "1k-churn", "1 KiB file, 32 connections, Connection: close", connections=32, churn=True
        ),
        Workload(
            "16k-c64", "16 KiB file, 64 keep-alive connections", path="/16k.bin", file="16k.bin"
        ),
        Workload(
            "16k-c256",
            "16 KiB file, 256 keep-alive connections",
            path="/16k.bin",
            file="16k.bin",
            connections=256,
        ),
        Workload(
            "64k-c64", "64 KiB file, 64 keep-alive connections", path="/64k.bin", file="64k.bin"
        ),
        Workload(
            "256k-c64",
            "256 KiB file, 64 keep-alive connections (small-file crossover study)",
            path="/256k.bin",
            file="256k.bin",
        ),
        Workload(
            "64k-c256",
            "64 KiB file, 256 keep-alive connections",
            path="/64k.bin",
            file="64k.bin",
            connections=256,
        ),
        Workload(
            "8m-c16",
            "8 MiB file, 16 keep-alive connections",
            path="/8m.bin",
            file="8m.bin",
            connections=16,
        ),
        Workload(
            "304",
            "conditional GET (If-None-Match: server's ETag) of 1 KiB, 64 conns",
            feature="etag",
        ),
        Workload(
            "range",
            f"single range bytes={RANGE_START}-{RANGE_END} of 64 KiB, 64 conns",
            path="/64k.bin",
            file="64k.bin",
            headers=(("Range", f"bytes={RANGE_START}-{RANGE_END}"),),
            feature="range",
        ),
        Workload(
            "gzip",
            "64 KiB text, Accept-Encoding: gzip (cached/precompressed), 64 conns",
            path="/64k.txt",
            file="64k.txt",
            headers=(("Accept-Encoding", "gzip"),),
            feature="gzip",
            precompressed=True,
        ),
        Workload(
            "dir",
            f"directory listing of /{LISTING_DIR}/ ({LISTING_ENTRIES} entries), 64 conns",
            path=f"/{LISTING_DIR}/",
            file=None,
            feature="listing",
        ),
        *(
            Workload(
                f"assets-c{conns}",
                f"many assets: {MANY_COUNT} text files of 200 B-180 KiB round robin (wrk Lua), "
                f"Accept-Encoding: br;q=1, gzip;q=0.8, {conns:,} keep-alive connections",
                path=many_asset_paths()[0],
                file=None,
                paths=tuple(many_asset_paths()),
                connections=conns,
                headers=(("Accept-Encoding", ASSETS_ACCEPT_ENCODING),),
                feature="assets",
                precompressed=True,
            )
            for conns in (512, 4096)
        ),
        *(
            Workload(
                f"assets-nosidecar-c{conns}",
                f"many assets without sidecars: the {MANY_COUNT} text files of assets-c512 "
                f"round robin, Accept-Encoding: {ASSETS_ACCEPT_ENCODING} (serverio-identity: "
                f"identity), {conns:,} keep-alive connections",
                path=many_plain_paths()[0],
                file=None,
                paths=tuple(many_plain_paths()),
                connections=conns,
                headers=(("Accept-Encoding", ASSETS_ACCEPT_ENCODING),),
                feature="assets",
                server_tags=frozenset({"nosidecar"}),
                skip_reason_for_others="the no-sidecar comparison: serverio negotiated and "
                "identity, Caddy with and without encode, nginx",
            )
            for conns in (512, 64)
        ),
        Workload(
            "1k-cores2",
            "1 KiB file, 64 keep-alive connections, both cores: serverio --workers 2, Caddy "
            "GOMAXPROCS=2, nginx worker_processes 2; nothing pinned, wrk -t2",
            cores=2,
            serverio_args=("--workers", "2"),
            server_tags=frozenset({"two-core"}),
            skip_reason_for_others="the two-core comparison: serverio, Caddy, nginx",
        ),
        *(
            Workload(
                name,
                f"reverse proxy: {what} from one nginx upstream on loopback (keep-alive), "
                f"{conns} keep-alive connections",
                kind="proxy",
                path=f"/{file}",
                file=file,
                connections=conns,
                server_tags=frozenset({"proxy"}),
                skip_reason_for_others=PROXY_ONLY_REASON,
            )
            for name, what, file, conns in (
                ("proxy-1k-c64", "1 KiB", "1k.bin", 64),
                ("proxy-8m-c16", "8 MiB streamed", "8m.bin", 16),
                ("proxy-1k-c512", "1 KiB, default limits (errors must be 0)", "1k.bin", 512),
            )
        ),
        *(
            Workload(
                name,
                f"{count:,} distinct 1 KiB files in {TREE_DIRS} directories, requested at "
                "random (wrk Lua), 64 keep-alive connections",
                path=f"/{tree_name(0, count)}",
                file=None,
                tree=count,
            )
            for name, count in (("many-files", 100_000), ("few-files", 1_000))
        ),
        Workload(
            "1k-tls",
            "1 KiB over TLS (HTTP/1.1, self-signed P-256), 64 keep-alive connections",
            tls=True,
            server_tags=frozenset({"tls-h1"}),
            skip_reason_for_others="HTTP/1.1 over TLS: serverio-tls, caddy-tls, tls-floor",
        ),
        Workload("idle", "idle keep-alive connections: server RSS per connection", kind="idle"),
        Workload(
            "slow",
            "1 KiB on a FUSE mount adding 10 ms per open (one per request), 64 conns",
            kind="slow",
            # The warm-file cache would answer from memory and never reach
            # the slow open: this workload measures how the fs pool
            # overlaps blocking opens, so every request must make one.
            serverio_args=("--file-cache-size", "0"),
            server_tags=frozenset({"serverio"}),
            skip_reason_for_others="slow storage compares serverio fs-worker settings only",
        ),
        *(
            Workload(
                "1k-h2",
                "1 KiB over HTTP/2, h2load -c 64 -m 8",
                kind="h2load",
                streams=8,
                **_H2,
            ),
            Workload(
                "64k-h2",
                "64 KiB over HTTP/2, h2load -c 16 -m 4",
                kind="h2load",
                path="/64k.bin",
                file="64k.bin",
                connections=16,
                streams=4,
                **_H2,
            ),
            Workload(
                "64k-h2-c256",
                "64 KiB over HTTP/2, h2load -c 256 -m 8: 2,048 streams in flight "
                "(the output memory a server holds per stream)",
                kind="h2load",
                path="/64k.bin",
                file="64k.bin",
                connections=256,
                streams=8,
                **_H2,
            ),
            Workload(
                "assets-h2",
                f"many assets: {ASSET_COUNT} files of 1-48 KiB round robin, 16 clients with "
                "one HTTP/2 connection each, 32 streams (h2load -c 16 -m 32)",
                kind="h2load",
                path=asset_paths()[0],
                file=None,
                paths=tuple(asset_paths()),
                connections=16,
                streams=32,
                **_H2,
            ),
            Workload(
                "8m-h2",
                "8 MiB over HTTP/2, h2load -c 16 -m 1",
                kind="h2load",
                path="/8m.bin",
                file="8m.bin",
                connections=16,
                **_H2,
            ),
            Workload(
                "8m-h1",
                "8 MiB over HTTP/1.1 with the same generator (h2load --h1 -c 16): "
                "the reference for 8m-h2 (serverio's, nginx's and Caddy's own)",
                kind="h2load",
                path="/8m.bin",
                file="8m.bin",
                connections=16,
                h1=True,
                server_tags=frozenset({"h1-vs-h2"}),
                skip_reason_for_others="the HTTP/1.1 reference for 8m-h2 (serverio, nginx, Caddy)",
            ),
        ),
    )
}

SMOKE_WORKLOADS = ("1k", "1k-churn", "idle", "1k-h2", "proxy-1k-c64")


def for_server(workload: Workload, tags: frozenset[str]) -> Workload:
    """``workload`` as a server with ``tags`` is asked it: an entry tagged
    ``identity`` sends ``Accept-Encoding: identity`` instead of the
    workload's (serverio's identity variant of the no-sidecar workloads)."""
    if "identity" not in tags:
        return workload
    kept = tuple(h for h in workload.headers if h[0].lower() != "accept-encoding")
    return replace(workload, headers=kept + IDENTITY)


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    reason: str = ""
    # Extra headers for the load generator (e.g. If-None-Match with this server's ETag).
    headers: tuple[tuple[str, str], ...] = ()
    facts: dict[str, str] = field(default_factory=dict)


def connection(port: int, tls: bool = False) -> http.client.HTTPConnection:
    """A connection to the server on ``port``; with ``tls``, HTTPS that
    accepts any certificate (the servers' throwaway self-signed ones)."""
    if tls:
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE
        return http.client.HTTPSConnection("127.0.0.1", port, timeout=10.0, context=insecure)
    return http.client.HTTPConnection("127.0.0.1", port, timeout=10.0)


def _request(
    port: int,
    method: str,
    path: str,
    headers: tuple[tuple[str, str], ...] = (),
    conn: http.client.HTTPConnection | None = None,
    tls: bool = False,
) -> tuple[int, dict[str, str], bytes]:
    own = conn is None
    if conn is None:
        conn = connection(port, tls)
    try:
        conn.request(method, path, headers=dict(headers))
        resp = conn.getresponse()
        body = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, body
    finally:
        if own:
            conn.close()


def probe(workload: Workload, port: int, fixture: Fixture, prefix: str = "") -> ProbeResult:
    """Check that the server on ``port`` serves ``workload`` correctly; see the module doc.

    ``prefix`` goes before every path (granian serves files under a route).
    """
    try:
        if workload.tree:
            return _probe_tree(workload, port, fixture, prefix)
        if workload.feature == "assets":
            return _probe_assets(workload, port, fixture, prefix)
        return _probe(workload, port, fixture, prefix)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        return ProbeResult(False, f"probe request failed: {exc!r}")


def decode_body(body: bytes, coding: str) -> bytes:
    """``body`` with its Content-Encoding (``br``, ``gzip`` or none) undone.

    Raises ValueError for another coding, or ``br`` without the brotli module.
    """
    if coding in ("", "identity"):
        return body
    if coding == "gzip":
        return gzip.decompress(body)
    if coding == "br":
        try:
            brotli = importlib.import_module("brotli")
        except ImportError:
            raise ValueError("a br response, and no brotli module here to check it") from None
        data: bytes = brotli.decompress(body)
        return data
    raise ValueError(f"unexpected Content-Encoding {coding!r}")


def _probe_assets(workload: Workload, port: int, fixture: Fixture, prefix: str) -> ProbeResult:
    """Every path on one keep-alive connection: 200, and the file's bytes once decoded."""
    codings: dict[str, int] = {}
    sent = 0
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10.0)
    try:
        for path in workload.request_paths():
            status, headers, body = _request(port, "GET", prefix + path, workload.headers, conn)
            coding = headers.get("content-encoding", "").strip().lower()
            want = fixture.path(path.lstrip("/")).read_bytes()
            if status != 200 or decode_body(body, coding) != want:
                return ProbeResult(
                    False,
                    f"GET {path} -> {status} with {len(body)} bytes ({coding or 'identity'}), "
                    f"expected 200 with the file's {len(want)} bytes",
                )
            codings[coding or "identity"] = codings.get(coding or "identity", 0) + 1
            sent += len(body)
    finally:
        conn.close()
    return ProbeResult(
        True,
        facts={
            "codings": ", ".join(f"{k} {v}" for k, v in sorted(codings.items())),
            "body_bytes_per_round": str(sent),
        },
    )


def _probe_tree(workload: Workload, port: int, fixture: Fixture, prefix: str) -> ProbeResult:
    """A spread of the tree's files on one keep-alive connection: 200 and
    each file's bytes (bench/fixtures.py ``tree_bytes``: a damaged cached
    tree fails too; ``fixture`` is the tree's root here)."""
    count = workload.tree
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10.0)
    try:
        for index in sorted({0, 1, count // 3, count // 2, count - 1}):
            name = tree_name(index, count)
            status, _, body = _request(port, "GET", f"{prefix}/{name}", workload.headers, conn)
            want = tree_bytes(index)
            if status != 200 or body != want:
                return ProbeResult(
                    False,
                    f"GET /{name} -> {status} with {len(body)} bytes, "
                    f"expected 200 with {len(want)}",
                )
    finally:
        conn.close()
    return ProbeResult(True, facts={"files": str(count), "root": str(fixture.root)})


def _probe(workload: Workload, port: int, fixture: Fixture, prefix: str = "") -> ProbeResult:
    path, file = prefix + workload.path, workload.file
    expected = fixture.path(file).read_bytes() if file else b""
    if workload.feature == "etag":
        status, headers, _ = _request(port, "HEAD", path)
        etag = headers.get("etag")
        if status != 200 or not etag:
            return ProbeResult(False, f"no ETag (HEAD {path} -> {status})")
        cond = (("If-None-Match", etag),)
        status, _, _ = _request(port, "GET", path, cond)
        if status != 304:
            return ProbeResult(False, f"If-None-Match with its own ETag gave {status}, not 304")
        return ProbeResult(True, headers=cond, facts={"etag": etag})
    status, headers, body = _request(port, "GET", path, workload.headers, tls=workload.tls)
    if workload.feature == "range":
        want = expected[RANGE_START : RANGE_END + 1]
        if status != 206 or body != want:
            return ProbeResult(False, f"no single-range support (got {status}, {len(body)} bytes)")
        return ProbeResult(True, facts={"content-range": headers.get("content-range", "")})
    if workload.feature == "gzip":
        if status != 200 or headers.get("content-encoding") != "gzip":
            return ProbeResult(
                False,
                f"no gzip for text/plain "
                f"(got {status}, encoding {headers.get('content-encoding')})",
            )
        if gzip.decompress(body) != expected:
            return ProbeResult(False, "gzip body does not decompress to the file")
        return ProbeResult(True, facts={"compressed_bytes": str(len(body))})
    if workload.feature == "listing":
        names = [f"file{i:02d}.txt" for i in range(1, LISTING_ENTRIES + 1)]
        if status != 200 or not all(n.encode() in body for n in names):
            return ProbeResult(False, f"no directory listing (GET {path} -> {status})")
        return ProbeResult(True, facts={"listing_bytes": str(len(body))})
    if status != 200 or body != expected:
        return ProbeResult(
            False,
            f"GET {path} -> {status} with {len(body)} bytes, expected 200 with {len(expected)}",
        )
    return ProbeResult(True)
