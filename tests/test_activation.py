"""Socket activation: --fd N and systemd's LISTEN_FDS/LISTEN_PID."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from serverio.errors import ConfigError
from serverio.net.activation import systemd_fds
from testkit import simulation
from testkit.simulation import stop_gracefully

from .test_cli import run_cli

pytestmark = pytest.mark.slow


def _listening() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    return s


def _serve_and_stop(cmd: list[str], pass_fds: tuple[int, ...], port: int) -> str:
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, pass_fds=pass_fds
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert f"at http://127.0.0.1:{port}/" in line, line
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/hello.txt", timeout=10) as resp:
            assert resp.read() == b"hello world\n"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    return err


def test_fd_inherited_socket(root: Path) -> None:
    if simulation.windows_refuses_fds(root, "--fd", "3"):
        return
    s = _listening()
    port = s.getsockname()[1]
    with s:
        fd = s.fileno()
        cmd = [sys.executable, "-m", "serverio", "-d", str(root), "-q", "-v", "--fd", str(fd)]
        err = _serve_and_stop(cmd, (fd,), port)
    assert " accepted=1 " in err  # -v: the counters line


def test_systemd_listen_fds(root: Path) -> None:
    # LISTEN_PID is checked first: the pid the child will have is unknown
    # here, so on Windows the refusal is checked through --fd (one path).
    if simulation.windows_refuses_fds(root, "--fd", "3"):
        return
    s = _listening()
    port = s.getsockname()[1]
    with s:
        fd = s.fileno()
        # Like systemd: the socket at fd 3 and LISTEN_PID set to the pid of
        # the process that will use it (the launcher execs into serverio).
        launcher = (
            "import os, sys\n"
            f"if {fd} != 3:\n"
            f"    os.dup2({fd}, 3); os.close({fd})\n"
            "os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS='1')\n"
            "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])\n"
        )
        cmd = [sys.executable, "-c", launcher, "-m", "serverio", "-d", str(root), "-q", "-v"]
        err = _serve_and_stop(cmd, (fd,), port)
    assert " accepted=1 " in err  # -v: the counters line


def test_systemd_fds_protocol() -> None:
    env = {"LISTEN_PID": "123", "LISTEN_FDS": "2", "LISTEN_FDNAMES": "a:b", "OTHER": "x"}
    assert systemd_fds(env, pid=999) == []  # someone else's
    assert "LISTEN_FDS" in env
    assert systemd_fds(env, pid=123) == [3, 4]
    assert env == {"OTHER": "x"}  # consumed: children must not inherit them
    assert systemd_fds({}, pid=1) == []
    with pytest.raises(ConfigError, match="LISTEN_FDS"):
        systemd_fds({"LISTEN_PID": "5", "LISTEN_FDS": "zero"}, pid=5)


def test_fd_that_is_not_a_listening_socket_exit_2(root: Path, tmp_path: Path) -> None:
    r = run_cli("-d", str(root), "--fd", "0")  # stdin of run_cli: not a socket
    assert r.returncode == 2
    assert r.stderr.splitlines() == [r.stderr.strip()]
    if simulation.REAL_WINDOWS:  # refused before any descriptor is looked at
        assert r.stderr.strip() == simulation.FDS_REFUSAL
        return
    assert "--fd 0" in r.stderr
    a, b = socket.socketpair()
    with a, b:
        proc = subprocess.run(
            [sys.executable, "-m", "serverio", "-d", str(root), "--fd", str(a.fileno())],
            pass_fds=(a.fileno(),),
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert proc.returncode == 2
    assert "not a listening stream socket" in proc.stderr
    assert len(proc.stderr.splitlines()) == 1


def test_fd_with_workers_is_refused(root: Path) -> None:
    r = run_cli("-d", str(root), "--fd", "3", "--workers", "2")
    assert r.returncode == 2 and "--workers > 1 cannot serve inherited sockets" in r.stderr


def test_listen_pid_of_another_process_is_ignored(root: Path) -> None:
    env = dict(os.environ, LISTEN_PID="1", LISTEN_FDS="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "serverio", "0", "-d", str(root), "-q",
         "--admin-bind", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        assert "at http://127.0.0.1:" in proc.stdout.readline()  # bound its own port
        admin = proc.stdout.readline().split(" at ", 1)[1].strip()
        stop_gracefully(proc, admin.removesuffix("metrics"))
        proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
    assert proc.returncode == 0
