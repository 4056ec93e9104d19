"""The direct resolution of a plain small-file miss
(serverio.fs.prepare.resolve_direct, serverio.model.decide.decide_direct)
answers exactly as the general way (resolve, then decide) would: the same
plan, body, served path and descriptors, and the same counts and stores in
the warm-file and metadata caches.

Two handlers over one tree with one configuration, one with the direct
way turned off, are asked the same requests at the same moments, the tree
changed between them; every answer and every cache state after it must be
equal.  Generated with hypothesis over the settings the direct way reads
or declines on (cache sizes, the small-file size, ETag mode, SPA,
negotiation, downloads, uploads' active fields, digests) and the requests
it takes or declines (methods, preconditions, Range, query, codings,
directories, missing and large files).
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import serverio.pipeline.handler as handler_module
from serverio import Config, Server
from serverio.fs import prepare
from serverio.fs.opener import RootOpener
from serverio.fs.prepare import resolve as real_resolve
from serverio.fs.prepare import resolve_direct as real_direct
from serverio.http.core import FileSpan, RequestFacts
from serverio.model import ERROR, Direct, Prepared, Resolution
from serverio.pipeline.handler import Handler
from serverio.site.passwords import hash_password
from serverio.wire.fasthead import FastRequest, HeadParser
from serverio.wire.h1facts import request_facts

from .conftest import make_config

# The tree both handlers serve (written once per test; the steps change it).
FILES: dict[str, bytes] = {
    "a.txt": b"alpha\n",
    "page.html": b"<p>" + b"x" * 300 + b"</p>\n",
    "style.css": b"body{}" * 40,
    "data.bin": bytes(range(256)) * 4,
    "empty.txt": b"",
    "big.bin": b"B" * 70_000,  # over the default small-file size (64 KiB)
    "sub/index.html": b"<p>sub</p>\n",
    "sub/deep.txt": b"deep\n",
    "route": b"not a route",
    "page.html.gz": b"\x1f\x8b not really gzip",
}
PATHS = (
    "/a.txt",
    "/page.html",
    "/style.css",
    "/data.bin",
    "/empty.txt",
    "/big.bin",
    "/sub",
    "/sub/",
    "/sub/deep.txt",
    "/missing.txt",
    "/no/such/route",
    "/a.txt/",
    "/a.txt?download",
    "/route",
    "/page.html.gz",
    # Symlinks in and out of the root (--follow-symlinks generated), a
    # FIFO, dotfiles (which the routing refuses before either way is
    # asked, unless --hidden): the same answer whichever way resolves them.
    "/link.txt",  # a symlink to a.txt, inside the root
    "/out.txt",  # a symlink out of the root
    "/.secret",
    "/sub/.env",
    "/fifo",
)
HEADERS = (
    "",  # the plain request, most of the direct way's: weighted
    "",
    "",
    "Accept-Encoding: gzip, br\r\n",
    "Accept-Encoding: identity\r\n",
    'If-None-Match: "x"\r\n',
    "Range: bytes=0-3\r\n",
    "Want-Repr-Digest: sha-256=5\r\n",
)

SETTINGS = st.fixed_dictionaries(
    {
        "file_cache_size": st.sampled_from([0, 2048, 16 << 20]),
        "file_meta_entries": st.sampled_from([0, 2, 16384]),
        "small_file_size": st.sampled_from([65536, 100]),
        "etag": st.sampled_from(["auto", "content"]),
        "spa": st.sampled_from([None, "a.txt"]),
        "precompressed": st.booleans(),
        "compress_max_size": st.sampled_from([0, 1 << 20]),
        "download": st.sampled_from([(), ("*.css",)]),
        "digest": st.booleans(),
        "upload": st.booleans(),
        "hidden": st.booleans(),
        "follow_symlinks": st.booleans(),
    }
)
# A request: path, method, extra header; or a change to the tree.
REQUEST = st.tuples(
    st.sampled_from(PATHS), st.sampled_from(["GET", "HEAD"]), st.sampled_from(HEADERS)
)
CHANGE = st.tuples(
    st.sampled_from(["a.txt", "data.bin", "page.html", "empty.txt"]),
    st.sampled_from(["same-size", "grow", "delete", "recreate"]),
)
STEP = st.one_of(REQUEST.map(lambda r: ("ask", r)), CHANGE.map(lambda c: ("change", c)))


def _write_tree(root: Path) -> None:
    for name, data in FILES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    # Settled files for the caches: changed long before the moments asked
    # at (the racy rule, serverio.fs.filecache) -- except that a ctime
    # cannot be set back; the moments are after it (see NOW_OFFSETS).
    old = time.time() - 3600
    for name in FILES:
        os.utime(root / name, (old, old))
    for name in (".secret", "sub/.env"):
        (root / name).write_bytes(b"TOKEN=hunter2\n")
        os.utime(root / name, (old, old))
    outside = root.parent / f"{root.name}-outside.txt"
    outside.write_bytes(b"outside the root\n")
    (root / "link.txt").symlink_to("a.txt")
    (root / "out.txt").symlink_to(outside)
    if hasattr(os, "mkfifo"):
        os.mkfifo(root / "fifo")


def _change(root: Path, name: str, how: str) -> None:
    path = root / name
    if how == "delete":
        path.unlink(missing_ok=True)
    elif how == "recreate":
        path.unlink(missing_ok=True)
        path.write_bytes(FILES[name])
    elif how == "grow":
        with path.open("ab") as f:
            f.write(b"+")
    elif path.exists():  # same size, new bytes
        data = path.read_bytes()
        path.write_bytes(bytes((b + 1) % 256 for b in data))


def _facts(cfg: Config, path: str, method: str, header: str) -> RequestFacts:
    raw = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{header}\r\n".encode()
    event = HeadParser(16384, raw).next_event()
    assert isinstance(event, FastRequest)
    return request_facts(event, cfg)[0]


def _answer(got: object) -> tuple[Any, ...]:
    """What must be equal of one answer (and its descriptors closed)."""
    if not isinstance(got, Prepared):
        inner = getattr(got, "prepared", None)
        if isinstance(inner, Prepared):
            inner.close()
        return (type(got).__name__,)
    plan = got.plan
    body = tuple((p.offset, p.length) if isinstance(p, FileSpan) else bytes(p) for p in plan.body)
    held = got.fd >= 0
    got.close()
    return (
        plan.status,
        plan.headers,
        body,
        plan.send_body,
        plan.close,
        got.served,
        got.real,
        got.facts,
        got.todo is None,
        held,
    )


def _caches(handler: Handler) -> tuple[Any, ...]:
    """The caches' counts and contents, in their LRU order."""
    files = handler.files
    meta = files.meta
    entries = [
        (key, e.ident, e.facts, e.data, e.whole, e.headers, dict(e.sidecars))
        for key, e in files._entries.items()
    ]
    return (
        files.stats,
        entries,
        None if meta is None else (meta.stats, list(meta._entries.items())),
        list(handler.content.hashes._hashes.items()),
    )


@contextmanager
def _handlers(cfg: Config) -> Iterator[tuple[Handler, Handler]]:
    servers = [Server(cfg), Server(cfg)]
    try:
        general = servers[1].handler
        general.direct = False
        yield servers[0].handler, general
    finally:
        for srv in servers:
            srv.services.close_root()


# The moments asked at, after the tree was written: within RACY_SECONDS
# (nothing settled: no store, no metadata) and well after.
NOW_OFFSETS = (0.0, 10.0)


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    options=SETTINGS,
    steps=st.lists(STEP, min_size=1, max_size=14),
    late=st.sampled_from(NOW_OFFSETS),
)
def test_the_direct_way_answers_and_caches_as_the_general_way(
    tmp_path_factory: pytest.TempPathFactory,
    options: dict[str, Any],
    steps: list[tuple[str, Any]],
    late: float,
) -> None:
    root = tmp_path_factory.mktemp("direct")
    _write_tree(root)
    cfg = make_config(root, **options)
    now = time.time() + late
    with _handlers(cfg) as (direct, general):
        assert direct.direct
        for kind, step in steps:
            if kind == "change":
                _change(root, *step)
                continue
            path, method, header = step
            req = _facts(cfg, path, method, header)
            first = _answer(direct.respond_now(req, now))
            second = _answer(general.respond_now(req, now))
            assert first == second, (path, method, header)
            assert _caches(direct) == _caches(general), (path, method, header)
            now += 0.25


@pytest.mark.parametrize(
    ("path", "method", "header", "way"),
    [
        ("/a.txt", "GET", "", "direct"),
        ("/a.txt", "HEAD", "", "direct"),
        ("/data.bin", "GET", "Accept-Encoding: gzip\r\n", "direct"),  # not compressible
        ("/missing.txt", "GET", "", "error"),  # its 404 decided as the general way's
        ("/page.html", "GET", "", "direct"),
        # Opened once, then resolved the general way from that descriptor:
        ("/big.bin", "GET", "", "handed"),  # streamed
        ("/sub", "GET", "", "handed"),  # a redirect
        # The general way, from the start:
        ("/page.html", "GET", "Accept-Encoding: gzip\r\n", "general"),  # a coding
        ("/sub/", "GET", "", "general"),
        ("/a.txt?download", "GET", "", "general"),
        ("/a.txt", "GET", 'If-None-Match: "x"\r\n', "general"),
        ("/a.txt", "GET", "Range: bytes=0-1\r\n", "general"),
    ],
)
def test_which_requests_are_resolved_directly(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    path: str,
    method: str,
    header: str,
    way: str,
) -> None:
    _write_tree(tmp_path)
    cfg = make_config(tmp_path)
    ways: list[str] = []
    opens: list[str] = []
    real_path = prepare._resolve_path
    real_open = RootOpener.open

    def resolve(*args: Any, **kw: Any) -> Any:
        ways.append("general")
        return real_resolve(*args, **kw)

    def resolve_path(*args: Any, **kw: Any) -> Any:
        if len(args) > 8 and args[8] is not None:
            ways.append("handed")
        return real_path(*args, **kw)

    def direct(*args: Any, **kw: Any) -> Any:
        found = real_direct(*args, **kw)
        if isinstance(found, Direct):
            ways.append("direct")
        elif isinstance(found, Resolution) and found.kind == ERROR:
            ways.append("error")
        return found

    def counted_open(self: RootOpener, rel: str) -> int:
        opens.append(rel)
        return real_open(self, rel)

    monkeypatch.setattr(handler_module, "resolve", resolve)
    monkeypatch.setattr(handler_module, "resolve_direct", direct)
    monkeypatch.setattr(prepare, "_resolve_path", resolve_path)
    monkeypatch.setattr(RootOpener, "open", counted_open)
    with _handlers(cfg) as (handler, _):
        _answer(handler.respond_now(_facts(cfg, path, method, header), time.time() + 10))
    assert ways == [way]
    if way != "general":  # one open of the target, whichever way answers
        assert opens == [path.strip("/")]


def test_not_under_auth_rules_nor_pooled(tmp_path: Path) -> None:
    # Auth rules decide where a symlink led (the general way says); pooled
    # mode resolves in its one hop.
    www = tmp_path / "www"
    _write_tree(www)
    users = tmp_path / "users.htpasswd"
    users.write_text(f"alice:{hash_password('wonderland', 1000)}\n")
    ruled = make_config(www, auth=(("/sub/**", str(users)),))
    with _handlers(ruled) as (handler, _):
        assert not handler.direct
    with _handlers(make_config(www, fs_workers=2)) as (handler, _):
        assert not handler.direct
    with _handlers(make_config(www)) as (handler, _):
        assert handler.direct


def test_no_descriptor_outlives_a_direct_answer(tmp_path: Path) -> None:
    fds = Path("/proc/self/fd")
    if not fds.is_dir():
        pytest.skip("counts /proc/self/fd")
    _write_tree(tmp_path)
    cfg = make_config(tmp_path, file_cache_size=0)
    with _handlers(cfg) as (handler, _):
        ask = [
            _facts(cfg, p, m, "")
            for p in ("/a.txt", "/missing.txt", "/empty.txt")
            for m in ("GET", "HEAD")
        ]
        _answer(handler.respond_now(ask[0], time.time()))  # the root opened
        before = len(list(fds.iterdir()))
        for req in ask * 20:
            _answer(handler.respond_now(req, time.time()))
        assert len(list(fds.iterdir())) == before


@pytest.mark.parametrize(
    ("cache_size", "meta_entries"),
    [(8192, 64), (8192, 4), (16 << 20, 16384), (0, 16384)],
)
def test_a_walk_over_more_files_than_fit_caches_the_same(
    tmp_path: Path, cache_size: int, meta_entries: int
) -> None:
    # Admission when full (serverio.fs.filecache): a byte cache that holds
    # five of these files, a metadata cache with room for more (or less),
    # a random walk that asks some files again.
    names = [f"d{i % 4}/f{i:03d}.bin" for i in range(40)]
    for i, name in enumerate(names):
        path = tmp_path / name
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(bytes([i]) * 1024)
    old = time.time() - 3600
    for name in names:
        os.utime(tmp_path / name, (old, old))
    cfg = make_config(tmp_path, file_cache_size=cache_size, file_meta_entries=meta_entries)
    rnd = random.Random(47)
    now = time.time() + 10
    with _handlers(cfg) as (direct, general):
        for _ in range(600):
            name = names[min(rnd.randrange(40), rnd.randrange(40))]  # skewed to the first
            req = _facts(cfg, "/" + name, rnd.choice(("GET", "GET", "HEAD")), "")
            assert _answer(direct.respond_now(req, now)) == _answer(general.respond_now(req, now))
            assert _caches(direct) == _caches(general), name
            now += 0.01
        assert direct.files.stats.hits > 0 or not cache_size
        if cache_size == 8192:  # the byte cache overflows: facts from the metadata cache
            assert direct.files.meta is not None and direct.files.meta.stats.hits > 0
