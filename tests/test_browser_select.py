"""Select several and the text editor in headless Chromium through
Playwright (issue 46), at a phone's 390 x 844 and a laptop's 1280 x 800:
a shift-click selects a range, "Download selected" saves a zip holding
exactly those files (byte-identical), "Delete selected" asks first (naming
what goes) and deletes only on yes, the editor saves a text file with
If-Match and says so when another writer changed the file meanwhile (the
412), offering Reload and Save as copy; axe-core finds no serious or
critical violation with the selection toolbar shown and with the editor
open.  Screenshots are saved as artefacts (tests/browser_kit.py)."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path
from typing import Any

import pytest

from .browser_kit import axe_violations, in_browser, needs_browser, shot
from .conftest import make_config, running_server

pytestmark = needs_browser

VIEWPORTS = {"phone": (390, 844), "laptop": (1280, 800)}


def _tree(root: Path) -> dict[str, bytes]:
    d = root / "shared"
    (d / "sub").mkdir(parents=True)
    files = {
        "a.txt": b"alpha\n",
        "b.txt": b"bravo\n",
        "c.txt": b"charlie\n",
        "d.txt": b"delta\n",
        "data.bin": os.urandom(100_000),
        "notes.txt": "first line\nune ligne accentu\u00e9e\n".encode(),
    }
    for name, data in files.items():
        (d / name).write_bytes(data)
    (d / "sub" / "inner.txt").write_bytes(b"inner\n")
    return files


def _box(page: Any, name: str) -> Any:
    return page.locator(f'tbody input[type=checkbox][aria-label="Select {name}"]')


def _shown(page: Any) -> list[str]:
    names: list[str] = page.eval_on_selector_all(
        "tbody tr.entry td.name a", "els => els.map(a => a.textContent)"
    )
    return names


@pytest.mark.parametrize("viewport", sorted(VIEWPORTS))
async def test_select_download_delete_and_edit(tmp_path: Path, viewport: str) -> None:
    root = tmp_path / "www"
    files = _tree(root)
    d = root / "shared"
    width, height = VIEWPORTS[viewport]
    saved = tmp_path / "selection.zip"
    cfg = make_config(root, upload=True, archives=True, min_free_space=0)

    def drive(browser: Any) -> None:
        page = browser.new_page(viewport={"width": width, "height": height}, accept_downloads=True)
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
        asked: list[str] = []
        answers: list[str | bool] = []

        def on_dialog(dialog: Any) -> None:
            asked.append(dialog.message)
            answer = answers.pop(0)
            if answer is False:
                dialog.dismiss()
            elif answer is True:
                dialog.accept()
            else:
                dialog.accept(answer)

        page.on("dialog", on_dialog)
        page.goto(f"{base}/shared/")
        assert _shown(page)[:3] == ["sub/", "a.txt", "b.txt"]
        # A labelled checkbox per row, none for "../"; the toolbar waits.
        assert page.locator("tbody input[type=checkbox]").count() == 7
        assert page.locator('thead input[aria-label="Select all"]').count() == 1
        assert page.locator("#sel").is_hidden()
        # Nothing wider than the screen with the checkbox column.
        assert page.evaluate("document.documentElement.scrollWidth") <= width

        # A click, then a shift-click: the range between them.
        _box(page, "a.txt").click()
        _box(page, "c.txt").click(modifiers=["Shift"])
        checked = page.eval_on_selector_all(
            "tbody input:checked", "els => els.map(e => e.getAttribute('aria-label'))"
        )
        assert checked == ["Select a.txt", "Select b.txt", "Select c.txt"]
        assert page.locator("#sel").is_visible()
        assert page.locator("#sel").inner_text().startswith("3 selected")
        shot(page, f"select-toolbar-{viewport}")
        assert axe_violations(page) == []

        # Download selected: one zip with exactly those files.
        with page.expect_download() as info:
            page.locator("#sel button", has_text="Download selected").click()
        download = info.value
        assert download.suggested_filename == "shared.zip"
        download.save_as(saved)

        # Select all, then none; then b.txt and d.txt to delete.
        every = page.locator('thead input[aria-label="Select all"]')
        every.click()
        assert page.locator("tbody input:checked").count() == 7
        every.click()
        assert page.locator("tbody input:checked").count() == 0
        assert page.locator("#sel").is_hidden()
        _box(page, "b.txt").click()
        _box(page, "d.txt").click()
        delete = page.locator("#sel button", has_text="Delete selected")
        answers.append(False)  # "no": nothing goes
        delete.click()
        assert asked[-1].startswith("Delete 2 items: b.txt, d.txt?")
        assert (d / "b.txt").exists() and (d / "d.txt").exists()
        answers.append(True)
        delete.click()
        page.wait_for_function(
            "() => !document.querySelector('tbody input[aria-label=\"Select d.txt\"]')"
        )
        assert "b.txt" not in _shown(page) and "d.txt" not in _shown(page)
        assert page.locator("#status").inner_text() == "Deleted 2 items"
        assert not (d / "b.txt").exists() and not (d / "d.txt").exists()
        assert (d / "a.txt").exists() and (d / "c.txt").exists()
        # A folder in the selection: deleted last, and the question says so.
        answers.append(False)
        _box(page, "sub").click()
        _box(page, "c.txt").click()
        delete.click()
        assert asked[-1] == (
            "Delete 2 items: c.txt, sub (each folder with everything in it)? This cannot be undone."
        )

        # A selection gone stale (a.txt deleted behind the page): the
        # download says so instead of saving an error.
        every.click()
        every.click()
        _box(page, "a.txt").click()
        (d / "a.txt").unlink()
        page.locator("#sel button", has_text="Download selected").click()
        page.wait_for_function("() => document.querySelector('#status').className === 'bad'")
        assert page.locator("#status").inner_text() == (
            "Cannot download the selection (404 Not Found): reload the page"
        )

        # The editor: only text files get an Edit button.
        assert page.locator('button[aria-label="Edit data.bin"]').count() == 0
        page.locator('button[aria-label="Edit notes.txt"]').click()
        dialog = page.locator("dialog#ed")
        area = dialog.locator("textarea")
        page.wait_for_function("() => document.querySelector('#ed textarea')?.value?.length > 0")
        assert area.input_value() == files["notes.txt"].decode()
        assert area.get_attribute("aria-label") == "Contents of notes.txt"
        shot(page, f"editor-{viewport}")
        assert axe_violations(page) == []
        area.fill("edited in the browser \u2713\n")
        dialog.locator("button", has_text="Save").first.click()
        page.wait_for_function("() => document.querySelector('#ed-s')?.textContent === 'Saved'")
        assert (d / "notes.txt").read_bytes() == "edited in the browser \u2713\n".encode()
        # Another writer changes the file: this editor's ETag is stale.
        (d / "notes.txt").write_bytes(b"the other writer's version, longer\n")
        area.fill("my second edit\n")
        dialog.locator("button", has_text="Save").first.click()
        status = dialog.locator("#ed-s")
        page.wait_for_function("() => document.querySelector('#ed-s')?.className === 'bad'")
        assert "the file changed since you opened it" in status.inner_text()
        assert (d / "notes.txt").read_bytes() == b"the other writer's version, longer\n"
        shot(page, f"editor-conflict-{viewport}")
        assert axe_violations(page) == []
        # Save as copy: a new name, the other writer's file untouched.
        answers.append("notes (mine).txt")
        dialog.locator("button", has_text="Save as copy").click()
        page.wait_for_function(
            "() => document.querySelector('#ed-s')?.textContent?.startsWith('Saved as')"
        )
        assert (d / "notes (mine).txt").read_bytes() == b"my second edit\n"
        # Reload: the other writer's version (the edits were saved: no question).
        dialog.locator("button", has_text="Reload").click()
        page.wait_for_function(
            "() => document.querySelector('#ed textarea')?.value?.startsWith('the other')"
        )
        dialog.locator("button", has_text="Close").click()
        assert dialog.is_hidden()
        assert errors == []

    async with running_server(cfg) as (_, port):
        base = f"http://127.0.0.1:{port}"
        await in_browser(drive)
    z = zipfile.ZipFile(io.BytesIO(saved.read_bytes()))
    assert z.testzip() is None
    got = {n: z.read(n) for n in z.namelist() if not n.endswith("/")}
    assert got == {f"shared/{n}": files[n] for n in ("a.txt", "b.txt", "c.txt")}


async def test_only_what_the_reader_may_do(tmp_path: Path) -> None:
    """Read-only with --archives: checkboxes and Download selected, no
    Delete selected, no Edit; without --archives and --upload: nothing."""
    root = tmp_path / "www"
    files = _tree(root)
    saved = tmp_path / "filtered.zip"

    def drive(browser: Any) -> None:
        page = browser.new_page(viewport={"width": 1280, "height": 800}, accept_downloads=True)
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{base}/shared/")
        if archives:
            _box(page, "a.txt").click()
            assert page.locator("#sel button", has_text="Download selected").is_visible()
            assert page.locator("#sel button", has_text="Delete selected").count() == 0
            # Every row of a filtered listing is not the whole folder.
            page.goto(f"{base}/shared/?filter=a")
            assert sorted(_shown(page)) == ["a.txt", "data.bin"]
            page.locator('thead input[aria-label="Select all"]').click()
            with page.expect_download() as info:
                page.locator("#sel button", has_text="Download selected").click()
            info.value.save_as(saved)
        else:
            assert page.locator("input[type=checkbox]").count() == 0
            assert page.locator("#sel").count() == 0
        assert page.locator("button.ed").count() == 0
        assert errors == []

    for archives in (True, False):
        async with running_server(make_config(root, archives=archives)) as (_, port):
            base = f"http://127.0.0.1:{port}"
            await in_browser(drive)
    z = zipfile.ZipFile(io.BytesIO(saved.read_bytes()))
    got = {n: z.read(n) for n in z.namelist()}
    assert got == {"shared/a.txt": files["a.txt"], "shared/data.bin": files["data.bin"]}


async def test_controls_follow_each_entrys_rights(tmp_path: Path) -> None:
    """With access rules, as alice (Basic, verified by the folder's own
    challenge): Edit only on the text file she may overwrite, and Delete
    selected only while every selected row is one she may delete; the
    editor's save goes through."""
    from serverio.site.passwords import hash_password

    root = tmp_path / "www"
    team = root / "team"
    team.mkdir(parents=True)
    for name in ("edit.txt", "keep.txt", "plain.txt"):
        (team / name).write_text(f"{name}\n")
    users = tmp_path / "users"
    users.write_text(f"alice:{hash_password('wonderland', 1000)}\n")
    cfg = make_config(
        root,
        upload=True,
        min_free_space=0,
        auth_file=str(users),
        allow=(
            "alice:read,list,delete@/team",
            "alice:read,list,delete,overwrite@/team/e*.txt",
            "alice:read,list@/team/k*.txt",
        ),
    )

    def drive(browser: Any) -> None:
        page = browser.new_page(
            viewport={"width": 1280, "height": 800},
            http_credentials={"username": "alice", "password": "wonderland"},
        )
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{base}/team/")
        edits = page.eval_on_selector_all("button.ed", "els => els.map(e => e.ariaLabel)")
        assert edits == ["Edit edit.txt"]
        _box(page, "plain.txt").click()
        delete = page.locator("#sel button", has_text="Delete selected")
        assert delete.is_visible()
        _box(page, "keep.txt").click()  # not hers to delete
        assert delete.is_hidden()
        _box(page, "keep.txt").click()
        assert delete.is_visible()
        page.locator('button[aria-label="Edit edit.txt"]').click()
        page.wait_for_function("() => (document.querySelector('#ed textarea')?.value || '') !== ''")
        page.locator("#ed textarea").fill("saved by alice\n")
        page.locator("#ed button", has_text="Save").first.click()
        page.wait_for_function("() => document.querySelector('#ed-s')?.textContent === 'Saved'")
        assert errors == []

    async with running_server(cfg) as (_, port):
        base = f"http://127.0.0.1:{port}"
        await in_browser(drive)
    assert (team / "edit.txt").read_text() == "saved by alice\n"
    assert (team / "keep.txt").read_text() == "keep.txt\n"
