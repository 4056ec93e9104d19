"""The listing page in headless Chromium through Playwright (issue 46): at a
phone's 390 x 844 and a laptop's 1280 x 800 the upload button is on screen
and clickable, names are in natural order, the toolbar works, the theme
toggle remembers its choice, the search box filters and searches, keyboard
navigation moves between rows; axe-core finds no serious or critical
violation on the listing, the upload state and an error page.  Screenshots
are saved as artefacts (tests/browser_kit.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .browser_kit import axe_violations, in_browser, needs_browser, shot
from .conftest import make_config, running_server

pytestmark = needs_browser

VIEWPORTS = {"narrow": (320, 640), "phone": (390, 844), "laptop": (1280, 800)}


def _tree(root: Path) -> None:
    d = root / "shared"
    d.mkdir(parents=True)
    for i in (1, 2, 10, 11, 20):
        (d / f"file_{i}.txt").write_text("x" * (i * 100))
    (d / "photo 2026-12-06 holiday at the seaside with the family.jpg").write_bytes(b"\xff" * 5000)
    (d / ("a-very-long-name-without-any-space-at-all-" + "x" * 60 + ".tar.gz")).write_bytes(b"z")
    (d / "docs").mkdir()
    (d / "docs" / "guide_2.md").write_text("# two\n")
    (d / "docs" / "guide_10.md").write_text("# ten\n")
    (d / "README.md").write_text("# Shared\n\nSome *files* for [the team](docs/).\n")


def _names(page: Any) -> list[str]:
    names: list[str] = page.eval_on_selector_all(
        "tbody tr.entry:not([hidden]) td.name a", "els => els.map(a => a.textContent)"
    )
    return names


@pytest.mark.parametrize("viewport", sorted(VIEWPORTS))
async def test_the_page_at_phone_and_laptop_widths(tmp_path: Path, viewport: str) -> None:
    root = tmp_path / "www"
    _tree(root)
    width, height = VIEWPORTS[viewport]
    cfg = make_config(root, upload=True, archives=True, title="Team files")

    def drive(browser: Any) -> None:
        page = browser.new_page(viewport={"width": width, "height": height})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        # A failed load is told by its response (the browser asks for /favicon.ico).
        page.on(
            "console",
            lambda m: (
                errors.append(m.text)
                if m.type == "error" and "Failed to load resource" not in m.text
                else None
            ),
        )
        page.on(
            "response",
            lambda r: (
                errors.append(f"{r.status} {r.url}")
                if r.status >= 400 and not r.url.endswith("/favicon.ico")
                else None
            ),
        )
        page.goto(f"{base}/shared/")
        # Natural order, folders first.
        assert _names(page) == [
            "docs/",
            "a-very-long-name-without-any-space-at-all-" + "x" * 60 + ".tar.gz",
            "file_1.txt",
            "file_2.txt",
            "file_10.txt",
            "file_11.txt",
            "file_20.txt",
            "photo 2026-12-06 holiday at the seaside with the family.jpg",
            "README.md",
        ]
        # Nothing wider than the screen: no sideways scrolling.
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        # The upload button is on screen and takes the click.
        button = page.locator("form.files button[type=submit]")
        box = button.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width
        button.click(trial=True)  # hit-tested: nothing covers it
        # A long name wraps at its spaces, not letter by letter: the name
        # cell's words keep whole.
        photo = page.locator("td.name a", has_text="holiday")
        lines = photo.evaluate(
            "a => { const r = document.createRange(); r.selectNodeContents(a);"
            " return new Set([...r.getClientRects()].map(x => Math.round(x.top))).size }"
        )
        # (At 390 px the checkbox and actions columns leave the name about
        # 155 px: four lines of whole words.)
        assert lines <= (4 if width < 500 else 1), lines
        whole = photo.evaluate(
            "a => ['holiday', 'seaside', 'family.jpg'].map(w => { const t = a.firstChild;"
            " const i = t.textContent.indexOf(w); const r = document.createRange();"
            " r.setStart(t, i); r.setEnd(t, i + w.length);"
            " return new Set([...r.getClientRects()].map(x => Math.round(x.top))).size })"
        )
        assert whole == [1, 1, 1], whole  # no word is broken
        # The time column: local time with UTC in the tooltip.
        title = page.locator("td.time time").first.get_attribute("title")
        assert title is not None and title.endswith(" UTC")
        assert "local times" in page.locator("#tz").inner_text()
        if width < 500:
            assert page.locator("td.time time span").first.is_hidden()  # date only on a phone
        if width <= 384:  # below 24rem: no Modified column at all
            assert page.locator("th.time").is_hidden()
        # The toolbar is at the top with the archives and the theme toggle.
        assert page.locator(".bar a", has_text="Download zip").is_visible()
        assert page.locator("body > h1").inner_text() == "Team files \u2014 /shared/"
        shot(page, f"listing-{viewport}")
        assert axe_violations(page) == []

        # Theme: auto -> light -> dark, remembered across a reload.
        toggle = page.locator("#theme")
        assert toggle.inner_text() == "Theme: auto"
        toggle.click()
        toggle.click()
        assert page.evaluate("document.documentElement.dataset.theme") == "dark"
        page.reload()
        assert page.evaluate("document.documentElement.dataset.theme") == "dark"
        bg = page.evaluate("getComputedStyle(document.body).backgroundColor")
        assert bg == "rgb(13, 17, 23)"
        shot(page, f"listing-dark-{viewport}")
        assert axe_violations(page) == []
        toggle.click()  # back to auto: the choice is forgotten
        assert page.evaluate("localStorage.getItem('serverio-theme')") is None

        # The filter: typing hides rows; Search subfolders finds below.
        box_in = page.locator("form.search input[name=filter]")
        box_in.fill("FILE_1")
        assert _names(page) == ["file_1.txt", "file_10.txt", "file_11.txt"]
        # Keyboard: ArrowDown from the box to the first row ("../"), then
        # the next shown ones; ArrowUp back; End to the last.
        box_in.press("ArrowDown")
        active = "document.activeElement.textContent"
        assert page.evaluate(active) == "../"
        page.keyboard.press("ArrowDown")
        page.keyboard.press("ArrowDown")
        assert page.evaluate(active) == "file_10.txt"
        page.keyboard.press("ArrowUp")
        assert page.evaluate(active) == "file_1.txt"
        page.keyboard.press("End")
        assert page.evaluate(active) == "file_11.txt"
        focus = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
        assert focus == "solid"  # a visible focus ring
        box_in.fill("guide")
        with page.expect_navigation():
            page.locator("button[name=search]").click()
        assert "q=guide" in page.url or "search=1" in page.url
        # The streamed results page, complete: its rows, then the count
        # (sent after the last row) and the page's script (local times).
        page.wait_for_selector("#status")
        assert "for \u201cguide\u201d below this folder" in page.inner_text("#status")
        assert page.locator("tbody tr.entry").count() >= 1
        assert "local times" in page.locator("#tz").inner_text()
        shot(page, f"search-{viewport}")
        assert axe_violations(page) == []
        assert errors == []

    async with running_server(cfg) as (_, port):
        base = f"http://127.0.0.1:{port}"
        await in_browser(drive)


async def test_the_error_page_names_the_path_links_its_parent_and_passes_axe(
    tmp_path: Path,
) -> None:
    root = tmp_path / "www"
    (root / "a").mkdir(parents=True)

    def drive(browser: Any) -> None:
        page = browser.new_page(viewport={"width": 390, "height": 844})
        response = page.goto(f"{base}/a/%3Cb%3Emissing.txt")
        assert response is not None and response.status == 404
        text = page.locator("body").inner_text()
        assert "/a/<b>missing.txt" in text  # shown as text, escaped
        assert page.locator("b").count() == 0
        parent = page.locator("a", has_text="/a/")
        assert parent.get_attribute("href") == "/a/"
        shot(page, "error-404")
        assert axe_violations(page) == []

    async with running_server(make_config(root)) as (_, port):
        base = f"http://127.0.0.1:{port}"
        await in_browser(drive)
