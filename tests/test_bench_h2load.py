"""The benchmark's HTTP/2 pieces: h2load's report and log parsed, the h2 probe against serverio."""

from __future__ import annotations

import shutil
import subprocess
from functools import partial
from pathlib import Path

import pytest
import trio

from bench.h2load import (
    H2loadParseError,
    h2load_command,
    log_percentiles,
    parse_h2load_output,
    percentile,
)
from bench.h2probe import H2ProbeError, h2_get

from .conftest import make_config, running_server

H2LOAD = shutil.which("h2load")

# h2load 1.52 (Debian bookworm), a -D run; the request times mix units.
# (The traffic line is one line in h2load's output; split here for width.)
REPORT = """\
starting benchmark...
spawning thread #0: 64 total client(s). 3000 total requests
Application protocol: h2c
Main benchmark duration is over for thread #0. Stopping all clients.
Stopped all clients for thread #0

finished in 2.01s, 2429.00 req/s, 2.53MB/s
requests: 4858 total, 4922 started, 4858 done, 4850 succeeded, 8 failed, 2 errored, 1 timeout
status codes: 4850 2xx, 0 3xx, 3 4xx, 5 5xx
traffic: 5.06MB (5301576) total, 190.78KB (195360) headers (space savings 80.67%), \
4.74MB (4974592) data
                     min         max         mean         sd        +/- sd
time for request:      812us      1.71s     26.10ms     10.38ms    69.72%
time for connect:       96us       223us       164us        42us    75.00%
time to 1st byte:     7.85ms     35.01ms     18.95ms     10.43ms    62.50%
req/s           :     297.92      308.94      303.55        3.14    75.00%
"""


def test_h2load_report_is_parsed_with_units_and_every_error_kind() -> None:
    r = parse_h2load_output(REPORT, {"50": 1.5, "99": 9.0})
    assert (r.duration_s, r.rps, r.done, r.succeeded) == (2.01, 2429.0, 4858, 4850)
    assert (r.failed, r.errored, r.timeout) == (8, 2, 1)
    assert r.status == {"2xx": 4850, "3xx": 0, "4xx": 3, "5xx": 5}
    assert (r.bytes_total, r.bytes_data, r.protocol) == (5301576, 4974592, "h2c")
    assert r.latency_min_ms == pytest.approx(0.812)
    assert r.latency_max_ms == pytest.approx(1710.0)
    assert (r.latency_mean_ms, r.latency_sd_ms) == (26.10, 10.38)
    assert r.error_count == 8 + 2 + 1 + 3 + 5
    assert (r.p50_ms, r.p99_ms) == (1.5, 9.0)


def test_h2load_output_without_a_summary_is_an_error() -> None:
    with pytest.raises(H2loadParseError, match="finished"):
        parse_h2load_output("starting benchmark...\nconnect to 127.0.0.1:1 failed\n")


def test_log_percentiles_are_nearest_rank_over_the_duration_column() -> None:
    # start time (us since epoch), status, microseconds until the response ended
    lines = [f"1796126339226377\t200\t{(i + 1) * 1000}\n" for i in range(1000)]
    lines += ["garbage\n", "1\t200\n", ""]
    p = log_percentiles(reversed(lines))
    assert p == {"50": 500.0, "90": 900.0, "99": 990.0, "99.9": 999.0}
    assert log_percentiles([]) == {}
    assert percentile([1.0], 99.0) == 1.0 and percentile([], 50.0) == 0.0


def test_h2load_command_pins_and_bounds() -> None:
    argv = h2load_command(
        ["http://127.0.0.1:1/a", "http://127.0.0.1:1/b"],
        connections=16,
        streams=32,
        duration_s=0,
        h1=True,
        log_file=Path("/tmp/x.log"),
        cpu=1,
    )
    assert argv == [
        "taskset",
        "-c",
        "1",
        "h2load",
        "-t1",
        "-c16",
        "-m32",
        "-D1",
        "-N5",
        "--h1",
        "--log-file=/tmp/x.log",
        "http://127.0.0.1:1/a",
        "http://127.0.0.1:1/b",
    ]


async def test_h2_probe_reads_every_path_over_h2c_and_tls(
    root: Path, cert_files: tuple[Path, Path]
) -> None:
    cert, key = cert_files
    big = (root / "big.bin").read_bytes()
    for cfg, tls in (
        (make_config(root), False),
        (make_config(root, certfile=str(cert), keyfile=str(key)), True),
    ):
        async with running_server(cfg) as (srv, port):
            paths = ["/hello.txt", "/big.bin", "/nope"]
            proto, answers = await trio.to_thread.run_sync(
                partial(h2_get, "127.0.0.1", port, f"127.0.0.1:{port}", paths, tls=tls)
            )
            assert srv.stats.h2.streams == 3
        assert proto == ("h2" if tls else "h2c")
        assert [a.status for a in answers] == [200, 200, 404]
        assert bytes(answers[0].body) == b"hello world\n" and bytes(answers[1].body) == big
        assert all(a.ended for a in answers)


async def test_h2_probe_refuses_a_server_without_http2(root: Path) -> None:
    async with running_server(make_config(root, http2=False)) as (_, port):
        with pytest.raises((H2ProbeError, OSError)):
            await trio.to_thread.run_sync(
                lambda: h2_get("127.0.0.1", port, "x", ["/hello.txt"], tls=False, timeout_s=5)
            )


@pytest.mark.slow
@pytest.mark.skipif(H2LOAD is None, reason="h2load (nghttp2-client) is not installed")
async def test_real_h2load_report_and_log_parse(root: Path, tmp_path: Path) -> None:
    assert H2LOAD is not None
    log = tmp_path / "req.log"
    async with running_server(make_config(root)) as (srv, port):
        with trio.fail_after(30):
            done = await trio.run_process(
                [
                    H2LOAD,
                    "-n200",
                    "-c4",
                    "-m4",
                    f"--log-file={log}",
                    f"http://127.0.0.1:{port}/hello.txt",
                ],
                capture_stdout=True,
                capture_stderr=True,
                stdin=subprocess.DEVNULL,
            )
    percentiles = log_percentiles(log.read_text().splitlines())
    result = parse_h2load_output(done.stdout.decode(), percentiles)
    assert result.protocol == "h2c" and result.succeeded == 200 and result.error_count == 0
    assert result.status["2xx"] == 200 and srv.stats.h2.streams == 200
    # h2load prints its maximum with two decimals (3.612 ms as "3.61ms");
    # the log's times are microseconds: the two agree to 0.01 ms.
    assert 0 < result.p50_ms <= result.p99_ms <= result.latency_max_ms + 0.01
