"""The listing's "Download as zip" link, clicked in headless Chromium
(``--archives``): the browser saves ``<dir>.zip`` and it holds the folder.

Skipped, with the reason, where Chromium is not installed.  Only
127.0.0.1 URLs are loaded."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
import trio

from .conftest import make_config, running_server
from .devtools_kit import CHROMIUM, _devtools

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt install chromium)"),
]


async def test_the_listing_link_downloads_the_zip(tmp_path: Path) -> None:
    root = tmp_path / "www"
    d = root / "photos"
    (d / "2026").mkdir(parents=True)
    (d / "a.txt").write_text("alpha\n")
    (d / "2026" / "b.bin").write_bytes(bytes(range(256)) * 1000)
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    with trio.fail_after(60):
        async with (
            running_server(make_config(root, archives=True)) as (_, port),
            _devtools(tmp_path / "profile-archives") as tools,
        ):
            session, tools.session = tools.session, None  # a Browser-domain call
            await tools.call(
                "Browser.setDownloadBehavior",
                {"behavior": "allow", "downloadPath": str(downloads), "eventsEnabled": True},
            )
            tools.session = session
            await tools.load(f"http://127.0.0.1:{port}/photos/")
            link = "document.querySelector('footer a[href=\"?archive=zip\"]')"
            assert await tools.evaluate(f"{link}.textContent") == "zip"
            await tools.evaluate(f"{link}.click()")
            while True:
                ev = await tools.event("Browser.downloadProgress")
                state = ev["params"]["state"]
                assert state != "canceled", ev
                if state == "completed":
                    break
            assert tools.dialogs == [] and tools.exceptions == []
    saved = downloads / "photos.zip"
    assert saved.is_file(), list(downloads.iterdir())
    z = zipfile.ZipFile(io.BytesIO(saved.read_bytes()))
    assert z.testzip() is None
    assert z.read("photos/a.txt") == b"alpha\n"
    assert z.read("photos/2026/b.bin") == bytes(range(256)) * 1000
