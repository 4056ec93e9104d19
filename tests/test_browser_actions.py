"""The listing page's per-row actions in headless Chromium through
Playwright (issue 46; tests/browser_kit.py), at a phone's 390 x 844 and a
laptop's 1280 x 800: rename, move (to a folder the dialog offers, and a
path typed), delete (the confirmation names what goes; a folder with
everything in it), delete from the keyboard, download, new folder, each
end to end with the file system checked; the arrow keys, Enter, a
visible focus ring; axe-core finds no serious or critical violation with
the actions shown and with their dialog open; the page loads nothing and
runs no script its CSP did not allow.  Screenshots are artefacts.

Skipped, with the reason, where Chromium or Playwright is missing.  Only
127.0.0.1 URLs are loaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .browser_kit import axe_violations, in_browser, needs_browser, shot
from .conftest import make_config, running_server

pytestmark = needs_browser

VIEWPORTS = {"phone": (390, 844), "laptop": (1280, 800)}


def _tree(root: Path) -> Path:
    d = root / "work"
    (d / "docs").mkdir(parents=True)
    (d / "old" / "deep").mkdir(parents=True)
    (d / "old" / "deep" / "x.txt").write_text("x")
    (d / "draft 2.txt").write_text("DRAFT\n")
    (d / "notes.md").write_text("# notes\n")
    (d / "report.pdf").write_bytes(b"%PDF-1.4 report")
    (d / "scratch.txt").write_text("scratch")
    (d / "taken.txt").write_text("TAKEN")
    return d


def _watch(page: Any) -> list[str]:
    """Page errors, CSP reports and failed requests (the favicon aside)."""
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on(
        "console",
        lambda m: (
            errors.append(m.text)
            if m.type == "error" and "Failed to load resource" not in m.text
            else None
        ),
    )
    return errors


def _open(page: Any, name: str) -> Any:
    """The row's actions dialog, opened by its button."""
    page.get_by_role("button", name=f"Actions for {name}").click()
    dialog = page.locator("dialog")
    dialog.wait_for(state="visible")
    return dialog


@pytest.mark.parametrize("viewport", sorted(VIEWPORTS))
async def test_rename_move_delete_download_new_folder(tmp_path: Path, viewport: str) -> None:
    root = tmp_path / "www"
    work = _tree(root)
    width, height = VIEWPORTS[viewport]
    cfg = make_config(root, upload=True, min_free_space=0, title="Team files")

    def drive(browser: Any) -> None:
        context = browser.new_context(
            viewport={"width": width, "height": height}, accept_downloads=True
        )
        page = context.new_page()
        errors = _watch(page)
        asked: list[str] = []

        def confirm(dialog: Any) -> None:
            asked.append(dialog.message)
            dialog.accept()

        page.on("dialog", confirm)
        page.goto(f"{base}/work/")
        # Every row has its labelled actions button; nothing sideways.
        buttons = page.locator("td.act button")
        assert buttons.count() == 7
        assert page.locator("th.act").get_attribute("aria-label") == "Actions"
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        box = buttons.first.bounding_box()
        assert box is not None and box["x"] + box["width"] <= width
        shot(page, f"actions-{viewport}")
        assert axe_violations(page) == []

        # Rename: a new name; the row follows, the file system too.
        dialog = _open(page, "draft 2.txt")
        assert dialog.locator("h2").inner_text() == "draft 2.txt"
        assert dialog.get_attribute("aria-label") == "draft 2.txt"
        # No share link without the login feature (no users).
        assert not dialog.get_by_role("button", name="Share link").is_visible()
        shot(page, f"actions-dialog-{viewport}")
        assert axe_violations(page) == []
        field = dialog.get_by_label("New name")
        assert field.input_value() == "draft 2.txt"
        # A name the server refuses: its reason is the status line.
        field.fill("what?.txt")
        dialog.get_by_role("button", name="Rename").click()
        page.wait_for_selector("#status.bad:has-text('The name is refused')")
        assert (work / "draft 2.txt").exists()
        dialog = _open(page, "draft 2.txt")
        dialog.get_by_label("New name").fill("final (v2) \u00e9t\u00e9.txt")
        dialog.get_by_role("button", name="Rename").click()
        page.wait_for_selector("#status:has-text('Renamed to final (v2)')")
        assert (work / "final (v2) \u00e9t\u00e9.txt").read_text() == "DRAFT\n"
        assert not (work / "draft 2.txt").exists()
        link = page.locator("td.name a", has_text="final (v2)")
        assert link.get_attribute("href") == "./final%20(v2)%20%C3%A9t%C3%A9.txt"
        assert link.inner_text() == "final (v2) \u00e9t\u00e9.txt"

        # A rename onto a name that exists: refused (Overwrite: F), said.
        dialog = _open(page, "scratch.txt")
        dialog.get_by_label("New name").fill("taken.txt")
        dialog.get_by_role("button", name="Rename").click()
        page.wait_for_selector("#status.bad")
        assert (work / "taken.txt").read_text() == "TAKEN"
        assert (work / "scratch.txt").read_text() == "scratch"
        # A name with a slash is not sent: the field says why.
        dialog = _open(page, "scratch.txt")
        dialog.get_by_label("New name").fill("a/b")
        dialog.get_by_role("button", name="Rename").click()
        assert dialog.is_visible()
        assert not dialog.get_by_label("New name").evaluate("e => e.validity.valid")
        dialog.get_by_role("button", name="Cancel").click()
        assert not dialog.is_visible()

        # Move: the dialog offers this page's folders; one is chosen.
        dialog = _open(page, "notes.md")
        offered = dialog.locator("datalist option").evaluate_all("os => os.map(o => o.value)")
        assert "/work/docs/" in offered and "/work/old/" in offered and "/" in offered
        dialog.get_by_label("Move to folder").fill("/work/docs/")
        dialog.get_by_role("button", name="Move").click()
        page.wait_for_selector("#status:has-text('Moved notes.md to /work/docs/')")
        assert (work / "docs" / "notes.md").read_text() == "# notes\n"
        assert page.locator("td.name a", has_text="notes.md").count() == 0
        # A path with "..": not sent.
        dialog = _open(page, "scratch.txt")
        dialog.get_by_label("Move to folder").fill("/work/../etc/")
        dialog.get_by_role("button", name="Move").click()
        assert dialog.is_visible()
        dialog.press("Escape")
        assert (work / "scratch.txt").exists()

        # Download: a download link to the file itself.
        dialog = _open(page, "report.pdf")
        get = dialog.get_by_role("link", name="Download")
        assert get.get_attribute("download") == ""
        with page.expect_download() as got:
            get.click()
        saved = got.value.path()
        assert saved is not None and Path(saved).read_bytes() == b"%PDF-1.4 report"
        assert got.value.suggested_filename == "report.pdf"
        if dialog.is_visible():
            dialog.press("Escape")

        # Delete: the confirmation names the file; a folder, everything in it.
        dialog = _open(page, "scratch.txt")
        dialog.get_by_role("button", name="Delete\u2026").click()
        page.wait_for_selector("#status:has-text('Deleted scratch.txt')")
        assert asked[-1] == "Delete \u201cscratch.txt\u201d? This cannot be undone."
        assert not (work / "scratch.txt").exists()
        dialog = _open(page, "old")
        assert not dialog.get_by_role("link", name="Download").is_visible()  # files only
        dialog.get_by_role("button", name="Delete\u2026").click()
        page.wait_for_selector("#status:has-text('Deleted old')")
        assert "\u201cold\u201d and everything in it" in asked[-1]
        assert not (work / "old").exists()

        # Declined: nothing goes.
        page.remove_listener("dialog", confirm)

        def decline(d: Any) -> None:
            asked.append(d.message)
            d.dismiss()

        page.once("dialog", decline)
        page.locator("td.name a", has_text="taken.txt").focus()
        page.keyboard.press("Delete")  # the keyboard's delete asks too
        assert asked[-1] == "Delete \u201ctaken.txt\u201d? This cannot be undone."
        assert (work / "taken.txt").exists()
        page.on("dialog", confirm)
        page.keyboard.press("Delete")
        page.wait_for_selector("#status:has-text('Deleted taken.txt')")
        assert not (work / "taken.txt").exists()

        # New folder: the form's POST; the page comes back with it.
        page.get_by_label("New folder name").fill("made here")
        with page.expect_navigation():
            page.get_by_role("button", name="New folder").click()
        assert (work / "made here").is_dir()
        assert page.locator("td.name a", has_text="made here/").count() == 1

        # Keyboard: the arrows move between rows, a visible ring, Enter opens.
        page.locator("td.name a").first.focus()
        page.keyboard.press("ArrowDown")
        active = "document.activeElement.textContent"
        assert page.evaluate(active) == "docs/"
        ring = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
        assert ring == "solid"
        # From a row's actions button too: the arrows go to the next row.
        page.get_by_role("button", name="Actions for report.pdf").focus()
        page.keyboard.press("ArrowUp")
        assert page.evaluate(active) == "final (v2) \u00e9t\u00e9.txt"
        page.locator("td.name a", has_text="docs/").focus()
        with page.expect_navigation():
            page.keyboard.press("Enter")
        assert page.url == f"{base}/work/docs/"
        assert page.locator("td.name a", has_text="notes.md").count() == 1
        shot(page, f"actions-after-{viewport}")
        # The dark theme, the dialog open: axe again.
        page.evaluate("localStorage.setItem('serverio-theme', 'dark')")
        page.reload()
        _open(page, "notes.md")
        shot(page, f"actions-dialog-dark-{viewport}")
        assert axe_violations(page) == []
        assert errors == []
        context.close()

    async with running_server(cfg) as (_, port):
        base = f"http://127.0.0.1:{port}"
        await in_browser(drive)


async def test_no_actions_on_a_read_only_listing(tmp_path: Path) -> None:
    root = tmp_path / "www"
    _tree(root)

    def drive(browser: Any) -> None:
        page = browser.new_page(viewport={"width": 390, "height": 844})
        errors = _watch(page)
        page.goto(f"{base}/work/")
        assert page.locator("td.act").count() == 0 and page.locator("dialog").count() == 0
        page.locator("td.name a", has_text="taken.txt").focus()
        page.keyboard.press("Delete")  # nothing to ask, nothing sent
        assert (root / "work" / "taken.txt").exists()
        assert errors == []

    async with running_server(make_config(root)) as (_, port):
        base = f"http://127.0.0.1:{port}"
        await in_browser(drive)
