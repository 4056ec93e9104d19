"""Rendered listings are shared between identical requests.

Every request scans its directory; requests whose scans find the same
entries for the same path and query get the one rendered body from the
listing cache (keyed by directory identity, path, query and a digest of the
scanned entries), so a slow reader pins no private copy, and any change a
listing would show (a file added, a size or a time changed) is a new key.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from serverio.ops.metrics import caches_of
from testkit.reliability import MiB, ServerProcess

from .conftest import make_config, memory_connection
from .test_transport import KiB, _connect, _read_response, _request


def _listing_stats(srv: object) -> tuple[int, int]:
    numbers = caches_of(srv)  # type: ignore[arg-type]
    return numbers["listing"]["hits"], numbers["listing"]["stored"]


async def test_a_changed_directory_gets_a_new_listing_not_the_cached_one(tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    (d / "a.txt").write_bytes(b"a")
    os.symlink("d", tmp_path / "alias")  # the same directory by another path
    async with memory_connection(make_config(tmp_path)) as (client, srv, _):
        first = await client.get("/d/")
        again = await client.get("/d/")
        assert first.status == again.status == 200 and again.body == first.body
        assert again.header("etag") == first.header("etag")
        assert _listing_stats(srv) == (1, 1)  # the second was answered from the cache

        # Another path to the same inode has its own title and breadcrumbs.
        alias = await client.get("/alias/")
        assert b"Index of /alias/" in alias.body and alias.body != first.body

        # A file added.
        (d / "b.txt").write_bytes(b"bb")
        added = await client.get("/d/?format=json")
        names = [e["name"] for e in json.loads(added.body)["entries"]]
        assert names == ["a.txt", "b.txt"]
        html = await client.get("/d/")
        assert b"b.txt" in html.body and html.header("etag") != first.header("etag")

        # A size changed (same names, same inode).
        before = json.loads((await client.get("/d/?format=json")).body)
        (d / "a.txt").write_bytes(b"a" * 1000)
        after = json.loads((await client.get("/d/?format=json")).body)
        assert [e["size"] for e in before["entries"]] == [1, 2]
        assert [e["size"] for e in after["entries"]] == [1000, 2]

        # A time changed, nothing else.
        os.utime(d / "b.txt", (1_000_000_000, 1_000_000_000))
        timed = json.loads((await client.get("/d/?format=json")).body)
        assert [e["mtime"] for e in timed["entries"]][1] == 1_000_000_000

        # A conditional request for the cached listing still revalidates.
        etag = html.header("etag")
        assert etag is not None
        (d / "a.txt").unlink()
        gone = await client.get("/d/", f"If-None-Match: {etag}\r\n")
        assert gone.status == 200 and b"a.txt" not in gone.body
        same = await client.get("/d/", f"If-None-Match: {gone.header('etag')}\r\n")
        assert same.status == 304


async def test_each_query_has_its_own_listing_and_zero_turns_the_cache_off(
    tmp_path: Path,
) -> None:
    for name, size in (("small", 1), ("big", 300)):
        (tmp_path / name).write_bytes(b"x" * size)
    async with memory_connection(make_config(tmp_path)) as (client, srv, _):
        by_name = await client.get("/")
        by_size = await client.get("/?sort=size&order=desc")
        as_json = await client.get("/?format=json")
        assert len({by_name.body, by_size.body, as_json.body}) == 3
        assert by_size.body.index(b"big") < by_size.body.index(b"small")
        assert by_name.body.index(b"big") < by_name.body.index(b"small")  # b < s
        assert (await client.get("/?sort=size&order=desc")).body == by_size.body
        assert _listing_stats(srv) == (1, 3)
    async with memory_connection(make_config(tmp_path, listing_cache_size=0)) as (client, srv, _):
        for _ in range(2):
            r = await client.get("/")
            assert r.status == 200 and r.body == by_name.body
        assert _listing_stats(srv) == (0, 0)
        assert srv.content.listings.size == 0


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads VmRSS from /proc")
def test_stalled_readers_of_a_large_listing_share_one_body(tmp_path: Path) -> None:
    """N clients ask for a ~3 MB listing, read 100 bytes and stall: the
    server's RSS grows by less than 64 KiB each (plus a fixed allowance),
    not by a rendered copy of the listing each."""
    www = tmp_path / "www"
    big = www / "big"
    big.mkdir(parents=True)
    for i in range(7000):
        (big / f"{i:06d}-{'n' * 120}.txt").touch()
    conns = 20
    with ServerProcess(www, "--write-timeout", "60", probed=False) as srv:
        with _connect(srv.port) as sock:  # warm: one full read
            sock.sendall(_request("/big/", "Connection: close\r\n"))
            status, _, body = _read_response(sock)
        assert status == 200 and len(body) > 2 * MiB
        time.sleep(0.3)
        before = srv.rss()[0]
        stalled = []
        try:
            for _ in range(conns):
                sock = _connect(srv.port, rcvbuf=4096)
                stalled.append(sock)
                sock.sendall(_request("/big/"))
                got = sock.recv(100)
                assert got.startswith(b"HTTP/1.1 200"), got
            time.sleep(0.5)  # every writer is now blocked on its full socket
            after = srv.rss()[0]
        finally:
            for sock in stalled:
                sock.close()
    grown = after - before
    per_conn = grown / conns
    print(
        f"\nstalled listing readers: {conns}, listing {len(body) / MiB:.2f} MiB, "
        f"RSS {before / MiB:.1f} -> {after / MiB:.1f} MiB ({per_conn / KiB:.0f} KiB each)"
    )
    assert grown < conns * 64 * KiB + 8 * MiB, (
        f"RSS grew {grown / MiB:.1f} MiB for {conns} stalled readers "
        f"({per_conn / KiB:.0f} KiB each; listing {len(body) / KiB:.0f} KiB)"
    )
