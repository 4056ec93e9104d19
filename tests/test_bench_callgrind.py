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


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")
@pytest.mark.parametrize("server", ["serverio", "tls-floor"])
def test_the_tls_pair_serves_the_file_over_tls(
    settled_root: Path, tmp_path: Path, server: str
) -> None:
    """``pair --tls`` (``callgrind --tls``): serverio's connection and the
    floor each answer over TLS; run_tls checks the first answer's status
    and bytes (SystemExit otherwise) and times the rest."""
    from bench.servers import self_signed

    made = self_signed(tmp_path)
    assert not isinstance(made, str), made
    assert trio.run(pair.run_tls, server, 20, settled_root, *made) > 0


@pytest.mark.parametrize("server", ["serverio", "h11-proxy-floor"])
def test_the_proxy_pair_forwards_through_serverio_and_the_floor(
    settled_root: Path, server: str
) -> None:
    """``pair --proxy`` (``callgrind --proxy [--bare]``): serverio's proxy
    and the h11 floor each forward 20 GETs to the bare upstream and back
    over the socketpair (the loop reads each answer before the next
    request; a proxy that answers nothing fails the deadline)."""

    async def timed() -> float:
        with trio.fail_after(20):
            return await pair.run(server, 20, settled_root, url)

    with pair.bare_upstream(settled_root) as url:
        assert trio.run(timed) > 0


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
    assert callgrind.mode_args(tls=True) == ["--tls"]
    with pytest.raises(callgrind.CallgrindError):
        callgrind.mode_args(tls=True, h2_streams=1)
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


@pytest.mark.parametrize("mode", ["plain", "rules"])
def test_the_listing_driver_serves_the_html_listing_in_each_mode(tmp_path: Path, mode: str) -> None:
    """bench/listingpair.py (``callgrind --listing N``), run as callgrind
    runs it: a copy outside the tree, the tree as working directory; each
    listing of the folder of N files is a whole 200 (its length grows with
    N: the page lists them all)."""
    driver = tmp_path / "listingpair.py"
    shutil.copy(Path(commits.REPO) / "bench" / "listingpair.py", driver)
    lengths = []
    for entries in (5, 40):
        proc = subprocess.run(
            [sys.executable, str(driver), mode, "--entries", str(entries), "-n", "3"],
            cwd=commits.REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        m = re.search(
            rf"serverio listing \({mode}, {entries} entries\): .* (\d+) bytes", proc.stdout
        )
        assert m is not None, proc.stdout
        lengths.append(int(m[1]))
    assert lengths[1] > lengths[0] + 35 * 40  # a row per file, each at least 40 bytes


def test_the_listing_settings_turn_the_rendered_listings_cache_off(tmp_path: Path) -> None:
    """Every measured request scans and renders: the listing cache (the
    only memo of a listing) keeps nothing; ``rules`` adds the page's rights."""
    from bench import listingpair

    plain = listingpair.settings("plain", tmp_path / "users")
    assert plain == {"listing_cache_size": 0}
    rules = listingpair.settings("rules", tmp_path / "users")
    assert rules["listing_cache_size"] == 0 and rules["upload"] is True
    assert rules["allow"] == ("anonymous:read,list@/", "alice:upload,delete@/")
    assert (tmp_path / "users").read_text().startswith("alice:")


def test_the_listing_mode_runs_the_copied_driver(tmp_path: Path) -> None:
    subject = callgrind.Subject("this checkout", commits.REPO, {})
    mode = [callgrind._LISTING_DRIVER, "rules", "--entries", "30"]
    argv, _ = callgrind._argv(subject, 3, "serverio", "python", tmp_path, mode)
    assert argv[-6:] == [str(tmp_path / "listingpair.py"), "rules", "--entries", "30", "-n", "3"]


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
def test_listing_with_another_workload_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert _bench("callgrind", "--listing", "100", "--h2") == 2
    assert "--listing N is a workload of its own" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
def test_callgrind_listing_prints_instructions_per_listing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _bench("callgrind", "--listing", "20", "-n", "1,3") == 0
    out = capsys.readouterr().out
    assert "Ir/listing (20 entries, plain) (n=1..3)" in out
    m = re.search(r"^\| this checkout \| serverio \| ([\d,]+) \| \+0\.0% \|$", out, re.MULTILINE)
    assert m is not None, out
    assert 100_000 < int(m[1].replace(",", "")) < 500_000_000
