"""The decision core's other plans: file and directory responses,
redirects, routing (OPTIONS, 405, hidden paths), error plans and the memo
rule; pure, table-driven, no event loop."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest

from serverio.config import Config
from serverio.errors import HTTPError
from serverio.http.core import (
    FileFacts,
    FileSpan,
    RequestFacts,
    decide_directory,
    decide_file,
    error_plan,
    http_error_plan,
    make_etag,
    route,
)
from serverio.http.target import parse_target

from .core_tables import (
    CC,
    CFG,
    CFG_CC,
    DATA,
    ETAG,
    MTIME_NS,
    NOW,
    OTHER,
    file_facts,
    header_map,
    materialise,
    request,
)

# -------------------------------------------------------------- decide_file

BASE_HEADERS = {
    b"x-content-type-options",  # the common fields (serverio.http.core.common_fields)
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
    expected_names = BASE_HEADERS | ({b"cache-control"} if cfg.files.cache_control else set())
    assert set(hs) == expected_names
    assert hs[b"date"] == b"Tue, 14 Nov 2023 22:13:20 GMT"
    assert hs[b"last-modified"] == b"Tue, 14 Nov 2023 19:26:40 GMT"  # sub-second dropped
    assert hs[b"etag"] == ETAG.encode()
    assert hs[b"accept-ranges"] == b"bytes"
    assert hs[b"content-type"] == b"text/html; charset=utf-8"
    assert hs[b"content-length"] == b"40"
    if cfg.files.cache_control:
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
    # A request body no longer makes the 405 close: the transport drains a
    # small unread body and keeps the connection, or closes (issue 26 item 4).
    with_body = RequestFacts(method, req.target, has_body=True)
    kept = route(with_body, CFG, NOW)
    assert kept is not None and kept.status == 405 and not kept.close


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
    cfg = Config.of(hidden=hidden_cfg)
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
        plan.shared = True  # type: ignore[misc]
    assert isinstance(plan.headers, tuple) and isinstance(plan.body, tuple)


def test_plan_with_body_passes_every_other_field_on() -> None:
    """Plan.with_body and Plan.with_headers (the cheap replaces of the miss
    path and of a redated memo) keep every other field: a plan whose every
    field differs from its default comes back equal to what
    dataclasses.replace makes.  A field added to Plan fails here until
    both pass it on."""
    from serverio.errors import Problem
    from serverio.http.core import FileSpan, Plan

    values = {
        "status": 206,
        "headers": ((b"x", b"y"),),
        "body": (FileSpan(3, 4),),
        "send_body": False,
        "close": True,
        "shared": True,
        "stream": True,
        "problem": Problem("d"),
    }
    assert [f.name for f in dataclasses.fields(Plan)] == list(values)
    plan = Plan(**values)  # type: ignore[arg-type]
    for f in dataclasses.fields(Plan):
        assert getattr(plan, f.name) != f.default, f.name
    assert plan.with_body((b"abcd",)) == dataclasses.replace(plan, body=(b"abcd",))
    fields = ((b"a", b"b"),)
    assert plan.with_headers(fields) == dataclasses.replace(plan, headers=fields)


def test_conditional_fields_are_one_list() -> None:
    """CONDITIONAL_FIELDS is the one list of the request fields that make a
    GET conditional or partial: depends_on_method_only tests each of them,
    without_conditions clears each of them (and nothing else)."""
    from serverio.http.core import (
        CONDITIONAL_FIELDS,
        depends_on_method_only,
        without_conditions,
    )
    from serverio.http.target import parse_target

    plain = RequestFacts(method=b"GET", target=parse_target(b"GET", b"/a.txt"), accept="x/y")
    assert depends_on_method_only(plain)
    for name in CONDITIONAL_FIELDS:
        req = dataclasses.replace(plain, **{name: "v"})  # type: ignore[arg-type]
        # If-Range alone does not matter (only with Range); every other one does.
        assert depends_on_method_only(req) is (name == "if_range"), name
        cleared = without_conditions(req)
        assert cleared == plain, name
    everything = dataclasses.replace(plain, **dict.fromkeys(CONDITIONAL_FIELDS, "v"))  # type: ignore[arg-type]
    assert without_conditions(everything) == plain
    # Exactly the dataclass fields that RFC 9110 §13.1 / §14.2 name.
    names = {f.name for f in dataclasses.fields(RequestFacts)}
    assert set(CONDITIONAL_FIELDS) <= names
    assert {n for n in names if n.startswith("if_")} | {"range"} == set(CONDITIONAL_FIELDS)
