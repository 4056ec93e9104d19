"""The reverse proxy's round-4 hardening (issue 41): an upstream answer with
both Content-Length and Transfer-Encoding, credentials serverio consumed,
X-Real-IP, the case rule of proxied paths; end to end, a real serverio in
front of tests/proxy_upstream.py on loopback port 0, HTTP/1.1 and HTTP/2
clients.  The tunnel budget's tests are in tests/test_proxy_tunnel_budget.py."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from serverio import Server
from serverio.config import proxy_route
from serverio.errors import ConfigError
from serverio.http.access import AccessTarget, Kind
from serverio.ops.cli import build_parser, config_from_args
from serverio.ops.tomlconfig import dump, parse_with_config
from serverio.site.access import rule_for
from serverio.site.passwords import hash_password
from serverio.site.rules import compile_rules
from tests.conftest import HTTPClient, connect, make_config, running_server
from tests.h2client import h2_memory
from tests.proxy_upstream import Upstream, upstream


@asynccontextmanager
async def proxied(root: Path, **kw: object) -> AsyncIterator[tuple[Upstream, Server, HTTPClient]]:
    async with upstream() as up:
        cfg = make_config(root, proxy=(f"/api=http://127.0.0.1:{up.port}",), **kw)
        async with running_server(cfg) as (srv, port):
            client = await connect(port)
            try:
                yield up, srv, client
            finally:
                await client.stream.aclose()


# ------------------------------------------ Content-Length with Transfer-Encoding


async def test_both_framings_from_the_upstream_are_a_502_and_the_connection_is_closed(
    root: Path,
) -> None:
    """RFC 9112 §6.3 item 3: such a response "ought to be handled as an
    error"; before, it was passed on with the upstream's Content-Length (5)
    and the de-chunked body (2 bytes), then cut."""
    async with proxied(root) as (up, srv, client):
        r = await client.get("/api/clte")  # a GET: the fast reader defers to h11
        assert r.status == 502 and b"ab" not in r.body
        assert r.header("content-length") == str(len(r.body))
        assert srv.stats.proxy.errors_framing == 1
        await client.send_raw(  # with content: h11 reads the answer from the start
            b"POST /api/clte HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello"
        )
        r = await client.read_response()
        assert r.status == 502 and srv.stats.proxy.errors_framing == 2
        r = await client.get("/api/json")  # the client's connection serves on
        assert r.status == 200
    # Never reused: each /clte answer's connection saw no further request.
    assert up.after_clte == 0 and up.connections == 3


async def test_both_framings_are_a_502_for_an_http2_client(root: Path) -> None:
    async with upstream() as up:
        cfg = make_config(root, proxy=(f"/api=http://127.0.0.1:{up.port}",))
        async with h2_memory(cfg) as (client, srv, _):
            try:
                r = await client.get("/api/clte")
                assert r.status == 502 and r.ended and b"ab" not in r.body
                assert r.headers["content-length"] == str(len(r.body))
                r = await client.get("/api/json")
                assert r.status == 200
            finally:
                assert srv.env.handler.proxy is not None
                srv.env.handler.proxy.close_idle()  # type: ignore[attr-defined]
    assert up.after_clte == 0 and up.connections == 2


# ------------------------------------------ credentials and X-Real-IP

PASSWORD = "correct horse"
ALICE = "Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
UPSTREAM_TOKEN = "Bearer for-the-upstream"


def _users(tmp_path: Path) -> str:
    users = tmp_path / "users"
    users.write_text(f"alice:{hash_password(PASSWORD, 1000)}\n")
    return str(users)


@asynccontextmanager
async def routed(
    root: Path, tmp_path: Path, **route_kw: object
) -> AsyncIterator[tuple[Upstream, Server, HTTPClient]]:
    """``/api`` proxied (a [[proxy]] table with ``route_kw``), ``/api/admin/**``
    behind an [[auth]] rule."""
    async with upstream() as up:
        route = proxy_route("/api", f"http://127.0.0.1:{up.port}", "test", **route_kw)
        cfg = make_config(root, proxy_routes=(route,), auth=(("/api/admin/**", _users(tmp_path)),))
        async with running_server(cfg) as (srv, port):
            client = await connect(port)
            try:
                yield up, srv, client
            finally:
                await client.stream.aclose()


async def test_credentials_serverio_checked_are_not_forwarded(root: Path, tmp_path: Path) -> None:
    async with routed(root, tmp_path) as (up, _, client):
        r = await client.get("/api/admin/json", f"Authorization: {ALICE}\r\n")
        assert r.status == 200
        assert up.seen[-1].header("authorization") is None  # consumed by serverio
        # No rule applies: the credentials are the upstream's, passed on.
        r = await client.get("/api/json", f"Authorization: {UPSTREAM_TOKEN}\r\n")
        assert r.status == 200 and up.seen[-1].header("authorization") == UPSTREAM_TOKEN


async def test_pass_authorization_forwards_what_serverio_checked(
    root: Path, tmp_path: Path
) -> None:
    async with routed(root, tmp_path, pass_authorization=True) as (up, _, client):
        r = await client.get("/api/admin/json", f"Authorization: {ALICE}\r\n")
        assert r.status == 200 and up.seen[-1].header("authorization") == ALICE


async def test_credentials_serverio_checked_are_not_forwarded_over_http2(
    root: Path, tmp_path: Path
) -> None:
    async with upstream() as up:
        cfg = make_config(
            root,
            proxy=(f"/api=http://127.0.0.1:{up.port}",),
            auth=(("/api/admin/**", _users(tmp_path)),),
        )
        async with h2_memory(cfg) as (client, srv, _):
            try:
                r = await client.get("/api/admin/json", [("authorization", ALICE)])
                assert r.status == 200
            finally:
                srv.env.handler.proxy.close_idle()  # type: ignore[union-attr]
    assert up.seen[-1].header("authorization") is None


async def test_x_real_ip_is_serverios_own(root: Path) -> None:
    async with proxied(root) as (up, _, client):
        await client.get("/api/json", "X-Real-IP: 10.6.6.6\r\nX-Real-Ip: 10.7.7.7\r\n")
        assert up.seen[-1].all("x-real-ip") == ["127.0.0.1"]  # the peer, not the client's
    async with proxied(root, trusted_proxies=("127.0.0.1/32",)) as (up, _, client):
        # Behind a trusted proxy: the client it names (as X-Forwarded-For
        # and the access log read it), never the X-Real-IP that arrived.
        await client.get("/api/json", "X-Forwarded-For: 203.0.113.9\r\nX-Real-IP: 10.6.6.6\r\n")
        assert up.seen[-1].all("x-real-ip") == ["203.0.113.9"]
        await client.get("/api/json", "X-Real-IP: 10.6.6.6\r\n")  # it named none
        assert up.seen[-1].all("x-real-ip") == ["127.0.0.1"]


def test_the_new_proxy_table_keys_load_round_trip_and_are_checked(
    root: Path, tmp_path: Path
) -> None:
    conf = tmp_path / "proxy.toml"
    conf.write_text(
        f'directory = "{root}"\n'
        "[[proxy]]\n"
        'prefix = "/api"\n'
        'upstream = "http://127.0.0.1:3000"\n'
        "pass-authorization = true\n"
        "case-insensitive = true\n"
        "[[proxy]]\n"
        'prefix = "/b"\n'
        'upstream = "http://127.0.0.1:3001"\n'
    )
    parser = build_parser()
    args = parse_with_config(parser, ["--config", str(conf)])
    cfg = config_from_args(args)
    api, b = cfg.proxy.routes
    assert api.pass_authorization and api.case_insensitive
    assert not b.pass_authorization and not b.case_insensitive
    out = tmp_path / "out.toml"
    out.write_text(dump(parser, args))
    again = config_from_args(parse_with_config(build_parser(), ["--config", str(out)]))
    assert again.proxy.routes == cfg.proxy.routes
    for key in ("pass-authorization", "case-insensitive"):
        conf.write_text(f'[[proxy]]\nprefix = "/a"\nupstream = "http://127.0.0.1:1"\n{key} = 1\n')
        with pytest.raises(ConfigError, match=f"key '{key}' must be true or false"):
            config_from_args(parse_with_config(build_parser(), ["--config", str(conf)]))


# ------------------------------------------ the case rule of proxied paths


async def test_auth_rules_are_case_sensitive_unless_the_route_folds_case(
    root: Path, tmp_path: Path
) -> None:
    """The default rule (docs/reference/proxy.md, the case rule): an
    [[auth]] glob matches the path as spelt, so an upstream that ignores case serves /api/Admin/x
    unprotected; ``case-insensitive = true`` on the route makes the rules
    match every spelling below its prefix."""
    async with routed(root, tmp_path) as (up, _, client):
        assert (await client.get("/api/admin/json")).status == 401
        assert (await client.get("/api/Admin/json")).status == 200  # the documented default
    async with routed(root, tmp_path, case_insensitive=True) as (up, _, client):
        for spelling in ("/api/admin/json", "/api/Admin/json", "/api/ADMIN/x", "/api/%41dmin/x"):
            assert (await client.get(spelling)).status == 401, spelling
        assert up.seen == []  # nothing of them went upstream
        r = await client.get("/api/ADMIN/json", f"Authorization: {ALICE}\r\n")
        assert r.status == 200 and up.seen[-1].target == "/api/ADMIN/json"
        assert (await client.get("/api/other/json")).status == 200


async def test_a_folding_route_matches_a_glob_written_in_capitals(
    root: Path, tmp_path: Path
) -> None:
    async with upstream() as up:
        route = proxy_route("/api", f"http://127.0.0.1:{up.port}", "t", case_insensitive=True)
        plain = proxy_route("/files", f"http://127.0.0.1:{up.port}", "t")
        cfg = make_config(
            root,
            proxy_routes=(route, plain),
            auth=(("/api/Admin/**", _users(tmp_path)), ("/files/Secret/**", _users(tmp_path))),
        )
        async with running_server(cfg) as (_, port):
            client = await connect(port)
            assert (await client.get("/api/admin/json")).status == 401
            assert (await client.get("/api/aDMIN/json")).status == 401
            # A route without the option keeps the rule as spelt.
            assert (await client.get("/files/Secret/json")).status == 401
            assert (await client.get("/files/secret/json")).status == 200
            await client.stream.aclose()


def test_rule_for_folds_only_below_a_case_insensitive_prefix() -> None:
    users = {"alice": hash_password(PASSWORD, 1000)}
    auth = [("/api/Admin/**", users, "x"), ("/docs/Secret.txt", users, "x")]
    rules = compile_rules(auth=auth, fold_under=("/API",))
    assert rules.fold_under == ("/api",)

    def protected(path: str) -> bool:
        return rule_for(rules, AccessTarget((path,), Kind.REQUEST)) is not None

    assert protected("/api/Admin/x") and protected("/api/admin/x") and protected("/Api/ADMIN/x")
    assert protected("/api/admin/x.gz")  # a sidecar spelling too
    assert protected("/docs/Secret.txt") and not protected("/docs/secret.txt")  # not below it
    assert not protected("/api/other") and not protected("/apix/admin/x")
    # Without case-insensitive routes, no folded globs are compiled at all.
    assert all(r.folded is None for r in compile_rules(auth=auth).auth)
