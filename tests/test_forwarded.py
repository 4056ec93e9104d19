"""--trusted-proxies: the client address from Forwarded / X-Forwarded-For
(RFC 7239), as a parsing table and end to end (access log, auth limiter,
both protocols)."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pytest
import trio
import trio.testing

from serverio import AccessLog, Server
from serverio.config import parse_networks
from serverio.errors import ConfigError
from serverio.http.forwarded import MAX_HOPS, client_address, normalize_address
from serverio.net.connection import ConnectionTask
from serverio.ops.cli import build_parser, config_from_args
from serverio.ops.tomlconfig import parse_with_config
from serverio.site import service as site_mod
from serverio.site.passwords import hash_password

from .conftest import HTTPClient, make_config
from .h2client import h2_memory

TRUSTED = parse_networks(["10.0.0.0/8", "2001:db8:ffff::/48"])
PROXY = "10.0.0.9"


@pytest.mark.parametrize(
    ("peer", "forwarded", "xff", "client"),
    [
        # Nobody trusted or not from a trusted peer: the fields are ignored.
        ("192.0.2.7", "for=198.51.100.1", None, "192.0.2.7"),
        ("192.0.2.7", None, "198.51.100.1", "192.0.2.7"),
        (PROXY, None, None, PROXY),
        # RFC 7239 §4 examples and the de-facto list.
        (PROXY, "for=192.0.2.60;proto=http;by=203.0.113.43", None, "192.0.2.60"),
        (PROXY, 'for="[2001:db8:cafe::17]:4711"', None, "2001:db8:cafe::17"),
        (PROXY, "for=192.0.2.43, for=198.51.100.17", None, "198.51.100.17"),
        (PROXY, 'For="192.0.2.43:8080"', None, "192.0.2.43"),
        (PROXY, "for=192.0.2.43:8080", None, PROXY),  # ":" is not a token char (§4)
        (PROXY, None, "198.51.100.17", "198.51.100.17"),
        (PROXY, None, " 203.0.113.5 , 198.51.100.17:443", "198.51.100.17"),
        (PROXY, None, "2001:DB8::0:1", "2001:db8::1"),
        (PROXY, None, "[2001:db8::1]:443", "2001:db8::1"),
        # Rightmost untrusted hop: trusted hops are skipped, the client's
        # own (forged) entries to its left are never read.
        (PROXY, "for=6.6.6.6, for=198.51.100.17, for=10.1.2.3", None, "198.51.100.17"),
        (PROXY, None, "6.6.6.6, 198.51.100.17, 10.1.2.3, 10.0.0.1", "198.51.100.17"),
        (PROXY, 'for="[2001:db8:ffff::5]", for=10.3.3.3', None, "2001:db8:ffff::5"),
        # IPv4-mapped IPv6 is the IPv4 address (as peer and as hop).
        ("::ffff:10.0.0.9", "for=198.51.100.17", None, "198.51.100.17"),
        (PROXY, 'for="[::ffff:198.51.100.17]"', None, "198.51.100.17"),
        # Obfuscated identifiers (§6.3) are the client; "unknown" is not.
        (PROXY, "for=_hidden", None, "_hidden"),
        (PROXY, 'for="_SEVKISEK"', None, "_SEVKISEK"),
        (PROXY, "for=unknown", None, PROXY),
        (PROXY, "for=198.51.100.17, for=unknown", None, PROXY),
        (PROXY, "for=unknown, for=10.1.1.1", None, "10.1.1.1"),
        # Hostile or malformed: the walk stops at the trusted hop that
        # reported it, never at an address the client chose.
        (PROXY, "for=2001:db8::1", None, PROXY),  # unquoted IPv6 is invalid (§6)
        (PROXY, 'for="[2001:db8::1%eth0]"', None, PROXY),
        (PROXY, 'for="[2001:db8::1]:99999x"', None, PROXY),
        (PROXY, 'for="1.2.3.4', None, PROXY),  # unterminated quoted-string
        (PROXY, "for=1.2.3.4;for=5.6.7.8", None, PROXY),  # a parameter twice
        (PROXY, "for=1.2.3.4 x", None, PROXY),
        (PROXY, "proto=https", None, PROXY),  # no for=
        (PROXY, "", None, PROXY),
        (PROXY, "for=999.1.1.1", None, PROXY),
        (PROXY, "for=1.2.3.4:\u00b2", None, PROXY),  # a latin-1 "digit"
        (PROXY, None, "not-an-address", PROXY),
        (PROXY, None, "198.51.100.17, garbage", PROXY),
        (PROXY, None, "garbage, 198.51.100.17", "198.51.100.17"),
        (PROXY, 'for="a,b", for=198.51.100.17', None, "198.51.100.17"),
        # Both fields: they must agree, else one is forged: the peer.
        (PROXY, "for=198.51.100.17", "198.51.100.17", "198.51.100.17"),
        (PROXY, "for=1.2.3.4", "198.51.100.17", PROXY),
        # Not an IP peer (a Unix socket, a memory stream): unchanged.
        ("memory", "for=1.2.3.4", None, "memory"),
    ],
)
def test_client_address_table(
    peer: str, forwarded: str | None, xff: str | None, client: str
) -> None:
    assert client_address(peer, forwarded, xff, TRUSTED) == client


def test_no_trusted_proxies_reads_nothing() -> None:
    assert client_address(PROXY, "for=1.2.3.4", "1.2.3.4", ()) == PROXY


def test_too_many_hops_bounds_the_walk() -> None:
    """All hops trusted: the walk reads MAX_HOPS of them and stops there
    (the leftmost read), whatever the field's length; a client entry past
    that bound is never reached."""
    hops = [f"10.0.{i // 256}.{i % 256}" for i in range(10_000)]
    xff = ", ".join(["6.6.6.6", *hops])
    got = client_address(PROXY, None, xff, TRUSTED)
    assert got == hops[-MAX_HOPS]
    fwd = ", ".join(f"for={h}" for h in ["6.6.6.6", *hops])
    assert client_address(PROXY, fwd, None, TRUSTED) == hops[-MAX_HOPS]
    # Within the bound, the client is found.
    short = ", ".join(["198.51.100.17", *hops[: MAX_HOPS - 1]])
    assert client_address(PROXY, None, short, TRUSTED) == "198.51.100.17"


@pytest.mark.parametrize(
    ("forwarded", "xff"),
    [
        ('for="' + "a" * 60_000 + '"', None),
        ("for=" + "1" * 60_000, None),
        ('for="' + "\\a" * 30_000, None),  # unterminated, many quoted-pairs
        (";" * 60_000, None),
        (None, "1" * 60_000),
        (None, ":" * 60_000),
        (None, "_" + "a" * 60_000),
    ],
)
def test_huge_hostile_values_fall_back_to_the_proxy(forwarded: str | None, xff: str | None) -> None:
    assert client_address(PROXY, forwarded, xff, TRUSTED) == PROXY


def test_normalize_address() -> None:
    assert normalize_address("::ffff:127.0.0.1") == "127.0.0.1"
    assert normalize_address("2001:DB8::1") == "2001:db8::1"
    assert normalize_address("-") == "-"


# ------------------------------------------------------------ configuration


def test_cli_and_toml_take_trusted_proxies(tmp_path: Path) -> None:
    parser = build_parser()
    args = parser.parse_args(["-d", str(tmp_path), "--trusted-proxies", "10.0.0.1/8", "::1"])
    cfg = config_from_args(args)
    assert cfg.site.trusted_proxies == ("10.0.0.0/8", "::1/128")
    assert [str(n) for n in cfg.site.proxy_networks] == ["10.0.0.0/8", "::1/128"]
    toml = tmp_path / "s.toml"
    toml.write_text('trusted-proxies = ["192.168.0.0/16"]\n')
    cfg = config_from_args(parse_with_config(parser, ["-d", str(tmp_path), "--config", str(toml)]))
    assert cfg.site.trusted_proxies == ("192.168.0.0/16",)
    assert config_from_args(parser.parse_args(["-d", str(tmp_path)])).site.proxy_networks == ()


def test_bad_trusted_proxies_are_one_line_errors(tmp_path: Path) -> None:
    toml = tmp_path / "s.toml"
    toml.write_text('trusted-proxies = ["10.0.0.0/33"]\n')
    with pytest.raises(ConfigError) as info:
        parse_with_config(build_parser(), ["--config", str(toml)])
    assert "key 'trusted-proxies'" in str(info.value) and "10.0.0.0/33" in str(info.value)
    with pytest.raises(ConfigError) as info:
        make_config(tmp_path, trusted_proxies=("nope",))
    assert str(info.value).startswith("--trusted-proxies: 'nope'")


def test_bad_trusted_proxies_on_the_command_line_exit_2(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["--trusted-proxies", "10.0.0.0/8", "bogus"])
    assert info.value.code == 2


# ------------------------------------------------------------ end to end


def _basic(user: str, password: str) -> bytes:
    token = base64.b64encode(f"{user}:{password}".encode())
    return b"Authorization: Basic " + token + b"\r\n"


async def test_access_log_and_limiter_use_the_forwarded_client(root: Path, tmp_path: Path) -> None:
    """Behind a trusted proxy, the access log shows the client the proxy
    names and the auth limiter counts per that client: ten failures of one
    client for alice do not refuse another client's login as alice through
    the same proxy (keyed by the peer, it would be 429)."""
    users = tmp_path / "users"
    users.write_text(f"alice:{hash_password('pw', 1000)}\n")
    cfg = make_config(root, auth_file=str(users), trusted_proxies=("10.0.0.0/8",))
    out = io.StringIO()
    srv = Server(cfg, access_log=AccessLog("json", out))
    try:
        with trio.fail_after(20):
            async with srv.handler.running(), trio.open_nursery() as nursery:
                ours, theirs = trio.testing.memory_stream_pair()
                nursery.start_soon(ConnectionTask(srv.env, theirs, PROXY).run)
                client = HTTPClient(ours, theirs)
                attacker = "X-Forwarded-For: 6.6.6.6, 198.51.100.1\r\n"
                for _ in range(site_mod.FAILURE_BUDGET):
                    r = await client.get("/hello.txt", attacker + _basic("alice", "x").decode())
                    assert r.status == 401
                r = await client.get("/hello.txt", attacker + _basic("alice", "pw").decode())
                assert r.status == 429
                friend = "Forwarded: for=198.51.100.2;proto=https\r\n"
                r = await client.get("/hello.txt", friend + _basic("alice", "pw").decode())
                assert r.status == 200
                nursery.cancel_scope.cancel()
    finally:
        srv.opener.close()
    clients = [json.loads(line)["client"] for line in out.getvalue().splitlines()]
    assert clients == ["198.51.100.1"] * (site_mod.FAILURE_BUDGET + 1) + ["198.51.100.2"]


async def test_untrusted_peer_cannot_pick_its_address(root: Path) -> None:
    out = io.StringIO()
    cfg = make_config(root, trusted_proxies=("10.0.0.0/8",))
    srv = Server(cfg, access_log=AccessLog("json", out))
    try:
        async with srv.handler.running(), trio.open_nursery() as nursery:
            ours, theirs = trio.testing.memory_stream_pair()
            nursery.start_soon(ConnectionTask(srv.env, theirs, "192.0.2.7").run)
            client = HTTPClient(ours, theirs)
            r = await client.get("/hello.txt", "X-Forwarded-For: 1.2.3.4\r\n")
            assert r.status == 200
            nursery.cancel_scope.cancel()
    finally:
        srv.opener.close()
    assert json.loads(out.getvalue())["client"] == "192.0.2.7"


async def test_http2_access_log_uses_the_forwarded_client(root: Path) -> None:
    out = io.StringIO()
    cfg = make_config(root, trusted_proxies=("10.0.0.0/8",))
    srv = Server(cfg, access_log=AccessLog("json", out))
    async with h2_memory(cfg, server=srv) as (client, _, conn):
        conn._client = PROXY  # the peer the connection reports (lazily read)
        r = await client.get("/hello.txt", [("forwarded", 'for="[2001:db8::7]:1"')])
        assert r.status == 200
    srv.opener.close()
    assert json.loads(out.getvalue())["client"] == "2001:db8::7"
