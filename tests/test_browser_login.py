"""The sign-in page and share links in a real browser (headless Chromium
through Playwright, tests/browser_kit.py): sign in through the form, the
listing shows who is signed in and the upload form, upload a file, see
the rows' delete only with the delete right (alice has it, bob does not),
make a share link, sign out (the browser holds no session, the upload
form and the delete buttons are gone, an upload is refused), and open
the share link in a fresh profile (a new context).

Skipped, with the reason, where Chromium or Playwright is missing.  Only
127.0.0.1 URLs are loaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from serverio.site.passwords import hash_password

from .browser_kit import axe_violations, in_browser, needs_browser, shot
from .conftest import make_config, running_server

pytestmark = needs_browser

PASSWORD = "correct horse"


async def test_sign_in_upload_share_sign_out(tmp_path: Path) -> None:
    root = tmp_path / "www"
    (root / "in").mkdir(parents=True)
    (root / "in" / "report.txt").write_text("REPORT\n")
    etc = tmp_path / "etc"
    etc.mkdir()
    hashed = hash_password(PASSWORD, 1000)
    (etc / "users").write_text(f"alice:{hashed}\nbob:{hashed}\n")
    (etc / "secret").write_bytes(b"b" * 40)
    picked = tmp_path / "picked.txt"
    picked.write_text("UPLOADED\n")
    cfg = make_config(
        root,
        upload=True,
        min_free_space=0,
        auth_file=str(etc / "users"),
        # Anyone reads and lists; alice may also upload, delete and share
        # in /in; bob (signed in) has only what anyone has.
        allow=(
            "anonymous:read,list@/",
            "anonymous:read,list@/in",
            "alice:upload,delete,share@/in",
        ),
        secret_file=str(etc / "secret"),
    )

    def sign_in(page: Any, user: str) -> None:
        page.goto(f"{base}/.serverio/login?next=/in/")
        page.fill("#user", user)
        page.fill("#password", PASSWORD)
        with page.expect_navigation():
            page.click("form button[type=submit]")
        assert page.url == f"{base}/in/", page.content()
        page.wait_for_selector("#signed-in")
        assert page.text_content("#signed-in") == user

    def drive(browser: Any) -> None:
        alice = browser.new_context()
        page = alice.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        # Before signing in: the listing is anyone's, with no write control.
        page.goto(f"{base}/in/")
        assert page.locator("form.files").count() == 0
        assert page.locator("td.act button").count() == 0
        # The sign-in form, under its CSP (no script needed).
        page.goto(f"{base}/.serverio/login?next=/in/")
        # The sign-in page: axe-core finds nothing serious or critical.
        shot(page, "login")
        assert axe_violations(page) == []
        sign_in(page, "alice")
        assert page.locator("form.files").count() == 1
        # alice has the delete right here: each row's actions, with Delete.
        assert page.get_by_role("button", name="Actions for report.txt").count() == 1
        assert page.locator("form.mkdir").count() == 0  # no mkdir right
        # The cookie is HttpOnly: no script reads it.
        assert "serverio-session" not in page.evaluate("document.cookie")

        # Upload through the listing's form.
        page.locator("form.files input[type=file]").set_input_files([str(picked)])
        with page.expect_navigation():
            page.locator("form.files button[type=submit]").click()
        assert (root / "in" / "picked.txt").read_text() == "UPLOADED\n"
        page.get_by_role("button", name="Actions for picked.txt").click()
        assert page.get_by_role("button", name="Delete\u2026").is_visible()
        page.keyboard.press("Escape")

        # A share link, made from the page (alice has the share right):
        # the row's dialog asks the server, the status line shows it.
        page.get_by_role("button", name="Actions for report.txt").click()
        page.get_by_role("button", name="Share link").click()
        page.wait_for_selector("#status:has-text('Share link: ')")
        link = page.locator("#status").inner_text().split("Share link: ", 1)[1]
        assert link.startswith(f"{base}/.serverio/s/"), link
        # The status line wraps the long link: nothing scrolls sideways.
        assert page.evaluate("document.documentElement.scrollWidth <= innerWidth")

        # Sign out: the browser holds no session, an upload is refused.
        page.wait_for_selector("#sign-out")
        with page.expect_navigation():
            page.click("#sign-out")
        assert page.url == f"{base}/"
        assert not [c for c in alice.cookies() if c["name"] == "serverio-session"]
        # Signed out: the listing again, the upload form and the delete gone.
        page.goto(f"{base}/in/")
        page.wait_for_selector("#account a")  # the account corner has asked who
        assert page.locator("#signed-in").count() == 0
        assert page.locator("form.files").count() == 0
        assert page.locator("td.act button").count() == 0
        assert page.get_by_role("button", name="Actions for report.txt").count() == 0
        assert page.locator("dialog").count() == 0  # no rows' script at all
        refused = page.evaluate(
            """async () => { const f = new FormData();
            f.append('file', new File(['late'], 'late.txt'));
            const r = await fetch('/in/', {method: 'POST', body: f, credentials: 'omit'});
            return r.status; }"""
        )
        assert refused == 401
        assert not (root / "in" / "late.txt").exists()
        assert errors == []
        alice.close()

        # bob signs in: what anyone has, so no upload form, no delete.
        bob = browser.new_context()
        page = bob.new_page()
        sign_in(page, "bob")
        assert page.locator("form.files").count() == 0
        assert page.locator("td.act button").count() == 0  # no delete, no share
        status = page.evaluate(
            "async () => (await fetch('/in/report.txt', {method: 'DELETE'})).status"
        )
        assert status == 403 and (root / "in" / "report.txt").exists()  # the server decides
        bob.close()

        # The share link in a fresh profile: the file, and nothing beside.
        guest = browser.new_context()
        other = guest.new_page()
        other.goto(link)
        assert other.inner_text("body").strip() == "REPORT"
        answer = other.goto(link.rsplit("/", 1)[0] + "/picked.txt")
        assert answer is not None and answer.status == 404
        assert "UPLOADED" not in other.content()
        guest.close()

    async with running_server(cfg) as (_, port):
        base = f"http://127.0.0.1:{port}"
        await in_browser(drive)
