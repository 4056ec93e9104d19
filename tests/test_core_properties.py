"""Property tests of the pure modules (hypothesis).

Each test runs under the ``serverio-core`` settings profile (modest example
counts, no deadline so a loaded CI machine cannot make them flaky); the whole
file runs in a few seconds.
"""

from __future__ import annotations

import itertools
import os
import posixpath

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from serverio.config import Config
from serverio.errors import HTTPError
from serverio.http.core import (
    UNSATISFIABLE,
    FileFacts,
    FileSpan,
    RequestFacts,
    coalesce,
    decide_file,
    evaluate_preconditions,
    parse_range,
)
from serverio.http.dates import format_http_date, parse_http_date
from serverio.http.target import Target, parse_target

settings.register_profile(
    "serverio-core",
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
CORE = settings.get_profile("serverio-core")

# ------------------------------------------------------------------- ranges

sizes = st.integers(min_value=0, max_value=64)
positions = st.integers(min_value=0, max_value=80)
ows = st.sampled_from(["", " ", "\t", "  "])


@st.composite
def range_members(draw: st.DrawFn) -> tuple[str, str | None, str | None]:
    """A syntactically valid range member as (text, first, last)."""
    kind = draw(st.sampled_from(["a-b", "a-", "-n"]))
    a = draw(positions)
    b = draw(positions)
    if kind == "a-b":
        a, b = min(a, b), max(a, b)
        return f"{a}-{b}", str(a), str(b)
    if kind == "a-":
        return f"{a}-", str(a), None
    return f"-{b}", None, str(b)


def model_range(
    members: list[tuple[str, str | None, str | None]], size: int
) -> list[tuple[int, int]] | None:
    """RFC 9110 §14.1.2, written from the text: satisfiable members only."""
    out: list[tuple[int, int]] = []
    for _, first, last in members:
        if first is None:
            assert last is not None
            suffix = int(last)
            if suffix > 0 and size > 0:
                out.append((size - min(suffix, size), size))
        elif int(first) < size:
            end = size - 1 if last is None else min(int(last), size - 1)
            out.append((int(first), end + 1))
    return out or None


@CORE
@given(st.lists(range_members(), min_size=1, max_size=6), sizes, st.data())
def test_parse_range_matches_model(
    members: list[tuple[str, str | None, str | None]], size: int, data: st.DataObject
) -> None:
    pieces = [data.draw(ows) + text + data.draw(ows) for text, _, _ in members]
    value = "bytes=" + ",".join(pieces)
    expected = model_range(members, size)
    got = parse_range(value, size)
    assert got == (UNSATISFIABLE if expected is None else expected)


RANGE_WORDS = ["bytes", "=", "-", ",", " ", "\t", "0", "1", "9", "10", "+", "x", "9" * 20]
range_text = st.one_of(
    st.text(max_size=40),
    st.lists(st.sampled_from(RANGE_WORDS), max_size=14).map("".join),
)


@CORE
@given(range_text, sizes)
def test_parse_range_never_raises_and_spans_are_in_bounds(value: str, size: int) -> None:
    got = parse_range(value, size)
    if got is None or got is UNSATISFIABLE:
        return
    assert isinstance(got, list) and got
    for start, end in got:
        assert 0 <= start < end <= size


spans = st.lists(
    st.tuples(st.integers(0, 60), st.integers(1, 20)).map(lambda t: (t[0], t[0] + t[1])),
    max_size=10,
)


@CORE
@given(spans)
def test_coalesce_is_sorted_disjoint_and_covers_the_same_bytes(
    raw: list[tuple[int, int]],
) -> None:
    out = coalesce(raw)
    assert all(start < end for start, end in out)
    for (_, prev_end), (next_start, _) in itertools.pairwise(out):
        assert prev_end < next_start  # disjoint and not even adjacent
    covered_in = {i for s, e in raw for i in range(s, e)}
    covered_out = {i for s, e in out for i in range(s, e)}
    assert covered_in == covered_out
    assert sum(e - s for s, e in out) == len(covered_out)
    assert coalesce(out) == out


# ------------------------------------------------------------ preconditions

ETAG = '"a-b-c"'
MTIME = 1_600_000_000
header_text = st.one_of(
    st.none(),
    st.text(max_size=40),
    st.sampled_from(
        [ETAG, "W/" + ETAG, "*", '"x", ' + ETAG, format_http_date(MTIME), format_http_date(0)]
    ),
)
methods = st.sampled_from([b"GET", b"HEAD", b"POST", b"PUT", b"get"])
TARGET = Target(("f",), False, None)


@CORE
@given(methods, header_text, header_text, header_text, header_text)
def test_evaluate_preconditions_never_raises(
    method: bytes, im: str | None, ius: str | None, inm: str | None, ims: str | None
) -> None:
    req = RequestFacts(
        method,
        TARGET,
        if_match=im,
        if_unmodified_since=ius,
        if_none_match=inm,
        if_modified_since=ims,
    )
    status = evaluate_preconditions(req, ETAG, MTIME).status
    assert status in (None, 304, 412)
    if status == 304:
        assert method in (b"GET", b"HEAD")


@CORE
@given(
    st.sampled_from([b"GET", b"HEAD"]),
    header_text,
    header_text,
    range_text | st.none(),
    header_text,
    st.integers(0, 64),
    st.sampled_from(["", "BOUNDARY"]),
)
def test_decide_file_framing_always_agrees(
    method: bytes,
    inm: str | None,
    ims: str | None,
    range_: str | None,
    if_range: str | None,
    size: int,
    boundary: str,
) -> None:
    req = RequestFacts(
        method, TARGET, if_none_match=inm, if_modified_since=ims, range=range_, if_range=if_range
    )
    facts = FileFacts(
        size=size, mtime_ns=MTIME * 10**9, dev=1, ino=2, content_type="text/plain", etag=ETAG
    )
    plan = decide_file(req, facts, Config.of(max_ranges=4), MTIME + 10.0, boundary)
    assert plan.status in (200, 206, 304, 416)
    headers = dict(plan.headers)
    assert len(headers) == len(plan.headers)
    for piece in plan.body:
        if isinstance(piece, FileSpan):
            assert 0 <= piece.offset and piece.length > 0 and piece.offset + piece.length <= size
    if plan.status == 304:
        assert not plan.send_body and b"content-length" not in headers
    else:
        assert int(headers[b"content-length"]) == sum(len(p) for p in plan.body)
    if method == b"HEAD":
        assert not plan.send_body and plan.status in (200, 304)


# ------------------------------------------------------------------- target

target_pieces = st.sampled_from(
    [
        b"/", b"//", b"a", b"b.txt", b".", b"..", b".git", b".well-known", b"%2e", b"%2E",
        b"%2f", b"%2F", b"%5c", b"\\", b"%00", b"\x00", b"%c0%ae", b"%e0%80%ae", b"%", b"%4",
        b"%zz", b"%25", b"%252e", b"\xff", b"\xc3\xa9", b"%c3%a9", b"?", b"#", b"*", b" ",
        b"http://", b"https://", b"HOST", b":", b"@", b"~", b"%20",
    ]
)  # fmt: skip
raw_targets = st.one_of(
    st.lists(target_pieces, max_size=12).map(b"".join),
    st.lists(target_pieces, max_size=12).map(lambda p: b"/" + b"".join(p)),
    st.binary(max_size=30),
    st.binary(max_size=30).map(lambda b: b"/" + b),
)
ROOT = "/srv/www"


@CORE
@given(st.sampled_from([b"GET", b"HEAD", b"OPTIONS", b"POST"]), raw_targets)
def test_parse_target_only_raises_http_error_and_stays_under_root(
    method: bytes, raw: bytes
) -> None:
    try:
        target = parse_target(method, raw)
    except HTTPError as exc:
        assert exc.status in (400, 404, 414)
        return
    for seg in target.segments:
        assert seg not in ("", ".", "..")
        assert "/" not in seg and "\x00" not in seg
        assert "\\" not in seg or b"\\" not in raw  # only an encoded one, as a name char
    joined = posixpath.normpath(posixpath.join(ROOT, *target.segments))
    assert joined == ROOT or joined.startswith(ROOT + "/")
    native = os.path.normpath(os.path.join(ROOT, *target.segments))
    assert os.path.commonpath([ROOT, native]) == ROOT
    # The canonical path re-parses to the same segments and never starts with //.
    path = target.url_path()
    assert path.startswith("/") and not path.startswith("//") and path.isascii()
    if not target.asterisk:
        assert parse_target(b"GET", path.encode("ascii")).segments == target.segments


@CORE
@given(st.lists(st.text(min_size=1, max_size=8), max_size=5), st.booleans())
def test_url_path_round_trips_for_any_names(names: list[str], slash: bool) -> None:
    names = [n for n in names if n not in (".", "..") and "/" not in n]
    names = [n for n in names if "\\" not in n and "\x00" not in n]
    names = [n for n in names if not any(0xD800 <= ord(c) <= 0xDFFF for c in n)]
    target = Target(tuple(names), slash, None)
    again = parse_target(b"GET", target.url_path().encode("ascii"))
    assert again.segments == target.segments
    assert again.slash == (slash or not names)


# -------------------------------------------------------------------- dates


@CORE
@given(st.text(max_size=60))
def test_parse_http_date_never_raises(value: str) -> None:
    result = parse_http_date(value)
    assert result is None or isinstance(result, int)


date_words = st.sampled_from(
    ["Sun,", "Sunday,", "Sun", "06", "6", "Nov", "06-Nov-94", "1994", "94", "08:49:37",
     "24:00:00", "GMT", "31", "Feb", "00", "99", "9999", ",", "-", ":"]
)  # fmt: skip


@CORE
@given(st.lists(date_words, max_size=7).map(" ".join))
def test_parse_http_date_never_raises_on_date_like_text(value: str) -> None:
    result = parse_http_date(value)
    if result is not None:
        # Whatever is accepted names a real instant that formats back to a valid date.
        assert parse_http_date(format_http_date(result)) == result


@CORE
@given(st.integers(min_value=0, max_value=253402300799))
def test_http_date_round_trip(t: int) -> None:
    text = format_http_date(t)
    assert parse_http_date(text) == t
    assert format_http_date(parse_http_date(text) or 0) == text
