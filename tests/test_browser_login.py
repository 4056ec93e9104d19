"""The sign-in page and share links in a real browser (headless Chromium
through Playwright, tests/browser_kit.py): sign in through the form, the
listing shows who is signed in and the upload form, upload a file, make a
share link, sign out (the browser holds no session, an upload is
refused), and open the share link in a fresh profile (a new context).

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
    (etc / "users").write_text(f"alice:{hash_password(PASSWORD, 1000)}\n")
    (etc / "secret").write_bytes(b"b" * 40)
    picked = tmp_path / "picked.txt"
    picked.write_text("UPLOADED\n")
    cfg = make_config(
        root,
        upload=True,
        min_free_space=0,
        auth=(("/in/**", str(etc / "users")),),
        secret_file=str(etc / "secret"),
    )

    def drive(browser: Any) -> None:
        alice = browser.new_context()
        page = alice.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        # The sign-in form, under its CSP (no script needed).
        page.goto(f"{base}/.serverio/login?next=/in/")
        # The sign-in page: axe-core finds nothing serious or critical.
        shot(page, "login")
        assert axe_violations(page) == []
        page.fill("#user", "alice")
        page.fill("#password", PASSWORD)
        with page.expect_navigation():
            page.click("form button[type=submit]")
        assert page.url == f"{base}/in/"
        page.wait_for_selector("#signed-in")
        assert page.text_content("#signed-in") == "alice"
        assert page.locator("form.files").count() == 1
        # The cookie is HttpOnly: no script reads it.
        assert "serverio-session" not in page.evaluate("document.cookie")

        # Upload through the listing's form.
        page.locator("form.files input[type=file]").set_input_files([str(picked)])
        with page.expect_navigation():
            page.locator("form.files button[type=submit]").click()
        assert (root / "in" / "picked.txt").read_text() == "UPLOADED\n"

        # A share link, made as a page would (the CSRF token from whoami).
        made = page.evaluate(
            """async () => { const w = await (await fetch('/.serverio/whoami')).json();
            const r = await fetch('/.serverio/share', {method: 'POST', body:
              new URLSearchParams({path: '/in/report.txt', csrf: w.csrf, expires: '600'})});
            return [r.status, await r.json()]; }"""
        )
        assert made[0] == 201, made
        link = made[1]["url"]

        # Sign out: the browser holds no session, an upload is refused.
        page.wait_for_selector("#sign-out")
        with page.expect_navigation():
            page.click("#sign-out")
        assert page.url == f"{base}/"
        assert not [c for c in alice.cookies() if c["name"] == "serverio-session"]
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
