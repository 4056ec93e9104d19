"""Conditional requests (RFC 9110 §13): preconditions in §13.2.2 order,
entity-tags and their formats, If-Range; pure, table-driven, no event loop.

The precondition table checks :func:`serverio.http.core.decide_file` against
an oracle written here from the text of RFC 9110 §13.2.2, not from the code.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import pytest

from serverio.http.core import (
    EtagPolicy,
    FileFacts,
    FileSpan,
    RequestFacts,
    coded_etag,
    content_digest,
    decide_file,
    evaluate_preconditions,
    if_range_matches,
    make_etag,
    mtime_is_synthetic,
    parse_etag_list,
    wants_content_hash,
)
from serverio.http.target import Target

from .core_tables import (
    CC,
    CFG,
    CFG_CC,
    DATA,
    ETAG,
    MTIME,
    MTIME_NS,
    NOW,
    OTHER,
    file_facts,
    header_map,
    imf,
    request,
)

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
def test_etag_does_not_depend_on_device_or_inode(a: tuple[int, int], b: tuple[int, int]) -> None:
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
