"""Memos keyed by client input stay bounded, and answers stay right.

Each memo is inspected directly: its entry count, and what its keys and
values can hold, after a flood of distinct long client values.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from serverio.config import Config
from serverio.errors import HTTPError
from serverio.fs.filecache import FileCache
from serverio.fs.opener import RootOpener
from serverio.http import negotiate as _negotiate
from serverio.http import target as _target
from serverio.http.core import Plan, RequestFacts, decide_file
from serverio.http.negotiate import parse_accept_encoding, select_coding
from serverio.http.target import parse_target
from serverio.model.decide import SHARE_AFTER, cache_candidate, serve_cached
from serverio.pipeline.handler import prepare

from .conftest import make_config, memory_connection

LATER = float(int(time.time()) + 3600)


@contextmanager
def _data_bin_cached(root: Path) -> Iterator[tuple[Config, FileCache, RootOpener, RequestFacts]]:
    """The configuration, a warm-file cache holding ``/data.bin`` (filled by
    one GET of it), the opener and that GET's facts."""
    cfg = make_config(root)
    cache = FileCache(1 << 20, cfg.files.small_file_size)
    opener = RootOpener(str(root), follow_symlinks=False)
    try:
        get = RequestFacts(method=b"GET", target=parse_target(b"GET", b"/data.bin"))
        prepare(get, cfg, opener, LATER, "", cache, 0.0).close()  # fill the cache
        yield cfg, cache, opener, get
    finally:
        opener.close()


def _clear_target_memos() -> None:
    for memo in _target._MEMOS.values():
        memo.clear()  # the entries and the keys seen (no early admission by a shared bit)


def _memoised_targets() -> int:
    return sum(len(memo.entries) for memo in _target._MEMOS.values())


async def test_distinct_long_methods_never_enter_the_target_memo(root: Path) -> None:
    _clear_target_memos()
    async with memory_connection(make_config(root)) as (client, _, _):
        for i in range(300):
            method = f"X{i:04d}" + "M" * 15_000
            r = await client.get("/hello.txt", method=method)
            assert r.status == 405
        ok = await client.get("/hello.txt")
        again = await client.get("/hello.txt")
    assert ok.status == 200 and ok.body == b"hello world\n" and again.status == 200
    assert _memoised_targets() == 1 and set(_target._MEMOS) == {b"GET", b"HEAD"}  # only the GET


def test_target_memo_is_bounded_in_entries_and_key_size() -> None:
    _clear_target_memos()
    for i in range(_target._MEMO_ENTRIES + 500):
        parse_target(b"GET", f"/p{i}".encode())
        parse_target(b"GET", f"/p{i}".encode())  # the second parse stores it
    assert 0 < _memoised_targets() <= _target._MEMO_ENTRIES
    long_target = b"/" + b"a" * 5000
    _clear_target_memos()
    for _ in range(2):
        assert parse_target(b"GET", long_target).segments == ("a" * 5000,)
        assert parse_target(b"PROPFIND", b"/x").segments == ("x",)
    assert _memoised_targets() == 0  # neither a long target nor another method


def test_a_target_is_memoised_on_its_second_parse() -> None:
    """Asked for once, a target is parsed and not kept (a site of many
    files asked for at random); asked for again, it is kept and the next
    parse is the memo's object.  A target over --max-target-size is a
    414 whether memoised or not."""
    _clear_target_memos()
    first = parse_target(b"GET", b"/once/only.txt")
    assert _memoised_targets() == 0
    second = parse_target(b"GET", b"/once/only.txt")
    assert second == first and second is not first
    assert parse_target(b"GET", b"/once/only.txt") is second
    assert _target._MEMOS[b"GET"].entries == {b"/once/only.txt": second}
    with pytest.raises(HTTPError) as err:
        parse_target(b"GET", b"/once/only.txt", max_size=8)
    assert err.value.status == 414


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
    with _data_bin_cached(root) as (cfg, cache, opener, get):
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


def test_a_plain_memo_is_redated_in_a_later_second(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain answer memoised in one second is redated in a later one
    (only its Date changes), and equals the answer decided afresh then;
    a clock set back before the file's mtime decides again (Last-Modified
    becomes the Date, as sent_mtime says).  The redated answer replaces
    the memo only when the entry is popular in that second (SHARE_AFTER
    answers made in it: ``asked``, ``answers``); otherwise, even when it
    answered in the second before or fewer times in this one, it is
    neither kept nor shared."""
    from serverio.model import decide as _decide

    decided: list[object] = []

    def counting(*args: Any, **kwargs: Any) -> Plan:
        decided.append(args)
        return decide_file(*args, **kwargs)

    with _data_bin_cached(root) as (cfg, cache, _, _):
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
                hit.entry.asked, hit.entry.answers = int(now) - 2, 1
                lone = serve_cached(hit, req, cfg, now, "")
                for asked, answers in ((int(now) - 1, 50), (int(now), SHARE_AFTER - 1)):
                    hit.entry.asked, hit.entry.answers = asked, answers  # not popular now
                    before = serve_cached(hit, req, cfg, now, "")
                    assert (before.memo is None and not before.plan.shared) or now < mtime
                hit.entry.asked, hit.entry.answers = int(now), SHARE_AFTER
                served = serve_cached(hit, req, cfg, now, "")
                redone = bool(decided)
                saved = dict(hit.entry.plain)
                hit.entry.plain.clear()
                fresh = serve_cached(hit, req, cfg, now, "")  # decided afresh
                hit.entry.plain.update(saved)
                assert served.plan == fresh.plan, now
                assert served.memo is not None and served.memo[1][0] == int(now)
                assert served.plan.shared  # answered in this second already: shared
                # Redated, not decided, unless the clock is before the mtime.
                assert redone is (now < mtime), now
                if not redone:
                    # Not answered in this second or the one before: this request's alone.
                    assert lone.memo is None and not lone.plan.shared
                    assert replace(lone.plan, shared=True) == served.plan
            monkeypatch.undo()


def test_a_first_decision_is_shared_once_its_entry_is_popular(root: Path) -> None:
    """An entry's first answer is memoised (a later second redates it)
    but not shared: no transport caches its head and the warm path keeps
    no answer for it (a file asked for once).  Asked for again in the same
    second, the same unshared memo answers until the entry has made
    SHARE_AFTER answers in it; then the memo's plan is shared, the same
    answer otherwise."""
    with _data_bin_cached(root) as (cfg, cache, _, get):
        hit = cache_candidate(cache, get, cfg)
        assert hit is not None and hit.entry.asked != int(LATER)
        first = serve_cached(hit, get, cfg, LATER + 0.25, "")
        assert first.memo is not None and not first.plan.shared
        hit.entry.plain[first.memo[0]] = first.memo[1]
        for answers in range(1, SHARE_AFTER):
            hit.entry.asked, hit.entry.answers = int(LATER), answers  # as _answered sets them
            again = serve_cached(hit, get, cfg, LATER + 0.3, "")
            assert again.plan is first.plan and again.memo is None
        hit.entry.answers = SHARE_AFTER
        shared = serve_cached(hit, get, cfg, LATER + 0.5, "")
        assert shared.plan.shared and shared.memo is not None
        assert replace(first.plan, shared=True) == shared.plan
        assert shared.body is first.body  # the memo's literal body, not made again
        hit.entry.plain[shared.memo[0]] = shared.memo[1]
        third = serve_cached(hit, get, cfg, LATER + 0.75, "")
        assert third.plan is shared.plan and third.memo is None  # the shared memo itself
        # A first decision made when the entry is popular is shared at once.
        hit.entry.plain.clear()
        assert serve_cached(hit, get, cfg, LATER + 0.8, "").plan.shared


def test_a_representations_validator_fields_are_memoised_on_its_second_request() -> None:
    """Last-Modified and ETag made per representation are kept from its
    second request on (serverio.doorkeeper.AdmittedMemo), at most 4096
    representations: a site of many files asked for at random keeps none
    of those asked for once."""
    from serverio.http import core as _core

    _core._VALIDATOR_TAILS.clear()  # the entries and the keys seen
    tails = _core._VALIDATOR_TAILS.entries
    first = _core._validator_tail('"v1"', 1_700_000_000, None, b"")
    assert first == (
        (b"last-modified", b"Tue, 14 Nov 2023 22:13:20 GMT"),
        (b"etag", b'"v1"'),
    )
    assert not tails
    second = _core._validator_tail('"v1"', 1_700_000_000, None, b"")
    assert second == first and tails == {('"v1"', 1_700_000_000, None, b""): second}
    assert _core._validator_tail('"v1"', 1_700_000_000, None, b"") is second
    for i in range(5_000):
        for _ in range(2):
            _core._validator_tail(f'"e{i}"', i, "no-cache", b"Accept-Encoding")
    assert 0 < len(tails) <= 4096


def test_last_modified_values_are_memoised_by_second_and_bounded() -> None:
    """A tree's files share few mtimes: a representation the validator
    memo does not hold (a site of many files) still finds its
    Last-Modified formatted; the memo stays bounded and exact."""
    from serverio.http import core as _core
    from serverio.http.dates import format_http_date

    _core._LAST_MODIFIED.clear()
    _core._validator_fields('"a"', 1_700_000_000, None, b"")
    value = _core._LAST_MODIFIED[1_700_000_000]
    assert value == b"Tue, 14 Nov 2023 22:13:20 GMT"
    # Another file of the same second: the same bytes object.
    fields = _core._validator_fields('"b"', 1_700_000_000, None, b"")
    assert fields[0] == (b"last-modified", value) and fields[0][1] is value
    for sec in range(0, 3 * _core._LAST_MODIFIED_MAX * 7, 7):
        got = _core._validator_fields('"c"', sec, None, b"")
        assert got[0] == (b"last-modified", format_http_date(sec).encode("ascii"))
        assert len(_core._LAST_MODIFIED) <= _core._LAST_MODIFIED_MAX
