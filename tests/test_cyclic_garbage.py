"""A warm request makes no cyclic garbage (issue 47).

Everything a request allocates must be freed by reference counting: the
cyclic collector then only ever finds nothing, and the objects frozen out
of its reach (serverio.observe.collector) can never hold a cycle that
should have been collected.  Each case answers 1,000 requests over the
bench pair harness (bench/pair.py: a ConnectionTask on one end of a
socketpair) after a warm-up, with the collector off, and then asks
``gc.collect()`` how many unreachable objects it found: it must be 0.
The types of what it found are in the failure message.
"""

from __future__ import annotations

import gc
import os
import time
from collections import Counter
from pathlib import Path

import pytest
import trio

from bench.pair import connected
from serverio import Config

WARM_UP = 200
REQUESTS = 1_000
SOME_FILES = 300


def _request(path: str, extra: str = "") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nUser-Agent: wrk\r\n{extra}\r\n".encode()


@pytest.fixture
def site(tmp_path: Path) -> Path:
    (tmp_path / "1k.bin").write_bytes(os.urandom(1024))
    (tmp_path / "64k.bin").write_bytes(os.urandom(65536))
    for i in range(SOME_FILES):
        (tmp_path / f"f{i}.bin").write_bytes(os.urandom(1024))
    settled = time.time() - 3600  # older than the cache's racy window
    for p in tmp_path.iterdir():
        os.utime(p, (settled, settled))
    return tmp_path


async def read_response(client: trio.socket.SocketType, buf: bytearray, head_only: bool) -> bytes:
    """One response's head, its body (Content-Length bytes; none for a
    HEAD's or a 304: ``head_only``) skipped; what follows stays in ``buf``."""
    while b"\r\n\r\n" not in buf:
        buf += await client.recv(1 << 20)
    end = buf.index(b"\r\n\r\n") + 4
    head = bytes(buf[:end])
    del buf[:end]
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    if head_only:
        length = 0
    while len(buf) < length:
        buf += await client.recv(1 << 20)
    del buf[:length]
    return head


async def _cyclic_garbage(
    cfg: Config, requests: list[bytes], head_only: bool = False
) -> tuple[int, Counter[str]]:
    """Unreachable objects the collector finds after REQUESTS requests
    (round robin over ``requests``), and their types."""
    buf = bytearray()
    async with connected(cfg) as client:
        for i in range(WARM_UP):
            await client.send(requests[i % len(requests)])
            await read_response(client, buf, head_only)
        gc.collect()
        gc.disable()
        try:
            for i in range(REQUESTS):
                await client.send(requests[i % len(requests)])
                head = await read_response(client, buf, head_only)
                assert head.startswith((b"HTTP/1.1 2", b"HTTP/1.1 3", b"HTTP/1.1 404"))
            gc.set_debug(gc.DEBUG_SAVEALL)  # keep what it finds, to name it
            found = gc.collect()
            kinds = Counter(type(o).__name__ for o in gc.garbage)
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
    return found, kinds


CASES = {
    "cached-1k": ([_request("/1k.bin")], {}),
    "uncached-1k": ([_request("/1k.bin")], {"file_cache_size": 0}),
    "sendfile-64k": ([_request("/64k.bin")], {}),
    "range": ([_request("/1k.bin", "Range: bytes=0-9\r\n")], {}),
    "gzip": ([_request("/1k.bin", "Accept-Encoding: gzip\r\n")], {}),
    "not-found": ([_request("/nope")], {}),
    "listing": ([_request("/")], {}),
    # More files than the cache holds: every request evicts and stores.
    "cache-churn": (
        [_request(f"/f{i}.bin") for i in range(SOME_FILES)],
        {"file_cache_size": 20000},
    ),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_warm_requests_make_no_cyclic_garbage(site: Path, case: str) -> None:
    requests, options = CASES[case]
    cfg = Config.of(directory=str(site), access_log="off", max_requests=10**9, **options)
    found, kinds = await _cyclic_garbage(cfg, requests)
    assert found == 0, f"{case}: {found} objects in cycles after {REQUESTS} requests: {kinds}"


async def test_head_requests_make_no_cyclic_garbage(site: Path) -> None:
    cfg = Config.of(directory=str(site), access_log="off", max_requests=10**9)
    head = b"HEAD /1k.bin HTTP/1.1\r\nHost: x\r\n\r\n"
    found, kinds = await _cyclic_garbage(cfg, [head], head_only=True)
    assert found == 0, f"HEAD: {found} objects in cycles: {kinds}"


async def test_conditional_requests_make_no_cyclic_garbage(site: Path) -> None:
    cfg = Config.of(directory=str(site), access_log="off", max_requests=10**9)
    async with connected(cfg) as client:
        await client.send(_request("/1k.bin"))
        head = await read_response(client, bytearray(), False)
    etag = next(
        line.split(b":", 1)[1].strip().decode()
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"etag:")
    )
    conditional = _request("/1k.bin", f"If-None-Match: {etag}\r\n")
    found, kinds = await _cyclic_garbage(cfg, [conditional], head_only=True)
    assert found == 0, f"304: {found} objects in cycles: {kinds}"
