"""The Host check against DNS rebinding (serverio.http.hosts), end to end.

A rebound page sends ``Host: attacker.example:PORT`` with a matching
``Origin``.  With ``--upload``, ``--webdav`` or a proxy route every request
whose Host is not an expected name gets 421 before it is routed, over
HTTP/1.1 and HTTP/2 (``:authority``); loopback names, IP literals, the
bound names and ``--allowed-hosts`` pass; a plain static server keeps
answering any Host.  Configurations here name their ``allowed_hosts``
(``()``: none) so that the suite's harness (tests/conftest.py
``make_config``) adds none of its own.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import trio

from serverio.config import Config
from serverio.errors import ConfigError, HTTPError
from serverio.http.core import Plan, RequestFacts
from serverio.http.extra import HOST
from serverio.http.hosts import HostRule, host_allowed, host_name, host_rule, misdirected_plan
from serverio.http.target import parse_target
from serverio.net import activation
from serverio.ops.cli import main
from serverio.wire.fields import scan_fields

from .conftest import connect, make_config, memory_connection, running_server
from .h2client import H2Client, h2_memory
from .proxy_upstream import upstream
from .test_proxy_h2 import _closing
from .test_upload import request
from .test_upload_form import BOUNDARY, form_body

EVIL = "attacker.example:8000"
CTYPE = f"multipart/form-data; boundary={BOUNDARY}"


def writes(root: Path, **kw: object) -> Config:
    kw.setdefault("allowed_hosts", ())
    return make_config(root, upload=True, min_free_space=0, **kw)


def raw(method: str, target: str, host: str | None, body: bytes = b"", extra: str = "") -> bytes:
    hostline = f"Host: {host}\r\n" if host is not None else ""
    version = "HTTP/1.1" if host is not None else "HTTP/1.0"
    length = f"Content-Length: {len(body)}\r\n" if body or method in ("PUT", "POST") else ""
    return f"{method} {target} {version}\r\n{hostline}{length}{extra}\r\n".encode() + body


def form(host: str) -> bytes:
    body = form_body(("file", "form.txt", b"formed"))
    extra = f"Content-Type: {CTYPE}\r\nOrigin: http://{host}\r\n"
    return raw("POST", "/", host, body, extra)


# ---------------------------------------------------------------- the rule (pure)


def rule_of(*allowed: str, host: str = "127.0.0.1", machine: str = "") -> HostRule:
    cfg = Config.of(
        host=host, upload=True, allow_anonymous_writes=True, allowed_hosts=allowed
    ).validate()
    got = host_rule(cfg, machine)
    assert got is not None
    return got


@pytest.mark.parametrize(
    ("authority", "ok"),
    [
        (None, True),  # HTTP/1.0 without Host: names no host
        ("", True),  # an empty Host (RFC 9112 §3.2)
        ("localhost", True),
        ("LocalHost.:8000", True),
        ("app.localhost:5173", True),  # RFC 6761 §6.3
        ("127.0.0.1:8000", True),
        ("127.3.4.5", True),
        ("[::1]:8000", True),
        ("192.168.1.20:8000", True),  # a Network: address; any IP literal
        ("[2001:db8::7]", True),
        ("dev.example:8000", True),  # --allowed-hosts dev.example
        ("corp.example", True),  # .corp.example: the name itself ...
        ("a.b.corp.example", True),  # ... and below
        ("x.apps.example", True),  # *.apps.example: below only
        ("apps.example", False),
        ("attacker.example:8000", False),
        ("localhost.attacker.example", False),
        ("evilcorp.example", False),
        ("dev.example.attacker.example", False),
        ("127.0.0.1.attacker.example", False),
        ("0x7f.1", False),  # not an address Python reads; browsers send 127.0.0.1
    ],
)
def test_which_hosts_a_writing_server_answers(authority: str | None, ok: bool) -> None:
    rule = rule_of("dev.example", ".corp.example", "*.apps.example")
    assert host_allowed(rule, authority) is ok


def test_the_bound_names_and_the_machine_name_are_served() -> None:
    rule = rule_of(host="devbox.example", machine="Laptop")
    assert host_allowed(rule, "devbox.example:8000") and host_allowed(rule, "laptop")
    assert not host_allowed(rule, "other.example")
    listen = Config.of(
        listen=("box.lan:0", "0.0.0.0:0"),
        listen_tls=("tls.lan:0",),
        dev_tls=True,
        upload=True,
        allow_anonymous_writes=True,
        allowed_hosts=(),
    ).validate()
    got = host_rule(listen)
    assert got is not None and {"box.lan", "tls.lan"} <= got.names
    assert "0.0.0.0" not in got.names and "" not in got.names


def test_when_the_host_is_checked() -> None:
    def checked(**kw: object) -> bool:
        return host_rule(Config.of(**kw).validate()) is not None

    assert not checked()  # plain static serving: any Host, as before
    assert checked(upload=True)
    assert checked(webdav=True)
    assert checked(proxy=("/api=http://127.0.0.1:9",))
    assert checked(proxy_fallback="http://127.0.0.1:9")
    assert checked(allowed_hosts=("files.example",))  # asked for on a static server
    assert not checked(upload=True, allowed_hosts=("*",))  # '*': off


@pytest.mark.parametrize("bad", ["http://a.example", "a.example:80", "a/b", "*", "a b", "*.", ""])
def test_allowed_hosts_values_are_checked(bad: str) -> None:
    if bad == "*":
        Config.of(allowed_hosts=(bad,)).validate()
        return
    with pytest.raises(ConfigError, match="--allowed-hosts"):
        Config.of(allowed_hosts=(bad,)).validate()


def test_host_name() -> None:
    assert host_name("[::1]:80") == "::1" and host_name("A.Example.:1") == "a.example"
    assert host_name("a.example") == "a.example"


def test_flag_comma_list_variable_and_toml_key(
    monkeypatch: pytest.MonkeyPatch, root: Path, tmp_path: Path
) -> None:
    seen: list[Config] = []

    def fake_run(fn: Any, *args: Any) -> int:
        seen.append(fn.args[0])
        return 0

    monkeypatch.setattr(trio, "run", fake_run)
    monkeypatch.setattr(activation, "systemd_fds", list)
    base = ["-d", str(root), "--upload"]
    argv = [*base, "--allowed-hosts", "a.example,.b.example", "--allowed-hosts", "c"]
    conf = tmp_path / "s.toml"
    conf.write_text('allowed-hosts = ["f.example"]\n')
    runs: tuple[tuple[list[str], dict[str, str]], ...] = (
        (argv, {}),
        (base, {"SERVERIO_ALLOWED_HOSTS": "d.example, *.e.example"}),
        ([*base, "--config", str(conf)], {}),
    )
    for args, environ in runs:
        assert main(args, environ=environ) == 0
    got = [(cfg.site.allowed_hosts, cfg.site.check_hosts) for cfg in seen]
    assert got == [
        (("a.example", ".b.example", "c"), True),
        (("d.example", "*.e.example"), True),
        (("f.example",), True),
    ]


def test_an_authority_and_a_different_host_line_are_a_malformed_request() -> None:
    with pytest.raises(HTTPError) as got:
        scan_fields([(b"host", b"attacker.example")], b"localhost")
    assert got.value.status == 400
    same = scan_fields([(b"host", b"LOCALHOST")], b"localhost", keep_host=True)
    assert (
        HOST.of(RequestFacts(b"GET", parse_target(b"GET", b"/"), extra=same.extra)) == "LOCALHOST"
    )
    # keep_host: the Host reaches the facts even on a plain GET
    assert dict(scan_fields([(b"host", b"a")], keep_host=True).extra) == {"host": "a"}
    assert scan_fields([(b"host", b"a")]).extra == ()


def test_the_refusal_names_the_option() -> None:
    req = RequestFacts(method=b"GET", target=parse_target(b"GET", b"/"))
    rule = rule_of()
    fields = scan_fields([(b"host", EVIL.encode())], keep_host=True)
    plan = misdirected_plan(rule, replace(req, extra=fields.extra), 0.0)
    assert plan is not None and plan.status == 421
    assert plan.body == (
        b"421 Misdirected Request: Host 'attacker.example' is not served here; "
        b"add --allowed-hosts attacker.example\n",
    )
    assert misdirected_plan(rule, req, 0.0) is None  # no Host at all


def test_a_served_host_is_remembered_a_refused_one_never_and_the_memory_is_bounded() -> None:
    req = RequestFacts(method=b"GET", target=parse_target(b"GET", b"/"))
    rule = rule_of()

    def asked(host: str) -> Plan | None:
        return misdirected_plan(rule, replace(req, extra=(("host", host),)), 0.0)

    assert asked("127.0.0.1:8000") is None and rule.seen == {"127.0.0.1:8000"}
    assert asked("127.0.0.1:8000") is None and len(rule.seen) == 1  # one look-up
    for _ in range(2):  # refused each time, remembered never
        plan = asked(EVIL)
        assert plan is not None and plan.status == 421 and EVIL not in rule.seen
    for i in range(200):  # a client choosing served names: a bounded memory
        assert asked(f"10.0.{i // 250}.{i % 250}") is None
    assert len(rule.seen) == 64
    assert asked("10.0.0.199") is None  # served whether remembered or not
    assert rule == rule_of()  # the memory is no part of the rule


# ---------------------------------------------------------------- HTTP/1.1


async def test_h1_rebinding_host_is_421_for_every_method_under_upload(root: Path) -> None:
    (root / "keep.txt").write_bytes(b"keep")
    async with memory_connection(writes(root)) as (client, srv, _):
        for msg in (
            form(EVIL),
            raw("PUT", "/new.txt", EVIL, b"evil", f"Origin: http://{EVIL}\r\n"),
            raw("DELETE", "/keep.txt", EVIL),
            raw("GET", "/keep.txt", EVIL),
            raw("GET", "/", EVIL),
            raw("OPTIONS", "/", EVIL),
        ):
            status, hs, body = await request(client, msg)
            assert status == 421, (msg, status)
            assert b"add --allowed-hosts attacker.example" in body
            assert hs["content-type"] == "text/plain; charset=utf-8"
        assert srv.stats.writes.files == 0 and srv.stats.writes.deletes == 0
    assert (root / "keep.txt").read_bytes() == b"keep"
    assert not (root / "new.txt").exists() and not (root / "form.txt").exists()


@pytest.mark.parametrize(
    "host", ["127.0.0.1:8000", "localhost:8000", "[::1]:8000", "box.localhost", "ok.example"]
)
async def test_h1_expected_hosts_write(root: Path, host: str) -> None:
    (root / "gone.txt").write_bytes(b"x")
    async with memory_connection(writes(root, allowed_hosts=("ok.example",))) as (client, _, _):
        assert (await request(client, form(host)))[0] == 303
        assert (await request(client, raw("PUT", "/p.txt", host, b"put")))[0] == 201
        assert (await request(client, raw("DELETE", "/gone.txt", host)))[0] == 204
        status, _, body = await request(client, raw("GET", "/p.txt", host))
        assert status == 200 and body == b"put"
    assert (root / "form.txt").read_bytes() == b"formed"


async def test_h1_a_bound_name_writes(root: Path) -> None:
    # The bound name is served (bound through the in-memory transport: no
    # resolution needed for the rule, which reads the configuration).
    cfg = writes(root, host="devbox.example", allow_anonymous_writes=True)
    async with memory_connection(cfg) as (client, _, _):
        assert (await request(client, raw("PUT", "/b.txt", "devbox.example:8000", b"b")))[0] == 201
        assert (await request(client, raw("PUT", "/c.txt", EVIL, b"c")))[0] == 421


async def test_h1_http10_without_host_is_answered(root: Path) -> None:
    async with memory_connection(writes(root)) as (client, _, _):
        await client.send_raw(raw("PUT", "/ten.txt", None, b"10"))
        assert (await client.read_response()).status == 201
    async with memory_connection(writes(root)) as (client, _, _):
        await client.send_raw(raw("GET", "/ten.txt", None))
        r = await client.read_response()
        assert r.status == 200 and r.body == b"10"


async def test_h1_head_refusal_has_no_body(root: Path) -> None:
    async with memory_connection(writes(root)) as (client, _, _):
        await client.send_raw(raw("HEAD", "/", EVIL))
        r = await client.read_response(head=True)
        assert r.status == 421 and r.body == b""


async def test_h1_webdav_rebinding_is_421(root: Path) -> None:
    (root / "d").mkdir()
    (root / "d" / "f.txt").write_bytes(b"f")
    async with memory_connection(writes(root, webdav=True)) as (client, _, _):
        for method, target in (
            ("PROPFIND", "/d/"),
            ("MKCOL", "/new/"),
            ("DELETE", "/d/f.txt"),
            ("GET", "/d/f.txt"),
            ("PUT", "/d/g.txt"),
        ):
            status, _, _ = await request(client, raw(method, target, EVIL, extra="Depth: 1\r\n"))
            assert status == 421, method
        moved = f"Destination: http://{EVIL}/moved.txt\r\n"
        assert (await request(client, raw("MOVE", "/d/f.txt", EVIL, extra=moved)))[0] == 421
        assert (await request(client, raw("MKCOL", "/new/", "localhost:8000")))[0] == 201
    assert (root / "d" / "f.txt").read_bytes() == b"f" and (root / "new").is_dir()


async def test_h1_a_static_server_answers_any_host(root: Path) -> None:
    (root / "a.txt").write_bytes(b"a")
    cfg = make_config(root)
    assert not cfg.site.check_hosts
    async with memory_connection(cfg) as (client, _, _):
        status, _, body = await request(client, raw("GET", "/a.txt", EVIL))
        assert status == 200 and body == b"a"


async def test_h1_star_turns_the_check_off(root: Path) -> None:
    async with memory_connection(writes(root, allowed_hosts=("*",))) as (client, _, _):
        assert (await request(client, raw("PUT", "/s.txt", EVIL, b"s")))[0] == 201


async def test_h1_site_header_rules_apply_to_the_refusal(root: Path) -> None:
    cfg = writes(root, headers=("X-Frame-Options: DENY",))
    async with memory_connection(cfg) as (client, _, _):
        status, hs, _ = await request(client, raw("GET", "/", EVIL))
        assert status == 421 and hs["x-frame-options"] == "DENY"


# ---------------------------------------------------------------- HTTP/2


async def _h2(client: H2Client, method: str, path: str, authority: str, body: bytes = b"") -> int:
    hs = [
        (b":method", method.encode()),
        (b":path", path.encode()),
        (b":scheme", b"http"),
        (b":authority", authority.encode()),
    ]
    if method == "POST":
        hs += [(b"content-type", CTYPE.encode()), (b"origin", f"http://{authority}".encode())]
    if body or method in ("PUT", "POST"):
        hs.append((b"content-length", str(len(body)).encode()))
    sid = client.request(raw=hs, end_stream=not body)
    if body:
        client.conn.send_data(sid, body, end_stream=True)
    await client.flush()
    (r,) = await client.wait(sid)
    return r.status


async def test_h2_rebinding_authority_is_421_and_expected_ones_write(root: Path) -> None:
    (root / "keep.txt").write_bytes(b"keep")
    form_bytes = form_body(("file", "form.txt", b"formed"))
    async with h2_memory(writes(root)) as (client, srv, _):
        assert await _h2(client, "POST", "/", EVIL, form_bytes) == 421
        assert await _h2(client, "PUT", "/new.txt", EVIL, b"evil") == 421
        assert await _h2(client, "DELETE", "/keep.txt", EVIL) == 421
        assert await _h2(client, "GET", "/keep.txt", EVIL) == 421
        assert srv.stats.writes.files == 0
        for n, host in enumerate(("127.0.0.1:8000", "localhost:8000", "[::1]:8000")):
            assert await _h2(client, "PUT", f"/ok{n}.txt", host, b"ok") == 201
            assert await _h2(client, "GET", f"/ok{n}.txt", host) == 200
        assert await _h2(client, "POST", "/", "localhost:8000", form_bytes) == 303
        assert await _h2(client, "DELETE", "/keep.txt", "localhost") == 204
    assert not (root / "new.txt").exists() and (root / "form.txt").exists()


async def test_h2_a_host_field_that_differs_from_authority_is_400(root: Path) -> None:
    async with h2_memory(writes(root)) as (client, _, _):
        hs = [
            (b":method", b"GET"),
            (b":path", b"/"),
            (b":scheme", b"http"),
            (b":authority", b"localhost"),
            (b"host", EVIL.encode()),
        ]
        client.conn.config.validate_outbound_headers = False  # h2 itself refuses to send it
        sid = client.request(raw=hs)
        await client.flush()
        (r,) = await client.wait(sid)
        assert r.status == 400


# ---------------------------------------------------------------- the proxy


async def test_proxy_route_refuses_a_rebinding_host_before_the_upstream(root: Path) -> None:
    async with upstream() as up:
        route = f"/api=http://127.0.0.1:{up.port}"
        cfg = make_config(root, proxy=(route,), allowed_hosts=(), proxy_host="upstream")
        async with running_server(cfg) as (_srv, port):
            client = await connect(port)
            try:
                for method in ("GET", "POST", "PUT", "DELETE"):
                    status, _, body = await request(client, raw(method, "/api/json", EVIL, b"x"))
                    assert status == 421 and b"--allowed-hosts" in body, method
                assert up.seen == []  # nothing reached the upstream
                status, _, body = await request(
                    client, raw("GET", "/api/json", f"localhost:{port}")
                )
                assert status == 200 and json.loads(body)["method"] == "GET"
            finally:
                await client.stream.aclose()


async def test_proxy_route_over_h2(root: Path) -> None:
    async with upstream() as up:
        route = f"/api=http://127.0.0.1:{up.port}"
        cfg = make_config(root, proxy=(route,), allowed_hosts=())
        async with h2_memory(cfg) as (client, srv, _), _closing(srv):
            assert await _h2(client, "GET", "/api/json", EVIL) == 421
            assert await _h2(client, "PUT", "/api/json", EVIL, b"x") == 421
            assert up.seen == []
            assert await _h2(client, "GET", "/api/json", "127.0.0.1:8000") == 200
