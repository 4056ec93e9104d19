"""Site rules, pure: globs, header merging, CORS, redirects, rewrites, clean
URLs, error-page selection, basic-auth parsing, password hashes (no event loop)."""

from __future__ import annotations

import base64

import pytest

from serverio.errors import ConfigError
from serverio.http.core import Plan, RequestFacts, error_plan
from serverio.http.plans import apply_headers, no_content_plan
from serverio.http.target import Target, parse_target
from serverio.site.passwords import check_hash, dummy_like, hash_password, verify
from serverio.site.rules import (
    Cors,
    compile_glob,
    compile_rules,
    cors_headers,
    error_page_key,
    header_ops,
    match_path,
    merge_header_lines,
    parse_basic,
    preflight_fields,
    redirect_for,
    rewrite_for,
    slash_redirect,
)

from .conftest import extra

NOW = 1_700_000_000.0


def t(raw: str) -> Target:
    return parse_target(b"GET", raw.encode())


@pytest.mark.parametrize(
    ("glob", "path", "matches"),
    [
        ("/assets/**", "/assets/app.js", True),
        ("/assets/**", "/assets/a/b/c.css", True),
        ("/assets/**", "/assets", True),
        ("/assets/**", "/assetsx/a", False),
        ("**/*.wasm", "/a/b/x.wasm", True),
        ("**/*.wasm", "/x.wasm", True),
        ("**/*.wasm", "/x.wasm.txt", False),
        ("/*.html", "/index.html", True),
        ("/*.html", "/a/index.html", False),  # '*' stays within a segment
        ("/a?c", "/abc", True),
        ("/a?c", "/a/c", False),
        ("/", "/", True),
        ("/", "/a", False),
        ("/a.b", "/aXb", False),  # '.' is literal
        ("/dir/", "/dir/", True),
    ],
)
def test_glob_semantics(glob: str, path: str, matches: bool) -> None:
    assert (compile_glob(glob).fullmatch(path) is not None) is matches


@pytest.mark.parametrize("glob", ["", "assets/*", "/a**b", "/a//b", "/a\\b", "/a\nb"])
def test_bad_globs_are_refused(glob: str) -> None:
    with pytest.raises(ValueError):
        compile_glob(glob)


def test_match_path_is_the_decoded_normalised_path() -> None:
    assert match_path(t("/a//b/%63.txt")) == "/a/b/c.txt"
    assert match_path(t("/dir/")) == "/dir/"
    assert match_path(t("/")) == "/"


def _plan(*headers: tuple[bytes, bytes], status: int = 200) -> Plan:
    return Plan(status, headers, (b"x",))


def test_header_rules_order_precedence_and_vary_union() -> None:
    rules = compile_rules(
        headers=["X-Global: 1", "Cache-Control: no-cache"],
        header_rules=[
            ("/assets/**", (("Cache-Control", "public, max-age=31536000, immutable"),), ()),
            ("**/*.js", (("Vary", "Origin, accept-encoding"), ("X-Js", "yes")), ()),
            ("/assets/private/**", (), ("X-Js", "X-Global")),
        ],
    )
    ops = header_ops(rules, "/assets/app.js")
    plan = apply_headers(
        _plan((b"cache-control", b"max-age=60"), (b"vary", b"Accept-Encoding")), ops
    )
    hs = list(plan.headers)
    # A Cache-Control rule replaces the server's (--cache-control); the later rule wins.
    assert [v for n, v in hs if n == b"cache-control"] == [b"public, max-age=31536000, immutable"]
    # Vary: union, no duplicates (case-insensitive), server's tokens first.
    assert [v for n, v in hs if n == b"vary"] == [b"Accept-Encoding, Origin"]
    assert (b"x-global", b"1") in hs and (b"x-js", b"yes") in hs
    # A later remove takes away what earlier rules set.
    ops = header_ops(rules, "/assets/private/a.js")
    hs = list(apply_headers(_plan(), ops).headers)
    assert not any(n in (b"x-js", b"x-global") for n, _ in hs)
    # No rule matches: no change.
    assert header_ops(compile_rules(header_rules=[("/x", (("A", "b"),), ())]), "/y").empty


def test_an_empty_header_line_removes_that_name_from_the_merged_list() -> None:
    lines = ["X-A: 1", "x-b: 2", "X-A: 3", "X-C: ok", "X-B:", "x-a:  ", "X-A: 4"]
    # Earlier lines of the name go (any case), later ones stay; the removal is dropped.
    assert merge_header_lines(lines) == ("X-C: ok", "X-A: 4")
    # A line without ':' is kept for compile_rules to refuse by name.
    assert merge_header_lines(["X-A: 1", "nocolon"]) == ("X-A: 1", "nocolon")
    rules = compile_rules(headers=["X-A: 1", "X-B: 2", "X-A:"])
    hs = list(apply_headers(_plan(), header_ops(rules, "/")).headers)
    assert (b"x-b", b"2") in hs and not any(n == b"x-a" for n, _ in hs)


def test_a_rule_csp_is_sent_beside_the_server_csp_never_instead() -> None:
    # Browsers enforce every Content-Security-Policy field (CSP3 §8.1): the
    # server's own (a listing's) must stay, the rule's goes beside it.
    own = (b"content-security-policy", b"default-src 'none'")
    rules = compile_rules(
        header_rules=[
            ("/**", (("Content-Security-Policy", "default-src 'self'"),), ()),
            ("/raw/**", (), ("Content-Security-Policy",)),
        ]
    )
    hs = apply_headers(_plan(own), header_ops(rules, "/d/")).headers
    assert [v for n, v in hs if n == b"content-security-policy"] == [
        b"default-src 'none'",
        b"default-src 'self'",
    ]
    # A remove takes away what rules set, never the server's own policy.
    hs = apply_headers(_plan(own), header_ops(rules, "/raw/d/")).headers
    assert [v for n, v in hs if n == b"content-security-policy"] == [b"default-src 'none'"]


def test_304_keeps_cache_metadata_but_not_content_fields() -> None:
    rules = compile_rules(
        header_rules=[
            ("/**", (("Cache-Control", "max-age=5"), ("Expires", "0"), ("Content-Type", "a/b")), ())
        ]
    )
    plan = apply_headers(_plan(status=304), header_ops(rules, "/f"))
    names = [n for n, _ in plan.headers]
    assert b"cache-control" in names and b"expires" in names
    assert b"content-type" not in names


def test_protected_responses_are_private_unless_a_rule_says_otherwise() -> None:
    rules = compile_rules(header_rules=[("/pub/**", (("Cache-Control", "public"),), ())])
    assert (b"cache-control", b"private") in header_ops(rules, "/x", protected=True).set
    assert (b"cache-control", b"public") in header_ops(rules, "/pub/x", protected=True).set
    assert header_ops(rules, "/x").empty


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"headers": ["Content-Length: 5"]}, "set by the server"),
        ({"headers": ["Transfer-Encoding: chunked"]}, "set by the server"),
        ({"headers": ["Date: x"]}, "set by the server"),
        ({"headers": ["Bad Name: x"]}, "not a valid header name"),
        ({"headers": ["X-A: a\rb"]}, "no CR, LF or NUL"),
        ({"headers": ["no colon"]}, "must be 'Name: value'"),
        ({"header_rules": [("assets/*", (("A", "b"),), ())]}, "[[headers]] #1 key 'path'"),
        ({"header_rules": [("/a", (), ("Connection",))]}, "cannot be removed"),
        ({"header_rules": [("/**", (), ("vary",))]}, "'vary' cannot be removed (it names"),
        ({"redirects": [("/a", "/a", 301)]}, "redirects '/a' to itself"),
        ({"redirects": [("/a", "/b", 200)]}, "key 'status'"),
        ({"redirects": [("/a", "//evil.com", 301)]}, "key 'to'"),
        ({"redirects": [("a", "/b", 301)]}, "key 'from'"),
        ({"rewrites": [("/a", "//b")]}, "key 'to'"),
        ({"error_pages": [("200", "x.html")]}, "[errors] key '200'"),
        ({"trailing_slash": "sometimes"}, "--trailing-slash"),
        ({"cors": True, "cors_origins": ["http://a"]}, "exclude each other"),
        ({"cors_origins": ["*"]}, "--cors-origin"),
    ],
)
def test_bad_rules_are_one_line_errors_naming_the_key(kw: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        compile_rules(source="site.toml", **kw)  # type: ignore[arg-type]
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_cors_any_origin_and_listed_origins() -> None:
    star = Cors(any_origin=True)
    hs = dict(cors_headers(star, "http://a"))
    assert hs[b"access-control-allow-origin"] == b"*"
    assert b"ETag" in hs[b"access-control-expose-headers"]
    assert b"access-control-allow-credentials" not in hs  # never with '*'
    listed = Cors(False, frozenset({"http://a"}), credentials=True)
    hs = dict(cors_headers(listed, "http://a"))
    assert hs[b"access-control-allow-origin"] == b"http://a"
    assert hs[b"access-control-allow-credentials"] == b"true"
    assert cors_headers(listed, "http://evil") == ()
    assert cors_headers(listed, None) == ()


def _preflight(origin: str, headers: str | None = None) -> RequestFacts:
    fields = extra(origin=origin, cors_method="GET", cors_headers=headers)
    return RequestFacts(b"OPTIONS", t("/x"), extra=fields)


def test_preflight_answer() -> None:
    fields = preflight_fields(Cors(True), _preflight("http://a", "X-Requested-With, range"))
    assert fields is not None
    plan = no_content_plan(NOW, fields)
    assert plan.status == 204 and not plan.send_body and plan.body == ()
    hs = dict(plan.headers)
    assert hs[b"access-control-allow-methods"] == b"GET, HEAD, OPTIONS"
    assert hs[b"access-control-allow-headers"] == b"X-Requested-With, range"
    assert b"access-control-max-age" in hs and b"content-length" not in hs
    assert b"content-type" not in hs and hs[b"x-content-type-options"] == b"nosniff"
    # Too many or malformed names are not echoed.
    many = ", ".join(f"x-{i}" for i in range(100))
    fields = preflight_fields(Cors(True), _preflight("http://a", many))
    assert fields is not None and b"access-control-allow-headers" not in dict(fields)
    # An origin not on the list: a plain 204, which the browser refuses.
    fields = preflight_fields(Cors(False, frozenset({"http://a"})), _preflight("http://b"))
    assert fields is not None and b"access-control-allow-origin" not in dict(fields)
    # Not a preflight: no answer here.
    assert preflight_fields(Cors(True), RequestFacts(b"OPTIONS", t("/x"))) is None


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("/old/a/b", (301, b"/new/a/b")),
        ("/old/a?x=1", (301, b"/new/a?x=1")),
        ("/old", (301, b"/new/")),
        ("/old//evil.com", (301, b"/new/evil.com")),
        ("/old/%0d%0aX:1", (301, b"/new/%0D%0AX%3A1")),
        ("/old/%5Cevil", (301, b"/new/%5Cevil")),
        ("/exact", (308, b"/there?keep=no")),
        ("/exact?q=1", (308, b"/there?keep=no")),  # 'to' sets a query: it wins
        ("/other", None),
    ],
)
def test_redirects(raw: str, expected: tuple[int, bytes] | None) -> None:
    rules = compile_rules(
        redirects=[("/old/*", "/new/:splat", 301), ("/exact", "/there?keep=no", 308)]
    )
    assert redirect_for(rules, t(raw)) == expected


@pytest.mark.parametrize("raw", ["/go//evil.com", "/go/%2F%2Fevil.com", "/go/%5Cevil"])
def test_a_splat_can_never_make_a_scheme_relative_location(raw: str) -> None:
    rules = compile_rules(redirects=[("/go/*", "/:splat", 302)])
    try:
        found = redirect_for(rules, t(raw))
    except Exception:  # an encoded slash is a 404 at parse time
        return
    assert found is None or (found[1].startswith(b"/") and not found[1].startswith((b"//", b"/\\")))


def test_rewrites_are_contained_and_keep_hidden_flag() -> None:
    rules = compile_rules(
        rewrites=[("/app/*", "/index.html"), ("/raw/*", "/files/:splat"), ("/dot", "/.env")]
    )
    assert rewrite_for(rules, t("/app/x/y")) == Target(("index.html",), False, None)
    got = rewrite_for(rules, t("/raw/a/b.txt?v=1"))
    assert got == Target(("files", "a", "b.txt"), False, "v=1")
    dot = rewrite_for(rules, t("/dot"))
    assert dot is not None and dot.hidden
    assert rewrite_for(rules, t("/none")) is None


@pytest.mark.parametrize(
    ("clean", "slash", "raw", "loc"),
    [
        (True, "keep", "/about.html", b"/about"),
        (True, "keep", "/d/index.html", b"/d/"),
        (True, "keep", "/about", None),
        (True, "add", "/about.html", b"/about/"),
        (False, "add", "/about", b"/about/"),
        (False, "add", "/app.js", None),
        (False, "remove", "/about/", b"/about"),
        (False, "remove", "/about/?q", b"/about?q"),
        (False, "keep", "/about/", None),
    ],
)
def test_clean_urls_and_trailing_slash(
    clean: bool, slash: str, raw: str, loc: bytes | None
) -> None:
    rules = compile_rules(clean_urls=clean, trailing_slash=slash)
    assert slash_redirect(rules, t(raw)) == loc


def test_error_page_selection() -> None:
    rules = compile_rules(error_pages=[("404", "404.html"), ("5xx", "50x.html"), ("4xx", "4.html")])
    assert error_page_key(rules, 404) == "404"
    assert error_page_key(rules, 403) == "4xx"
    assert error_page_key(rules, 503) == "5xx"
    assert error_page_key(rules, 304) is None
    assert error_page_key(compile_rules(), 404) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Basic " + base64.b64encode(b"bob:s3cr:et").decode(), ("bob", "s3cr:et")),
        (
            "basic " + base64.b64encode("jos\u00e9:p\u00e4ss".encode()).decode(),
            ("jos\u00e9", "p\u00e4ss"),
        ),
        ("Basic " + base64.b64encode(b"nocolon").decode(), None),
        ("Basic !!!", None),
        ("Bearer abc", None),
        (None, None),
        ("Basic " + base64.b64encode(b"\xff:x").decode(), None),
    ],
)
def test_parse_basic(value: str | None, expected: tuple[str, str] | None) -> None:
    assert parse_basic(value) == expected


def test_pbkdf2_hashes_round_trip_and_dummy_has_same_cost() -> None:
    h = hash_password("correct horse", 1000)
    assert check_hash(h) is None
    assert verify(h, "correct horse") and not verify(h, "wrong")
    d = dummy_like(h)
    assert d.split("$")[2] == "1000" and d != h and not verify(d, "correct horse")


@pytest.mark.parametrize(
    ("h", "needle"),
    [
        ("$apr1$abc$def", "$apr1$"),
        ("{SHA}abc", "unknown hash scheme"),
        ("$pbkdf2-sha256$10$AAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAA", "malformed"),
        ("$pbkdf2-sha256$1000$***$AAAA", "malformed"),
        ("$2y$05$short", "malformed bcrypt"),
    ],
)
def test_refused_hashes(h: str, needle: str) -> None:
    problem = check_hash(h)
    assert problem is not None and needle in problem


def test_error_plan_unchanged_when_no_rule_applies() -> None:
    plan = error_plan(404, NOW)
    assert header_ops(compile_rules(), "/x").empty
    assert apply_headers(plan, header_ops(compile_rules(), "/x")).headers == plan.headers


def test_bcrypt_hashes_and_the_72_byte_limit() -> None:
    bcrypt = pytest.importorskip("bcrypt")
    h = bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=4)).decode()
    for variant in (h, "$2y$" + h[4:]):
        assert check_hash(variant) is None
        assert verify(variant, "pw") and not verify(variant, "nope")
    # Over bcrypt's 72-byte limit: a wrong password, never an exception
    # (and never "equal to its first 72 bytes").
    long = "a" * 80
    hl = bcrypt.hashpw(long[:72].encode(), bcrypt.gensalt(rounds=4)).decode()
    assert verify(hl, long[:72]) and not verify(hl, long)
    d = dummy_like(h)
    assert d.startswith("$2b$04$") and not verify(d, "pw")


def test_hsts_is_added_on_tls_only_and_a_rule_may_replace_it() -> None:
    rules = compile_rules(hsts=600)
    assert not rules.empty  # the engine runs for --hsts alone
    sts = b"strict-transport-security"
    on_tls = apply_headers(_plan(), header_ops(rules, "/a", tls=True)).headers
    assert (sts, b"max-age=600") in on_tls
    assert header_ops(rules, "/a", tls=False).empty  # RFC 6797 §7.2: never over plain HTTP
    sub = compile_rules(hsts=0, hsts_subdomains=True)
    assert (sts, b"max-age=0; includeSubDomains") in header_ops(sub, "/", tls=True).set
    ruled = compile_rules(
        hsts=600, header_rules=[("/x/**", (("Strict-Transport-Security", "max-age=5"),), ())]
    )
    assert [v for n, v in header_ops(ruled, "/x/y", tls=True).set if n == sts] == [b"max-age=5"]
