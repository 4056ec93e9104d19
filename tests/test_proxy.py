"""The reverse proxy end to end: a real serverio in front of a real upstream
(tests/proxy_upstream.py), both on loopback port 0, HTTP/1.1 clients."""

from __future__ import annotations

import base64
import json
import os
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import h11
import pytest
import trio

from serverio import Server
from serverio.config import proxy_route
from serverio.errors import ConfigError
from serverio.site.passwords import hash_password
from tests.conftest import HTTPClient, connect, make_config, reset, running_server
from tests.proxy_upstream import Upstream, unix_upstream, upstream

PASSWORD = "correct horse"


@asynccontextmanager
async def proxied(root: Path, **kw: object) -> AsyncIterator[tuple[Upstream, Server, HTTPClient]]:
    async with upstream() as up:
        proxy = kw.pop("proxy", ("/api=http://127.0.0.1:{port}",))
        assert isinstance(proxy, tuple)
        cfg = make_config(root, proxy=tuple(p.format(port=up.port) for p in proxy), **kw)
        async with running_server(cfg) as (srv, port):
            client = await connect(port)
            try:
                yield up, srv, client
            finally:
                await client.stream.aclose()


async def test_get_json_is_forwarded_with_the_proxy_fields(root: Path) -> None:
    async with proxied(root) as (up, srv, client):
        r = await client.get(
            "/api/json?x=1",
            "Connection: x-secret\r\nX-Secret: s\r\nTE: trailers\r\n"
            "Proxy-Authorization: Basic eA==\r\nKeep-Alive: 5\r\n",
        )
        assert r.status == 200, r
        assert json.loads(r.body)["target"] == "/api/json?x=1"
        seen = up.seen[0]
        assert seen.header("host") == "t"
        assert seen.header("via") == "1.1 serverio"
        assert seen.header("x-forwarded-for") == "127.0.0.1"
        assert seen.header("x-forwarded-proto") == "http"
        assert seen.header("x-forwarded-host") == "t"
        assert seen.header("forwarded") == "for=127.0.0.1;host=t;proto=http"
        # Hop-by-hop fields (RFC 9110 §7.6.1) go no further, either way.
        for name in ("x-secret", "te", "connection", "proxy-authorization", "keep-alive"):
            assert seen.header(name) is None, name
        assert r.header("x-private") is None and r.header("keep-alive") is None
        assert r.header("x-content-type-options") == "nosniff"  # every response carries it
        assert r.header("connection") is None
        assert r.header("via") == "1.1 serverio"
        assert r.header("server") == "upstream"
        assert r.header("content-length") == str(len(r.body))
        assert srv.stats.proxy.requests == 1 and srv.stats.proxy.connects == 1


async def test_prefixes_match_on_segment_boundaries_and_the_longest_wins(root: Path) -> None:
    async with upstream() as other:
        routes = ("/api=http://127.0.0.1:{port}", f"/api/v2=http://127.0.0.1:{other.port}")
        async with proxied(root, proxy=routes) as (up, _, client):
            assert (await client.get("/api/json")).status == 200
            assert (await client.get("/api/v2/json")).status == 200
            assert (await client.get("/api")).status == 404  # the upstream's 404
            assert (await client.get("/apix/json")).status == 404  # a file path: none
            assert (await client.get("/hello.txt")).body == b"hello world\n"  # files still
            assert [s.target for s in up.seen] == ["/api/json", "/api"]
            assert [s.target for s in other.seen] == ["/api/v2/json"]


async def test_a_table_route_strips_its_prefix_and_edits_fields(root: Path) -> None:
    async with upstream() as up:
        route = proxy_route(
            "/svc",
            f"http://127.0.0.1:{up.port}/base",
            "test",
            strip_prefix=True,
            set_up=(("X-Key", "k"),),
            remove_up=("Cookie",),
            set_down=(("Cache-Control", "no-store"),),
            remove_down=("Server",),
        )
        cfg = make_config(root, proxy_routes=(route,), proxy_host="upstream")
        async with running_server(cfg) as (_, port):
            client = await connect(port)
            r = await client.get("/svc/json?q=a%20b", "Cookie: c=1\r\n")
            await client.stream.aclose()
        seen = up.seen[0]
        assert seen.target == "/base/json?q=a%20b"
        assert seen.header("x-key") == "k" and seen.header("cookie") is None
        assert seen.header("host") == f"127.0.0.1:{up.port}"
        assert r.header("cache-control") == "no-store" and r.header("server") is None


async def test_a_configured_field_with_a_line_break_is_refused_by_h11(root: Path) -> None:
    # Such a route is not plain (routes.plain_route): h11 checks every
    # field of its requests, and the injection never reaches the upstream.
    async with upstream() as up:
        route = proxy_route(
            "/svc", f"http://127.0.0.1:{up.port}", "test", set_up=(("X-Key", "k\r\nX-Evil: 1"),)
        )
        cfg = make_config(root, proxy_routes=(route,))
        async with running_server(cfg) as (_, port):
            client = await connect(port)
            first = await client.get("/svc/json")
            second = await client.get("/svc/json")  # the keep-alive client connection
            await client.stream.aclose()
        assert first.status == 502 and second.status == 502
        assert up.seen == []


async def test_an_unframed_upstream_body_is_streamed_chunked(root: Path) -> None:
    async with proxied(root) as (up, srv, client):
        r = await client.get("/api/stream?n=20&size=5000")
        assert r.status == 200
        assert r.header("transfer-encoding") == "chunked"
        assert r.header("content-length") is None
        assert len(r.body) == 100_000 and r.body[:5000] == b"A" * 5000
        r = await client.get("/api/length?size=70000")
        assert r.header("content-length") == "70000" and r.body == b"x" * 70000
        assert srv.stats.proxy.bytes_down == 170_000
        assert up.connections == 1 and srv.stats.proxy.reuses == 1  # one kept-alive connection


async def test_http10_client_gets_a_close_delimited_body(root: Path) -> None:
    async with proxied(root) as (_, _, client):
        await client.send_raw(b"GET /api/stream?n=3&size=10 HTTP/1.0\r\nHost: t\r\n\r\n")
        data = b""
        while chunk := await client.stream.receive_some(65536):
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and b"chunked" not in head.lower()
        assert body == b"A" * 10 + b"B" * 10 + b"C" * 10


async def test_content_streams_up_with_its_framing(root: Path) -> None:
    async with proxied(root) as (up, srv, client):
        await client.send_raw(
            b"POST /api/echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello"
        )
        r = await client.read_response()
        assert r.status == 200 and json.loads(r.body)["size"] == 5
        await client.send_raw(
            b"PUT /api/echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n"
        )
        r = await client.read_response()
        assert r.status == 200 and json.loads(r.body)["size"] == 7
        assert up.seen[0].body == b"hello" and up.seen[0].header("content-length") == "5"
        assert up.seen[1].body == b"abcdefg"
        assert up.seen[1].header("transfer-encoding") == "chunked"
        assert up.seen[1].header("content-length") is None
        assert srv.stats.proxy.bytes_up == 12
        # Methods the files answer 405 go upstream.
        r = await client.get("/api/json", method="DELETE")
        assert r.status == 200 and json.loads(r.body)["method"] == "DELETE"
        r = await client.get("/api/json", method="OPTIONS")
        assert r.status == 200 and json.loads(r.body)["method"] == "OPTIONS"


async def test_with_uploads_on_a_write_under_a_proxy_prefix_goes_upstream(root: Path) -> None:
    # The routing precedence (docs/reference/proxy.md): a proxy route before the
    # files, so --upload writes only what no route takes.
    async with proxied(root, upload=True, min_free_space=0) as (up, _srv, client):
        await client.send_raw(b"PUT /api/echo HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc")
        r = await client.read_response()
        assert r.status == 200 and json.loads(r.body)["size"] == 3
        assert up.seen[-1].body == b"abc" and not (root / "api").exists()
        r = await client.get("/api/json", method="DELETE")
        assert r.status == 200 and json.loads(r.body)["method"] == "DELETE"
        # Outside the prefix the upload step writes the file.
        await client.send_raw(b"PUT /here.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nok")
        r = await client.read_response()
        assert r.status == 201 and (root / "here.txt").read_bytes() == b"ok"


async def test_head_and_bodiless_statuses_pass_through(root: Path) -> None:
    async with proxied(root) as (up, _, client):
        r = await client.get("/api/length?size=10", method="HEAD")
        assert r.status == 200 and r.body == b"" and r.header("content-length") == "10"
        r = await client.get("/api/status?code=204")
        assert r.status == 204 and r.body == b""
        r = await client.get("/api/status?code=304")
        assert r.status == 304
        r = await client.get("/api/status?code=503")
        assert r.status == 503 and r.body == b"status"  # the upstream's body, not a page
        assert up.connections == 1  # each one ended cleanly: the connection was reused


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port: int = s.getsockname()[1]
    s.close()
    return port


async def test_a_refused_connection_is_a_502_page(root: Path) -> None:
    cfg = make_config(root, proxy=(f"/api=http://127.0.0.1:{_closed_port()}",))
    async with running_server(cfg) as (srv, port):
        client = await connect(port)
        r = await client.get("/api/json", "Accept: text/html\r\n")
        await client.stream.aclose()
    assert r.status == 502 and b"502" in r.body
    assert (r.header("content-type") or "").startswith("text/html")
    assert srv.stats.proxy.errors_connect == 1


async def test_a_response_h11_refuses_is_a_502_never_passed_on(root: Path) -> None:
    async with proxied(root) as (_, srv, client):
        r = await client.get("/api/badframe")
        assert r.status == 502 and b"hello" not in r.body
        assert srv.stats.proxy.errors_framing == 1
        assert (await client.get("/api/json")).status == 200  # the client's connection lives


async def test_a_reset_after_the_head_cuts_the_client_connection(root: Path) -> None:
    async with proxied(root) as (_, srv, client):
        with pytest.raises((EOFError, h11.RemoteProtocolError, trio.BrokenResourceError)):
            await client.get("/api/reset")
        assert await client.at_eof()
        assert srv.stats.proxy.errors_reset == 1


async def test_a_slow_head_is_a_504(root: Path) -> None:
    async with proxied(root, proxy_head_timeout=0.2) as (_, srv, client):
        with trio.fail_after(5):
            r = await client.get("/api/slow?delay=3")
        assert r.status == 504
        assert srv.stats.proxy.timeouts_head == 1


async def test_a_slow_head_on_a_pooled_connection_is_a_504_and_closes_it(root: Path) -> None:
    # The pooled path (service._quick_head): its one scope's deadline is
    # the grace, then the watched wait's is the head deadline.
    async with proxied(root, proxy_head_timeout=0.2) as (_, srv, client):
        assert (await client.get("/api/json")).status == 200  # pools a connection
        with trio.fail_after(5):
            r = await client.get("/api/slow?delay=3")
        assert r.status == 504
        stats = srv.stats.proxy
        assert stats.reuses == 1 and stats.timeouts_head == 1 and stats.timeouts_total == 0
        assert srv.env.handler.proxy is not None
        pool = next(iter(srv.env.handler.proxy.pools.values()))  # type: ignore[attr-defined]
        assert pool.opened == 0 and pool.inflight == 0  # never pooled mid-response


async def test_a_client_that_leaves_a_pooled_exchange_closes_its_connection(root: Path) -> None:
    async with proxied(root) as (up, srv, client):
        assert (await client.get("/api/json")).status == 200  # pools a connection
        await client.send_raw(b"GET /api/never HTTP/1.1\r\nHost: t\r\n\r\n")
        with trio.fail_after(5):
            await up.started.wait()
        await reset(client)
        with trio.fail_after(5):
            while up.closed_by_peer == 0:  # noqa: ASYNC110 - state the peer owns
                await trio.sleep(0.01)
        assert srv.stats.proxy.reuses == 1 and srv.stats.proxy.cancelled == 1
        assert srv.env.handler.proxy is not None
        pool = next(iter(srv.env.handler.proxy.pools.values()))  # type: ignore[attr-defined]
        assert pool.opened == 0 and pool.inflight == 0


async def test_a_next_request_already_here_is_read_without_a_wait(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The client sends its next request while the upstream still works on
    # the first (within WATCH_GRACE: nothing reads the client meanwhile).
    # Once the answer is written the connection lets the other tasks run
    # once and then reads: the request is there, so the head reader never
    # waits for readability (no epoll registration).  Each wait of the
    # head reader is tagged with the requests the upstream has seen.
    waits: list[int] = []
    real = trio.lowlevel.wait_readable
    seen: list[object] = []

    async def counted(fd: int) -> None:
        if sys._getframe(1).f_code.co_filename.endswith(os.path.join("net", "h1head.py")):
            waits.append(len(seen))
        await real(fd)

    monkeypatch.setattr(trio.lowlevel, "wait_readable", counted)
    async with proxied(root) as (up, _, client):
        seen = up.seen  # type: ignore[assignment]
        await client.send_raw(b"GET /api/slow?delay=0.02 HTTP/1.1\r\nHost: t\r\n\r\n")
        with trio.fail_after(5):
            await up.started.wait()
        await client.send_raw(b"GET /api/json HTTP/1.1\r\nHost: t\r\n\r\n")
        with trio.fail_after(5):
            first = await client.read_response()
            second = await client.read_response()
    assert first.status == 200 and first.body == b"slow" and second.status == 200
    assert [s.target for s in up.seen] == ["/api/slow?delay=0.02", "/api/json"]
    assert 1 not in waits  # no wait between the first answer and the second request


async def test_an_idle_upstream_body_is_cut(root: Path) -> None:
    async with proxied(root, proxy_idle_timeout=0.2) as (_, srv, client):
        with trio.fail_after(5), pytest.raises((EOFError, h11.RemoteProtocolError)):
            await client.get("/api/stream?n=3&size=10&pause=1")
        assert srv.stats.proxy.timeouts_idle == 1


async def test_a_client_that_leaves_closes_the_upstream_connection(root: Path) -> None:
    async with proxied(root) as (up, srv, client):
        await client.send_raw(b"GET /api/never HTTP/1.1\r\nHost: t\r\n\r\n")
        with trio.fail_after(5):
            await up.started.wait()
        await reset(client)  # a reset (a FIN alone is a half-close, RFC 9112 §9.6)
        with trio.fail_after(5):
            while up.closed_by_peer == 0:  # noqa: ASYNC110 - state the peer owns
                await trio.sleep(0.01)
        assert srv.stats.proxy.cancelled == 1
        assert srv.env.handler.proxy is not None
        pool = next(iter(srv.env.handler.proxy.pools.values()))  # type: ignore[attr-defined]
        assert pool.opened == 0 and pool.inflight == 0


async def test_past_max_inflight_without_a_queue_is_a_503_at_once(root: Path) -> None:
    async with proxied(root, proxy_max_inflight=1, proxy_queue=0) as (up, srv, client):
        await client.send_raw(b"GET /api/never HTTP/1.1\r\nHost: t\r\n\r\n")
        with trio.fail_after(5):
            await up.started.wait()
        second = await connect(srv.addresses()[0][1])
        with trio.fail_after(5):
            r = await second.get("/api/json")
        await second.stream.aclose()
        assert r.status == 503 and srv.stats.proxy.busy == 1
        assert len(up.seen) == 1  # the second never reached the upstream
        await reset(client)  # the first ends too: no 10 s drain at the server's stop


async def test_past_max_inflight_a_request_waits_for_the_slot(root: Path) -> None:
    # The default --proxy-queue: the second request waits (no 503) and is
    # sent once the first's slot is free.
    async with proxied(root, proxy_max_inflight=1) as (up, srv, client):
        await client.send_raw(b"GET /api/slow?delay=0.3 HTTP/1.1\r\nHost: t\r\n\r\n")
        with trio.fail_after(5):
            await up.started.wait()
        second = await connect(srv.addresses()[0][1])
        with trio.fail_after(5):
            r = await second.get("/api/json")
            first = await client.read_response()
        await second.stream.aclose()
        assert first.status == 200 and first.body == b"slow"
        assert r.status == 200 and srv.stats.proxy.queued == 1 and srv.stats.proxy.busy == 0
        assert [s.target for s in up.seen] == ["/api/slow?delay=0.3", "/api/json"]


def _basic() -> str:
    return (
        "Authorization: Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode() + "\r\n"
    )


async def test_access_rules_run_on_the_normalised_path_before_proxying(
    root: Path, tmp_path: Path
) -> None:
    users = tmp_path / "users"
    users.write_text(f"alice:{hash_password(PASSWORD, 1000)}\n")
    async with proxied(
        root, proxy=("/=http://127.0.0.1:{port}",), auth=(("/private/**", str(users)),)
    ) as (up, srv, client):
        assert (await client.get("/private/json")).status == 401
        for attack, status in (
            ("/api%2f..%2fprivate/json", 404),  # an encoded slash is no separator
            ("/api%2F..%2Fprivate/json", 404),
            ("/api/..%2fprivate/json", 404),
            ("/api/../private/json", 400),  # a dot segment the client should have removed
            ("/api/%2e%2e/private/json", 400),
            ("/./private/json", 400),
            ("/api%5c..%5cprivate/json", 400),  # a backslash: a separator upstream may see
            ("/PRIVATE/json", None),  # another path: the upstream's business
        ):
            one = await connect(srv.addresses()[0][1])  # a 400 closes its connection
            r = await one.get(attack)
            await one.stream.aclose()
            if status is not None:
                assert r.status == status, (attack, r.status)
        assert [s.target for s in up.seen] == ["/PRIVATE/json"]
        r = await client.get("/private/json", _basic())
        assert r.status == 200 and up.seen[-1].target == "/private/json"
        assert r.header("cache-control") == "private"


async def test_header_rules_and_cors_apply_to_proxied_responses(root: Path) -> None:
    async with proxied(
        root,
        header_rules=(("/api/**", (("X-Frame-Options", "DENY"),), ("Server",)),),
        cors=True,
    ) as (_, _, client):
        r = await client.get("/api/json", "Origin: http://a.example\r\n")
        assert r.header("x-frame-options") == "DENY"
        assert r.header("server") is None
        assert r.header("access-control-allow-origin") == "*"


async def test_trusted_proxies_are_appended_to(root: Path) -> None:
    async with proxied(root, trusted_proxies=("127.0.0.1/32",)) as (up, _, client):
        await client.get(
            "/api/json",
            "X-Forwarded-For: 203.0.113.9\r\nForwarded: for=203.0.113.9\r\n"
            "X-Forwarded-Proto: https\r\n",
        )
        seen = up.seen[0]
        assert seen.header("x-forwarded-for") == "203.0.113.9, 127.0.0.1"
        assert seen.header("forwarded") == "for=203.0.113.9, for=127.0.0.1;host=t;proto=http"
        assert seen.header("x-forwarded-proto") == "https"
    async with proxied(root) as (up, _, client):  # untrusted: replaced, never appended
        await client.get("/api/json", "X-Forwarded-For: 203.0.113.9\r\nForwarded: for=1.2.3.4\r\n")
        seen = up.seen[0]
        assert seen.all("x-forwarded-for") == ["127.0.0.1"]
        assert seen.all("forwarded") == ["for=127.0.0.1;host=t;proto=http"]


async def test_graceful_shutdown_drains_a_proxied_request(root: Path) -> None:
    async with upstream() as up:
        cfg = make_config(root, proxy=(f"/api=http://127.0.0.1:{up.port}",))
        srv = Server(cfg.evolve(host="127.0.0.1", port=0))
        async with trio.open_nursery() as nursery:
            await nursery.start(srv.serve)
            client = await connect(srv.addresses()[0][1])
            await client.send_raw(b"GET /api/slow?delay=0.5 HTTP/1.1\r\nHost: t\r\n\r\n")
            with trio.fail_after(5):
                await up.started.wait()
            srv.shutdown()  # in flight: the drain waits for it
            with trio.fail_after(5):
                r = await client.read_response()
            assert r.status == 200 and r.body == b"slow"
            assert r.header("connection") == "close"
            await client.stream.aclose()


async def test_the_fallback_answers_what_nothing_else_does(root: Path) -> None:
    async with upstream() as other, upstream() as up:
        cfg = make_config(
            root,
            proxy=(f"/api=http://127.0.0.1:{other.port}",),
            proxy_fallback=f"http://127.0.0.1:{up.port}",
        )
        async with running_server(cfg) as (_, port):
            client = await connect(port)
            assert (await client.get("/hello.txt")).body == b"hello world\n"  # a file first
            assert (await client.get("/api/json")).status == 200  # a route next
            r = await client.get("/missing/json")  # nothing: the fallback
            assert r.status == 200 and json.loads(r.body)["target"] == "/missing/json"
            r = await client.get("/hello.txt", method="DELETE")  # files answer GET/HEAD only
            assert r.status == 404 and r.body == b"upstream 404"  # the upstream's own 404
            await client.stream.aclose()
    assert [s.target for s in other.seen] == ["/api/json"]
    assert [(s.method, s.target) for s in up.seen] == [
        ("GET", "/missing/json"),
        ("DELETE", "/hello.txt"),
    ]


async def test_the_fallback_comes_after_the_access_rules(root: Path, tmp_path: Path) -> None:
    users = tmp_path / "users"
    users.write_text(f"alice:{hash_password(PASSWORD, 1000)}\n")
    async with upstream() as up:
        cfg = make_config(
            root, proxy_fallback=f"http://127.0.0.1:{up.port}", auth=(("/private/**", str(users)),)
        )
        async with running_server(cfg) as (_, port):
            client = await connect(port)
            assert (await client.get("/private/json")).status == 401
            assert (await client.get("/private/json", method="POST")).status == 401
            assert (await client.get("/private/json", _basic())).status == 200
            assert (await client.get("/open/json")).status == 200
            await client.stream.aclose()
    assert [s.target for s in up.seen] == ["/private/json", "/open/json"]


def test_spa_and_the_fallback_are_refused_together(root: Path) -> None:
    with pytest.raises(ConfigError, match="--spa and --proxy-fallback"):
        make_config(root, spa="index.html", proxy_fallback="http://127.0.0.1:3000")


async def test_a_longer_mount_takes_its_paths_from_a_proxy_route(root: Path) -> None:
    # The precedence rule (docs/reference/proxy.md): the longest prefix among
    # routes and mounts wins; --proxy /api and --mount /api/docs=DIR: the
    # mount serves /api/docs/..., the upstream everything else under /api.
    docs = root.parent / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("from the mount\n")
    async with proxied(root, mounts=(("/api/docs", str(docs)),)) as (up, _srv, client):
        r = await client.get("/api/docs/a.txt")
        assert r.status == 200 and r.body == b"from the mount\n"
        r = await client.get("/api/json")
        assert r.status == 200 and json.loads(r.body)["target"] == "/api/json"
        r = await client.get("/hello.txt")  # -d DIR at / (shorter than /api)
        assert r.status == 200 and r.body == b"hello world\n"
        assert [s.target for s in up.seen] == ["/api/json"]


async def test_a_route_prefix_outranks_a_root_proxy_route(root: Path) -> None:
    # --proxy /=URL --route-prefix /app: /app/... are the files (a longer
    # prefix), everything else goes upstream.
    async with proxied(root, proxy=("/=http://127.0.0.1:{port}",), route_prefix="/app") as (
        up,
        _srv,
        client,
    ):
        r = await client.get("/app/hello.txt")
        assert r.status == 200 and r.body == b"hello world\n"
        r = await client.get("/api/json")
        assert r.status == 200 and json.loads(r.body)["target"] == "/api/json"
        assert [s.target for s in up.seen] == ["/api/json"]


@pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="no Unix sockets here")
async def test_a_unix_socket_upstream_is_proxied_and_pooled(root: Path, tmp_path: Path) -> None:
    path = str(tmp_path / "app.sock")
    async with unix_upstream(path) as up:
        cfg = make_config(root, proxy=(f"/u=unix:{path}",), proxy_host="upstream")
        async with running_server(cfg) as (srv, port):
            client = await connect(port)
            try:
                for _ in range(2):
                    r = await client.get("/u/json?x=1")
                    assert r.status == 200 and json.loads(r.body)["target"] == "/u/json?x=1"
            finally:
                await client.stream.aclose()
            assert srv.stats.proxy.connects == 1 and srv.stats.proxy.reuses == 1
    assert [s.header("host") for s in up.seen] == ["localhost", "localhost"]
    assert up.connections == 1


async def test_the_host_sent_upstream_is_decided_per_route(root: Path) -> None:
    # --proxy-host pass (the default) for /api; a [[proxy]] table with
    # host = "upstream" for /up: the upstream's own authority there.
    async with upstream() as up:
        route = proxy_route("/up", f"http://127.0.0.1:{up.port}", "t", host_mode="upstream")
        cfg = make_config(root, proxy=(f"/api=http://127.0.0.1:{up.port}",), proxy_routes=(route,))
        async with running_server(cfg) as (_srv, port):
            client = await connect(port)
            try:
                assert (await client.get("/api/json")).status == 200
                assert (await client.get("/up/json")).status == 200
            finally:
                await client.stream.aclose()
    assert [s.header("host") for s in up.seen] == ["t", f"127.0.0.1:{up.port}"]


class _Spawns(trio.abc.Instrument):
    def __init__(self) -> None:
        self.spawned = 0

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.spawned += 1


async def test_a_quick_pooled_exchange_spawns_no_watcher_task(root: Path) -> None:
    # The client is watched (a helper task) only when the proxy is about
    # to wait for long (pipeline.handler.watching_client): a pooled exchange
    # answered within WATCH_GRACE spawns no task at all.
    async with proxied(root) as (_up, srv, client):
        assert (await client.get("/api/json")).status == 200  # connects: watched
        spawns = _Spawns()
        trio.lowlevel.add_instrument(spawns)
        try:
            for _ in range(5):
                assert (await client.get("/api/json")).status == 200
        finally:
            trio.lowlevel.remove_instrument(spawns)
        assert spawns.spawned == 0 and srv.stats.proxy.reuses == 5
        # A slow answer still gets its watcher (the grace passed).
        spawns = _Spawns()
        trio.lowlevel.add_instrument(spawns)
        try:
            r = await client.get("/api/slow?delay=0.2")
        finally:
            trio.lowlevel.remove_instrument(spawns)
        assert r.status == 200 and spawns.spawned == 1


async def test_a_client_that_leaves_while_queued_for_a_slot_is_let_go(root: Path) -> None:
    # The waiting task watches its client itself (client_gone: it reads
    # the socket while it waits, no helper task), notices the reset and
    # ends the whole step with ClientGone (the waiter leaves the queue
    # holding no slot).
    async with proxied(root, proxy_max_inflight=1) as (up, srv, client):
        await client.send_raw(b"GET /api/never HTTP/1.1\r\nHost: t\r\n\r\n")
        with trio.fail_after(5):
            await up.started.wait()
        second = await connect(srv.addresses()[0][1])
        await second.send_raw(b"GET /api/json HTTP/1.1\r\nHost: t\r\n\r\n")
        assert srv.env.handler.proxy is not None
        pool = next(iter(srv.env.handler.proxy.pools.values()))  # type: ignore[attr-defined]
        with trio.fail_after(5):
            while pool.waiting == 0:  # noqa: ASYNC110 - state the server owns
                await trio.sleep(0.01)
        await reset(second)
        with trio.fail_after(5):
            while pool.waiting:  # noqa: ASYNC110 - state the server owns
                await trio.sleep(0.01)
        assert pool.inflight == 1  # still the first request's, nothing leaked
        assert len(up.seen) == 1  # the second never reached the upstream
        await reset(client)  # the first ends too: no 10 s drain at the server's stop


def test_peer_facts_are_canonical_and_trusted_only_inside_the_networks() -> None:
    from ipaddress import ip_network

    from serverio.proxy.service import _peer_facts

    nets = (ip_network("192.0.2.0/24"), ip_network("2001:db8::/32"))
    assert _peer_facts("::ffff:192.0.2.1", ()) == ("192.0.2.1", False, True)
    assert _peer_facts("::ffff:192.0.2.1", nets) == ("192.0.2.1", True, True)
    assert _peer_facts("2001:db8::1", nets) == ("2001:db8::1", True, True)
    assert _peer_facts("198.51.100.1", nets) == ("198.51.100.1", False, True)
    assert _peer_facts("-", nets) == ("-", False, True)  # not an address (a Unix socket)
    assert _peer_facts("/run/s.sock", nets) == ("/run/s.sock", False, True)
    # A peer text that is no plain field value (h11 then checks every field).
    assert _peer_facts("/run/a b\nc", ()) == ("/run/a b\nc", False, False)
