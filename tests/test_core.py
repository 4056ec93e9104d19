"""The pure decision core, table-driven and without an event loop.

The precondition table checks :func:`serverio.http.core.decide_file` against an
oracle written in this file from the text of RFC 9110 §13.2.2 (not from
``_core``).  Range cases include the Go net/http ``fs_test.go`` table.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any

import pytest

from serverio.config import Config
from serverio.errors import HTTPError
from serverio.http.core import (
    UNSATISFIABLE,
    EtagPolicy,
    FileFacts,
    FileSpan,
    Plan,
    RequestFacts,
    coalesce,
    coded_etag,
    content_digest,
    decide_directory,
    decide_file,
    error_plan,
    evaluate_preconditions,
    http_error_plan,
    if_range_matches,
    make_etag,
    mtime_is_synthetic,
    multipart_body,
    parse_etag_list,
    parse_range,
    route,
    wants_content_hash,
)
from serverio.http.dates import format_http_date
from serverio.http.target import Target, parse_target

NOW = 1_700_000_000.75
MTIME = 1_699_990_000  # a few hours before NOW
# A sub-second part must not matter: HTTP-dates have one-second resolution.
MTIME_NS = MTIME * 1_000_000_000 + 999_999_999
ETAG = '"1-2-14-abc"'
OTHER = '"1-2-14-abd"'
DATA = bytes(range(20)) + b"\r\n--\r\n" + bytes(range(200, 214))  # 40 bytes, has CRLF
CFG = Config()
CC = "public, max-age=60"
CFG_CC = Config(cache_control=CC)


def imf(epoch: int) -> str:
    return format_http_date(epoch)


def file_facts(size: int = len(DATA), etag: str = ETAG, ctype: str = "text/plain") -> FileFacts:
    return FileFacts(size=size, mtime_ns=MTIME_NS, dev=1, ino=2, content_type=ctype, etag=etag)


def request(method: bytes = b"GET", raw: bytes = b"/f.txt", **kw: str | None) -> RequestFacts:
    return RequestFacts(method=method, target=parse_target(method, raw), **kw)  # type: ignore[arg-type]


def header_map(plan: Plan) -> dict[bytes, bytes]:
    names = [n for n, _ in plan.headers]
    assert len(names) == len(set(names)), f"duplicate header in {plan.headers}"
    assert all(n == n.lower() for n in names)
    return dict(plan.headers)


def materialise(body: tuple[bytes | FileSpan, ...], data: bytes) -> bytes:
    """The bytes a connection would write, reading FileSpans from ``data``."""
    out = bytearray()
    for piece in body:
        if isinstance(piece, FileSpan):
            assert 0 <= piece.offset and piece.offset + piece.length <= len(data)
            out += data[piece.offset : piece.offset + piece.length]
        else:
            out += piece
    return bytes(out)


# ------------------------------------------------------------ preconditions
#
# The oracle, from RFC 9110 §13.2.2 ("Precedence of Preconditions"):
#  1. When If-Match is present, evaluate it: true -> step 3, false -> 412.
#     (§13.1.1: "*" is true when a current representation exists; otherwise
#     true iff a listed tag matches with the STRONG comparison, so a W/ tag
#     can never make it true.)
#  2. When If-Match is absent and If-Unmodified-Since is present, evaluate it:
#     true -> step 3, false -> 412.  (§13.1.4: false iff Last-Modified is more
#     recent than the date; an invalid date means the field is ignored.)
#  3. When If-None-Match is present, evaluate it: true -> step 5, false ->
#     304 for GET/HEAD, 412 otherwise.  (§13.1.2: false iff "*" or a listed
#     tag matches with the WEAK comparison.)
#  4. When the method is GET or HEAD, If-None-Match is absent and
#     If-Modified-Since is present, evaluate it: true -> step 5, false -> 304.
#     (§13.1.3: false iff Last-Modified is earlier than or equal to the date;
#     invalid dates are ignored.)
#  5. When the method is GET and Range is present, serve the range (206).
#  6. Otherwise perform the method (200).

IM_VALUES = {
    "absent": None,
    "match": ETAG,
    "mismatch": OTHER,
    "star": "*",
    "weak-match": "W/" + ETAG,
}
IUS_VALUES = {
    "absent": None,
    "before": imf(MTIME - 1),  # the file changed after this date
    "equal": imf(MTIME),
    "after": imf(MTIME + 3600),
    "invalid": "Tue, 31 Feb 2023 10:00:00 GMT",
}
INM_VALUES = {
    "absent": None,
    "match": ETAG,
    "mismatch": OTHER,
    "star": "*",
    "weak-match": "W/" + ETAG,
}
IMS_VALUES = {
    "absent": None,
    "before": imf(MTIME - 1),
    "equal": imf(MTIME),
    "after": imf(MTIME + 3600),
    "invalid": imf(MTIME + 3600).removesuffix(" GMT"),
}


def rfc_oracle(method: str, im: str, ius: str, inm: str, ims: str, ranged: bool) -> int:
    get_or_head = method in ("GET", "HEAD")
    # Step 1 / step 2.
    if im != "absent":
        if_match_true = im in ("star", "match")  # strong comparison only
        if not if_match_true:
            return 412
    elif ius != "absent" and ius != "invalid":
        last_modified_more_recent = ius == "before"
        if last_modified_more_recent:
            return 412
    # Step 3 / step 4.
    if inm != "absent":
        if_none_match_true = inm == "mismatch"  # weak comparison: W/ matches too
        if not if_none_match_true:
            return 304 if get_or_head else 412
    elif get_or_head and ims != "absent" and ims != "invalid":
        modified_since = ims == "before"
        if not modified_since:
            return 304
    # Step 5 / step 6.
    if ranged and method == "GET":
        return 206
    return 200


PRECONDITION_CASES = list(
    itertools.product(("GET", "HEAD"), IM_VALUES, IUS_VALUES, INM_VALUES, IMS_VALUES, (False, True))
)


@pytest.mark.parametrize(
    ("method", "im", "ius", "inm", "ims", "ranged"),
    PRECONDITION_CASES,
    ids=[
        f"{m}-im:{a}-ius:{b}-inm:{c}-ims:{d}{'-range' if r else ''}"
        for m, a, b, c, d, r in PRECONDITION_CASES
    ],
)
def test_precondition_table(
    method: str, im: str, ius: str, inm: str, ims: str, ranged: bool
) -> None:
    req = request(
        method.encode(),
        if_match=IM_VALUES[im],
        if_unmodified_since=IUS_VALUES[ius],
        if_none_match=INM_VALUES[inm],
        if_modified_since=IMS_VALUES[ims],
        range="bytes=0-0" if ranged else None,
    )
    plan = decide_file(req, file_facts(), CFG_CC, NOW)
    expected = rfc_oracle(method, im, ius, inm, ims, ranged)
    assert plan.status == expected
    hs = header_map(plan)
    if expected == 304:
        assert plan.body == () and not plan.send_body and not plan.needs_file
        assert hs[b"etag"] == ETAG.encode()
        assert hs[b"last-modified"] == imf(MTIME).encode()
        assert hs[b"cache-control"] == CC.encode()
        assert hs[b"date"] == imf(int(NOW)).encode()
        assert b"content-range" not in hs
    elif expected == 412:
        assert not plan.needs_file
    else:
        assert plan.send_body == (method == "GET")
        assert plan.needs_file == (method == "GET")
        assert hs[b"etag"] == ETAG.encode()


@pytest.mark.parametrize(
    ("im", "ius", "inm", "ims", "expected"),
    [
        # Unsafe methods: a failed If-None-Match is 412, never 304 (step 3),
        # and If-Modified-Since is ignored (step 4 is GET/HEAD only).
        (None, None, ETAG, None, 412),
        (None, None, "*", None, 412),
        (None, None, "W/" + ETAG, None, 412),
        (None, None, OTHER, None, None),
        (None, None, None, imf(MTIME), None),
        (None, None, None, imf(MTIME + 3600), None),
        (OTHER, None, None, None, 412),
        ("*", None, None, None, None),
        (None, imf(MTIME - 1), None, None, 412),
        (None, imf(MTIME), None, None, None),
        # If-Match present: If-Unmodified-Since is not evaluated at all.
        (ETAG, imf(MTIME - 1), None, None, None),
    ],
)
def test_preconditions_unsafe_method(
    im: str | None, ius: str | None, inm: str | None, ims: str | None, expected: int | None
) -> None:
    for method in (b"PUT", b"POST", b"DELETE"):
        req = RequestFacts(
            method,
            Target(("f",), False, None),
            if_match=im,
            if_unmodified_since=ius,
            if_none_match=inm,
            if_modified_since=ims,
        )
        assert evaluate_preconditions(req, ETAG, MTIME).status == expected


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        # Lists: any member may match.
        ("if_match", f'"a", {ETAG}', 200),
        ("if_match", f'"a",{ETAG} , "b"', 200),
        ("if_match", f'"a", W/{ETAG}', 412),
        ("if_match", '"a", "b"', 412),
        ("if_match", " * ", 200),
        ("if_none_match", f'"a", {ETAG}', 304),
        ("if_none_match", f'"a", W/{ETAG}', 304),
        ("if_none_match", f'W/"a", {OTHER}', 200),
        ("if_none_match", '"*"', 200),  # a quoted star is a tag, not the wildcard
        # Weak comparison strips the W/ of the tag, not arbitrary characters.
        ("if_none_match", ETAG.replace('"', ""), 200),
        ("if_none_match", " " + ETAG + " ", 304),
        # Multiple If-Modified-Since lines are joined: more than one member is invalid.
        ("if_modified_since", f"{imf(MTIME)}, {imf(MTIME)}", 200),
        ("if_unmodified_since", f"{imf(MTIME - 1)}, {imf(MTIME - 1)}", 200),
        # Other accepted date formats.
        ("if_modified_since", "Tuesday, 14-Nov-23 19:26:40 GMT", 304),
        ("if_modified_since", "Tue Nov 14 19:26:40 2023", 304),
        ("if_modified_since", "Tue Nov 14 19:26:39 2023", 200),
    ],
)
def test_precondition_field_values(field: str, value: str, expected: int) -> None:
    assert imf(MTIME) == "Tue, 14 Nov 2023 19:26:40 GMT"
    changes: dict[str, Any] = {field: value}
    plan = decide_file(replace(request(), **changes), file_facts(), CFG, NOW)
    assert plan.status == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("*", None),
        ("  *\t", None),
        ('"a"', ['"a"']),
        ('W/"a"', ['W/"a"']),
        ('""', ['""']),
        ('"*"', ['"*"']),
        ('"a", W/"b" ,"c"', ['"a"', 'W/"b"', '"c"']),
        ('"a",W/"b"', ['"a"', 'W/"b"']),
        ('"a" , , "b",', ['"a"', '"b"']),
        ("", []),
        ("a", []),
        ('w/"a"', []),  # the weak prefix is case-sensitive
        ('"a', []),
        ('"a b"', []),
        ('"a\x7f"', []),
        ('"a", b, "c"', ['"a"']),  # parsing stops at the first bad member
        ('*, "a"', []),
        ('"\xe9"', ['"\xe9"']),  # obs-text is allowed in an opaque-tag
    ],
)
def test_parse_etag_list(value: str, expected: list[str] | None) -> None:
    assert parse_etag_list(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (ETAG, True),
        (f"  {ETAG} ", True),
        ("W/" + ETAG, False),  # a weak tag never matches (§13.1.5)
        (OTHER, False),
        ("*", False),
        (imf(MTIME), True),
        ("Tuesday, 14-Nov-23 19:26:40 GMT", True),
        (imf(MTIME - 1), False),  # only exact equality counts
        (imf(MTIME + 1), False),
        ("not a date", False),
        ("", False),
    ],
)
def test_if_range_matches(value: str, expected: bool) -> None:
    assert if_range_matches(value, ETAG, MTIME) is expected


def test_if_range_weak_etag_never_matches_itself() -> None:
    assert not if_range_matches('W/"x"', 'W/"x"', MTIME)


@pytest.mark.parametrize(
    ("if_range", "expected"),
    [
        (None, 206),
        (ETAG, 206),
        (imf(MTIME), 206),
        ("W/" + ETAG, 200),
        (OTHER, 200),
        (imf(MTIME + 1), 200),
        ("garbage", 200),
    ],
)
def test_if_range_gates_range(if_range: str | None, expected: int) -> None:
    plan = decide_file(request(range="bytes=1-2", if_range=if_range), file_facts(), CFG, NOW)
    assert plan.status == expected
    if expected == 200:
        assert plan.body == (FileSpan(0, len(DATA)),)
    # A failed If-Range also drops an unsatisfiable range: full 200, never 416.
    unsat = decide_file(request(range="bytes=999-", if_range=if_range), file_facts(), CFG, NOW)
    assert unsat.status == (416 if expected == 206 else 200)


def test_make_etag_is_strong_and_changes_with_size_mtime_or_content() -> None:
    base = make_etag(3, 4)
    assert base.startswith('"') and base.endswith('"') and base.count('"') == 2
    variants = {make_etag(9, 4), make_etag(3, 5)}  # one nanosecond of mtime counts
    variants.add(make_etag(3, 4, content_digest(b"abc")))
    variants.add(make_etag(3, 4, content_digest(b"abd")))
    assert base not in variants and len(variants) == 4
    assert parse_etag_list(base) == [base]
    facts = FileFacts(size=3, mtime_ns=4, dev=1, ino=2, content_type="text/plain")
    assert facts.etag == base


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ((1, 2), (9, 2)),  # another device: cp -a onto another disk
        ((1, 2), (1, 9)),  # another inode: another replica, or a rename-over
    ],
)
def test_etag_does_not_depend_on_device_or_inode(
    a: tuple[int, int], b: tuple[int, int]
) -> None:
    fa = FileFacts(size=3, mtime_ns=MTIME_NS, dev=a[0], ino=a[1], content_type="text/plain")
    fb = FileFacts(size=3, mtime_ns=MTIME_NS, dev=b[0], ino=b[1], content_type="text/plain")
    assert fa.etag == fb.etag
    h = content_digest(b"abc")
    ha = FileFacts(3, MTIME_NS, a[0], a[1], "text/plain", content_hash=h)
    hb = FileFacts(3, MTIME_NS, b[0], b[1], "text/plain", content_hash=h)
    assert ha.etag == hb.etag == make_etag(3, 0, h)


POLICY = EtagPolicy("auto", hash_max=100, epoch_ns=1_600_000_000 * 10**9)


@pytest.mark.parametrize(
    ("mtime_ns", "shared", "synthetic"),
    [
        (0, False, True),  # Nix, many image builders
        (10**9, False, True),  # mtime 1
        (2 * 10**9 - 1, False, True),
        (2 * 10**9, False, False),
        (-5, False, True),
        (1_600_000_000 * 10**9, False, True),  # SOURCE_DATE_EPOCH
        (1_600_000_000 * 10**9 + 1, False, False),
        (MTIME_NS, True, True),  # seen on many files
        (MTIME_NS, False, False),
    ],
)
def test_mtime_is_synthetic_table(mtime_ns: int, shared: bool, synthetic: bool) -> None:
    assert mtime_is_synthetic(mtime_ns, POLICY, shared) is synthetic


@pytest.mark.parametrize(
    ("mode", "size", "synthetic", "hashed"),
    [
        ("auto", 100, False, True),  # small: read anyway, hashed
        ("auto", 101, False, False),  # large, real mtime: size + mtime
        ("auto", 101, True, True),  # large, constant mtime: hashed
        ("content", 10**9, False, True),
        ("content", 0, False, True),
    ],
)
def test_wants_content_hash_table(mode: str, size: int, synthetic: bool, hashed: bool) -> None:
    policy = EtagPolicy(mode, hash_max=100)
    assert wants_content_hash(size, synthetic, policy) is hashed


def test_same_size_edit_under_constant_mtime_changes_the_etag() -> None:
    # The bytes change, size and mtime (1) do not: the tags must differ, and
    # a client revalidating with the old one must get the new bytes, not 304.
    old = FileFacts(100, 10**9, 1, 2, "text/plain", content_hash=content_digest(b"a" * 100))
    new = FileFacts(100, 10**9, 1, 2, "text/plain", content_hash=content_digest(b"b" * 100))
    assert old.etag != new.etag
    assert decide_file(request(if_none_match=old.etag), new, CFG, NOW).status == 200
    ranged = decide_file(request(range="bytes=0-9", if_range=old.etag), new, CFG, NOW)
    assert ranged.status == 200  # never a splice of old and new bytes
    assert decide_file(request(if_none_match=new.etag), new, CFG, NOW).status == 304


def test_synthetic_mtime_sends_no_last_modified_and_ignores_date_conditions() -> None:
    facts = FileFacts(
        100, 10**9, 1, 2, "text/plain", content_hash=content_digest(b"x"), synthetic_mtime=True
    )
    plan = decide_file(request(), facts, CFG, NOW)
    assert b"last-modified" not in header_map(plan)
    ims = decide_file(request(if_modified_since="Thu, 01 Jan 1970 00:00:01 GMT"), facts, CFG, NOW)
    assert ims.status == 200
    dated = "Thu, 01 Jan 1970 00:00:01 GMT"
    assert decide_file(request(range="bytes=0-0", if_range=dated), facts, CFG, NOW).status == 200


def test_pending_hash_means_no_etag_and_no_validation_by_tag() -> None:
    facts = FileFacts(10**6, MTIME_NS, 1, 2, "text/plain", hash_pending=True)
    assert facts.etag == ""
    plan = decide_file(request(), facts, CFG, NOW)
    assert plan.status == 200 and b"etag" not in header_map(plan)
    assert decide_file(request(if_none_match='""'), facts, CFG, NOW).status == 200
    tag_range = decide_file(request(range="bytes=0-0", if_range='"x"'), facts, CFG, NOW)
    assert tag_range.status == 200
    gz = decide_file(request(), facts, CFG, NOW, coding="gzip", data=b"z", vary=True)
    assert b"etag" not in header_map(gz)
    assert coded_etag("", "gzip") == ""


# ------------------------------------------------------------------- ranges

U = UNSATISFIABLE
HUGE = "9" * 30


@pytest.mark.parametrize(
    ("value", "size", "expected"),
    [
        # size 10: first/last positions, clamping, suffixes.
        ("bytes=0-4", 10, [(0, 5)]),
        ("bytes=0-0", 10, [(0, 1)]),
        ("bytes=2-", 10, [(2, 10)]),
        ("bytes=0-", 10, [(0, 10)]),
        ("bytes=-5", 10, [(5, 10)]),
        ("bytes=-1", 10, [(9, 10)]),
        ("bytes=-10", 10, [(0, 10)]),
        ("bytes=-11", 10, [(0, 10)]),  # suffix larger than the file
        ("bytes=-999999999999", 10, [(0, 10)]),
        ("bytes=9-9", 10, [(9, 10)]),  # size-1
        ("bytes=9-", 10, [(9, 10)]),
        ("bytes=9-10", 10, [(9, 10)]),
        ("bytes=0-9", 10, [(0, 10)]),
        ("bytes=0-10", 10, [(0, 10)]),  # size: clamped
        ("bytes=0-11", 10, [(0, 10)]),  # size+1: clamped
        ("bytes=3-999999999999", 10, [(3, 10)]),
        ("bytes=10-", 10, U),  # first == size
        ("bytes=10-10", 10, U),
        ("bytes=11-", 10, U),  # size+1
        ("bytes=11-20", 10, U),
        ("bytes=-0", 10, U),  # suffix 0
        # size 0: nothing is satisfiable.
        ("bytes=0-", 0, U),
        ("bytes=0-0", 0, U),
        ("bytes=-1", 0, U),
        ("bytes=-0", 0, U),
        ("bytes=1-", 0, U),
        # size 1
        ("bytes=0-0", 1, [(0, 1)]),
        ("bytes=0-", 1, [(0, 1)]),
        ("bytes=0-1", 1, [(0, 1)]),
        ("bytes=0-2", 1, [(0, 1)]),
        ("bytes=-1", 1, [(0, 1)]),
        ("bytes=-2", 1, [(0, 1)]),
        ("bytes=1-", 1, U),
        ("bytes=1-1", 1, U),
        ("bytes=2-", 1, U),
        # size 2
        ("bytes=1-1", 2, [(1, 2)]),
        ("bytes=1-", 2, [(1, 2)]),
        ("bytes=0-2", 2, [(0, 2)]),
        ("bytes=0-3", 2, [(0, 2)]),
        ("bytes=-1", 2, [(1, 2)]),
        ("bytes=-3", 2, [(0, 2)]),
        ("bytes=2-", 2, U),
        ("bytes=3-", 2, U),
        # Several members: request order kept, unsatisfiable members dropped.
        ("bytes=0-0,-2", 10, [(0, 1), (8, 10)]),
        ("bytes=5-,0-1", 10, [(5, 10), (0, 2)]),
        ("bytes=10-,0-0", 10, [(0, 1)]),
        ("bytes=0-0,-0", 10, [(0, 1)]),
        ("bytes=10-,11-,-0", 10, U),
        # Whitespace around members and empty members (RFC 9110 §5.6.1).
        ("bytes= 0-1 , 3-4 ", 10, [(0, 2), (3, 5)]),
        ("bytes=\t0-1\t", 10, [(0, 2)]),
        ("bytes=, 0-1,", 10, [(0, 2)]),
        ("bytes=,,0-1,,", 10, [(0, 2)]),
        ("Bytes=0-1", 10, [(0, 2)]),  # range units are case-insensitive (§14.1)
        # Ignored (None -> 200): malformed or another unit.
        ("bytes=", 10, None),
        ("bytes=,", 10, None),
        ("bytes= , ", 10, None),
        ("bytes=5-1", 10, None),  # last < first
        ("bytes=0-1,5-1", 10, None),
        ("bytes=0-1,junk", 10, None),
        ("bytes=abc", 10, None),
        ("bytes=0", 10, None),
        ("bytes=-", 10, None),
        ("bytes=0-1-2", 10, None),
        ("bytes=--1", 10, None),
        ("bytes=1--2", 10, None),
        ("bytes=+1-2", 10, None),
        ("bytes=1-+2", 10, None),
        ("bytes=-+1", 10, None),
        ("bytes=1 0-20", 10, None),  # space inside a number
        ("bytes=0-1 0", 10, None),
        ("bytes=0x1-2", 10, None),
        ("bytes=1.5-2", 10, None),
        ("bytes=\u0661-2", 10, None),  # a non-ASCII digit
        ("bytes=0-1;2-3", 10, None),
        ("bytes 0-1", 10, None),  # missing '='
        ("0-1", 10, None),
        ("=0-1", 10, None),
        ("", 10, None),
        ("items=0-1", 10, None),
        ("bytesx=0-1", 10, None),
        # Numbers of 30+ digits: ignored, never parsed in full.
        (f"bytes={HUGE}-", 10, None),
        (f"bytes=0-{HUGE}", 10, None),
        (f"bytes=-{HUGE}", 10, None),
        (f"bytes={HUGE}-{HUGE}9", 10, None),
        (f"bytes=0-{'1' * 5000}", 10, None),  # beyond Python's int() digit limit
    ],
)
def test_parse_range(
    value: str, size: int, expected: list[tuple[int, int]] | object | None
) -> None:
    assert parse_range(value, size) == expected


@pytest.mark.parametrize(
    ("spans", "expected"),
    [
        ([], []),
        ([(0, 1)], [(0, 1)]),
        ([(0, 2), (2, 4)], [(0, 4)]),  # adjacent
        ([(0, 3), (1, 2)], [(0, 3)]),  # contained
        ([(0, 3), (2, 5)], [(0, 5)]),  # overlapping
        ([(5, 7), (0, 2)], [(0, 2), (5, 7)]),  # sorted
        ([(0, 2), (3, 4)], [(0, 2), (3, 4)]),  # a one-byte gap stays
        ([(4, 6), (0, 1), (1, 4), (8, 9)], [(0, 6), (8, 9)]),
        ([(3, 4), (3, 4)], [(3, 4)]),
    ],
)
def test_coalesce(spans: list[tuple[int, int]], expected: list[tuple[int, int]]) -> None:
    assert coalesce(spans) == expected


# Go net/http fs_test.go ServeFileRangeTests (testFileLen = 11), status and
# parts.  Go does not coalesce, but none of these cases overlap or touch.
GO_LEN = 11


@pytest.mark.parametrize(
    ("value", "status", "parts"),
    [
        ("", 200, None),
        ("bytes=0-4", 206, [(0, 5)]),
        ("bytes=2-", 206, [(2, GO_LEN)]),
        ("bytes=-5", 206, [(GO_LEN - 5, GO_LEN)]),
        ("bytes=3-7", 206, [(3, 8)]),
        ("bytes=0-0,-2", 206, [(0, 1), (GO_LEN - 2, GO_LEN)]),
        ("bytes=0-1,5-8", 206, [(0, 2), (5, 9)]),
        ("bytes=0-1,5-", 206, [(0, 2), (5, GO_LEN)]),
        ("bytes=5-1000", 206, [(5, GO_LEN)]),
        ("bytes=0-,1-,2-,3-,4-", 200, None),  # ignore wasteful range request
        ("bytes=0-9", 206, [(0, GO_LEN - 1)]),
        ("bytes=0-10", 206, [(0, GO_LEN)]),
        ("bytes=0-11", 206, [(0, GO_LEN)]),
        ("bytes=10-11", 206, [(GO_LEN - 1, GO_LEN)]),
        ("bytes=10-", 206, [(GO_LEN - 1, GO_LEN)]),
        ("bytes=11-", 416, None),
        ("bytes=11-12", 416, None),
        ("bytes=12-12", 416, None),
        ("bytes=11-100", 416, None),
        ("bytes=12-100", 416, None),
        ("bytes=100-", 416, None),
        ("bytes=100-1000", 416, None),
    ],
)
def test_go_serve_file_range_table(
    value: str, status: int, parts: list[tuple[int, int]] | None
) -> None:
    data = b"0123456789\n"
    facts = file_facts(size=GO_LEN, ctype="text/plain; charset=utf-8")
    req = request(range=value or None)
    plan = decide_file(req, facts, CFG, NOW, boundary="gOb0unDaRy")
    assert plan.status == status
    hs = header_map(plan)
    if status == 416:
        assert hs[b"content-range"] == b"bytes */11"
        return
    body = materialise(plan.body, data)
    assert hs[b"content-length"] == b"%d" % len(body)
    if parts is None:
        assert body == data and b"content-range" not in hs
    elif len(parts) == 1:
        ((start, end),) = parts
        assert body == data[start:end]
        assert hs[b"content-range"] == b"bytes %d-%d/11" % (start, end - 1)
    else:
        assert hs[b"content-type"] == b"multipart/byteranges; boundary=gOb0unDaRy"
        got = parse_multipart(body, b"gOb0unDaRy")
        assert [p for _, p in got] == [data[s:e] for s, e in parts]
        assert [h[b"content-range"] for h, _ in got] == [
            b"bytes %d-%d/11" % (s, e - 1) for s, e in parts
        ]


def parse_multipart(body: bytes, boundary: bytes) -> list[tuple[dict[bytes, bytes], bytes]]:
    """A strict multipart/byteranges reader (RFC 9110 §14.6, RFC 2046 §5.1.1)."""
    first = b"--" + boundary + b"\r\n"
    between = b"\r\n--" + boundary + b"\r\n"
    final = b"\r\n--" + boundary + b"--\r\n"
    assert body.startswith(first), body[:40]
    assert body.endswith(final), body[-40:]
    assert body.count(final) == 1
    parts: list[tuple[dict[bytes, bytes], bytes]] = []
    for chunk in body[len(first) : -len(final)].split(between):
        head, sep, payload = chunk.partition(b"\r\n\r\n")
        assert sep, chunk
        headers: dict[bytes, bytes] = {}
        for line in head.split(b"\r\n"):
            assert b"\n" not in line and b"\r" not in line
            name, colon, value = line.partition(b":")
            assert colon and name == name.strip() and name.lower() not in headers
            headers[name.lower()] = value.strip()
        assert set(headers) == {b"content-type", b"content-range"}
        parts.append((headers, payload))
    return parts


@pytest.mark.parametrize(
    ("value", "parts"),
    [
        ("bytes=0-1,5-7,-3", [(0, 2), (5, 8), (37, 40)]),
        ("bytes=30-,0-0", [(0, 1), (30, 40)]),  # sorted
        ("bytes=0-1,3-4", [(0, 2), (3, 5)]),
        ("bytes=0-4,3-6,20-21", [(0, 7), (20, 22)]),  # overlap coalesced
        ("bytes=0-1,2-3,10-11", [(0, 4), (10, 12)]),  # adjacency coalesced
        ("bytes=20-,-20", [(20, 40)]),  # sum == size: allowed, one part
        ("bytes=-1,-2,-3", [(37, 40)]),
    ],
)
def test_multipart_byteranges(value: str, parts: list[tuple[int, int]]) -> None:
    boundary = "3d6b6a416f9b5"
    plan = decide_file(request(range=value), file_facts(), CFG, NOW, boundary=boundary)
    assert plan.status == 206 and plan.send_body and plan.needs_file
    hs = header_map(plan)
    body = materialise(plan.body, DATA)
    # Framing: the header, the pieces and the written bytes all agree.
    assert int(hs[b"content-length"]) == sum(len(p) for p in plan.body) == len(body)
    assert plan.file_bytes == sum(e - s for s, e in parts)
    assert hs[b"accept-ranges"] == b"bytes" and hs[b"etag"] == ETAG.encode()
    if len(parts) == 1:
        ((start, end),) = parts
        assert hs[b"content-type"] == b"text/plain"
        assert hs[b"content-range"] == b"bytes %d-%d/40" % (start, end - 1)
        assert body == DATA[start:end]
        return
    assert hs[b"content-type"] == b"multipart/byteranges; boundary=" + boundary.encode()
    assert b"content-range" not in hs
    # Literal pieces use CRLF only (no bare LF or CR).
    for piece in plan.body:
        if isinstance(piece, bytes):
            assert b"\n" not in piece.replace(b"\r\n", b"")
            assert b"\r" not in piece.replace(b"\r\n", b"")
    got = parse_multipart(body, boundary.encode())
    assert [p for _, p in got] == [DATA[s:e] for s, e in parts]
    for (headers, _), (s, e) in zip(got, parts, strict=True):
        assert headers[b"content-type"] == b"text/plain"
        assert headers[b"content-range"] == b"bytes %d-%d/40" % (s, e - 1)


def test_multipart_body_exact_bytes() -> None:
    body = multipart_body([(0, 2), (5, 6)], 10, b"image/png", b"XY")
    assert body == (
        b"--XY\r\ncontent-type: image/png\r\ncontent-range: bytes 0-1/10\r\n\r\n",
        FileSpan(0, 2),
        b"\r\n--XY\r\ncontent-type: image/png\r\ncontent-range: bytes 5-5/10\r\n\r\n",
        FileSpan(5, 1),
        b"\r\n--XY--\r\n",
    )


@pytest.mark.parametrize(
    ("value", "max_ranges", "boundary", "status"),
    [
        ("bytes=0-0,2-2,4-4", 3, "b", 206),
        ("bytes=0-0,2-2,4-4,6-6", 3, "b", 200),  # more than max_ranges
        ("bytes=0-0,2-2", 1, "b", 200),
        ("bytes=0-0,1-1", 1, "b", 200),  # counted before coalescing
        ("bytes=0-,0-", 16, "b", 200),  # sums beyond the size
        ("bytes=0-,-1", 16, "b", 200),
        ("bytes=0-19,20-", 16, "b", 206),  # sums to exactly the size
        ("bytes=0-1,5-6", 16, "", 200),  # several ranges but no boundary
        ("bytes=0-1,2-3", 16, "", 206),  # ...coalesced into one: no boundary needed
    ],
)
def test_range_amplification_guard(value: str, max_ranges: int, boundary: str, status: int) -> None:
    plan = decide_file(
        request(range=value), file_facts(), Config(max_ranges=max_ranges), NOW, boundary
    )
    assert plan.status == status
    if status == 200:
        assert plan.body == (FileSpan(0, len(DATA)),)
        assert header_map(plan)[b"content-length"] == b"40"


@pytest.mark.parametrize("value", ["bytes=999-", "bytes=-0", "bytes=40-40,41-"])
def test_unsatisfiable_is_416_with_content_range(value: str) -> None:
    plan = decide_file(request(range=value), file_facts(), CFG, NOW, "b")
    assert plan.status == 416
    hs = header_map(plan)
    assert hs[b"content-range"] == b"bytes */40"
    assert not plan.needs_file
    assert int(hs[b"content-length"]) == len(materialise(plan.body, b""))


def test_empty_file_range_is_416_and_plain_get_is_empty_200() -> None:
    facts = file_facts(size=0)
    plan = decide_file(request(range="bytes=0-"), facts, CFG, NOW)
    assert plan.status == 416 and header_map(plan)[b"content-range"] == b"bytes */0"
    plain = decide_file(request(), facts, CFG, NOW)
    assert plain.status == 200 and header_map(plain)[b"content-length"] == b"0"
    assert materialise(plain.body, b"") == b"" and not plain.needs_file


@pytest.mark.parametrize("value", ["bytes=0-1", "bytes=999-", "bytes=0-1,3-4", "bytes=x"])
def test_range_is_ignored_for_head(value: str) -> None:
    plan = decide_file(request(b"HEAD", range=value), file_facts(), CFG, NOW, "b")
    assert plan.status == 200 and not plan.send_body
    hs = header_map(plan)
    assert hs[b"content-length"] == b"40" and b"content-range" not in hs


@pytest.mark.parametrize(
    "value", ["bytes=5-1", "items=0-1", "bytes 0-1", f"bytes=0-{HUGE}", "bytes=+0-1"]
)
def test_malformed_range_is_full_200(value: str) -> None:
    plan = decide_file(request(range=value), file_facts(), CFG, NOW, "b")
    assert plan.status == 200
    assert materialise(plan.body, DATA) == DATA


# -------------------------------------------------------------- decide_file

BASE_HEADERS = {
    b"date",
    b"last-modified",
    b"etag",
    b"accept-ranges",
    b"content-type",
    b"content-length",
}


@pytest.mark.parametrize("cfg", [CFG, CFG_CC], ids=["no-cache-control", "cache-control"])
def test_decide_file_get_and_head_headers(cfg: Config) -> None:
    facts = file_facts(ctype="text/html; charset=utf-8")
    get = decide_file(request(), facts, cfg, NOW)
    head = decide_file(request(b"HEAD"), facts, cfg, NOW)
    hs = header_map(get)
    expected_names = BASE_HEADERS | ({b"cache-control"} if cfg.cache_control else set())
    assert set(hs) == expected_names
    assert hs[b"date"] == b"Tue, 14 Nov 2023 22:13:20 GMT"
    assert hs[b"last-modified"] == b"Tue, 14 Nov 2023 19:26:40 GMT"  # sub-second dropped
    assert hs[b"etag"] == ETAG.encode()
    assert hs[b"accept-ranges"] == b"bytes"
    assert hs[b"content-type"] == b"text/html; charset=utf-8"
    assert hs[b"content-length"] == b"40"
    if cfg.cache_control:
        assert hs[b"cache-control"] == CC.encode()
    assert get.status == 200 and get.send_body and not get.close
    assert get.body == (FileSpan(0, 40),) and get.needs_file and get.file_bytes == 40
    # HEAD: the same status and headers, but no body is sent.
    assert head.status == 200 and head.headers == get.headers
    assert not head.send_body and not head.needs_file


def test_decide_file_single_range() -> None:
    plan = decide_file(request(range="bytes=2-5"), file_facts(), CFG_CC, NOW)
    hs = header_map(plan)
    assert plan.status == 206
    assert set(hs) == BASE_HEADERS | {b"content-range", b"cache-control"}
    assert hs[b"content-range"] == b"bytes 2-5/40"
    assert hs[b"content-length"] == b"4"
    assert plan.body == (FileSpan(2, 4),)
    assert materialise(plan.body, DATA) == DATA[2:6]


def test_decide_file_default_etag_is_used() -> None:
    facts = FileFacts(size=40, mtime_ns=MTIME_NS, dev=7, ino=8, content_type="text/plain")
    plan = decide_file(request(), facts, CFG, NOW)
    assert header_map(plan)[b"etag"] == make_etag(40, MTIME_NS).encode()
    again = decide_file(request(if_none_match=facts.etag), facts, CFG, NOW)
    assert again.status == 304


def test_412_is_a_fixed_error() -> None:
    plan = decide_file(request(b"HEAD", if_match=OTHER), file_facts(), CFG, NOW)
    assert plan.status == 412 and not plan.send_body
    get = decide_file(request(if_match=OTHER), file_facts(), CFG, NOW)
    assert materialise(get.body, b"") == b"412 Precondition Failed\n"


# ---------------------------------------------------------- decide_directory


@dataclass(frozen=True)
class Redirect:
    raw: bytes
    location: bytes


REDIRECTS = [
    Redirect(b"/dir", b"/dir/"),
    Redirect(b"/a/b", b"/a/b/"),
    Redirect(b"/dir?x=1&y=%20", b"/dir/?x=1&y=%20"),
    Redirect(b"/dir?", b"/dir/?"),
    Redirect(b"//evil.com", b"/evil.com/"),
    Redirect(b"//evil.com/x", b"/evil.com/x/"),
    Redirect(b"///a", b"/a/"),
    Redirect(b"/a//b", b"/a/b/"),
    Redirect(b"http://host//evil.com", b"/evil.com/"),
    Redirect(b"/%09/evil.com", b"/%09/evil.com/"),
    Redirect(b"/sp%20ace", b"/sp%20ace/"),
    Redirect(b"/caf%c3%a9", b"/caf%C3%A9/"),
    Redirect(b"/caf\xc3\xa9", b"/caf%C3%A9/"),
    Redirect(b"/a%3Fb", b"/a%3Fb/"),
    Redirect(b"/a%23b", b"/a%23b/"),
    Redirect(b"/100%25", b"/100%25/"),
    Redirect(b"/%252e", b"/%252e/"),
    # An encoded backslash is a name character; it stays encoded (never "/\\").
    Redirect(b"/%5Cevil", b"/%5Cevil/"),
    Redirect(b"/javascript:x", b"/javascript%3Ax/"),
]


@pytest.mark.parametrize("case", REDIRECTS, ids=[r.raw.decode("latin-1") for r in REDIRECTS])
@pytest.mark.parametrize("method", [b"GET", b"HEAD"])
def test_directory_redirect(case: Redirect, method: bytes) -> None:
    req = request(method, case.raw)
    plan = decide_directory(req, CFG, NOW)
    assert plan.status == 301
    loc = header_map(plan)[b"location"]
    assert loc == case.location
    assert loc.startswith(b"/") and not loc.startswith(b"//") and b"\\" not in loc
    assert plan.send_body == (method == b"GET")
    # The Location round-trips to the same directory.
    again = parse_target(b"GET", loc)
    assert again.segments == req.target.segments and again.slash


@pytest.mark.parametrize(
    ("raw", "status"),
    [(b"/\\evil", 400), (b"/%2F%2Fevil.com", 404), (b"/%2f%2fevil.com/", 404)],
)
def test_open_redirect_targets_never_reach_a_redirect(raw: bytes, status: int) -> None:
    with pytest.raises(HTTPError) as exc:
        parse_target(b"GET", raw)
    assert exc.value.status == status


@pytest.mark.parametrize("raw", [b"/dir/", b"/dir/?q=1", b"/", b"///", b"http://h"])
def test_directory_with_slash_is_404(raw: bytes) -> None:
    plan = decide_directory(request(b"GET", raw), CFG, NOW)
    assert plan.status == 404 and b"location" not in header_map(plan)
    head = decide_directory(request(b"HEAD", raw), CFG, NOW)
    assert head.status == 404 and not head.send_body


# -------------------------------------------------------------------- route


def test_route_options() -> None:
    for raw in (b"/x", b"*", b"/.secret"):
        plan = route(request(b"OPTIONS", raw), CFG, NOW)
        assert plan is not None and plan.status == 204
        hs = header_map(plan)
        assert hs[b"allow"] == b"GET, HEAD, OPTIONS"
        assert b"content-length" not in hs and b"date" in hs
        assert not plan.send_body and plan.body == ()


@pytest.mark.parametrize(
    "method", [b"POST", b"PUT", b"DELETE", b"PATCH", b"get", b"Head", b"TRACE", b"BREW"]
)
def test_route_other_methods_are_405(method: bytes) -> None:
    req = RequestFacts(method, parse_target(method, b"/f.txt"))
    plan = route(req, CFG, NOW)
    assert plan is not None and plan.status == 405
    hs = header_map(plan)
    assert hs[b"allow"] == b"GET, HEAD, OPTIONS"
    assert int(hs[b"content-length"]) == len(materialise(plan.body, b""))
    assert not plan.close
    with_body = RequestFacts(method, req.target, has_body=True)
    closing = route(with_body, CFG, NOW)
    assert closing is not None and closing.status == 405 and closing.close


@pytest.mark.parametrize(
    ("raw", "hidden_cfg", "expected"),
    [
        (b"/f.txt", False, None),
        (b"/", False, None),
        (b"/.secret", False, 404),
        (b"/.secret", True, None),
        (b"/a/.git/config", False, 404),
        (b"/a/.git/config", True, None),
        (b"/%2Esecret", False, 404),
        (b"/.well-known/security.txt", False, None),
        (b"/.well-known", False, None),
        (b"/a/.well-known/x", False, 404),
        (b"/.well-known/.x", False, 404),
        (b"/...", False, 404),
        (b"/a.b/c.", False, None),
    ],
)
def test_route_hidden(raw: bytes, hidden_cfg: bool, expected: int | None) -> None:
    cfg = Config(hidden=hidden_cfg)
    for method in (b"GET", b"HEAD"):
        plan = route(request(method, raw), cfg, NOW)
        if expected is None:
            assert plan is None
        else:
            assert plan is not None and plan.status == expected
            assert plan.send_body == (method == b"GET")


# ------------------------------------------------------------- error plans


@pytest.mark.parametrize("status", [400, 403, 404, 405, 412, 414, 416, 500, 503])
def test_error_plan_fixed_text(status: int) -> None:
    plan = error_plan(status, NOW)
    hs = header_map(plan)
    body = materialise(plan.body, b"")
    assert body.startswith(b"%d " % status) and body.endswith(b"\n")
    assert hs[b"content-length"] == b"%d" % len(body)
    assert hs[b"content-type"] == b"text/plain; charset=utf-8"
    head = error_plan(status, NOW, head_only=True)
    assert not head.send_body and head.headers == plan.headers


def test_http_error_plan_leaks_nothing_and_adds_headers() -> None:
    secret = "/srv/www/../etc/passwd: Permission denied"
    plan = http_error_plan(HTTPError(404, secret), NOW)
    assert materialise(plan.body, b"") == b"404 Not Found\n" and not plan.close
    allow = http_error_plan(HTTPError(405, secret), NOW)
    assert header_map(allow)[b"allow"] == b"GET, HEAD, OPTIONS"
    busy = http_error_plan(HTTPError(503, secret), NOW)
    assert header_map(busy)[b"retry-after"] == b"1" and busy.close
    bad = http_error_plan(HTTPError(400, secret, close=True), NOW, head_only=True)
    assert bad.close and not bad.send_body


@pytest.mark.parametrize(
    ("target", "fields", "expected"),
    [
        (b"/a.txt", {}, True),
        (b"/a.txt?download", {}, False),
        (b"/a.txt", {"if_none_match": "*"}, False),
        (b"/a.txt", {"if_match": "*"}, False),
        (b"/a.txt", {"if_modified_since": "Sun, 29 Nov 2026 00:00:00 GMT"}, False),
        (b"/a.txt", {"if_unmodified_since": "Sun, 29 Nov 2026 00:00:00 GMT"}, False),
        (b"/a.txt", {"range": "bytes=0-1"}, False),
        # If-Range only matters with Range; Accept-Encoding is decided
        # before decide_file (the coding is its argument).
        (b"/a.txt", {"if_range": '"x"', "accept_encoding": "gzip"}, True),
    ],
)
def test_depends_on_method_only(target: bytes, fields: dict[str, str], expected: bool) -> None:
    from serverio.http.core import depends_on_method_only
    from serverio.http.target import parse_target

    req = RequestFacts(method=b"GET", target=parse_target(b"GET", target), **fields)  # type: ignore[arg-type]
    assert depends_on_method_only(req) is expected


def test_plan_is_immutable() -> None:
    """Memoised plans are shared between requests: nothing may change one."""
    import dataclasses

    plan = error_plan(404, NOW)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.status = 200  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.head = b"HTTP/1.1 200 OK\r\n\r\n"  # type: ignore[misc]
    assert isinstance(plan.headers, tuple) and isinstance(plan.body, tuple)
