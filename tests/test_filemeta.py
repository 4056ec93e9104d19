"""The files' metadata apart from their bytes (serverio.fs.filecache,
"File metadata apart from the bytes"): a miss on the byte cache takes the
file's facts from the metadata cache when the ``fstat`` shows the same
identity, answers exactly as without it, and never with old validators.

The byte cache here holds nothing (520 bytes: no file fits), so
every request misses it, as on a site with more files than the cache.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from serverio import Server
from serverio.fs import prepare as _prepare
from serverio.fs.filecache import FileCache, MetaCache, identity
from serverio.fs.opener import RootOpener
from serverio.http.core import Plan
from serverio.http.mime import guess_type
from serverio.ops.cli import build_parser, config_from_args
from serverio.ops.metrics import caches_of

from .conftest import make_config
from .test_filecache import LATER, VARIANTS, as_tuple, request, run

NO_BYTES = 520  # a byte cache no file fits in (each entry accounts 512 bytes more)


@pytest.fixture
def opener(root: Path) -> Iterator[RootOpener]:
    op = RootOpener(str(root), follow_symlinks=False)
    yield op
    op.close()


def meta_cache(root: Path, entries: int = 1000) -> tuple[FileCache, MetaCache]:
    cache = FileCache(NO_BYTES, make_config(root).files.small_file_size, entries)
    assert cache.meta is not None
    return cache, cache.meta


@pytest.mark.parametrize(("target", "method", "fields"), VARIANTS)
def test_a_metadata_hit_answers_exactly_like_a_miss(
    root: Path, opener: RootOpener, target: str, method: bytes, fields: dict[str, str]
) -> None:
    cfg = make_config(root)
    cache, meta = meta_cache(root)
    req = request(target, method, **fields)
    uncached = run(req, cfg, opener, None)
    first = run(req, cfg, opener, cache)
    second = run(req, cfg, opener, cache)
    assert len(cache) == 0  # no bytes kept: both were misses on bytes
    assert as_tuple(first) == as_tuple(uncached) == as_tuple(second)
    if "?" in target:  # a query (?download) changes the headers: not kept
        assert len(meta) == 0 and meta.stats.hits == 0
    else:
        assert len(meta) == 1 and meta.stats.hits == 1


def test_a_metadata_hit_makes_no_new_facts(
    root: Path, opener: RootOpener, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = make_config(root)
    cache, meta = meta_cache(root)
    run(request(), cfg, opener, cache)
    calls: list[str] = []
    made_facts = _prepare._facts

    def facts(*args: Any, **kwargs: Any) -> Any:
        calls.append("facts")
        return made_facts(*args, **kwargs)

    def guess(name: str) -> str:
        calls.append("type")
        return guess_type(name)

    monkeypatch.setattr(_prepare, "_facts", facts)
    monkeypatch.setattr(_prepare, "guess_type", guess)
    for _ in range(3):
        assert run(request(), cfg, opener, cache).status == 200
    assert calls == [] and meta.stats.hits == 3
    run(request("/hello.txt"), cfg, opener, cache)  # another file: made once
    assert calls == ["type", "facts"]


def _etag(plan: Plan) -> bytes:
    return dict(plan.headers)[b"etag"]


@pytest.mark.parametrize("change", ["same-size-restored-mtime", "size", "mtime", "rename-over"])
def test_a_changed_file_is_never_answered_with_old_validators(
    root: Path, opener: RootOpener, change: str
) -> None:
    cfg = make_config(root)
    cache, meta = meta_cache(root)
    path = root / "data.bin"
    old = run(request(), cfg, opener, cache)
    before = path.stat()
    if change == "same-size-restored-mtime":
        # Only the ctime moves: the identity still differs.
        path.write_bytes(b"Z" * before.st_size)
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    elif change == "size":
        path.write_bytes(b"Z" * 10)
    elif change == "mtime":
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns - 10**9))
    else:
        (root / "new.tmp").write_bytes(b"N" * before.st_size)
        os.replace(root / "new.tmp", path)
    assert identity(path.stat()) != identity(before)
    got = run(request(), cfg, opener, cache)
    fresh = run(request(), cfg, opener, None)
    assert as_tuple(got) == as_tuple(fresh)
    assert got.body == (path.read_bytes(),)
    if change != "mtime":  # the same bytes under another mtime keep their hash
        assert _etag(got) != _etag(old)
    assert meta.stats.stale == 1
    # Replaced by the new identity's facts, then hit again.
    assert as_tuple(run(request(), cfg, opener, cache)) == as_tuple(fresh)
    assert meta.stats.hits == 1


def test_a_file_changed_recently_is_not_kept(root: Path, opener: RootOpener) -> None:
    cfg = make_config(root)
    cache, meta = meta_cache(root)
    run(request(), cfg, opener, cache, now=time.time())  # data.bin was just written
    assert len(meta) == 0
    run(request(), cfg, opener, cache, now=LATER)
    assert len(meta) == 1


def test_large_files_index_files_and_listings_are_not_kept(root: Path, opener: RootOpener) -> None:
    cfg = make_config(root)
    cache, meta = meta_cache(root)
    run(request("/big.bin"), cfg, opener, cache)  # 300 KB: larger than --small-file-size
    run(request("/"), cfg, opener, cache)  # index.html through the index rule
    run(request("/noindex/"), cfg, opener, cache)
    assert len(meta) == 0


def test_entries_are_bounded_least_recently_used_first(root: Path, opener: RootOpener) -> None:
    cfg = make_config(root)
    cache, meta = meta_cache(root, entries=2)
    # Full, a file's facts are stored on its second miss ("Admission when
    # full", decided by the byte cache, full from the start here, which
    # sees every miss): index.html's first miss evicts nothing.
    for name in ("data.bin", "hello.txt", "index.html"):
        run(request(f"/{name}"), cfg, opener, cache)
    assert len(meta) == 2 and meta.stats.evicted == 0
    for name in ("index.html", "data.bin"):
        run(request(f"/{name}"), cfg, opener, cache)
    # index.html's second miss evicted data.bin, data.bin's second hello.txt
    assert len(meta) == 2 and meta.stats.evicted == 2 and meta.stats.hits == 0
    assert meta.size == 2 * (meta.capacity_bytes // meta.capacity)
    run(request("/index.html"), cfg, opener, cache)
    run(request("/data.bin"), cfg, opener, cache)
    assert meta.stats.hits == 2  # index.html and data.bin were kept
    run(request("/hello.txt"), cfg, opener, cache)
    assert meta.stats.hits == 2  # hello.txt was evicted


def test_both_full_caches_admit_a_file_at_the_same_miss(root: Path, opener: RootOpener) -> None:
    """Admission when full is decided once per miss for both caches: a file
    admitted to both has one identity and one set of facts in them."""
    cfg = make_config(root)
    for i in range(4):
        (root / f"m{i}.bin").write_bytes(bytes([i]) * 1000)
    cache = FileCache(3100, cfg.files.small_file_size, 2)  # two files in each
    meta = cache.meta
    assert meta is not None
    for name in ("m0.bin", "m1.bin", "m2.bin", "m2.bin"):
        run(request(f"/{name}"), cfg, opener, cache)
    entry, kept = cache.get("m2.bin"), meta._entries.get("m2.bin")
    assert entry is not None and kept is not None
    assert entry.facts is kept.facts and entry.ident is kept.ident
    assert cache.stats.stored == 3 and meta.stats.stored == 3


def test_forget_and_clear_drop_metadata(root: Path, opener: RootOpener) -> None:
    cfg = make_config(root)
    cache, meta = meta_cache(root)
    run(request(), cfg, opener, cache)
    run(request("/hello.txt"), cfg, opener, cache)
    cache.forget("data.bin")  # a write replaced it
    assert len(meta) == 1
    cache.clear()  # --watch saw a change
    assert len(meta) == 0


def test_option_metrics_and_off(root: Path) -> None:
    def parse(*args: str) -> Server:
        return Server(config_from_args(build_parser().parse_args([*args, "-d", str(root)])))

    srv = parse()
    assert srv.files.meta is not None and srv.files.meta.capacity == 16384
    assert caches_of(srv)["meta"]["entries"] == 0
    assert parse("--file-meta-entries", "5").files.meta.capacity == 5  # type: ignore[union-attr]
    assert parse("--file-meta-entries", "0").files.meta is None
    assert parse("--file-cache-size", "0").files.meta is None  # no caches at all
    assert "meta" not in caches_of(parse("--file-meta-entries", "0"))
