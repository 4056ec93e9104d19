"""Black-box runs of ``python -m serverio`` under two SIMULATED platforms.

* ``unix-without-linux-extras``: a private mount namespace (``unshare -m``)
  with an empty tmpfs over ``/proc``, and a seccomp filter making
  ``openat2`` fail with ENOSYS (tests/sim_unix.py): what macOS, FreeBSD and
  old Linux kernels look like to the opener.
* ``windows-shaped``: tests/sim_windows.py removes from os/signal/socket
  what CPython on Windows lacks and makes ``dir_fd=`` raise.  It runs on
  Linux, so it exercises neither ntpath nor case folding nor trio's IOCP
  backend.

Each starts the real server on a loopback port and checks, over real
sockets: validators and 304, ranges and 206, listings (HTML and JSON),
gzip, containment (encoded dot segments, symlink escapes, dotfiles), and a
clean SIGINT shutdown with exit status 0: the launchers' own smoke test.
The whole real-socket suite runs under each simulation through
tests/sim_suite.py; there, the last test below checks that the simulation
is really in force in the test process and in the servers it starts.
"""

from __future__ import annotations

import errno
import gzip
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit import simulation

HERE = Path(__file__).parent
_PROBE = "import pyseccomp"


def _unix_command() -> list[str] | None:
    if shutil.which("unshare") is None:
        return None
    if subprocess.run([sys.executable, "-c", _PROBE], capture_output=True).returncode != 0:
        return None
    ok = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount -t tmpfs none /proc"], capture_output=True
    )
    if ok.returncode != 0:
        return None
    script = 'mount -t tmpfs none /proc && exec "$0" "$@"'
    return ["unshare", "-m", "sh", "-c", script, sys.executable, str(HERE / "sim_unix.py")]


SIMULATIONS = {
    "unix-without-linux-extras": ("walk", "proc_entries=0"),
    "windows-shaped": ("windows", ""),
}


class Running:
    def __init__(self, proc: subprocess.Popen[str], port: int, banner: str, root: Path) -> None:
        self.proc, self.port, self.banner, self.root = proc, port, banner, root

    def get(self, path: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request("GET", path, headers=headers)
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            conn.close()


@pytest.fixture(params=sorted(SIMULATIONS))
def simulated(request: pytest.FixtureRequest, root: Path) -> Iterator[Running]:
    name: str = request.param
    if sys.platform == "win32":
        pytest.skip("needs Linux: the simulations reshape a Linux interpreter (this is Windows)")
    if name == "windows-shaped":
        cmd = [sys.executable, str(HERE / "sim_windows.py")]
    else:
        unix = _unix_command()
        if unix is None:
            pytest.skip("needs unshare -m with mount rights (root) and pyseccomp")
        cmd = unix
    (root / "esc").symlink_to("../outside/secret.txt")
    (root / "abs-esc").symlink_to(root.parent / "outside" / "secret.txt")
    (root / "inside-link").symlink_to("hello.txt")
    (root / "noindex" / "esc").symlink_to("../../outside/secret.txt")
    (root / "noindex" / "up").symlink_to("../hello.txt")
    (root / "noindex" / ".hidden").write_text("hidden\n")
    (root / "page.txt").write_text("compress me " * 500)
    env = dict(os.environ, PYTHONPATH=str(HERE.parent))
    proc = subprocess.Popen(
        [*cmd, "-d", str(root), "-b", "127.0.0.1", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=str(HERE.parent),
    )
    try:
        assert proc.stderr is not None and proc.stdout is not None
        banner = proc.stderr.readline()
        serving = proc.stdout.readline()
        assert serving.startswith("Serving "), (banner, serving, proc.stderr.read())
        port = int(serving.rsplit(":", 1)[1].strip("/\n"))
        yield Running(proc, port, banner, root)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def test_simulated_platform_serves_with_full_semantics(simulated: Running) -> None:
    name = next(n for n in SIMULATIONS if n in simulated.banner)
    strategy, condition = SIMULATIONS[name]
    assert f"strategy={strategy}" in simulated.banner and condition in simulated.banner

    status, h, body = simulated.get("/hello.txt")
    assert (status, body) == (200, b"hello world\n")
    assert simulated.get("/hello.txt", **{"If-None-Match": h["etag"]})[0] == 304
    assert simulated.get("/hello.txt", **{"If-Modified-Since": h["last-modified"]})[0] == 304

    status, h, body = simulated.get("/big.bin", Range="bytes=1000-1999")
    assert status == 206 and h["content-range"] == "bytes 1000-1999/300000"
    assert body == (simulated.root / "big.bin").read_bytes()[1000:2000]
    status, _, body = simulated.get("/big.bin")
    assert status == 200 and len(body) == 300_000  # a body larger than one read chunk

    status, h, body = simulated.get("/noindex/")
    assert status == 200 and b"a.txt" in body and h["content-type"].startswith("text/html")
    status, _, body = simulated.get("/noindex/?format=json")
    names = {e["name"] for e in json.loads(body)["entries"]}
    assert status == 200 and names == {"a.txt", "up"}  # no escape, no dotfile

    status, h, body = simulated.get("/page.txt", **{"Accept-Encoding": "gzip"})
    assert status == 200 and h.get("content-encoding") == "gzip"
    assert gzip.decompress(body) == b"compress me " * 500

    for path in ("/%2e%2e/outside/secret.txt", "/sub/%2E%2E/%2e%2e/outside/secret.txt"):
        status, _, body = simulated.get(path)
        assert status in (400, 404) and b"OUTSIDE" not in body
    for path in ("/esc", "/abs-esc", "/.secret"):
        status, _, body = simulated.get(path)
        assert status == 404 and b"OUTSIDE" not in body and b"hidden" not in body
    assert simulated.get("/inside-link")[2] == b"hello world\n"
    assert simulated.get("/.well-known/security.txt")[0] == 200

    simulated.proc.send_signal(signal.SIGINT)
    assert simulated.proc.wait(15) == 0
    assert simulated.proc.stderr is not None
    rest = simulated.proc.stderr.read()
    assert "Traceback" not in rest and "serverio: stopped:" in rest


_WINDOWS_LACKS = {
    os: ("O_NONBLOCK", "O_DIRECTORY", "O_NOFOLLOW", "O_CLOEXEC", "sendfile", "pread", "writev"),
    signal: ("SIGHUP", "SIGUSR1"),
    socket: ("AF_UNIX", "SO_REUSEPORT"),
}
# What a fresh interpreter started by a test (a ``python -m serverio``
# server) reports about its platform: the strategy its opener picks and
# whether it has what Windows lacks.
_CHILD_PROBE = (
    "import os, socket, sys\n"
    "from serverio.fs.opener import RootOpener\n"
    "o = RootOpener(sys.argv[1], follow_symlinks=False)\n"
    "print(o.strategy, hasattr(os, 'sendfile'), hasattr(socket, 'AF_UNIX'),\n"
    "      len(os.listdir('/proc')))\n"
)


def _openat2_errno(directory: Path) -> int:
    """errno of a raw openat2(2) on ``directory`` (0: it worked)."""
    import ctypes

    from serverio.fs import opener as _opener

    fd = os.open(directory, os.O_RDONLY)
    try:
        how = _opener._OpenHow(os.O_RDONLY, 0, 0)
        got = _opener._syscall(_opener._SYS_OPENAT2, fd, b".", ctypes.byref(how), _opener._HOW_SIZE)
        if got >= 0:
            os.close(got)
            return 0
        return ctypes.get_errno()
    finally:
        os.close(fd)


def test_the_run_is_under_the_platform_it_announces(tmp_path: Path) -> None:
    """Under tests/sim_suite.py the simulation is really in force, in this
    process and in every interpreter it starts, so the suite cannot fall
    back to the Linux path unnoticed; the normal run is on the host path."""
    from serverio.fs.opener import RootOpener
    from serverio.net import emit as connection

    opener = RootOpener(str(tmp_path), follow_symlinks=False)
    strategy = opener.strategy
    opener.close()
    child = subprocess.run(
        [sys.executable, "-c", _CHILD_PROBE, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=str(HERE.parent),
    ).stdout.split()
    if simulation.WINDOWS_SHAPED:
        assert strategy == "windows" and child[:3] == ["windows", "False", "False"]
        for module, names in _WINDOWS_LACKS.items():
            assert [n for n in names if hasattr(module, n)] == []
        assert os.supports_dir_fd == set()
        with pytest.raises(NotImplementedError):
            os.open("x", os.O_RDONLY, dir_fd=0)
        with pytest.raises(ImportError):
            import fcntl  # noqa: F401
        assert connection.SOCKET_FD_IO is False
    elif simulation.UNIX_WITHOUT_LINUX_EXTRAS:
        assert strategy == "walk" and child == ["walk", "True", "True", "0"]
        assert os.listdir("/proc") == []
        assert _openat2_errno(tmp_path) == errno.ENOSYS
    else:
        assert simulation.ACTIVE == ""
        assert strategy in ("openat2", "walk") and child[0] == strategy
        assert os.open in os.supports_dir_fd and connection.SOCKET_FD_IO is True
        assert strategy == ("openat2" if _openat2_errno(tmp_path) == 0 else "walk")
