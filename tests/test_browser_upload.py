"""The upload form in a real browser (headless Chromium, driven over the
DevTools protocol as tests/test_browser.py does): two files chosen on the
form's input and uploaded, listed, downloaded back byte-identical; a file
dropped on the page (the drag-and-drop script, allowed by the CSP's hash);
the new-folder button.

Skipped, with the reason, where Chromium is not installed.  Only
127.0.0.1 URLs are loaded.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import trio

from .conftest import make_config, running_server
from .test_browser import _DevTools, _devtools, pytestmark  # noqa: F401 - the same skip

SHA = (
    "async u => { const b = await (await fetch(u, {cache: 'no-store'})).arrayBuffer();"
    " const d = await crypto.subtle.digest('SHA-256', b);"
    " return [...new Uint8Array(d)].map(x => x.toString(16).padStart(2, '0')).join(''); }"
)


async def _await(tools: _DevTools, expression: str) -> Any:
    r = await tools.call(
        "Runtime.evaluate",
        {"expression": expression, "awaitPromise": True, "returnByValue": True},
    )
    assert "exceptionDetails" not in r, r["exceptionDetails"]
    return r["result"].get("value")


async def _names(tools: _DevTools) -> list[str]:
    value = await tools.evaluate(
        "[...document.querySelectorAll('td.name a')].map(a => a.textContent)"
    )
    assert isinstance(value, list)
    return value


async def test_upload_two_files_see_them_listed_and_download_them_back(tmp_path: Path) -> None:
    root = tmp_path / "www"
    (root / "in").mkdir(parents=True)
    picked = tmp_path / "picked"
    picked.mkdir()
    one, two = picked / "one.bin", picked / "two words \u00e9.txt"
    one.write_bytes(os.urandom(300_000))
    two.write_bytes("second file \u2713\n".encode() * 100)
    cfg = make_config(root, upload=True, min_free_space=0)
    with trio.fail_after(60):
        async with (
            running_server(cfg) as (_, port),
            _devtools(tmp_path / "profile-upload") as tools,
        ):
            listing = f"http://127.0.0.1:{port}/in/"
            await tools.load(listing)
            assert await tools.evaluate("!!document.querySelector('form.files')")
            doc = await tools.call("DOM.getDocument")
            node = await tools.call(
                "DOM.querySelector",
                {"nodeId": doc["root"]["nodeId"], "selector": "form.files input[type=file]"},
            )
            await tools.call(
                "DOM.setFileInputFiles", {"nodeId": node["nodeId"], "files": [str(one), str(two)]}
            )
            await tools.load(click="document.querySelector('form.files button')")
            # 303 See Other: back on the listing, by GET (a reload never reposts).
            assert await tools.evaluate("location.href") == listing
            assert sorted(await _names(tools)) == ["../", one.name, two.name]
            hrefs = await tools.evaluate(
                "Object.fromEntries([...document.querySelectorAll('td.name a')]"
                ".map(a => [a.textContent, a.href]))"
            )
            # The listing's CSP allows no fetch (default-src 'none'): read the
            # files back from a page of this origin without one, the text file.
            await tools.load(hrefs[two.name])
            for f in (one, two):
                got = await _await(tools, f"({SHA})({hrefs[f.name]!r})")
                assert got == hashlib.sha256(f.read_bytes()).hexdigest()
                assert (root / "in" / f.name).read_bytes() == f.read_bytes()
            await tools.load(listing)

            # Drag and drop: a file dropped anywhere on the page is uploaded.
            drop = (
                "(() => { const dt = new DataTransfer();"
                " dt.items.add(new File(['dropped bytes'], 'dropped.txt'));"
                " document.body.dispatchEvent(new DragEvent('drop',"
                " {dataTransfer: dt, bubbles: true, cancelable: true})); })()"
            )
            tools._pending = [m for m in tools._pending if m["method"] != "Page.loadEventFired"]
            await tools.evaluate(drop)
            await tools.event("Page.loadEventFired")
            assert "dropped.txt" in await _names(tools)
            assert (root / "in" / "dropped.txt").read_bytes() == b"dropped bytes"

            # The new-folder button.
            await tools.evaluate("document.querySelector('form.mkdir input').value = 'made here'")
            await tools.load(click="document.querySelector('form.mkdir button')")
            assert "made here/" in await _names(tools)
            assert (root / "in" / "made here").is_dir()
            assert tools.dialogs == [] and tools.exceptions == []


async def test_no_form_without_upload(tmp_path: Path) -> None:
    root = tmp_path / "www"
    root.mkdir()
    with trio.fail_after(30):
        async with (
            running_server(make_config(root)) as (_, port),
            _devtools(tmp_path / "profile-ro") as tools,
        ):
            await tools.load(f"http://127.0.0.1:{port}/")
            assert await tools.evaluate("document.querySelector('form.files')") is None
            assert await tools.evaluate("document.querySelector('form.mkdir')") is None
