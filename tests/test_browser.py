"""A directory listing rendered by a real browser (headless Chromium).

Skipped, with the reason, where Chromium is not installed (``.ci/run``
installs the Debian ``chromium`` package).  Only 127.0.0.1 URLs are loaded.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
import trio

from .conftest import make_config, running_server

CHROMIUM = next(
    (p for p in (shutil.which("chromium"), shutil.which("chromium-browser")) if p), None
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt install chromium)"),
]

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--window-size=1000,700",
)


async def _chromium(profile: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    assert CHROMIUM is not None
    with trio.fail_after(90):
        return await trio.run_process(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


async def test_listing_in_headless_chromium(root: Path, tmp_path: Path) -> None:
    d = root / "noindex"
    (d / "docs").mkdir()
    (d / "<img src=x onerror=alert(1)>.txt").write_text("x")
    (d / "r\u00e9sum\u00e9 2026.pdf").write_bytes(b"%PDF" + b"x" * 40_000)
    for i in range(12):
        (d / f"file-{i:02d}.log").write_text("line\n" * (i * 300))
    shot = tmp_path / "listing.png"
    async with running_server(make_config(root)) as (_, port):
        url = f"http://127.0.0.1:{port}/noindex/"
        dom = await _chromium(tmp_path / "profile-dom", "--dump-dom", url)
        png = await _chromium(tmp_path / "profile-png", f"--screenshot={shot}", url)
    page = dom.stdout.decode("utf-8", "replace")
    assert dom.returncode == 0, dom.stderr.decode("utf-8", "replace")[-2000:]
    assert "<title>Index of /noindex/</title>" in page
    for href in ('href="docs/"', 'href="a.txt"', 'href="r%C3%A9sum%C3%A9%202026.pdf"'):
        assert href in page
    # The hostile name is text in the DOM, never an element the browser built.
    assert "&lt;img src=x onerror=alert(1)&gt;.txt" in page
    assert "<img" not in page
    assert png.returncode == 0, png.stderr.decode("utf-8", "replace")[-2000:]
    data = shot.read_bytes()
    assert _png_size(data) == (1000, 700)
    # A blank page compresses to a few KiB; text, table rules and links do not.
    assert len(data) > 20_000
    keep = os.environ.get("SERVERIO_KEEP_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)
