"""The listing's "Download as zip" link, clicked in headless Chromium
(``--archives``): the browser saves ``<dir>.zip`` and it holds the folder.

Skipped, with the reason, where Chromium is not installed.  Only
127.0.0.1 URLs are loaded."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Any

from .browser_kit import in_browser, needs_browser
from .conftest import make_config, running_server

pytestmark = needs_browser


async def test_the_listing_link_downloads_the_zip(tmp_path: Path) -> None:
    root = tmp_path / "www"
    d = root / "photos"
    (d / "2026").mkdir(parents=True)
    (d / "a.txt").write_text("alpha\n")
    (d / "2026" / "b.bin").write_bytes(bytes(range(256)) * 1000)
    saved = tmp_path / "photos.zip"

    def drive(browser: Any) -> None:
        page = browser.new_page(accept_downloads=True)
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"http://127.0.0.1:{port}/photos/")
        # The toolbar at the top offers it (issue 46), not the footer.
        link = page.locator('.bar a[href="?archive=zip"]')
        assert link.inner_text() == "Download zip"
        with page.expect_download() as info:
            link.click()
        download = info.value
        assert download.suggested_filename == "photos.zip"
        download.save_as(saved)
        assert errors == []

    async with running_server(make_config(root, archives=True)) as (_, port):
        await in_browser(drive)
    z = zipfile.ZipFile(io.BytesIO(saved.read_bytes()))
    assert z.testzip() is None
    assert z.read("photos/a.txt") == b"alpha\n"
    assert z.read("photos/2026/b.bin") == bytes(range(256)) * 1000
