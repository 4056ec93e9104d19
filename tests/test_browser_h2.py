"""A page and its assets over HTTP/2 in a real browser: headless Chromium
through Playwright (tests/browser_kit.py), TLS, ALPN h2.

Chromium trusts only the test certificate's key (``--ignore-certificate-
errors-spki-list`` with the SHA-256 of its SubjectPublicKeyInfo), and
loads only 127.0.0.1 URLs.  Skipped, with the reason, where Chromium or
Playwright is missing.
"""

from __future__ import annotations

import base64
import hashlib
import ssl
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest
import trio
import trustme
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from serverio.net.tlsstream import TLSStream

from .browser_kit import in_browser, needs_browser
from .conftest import make_config, running_server

pytestmark = needs_browser


def _spki_pin(cert_pem: bytes) -> str:
    """base64(SHA-256(SubjectPublicKeyInfo DER)), the form Chromium's SPKI list takes."""
    key = x509.load_pem_x509_certificate(cert_pem).public_key()
    der = key.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(hashlib.sha256(der).digest()).decode()


def _png(width: int, height: int) -> bytes:
    """A valid RGB PNG of one colour (no imaging library needed)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + data))
        return struct.pack(">I", len(data)) + kind + data + crc

    rows = b"".join(b"\x00" + b"\x20\x80\xe0" * width for _ in range(height))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(rows))
        + (chunk(b"IEND", b""))
    )


PAGE = """<!doctype html><html><head><title>assets</title>
<link rel=stylesheet href="style.css"></head>
<body><h1 id=t>over h2</h1><img id=logo src="logo.png" alt=logo></body></html>
"""


NAV = "performance.getEntriesByType('navigation').map(e => [e.name, e.nextHopProtocol])"


def _record_handshake_failures(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Each failed server handshake, by what ended it: ``"gone"`` when the
    peer closed or reset the connection (the browser dropped a connection
    it had opened speculatively, before the handshake finished), else the
    TLS error's reason (a version or cipher mismatch, not TLS at all)."""
    failures: list[str] = []
    real = TLSStream.do_handshake

    async def recorded(self: TLSStream) -> None:
        try:
            await real(self)
        except trio.BrokenResourceError as exc:
            cause = exc.__cause__
            if isinstance(cause, ssl.SSLEOFError) or not isinstance(cause, ssl.SSLError):
                failures.append("gone")
            else:
                failures.append(str(cause.reason))
            raise

    monkeypatch.setattr(TLSStream, "do_handshake", recorded)
    return failures


async def _controls(port: int) -> None:
    """Two handshakes that fail each way: a client that leaves, and one
    that speaks plain HTTP."""
    for data in (b"", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        if data:
            await stream.send_all(data)
            with trio.move_on_after(5):
                await stream.receive_some(1024)  # the server's close
        await stream.aclose()


async def test_listing_page_and_its_assets_load_over_h2_in_chromium(
    root: Path, tmp_path: Path, ca: trustme.CA, monkeypatch: pytest.MonkeyPatch
) -> None:
    failures = _record_handshake_failures(monkeypatch)
    site = root / "site"
    site.mkdir()
    (site / "page.html").write_text(PAGE)
    (site / "style.css").write_text("h1 { color: rgb(1, 2, 3) }\n")
    (site / "logo.png").write_bytes(_png(7, 5))
    leaf = ca.issue_cert("127.0.0.1")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    pin = _spki_pin(leaf.cert_chain_pems[0].bytes())
    cfg = make_config(root, certfile=str(cert), keyfile=str(key))

    def drive(browser: Any) -> None:
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        listing = f"https://127.0.0.1:{port}/site/"
        page.goto(listing)
        assert page.evaluate(NAV) == [[listing, "h2"]]
        assert page.title() == "Index of /site/"
        # Follow the listing's link to the page: it and its stylesheet and
        # image all come over HTTP/2.
        with page.expect_navigation(wait_until="load"):
            page.click("td.name a[href='./page.html']")
        target = f"{listing}page.html"
        assert page.evaluate(NAV) == [[target, "h2"]]
        resources = page.evaluate(
            "performance.getEntriesByType('resource')"
            ".map(e => [e.name, e.nextHopProtocol, e.responseStatus])"
        )
        fetched = {name: (proto, status) for name, proto, status in resources}
        assert fetched[f"{listing}style.css"] == ("h2", 200)
        assert fetched[f"{listing}logo.png"] == ("h2", 200)
        # Anything else the browser asked for on its own (/favicon.ico) too.
        assert {proto for proto, _ in fetched.values()} == {"h2"}
        # The assets were used, not just fetched.
        assert page.evaluate("getComputedStyle(document.getElementById('t')).color") == (
            "rgb(1, 2, 3)"
        )
        assert page.evaluate(
            "[document.getElementById('logo').naturalWidth,"
            " document.getElementById('logo').naturalHeight]"
        ) == [7, 5]
        assert errors == []

    async with running_server(cfg) as (srv, port):
        await in_browser(drive, limit=60, args=(f"--ignore-certificate-errors-spki-list={pin}",))
        # TLS connections negotiated h2 and carried all four requests.
        assert srv.stats.h2.connections >= 1
        assert srv.stats.h2.streams >= 4
        # No handshake failed on TLS itself.  Chromium may open a second,
        # speculative connection to the origin and close it unused, before
        # its handshake ends when the machine is loaded: the server counts
        # that as a failed handshake (the peer went away), so the count is
        # not asserted to be 0, each failure's kind is.
        browser = list(failures)
        assert set(browser) <= {"gone"}, browser
        assert srv.stats.conns.tls_handshake_failures == len(browser)
        # The recording tells the two kinds apart.
        with trio.fail_after(10):
            await _controls(port)
            while len(failures) < len(browser) + 2:  # noqa: ASYNC110 - the server's tasks, no event
                await trio.sleep(0.01)
        assert failures[len(browser) :] == ["gone", "HTTP_REQUEST"]
