"""Absent precompressed sidecars vouched for by their directory's identity
(serverio.fs.filecache, "Absent sidecars").

A warm negotiated answer without sidecars is revalidated with one ``stat``
of the file and one of its directory, however many sidecars are absent; a
sidecar that appears is still served by the very next request: on a fresh
tick (the directory's times move), within the same tick (the directory
was changed too recently to vouch for anything, so each sidecar is
stat'ed), and after a write through serverio (which forgets the entry
at once, also inside the pooled trust window), over HTTP/1.1 and HTTP/2.
"""

from __future__ import annotations

import gzip
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Protocol

import pytest
import trio

from serverio import Config, RequestFacts, Server, parse_target
from serverio.fs import filecache as _filecache
from serverio.fs.filecache import FileCache
from serverio.fs.opener import RootOpener
from serverio.http.core import FileFacts
from serverio.model import CachedFile
from serverio.pipeline.handler import prepare

from .conftest import HTTPClient, make_config, memory_connection
from .h2client import H2Client, h2_memory

LATER = float(int(time.time()) + 3600)  # every file and directory settled
TEXT = b"body { color: red; margin: 0 auto; }\n" * 200  # compresses well
ACCEPT = "br;q=1, gzip;q=0.8"


def _request(target: str, accept: str | None = ACCEPT) -> RequestFacts:
    return RequestFacts(
        method=b"GET", target=parse_target(b"GET", target.encode()), accept_encoding=accept
    )


def _site(root: Path) -> Path:
    """``css/site.css``, its times 10 s in the past, without sidecars."""
    (root / "css").mkdir()
    text = root / "css" / "site.css"
    text.write_bytes(TEXT)
    past = time.time_ns() - 10**10
    os.utime(text, ns=(past, past))
    return text


def _sidecar(text: Path, suffix: str = ".gz") -> bytes:
    """Write a sidecar of ``text``, one second newer than it: a valid gzip
    one, or for ``.br`` recognisable bytes (serverio does not decode it)."""
    data = gzip.compress(text.read_bytes()) if suffix == ".gz" else b"the br sidecar\n"
    side = text.with_name(text.name + suffix)
    side.write_bytes(data)
    later = text.stat().st_mtime_ns + 10**9
    os.utime(side, ns=(later, later))
    return data


class CountingStat:
    """The opener's ``stat``, counting the paths it was asked for."""

    def __init__(self, opener: RootOpener) -> None:
        self.inner = opener.stat
        self.paths: list[str] = []

    def __call__(self, path: str) -> os.stat_result:
        self.paths.append(path)
        return self.inner(path)


@pytest.fixture
def opener(root: Path) -> RootOpener:
    return RootOpener(str(root), follow_symlinks=False)


def _warm(cfg: Config, opener: RootOpener, cache: FileCache, req: RequestFacts) -> None:
    for _ in range(2):
        prepare(req, cfg, opener, LATER, "", cache, 0.0).close()


def test_absent_sidecars_cost_one_stat_of_the_directory(root: Path, opener: RootOpener) -> None:
    text = _site(root)
    cfg = make_config(root)
    cache = FileCache(1 << 20, cfg.files.small_file_size)
    req = _request("/css/site.css")
    _warm(cfg, opener, cache, req)
    entry = cache.get("css/site.css")
    assert entry is not None
    states = list(entry.sidecars.values())
    assert {s.path for s in states} == {"css/site.css.br", "css/site.css.gz"}
    assert all(s.ident is None and s.directory is not None for s in states)
    assert states[0].directory is states[1].directory  # one stamp, one stat
    counting = CountingStat(opener)
    assert cache.revalidate("css/site.css", entry, counting, 0.0)
    assert counting.paths == ["css/site.css", "css"]
    # A sidecar appears: the directory changed, the entry is stale.
    _sidecar(text)
    assert not cache.revalidate("css/site.css", entry, counting, 0.0)


def test_a_sidecar_of_a_file_at_the_root_is_vouched_for_by_the_root(
    root: Path, opener: RootOpener
) -> None:
    text = root / "site.css"
    text.write_bytes(TEXT)
    cfg = make_config(root)
    cache = FileCache(1 << 20, cfg.files.small_file_size)
    _warm(cfg, opener, cache, _request("/site.css"))
    entry = cache.get("site.css")
    assert entry is not None
    counting = CountingStat(opener)
    assert cache.revalidate("site.css", entry, counting, 0.0)
    assert counting.paths == ["site.css", "."]
    _sidecar(text, ".br")
    assert not cache.revalidate("site.css", entry, counting, 0.0)


def test_a_directory_changed_within_the_racy_window_vouches_for_nothing(
    root: Path, opener: RootOpener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same-tick rule: a directory changed less than RACY_SECONDS before
    the request could take a new entry without its times moving, so each
    absent sidecar is stat'ed itself; one created later is then seen even
    where the directory's times did not move (simulated here)."""
    monkeypatch.setattr(_filecache, "RACY_SECONDS", 0.3)
    text = _site(root)
    time.sleep(0.4)  # the file is settled ...
    (root / "css" / "other.txt").write_text("x")  # ... its directory is not
    cfg = make_config(root)
    cache = FileCache(1 << 20, cfg.files.small_file_size)
    prepare(_request("/css/site.css"), cfg, opener, time.time(), "", cache, 0.0).close()
    entry = cache.get("css/site.css")
    assert entry is not None
    assert all(s.ident is None and s.directory is None for s in entry.sidecars.values())
    frozen = opener.stat("css")

    def lying_stat(path: str) -> os.stat_result:
        # The directory's times do not move (a creation in the same tick).
        return frozen if path == "css" else opener.stat(path)

    assert cache.revalidate("css/site.css", entry, lying_stat, 0.0)
    _sidecar(text)
    assert not cache.revalidate("css/site.css", entry, lying_stat, 0.0)


@pytest.mark.skipif(os.name == "nt", reason="symlinks need privileges on Windows")
def test_a_dangling_symlink_sidecar_is_stat_ed_itself(root: Path, opener: RootOpener) -> None:
    """Its target can appear elsewhere without the directory changing."""
    text = _site(root)
    target = root / "elsewhere.gz"
    (root / "css" / "site.css.gz").symlink_to(target)
    cfg = make_config(root, hidden=True)  # symlinks are followed under the root
    cache = FileCache(1 << 20, cfg.files.small_file_size)
    op = RootOpener(str(root), follow_symlinks=True, hidden=True)
    try:
        prepare(_request("/css/site.css"), cfg, op, LATER, "", cache, 0.0).close()
        entry = cache.get("css/site.css")
        assert entry is not None
        gz, br = entry.sidecars["gzip"], entry.sidecars["br"]
        assert gz.ident is None and gz.directory is None  # the link exists
        assert br.ident is None and br.directory is not None  # no entry at all
        assert cache.revalidate("css/site.css", entry, op.stat, 0.0)
        target.write_bytes(gzip.compress(text.read_bytes()))
        assert not cache.revalidate("css/site.css", entry, op.stat, 0.0)
    finally:
        op.close()


def test_a_write_to_a_sidecar_forgets_the_file_it_compresses(root: Path) -> None:
    cache = FileCache(1 << 20, 1 << 16)
    facts = FileFacts(size=1, mtime_ns=0, dev=0, ino=0, content_type="text/javascript")
    for key in ("a.js", "b.js", "b.js.br"):
        cache.put(key, CachedFile((0, 0, 1, 0, 0), facts, b"x", 0.0))
    cache.forget("a.js.gz")
    assert cache.get("a.js") is None and cache.get("b.js") is not None
    cache.forget("b.js.br")
    assert cache.get("b.js") is None and cache.get("b.js.br") is None


# ------------------------------------------------------------------ servers


Answer = tuple[int, str | None, bytes]  # status, Content-Encoding, body


class _Client(Protocol):
    async def get(
        self, path: str, accept: str = ACCEPT, method: str = "GET", body: bytes = b""
    ) -> Answer: ...


@asynccontextmanager
async def _client(cfg: Config, protocol: str) -> AsyncIterator[tuple[_Client, Server]]:
    if protocol == "h1":
        async with memory_connection(cfg) as (client, srv, _):
            yield _H1(client), srv
    else:
        async with h2_memory(cfg) as (h2client, srv, _):
            yield _H2(h2client), srv


class _H1:
    def __init__(self, client: HTTPClient) -> None:
        self.client = client

    async def get(
        self, path: str, accept: str = ACCEPT, method: str = "GET", body: bytes = b""
    ) -> Answer:
        if method == "PUT":
            head = f"PUT {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}\r\n\r\n"
            await self.client.send_raw(head.encode() + body)
            r = await self.client.read_response()
        else:
            r = await self.client.get(path, f"Accept-Encoding: {accept}\r\n")
        return r.status, r.header("content-encoding"), r.body


class _H2:
    def __init__(self, client: H2Client) -> None:
        self.client = client

    async def get(
        self, path: str, accept: str = ACCEPT, method: str = "GET", body: bytes = b""
    ) -> Answer:
        c = self.client
        if method == "PUT":
            sid = c.request(path, "PUT", [("content-length", str(len(body)))], end_stream=False)
            c.conn.send_data(sid, body, end_stream=True)
            await c.flush()
            (r,) = await c.wait(sid)
        else:
            r = await c.get(path, [("accept-encoding", accept)])
        return r.status, r.headers.get("content-encoding"), bytes(r.body)


@pytest.fixture
def short_racy_window(monkeypatch: pytest.MonkeyPatch) -> float:
    """A 0.3 s same-tick window, so the server tests wait it out quickly."""
    monkeypatch.setattr(_filecache, "RACY_SECONDS", 0.3)
    return 0.3


async def _warm_br(client: _Client, srv: Server) -> None:
    for _ in range(3):
        status, coding, _ = await client.get("/css/site.css")
        assert (status, coding) == (200, "br")
    assert srv.files.stats.hits >= 1


@pytest.mark.parametrize("protocol", ["h1", "h2"])
async def test_a_sidecar_created_on_a_fresh_tick_is_served_next(
    root: Path, protocol: str, short_racy_window: float
) -> None:
    text = _site(root)
    await trio.sleep(short_racy_window + 0.1)  # file and directory settled
    async with _client(make_config(root), protocol) as (client, srv):
        await _warm_br(client, srv)
        entry = srv.files.get("css/site.css")
        assert entry is not None and entry.sidecars["br"].directory is not None
        data = _sidecar(text, ".br")
        # br still, but the sidecar's bytes, not the compression cache's.
        status, coding, body = await client.get("/css/site.css")
        assert (status, coding, body) == (200, "br", data)


@pytest.mark.parametrize("protocol", ["h1", "h2"])
async def test_a_sidecar_created_in_the_same_tick_is_served_next(
    root: Path, protocol: str, short_racy_window: float
) -> None:
    text = _site(root)
    await trio.sleep(short_racy_window + 0.1)  # the file is settled ...
    (root / "css" / "other.txt").write_text("x")  # ... its directory is not
    async with _client(make_config(root), protocol) as (client, srv):
        await _warm_br(client, srv)
        entry = srv.files.get("css/site.css")
        assert entry is not None and entry.sidecars["br"].directory is None
        data = _sidecar(text, ".br")
        status, coding, body = await client.get("/css/site.css")
        assert (status, coding, body) == (200, "br", data)


@pytest.mark.parametrize("protocol", ["h1", "h2"])
async def test_a_write_of_a_sidecar_is_seen_inside_the_pooled_window(
    root: Path, protocol: str, short_racy_window: float
) -> None:
    """Pooled mode trusts an entry for --fs-cache-valid without a syscall;
    a PUT of a sidecar through serverio forgets the file's entry at once."""
    _site(root)
    await trio.sleep(short_racy_window + 0.1)
    cfg = make_config(
        root, fs_workers=2, fs_queue=8, fs_cache_valid=3600.0, webdav=True, min_free_space=0
    )
    async with _client(cfg, protocol) as (client, srv):
        await _warm_br(client, srv)
        data = b"the br sidecar, uploaded\n"
        status, _, _ = await client.get("/css/site.css.br", method="PUT", body=data)
        assert status == 201
        status, coding, body = await client.get("/css/site.css")
        assert (status, coding, body) == (200, "br", data)
