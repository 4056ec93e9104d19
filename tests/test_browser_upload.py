"""The upload form in a real browser (headless Chromium through Playwright,
tests/browser_kit.py): two files chosen on the form's input and uploaded,
listed, downloaded back byte-identical; a file dropped on the page (the
drag-and-drop script, allowed by the CSP's hash); the new-folder button;
axe-core on the page with files chosen (the upload state).

Skipped, with the reason, where Chromium or Playwright is not installed.
Only 127.0.0.1 URLs are loaded.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from .browser_kit import axe_violations, in_browser, needs_browser, shot
from .conftest import make_config, running_server

pytestmark = needs_browser


def _names(page: Any) -> list[str]:
    names: list[str] = page.eval_on_selector_all("td.name a", "els => els.map(a => a.textContent)")
    return names


async def test_upload_two_files_see_them_listed_and_download_them_back(tmp_path: Path) -> None:
    root = tmp_path / "www"
    (root / "in").mkdir(parents=True)
    picked = tmp_path / "picked"
    picked.mkdir()
    one, two = picked / "one.bin", picked / "two words \u00e9.txt"
    one.write_bytes(os.urandom(300_000))
    two.write_bytes("second file \u2713\n".encode() * 100)
    cfg = make_config(root, upload=True, min_free_space=0)

    def drive(browser: Any) -> None:
        page = browser.new_page(viewport={"width": 390, "height": 844})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(listing)
        page.locator("form.files input[type=file]").set_input_files([str(one), str(two)])
        shot(page, "upload-chosen-phone")
        assert axe_violations(page) == []  # the upload state
        with page.expect_navigation():
            page.locator("form.files button[type=submit]").click()
        # 303 See Other: back on the listing, by GET (a reload never reposts).
        assert page.url == listing
        assert sorted(_names(page)) == ["../", one.name, two.name]
        hrefs = page.eval_on_selector_all(
            "td.name a", "els => Object.fromEntries(els.map(a => [a.textContent, a.href]))"
        )
        for f in (one, two):
            got = page.request.get(hrefs[f.name]).body()
            assert hashlib.sha256(got).digest() == hashlib.sha256(f.read_bytes()).digest()
            assert (root / "in" / f.name).read_bytes() == f.read_bytes()

        # Drag and drop: a file dropped anywhere on the page is uploaded.
        drop = (
            "() => { const dt = new DataTransfer();"
            " dt.items.add(new File(['dropped bytes'], 'dropped.txt'));"
            " document.body.dispatchEvent(new DragEvent('drop',"
            " {dataTransfer: dt, bubbles: true, cancelable: true})); }"
        )
        with page.expect_navigation():
            page.evaluate(drop)
        assert "dropped.txt" in _names(page)
        assert (root / "in" / "dropped.txt").read_bytes() == b"dropped bytes"

        # The new-folder button.
        page.locator("form.mkdir input").fill("made here")
        with page.expect_navigation():
            page.locator("form.mkdir button").click()
        assert "made here/" in _names(page)
        assert (root / "in" / "made here").is_dir()
        assert errors == []

    async with running_server(cfg) as (_, port):
        listing = f"http://127.0.0.1:{port}/in/"
        await in_browser(drive)


async def test_no_form_without_upload(tmp_path: Path) -> None:
    root = tmp_path / "www"
    root.mkdir()

    def drive(browser: Any) -> None:
        page = browser.new_page()
        page.goto(base)
        assert page.locator("form.files").count() == 0
        assert page.locator("form.mkdir").count() == 0
        assert page.locator("td.act").count() == 0 and page.locator("#actions").count() == 0

    async with running_server(make_config(root)) as (_, port):
        base = f"http://127.0.0.1:{port}/"
        await in_browser(drive)
