"""bench callgrind's modes: the HTTP/2 pair loop serves whole streams, and
``python -m bench callgrind --h2`` counts instructions per stream under valgrind."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from bench import callgrind, cli, commits, pair
from bench.h2profile import stream_loop


def _bench(*argv: str) -> int:
    return cli.dispatch(cli.build_parser().parse_args(argv))


@pytest.fixture(scope="module")
def settled_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pair.py's fixture: 1k.bin, left unchanged for the cache's 2 s racy window."""
    root = tmp_path_factory.mktemp("pair")
    (root / "1k.bin").write_bytes(bytes(range(256)) * 4)
    time.sleep(2.1)
    return root


@pytest.mark.parametrize("streams", [1, 4])
def test_h2_pair_loop_gets_every_stream_whole(settled_root: Path, streams: int) -> None:
    # stream_loop raises SystemExit unless the DATA of n streams adds up to
    # n * 1024 bytes and each stream ended; it returns microseconds per stream.
    us = trio.run(pair.run_h2, 30, streams, settled_root)
    assert us > 0


def test_h2_pair_loop_rejects_a_short_body(settled_root: Path) -> None:
    # The check the figure rests on: a size the server does not send fails.
    with pytest.raises(SystemExit, match="body bytes, expected"):
        trio.run(stream_loop, 5, 1, 1000, settled_root, "/1k.bin")


def test_the_wall_clock_stands_still_after_freezing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "time", time.time)  # restored after the test
    frozen = pair.freeze_wall_clock()
    start = time.perf_counter()
    time.sleep(0.02)
    assert time.time() == frozen
    assert time.perf_counter() > start  # trio's clock still runs


def test_mode_arguments_of_pair_py() -> None:
    assert callgrind.mode_args() == []
    assert callgrind.mode_args(churn=8) == ["--churn", "8"]
    assert callgrind.mode_args(h2_streams=1) == ["--h2", "--streams", "1"]
    assert callgrind.mode_args(assets="plain") == ["--assets", "--variant", "plain"]
    assert callgrind.mode_args(proxy=True) == ["--proxy"]
    with pytest.raises(callgrind.CallgrindError):
        callgrind.mode_args(churn=8, proxy=True)
    with pytest.raises(callgrind.CallgrindError):
        callgrind.mode_args(churn=8, h2_streams=1)
    with pytest.raises(callgrind.CallgrindError):
        callgrind.mode_args(churn=8, assets="identity")


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
def test_churn_and_h2_together_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert _bench("callgrind", "--h2", "--churn", "4") == 2
    assert "choose one" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
def test_callgrind_h2_prints_instructions_per_stream(capsys: pytest.CaptureFixture[str]) -> None:
    assert _bench("callgrind", "--h2", "-n", "10,30") == 0
    out = capsys.readouterr().out
    assert "Ir/stream (h2, 1 in flight) (n=10..30)" in out
    m = re.search(r"^\| this checkout \| serverio \| ([\d,]+) \| \+0\.0% \|$", out, re.MULTILINE)
    assert m is not None, out
    # A warm stream costs some hundred thousand instructions here (client and
    # server); the bounds catch a mode that measures nothing or start-up.
    assert 50_000 < int(m[1].replace(",", "")) < 5_000_000


@pytest.mark.parametrize("mode", ["plain", "auth", "access", "cookie", "cookie-access"])
def test_the_rules_driver_serves_the_warm_get_in_each_mode(tmp_path: Path, mode: str) -> None:
    """bench/rulespair.py (``callgrind --rules``), run as callgrind runs it:
    a copy outside the tree, the tree as working directory; the GET is
    served whole (pair.run waits for the 1 KiB body) under each rule set."""
    driver = tmp_path / "rulespair.py"
    shutil.copy(Path(commits.REPO) / "bench" / "rulespair.py", driver)
    proc = subprocess.run(
        [sys.executable, str(driver), mode, "-n", "20"],
        cwd=commits.REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"serverio ({mode}):" in proc.stdout


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
def test_rules_with_another_workload_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert _bench("callgrind", "--rules", "access", "--h2") == 2
    assert "--rules is the warm HTTP/1.1 GET" in capsys.readouterr().err
