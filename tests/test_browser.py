"""A directory listing rendered by a real browser: headless Chromium through
Playwright (tests/browser_kit.py; the system chromium, no browser download).

Skipped, with the reason, where Chromium or Playwright is not installed
(``.ci/run`` installs both).  Only 127.0.0.1 URLs are loaded.  Screenshots
are saved as the run's artefacts.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urljoin

from .browser_kit import in_browser, needs_browser, shot
from .conftest import make_config, running_server

pytestmark = needs_browser


def _watch(page: Any) -> list[str]:
    """Dialogs (an alert a name managed to run) and script errors, collected."""
    seen: list[str] = []

    def on_dialog(d: Any) -> None:
        seen.append(f"dialog: {d.message}")
        d.dismiss()

    page.on("dialog", on_dialog)
    page.on("pageerror", lambda e: seen.append(f"error: {e}"))
    return seen


async def test_listing_in_headless_chromium(root: Path) -> None:
    d = root / "noindex"
    (d / "docs").mkdir()
    (d / "<img src=x onerror=alert(1)>.txt").write_text("x")
    (d / "r\u00e9sum\u00e9 2026.pdf").write_bytes(b"%PDF" + b"x" * 40_000)
    for i in range(12):
        (d / f"file-{i:02d}.log").write_text("line\n" * (i * 300))

    def drive(browser: Any) -> None:
        page = browser.new_page(viewport={"width": 1000, "height": 700})
        seen = _watch(page)
        page.goto(url)
        assert page.title() == "Index of /noindex/"
        html = page.content()
        for href in ('href="./docs/"', 'href="./a.txt"', 'href="./r%C3%A9sum%C3%A9%202026.pdf"'):
            assert href in html
        # The hostile name is text in the DOM, never an element the browser built.
        assert "&lt;img src=x onerror=alert(1)&gt;.txt" in html
        assert page.locator("img").count() == 0
        path = shot(page, "listing-1000")
        assert path.stat().st_size > 20_000  # text, rules and links: not a blank page
        assert seen == []

    async with running_server(make_config(root)) as (_, port):
        url = f"http://127.0.0.1:{port}/noindex/"
        await in_browser(drive)


# ------------------------------------------------ hostile names, clicked


HOSTILE_TXT = [
    "<script>alert(1)<",
    "\"'><img src=x onerror=alert(2)>",
    "javascript:alert(3)",
    "%2e%2e%2fescape",
    "a?b#c;d",
    "100% legit",
    " lead space.txt",
    "\u202etxt.exe.txt",
    "@evil.example.txt",
    "a" * 251 + ".txt",
]


async def test_hostile_names_run_no_script_and_every_link_reaches_its_file(
    tmp_path: Path,
) -> None:
    root = tmp_path / "www"
    d = root / "d"
    d.mkdir(parents=True)
    for i, name in enumerate(HOSTILE_TXT):
        (d / name).write_text(f"content-{i}")
    (d / "javascript:alert(5)").mkdir()

    def drive(browser: Any) -> None:
        page = browser.new_page()
        seen = _watch(page)
        page.goto(listing)
        hrefs: list[str] = page.eval_on_selector_all(
            "td.name a", "els => els.map(a => a.getAttribute('href'))"
        )
        # The inline style applied: its CSP hash is right.
        assert page.evaluate("getComputedStyle(document.body).maxWidth") == "1024px"
        assert len(hrefs) == len(HOSTILE_TXT) + 2  # "../", the directory, the files
        # Each link as the browser resolves it (a.href) fetches exactly its
        # entry; the folder's is followed by a click.  (A file with no known
        # type would be a download, not a page: fetched, not clicked.)
        resolved: list[str] = page.eval_on_selector_all("td.name a", "els => els.map(a => a.href)")
        for i, href in enumerate(hrefs):
            if href == "../":
                continue
            assert resolved[i] == urljoin(listing, href)
            if href.endswith("/"):
                page.goto(listing)
                with page.expect_navigation():
                    page.locator("td.name a").nth(i).click()
                assert page.url == resolved[i]
                text = page.locator("h1").inner_text()
                assert text.startswith("Index of /d/javascript:alert(5)/"), text
            else:
                name = unquote(href[2:])
                body = page.request.get(resolved[i]).text()
                assert body == f"content-{HOSTILE_TXT.index(name)}", (href, body)
        assert seen == []

    async with running_server(make_config(root)) as (_, port):
        listing = f"http://127.0.0.1:{port}/d/"
        await in_browser(drive)


# ------------------------------------------------ the filter box (issue 28)


async def test_the_filter_box_filters_as_you_type_under_the_csp_and_submits(
    tmp_path: Path,
) -> None:
    root = tmp_path / "www"
    root.mkdir()
    for name in ("apple.txt", "Banana.txt", "cherry.txt", "bandana"):
        (root / name).write_text("x")

    def drive(browser: Any) -> None:
        page = browser.new_page()
        seen = _watch(page)
        page.goto(base)
        shown = "els => els.filter(r => !r.hidden).map(r => r.querySelector('a').textContent)"
        every = ["apple.txt", "Banana.txt", "bandana", "cherry.txt"]  # natural, case-blind
        assert page.eval_on_selector_all("tbody tr.entry", shown) == every
        # Typing runs the page's script: allowed by its hash, nothing else.
        page.locator("form.filter input[name=filter]").fill("ANA")
        assert page.eval_on_selector_all("tbody tr.entry", shown) == ["Banana.txt", "bandana"]
        # The same box is a GET form the server answers (form-action 'self').
        with page.expect_navigation():
            page.get_by_role("button", name="Filter", exact=True).click()
        assert page.evaluate("location.search") == "?filter=ANA"
        assert page.locator("tbody tr").count() == 2
        assert "2 of 4 entries match" in page.locator("footer").inner_text()
        assert seen == []

    async with running_server(make_config(root)) as (_, port):
        base = f"http://127.0.0.1:{port}/"
        await in_browser(drive)


# ------------------------------------------------ the README below (issue 28)


def _png(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    raw = b"".join(b"\0" + b"\x80\x40\x20" * width for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


async def test_the_readme_renders_its_local_image_and_runs_nothing(tmp_path: Path) -> None:
    root = tmp_path / "www"
    root.mkdir()
    (root / "pic.png").write_bytes(_png(7, 5))
    (root / "README.md").write_text(
        "# Hello\n\n![local](pic.png) ![remote](http://127.0.0.2:9/x.png)\n\n"
        "<img src=x onerror=alert(1)> <script>alert(2)</script>\n\n"
        "[js](javascript:alert(3)) [ok](pic.png)\n"
    )

    def drive(browser: Any) -> None:
        page = browser.new_page()
        seen = _watch(page)
        page.goto(base)
        assert page.locator(".readme h1").inner_text() == "Hello"
        # The relative image loaded under img-src 'self'; it is the only image.
        page.wait_for_function("[...document.images].every(i => i.complete)")
        sizes = page.evaluate(
            "[...document.images].map(i => [i.getAttribute('src'), i.naturalWidth])"
        )
        assert sizes == [["pic.png", 7]]
        hrefs = page.eval_on_selector_all(
            ".readme a", "els => els.map(a => a.getAttribute('href'))"
        )
        assert hrefs == ["./README.md", "http://127.0.0.2:9/x.png", "pic.png"]
        assert "<script>alert(2)</script>" in page.locator(".readme").inner_text()
        assert seen == []

    async with running_server(make_config(root)) as (_, port):
        base = f"http://127.0.0.1:{port}/"
        await in_browser(drive)


# ------------------------------------------------ built-in error pages (issue 28)


async def test_the_error_page_is_styled_under_its_csp_and_links_home(tmp_path: Path) -> None:
    root = tmp_path / "www"
    root.mkdir()
    (root / "index.html").write_text("<!doctype html><title>home</title><p>home page</p>\n")
    hostile = "/%3Cimg%20src=x%20onerror=alert(1)%3E/%22%27%3E%3Cscript%3Ealert(2)%3C/script%3E"

    def drive(browser: Any) -> None:
        page = browser.new_page()
        seen = _watch(page)
        page.goto(base + hostile)
        got = page.evaluate(
            "[document.contentType, document.title, document.querySelector('h1').innerText,"
            " document.images.length, document.scripts.length]"
        )
        assert got == ["text/html", "404 Not Found", "404 Not Found", 0, 0]
        # The inline style applied: the CSP's hash is the style's.
        assert page.evaluate("getComputedStyle(document.body).maxWidth") == "960px"
        # The path is shown as text (issue 46), never as markup.
        assert "<img src=x onerror=alert(1)>" in page.locator("main").inner_text()
        with page.expect_navigation():
            page.get_by_role("link", name="Home").click()
        assert [page.url, page.title()] == [base + "/", "home"]
        assert seen == []

    async with running_server(make_config(root)) as (_, port):
        base = f"http://127.0.0.1:{port}"
        await in_browser(drive)
