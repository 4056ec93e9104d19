"""Last-Modified is never later than Date (RFC 9110 §8.8.2.1).

A file stamped in the future (a clock skewed on the machine that wrote it,
an archive unpacked with its times, ``touch -d 2090-01-01``) is sent with
the Date's own second as its Last-Modified, and If-Modified-Since /
If-Unmodified-Since are evaluated against that value, the one the client
saw.  The pure table runs without an event loop; one end-to-end test runs
through the warm file cache and its per-second plan memo.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from serverio.config import Config
from serverio.fs import filecache as _filecache
from serverio.http.core import FileFacts, RequestFacts, decide_file, sent_mtime
from serverio.http.dates import format_http_date, parse_http_date
from serverio.http.target import parse_target

from .conftest import make_config, memory_connection

NOW = 1_700_000_000.75
SEC = 1_700_000_000  # the second the Date header names
FUTURE = SEC + 86_400  # a day ahead of the clock
PAST = SEC - 3600
CFG = Config()
DATE = format_http_date(SEC)


def _facts(mtime: int) -> FileFacts:
    return FileFacts(size=10, mtime_ns=mtime * 10**9 + 5, dev=1, ino=2, content_type="text/plain")


def _get(**headers: str) -> RequestFacts:
    return RequestFacts(b"GET", parse_target(b"GET", b"/f.txt"), **headers)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("mtime", "sent"),
    [
        (PAST, PAST),
        (SEC, SEC),  # the same second as Date: not later, kept
        (SEC + 1, SEC),
        (FUTURE, SEC),
        (None, None),
    ],
)
def test_sent_mtime_is_never_after_the_date(mtime: int | None, sent: int | None) -> None:
    assert sent_mtime(mtime, NOW) == sent


@pytest.mark.parametrize(
    ("mtime", "headers", "status"),
    [
        # Plain GET and a revalidation by ETag: Last-Modified is the Date.
        (FUTURE, {}, 200),
        (FUTURE, {"if_none_match": _facts(FUTURE).etag}, 304),
        # If-Modified-Since: compared with the value sent (the Date's second).
        (FUTURE, {"if_modified_since": DATE}, 304),
        (FUTURE, {"if_modified_since": format_http_date(SEC - 1)}, 200),
        (FUTURE, {"if_modified_since": format_http_date(FUTURE)}, 304),
        # If-Unmodified-Since: the value sent is not after the client's date.
        (FUTURE, {"if_unmodified_since": DATE}, 200),
        (FUTURE, {"if_unmodified_since": format_http_date(SEC - 1)}, 412),
        # If-Range with a date: a replaced Last-Modified is no strong
        # validator, so the whole file comes back; with the ETag, the range.
        (FUTURE, {"range": "bytes=0-0", "if_range": DATE}, 200),
        (FUTURE, {"range": "bytes=0-0", "if_range": _facts(FUTURE).etag}, 206),
        (FUTURE, {"range": "bytes=0-0"}, 206),
        # A past mtime is sent as it is and validates as before.
        (PAST, {}, 200),
        (PAST, {"if_modified_since": format_http_date(PAST)}, 304),
        (PAST, {"if_unmodified_since": format_http_date(PAST - 1)}, 412),
        (PAST, {"range": "bytes=0-0", "if_range": format_http_date(PAST)}, 206),
    ],
)
def test_future_mtime_sends_the_date_and_validates_against_it(
    mtime: int, headers: dict[str, str], status: int
) -> None:
    facts = _facts(mtime)
    plan = decide_file(_get(**headers), facts, CFG, NOW)
    assert plan.status == status
    hs = dict(plan.headers)
    if status in (200, 206, 304):
        assert hs[b"date"] == DATE.encode()
        assert hs[b"last-modified"] == format_http_date(min(mtime, SEC)).encode()
        assert hs[b"etag"] == facts.etag.encode()  # from the file, not from the time


@pytest.fixture
def cached_future_files(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let the warm file cache take files stamped in the future (it treats a
    file changed less than RACY_SECONDS ago as still being written)."""
    monkeypatch.setattr(_filecache, "RACY_SECONDS", -1e10)


@pytest.mark.usefixtures("cached_future_files")
async def test_future_file_over_a_connection_never_sends_last_modified_after_date(
    root: Path,
) -> None:
    path = root / "future.txt"
    path.write_bytes(b"from the future\n")
    year_2090 = 3_786_912_000
    os.utime(path, (year_2090, year_2090))
    async with memory_connection(make_config(root)) as (client, srv, _):
        etag = None
        for _ in range(3):  # a miss, then the warm cache and its per-second memo
            r = await client.get("/future.txt")
            assert r.status == 200 and r.body == b"from the future\n"
            date, lm = r.header("date"), r.header("last-modified")
            assert date is not None and lm is not None
            assert lm == date
            etag = etag or r.header("etag")
            assert r.header("etag") == etag
            # If-Modified-Since before the file's own time but after now: the
            # value sent is not later, so the client's copy is current.
            ims = await client.get(
                "/future.txt", "If-Modified-Since: Sun, 01 Jan 2080 00:00:00 GMT\r\n"
            )
            assert ims.status == 304
            lm304, date304 = ims.header("last-modified"), ims.header("date")
            assert lm304 is not None and date304 is not None
            assert parse_http_date(lm304) == parse_http_date(date304)
        assert srv.files.stats.hits > 0
