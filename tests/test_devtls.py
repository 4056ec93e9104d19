"""--dev-tls: the local CA and leaf (serverio.ops.devtls), and HTTPS with them."""

from __future__ import annotations

import datetime as dt
import os
import socket
import ssl
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import trio
from cryptography import x509

from serverio.errors import ConfigError
from serverio.net.tls import make_ssl_context
from serverio.ops import devtls
from serverio.ops.cli import main

from .browser_kit import browser_test, in_browser
from .conftest import make_config, running_server
from .test_browser_h2 import _spki_pin

NAMES = (["localhost", "devbox"], ["127.0.0.1", "::1", "192.168.1.20"])
NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
posix = pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")


def _files(d: Path) -> dict[str, int]:
    return {n: (d / n).stat().st_mtime_ns for n in ("ca.pem", "ca-key.pem", "cert.pem", "key.pem")}


def _leaf(d: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate((d / "cert.pem").read_bytes())


def test_created_once_then_reused(tmp_path: Path) -> None:
    d = tmp_path / "dev"
    first = devtls.ensure_dev_tls(str(d), NAMES, clock=lambda: NOW)
    assert first.created_ca and first.issued_leaf
    before = _files(d)
    again = devtls.ensure_dev_tls(str(d), NAMES, clock=lambda: NOW + dt.timedelta(days=3))
    assert not again.created_ca and not again.issued_leaf
    assert _files(d) == before
    ca = x509.load_pem_x509_certificate((d / "ca.pem").read_bytes())
    bc = ca.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert bc.ca and bc.path_length == 0
    assert "serverio development CA (" in ca.subject.rfc4514_string()
    leaf = _leaf(d)
    assert (leaf.not_valid_after_utc - leaf.not_valid_before_utc).days <= 398


def test_reissued_when_names_change_or_expiry_nears(tmp_path: Path) -> None:
    d = tmp_path / "dev"
    devtls.ensure_dev_tls(str(d), NAMES, clock=lambda: NOW)
    ca_before, serial = (d / "ca.pem").read_bytes(), _leaf(d).serial_number
    more = (NAMES[0], [*NAMES[1], "10.0.0.7"])
    made = devtls.ensure_dev_tls(str(d), more, clock=lambda: NOW)
    assert made.issued_leaf and not made.created_ca
    assert (d / "ca.pem").read_bytes() == ca_before
    san = _leaf(d).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "10.0.0.7" in {str(i) for i in san.get_values_for_type(x509.IPAddress)}
    assert _leaf(d).serial_number != serial
    serial = _leaf(d).serial_number
    # 20 days before the leaf's end (RENEW_DAYS = 30): re-issued.
    late = NOW + dt.timedelta(days=devtls.LEAF_DAYS - 20)
    assert devtls.ensure_dev_tls(str(d), more, clock=lambda: late).issued_leaf
    assert _leaf(d).serial_number != serial


def test_names_outside_the_ca_constraints_are_left_out(tmp_path: Path) -> None:
    dns, ips = devtls.local_names("example.com", ["8.8.8.8", "192.168.3.4", "fe80::1%eth0"])
    assert "example.com" in dns or dns == ["localhost"]  # hostname kept only if well-formed
    assert "8.8.8.8" not in ips and "192.168.3.4" in ips
    devtls.ensure_dev_tls(str(tmp_path), (dns, ips), clock=lambda: NOW)
    # example.com is not the hostname at CA creation: the CA may not sign it.
    assert "example.com" != socket.gethostname().lower()
    san = _leaf(tmp_path).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "example.com" not in san.get_values_for_type(x509.DNSName)


@posix
def test_keys_are_0600_and_a_loose_key_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "dev"
    devtls.ensure_dev_tls(str(d), NAMES, clock=lambda: NOW)
    for name in ("key.pem", "ca-key.pem"):
        assert (d / name).stat().st_mode & 0o777 == 0o600
    os.chmod(d / "key.pem", 0o644)
    with pytest.raises(ConfigError, match="accessible by group or others"):
        devtls.ensure_dev_tls(str(d), NAMES, clock=lambda: NOW)


@posix
def test_cli_loose_key_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = tmp_path / "dev"
    devtls.ensure_dev_tls(str(d), NAMES, clock=lambda: NOW)
    os.chmod(d / "ca-key.pem", 0o640)
    (site := tmp_path / "site").mkdir()
    assert main(["--dev-tls", "--dev-tls-dir", str(d), "-d", str(site)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ca-key.pem" in err


def test_cli_dev_tls_with_certfile_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cert = tmp_path / "c.pem"
    cert.write_text("x")
    assert main(["--dev-tls", "--certfile", str(cert), "-d", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--dev-tls" in err


def test_without_cryptography_one_line_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "cryptography", None)  # import raises ImportError
    (site := tmp_path / "site").mkdir()
    args = ["--dev-tls", "--dev-tls-dir", str(tmp_path / "d"), "-d", str(site)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'serverio[dev-tls]'" in err


@pytest.mark.skipif(sys.platform in ("win32", "darwin"), reason="the XDG data directory")
@pytest.mark.parametrize("xdg", [False, True])
def test_cli_dev_tls_directory_inside_the_served_root_is_exit_2(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    xdg: bool,
) -> None:
    """``-d ~ --hidden --dev-tls`` would serve ~/.local/share/serverio/dev-tls/ca-key.pem:
    refused before anything is made there, whatever --hidden says; a
    --mount of it too; serving a sibling directory starts."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    if xdg:
        monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))
    else:
        monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    made = home / ("data" if xdg else ".local/share") / "serverio" / "dev-tls"
    assert devtls.default_dir() == str(made)
    monkeypatch.setattr(trio, "run", lambda *a: 0)  # a start that passes serves nothing
    for argv in (
        ["--dev-tls", "--hidden", "-d", str(home)],
        ["--dev-tls", "-d", str(home)],
        ["--dev-tls", "-d", str(tmp_path), "--mount", f"/h={home}"],
        ["--dev-tls", "--dev-tls-dir", str(tmp_path / "in"), "-d", str(tmp_path)],
    ):
        assert main(argv, environ={}) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "inside the served root" in err, err
        assert "--dev-tls" in err
        assert not made.exists() and not (tmp_path / "in").exists()
    # Outside the root: starts (the run itself replaced), the CA made there.
    (site := home / "site").mkdir()
    assert main(["--dev-tls", "--hidden", "-d", str(site)], environ={}) == 0
    assert (made / "ca-key.pem").exists()


def test_dir_from_env_and_platform_strategy(tmp_path: Path) -> None:
    assert devtls.default_dir({"XDG_DATA_HOME": "/x"}, "linux") == "/x/serverio/dev-tls"
    assert devtls.default_dir({"LOCALAPPDATA": "C:\\L"}, "win32").startswith("C:\\L")
    assert "Application Support" in devtls.default_dir({}, "darwin")


def test_loopback_handshake_with_the_ca_as_only_anchor_negotiates_h2(tmp_path: Path) -> None:
    made = devtls.ensure_dev_tls(str(tmp_path), NAMES)
    cfg = make_config(tmp_path, certfile=made.certfile, keyfile=made.keyfile)
    server_ctx = make_ssl_context(cfg)
    assert server_ctx is not None
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.load_verify_locations(made.ca_file)  # the only trust anchor
    client_ctx.set_alpn_protocols(["h2"])
    with socket.create_server(("127.0.0.1", 0)) as lsock:
        lsock.settimeout(10)
        port = lsock.getsockname()[1]
        done: list[str | None] = []

        def serve() -> None:
            conn, _ = lsock.accept()
            with server_ctx.wrap_socket(conn, server_side=True) as tls:
                done.append(tls.selected_alpn_protocol())
                tls.recv(1)

        t = threading.Thread(target=serve)
        t.start()
        for host in ("localhost", "127.0.0.1"):
            if host == "127.0.0.1":
                t.join(10)
                t = threading.Thread(target=serve)
                t.start()
            with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
                with client_ctx.wrap_socket(raw, server_hostname=host) as tls:
                    assert tls.selected_alpn_protocol() == "h2"
                    tls.sendall(b"x")
        t.join(10)
    assert done == ["h2", "h2"]


@browser_test
async def test_chromium_loads_a_page_over_h2_with_the_dev_certificate(
    root: Path, tmp_path: Path
) -> None:
    (root / "page.html").write_text("<!doctype html><title>dev</title><p>hello")
    cfg = make_config(root, dev_tls=True, dev_tls_dir=str(tmp_path / "dev"))
    cfg = devtls.apply_dev_tls(cfg)
    with open(cfg.tls.certfile or "", "rb") as f:  # noqa: ASYNC230 (set-up, before serving)
        pin = _spki_pin(f.read())

    def drive(browser: Any) -> None:
        # Certificate errors are not ignored (Playwright's default): the
        # page loads because Chromium trusts the pin of the dev key.
        page = browser.new_page()
        # The name the dev certificate is for (localhost resolves to the
        # loopback address in Chromium itself).
        answer = page.goto(f"https://localhost:{port}/page.html")
        assert answer is not None and answer.status == 200
        proto = "performance.getEntriesByType('navigation')[0].nextHopProtocol"
        assert page.evaluate(proto) == "h2"
        assert page.title() == "dev"

    async with running_server(cfg) as (_srv, port):
        await in_browser(drive, limit=60, args=(f"--ignore-certificate-errors-spki-list={pin}",))
