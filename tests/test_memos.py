"""Memos keyed by client input stay bounded, and answers stay right.

Each memo is inspected directly: its entry count, and what its keys and
values can hold, after a flood of distinct long client values.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from serverio.fs.filecache import FileCache
from serverio.fs.opener import RootOpener
from serverio.http import negotiate as _negotiate
from serverio.http import target as _target
from serverio.http.core import Plan, RequestFacts, decide_file
from serverio.http.negotiate import parse_accept_encoding, select_coding
from serverio.http.target import parse_target
from serverio.model.decide import cache_candidate, serve_cached
from serverio.pipeline.handler import prepare

from .conftest import make_config, memory_connection

LATER = float(int(time.time()) + 3600)


async def test_distinct_long_methods_never_enter_the_target_memo(root: Path) -> None:
    memo = _target._parse_target_memo
    memo.cache_clear()
    async with memory_connection(make_config(root)) as (client, _, _):
        for i in range(300):
            method = f"X{i:04d}" + "M" * 15_000
            r = await client.get("/hello.txt", method=method)
            assert r.status == 405
        ok = await client.get("/hello.txt")
    assert ok.status == 200 and ok.body == b"hello world\n"
    assert memo.cache_info().currsize == 1  # only the GET


def test_target_memo_is_bounded_in_entries_and_key_size() -> None:
    memo = _target._parse_target_memo
    memo.cache_clear()
    for i in range(_target._MEMO_ENTRIES + 500):
        parse_target(b"GET", f"/p{i}".encode())
    long_target = b"/" + b"a" * 5000
    assert parse_target(b"GET", long_target).segments == ("a" * 5000,)
    assert parse_target(b"PROPFIND", b"/x").segments == ("x",)
    info = memo.cache_info()
    assert info.currsize == _target._MEMO_ENTRIES
    memo.cache_clear()
    parse_target(b"GET", long_target)
    parse_target(b"PROPFIND", b"/x")
    assert memo.cache_info().currsize == 0  # neither a long target nor another method


def test_accept_encoding_memo_is_bounded() -> None:
    memo = _negotiate._parse_accept_encoding_memo
    memo.cache_clear()
    for i in range(300):
        junk = ", ".join(f"x{i}-{j}" for j in range(2_000))  # ~15 KB, all distinct
        accept = parse_accept_encoding(f"{junk}, br;q=0.5, gzip;q=0.9")
        # Still parsed right: gzip is preferred, br acceptable, junk ignored.
        assert select_coding(accept, (), ("br", "gzip")) == ("gzip", False)
        assert dict(accept.weights) == {"br": 0.5, "gzip": 0.9}
    assert memo.cache_info().currsize == 0
    # Short values are memoised, at most 256 of them, each holding only the
    # weights a decision reads.
    for i in range(400):
        short = ", ".join(f"c{i}-{j}" for j in range(20)) + ", zstd, identity;q=0.1, *;q=0"
        assert len(short) <= 256
        accept = parse_accept_encoding(short)
        assert dict(accept.weights) == {"zstd": 1.0, "identity": 0.1, "*": 0.0}
    assert memo.cache_info().currsize == 256


def test_plain_response_memo_only_for_served_methods(root: Path) -> None:
    cfg = make_config(root)
    cache = FileCache(1 << 20, cfg.files.small_file_size)
    opener = RootOpener(str(root), follow_symlinks=False)
    try:
        get = RequestFacts(method=b"GET", target=parse_target(b"GET", b"/data.bin"))
        prepare(get, cfg, opener, LATER, "", cache, 0.0).close()  # fill the cache
        for i in range(50):
            method = f"M{i}".encode() * 1000
            req = RequestFacts(method=method, target=parse_target(method, b"/data.bin"))
            hit = cache_candidate(cache, req, cfg)
            assert hit is not None
            other = serve_cached(hit, req, cfg, LATER, "")
            assert other.memo is None  # nothing to remember for these
            other.close()
        hit = cache_candidate(cache, get, cfg)
        assert hit is not None
        assert hit.entry.plain == {}  # the decision stores nothing itself
        served = serve_cached(hit, get, cfg, LATER, "")
        assert served.plan.status == 200
        assert hit.entry.plain == {}
        assert served.memo is not None and served.memo[0] == (b"GET", "")
        # The caller stores it (serverio.pipeline.handler): prepare() does.
        prepare(get, cfg, opener, LATER, "", cache, 0.0).close()
        assert set(hit.entry.plain) == {(b"GET", "")}
    finally:
        opener.close()


def test_a_plain_memo_is_redated_in_a_later_second(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain answer memoised in one second is redated in a later one
    (only its Date changes), and equals the answer decided afresh then;
    a clock set back before the file's mtime decides again (Last-Modified
    becomes the Date, as sent_mtime says).  The redated answer replaces
    the memo only when the entry already answered in that second
    (``asked``): the first is neither kept nor shared."""
    from serverio.model import decide as _decide

    cfg = make_config(root)
    cache = FileCache(1 << 20, cfg.files.small_file_size)
    opener = RootOpener(str(root), follow_symlinks=False)
    decided: list[object] = []

    def counting(*args: Any, **kwargs: Any) -> Plan:
        decided.append(args)
        return decide_file(*args, **kwargs)

    try:
        get = RequestFacts(method=b"GET", target=parse_target(b"GET", b"/data.bin"))
        prepare(get, cfg, opener, LATER, "", cache, 0.0).close()  # fill the cache
        mtime = (root / "data.bin").stat().st_mtime_ns // 10**9
        for method in (b"GET", b"HEAD"):
            req = RequestFacts(method=method, target=parse_target(method, b"/data.bin"))
            hit = cache_candidate(cache, req, cfg)
            assert hit is not None
            first = serve_cached(hit, req, cfg, LATER, "")
            assert first.memo is not None
            monkeypatch.setattr(_decide, "decide_file", counting)
            for now in (LATER + 5.25, float(mtime), float(mtime - 10)):
                hit.entry.plain[first.memo[0]] = first.memo[1]
                decided.clear()
                hit.entry.asked = int(now) - 1
                lone = serve_cached(hit, req, cfg, now, "")
                hit.entry.asked = int(now)
                served = serve_cached(hit, req, cfg, now, "")
                redone = bool(decided)
                saved = dict(hit.entry.plain)
                hit.entry.plain.clear()
                fresh = serve_cached(hit, req, cfg, now, "")  # decided afresh
                hit.entry.plain.update(saved)
                assert served.plan == fresh.plan, now
                assert served.memo is not None and served.memo[1][0] == int(now)
                # Redated, not decided, unless the clock is before the mtime.
                assert redone is (now < mtime), now
                if not redone:
                    # The entry's first answer of the second: this request's alone.
                    assert lone.memo is None and not lone.plan.shared
                    assert replace(lone.plan, shared=True) == served.plan
            monkeypatch.undo()
    finally:
        opener.close()
