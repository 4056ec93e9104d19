"""The adversarial reliability suite, with reduced counts for CI.

Each scenario lives in testkit/reliability.py (socket scenarios against a real
server process on 127.0.0.1) or testkit/fuzzing.py (the raw-request fuzzer
over memory streams) and returns its figures plus a list of ``problems``:
every guarantee it checks, including leak accounting (tasks, fds, threads
of the server before and after), lands there when it breaks.  These tests
assert on that list and on the key figures, so a broken guarantee fails
here with the figure in the message.  ``python bench/stress.py`` runs the
same functions with the issue's full counts and prints the figures that
docs/reliability.md records.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import serverio.net.admission
from testkit import fuzzing, reliability
from testkit.fuzzing import Case, CaseFailure, make_case, make_env, run_case

from .conftest import connect, make_config, running_server

# Timing against stalled threads and transfers in flight: not beside another
# worker (tests/conftest.py, SERIAL_SKIP).
pytestmark = pytest.mark.serial


def check(fig: dict[str, Any]) -> dict[str, Any]:
    assert fig["problems"] == [], json.dumps(fig, indent=1, default=str)
    assert fig["ok"]
    return fig


# ------------------------------------------------------------------ sockets


@pytest.mark.slow
def test_slowloris() -> None:
    fig = check(reliability.slowloris(conns=200, head_timeout=1.0, duration=3.0))
    assert fig["closed"] == 200 and fig["server_timeouts_head"] == 200
    assert fig["close_after_max_s"] <= 2.0
    assert fig["good_errors"] == 0 and fig["good_requests"] > 50
    # Loose bound for a shared CI machine; bench/stress.py checks < 50 ms.
    assert fig["good_p99_ms"] < 500


@pytest.mark.slow
def test_slowhttptest_independent_check() -> None:
    """The same attack by another tool (Debian's slowhttptest, if installed)."""
    fig = check(reliability.slowhttptest(conns=200, head_timeout=1.0, length=6))
    if "skipped" in fig:
        pytest.skip(fig["skipped"])
    assert fig["seconds_unavailable"] == 0 and fig["server_timeouts_head"] >= 200


@pytest.mark.slow
def test_nonreading_clients() -> None:
    fig = check(reliability.nonreaders(conns=100, write_timeout=1.5))
    assert fig["server_timeouts_write"] == 100 and fig["clients_cut_short"] == 100
    assert fig["rss_hwm_mib"] < 200


@pytest.mark.slow
def test_nonreading_clients_buffered_path() -> None:
    fig = check(reliability.nonreaders(conns=50, write_timeout=1.5, sendfile=False))
    assert fig["server_timeouts_write"] == 50
    assert fig["rss_hwm_mib"] < 200


@pytest.mark.slow
def test_connection_flood() -> None:
    fig = check(reliability.flood(max_conns=32, flood=400, waves=3))
    for wave in fig["per_wave"]:
        assert wave["admitted"] == 32
        assert wave["rejected_503"] == 368 and wave["closed_without_503"] == 0
        assert wave["client_during_flood_status"] in (0, 503)
    assert fig["reject_max_ms"] < 3000 and fig["recovery_max_ms"] < 1000


async def test_turned_away_past_rejector_cap_still_get_503(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the flood scenario: with more excess connections at once than
    the server runs rejector tasks (256), the rest were closed without a
    response.  They must get their 503 too (written at once, no linger)."""
    monkeypatch.setattr(serverio.net.admission, "_MAX_REJECTORS", 0)
    async with running_server(make_config(root, max_connections=1)) as (srv, port):
        holder = await connect(port)
        assert (await holder.get("/hello.txt")).status == 200
        for _ in range(5):
            turned_away = await connect(port)
            with trio.fail_after(5):
                r = await turned_away.get("/hello.txt")
            assert r.status == 503 and r.header("retry-after") == "1"
            await turned_away.stream.aclose()
        await holder.stream.aclose()
    assert srv.stats.conns.rejected == 5


@pytest.mark.slow
def test_filesystem_stall() -> None:
    fig = check(reliability.fsstall(workers=4, queue=8, extra=60))
    if "skipped" in fig:
        pytest.skip(fig["skipped"])
    assert fig["extra_statuses"] == {"503": 60}
    assert fig["late_closed"] >= 1
    assert fig["fds_before_after"][0] == fig["fds_before_after"][1]


@pytest.mark.slow
def test_shutdown_under_load() -> None:
    fig = check(reliability.shutdown(transfers=40, slow=10, idle=10, shutdown_timeout=4.0))
    assert fig["fast_intact"] == "30/30" and fig["slow_cut"] == "10/10"
    assert fig["exit_status"] == 0 and fig["connects_after_signal_served"] == 0


@pytest.mark.slow
def test_truncation_under_load() -> None:
    fig = check(reliability.truncation(transfers=120, files=4, size=2 * reliability.MiB))
    for mode in ("sendfile", "buffered"):
        out = fig[mode]["outcomes"]
        assert out["mismatch"] == 0 and out["overlong"] == 0
        assert out["intact"] > 0 and out["cut"] > 0, out


# ------------------------------------------------------------------ fuzzing

FUZZ_CASES = int(os.environ.get("SERVERIO_FUZZ_CASES", "3000"))


async def test_raw_request_fuzzer(tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    """A short fuzz budget in CI; bench/stress.py fuzz runs a million cases."""
    env = make_env(tmp_path)
    try:
        report = await fuzzing.fuzz(env, FUZZ_CASES, seed=2026)
    finally:
        env.server.opener.close()
    assert report.failures == [], report.as_dict()
    assert report.cases == FUZZ_CASES
    assert report.fds_after == report.fds_before
    # The generator reaches every kind of ending, or the oracle checks little.
    assert set(report.outcomes) == {"closed", "clean", "absorbed", "stalled"}
    assert {200, 206, 304, 400, 404, 408, 431} <= set(report.statuses)
    assert set(report.transports) == {"memory", "socket"}


async def test_fuzzer_oracle_catches_smuggling(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """The oracle itself: a body parsed as a request is reported."""
    env = make_env(tmp_path)
    inner = b"GET /SMUGGLED HTTP/1.1\r\nHost: t\r\n\r\n"
    honest = Case(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n" + inner, [], smuggle_check=True)
    honest.chunks = [honest.data]
    with pytest.raises(CaseFailure, match="body was parsed"):
        await run_case(env, honest)
    env.server.opener.close()


async def test_fuzzer_cases_are_reproducible(tmp_path: Path) -> None:
    assert make_case(7, 123) == make_case(7, 123)
    assert make_case(7, 123) != make_case(7, 124)
