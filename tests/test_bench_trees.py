"""The bench's many-files workloads (issue 47): the cached tree, the random
wrk script, the probe, the collector figures scraped from /metrics."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import sys
from collections import Counter
from functools import partial
from pathlib import Path

import pytest
import trio

from bench import fixtures
from bench.gcscrape import gc_line, parse_gc
from bench.report import render_markdown
from bench.runner import Run
from bench.servers import BIGCACHE_BYTES, SERVERS, TREE_WORKLOADS, HarnessEnv, ServerSpec
from bench.workloads import WORKLOADS, probe
from bench.wrk import random_tree_script, wrk_command
from serverio import Server
from serverio.fs import filecache as _filecache
from serverio.ops.metrics import render

from .conftest import make_config, running_server
from .test_bench_assets import recorder as recorder  # the recording HTTP server fixture
from .test_collector import _empty_snapshot

WRK = shutil.which("wrk")


def test_tree_names_spread_files_over_100_directories() -> None:
    names = [fixtures.tree_name(i, 100_000) for i in range(100_000)]
    assert len(set(names)) == 100_000
    dirs = Counter(n.split("/")[0] for n in names)
    assert len(dirs) == 100 and set(dirs.values()) == {1000}
    assert fixtures.tree_name(12345, 100_000) == "d45/f012345.bin"
    with pytest.raises(ValueError):
        fixtures.tree_name(100_000, 100_000)
    assert fixtures.tree_bytes(1) != fixtures.tree_bytes(2)
    assert len(fixtures.tree_bytes(7)) == 1024


def test_tree_is_made_once_and_reused(tmp_path: Path) -> None:
    root = fixtures.tree_root(250, tmp_path)
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.bin"))
    assert files == sorted(fixtures.tree_name(i, 250) for i in range(250))
    assert (root / fixtures.tree_name(17, 250)).read_bytes() == fixtures.tree_bytes(17)
    marker = root / fixtures.tree_name(3, 250)
    stamp = marker.stat().st_mtime_ns
    assert fixtures.tree_root(250, tmp_path) == root  # reused, not rewritten
    assert marker.stat().st_mtime_ns == stamp
    # No scratch directory is left beside it.
    assert [p.name for p in tmp_path.iterdir()] == [root.name]


def test_many_files_workloads_and_the_bigcache_entry() -> None:
    many, few = WORKLOADS["many-files"], WORKLOADS["few-files"]
    assert (many.tree, few.tree) == (100_000, 1_000)
    assert many.connections == few.connections == 64
    assert set(TREE_WORKLOADS) == {"many-files", "few-files"}
    big = SERVERS["serverio-bigcache"]
    args = big.extra_args
    cache = int(args[args.index("--file-cache-size") + 1])
    assert cache == BIGCACHE_BYTES >= 100_000 * (1024 + 512)
    assert big.only_workloads == frozenset(TREE_WORKLOADS)


def test_random_script_is_lua_for_the_tree_and_refuses_unsafe_prefixes() -> None:
    text = random_tree_script(100_000, 100, "/static")
    assert 'local count, dirs, prefix = 100000, 100, "/static"' in text
    assert 'string.format("%s/d%02d/f%06d.bin", prefix, i % dirs, i)' in text
    with pytest.raises(ValueError):
        random_tree_script(10, 100, '/x"; os.execute("rm")')
    with pytest.raises(ValueError):
        random_tree_script(0, 100)


@pytest.mark.skipif(WRK is None, reason="wrk is not installed")
def test_wrk_running_the_random_script_requests_many_distinct_tree_files(
    recorder: tuple[int, list[tuple[str, str | None]]], tmp_path: Path
) -> None:
    port, seen = recorder
    script = tmp_path / "tree.lua"
    script.write_text(random_tree_script(100_000, 100))
    argv = wrk_command(
        f"http://127.0.0.1:{port}/", connections=2, duration_s=1, threads=1, script=str(script)
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True)
    assert "requests in" in done.stdout
    paths = [p for p, _ in seen]
    assert paths and all(re.fullmatch(r"/d\d\d/f\d{6}\.bin", p) for p in paths)
    for p in paths:  # the file's directory is its index modulo 100
        assert int(p[2:4]) == int(p[6:12]) % 100
    # Uniform over 100,000: nearly every request names another file.
    assert len(set(paths)) >= 0.9 * len(paths)


async def test_tree_probe_accepts_serverio_and_refuses_wrong_bytes(tmp_path: Path) -> None:
    root = fixtures.tree_root(1_000, tmp_path / "trees")
    tree = fixtures.Fixture(root=root, sizes={})
    workload = WORKLOADS["few-files"]
    async with running_server(make_config(root)) as (_, port):
        good = await trio.to_thread.run_sync(partial(probe, workload, port, tree))
        assert good.ok, good.reason
        (root / fixtures.tree_name(500, 1_000)).write_bytes(b"changed")
        bad = await trio.to_thread.run_sync(partial(probe, workload, port, tree))
    assert not bad.ok and "d00/f000500.bin" in bad.reason


def test_tree_workloads_start_serverio_with_an_admin_port(tmp_path: Path) -> None:
    run = Run.__new__(Run)  # only plan() is used: no fixture is written
    run.env = _env()
    spec: ServerSpec = SERVERS["serverio-bigcache"]
    plan = run.plan(spec, WORKLOADS["many-files"], tmp_path, tmp_path)
    assert not isinstance(plan, str)
    assert plan.admin_port is not None
    assert plan.argv[-2:] == ["--admin-bind", f"127.0.0.1:{plan.admin_port}"]
    other = run.plan(SERVERS["serverio-inline"], WORKLOADS["1k"], tmp_path, tmp_path)
    assert not isinstance(other, str) and other.admin_port is None
    assert "--admin-bind" not in other.argv


def _env() -> HarnessEnv:
    return HarnessEnv(repo=Path.cwd(), python=sys.executable, peers_python=Path("/x"), nginx=None)


def test_gc_figures_parsed_from_serverio_metrics_and_shown_under_the_table() -> None:
    snap = {
        **_empty_snapshot(),
        "gc": {
            "collections": [90, 8, 2],
            "pause_seconds": [0.009, 0.004, 0.120],
            "pause_longest_seconds": [0.0005, 0.001, 0.100],
            "collected": [0, 0, 0],
            "uncollectable": [0, 0, 0],
            "freezes": 3,
            "frozen_objects": 5000,
        },
    }
    gc = parse_gc(render(snap))
    assert gc["collections"] == 100 and gc["collections_total_g2"] == 2
    assert gc["pause_seconds"] == pytest.approx(0.133)
    assert gc["pause_longest_seconds"] == 0.1
    assert gc["frozen_objects"] == 5000
    line = gc_line(gc)
    assert line.startswith("100 collections (gen 0/1/2: 90/8/2), 133.0 ms paused, longest 100.00")
    assert gc_line({}) == ""
    artifact = {
        "run_id": "r",
        "mode": "quick",
        "started_utc": "now",
        "settings": {
            "reference": "serverio-inline",
            "rounds": 1,
            "duration_s": 1,
            "warmup_s": 0,
            "placement": "p",
            "idle_conns": 1,
            "idle_rounds": 1,
        },
        "machine": {"cpu_model": "c", "cpu_count": 2, "kernel": "k", "python": "3"},
        "workloads": {"many-files": {"description": "d", "kind": "wrk"}},
        "results": [
            {
                "workload": "many-files",
                "server": "serverio-bigcache",
                "status": "ok",
                "reason": "",
                "summary": {
                    "median_rps": 1.0,
                    "mad_pct": 0.0,
                    "p50_ms": 1.0,
                    "p99_ms": 2.0,
                    "mean_ms": 1.0,
                    "mib_per_s": 1.0,
                    "peak_rss_mib": 40.0,
                    "cpu_us_per_req": 50.0,
                    "gc": gc,
                },
                "trials": [],
            }
        ],
    }
    assert "- collector, serverio-bigcache: 100 collections" in render_markdown(artifact)


def test_callgrind_files_mode_is_its_own_workload() -> None:
    from bench.callgrind import CallgrindError, mode_args

    assert mode_args(files=500) == ["--files", "500"]
    with pytest.raises(CallgrindError):
        mode_args(h2_streams=1, files=500)


def _files(root: Path, count: int) -> None:
    for i in range(count):
        (root / f"f{i:05d}.bin").write_bytes(i.to_bytes(4, "big") * 256)


async def test_pair_files_mode_misses_the_bytes_and_hits_the_metadata(tmp_path: Path) -> None:
    from bench.pair import FILES_CACHE_BYTES, run_files

    _files(tmp_path, 100)
    seen: list[Server] = []
    real = Server.__init__

    def spy(self: Server, *args: object, **kwargs: object) -> None:
        real(self, *args, **kwargs)  # type: ignore[arg-type]
        seen.append(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Server, "__init__", spy)
        mp.setattr(_filecache, "RACY_SECONDS", -3600.0)  # just written counts as settled
        assert await run_files(200, tmp_path, 100) > 0
    files = seen[0].files
    assert files.capacity == FILES_CACHE_BYTES and len(files) < 100
    assert files.meta is not None and len(files.meta) == 100
    assert files.meta.stats.hits >= 200  # every timed request: facts from the metadata


def test_files_floor_serves_the_tree_and_passes_the_probe(tmp_path: Path) -> None:
    """bench/baselines/files_floor.py (the floor of an uncached small file
    on trio): only the tree workloads; each head gets its file's bytes in
    order on one connection, a directory, a missing name and a dot-segment
    a 404; the probe accepts it and refuses a damaged tree."""
    from bench.servers import KINDS, running

    spec = SERVERS["files-floor"]
    assert spec.only_workloads == frozenset(TREE_WORKLOADS)
    root = fixtures.tree_root(1_000, tmp_path / "trees")
    tree = fixtures.Fixture(root=root, sizes={})
    assert KINDS["files-floor"].plan(spec, _env(), root, root / "x.bin", tmp_path) == (
        "the files floor serves a tree (many-files, few-files)"
    )
    work = tmp_path / "work"
    work.mkdir()
    plan = KINDS["files-floor"].plan(spec, _env(), root, None, work)
    assert not isinstance(plan, str)
    with running(spec, plan, work / "server.log", cpu=None, timeout_s=20) as rs:
        result = probe(WORKLOADS["few-files"], rs.port, tree)
        assert result.ok, result.reason
        with socket.create_connection(("127.0.0.1", rs.port), timeout=10) as sock:
            heads = [
                f"GET /{fixtures.tree_name(i, 1_000)} HTTP/1.1\r\nHost: x\r\n\r\n" for i in (7, 8)
            ]
            heads += ["GET /d00 HTTP/1.1\r\n\r\n", "GET /d00/../d01/f000001.bin HTTP/1.1\r\n\r\n"]
            heads += ["GET /nothing.bin HTTP/1.1\r\n\r\n"]
            sock.sendall("".join(heads).encode())
            want = [fixtures.tree_bytes(7), fixtures.tree_bytes(8)]
            expected = b"".join(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                b"Content-Length: %d\r\n\r\n" % len(body) + body
                for body in want
            )
            expected += b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n" * 3
            got = b""
            while len(got) < len(expected):
                chunk = sock.recv(65536)
                assert chunk, got[-200:]
                got += chunk
            assert got == expected
        (root / fixtures.tree_name(500, 1_000)).write_bytes(b"changed")
        bad = probe(WORKLOADS["few-files"], rs.port, tree)
    assert not bad.ok and "d00/f000500.bin" in bad.reason
