"""The bench's reverse-proxy, no-sidecar and two-core workloads (issues 30
and 31): the generated configurations, the upstream wiring, the identity
variant's request headers, and one short real run of the proxy workload
through serverio against the nginx upstream."""

from __future__ import annotations

import contextlib
import functools
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio

from bench import fixtures, proxyrun, report
from bench.servers import (
    KINDS,
    NOSIDECAR_WORKLOADS,
    PROXY_WORKLOADS,
    SERVERS,
    HarnessEnv,
    LaunchPlan,
    ServerSpec,
    running,
)
from bench.trials import Placement
from bench.workloads import WORKLOADS, for_server, probe

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
ENV = HarnessEnv(Path("."), "python3", Path("/nonexistent/python"), NGINX or "/usr/sbin/nginx")


def _plan(spec: ServerSpec, tmp_path: Path) -> LaunchPlan:
    plan = KINDS[spec.kind].plan(spec, ENV, tmp_path, None, tmp_path)
    assert isinstance(plan, LaunchPlan), plan
    return plan


@contextlib.asynccontextmanager
async def _baseline(
    script: str, args: list[str], answer: bytes, split: int
) -> AsyncIterator[tuple[trio.SocketStream, list[list[bytes]]]]:
    """A bench baseline (``bench/baselines/SCRIPT``) in front of a loopback
    upstream that answers every request head with ``answer``, its head in
    two pieces (at ``split``): a client connected to the baseline, and the
    request heads the upstream saw (their lines)."""
    seen: list[list[bytes]] = []

    async def upstream(stream: trio.SocketStream) -> None:
        buf = b""
        while data := await stream.receive_some(65536):
            buf += data
            while b"\r\n\r\n" in buf:
                head, _, buf = buf.partition(b"\r\n\r\n")
                seen.append(head.split(b"\r\n"))
                await stream.send_all(answer[:split])
                await stream.send_all(answer[split:])

    path = Path(__file__).parent.parent / "bench" / "baselines" / script
    async with trio.open_nursery() as nursery:
        serve = functools.partial(trio.serve_tcp, upstream, 0, host="127.0.0.1")
        listeners = await nursery.start(serve)
        port = listeners[0].socket.getsockname()[1]
        argv = [sys.executable, str(path), f"127.0.0.1:{port}", *args, "0"]
        with trio.fail_after(20):
            proc = await trio.lowlevel.open_process(argv, stdout=subprocess.PIPE)
            try:
                assert proc.stdout is not None
                line = await proc.stdout.receive_some(200)
                own_port = int(line.split(b":")[2].split(b"/")[0])
                client = await trio.open_tcp_stream("127.0.0.1", own_port)
                async with client:
                    yield client, seen
            finally:
                proc.kill()
                await proc.wait()
                if proc.stdout is not None:
                    await proc.stdout.aclose()
        nursery.cancel_scope.cancel()


def test_the_server_lists_name_exactly_the_workloads_of_their_kind() -> None:
    assert PROXY_WORKLOADS == tuple(n for n, w in WORKLOADS.items() if w.kind == "proxy")
    assert NOSIDECAR_WORKLOADS == tuple(n for n in WORKLOADS if n.startswith("assets-nosidecar"))
    proxies = [s.name for s in SERVERS.values() if "proxy" in s.tags]
    assert proxies == [
        "serverio-proxy",
        "serverio-proxy-wide",
        "caddy-proxy",
        "relay-floor",
        "h11-proxy-floor",
        "nginx-proxy",
    ]
    floors = {"relay-floor", "h11-proxy-floor"}
    for name in proxies:
        want = {"proxy-1k-c64"} if name in floors else set(PROXY_WORKLOADS)
        assert SERVERS[name].only_workloads == frozenset(want)


async def test_the_relay_floor_relays_each_request_to_the_upstream() -> None:
    body = b"x" * 1024
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 1024\r\n\r\n" + body
    async with _baseline("relay_floor.py", ["/1k.bin"], answer, 30) as (client, seen):
        for _ in range(2):
            await client.send_all(b"GET /any HTTP/1.1\r\nHost: t\r\n\r\n")
            got = b""
            while len(got) < len(answer):
                got += await client.receive_some(65536)
            assert got == answer
    assert [head[0] for head in seen] == [b"GET /1k.bin HTTP/1.1"] * 2


def test_serverio_gets_the_upstream_as_a_proxy_route_of_everything() -> None:
    spec = proxyrun.with_upstream(SERVERS["serverio-proxy"], "http://127.0.0.1:4567")
    assert spec.extra_args[-2:] == ("--proxy", "/=http://127.0.0.1:4567")
    assert spec.upstream == "http://127.0.0.1:4567"
    # The defaults are what the 512-connection target is about: none set.
    assert not any(a.startswith("--proxy-") for a in spec.extra_args)


def test_nginx_proxy_pools_keep_alive_upstream_connections(tmp_path: Path) -> None:
    spec = proxyrun.with_upstream(SERVERS["nginx-proxy"], "http://127.0.0.1:4567")
    _plan(spec, tmp_path)
    conf = (tmp_path / "nginx.conf").read_text()
    assert "server 127.0.0.1:4567;" in conf
    assert "keepalive 32;" in conf and "proxy_http_version 1.1;" in conf
    assert 'proxy_set_header Connection "";' in conf
    assert "proxy_pass http://bench_upstream;" in conf and "worker_processes 1;" in conf
    assert "autoindex" not in conf  # the proxy serves no files itself


def test_caddy_proxy_is_reverse_proxy_to_the_upstream(tmp_path: Path) -> None:
    spec = proxyrun.with_upstream(SERVERS["caddy-proxy"], "http://127.0.0.1:4567")
    _plan(spec, tmp_path)
    conf = (tmp_path / "Caddyfile").read_text()
    assert "reverse_proxy 127.0.0.1:4567" in conf
    assert "file_server" not in conf and "protocols h1" in conf


def test_a_proxy_without_its_upstream_is_skipped_with_the_reason(tmp_path: Path) -> None:
    for name in ("caddy-proxy", "nginx-proxy"):
        plan = KINDS[SERVERS[name].kind].plan(SERVERS[name], ENV, tmp_path, None, tmp_path)
        assert isinstance(plan, str) and "upstream" in plan


def test_caddy_encode_compresses_and_plain_caddy_does_not(tmp_path: Path) -> None:
    _plan(SERVERS["caddy-encode"], tmp_path)
    assert "encode zstd gzip" in (tmp_path / "Caddyfile").read_text()
    _plan(SERVERS["caddy"], tmp_path)
    assert "encode zstd" not in (tmp_path / "Caddyfile").read_text()


def test_two_cores_means_two_nginx_workers_and_gomaxprocs_2(tmp_path: Path) -> None:
    wide = frozenset({"cores2"})
    nginx = SERVERS["nginx"]
    _plan(nginx, tmp_path)
    assert "worker_processes 1;" in (tmp_path / "nginx.conf").read_text()
    _plan(ServerSpec(nginx.name, nginx.kind, tags=nginx.tags | wide), tmp_path)
    assert "worker_processes 2;" in (tmp_path / "nginx.conf").read_text()
    caddy = SERVERS["caddy"]
    assert "GOMAXPROCS" not in _plan(caddy, tmp_path).env
    plan = _plan(ServerSpec(caddy.name, caddy.kind, tags=caddy.tags | wide), tmp_path)
    assert plan.env["GOMAXPROCS"] == "2"
    w = WORKLOADS["1k-cores2"]
    assert w.cores == 2 and w.serverio_args == ("--workers", "2")
    takes_part = [s.name for s in SERVERS.values() if w.server_tags and w.server_tags & s.tags]
    assert takes_part == ["serverio-inline", "nginx", "caddy"]


def test_identity_variant_asks_identity_and_the_others_negotiate() -> None:
    w = WORKLOADS["assets-nosidecar-c512"]
    assert ("Accept-Encoding", "br;q=1, gzip;q=0.8") in w.request_headers()
    asked = for_server(w, SERVERS["serverio-identity"].tags)
    assert [h for h in asked.request_headers() if h[0] == "Accept-Encoding"] == [
        ("Accept-Encoding", "identity")
    ]
    assert for_server(w, SERVERS["serverio-inline"].tags) is w


def test_no_sidecar_assets_are_the_many_assets_without_sidecars(tmp_path: Path) -> None:
    tree = fixtures.create(tmp_path)
    plain = tmp_path / fixtures.MANY_PLAIN_DIR
    assert sorted(p.name for p in plain.iterdir()) == sorted(fixtures.many_asset_names())
    for name in fixtures.many_asset_names():
        assert (plain / name).read_bytes() == tree.path(f"many/{name}").read_bytes()
    assert list(WORKLOADS["assets-nosidecar-c64"].paths) == fixtures.many_plain_paths()


def test_report_has_the_proxy_columns() -> None:
    summary = {
        "median_rps": 4000.0,
        "cpu_us_per_req": 150.0,
        "upstream_cpu_us_per_req": 25.0,
        "mean_ms": 10.0,
        "p99_ms": 20.0,
        "mib_per_s": 5.0,
        "mad_pct": 1.0,
        "rss_growth_mib": 3.5,
        "peak_rss_mib": 40.0,
    }
    entry = {"workload": "proxy-1k-c64", "server": "caddy-proxy", "status": "ok", "reason": ""}
    row = report._proxy_table([{**entry, "summary": summary}], "caddy-proxy")[2]
    assert row.startswith("| caddy-proxy | 4,000 | 150.0 | 25.0 | 10.00 | 20.00 | 2.00 | 5.0 |")
    assert "| 3.5 | 40.0 | — | 1.00 |" in row


@dataclass
class _Run:
    """What bench.proxyrun.upstream uses of a run."""

    tmp: Path
    fixture: fixtures.Fixture
    placement: Placement


@pytest.mark.skipif(NGINX is None, reason="nginx not installed (apt-get install nginx-light)")
def test_the_upstream_serves_the_fixture_and_serverio_proxies_it(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    tree = fixtures.create(tmp_path / "root")
    run = _Run(tmp_path, tree, Placement(None, None, 1))
    env = HarnessEnv(Path.cwd(), sys.executable, Path("/nonexistent"), NGINX)
    workload = WORKLOADS["proxy-1k-c64"]
    with proxyrun.upstream(run, env, workload) as up:
        assert not isinstance(up, str), up
        assert probe(workload, up.port, tree).ok
        spec = proxyrun.with_upstream(SERVERS["serverio-proxy"], up.url(""))
        plan = KINDS["serverio"].plan(spec, env, tree.root, None, tmp_path)
        assert isinstance(plan, LaunchPlan)
        with running(spec, plan, tmp_path / "serverio.log", cpu=None) as proxy:
            assert probe(workload, proxy.port, tree).ok
            assert probe(WORKLOADS["proxy-8m-c16"], proxy.port, tree).ok


async def test_the_h11_proxy_floor_rewrites_fields_and_relays_the_body() -> None:
    body = b"y" * 1024
    answer = (
        b"HTTP/1.1 200 OK\r\nConnection: keep-alive, x-hop\r\nX-Hop: 1\r\n"
        b"Content-Length: 1024\r\nX-End: 2\r\n\r\n" + body
    )
    request = b"GET /a?b HTTP/1.1\r\nHost: t\r\nKeep-Alive: 5\r\nX-A: 1\r\n\r\n"
    async with _baseline("h11_proxy_floor.py", [], answer, 40) as (client, seen):
        for _ in range(2):
            await client.send_all(request)
            got = b""
            while not got.endswith(body):
                got += await client.receive_some(65536)
            head = got[: -len(body)].split(b"\r\n")
            assert head[0] == b"HTTP/1.1 200 "
            # Connection and the X-Hop it names are hop-by-hop: removed.
            kept = [b"content-length: 1024", b"x-end: 2", b"via: 1.1 floor"]
            assert head[1:-2] == kept
        await client.send_all(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n\r\nx")
        assert (await client.receive_some(65536)).startswith(b"HTTP/1.1 400 ")
    assert len(seen) == 2 and seen[0] == seen[1]
    line, fields = seen[0][0], seen[0][1:]
    assert line == b"GET /a?b HTTP/1.1"
    assert fields[:2] == [b"host: t", b"x-a: 1"]  # keep-alive (hop-by-hop) removed
    assert {f.split(b":")[0] for f in fields[2:]} == {
        b"forwarded",
        b"x-forwarded-for",
        b"x-forwarded-proto",
        b"x-forwarded-host",
        b"via",
    }
