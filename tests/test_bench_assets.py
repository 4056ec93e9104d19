"""The bench's many-assets workloads: the fixture, the wrk Lua script, the probe, Caddy's file."""

from __future__ import annotations

import gzip
import http.server
import itertools
import os
import shutil
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import ClassVar

import brotli
import pytest
import trio

from bench import fixtures
from bench.servers import (
    CADDYFILE_PRECOMPRESSED,
    KINDS,
    SERVERS,
    HarnessEnv,
    LaunchPlan,
    running,
)
from bench.workloads import ASSETS_ACCEPT_ENCODING, WORKLOADS, probe
from bench.wrk import round_robin_script, wrk_command

from .conftest import make_config, running_server

WRK = shutil.which("wrk")
CADDY = shutil.which("caddy")


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> fixtures.Fixture:
    return fixtures.create(tmp_path_factory.mktemp("bench-root"))


def test_many_assets_span_200_bytes_to_180_kib_with_sidecars_that_decode_to_each_file(
    tree: fixtures.Fixture,
) -> None:
    paths = fixtures.many_asset_paths()
    sizes = [tree.sizes[p.lstrip("/")] for p in paths]
    assert len(paths) == 20 == len(set(paths))
    assert sizes == sorted(sizes) and len(set(sizes)) == 20
    assert (sizes[0], sizes[-1]) == (200, 180 * 1024)
    for path in paths:
        file = tree.path(path.lstrip("/"))
        data = file.read_bytes()
        assert gzip.decompress(file.with_name(file.name + ".gz").read_bytes()) == data
        assert brotli.decompress(file.with_name(file.name + ".br").read_bytes()) == data
        # A sidecar older than its file is ignored by serverio.
        assert file.with_name(file.name + ".br").stat().st_mtime_ns >= file.stat().st_mtime_ns
    assert {p.rsplit(".", 1)[1] for p in paths} == {"js", "css"}


def test_assets_workloads_request_every_asset_with_both_codings_at_512_and_4096() -> None:
    for name, conns in (("assets-c512", 512), ("assets-c4096", 4096)):
        w = WORKLOADS[name]
        assert (w.kind, w.connections, w.feature, w.precompressed) == ("wrk", conns, "assets", True)
        assert list(w.paths) == fixtures.many_asset_paths()
        assert w.request_headers() == (("Accept-Encoding", "br;q=1, gzip;q=0.8"),)
    nocache = SERVERS["serverio-nocache"]
    assert nocache.only_workloads == frozenset({"assets-c512", "assets-c4096"})
    assert ("--file-cache-size", "0") in itertools.pairwise(nocache.extra_args)


def test_round_robin_script_lists_the_paths_in_order_and_refuses_unsafe_ones() -> None:
    script = round_robin_script(["/static/a.js", "/b.css", "/c%20d.js"])
    listed = [line.strip() for line in script.splitlines() if line.startswith('    "')]
    assert listed == ['"/static/a.js",', '"/b.css",', '"/c%20d.js",']
    assert "function request()" in script and "function response" not in script
    for bad in ('/a".."', "/a\\n", "relative.js", "/a b.js", "/a?q=1"):
        with pytest.raises(ValueError):
            round_robin_script([bad])
    with pytest.raises(ValueError):
        round_robin_script([])
    argv = wrk_command(
        "http://127.0.0.1:1/a",
        connections=8,
        duration_s=1,
        threads=1,
        script="/x.lua",
        headers=(("Accept-Encoding", "br"),),
    )
    assert argv[argv.index("-s") + 1] == "/x.lua" and argv[-3:] == [
        "-H",
        "Accept-Encoding: br",
        "http://127.0.0.1:1/a",
    ]


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Answers every GET with 200 and two bytes, keep-alive; records path and Accept-Encoding."""

    protocol_version = "HTTP/1.1"
    seen: ClassVar[list[tuple[str, str | None]]] = []
    lock: ClassVar[threading.Lock] = threading.Lock()

    def do_GET(self) -> None:
        with self.lock:
            self.seen.append((self.path, self.headers.get("Accept-Encoding")))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[tuple[int, list[tuple[str, str | None]]]]:
    seen: list[tuple[str, str | None]] = []
    handler = type("Handler", (_Recorder,), {"seen": seen, "lock": threading.Lock()})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server.server_address[1], seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.mark.skipif(WRK is None, reason="wrk is not installed")
def test_wrk_running_the_script_requests_every_path_evenly_with_the_workload_header(
    recorder: tuple[int, list[tuple[str, str | None]]], tmp_path: Path
) -> None:
    port, seen = recorder
    paths = ["/static" + p for p in fixtures.many_asset_paths()]
    script = tmp_path / "assets.lua"
    script.write_text(round_robin_script(paths))
    conns = 4
    argv = wrk_command(
        f"http://127.0.0.1:{port}{paths[0]}",
        connections=conns,
        duration_s=1,
        threads=1,
        headers=(("Accept-Encoding", ASSETS_ACCEPT_ENCODING),),
        script=str(script),
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True)
    assert "requests in" in done.stdout
    counts = Counter(path for path, _ in seen)
    assert set(counts) == set(paths)
    # One counter for all the thread's connections: the requests sent are
    # the list repeated; only those still in flight at the end are missing.
    assert max(counts.values()) - min(counts.values()) <= conns
    assert {coding for _, coding in seen} == {ASSETS_ACCEPT_ENCODING}


async def test_assets_probe_accepts_serverio_br_sidecars_and_refuses_a_wrong_one(
    tmp_path: Path,
) -> None:
    tree = fixtures.create(tmp_path)
    workload = WORKLOADS["assets-c512"]
    async with running_server(make_config(tmp_path)) as (_, port):
        good = await trio.to_thread.run_sync(partial(probe, workload, port, tree))
        assert good.ok, good.reason
        assert good.facts["codings"] == "br 20"
        # A sidecar that decodes to other bytes must fail the probe.
        victim = tmp_path / "many" / "a07.css"
        sidecar = victim.with_name("a07.css.br")
        sidecar.write_bytes(brotli.compress(b"not the file"))
        os.utime(sidecar, ns=(victim.stat().st_mtime_ns + 10**9,) * 2)
        bad = await trio.to_thread.run_sync(partial(probe, workload, port, tree))
    assert not bad.ok and "/many/a07.css" in bad.reason


@pytest.mark.skipif(CADDY is None, reason="caddy is not installed")
def test_caddy_runs_the_committed_precompressed_file_for_compressed_workloads(
    tree: fixtures.Fixture, tmp_path: Path
) -> None:
    env = HarnessEnv(Path.cwd(), "python3", tmp_path / "no-venv" / "bin" / "python", None)
    caddy = SERVERS["caddy"]
    plain = KINDS["caddy"].plan(caddy, env, tree.root, None, tmp_path)
    assert isinstance(plain, LaunchPlan)
    conf = Path(plain.argv[plain.argv.index("--config") + 1])
    assert conf != CADDYFILE_PRECOMPRESSED and "protocols h1\n" in conf.read_text()
    tagged = replace(caddy, tags=caddy.tags | {"precompressed"})
    plan = KINDS["caddy"].plan(tagged, env, tree.root, None, tmp_path)
    assert isinstance(plan, LaunchPlan)
    assert plan.argv[plan.argv.index("--config") + 1] == str(CADDYFILE_PRECOMPRESSED)
    with running(tagged, plan, tmp_path / "caddy.log", cpu=None) as rs:
        result = probe(WORKLOADS["assets-c512"], rs.port, tree)
    assert result.ok, result.reason
    assert result.facts["codings"] == "br 20"


def test_pair_asset_variants_ask_for_the_right_directory_and_coding() -> None:
    from bench import pair

    sidecars, plain, ident = (pair._asset_requests(v) for v in ("sidecars", "plain", "identity"))
    assert len(sidecars) == len(plain) == len(ident) == len(fixtures.many_asset_names())
    assert all(f"/{fixtures.MANY_DIR}/".encode() in r for r in sidecars)
    assert all(f"/{fixtures.MANY_PLAIN_DIR}/".encode() in r for r in plain + ident)
    assert all(b"Accept-Encoding: br;q=1, gzip;q=0.8\r\n" in r for r in sidecars + plain)
    assert all(b"Accept-Encoding: identity\r\n" in r for r in ident)
