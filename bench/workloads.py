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
from dataclasses import dataclass, field
from typing import Any, Literal

from bench.fixtures import ASSET_COUNT, LISTING_DIR, LISTING_ENTRIES, Fixture, asset_paths

Feature = Literal["plain", "etag", "range", "gzip", "listing"]
WorkloadKind = Literal["wrk", "idle", "slow", "h2load"]

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

    def request_paths(self) -> list[str]:
        return list(self.paths) or [self.path]

    def request_headers(self) -> tuple[tuple[str, str], ...]:
        churn = (("Connection", "close"),) if self.churn else ()
        return churn + self.headers


H2_ONLY_REASON = "no HTTP/2 entry for this server"
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
        ),
        Workload(
            "dir",
            f"directory listing of /{LISTING_DIR}/ ({LISTING_ENTRIES} entries), 64 conns",
            path=f"/{LISTING_DIR}/",
            file=None,
            feature="listing",
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
                "the reference for 8m-h2",
                kind="h2load",
                path="/8m.bin",
                file="8m.bin",
                connections=16,
                h1=True,
                server_tags=frozenset({"h1-vs-h2"}),
                skip_reason_for_others="serverio's own HTTP/1.1 reference for 8m-h2",
            ),
        ),
    )
}

SMOKE_WORKLOADS = ("1k", "1k-churn", "idle", "1k-h2")


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    reason: str = ""
    # Extra headers for the load generator (e.g. If-None-Match with this server's ETag).
    headers: tuple[tuple[str, str], ...] = ()
    facts: dict[str, str] = field(default_factory=dict)


def _request(
    port: int, method: str, path: str, headers: tuple[tuple[str, str], ...] = ()
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10.0)
    try:
        conn.request(method, path, headers=dict(headers))
        resp = conn.getresponse()
        body = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, body
    finally:
        conn.close()


def probe(workload: Workload, port: int, fixture: Fixture) -> ProbeResult:
    """Check that the server on ``port`` serves ``workload`` correctly; see the module doc."""
    try:
        return _probe(workload, port, fixture)
    except (OSError, http.client.HTTPException) as exc:
        return ProbeResult(False, f"probe request failed: {exc!r}")


def _probe(workload: Workload, port: int, fixture: Fixture) -> ProbeResult:
    path, file = workload.path, workload.file
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
    status, headers, body = _request(port, "GET", path, workload.headers)
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
