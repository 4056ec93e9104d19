"""The reverse proxy's pure parts as tables (no event loop, no socket):
route matching, the upstream target, the fields up and down, and the
configuration's one-line errors."""

from __future__ import annotations

import dataclasses

import pytest

from serverio.config import Config, parse_proxy_spec, proxy_route
from serverio.errors import ConfigError, HTTPError
from serverio.http.target import parse_target
from serverio.proxy.routes import (
    Routes,
    mount_prefixes,
    plain_route,
    plain_value,
    request_fields,
    response_fields,
    upstream_target,
)

A = proxy_route("/api", "http://127.0.0.1:3000", "t")
B = proxy_route("/api/v2", "http://[::1]:4000/base", "t", strip_prefix=True)
ROOT = proxy_route("/", "unix:/run/app.sock", "t")


@pytest.mark.parametrize(
    ("path", "want"),
    [
        (b"/api", A),
        (b"/api/", A),
        (b"/api/x/y", A),
        (b"/api/v2", B),
        (b"/api/v2/users", B),
        (b"/api/v22", A),  # segment boundaries: /api/v2 does not take /api/v22
        (b"/apix", None),
        (b"/", None),
        (b"/other", None),
    ],
)
def test_the_longest_prefix_wins_on_segment_boundaries(path: bytes, want: object) -> None:
    routes = Routes([A, B])
    assert routes.match(parse_target(b"GET", path).segments) is want


@pytest.mark.parametrize(
    ("mounts", "prefix", "path", "want"),
    [
        # The one rule: the longest prefix among routes and mounts wins,
        # a proxy route wins a tie.
        (("/api/docs",), None, b"/api/docs/a.txt", None),  # the longer mount
        (("/api/docs",), None, b"/api/docs", None),
        (("/api/docs",), None, b"/api/docsx", A),  # segment boundaries
        (("/api/docs",), None, b"/api/x", A),
        (("/api",), None, b"/api/x", A),  # a tie: the route
        (("/api/v2/files",), None, b"/api/v2/files/x", None),
        (("/api/v2/files",), None, b"/api/v2/x", B),
        (("/docs",), None, b"/x", ROOT),  # -d DIR at / ties with ROOT: the route
        (("/docs",), None, b"/docs/x", None),  # the mount is longer than ROOT's /
        ((), "/app", b"/app/x", None),  # -d DIR at the route prefix outranks /
        ((), "/app", b"/x", ROOT),
        ((), "/app", b"/api/x", A),  # proxy prefixes are absolute, not under the prefix
        (("/docs",), "/app", b"/app/docs/x", None),
    ],
)
def test_a_longer_mount_prefix_takes_the_request_from_a_route(
    mounts: tuple[str, ...], prefix: str | None, path: bytes, want: object
) -> None:
    routes = Routes([A, B, ROOT], mount_prefixes(mounts, prefix))
    assert routes.match(parse_target(b"GET", path).segments) is want


def test_mount_prefixes_is_empty_for_the_one_root() -> None:
    assert mount_prefixes((), None) == ()
    assert mount_prefixes(("/docs",), None) == ((), ("docs",))
    assert mount_prefixes(("/docs",), "/app") == (("app",), ("app", "docs"))


def test_a_root_route_takes_everything() -> None:
    routes = Routes([A, ROOT])
    assert routes.match(parse_target(b"GET", b"/x").segments) is ROOT
    assert routes.match(parse_target(b"GET", b"/api/x").segments) is A


@pytest.mark.parametrize(
    ("route", "target", "want"),
    [
        (A, b"/api/x?q=1", b"/api/x?q=1"),
        (A, b"/api/a%20b/", b"/api/a%20b/"),
        (A, b"/api/caf%C3%A9", b"/api/caf%C3%A9"),
        (A, b"/api/a,b@c", b"/api/a%2Cb%40c"),  # re-serialised from the checked segments
        (B, b"/api/v2/users?x", b"/base/users?x"),
        (B, b"/api/v2", b"/base/"),
        (ROOT, b"/", b"/"),
    ],
)
def test_the_upstream_target_is_rebuilt_from_the_segments(
    route: object, target: bytes, want: bytes
) -> None:
    assert upstream_target(route, parse_target(b"GET", target)) == want  # type: ignore[arg-type]


def test_a_backslash_is_never_sent_upstream() -> None:
    with pytest.raises(HTTPError) as err:
        upstream_target(A, parse_target(b"GET", b"/api/a%5c..%5cprivate"))
    assert err.value.status == 400


def _up(fields: list[tuple[bytes, bytes]], **kw: object) -> dict[bytes, list[bytes]]:
    args: dict[str, object] = dict(
        host=b"example.test",
        peer="192.0.2.7",
        trusted=False,
        tls=False,
        rewrite_host=False,
        length=None,
        has_content=False,
    )
    args.update(kw)
    out: dict[bytes, list[bytes]] = {}
    for n, v in request_fields(A, fields, **args):  # type: ignore[arg-type]
        out.setdefault(n, []).append(v)
    return out


def test_hop_by_hop_fields_and_what_connection_names_are_removed_upstream() -> None:
    got = _up(
        [
            (b"connection", b"keep-alive, X-Trace"),
            (b"x-trace", b"1"),
            (b"keep-alive", b"5"),
            (b"te", b"trailers"),
            (b"trailer", b"x"),
            (b"upgrade", b"websocket"),
            (b"proxy-authorization", b"Basic x"),
            (b"proxy-connection", b"close"),
            (b"transfer-encoding", b"chunked"),
            (b"content-length", b"5"),
            (b"expect", b"100-continue"),
            (b"accept", b"*/*"),
        ]
    )
    assert set(got) == {
        b"host",
        b"accept",
        b"forwarded",
        b"x-forwarded-for",
        b"x-forwarded-proto",
        b"x-forwarded-host",
        b"x-real-ip",
        b"via",
    }
    assert got[b"host"] == [b"example.test"]


def test_framing_upstream_is_the_proxys_own() -> None:
    assert _up([], length=5, has_content=True)[b"content-length"] == [b"5"]
    got = _up([(b"content-length", b"9")], length=None, has_content=True)
    assert got[b"transfer-encoding"] == [b"chunked"] and b"content-length" not in got


def test_forwarding_fields_replace_or_append() -> None:
    sent = [
        (b"x-forwarded-for", b"203.0.113.1"),
        (b"forwarded", b"for=203.0.113.1"),
        (b"via", b"1.0 edge"),
    ]
    got = _up(sent)
    assert got[b"x-forwarded-for"] == [b"192.0.2.7"]
    assert got[b"forwarded"] == [b"for=192.0.2.7;host=example.test;proto=http"]
    assert got[b"via"] == [b"1.0 edge, 1.1 serverio"]
    got = _up(sent, trusted=True, tls=True, peer="2001:db8::1", host=b"h:8443")
    assert got[b"x-forwarded-for"] == [b"203.0.113.1, 2001:db8::1"]
    assert got[b"forwarded"] == [b'for=203.0.113.1, for="[2001:db8::1]";host="h:8443";proto=https']


def test_cookies_split_by_http2_are_joined() -> None:
    assert _up([(b"cookie", b"a=1"), (b"cookie", b"b=2")])[b"cookie"] == [b"a=1; b=2"]


def test_response_fields_drop_hop_by_hop_and_keep_the_length() -> None:
    fields, length = response_fields(
        A,
        [
            (b"connection", b"close, x-hop"),
            (b"x-hop", b"1"),
            (b"transfer-encoding", b"chunked"),
            (b"keep-alive", b"timeout=5"),
            (b"content-type", b"text/plain"),
            (b"content-length", b"12"),
            (b"via", b"1.1 app"),
        ],
    )
    assert dict(fields) == {
        b"x-content-type-options": b"nosniff",
        b"content-type": b"text/plain",
        b"via": b"1.1 app, 1.1 serverio",
        b"content-length": b"12",
    }
    assert fields[0] == (b"x-content-type-options", b"nosniff")  # first, as in every plan
    assert length == 12


def test_response_fields_keep_an_upstreams_own_content_type_options() -> None:
    fields, _ = response_fields(A, [(b"x-content-type-options", b"nosniff"), (b"etag", b'"1"')])
    assert [v for n, v in fields if n == b"x-content-type-options"] == [b"nosniff"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("/api", "--proxy must be PREFIX=URL"),
        ("/api=https://x:1", "http://HOST:PORT or unix:/PATH"),
        ("/api=ftp://x", "http://HOST:PORT or unix:/PATH"),
        ("/api=http://x:99999", "invalid upstream host or port"),
        ("/api=http://u@x:1", "invalid upstream URL"),
        ("/api=http://x:1/?q", "invalid upstream URL"),
        ("/api=unix:relative", "unix:/absolute/path"),
        ("api=http://x:1", "absolute path"),
        ("/a/../b=http://x:1", "absolute path"),
        ("/a%2f=http://x:1", "absolute path"),
    ],
)
def test_a_bad_spec_is_one_line_naming_the_option(spec: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_proxy_spec(spec)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert str(err.value).startswith("--proxy")


def test_a_prefix_routed_twice_is_refused(tmp_path: object) -> None:
    with pytest.raises(ConfigError, match="routed twice"):
        Config.of(proxy=("/a=http://127.0.0.1:1", "/a/=http://127.0.0.1:2")).validate()


def test_loopback_is_known() -> None:
    assert A.loopback and ROOT.loopback and B.loopback
    assert not proxy_route("/x", "http://10.0.0.5", "t").loopback
    assert proxy_route("/x", "http://10.0.0.5", "t").authority == "10.0.0.5"
    assert B.authority == "[::1]:4000"


def test_the_fd_reserve_counts_upstream_sockets() -> None:
    from serverio.ops.fdlimit import fd_reserve

    base = fd_reserve(Config.of().validate())
    cfg = Config.of(
        proxy=("/a=http://127.0.0.1:1", "/b=http://127.0.0.1:2"),
        proxy_fallback="http://127.0.0.1:3",
        proxy_max_inflight=10,
        proxy_keepalive=4,
        proxy_max_tunnels=7,
    ).validate()
    # Per upstream its in-flight and idle sockets; the tunnels' apart.
    assert fd_reserve(cfg) == base + 3 * (10 + 4) + 7


@pytest.mark.parametrize(
    ("value", "plain"),
    [
        (b"", True),
        (b"for=127.0.0.1;proto=http", True),
        (b'"[::1]"', True),
        (b"a b\tc", True),
        (b" a", False),  # OWS is h11's to strip, never sent
        (b"a ", False),
        (b"a\r\nX-Injected: 1", False),
        (b"a\nb", False),
        (b"a\x00b", False),
        (b"caf\xe9", False),  # obs-text: h11 accepts it, this check does not
    ],
)
def test_a_plain_value_is_visible_ascii_words(value: bytes, plain: bool) -> None:
    assert plain_value(value) is plain


def test_a_route_whose_additions_are_not_plain_keeps_h11_checks() -> None:
    assert plain_route(A) and plain_route(ROOT)
    assert plain_route(proxy_route("/x", "http://127.0.0.1:1", "t", set_up=(("X-A", "b c"),)))
    bad_value = proxy_route("/x", "http://127.0.0.1:1", "t", set_up=(("X-A", "b\r\nc: d"),))
    bad_name = proxy_route("/x", "http://127.0.0.1:1", "t", set_up=(("X A", "b"),))
    wide = proxy_route("/x", "http://127.0.0.1:1", "t", set_up=(("X-A", "\u2603"),))
    assert not plain_route(bad_value) and not plain_route(bad_name) and not plain_route(wide)


def test_credentials_serverio_checked_and_x_real_ip_upstream() -> None:
    sent = [(b"authorization", b"Basic YTpi"), (b"x-real-ip", b"10.6.6.6")]
    assert _up(sent)[b"authorization"] == [b"Basic YTpi"]  # not serverio's: passed on
    got = _up(sent, authenticated=True)
    assert b"authorization" not in got  # checked by serverio: consumed
    assert got[b"x-real-ip"] == [b"192.0.2.7"]  # the peer, never the client's value
    passing = dataclasses.replace(A, pass_authorization=True)
    out = request_fields(
        passing,
        sent,
        host=b"h",
        peer="2001:db8::1",
        trusted=True,
        tls=False,
        rewrite_host=False,
        length=None,
        has_content=False,
        real_ip=b"203.0.113.9",
        authenticated=True,
    )
    assert (b"authorization", b"Basic YTpi") in out
    assert [v for n, v in out if n == b"x-real-ip"] == [b"203.0.113.9"]
    got = _up([], trusted=True, peer="2001:db8::1")  # trusted, no client named
    assert got[b"x-real-ip"] == [b"2001:db8::1"]
