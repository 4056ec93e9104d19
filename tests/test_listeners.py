"""Several listeners per process (--listen, --listen-tls), --workers auto, --check."""

from __future__ import annotations

import http.client
import os
import shutil
import socket
import ssl
import subprocess
import sys
from pathlib import Path

import pytest
import trustme

from serverio.ops.check import check_url, loopback_target
from serverio.ops.cli import main
from serverio.ops.cpus import available_cpus, cgroup_cpu_limit
from testkit import simulation

from .fleet import request, start, stop


def _https_get(ca: trustme.CA, port: int, path: str) -> tuple[int, bytes]:
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].strip("/"))


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_two_plaintext_and_one_tls_listener_in_one_process(
    root: Path, ca: trustme.CA, cert_files: tuple[Path, Path], workers: int
) -> None:
    certfile, keyfile = cert_files
    if workers > 1 and simulation.windows_refuses_workers(root):
        return
    if workers == 1:
        addrs = ["127.0.0.1:0", "[::1]:0", "127.0.0.1:0"]
    else:  # workers share fixed ports (SO_REUSEPORT)
        p1, p2, p3 = _free_ports(3)
        addrs = [f"127.0.0.1:{p1}", f"[::1]:{p2}", f"127.0.0.1:{p3}"]
    r = start(
        root,
        "--listen", addrs[0], "--listen", addrs[1], "--listen-tls", addrs[2],
        "--certfile", str(certfile), "--keyfile", str(keyfile), "--workers", str(workers),
        listeners=3,
    )  # fmt: skip
    try:
        plain4, plain6, tls = r.urls
        assert plain4.startswith("http://127.0.0.1:") and plain6.startswith("http://[::1]:")
        assert tls.startswith("https://127.0.0.1:")
        assert request(plain4, "/hello.txt")[::2] == (200, b"hello world\n")
        conn = http.client.HTTPConnection("::1", _port(plain6), timeout=10)
        conn.request("GET", "/hello.txt")
        assert conn.getresponse().read() == b"hello world\n"
        conn.close()
        assert _https_get(ca, _port(tls), "/hello.txt") == (200, b"hello world\n")
        # Each listener speaks only its own protocol.
        with pytest.raises(ssl.SSLError):
            _https_get(ca, _port(plain4), "/hello.txt")
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            request(tls, "/hello.txt")
    finally:
        stop(r)


def test_listen_options_in_toml(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "s.toml"
    conf.write_text(
        'listen = ["127.0.0.1:8080", "[::1]:8080"]\nshutdown-delay = 5\netag = "content"\n'
    )
    assert main(["-d", str(root), "--config", str(conf), "--print-config"]) == 0
    out = capsys.readouterr().out
    assert 'listen = ["127.0.0.1:8080", "[::1]:8080"]' in out
    assert "shutdown-delay = 5" in out and 'etag = "content"' in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--listen", "127.0.0.1"], "HOST:PORT"),
        (["--listen", "::1:80"], "HOST:PORT"),
        (["--listen", "127.0.0.1:80", "--fd", "3"], "--fd"),
        (["--listen", "127.0.0.1:80", "-b", "0.0.0.0"], "replace -b"),
        (["9000", "--listen", "127.0.0.1:80"], "replace -b"),
        (["--listen-tls", "127.0.0.1:443"], "needs --certfile"),
        (["--listen", "127.0.0.1:0", "--workers", "2"], "fixed ports"),
        (["--listen", "127.0.0.1:80", "--listen", "127.0.0.1:80"], "twice"),
        (["--listen", "127.0.0.1:80", "--admin-bind", "127.0.0.1:80"], "public address"),
        (["--shutdown-delay", "-1"], "--shutdown-delay"),
        (["--etag", "inode"], "invalid choice"),
        (["--workers", "many"], "'auto'"),
    ],
)
def test_listener_and_fleet_option_errors_are_one_line_exit_2(
    root: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        code = main(["-d", str(root), *argv])
        raise SystemExit(code)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_certfile_with_plain_listen_only_is_refused(
    root: Path, cert_files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    certfile, keyfile = cert_files
    argv = ["-d", str(root), "--listen", "127.0.0.1:0", "--certfile", str(certfile)]
    assert main([*argv, "--keyfile", str(keyfile)]) == 2
    assert "--listen-tls" in capsys.readouterr().err


# ------------------------------------------------------------ --workers auto


def _cgroup(tmp_path: Path, lines: str, files: dict[str, str]) -> tuple[str, str]:
    proc = tmp_path / "cgroup"
    tmp_path.mkdir(parents=True, exist_ok=True)
    proc.write_text(lines)
    root = tmp_path / "fs"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return str(root), str(proc)


@pytest.mark.parametrize(
    ("lines", "files", "limit"),
    [
        ("0::/pod/c\n", {"pod/c/cpu.max": "150000 100000\n"}, 1.5),
        ("0::/pod/c\n", {"pod/c/cpu.max": "max 100000\n"}, None),
        # The tightest limit on the way up counts (a pod's, over its container's).
        ("0::/pod/c\n", {"pod/c/cpu.max": "max 100000", "pod/cpu.max": "50000 100000"}, 0.5),
        ("4:cpu,cpuacct:/docker/x\n", {"cpu/docker/x/cpu.cfs_quota_us": "300000",
                                       "cpu/docker/x/cpu.cfs_period_us": "100000"}, 3.0),
        ("4:cpu,cpuacct:/\n", {"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"},
         None),
        ("0::/\n", {}, None),
    ],
)  # fmt: skip
def test_cgroup_cpu_limit(
    tmp_path: Path, lines: str, files: dict[str, str], limit: float | None
) -> None:
    root, proc = _cgroup(tmp_path, lines, files)
    assert cgroup_cpu_limit(root, proc) == limit


@pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity"), reason="needs os.sched_getaffinity (Linux cgroups)"
)
def test_available_cpus_is_capped_by_the_quota_and_rounded_up(tmp_path: Path) -> None:
    root, proc = _cgroup(tmp_path, "0::/c\n", {"c/cpu.max": "50000 100000"})
    assert available_cpus(root, proc) == 1  # half a CPU: still one worker
    root, proc = _cgroup(tmp_path / "b", "0::/c\n", {"c/cpu.max": "100000000 100000"})
    assert available_cpus(root, proc) == len(os.sched_getaffinity(0))  # quota above the mask


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("taskset") is None, reason="taskset (util-linux) not installed")
def test_workers_auto_follows_the_affinity_mask(root: Path) -> None:
    argv = [sys.executable, "-m", "serverio", "-d", str(root), "--workers", "auto"]
    pinned = subprocess.run(
        ["taskset", "-c", "0", *argv, "--print-config"], capture_output=True, text=True, check=True
    )
    assert "workers = 1\n" in pinned.stdout
    mask = os.sched_getaffinity(0)
    everything = subprocess.run(
        [*argv, "--print-config"], capture_output=True, text=True, check=True
    )
    assert f"workers = {available_cpus()}\n" in everything.stdout
    assert available_cpus() <= len(mask)


# ------------------------------------------------------------------- --check


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("http://127.0.0.1:9090/healthz", True),
        ("http://127.5.0.1/", True),
        ("http://[::1]:9090/healthz", True),
        ("http://localhost:9090/healthz", True),
        ("https://127.0.0.1/healthz", False),  # no TLS client here
        ("http://10.0.0.1/healthz", False),
        ("http://example.com/healthz", False),  # never resolved
        ("http://user:pw@127.0.0.1/", False),
        ("http://127.0.0.1:99999/", False),
        ("ftp://127.0.0.1/", False),
    ],
)
def test_check_only_probes_loopback(url: str, ok: bool) -> None:
    assert (loopback_target(url) is not None) is ok


@pytest.mark.slow
def test_check_exit_status_follows_health(root: Path) -> None:
    r = start(root, admin=True)
    try:
        assert check_url(r.admin + "healthz") == 0
        assert check_url(r.admin + "nothing-here") == 1  # 404
        status = subprocess.run(
            [sys.executable, "-m", "serverio", "--check", r.admin + "healthz"], check=False
        )
        assert status.returncode == 0
        refused = subprocess.run(
            [sys.executable, "-m", "serverio", "--check", "http://10.1.2.3/"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert refused.returncode == 2 and "loopback" in refused.stderr
    finally:
        stop(r)
    assert check_url(r.admin + "healthz", timeout=1) == 1  # nothing listens now


_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def _first_bytes_after_preface(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(_PREFACE)
        return s.recv(64)


def _alpn(ca: trustme.CA, port: int) -> str | None:
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            return tls.selected_alpn_protocol()


@pytest.mark.slow
def test_each_listener_carries_its_own_http2_choice(
    root: Path, ca: trustme.CA, cert_files: tuple[Path, Path]
) -> None:
    """``/h1`` after a listener's address serves HTTP/1.1 only there (no
    h2c preface, ALPN http/1.1); ``/h2`` turns HTTP/2 on there even with
    --no-http2: the HttpArena layout (8080 HTTP/1.1, 8081 HTTP/1.1+TLS,
    8082 h2c, 8443 h2+TLS) from one process."""
    certfile, keyfile = cert_files
    r = start(
        root, "--no-http2",
        "--listen", "127.0.0.1:0", "--listen", "127.0.0.1:0/h2",
        "--listen-tls", "127.0.0.1:0", "--listen-tls", "127.0.0.1:0/h2",
        "--certfile", str(certfile), "--keyfile", str(keyfile),
        listeners=4,
    )  # fmt: skip
    try:
        h1, h2c, tls1, tls2 = (_port(u) for u in r.urls)
        # HTTP/1.1 only: the preface is an HTTP/1.1 request h11 refuses.
        assert _first_bytes_after_preface(h1).startswith(b"HTTP/1.1 ")
        # h2c: the server's first frame is SETTINGS (type 0x4, RFC 9113 §3.4).
        assert _first_bytes_after_preface(h2c)[3] == 0x4
        assert _alpn(ca, tls1) == "http/1.1"
        assert _alpn(ca, tls2) == "h2"
        assert request(r.urls[0], "/hello.txt")[::2] == (200, b"hello world\n")
    finally:
        stop(r)

    r = start(root, "--listen", "127.0.0.1:0/h1", "--listen", "127.0.0.1:0", listeners=2)
    try:
        h1, h2c = (_port(u) for u in r.urls)
        assert _first_bytes_after_preface(h1).startswith(b"HTTP/1.1 ")
        assert _first_bytes_after_preface(h2c)[3] == 0x4
    finally:
        stop(r)


@pytest.mark.parametrize("spec", ["127.0.0.1:8080/h3", "127.0.0.1:8080/", "127.0.0.1/h1"])
def test_a_bad_listener_protocol_is_a_one_line_error(
    root: Path, spec: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["-d", str(root), "--listen", spec, "--print-config"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--listen" in err[0]
