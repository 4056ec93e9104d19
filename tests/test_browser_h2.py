"""A page and its assets over HTTP/2 in a real browser: headless Chromium, TLS, ALPN h2.

Chromium trusts only the test certificate's key (``--ignore-certificate-
errors-spki-list`` with the SHA-256 of its SubjectPublicKeyInfo, which
Chromium honours with a ``--user-data-dir``), and loads only 127.0.0.1 URLs.
Skipped, with the reason, where Chromium is not installed.
"""

from __future__ import annotations

import base64
import hashlib
import struct
import zlib
from pathlib import Path

import pytest
import trio
import trustme
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from .conftest import make_config, running_server
from .devtools_kit import CHROMIUM, _devtools

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt install chromium)"),
]


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


async def test_listing_page_and_its_assets_load_over_h2_in_chromium(
    root: Path, tmp_path: Path, ca: trustme.CA
) -> None:
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
    with trio.fail_after(40):
        async with (
            running_server(cfg) as (srv, port),
            _devtools(
                tmp_path / "profile-h2", f"--ignore-certificate-errors-spki-list={pin}"
            ) as tools,
        ):
            listing = f"https://127.0.0.1:{port}/site/"
            await tools.load(listing)
            nav = "performance.getEntriesByType('navigation').map(e => [e.name, e.nextHopProtocol])"
            assert await tools.evaluate(nav) == [[listing, "h2"]]
            assert await tools.evaluate("document.title") == "Index of /site/"
            # Follow the listing's link to the page: it and its stylesheet and
            # image all come over HTTP/2.
            await tools.load(
                click="[...document.querySelectorAll('td.name a')]"
                ".find(a => a.getAttribute('href') === './page.html')"
            )
            page = f"{listing}page.html"
            assert await tools.evaluate(nav) == [[page, "h2"]]
            resources = await tools.evaluate(
                "performance.getEntriesByType('resource')"
                ".map(e => [e.name, e.nextHopProtocol, e.responseStatus])"
            )
            fetched = {name: (proto, status) for name, proto, status in resources}
            assert fetched[f"{listing}style.css"] == ("h2", 200)
            assert fetched[f"{listing}logo.png"] == ("h2", 200)
            # Anything else the browser asked for on its own (/favicon.ico) too.
            assert {proto for proto, _ in fetched.values()} == {"h2"}
            # The assets were used, not just fetched.
            assert (
                await tools.evaluate("getComputedStyle(document.getElementById('t')).color")
                == "rgb(1, 2, 3)"
            )
            assert await tools.evaluate(
                "[document.getElementById('logo').naturalWidth,"
                " document.getElementById('logo').naturalHeight]"
            ) == [7, 5]
            assert tools.exceptions == []
    # One TLS connection negotiated h2 and carried all four requests.
    assert srv.stats.h2.connections >= 1
    assert srv.stats.h2.streams >= 4
    assert srv.stats.conns.tls_handshake_failures == 0
