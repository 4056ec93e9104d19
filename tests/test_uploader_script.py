"""The listing's uploader script (serverio.http.uploader) without a browser:
its text parses (node, where installed), it is the upload page's one
script besides the filter and allowed by its hash with ``connect-src
'self'``, and ``--upload-chunk-size`` reaches IETF clients as
``Upload-Limit: max-append-size`` (the part size the script sends).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from serverio.config import Config
from serverio.http.listing import LISTING_UPLOAD_CSP, ListingQuery, render_html
from serverio.http.uploader import UPLOADER_SCRIPT, UPLOADER_SOURCE

from .conftest import make_config, running_server
from .resumable_client import h1_request


def test_the_script_is_on_the_upload_page_and_allowed_by_its_hash() -> None:
    page = render_html(("d",), [], ListingQuery(), upload=True).decode()
    assert f"<script>{UPLOADER_SCRIPT}</script>" in page
    csp = LISTING_UPLOAD_CSP.decode()
    assert UPLOADER_SOURCE in csp and "connect-src 'self'" in csp
    assert "@" not in UPLOADER_SCRIPT  # every placeholder filled
    plain = render_html(("d",), [], ListingQuery()).decode()
    assert UPLOADER_SCRIPT not in plain  # only where the folder is writable


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_the_script_parses(tmp_path: Path) -> None:
    js = tmp_path / "uploader.js"
    js.write_text(UPLOADER_SCRIPT, encoding="utf-8")
    done = subprocess.run(
        ["node", "--check", str(js)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr


def test_chunk_size_default_and_bounds() -> None:
    assert Config.of().resumable.upload_chunk_size == 50 * 1024 * 1024
    with pytest.raises(Exception, match="upload-chunk-size"):
        Config.of(upload_chunk_size=10).validate()


async def test_upload_limit_announces_the_chunk_size(tmp_path: Path) -> None:
    root = tmp_path / "www"
    root.mkdir()
    secret = tmp_path / "secret"
    secret.write_bytes(os.urandom(32).hex().encode())
    cfg = make_config(
        root, upload=True, min_free_space=0, secret_file=str(secret), upload_chunk_size=262144
    )
    async with running_server(cfg) as (_, port):
        a = await h1_request(port, "PUT", "/f.bin", {"upload-complete": "?0"}, b"")
        assert a is not None and a.status == 201
        assert "max-append-size=262144" in a.headers["upload-limit"]
        h = await h1_request(port, "HEAD", a.headers["location"])
        assert h is not None and "max-append-size=262144" in h.headers["upload-limit"]
        assert h.headers["upload-limit"].startswith("max-size=")


async def test_the_completing_append_says_its_offset(tmp_path: Path) -> None:
    """The last PATCH's answer (the PUT's 201, Upload-Complete ?1) carries
    the final Upload-Offset too: tus-js-client's draft setting reads it
    from every append's answer (tests/test_browser_tus_clients.py)."""
    root = tmp_path / "www"
    root.mkdir()
    secret = tmp_path / "secret"
    secret.write_bytes(os.urandom(32).hex().encode())
    cfg = make_config(root, upload=True, min_free_space=0, secret_file=str(secret))
    async with running_server(cfg) as (_, port):
        a = await h1_request(port, "PUT", "/f.bin", {"upload-complete": "?0"}, b"abc")
        assert a is not None and a.status == 201
        headers = {
            "upload-offset": "3",
            "upload-complete": "?1",
            "content-type": "application/partial-upload",
        }
        b = await h1_request(port, "PATCH", a.headers["location"], headers, b"defg")
        assert b is not None and b.status == 201 and b.headers["upload-complete"] == "?1"
        assert b.headers["upload-offset"] == "7"
    assert (root / "f.bin").read_bytes() == b"abcdefg"
