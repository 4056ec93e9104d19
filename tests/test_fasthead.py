"""The request-head fast path against h11, the authority.

Every input is fed to both; the fast path must defer or give exactly h11's
result (testkit/fasthead_diff.py says what is compared).  Sources:
hand-picked heads at each border of the subset, hypothesis-generated
near-valid heads (whole and split across buffers), a seeded bulk run of
near-valid heads and the raw-request fuzzer's inputs, and every raw request
of the malformed-request tables in the other test modules.  The million-case
run is ``python -m bench.stress fasthead``.
"""

from __future__ import annotations

import importlib
import random
from pathlib import Path

import h11
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from serverio.wire.fasthead import MAX_FIELDS, FastRequest, HeadParser, parse_head
from testkit import fasthead_diff as diff

from .conftest import make_config, memory_connection

BASIC = b"GET /1k.bin HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nUser-Agent: wrk\r\n\r\n"


# ------------------------------------------------------------ exact results


def test_common_head_gives_h11s_result() -> None:
    assert diff.check(BASIC, 8192) == "accept"
    req = parse_head(BASIC, 8192)
    assert req is not None
    assert (req.method, req.target, req.http_version, req.size) == (
        b"GET",
        b"/1k.bin",
        b"1.1",
        len(BASIC),
    )
    assert req.headers == [(b"host", b"127.0.0.1:8000"), (b"user-agent", b"wrk")]
    assert req.keep_alive


@pytest.mark.parametrize(
    "raw",
    [
        b"HEAD / HTTP/1.0\r\n\r\n",  # HTTP/1.0 needs no Host
        b"GET /a?b=c&d=%20#f HTTP/1.1\r\nHOST:t\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: \t t \t \r\nX-E:\r\nX-S:   \r\n\r\n",  # OWS stripped
        b"GET / HTTP/1.1\r\nHost: t\r\nAccept: a  b\t\tc\r\n\r\n",  # inner runs kept
        b"GET / HTTP/1.1\r\nHost: t\r\nConnection: Keep-Alive, CLOSE\r\n\r\n",
        b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: t\r\nRange: a\r\nRange: b\r\n\r\n",  # repeated, kept
        b"GET / HTTP/1.1\r\nHost: t\r\n\r\nGET /next HTTP/1.1\r\nHost: t\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: t\r\n\r\nGET /part",
        b"GET / HTTP/1.1\r\n~!#$%&'*+.^_`|: v\r\nHost: t\r\n\r\n",
    ],
)
def test_accepted_heads_equal_h11(raw: bytes) -> None:
    assert diff.check(raw, 8192) == "accept"


@pytest.mark.parametrize(
    "raw",
    [
        b"POST / HTTP/1.1\r\nHost: t\r\n\r\n",  # other methods
        b"get / HTTP/1.1\r\nHost: t\r\n\r\n",
        b"GET * HTTP/1.1\r\nHost: t\r\n\r\n",  # not origin-form
        b"GET http://h/ HTTP/1.1\r\nHost: t\r\n\r\n",
        b"GET  / HTTP/1.1\r\nHost: t\r\n\r\n",  # odd whitespace
        b"GET / HTTP/1.1 \r\nHost: t\r\n\r\n",
        b"GET / HTTP/1.2\r\nHost: t\r\n\r\n",  # other versions
        b"GET / HTTP/2.0\r\nHost: t\r\n\r\n",
        b"GET / HTTP/1.1\nHost: t\n\n",  # bare LF (h11 reads it)
        b"GET / HTTP/1.1\r\nHost: t\n\r\n",
        b"GET / HTTP/1.1\r\nHost: t\r\n folded\r\n\r\n",  # obs-fold
        b"GET / HTTP/1.1\r\nHost : t\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: t\r\nX: a\x01b\r\n\r\n",  # control byte h11 allows
        b"GET / HTTP/1.1\r\nHost: t\r\nX: caf\xc3\xa9\r\n\r\n",  # obs-text
        b"GET /\xc3\xa9 HTTP/1.1\r\nHost: t\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n",  # framing
        b"GET / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n",
        b"GET / HTTP/1.1\r\n\r\n",  # no Host
        b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        b"GET / HTTP/1.0\r\nHost: a\r\nhost: a\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: t\r\n",  # not complete yet
        b"\r\nGET / HTTP/1.1\r\nHost: t\r\n\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",  # h2c preface
        b"GET / HTTP/1.1\r\nHost: t\r\n" + b"X-F: v\r\n" * MAX_FIELDS + b"\r\n",
    ],
)
def test_outside_the_subset_defers(raw: bytes) -> None:
    assert parse_head(raw, 8192) is None


def test_head_longer_than_the_limit_defers() -> None:
    assert parse_head(BASIC, len(BASIC)) is not None
    assert parse_head(BASIC, len(BASIC) - 1) is None


def test_many_fields_up_to_the_limit_are_accepted() -> None:
    raw = b"GET / HTTP/1.1\r\nHost: t\r\n" + b"X-F: v\r\n" * (MAX_FIELDS - 1) + b"\r\n"
    assert diff.check(raw, 8192) == "accept"


def test_long_field_value_is_linear() -> None:
    """A long value that fails at its end costs one pass, not a backtrack per byte."""
    raw = b"GET / HTTP/1.1\r\nHost: t\r\nX: " + b"a " * 200_000 + b"\x01\r\n\r\n"
    assert parse_head(raw, 1 << 20) is None


# ------------------------------------------------------------ HeadParser


def test_head_parser_split_reads_match_h11() -> None:
    for cut in range(1, len(BASIC)):
        assert diff.check_split([BASIC[:cut], BASIC[cut:]], 8192) in ("fast", "h11")
    assert diff.check_split([BASIC], 8192) == "fast"


def _count_h11_servers(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Record every server-side h11.Connection built from now on."""
    made: list[object] = []
    real = h11.Connection

    def counting(*a: object, **kw: object) -> h11.Connection:
        if a and a[0] is h11.SERVER:
            made.append(a)
        return real(*a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(h11, "Connection", counting)
    return made


def test_head_parser_builds_no_h11_parser_for_the_common_head(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made = _count_h11_servers(monkeypatch)
    p = HeadParser(8192, BASIC[:10])
    assert p.next_event() is h11.NEED_DATA  # incomplete: h11 takes over
    assert len(made) == 1 and not p.fast
    p = HeadParser(8192)
    assert p.next_event() is h11.NEED_DATA  # empty: nothing to parse yet
    p.receive_data(BASIC + b"GET /x")
    event = p.next_event()
    assert type(event) is FastRequest and p.fast and len(made) == 1
    assert p.trailing_data == (b"GET /x", False)
    p.receive_data(b"")
    assert p.trailing_data == (b"GET /x", True)


def test_head_parser_eof_before_a_head_is_h11s() -> None:
    p = HeadParser(8192, b"GET / HT")
    p.receive_data(b"")
    with pytest.raises(h11.RemoteProtocolError):
        p.next_event()


def _fast(p: HeadParser) -> bool:
    return p.fast  # (read afresh: the parser changes it as it goes)


def test_head_parser_goes_on_to_the_next_cycle_with_the_bytes_past_a_head(root: Path) -> None:
    # One parser per connection: asked again after a head, it starts the
    # next cycle from what followed (pipelining), fast or through h11.
    cfg = make_config(root)
    folded = b"GET /b HTTP/1.1\r\nHost: t\r\nX: 1\r\n\r\n"
    p = HeadParser(8192, b"", cfg)
    first = p.feed(BASIC + folded + b"GET /c")
    assert type(first) is FastRequest and first.target == b"/1k.bin"
    assert p.fed == len(folded) + 6  # the bytes held past the head
    second = p.next_head()
    assert type(second) is FastRequest and second.target == b"/b"
    assert p.next_head() is h11.NEED_DATA and p.fed == 6
    # An incomplete head goes to h11 for the rest of its cycle (no facts:
    # the connection builds them); the next cycle is the fast path's again.
    third = p.feed(b" HTTP/1.0\r\n\r\nGET /d HTTP/1.1\r\nHost: t\r\n\r\n")
    assert type(third) is h11.Request and third.target == b"/c"
    assert not _fast(p)
    fourth = p.next_head()
    assert type(fourth) is FastRequest and fourth.target == b"/d" and _fast(p)
    assert fourth.facts is not None and fourth.facts[0].target.relpath == "d"
    # The bytes past a request's content, handed back: a cycle from them.
    p.restart(b"HEAD /e HTTP/1.0\r\n\r\n")
    fifth = p.next_head()
    assert type(fifth) is FastRequest and fifth.facts is not None
    assert fifth.facts[0].keep_alive is False and p.trailing_data == (b"", False)


def test_a_fast_head_comes_with_its_request_facts_given_the_config(root: Path) -> None:
    cfg = make_config(root)
    head = HeadParser(8192, BASIC, cfg, tls=True).next_head()
    assert type(head) is FastRequest and head.facts is not None
    facts, ka10, ua, referer, request_id = head.facts
    assert (facts.method, facts.target.relpath, facts.tls, facts.keep_alive) == (
        b"GET",
        "1k.bin",
        True,
        True,
    )
    assert (ka10, ua, referer, request_id) == (False, "wrk", None, None)
    plain = HeadParser(8192, BASIC).next_head()
    assert type(plain) is FastRequest and plain.facts is None  # no config: no facts
    # Facts that are an error are left for the connection, which answers it.
    bad = HeadParser(8192, b"GET /%00 HTTP/1.1\r\nHost: t\r\n\r\n", cfg).next_head()
    assert type(bad) is FastRequest and bad.facts is None


def test_next_head_answers_h11_errors_and_a_whole_oversized_head() -> None:
    from serverio.errors import HTTPError

    with pytest.raises(HTTPError) as exc:
        HeadParser(8192, b"GET / HTTP/1.1\r\nHost t\r\n\r\n").next_head()
    assert exc.value.status == 400 and exc.value.close
    # A whole head past the limit in one read: h11 takes it (its limit is
    # for incomplete heads), the parser refuses it.
    big = b"GET / HTTP/1.1\r\nHost: t\r\nX-Y: " + b"a" * 300 + b"\r\n\r\n"
    with pytest.raises(HTTPError) as exc:
        HeadParser(200, big).next_head()
    assert exc.value.status == 431
    assert type(HeadParser(400, big).next_head()) is FastRequest


async def test_connection_serves_plain_gets_without_h11(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keep-alive and pipelined plain GETs never construct an h11 parser;
    a head outside the subset still gets h11's answer on the same connection."""
    made = _count_h11_servers(monkeypatch)
    async with memory_connection(make_config(root)) as (client, _, _):
        a = await client.get("/hello.txt")
        await client.send_raw(
            b"GET /data.bin HTTP/1.1\r\nHost: t\r\n\r\nHEAD /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n"
        )
        b = await client.read_response()
        c = await client.read_response(head=True)
        fast_only = len(made)
        await client.send_raw(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n folded\r\n\r\n")
        d = await client.read_response()
    assert (a.status, b.status, c.status) == (200, 200, 200)
    assert a.body == b"hello world\n" and len(b.body) == 1024 and c.body == b""
    assert fast_only == 0
    assert d.status == 400 and len(made) == 1  # h11 refused the obs-fold


# ------------------------------------------------------------ generated


@st.composite
def _near_valid(draw: st.DrawFn) -> tuple[bytes, int]:
    return diff.near_valid(random.Random(draw(st.integers(0, 2**63))))


_VCHAR = st.binary(min_size=0, max_size=12).map(lambda b: bytes(c for c in b if 0x21 <= c <= 0x7E))
_FIELD_LINE = st.tuples(
    st.sampled_from([b"Host", b"host", b"Accept", b"Connection", b"X-Y", b"If-Range"]),
    st.sampled_from([b":", b": ", b":\t", b":  \t"]),
    st.lists(_VCHAR, max_size=3).map(b" ".join),
    st.sampled_from([b"", b" ", b"\t ", b"\x01", b"\x80", b"\x00"]),
).map(lambda t: b"".join(t))


@st.composite
def _assembled(draw: st.DrawFn) -> tuple[bytes, int]:
    line = (
        draw(st.sampled_from([b"GET", b"HEAD", b"GET ", b"HEAd"]))
        + b" /"
        + draw(_VCHAR)
        + draw(st.sampled_from([b" HTTP/1.1", b" HTTP/1.0", b" HTTP/1.1\t", b"\tHTTP/1.1"]))
    )
    fields = draw(st.lists(_FIELD_LINE, max_size=6))
    eol = draw(st.sampled_from([b"\r\n"] * 6 + [b"\n"]))
    tail = draw(st.sampled_from([b"", b"GET / HTTP/1.1\r\n", b"\r\n", b"\x00"]))
    return eol.join([line, *fields]) + eol + eol + tail, draw(st.sampled_from(diff.HEAD_LIMITS))


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.one_of(_near_valid(), _assembled()), cuts=st.lists(st.integers(1, 400), max_size=3))
def test_generated_heads_defer_or_equal_h11(case: tuple[bytes, int], cuts: list[int]) -> None:
    data, limit = case
    diff.check(data, limit)
    points = sorted({c for c in cuts if c < len(data)})
    pieces = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    diff.check_split(pieces, limit)


def test_bulk_near_valid_and_fuzzer_inputs() -> None:
    """24,000 seeded cases: near-valid heads and the raw-request fuzzer's
    inputs, a quarter of them also split across reads."""
    counts = diff.run(seed=11, start=0, count=24_000)
    assert not counts.failures, "\n".join(counts.failures[:5])
    # The run must exercise both sides of the border.
    assert counts.accepted > 2_000 and counts.deferred > 10_000 and counts.split_fast > 100


# ------------------------------------------------------------ malformed tables


def _raw_requests(obj: object) -> list[bytes]:
    if isinstance(obj, bytes):
        if b"HTTP/" in obj or b"\r\n" in obj:
            return [obj]
        if obj.startswith((b"/", b"*")) or b"://" in obj:
            return [b"GET %s HTTP/1.1\r\nHost: t\r\n\r\n" % obj]  # a target table
        return []
    if isinstance(obj, str):
        # A target table (containment, hostile names): as the tests send it.
        if obj.startswith("/") or "://" in obj:
            return [b"GET %s HTTP/1.1\r\nHost: t\r\n\r\n" % obj.encode("utf-8", "surrogateescape")]
        return []
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [r for item in obj for r in _raw_requests(item)]
    if isinstance(obj, dict):
        return [r for item in obj.values() for r in _raw_requests(item)]
    values = getattr(obj, "values", None)  # pytest.param
    if isinstance(values, tuple):
        return _raw_requests(values)
    return []


_TABLE_MODULES = (
    "tests.test_engine",
    "tests.test_hostile_names",
    "tests.test_transport",
    "tests.test_bodies",
    "tests.test_reliability",
    "tests.test_containment",
    "tests.test_target",
)


def _table_inputs() -> list[bytes]:
    found: list[bytes] = []
    for name in _TABLE_MODULES:
        mod = importlib.import_module(name)
        for value in vars(mod).values():
            for mark in getattr(value, "pytestmark", []):
                if mark.name == "parametrize":
                    found.extend(_raw_requests(mark.args[1:]))
            found.extend(_raw_requests(value) if isinstance(value, (list, tuple, dict)) else [])
    return found


def test_malformed_request_tables() -> None:
    inputs = _table_inputs()
    assert len(inputs) >= 200, "the tables were not found"
    outcomes = set()
    for raw in inputs:
        for limit in diff.HEAD_LIMITS:
            outcomes.add(diff.check(raw, limit))
            diff.check_split([raw[: len(raw) // 2], raw[len(raw) // 2 :]], limit)
    assert outcomes == {"accept", "defer"}
