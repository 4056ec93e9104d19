"""sd_notify without a dependency (serverio.ops.notify): READY=1 once
listening, STOPPING=1 when the drain begins, to a real AF_UNIX datagram
socket named by $NOTIFY_SOCKET (a path, or '@' for the abstract namespace)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from serverio.ops.notify import notify

pytestmark = pytest.mark.skipif(
    not hasattr(socket, "AF_UNIX") or sys.platform == "win32",
    reason="sd_notify is AF_UNIX datagrams: Windows has none (notify() is a no-op there)",
)


@contextmanager
def receiver(abstract: bool = False) -> Iterator[tuple[socket.socket, str]]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.settimeout(20)
    with tempfile.TemporaryDirectory(prefix="serverio-notify-") as d:
        if abstract:
            name = f"serverio-test-{os.getpid()}-{id(sock)}"
            sock.bind("\0" + name)
            env_name = "@" + name
        else:
            env_name = os.path.join(d, "notify.sock")
            sock.bind(env_name)
        try:
            yield sock, env_name
        finally:
            sock.close()


def test_notify_sends_to_a_path_and_an_abstract_name() -> None:
    with receiver() as (sock, name):
        assert notify("READY=1", {"NOTIFY_SOCKET": name})
        assert sock.recv(64) == b"READY=1"
    if sys.platform.startswith("linux"):
        with receiver(abstract=True) as (sock, name):
            assert notify("STOPPING=1", {"NOTIFY_SOCKET": name})
            assert sock.recv(64) == b"STOPPING=1"


def test_notify_without_a_socket_does_nothing() -> None:
    assert not notify("READY=1", {})
    assert not notify("READY=1", {"NOTIFY_SOCKET": "relative/name"})
    missing = os.path.join(tempfile.gettempdir(), f"serverio-none-{os.getpid()}.sock")
    assert not notify("READY=1", {"NOTIFY_SOCKET": missing})  # nobody listens: ignored


@pytest.mark.parametrize("extra", [(), ("--workers", "2")], ids=["one-process", "workers"])
def test_server_sends_ready_then_stopping(root: Path, extra: tuple[str, ...]) -> None:
    if extra and not sys.platform.startswith("linux"):
        pytest.skip("--workers runs on Linux only (SO_REUSEPORT balancing)")
    with receiver() as (sock, name):
        proc = subprocess.Popen(
            [sys.executable, "-m", "serverio", "0", "-d", str(root), "-q", *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "NOTIFY_SOCKET": name},
        )
        try:
            assert sock.recv(64) == b"READY=1"  # bounded by the socket timeout
            assert proc.stdout is not None
            assert proc.stdout.readline().startswith("Serving ")  # printed before READY
            proc.send_signal(signal.SIGTERM)
            assert sock.recv(64) == b"STOPPING=1"
            proc.communicate(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=10)
        assert proc.returncode == 0
        sock.settimeout(0.2)
        with pytest.raises(TimeoutError):
            sock.recv(64)  # exactly two messages: workers never notify themselves
