"""--workers N: real processes on SO_REUSEPORT listeners (subprocess tests)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from serverio.ops.cli import main
from testkit import simulation

pytestmark = pytest.mark.slow


@dataclass
class Running:
    proc: subprocess.Popen[str]
    url: str
    admin: str


@contextmanager
def workers(root: Path, *extra: str, n: int = 2) -> Iterator[Running]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "serverio",
            "0",
            "-d",
            str(root),
            "-q",
            "--workers",
            str(n),
            "--admin-bind",
            "127.0.0.1:0",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        serving = proc.stdout.readline()
        admin = proc.stdout.readline()
        assert serving.startswith(f"Serving {root} at http://127.0.0.1:"), serving
        yield Running(
            proc,
            serving.split(" at ", 1)[1].strip(),
            admin.split(" at ", 1)[1].strip().removesuffix("metrics"),
        )
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)
        # No worker outlives the test, whatever happened.
        for pid in _children_of(proc.pid):
            os.kill(pid, signal.SIGKILL)


def _children_of(ppid: int) -> list[int]:
    out = []
    proc = simulation.measuring_proc() or "/proc"
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        try:
            with open(f"{proc}/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == ppid and fields[0] != "Z":
            out.append(int(entry))
    return out


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def metrics(admin: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    _, body = get(admin + "metrics")
    out = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def worker_pids(admin: str) -> set[int]:
    return {
        int(dict(labels)["pid"])
        for (name, labels) in metrics(admin)
        if name == "serverio_worker_accepted_total"
    }


def poll(predicate: Callable[[], bool], limit: float = 20.0) -> None:
    """Bounded wait for state another process owns (no event to wait on)."""
    deadline = time.monotonic() + limit
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def test_connections_spread_across_processes(root: Path) -> None:
    if simulation.windows_refuses_workers(root):
        return
    with workers(root) as w:
        port = int(w.url.rsplit(":", 1)[1].strip("/"))
        for _ in range(200):
            # A new connection each time: the kernel hashes each one to a
            # listener (SO_REUSEPORT), so both processes must get some.
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
                data = b""
                while chunk := s.recv(65536):
                    data += chunk
                assert data.startswith(b"HTTP/1.1 200")
        m = metrics(w.admin)
        per_worker = {
            dict(labels)["pid"]: v
            for (name, labels), v in m.items()
            if name == "serverio_worker_accepted_total"
        }
        assert len(per_worker) == 2
        assert all(v > 0 for v in per_worker.values()), per_worker
        assert sum(per_worker.values()) == 200
        # The aggregated numbers cover all workers.
        assert m[("serverio_accepted_total", ())] == 200
        assert m[("serverio_completed_total", ())] == 200
        assert m[("serverio_response_seconds_count", ())] == 200
        assert m[("serverio_workers_ready", ())] == 2
        assert get(w.admin + "healthz")[0] == 200
        assert set(map(int, per_worker)) == set(_children_of(w.proc.pid))
        w.proc.send_signal(signal.SIGTERM)
        _, err = w.proc.communicate(timeout=30)
    assert w.proc.returncode == 0
    # One draining line and one summary line for all workers, made from
    # the counters each worker handed over as it exited.
    assert "Traceback" not in err
    assert "serverio: draining 2 workers (Ctrl-C again to stop now)" in err.splitlines()
    [stopped] = [ln for ln in err.splitlines() if ln.startswith("serverio: stopped:")]
    assert stopped.startswith(
        "serverio: stopped: 200 requests, 0 client errors (4xx), 0 server errors (5xx), "
    ), stopped


def test_crashed_worker_is_restarted(root: Path) -> None:
    if simulation.windows_refuses_workers(root):
        return
    with workers(root) as w:
        poll(lambda: len(worker_pids(w.admin)) == 2)
        for _ in range(20):
            assert get(w.url + "hello.txt")[0] == 200
        before = worker_pids(w.admin)  # this scrape records each worker's counters
        victim = min(before)
        os.kill(victim, signal.SIGKILL)
        poll(lambda: len(worker_pids(w.admin)) == 2 and victim not in worker_pids(w.admin))
        assert get(w.url + "hello.txt") == (200, b"hello world\n")
        m = metrics(w.admin)
        # The dead worker's counters (as of the last scrape) stay in the sums.
        assert m[("serverio_completed_total", ())] == 21
        assert sum(v for (n, _), v in m.items() if n == "serverio_worker_restarts_total") == 1
        w.proc.send_signal(signal.SIGINT)
        _, err = w.proc.communicate(timeout=30)
    assert w.proc.returncode == 0
    # Logged at WARNING, so visible at the default --log-level info.
    assert re.search(r"WARNING: worker [01] exited with status -9; restarting", err)


def test_crash_loop_gives_up_non_zero(root: Path) -> None:
    if simulation.windows_refuses_workers(root):
        return
    # --log-level error: the per-restart warnings are filtered out, the
    # final error (printed, not logged) is not.
    with workers(root, "--log-level", "error") as w:
        for _ in range(6):  # CRASH_LIMIT + 1 within CRASH_WINDOW
            poll(lambda: len(worker_pids(w.admin)) == 2)
            pid = min(worker_pids(w.admin))
            os.kill(pid, signal.SIGKILL)
            poll(lambda p=pid: p not in worker_pids(w.admin))  # type: ignore[misc]
        _, err = w.proc.communicate(timeout=30)
        assert not _children_of(w.proc.pid)
    assert w.proc.returncode == 1
    assert "workers keep crashing" in err
    assert "restarting" not in err


def test_sigterm_drains_every_worker(root: Path) -> None:
    if simulation.windows_refuses_workers(root):
        return
    (root / "huge.bin").write_bytes(b"x" * 20_000_000)
    with workers(root, "--shutdown-timeout", "20", "-v") as w:
        port = int(w.url.rsplit(":", 1)[1].strip("/"))
        # Six responses larger than the loopback socket buffers, none read
        # past its first byte: with the kernel's hashing, each worker holds
        # some in flight.  All must complete after SIGTERM.
        socks = []
        for _ in range(6):
            s = socket.create_connection(("127.0.0.1", port), timeout=20)
            s.sendall(b"GET /huge.bin HTTP/1.1\r\nHost: t\r\n\r\n")
            assert s.recv(1)
            socks.append(s)
        w.proc.send_signal(signal.SIGTERM)
        poll(lambda: get(w.admin + "healthz")[0] == 503)
        for s in socks:
            got = 1
            while chunk := s.recv(1 << 20):
                got += len(chunk)
            s.close()
            assert got > 20_000_000  # head + full body, then close
        _, err = w.proc.communicate(timeout=30)
    assert w.proc.returncode == 0
    # -v: the supervisor's one counters line adds up what the workers handed over.
    [counters] = [ln for ln in err.splitlines() if ln.startswith("serverio: counters:")]
    assert " completed=6 " in counters and " cancelled=0 " in counters
    assert "Traceback" not in err


def test_missing_so_reuseport_exit_2(
    root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delattr(socket, "SO_REUSEPORT", raising=False)
    assert main(["0", "-d", str(root), "--workers", "2"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        "serverio: error: --workers needs SO_REUSEPORT, which this platform does not support"
    ]


def test_workers_port_in_use_exit_3(root: Path) -> None:
    if simulation.windows_refuses_workers(root):
        return
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    try:
        port = s.getsockname()[1]
        r = subprocess.run(
            [sys.executable, "-m", "serverio", str(port), "-d", str(root), "--workers", "2"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    finally:
        s.close()
    assert r.returncode == 3
    assert r.stderr.splitlines() == [
        f"serverio: error: cannot listen on 127.0.0.1 port {port}: Address already in use"
    ]


def test_workers_exit_when_the_supervisor_is_killed(root: Path) -> None:
    """SIGKILL leaves no chance to forward anything: the workers notice EOF
    on the pipe the supervisor held and drain on their own."""
    if simulation.windows_refuses_workers(root):
        return
    with workers(root) as w:
        poll(lambda: len(worker_pids(w.admin)) == 2)
        pids = worker_pids(w.admin)
        w.proc.kill()
        w.proc.communicate(timeout=30)

        def gone() -> bool:
            for pid in pids:
                try:
                    with open(f"{simulation.measuring_proc() or '/proc'}/{pid}/stat") as f:
                        if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                            return False
                except FileNotFoundError:
                    pass
            return True

        poll(gone)
