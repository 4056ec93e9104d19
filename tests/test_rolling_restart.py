"""Rolling restart of three replicas behind a real HAProxy, under load.

HAProxy (Debian's ``haproxy``) runs on loopback with active health checks
on each replica's ``/healthz`` (admin port): ``inter 200ms fall 1 rise 1``,
and with ``retries 0``, no ``option redispatch`` and no ``retry-on``, so
the balancer retries nothing and hides no failure: a refused connection, a
reset or a 5xx from a replica reaches the client.  A bounded Python client
(4 threads, keep-alive) sends requests all along while each replica in turn
gets SIGTERM and is started again on the same ports.

With ``--shutdown-delay`` (longer than one check interval) no request
fails; without it requests fail, which shows the test can fail.
"""

from __future__ import annotations

import http.client
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from .fleet import request

pytestmark = pytest.mark.slow

HAPROXY = shutil.which("haproxy")
BODY = b"hello world\n"
CHECK_INTERVAL_MS = 200


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class Load:
    port: int
    sent: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self) -> None:
        conn: http.client.HTTPConnection | None = None
        while not self.stop.is_set():
            ok = False
            why = ""
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                conn.request("GET", "/hello.txt")
                resp = conn.getresponse()
                body = resp.read()
                ok = resp.status == 200 and body == BODY
                why = f"{resp.status} {len(body)} bytes"
                if resp.will_close:
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException) as exc:
                why = type(exc).__name__
                if conn is not None:
                    conn.close()
                conn = None
            with self.lock:
                self.sent += 1
                if not ok:
                    self.failed += 1
                    if len(self.errors) < 20:
                        self.errors.append(why)
            if not ok:
                time.sleep(0.01)
        if conn is not None:
            conn.close()


def _haproxy_cfg(front: int, backends: list[tuple[int, int]]) -> str:
    servers = "\n".join(
        f"    server r{i} 127.0.0.1:{port} check port {admin}"
        for i, (port, admin) in enumerate(backends)
    )
    return f"""\
global
    maxconn 512
defaults
    mode http
    timeout connect 2s
    timeout client 10s
    timeout server 10s
    retries 0
frontend fe
    bind 127.0.0.1:{front}
    default_backend be
backend be
    balance roundrobin
    option httpchk GET /healthz
    http-check expect status 200
    default-server inter {CHECK_INTERVAL_MS}ms fall 1 rise 1
{servers}
"""


def _replica(root: Path, port: int, admin: int, delay: float) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "serverio", str(port), "-d", str(root), "-q", "-v"]
    proc = subprocess.Popen(
        [*argv, "--admin-bind", f"127.0.0.1:{admin}", "--shutdown-delay", str(delay)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith("Serving "), proc.stderr
    return proc


def _completed(stderr: str) -> int:
    m = re.search(r"completed=(\d+)", stderr)
    assert m, stderr
    return int(m[1])


def _rolling_restart(root: Path, delay: float) -> tuple[Load, list[int]]:
    assert HAPROXY is not None
    ports = _free_ports(7)
    front, backends = ports[0], [(ports[1 + 2 * i], ports[2 + 2 * i]) for i in range(3)]
    cfg = root.parent / "haproxy.cfg"
    cfg.write_text(_haproxy_cfg(front, backends))
    procs = [_replica(root, p, a, delay) for p, a in backends]
    ha = subprocess.Popen(
        [HAPROXY, "-db", "-f", str(cfg)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    load = Load(front)
    threads = [threading.Thread(target=load.run) for _ in range(4)]
    try:
        deadline = time.monotonic() + 5
        while True:  # every replica up in HAProxy's eyes: some requests succeed
            try:
                if request(f"http://127.0.0.1:{front}/", "/hello.txt")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "HAProxy never came up"
            time.sleep(0.05)
        time.sleep(3 * CHECK_INTERVAL_MS / 1000)
        for t in threads:
            t.start()
        time.sleep(0.5)
        for i, (port, admin) in enumerate(backends):
            procs[i].send_signal(signal.SIGTERM)
            _, err = procs[i].communicate(timeout=30)
            assert procs[i].returncode == 0, err
            procs[i] = _replica(root, port, admin, delay)
            # Healthy again in HAProxy's eyes before the next one goes.
            time.sleep(3 * CHECK_INTERVAL_MS / 1000)
        time.sleep(0.5)  # traffic to the restarted replicas
    finally:
        load.stop.set()
        for t in threads:
            if t.is_alive():
                t.join(timeout=10)
        ha.send_signal(signal.SIGTERM)
        ha.communicate(timeout=10)
        completed = []
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
            _, err = p.communicate(timeout=30)
            completed.append(_completed(err))
    return load, completed


@pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (apt-get install haproxy)")
def test_rolling_restart_with_shutdown_delay_fails_no_request(tmp_path: Path) -> None:
    root = tmp_path / "www"
    root.mkdir()
    (root / "hello.txt").write_bytes(BODY)
    started = time.monotonic()
    load, completed = _rolling_restart(root, delay=1.0)
    took = time.monotonic() - started
    print(
        f"rolling restart: {load.sent} requests sent, {load.failed} failed, "
        f"per replica after restart {completed}, {took:.1f} s"
    )
    assert load.sent > 300
    assert load.failed == 0, load.errors
    assert all(n > 0 for n in completed), completed  # each new process took traffic


@pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (apt-get install haproxy)")
def test_rolling_restart_without_shutdown_delay_fails_requests(tmp_path: Path) -> None:
    root = tmp_path / "www"
    root.mkdir()
    (root / "hello.txt").write_bytes(BODY)
    load, _ = _rolling_restart(root, delay=0)
    print(f"without delay: {load.sent} requests sent, {load.failed} failed: {load.errors[:5]}")
    assert load.failed > 0
