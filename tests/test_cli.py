"""The command line, as scripts and benchmark harnesses use it (subprocesses)."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from testkit import simulation


@contextmanager
def serve(*args: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "serverio", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        yield proc, line
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)


# A bound on a hang, not a speed check: Windows CPython under Wine took over
# 30 s to start, fail to bind and exit when the 2-vCPU machine was running
# five other jobs (a CI run by hand, 2026-12-05); the same test passed when run again.
RUN_CLI_TIMEOUT = 120


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "serverio", *args],
        capture_output=True,
        text=True,
        timeout=RUN_CLI_TIMEOUT,
    )


def _stalled_download(line: str) -> socket.socket:
    """A client of the server that printed ``line``: it asks for /huge.bin,
    sees the response start, then stops reading (the drain must wait)."""
    port = int(line.rsplit(":", 1)[1].strip("/\n"))
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    s.sendall(b"GET /huge.bin HTTP/1.1\r\nHost: t\r\n\r\n")
    s.recv(100)  # the response has started; we then stop reading
    return s


@pytest.mark.skipif(
    simulation.REAL_WINDOWS,
    reason="needs an external SIGTERM/SIGINT: Windows has none (send_signal is TerminateProcess); "
    "the graceful stop there is POST /shutdown (test_lame_duck.py)",
)
def test_serving_line_and_sigterm_exit_0(root: Path) -> None:
    with serve("0", "-d", str(root), "-q") as (proc, line):
        assert line.startswith(f"Serving {root} at http://127.0.0.1:")
        url = line.split(" at ", 1)[1].strip()
        with urllib.request.urlopen(url + "hello.txt", timeout=10) as resp:
            assert resp.read() == b"hello world\n"
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(url + "missing.txt", timeout=10)
        assert missing.value.code == 404
        missing.value.close()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=15)
    assert proc.returncode == 0
    assert out == ""  # exactly one stdout line, already read
    assert "Traceback" not in err
    assert "draining" not in err  # nothing was in flight: no "draining 0 responses"
    # One short exit line; the counters only with -v (test_verbose_exit_counters).
    # A 404 is the client's error, told apart from the server's (issue 45).
    [stopped] = [ln for ln in err.splitlines() if ln.startswith("serverio: stopped:")]
    summary = (
        r"serverio: stopped: 2 requests, 1 client error \(4xx\), 0 server errors \(5xx\), "
        r"\d+ B sent, up \d+\.\d s"
    )
    assert re.fullmatch(summary, stopped), stopped
    assert "accepted=" not in err


@pytest.mark.skipif(
    simulation.REAL_WINDOWS,
    reason="needs an external SIGTERM/SIGINT: Windows has none (send_signal is TerminateProcess); "
    "the graceful stop there is POST /shutdown (test_lame_duck.py)",
)
def test_verbose_exit_counters(root: Path) -> None:
    with serve("0", "-d", str(root), "-q", "-v") as (proc, line):
        url = line.split(" at ", 1)[1].strip()
        with urllib.request.urlopen(url + "hello.txt", timeout=10) as resp:
            resp.read()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    assert proc.returncode == 0
    lines = err.splitlines()
    assert lines[0].startswith(
        "serverio: stopped: 1 request, 0 client errors (4xx), 0 server errors (5xx), "
    )
    assert lines[1].startswith("serverio: counters: accepted=1 rejected=0 completed=1 ")
    assert "cache_file_hits=" in lines[1] and len(lines) == 2


@pytest.mark.skipif(
    simulation.REAL_WINDOWS,
    reason="needs an external SIGTERM/SIGINT: Windows has none (send_signal is TerminateProcess); "
    "the graceful stop there is POST /shutdown (test_lame_duck.py)",
)
def test_signal_during_transfer_says_draining(root: Path) -> None:
    """Ctrl-C while a download runs: one line at once, naming the responses
    the drain waits for and the way out; the second Ctrl-C cuts it."""
    (root / "huge.bin").write_bytes(b"z" * 64_000_000)
    with serve("0", "-d", str(root), "-q", "--shutdown-timeout", "60") as (proc, line):
        s = _stalled_download(line)
        proc.send_signal(signal.SIGINT)
        assert proc.stderr is not None
        first = proc.stderr.readline()  # bounded: the process is killed on failure
        assert first == "serverio: draining 1 response (Ctrl-C again to stop now)\n"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)
        s.close()
    assert proc.returncode == 0
    lines = err.splitlines()
    assert lines[0] == "serverio: stopping now"
    assert lines[-1].startswith(
        "serverio: stopped: 0 requests, 0 client errors (4xx), 0 server errors (5xx), "
    )
    assert len(lines[-1]) < 100


@pytest.mark.skipif(
    simulation.REAL_WINDOWS,
    reason="needs an external SIGTERM/SIGINT: Windows has none (send_signal is TerminateProcess); "
    "the graceful stop there is POST /shutdown (test_lame_duck.py)",
)
def test_sigint_and_access_log(root: Path) -> None:
    with serve("0", "-d", str(root), "--access-log", "combined") as (proc, line):
        url = line.split(" at ", 1)[1].strip()
        req = urllib.request.Request(url + "hello.txt", headers={"User-Agent": 'evil"\x7f'})
        with urllib.request.urlopen(req, timeout=10) as resp:
            resp.read()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=15)
    assert proc.returncode == 0
    log_line = next(x for x in err.splitlines() if "GET /hello.txt" in x)
    assert log_line.endswith('"-" "evil\\x22\\x7f"')


@pytest.mark.xfail(
    sys.platform == "win32",
    reason="under Wine 8.0 serverio exits 1 binding ::1 (not yet understood; not seen on Linux)",
    strict=False,
)
def test_ipv6_loopback(root: Path) -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 in this kernel")
    try:
        s = socket.socket(socket.AF_INET6)
        s.bind(("::1", 0))
        s.close()
    except OSError:
        pytest.skip("::1 is not configured on this machine")
    with serve("0", "-b", "::1", "-d", str(root), "-q") as (proc, line):
        assert "http://[::1]:" in line
        url = line.split(" at ", 1)[1].strip()
        with urllib.request.urlopen(url + "hello.txt", timeout=10) as resp:
            assert resp.status == 200
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=15)
    assert proc.returncode == 0


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--head-timeout", "-1"], "--head-timeout"),
        (["--keepalive-timeout", "0"], "--keepalive-timeout"),
        (["--write-timeout", "nan"], "--write-timeout"),
        (["--max-connections", "0"], "--max-connections"),
        (["--head-timeout", "abc"], "seconds"),
        (["-d", "/nonexistent/dir"], "does not exist"),
        (["70000"], "port"),
        (["--access-log", "xml"], "--access-log"),
        (["--fs-workers", "-1"], "--fs-workers"),
        (["--fs-queue", "5"], "--fs-queue needs --fs-workers"),
        (["--fs-workers", "100000"], "absurd"),
        (["--work-queue", "9999999", "--work-workers", "2"], "absurd"),
        (["--fs-cache-valid", "-1"], "--fs-cache-valid"),
        (["--fs-cache-valid", "inf"], "--fs-cache-valid"),
        (["--file-cache-size", "lots"], "is not a size"),
        (["--index", "../x"], "--index"),
        (["--cache-control", "a\tb"], "--cache-control"),
        (["--bogus"], "unrecognized"),
        (["--http2", "--no-http2"], "contradict"),
        (["--h2-max-streams", "0"], "--h2-max-streams"),
        (["--h2-max-streams", "100000"], "absurd"),
        (["--h2-max-resets", "0"], "--h2-max-resets"),
    ],
)
def test_invalid_values_exit_2_one_line(root: Path, args: list[str], needle: str) -> None:
    if "-d" not in args:
        args = [*args, "-d", str(root)]
    r = run_cli(*args)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("serverio: error:"), r.stderr
    assert needle in lines[0]
    assert r.stdout == ""


def test_port_in_use_exit_3(root: Path) -> None:
    """Address in use has its own status (docs/cli.md "Exit status"), apart
    from 2 (usage): a script can retry or pick another port."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    try:
        port = s.getsockname()[1]
        r = run_cli(str(port), "-d", str(root))
    finally:
        s.close()
    assert r.returncode == 3
    where = f"serverio: error: cannot listen on 127.0.0.1 port {port}: "
    if simulation.REAL_WINDOWS:  # WSAEADDRINUSE's text is Windows' own (none under Wine)
        assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith(where)
        return
    assert r.stderr.strip().splitlines() == [where + "Address already in use"]


def test_admin_bind_in_use_exit_3(root: Path) -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    try:
        port = s.getsockname()[1]
        r = run_cli("0", "-d", str(root), "--admin-bind", f"127.0.0.1:{port}")
    finally:
        s.close()
    assert r.returncode == 3, r.stderr
    assert r.stderr.startswith("serverio: error: cannot listen on --admin-bind"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_bind_refused_otherwise_exit_2(root: Path) -> None:
    """A bind error that is not EADDRINUSE (an address this host does not
    have: EADDRNOTAVAIL) stays a configuration error."""
    r = run_cli("0", "-d", str(root), "-b", "192.0.2.1")  # TEST-NET-1, never bound
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("serverio: error: cannot listen on 192.0.2.1 port 0"), r.stderr


def test_help_mentions_safe_default() -> None:
    r = run_cli("--help-all")
    text = " ".join(r.stdout.split())  # argparse wraps the description
    assert r.returncode == 0 and "127.0.0.1" in text and "all interfaces" in text
    short = " ".join(run_cli("--help").stdout.split())
    assert "Binds 127.0.0.1 unless told otherwise (-b 0.0.0.0 serves the network)" in short


def test_console_script_is_declared() -> None:
    import tomllib

    data = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    assert data["project"]["scripts"]["serverio"] == "serverio.ops.cli:main"


@pytest.mark.skipif(
    simulation.REAL_WINDOWS,
    reason="needs an external SIGTERM/SIGINT: Windows has none (send_signal is TerminateProcess); "
    "the graceful stop there is POST /shutdown (test_lame_duck.py)",
)
def test_second_signal_aborts_at_once(root: Path) -> None:
    """SIGTERM starts the drain; a second SIGTERM cuts it short."""
    (root / "huge.bin").write_bytes(b"z" * 64_000_000)
    with serve("0", "-d", str(root), "-q", "--shutdown-timeout", "60") as (proc, line):
        s = _stalled_download(line)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=1.5)
            raise AssertionError("the drain should still be waiting for the transfer")
        except subprocess.TimeoutExpired:
            pass
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        s.close()
    assert proc.returncode == 0


def test_http2_on_by_default_and_switched_off() -> None:
    from serverio.ops.cli import build_parser, config_from_args

    parser = build_parser()
    on = config_from_args(parser.parse_args(["-d", ".", "--http2", "--h2-max-streams", "7"]))
    assert on.h2.http2 and on.h2.h2_max_streams == 7
    assert config_from_args(parser.parse_args(["-d", "."])).h2.http2
    assert not config_from_args(parser.parse_args(["-d", ".", "--no-http2"])).h2.http2
