"""The sign-in page and share links in a real browser (headless Chromium
over the DevTools pipe, as tests/test_browser.py drives it): sign in
through the form, the listing shows who is signed in and the upload form,
upload a file, make a share link, sign out (the corner offers the sign-in
link again, the upload form is gone and an upload is refused), and open
the share link in a fresh profile.

Skipped, with the reason, where Chromium is not installed.  Only
127.0.0.1 URLs are loaded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import trio

from serverio.site.passwords import hash_password

from .conftest import make_config, running_server
from .test_browser import _DevTools, _devtools, pytestmark  # noqa: F401 - the same skip

PASSWORD = "correct horse"


async def _await(tools: _DevTools, expression: str) -> Any:
    r = await tools.call(
        "Runtime.evaluate",
        {"expression": expression, "awaitPromise": True, "returnByValue": True},
    )
    assert "exceptionDetails" not in r, r["exceptionDetails"]
    return r["result"].get("value")


async def _until(tools: _DevTools, expression: str, limit: float = 5.0) -> None:
    """Poll the page (its state has no event to wait on), bounded."""
    with trio.fail_after(limit):
        while not await tools.evaluate(expression):  # noqa: ASYNC110 - the page's state
            await trio.sleep(0.05)


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
    with trio.fail_after(90):
        async with running_server(cfg) as (_, port):
            base = f"http://127.0.0.1:{port}"
            async with _devtools(tmp_path / "profile-alice") as tools:
                # The sign-in form, under its CSP (no script needed).
                await tools.load(f"{base}/.serverio/login?next=/in/")
                await tools.evaluate(
                    "document.getElementById('user').value = 'alice';"
                    f"document.getElementById('password').value = {json.dumps(PASSWORD)}"
                )
                await tools.load(click="document.querySelector('form button')")
                assert await tools.evaluate("location.pathname") == "/in/"
                await _until(tools, "!!document.getElementById('signed-in')")
                assert (
                    await tools.evaluate("document.getElementById('signed-in').textContent")
                    == "alice"
                )
                assert await tools.evaluate("!!document.querySelector('form.files')")
                # The cookie is HttpOnly: no script reads it.
                assert "serverio-session" not in await tools.evaluate("document.cookie")

                # Upload through the listing's form.
                doc = await tools.call("DOM.getDocument")
                node = await tools.call(
                    "DOM.querySelector",
                    {"nodeId": doc["root"]["nodeId"], "selector": "form.files input[type=file]"},
                )
                await tools.call(
                    "DOM.setFileInputFiles", {"nodeId": node["nodeId"], "files": [str(picked)]}
                )
                await tools.load(click="document.querySelector('form.files button')")
                assert (root / "in" / "picked.txt").read_text() == "UPLOADED\n"

                # A share link, made as the page would (the CSRF token from whoami).
                made = await _await(
                    tools,
                    "(async () => { const w = await (await fetch('/.serverio/whoami')).json();"
                    " const r = await fetch('/.serverio/share', {method: 'POST', body:"
                    " new URLSearchParams({path: '/in/report.txt', csrf: w.csrf,"
                    " expires: '600'})});"
                    " return [r.status, await r.json()]; })()",
                )
                assert made[0] == 201, made
                link = made[1]["url"]

                # Sign out: the corner offers the sign-in link again, the
                # upload form is gone, an upload is refused.
                await _until(tools, "!!document.getElementById('sign-out')")
                await tools.load(click="document.getElementById('sign-out')")
                assert await tools.evaluate("location.pathname") == "/"
                # The browser holds no session any more (the cookie is HttpOnly:
                # asked of the browser, not of the page).
                jar = await tools.call("Network.getCookies", {"urls": [base + "/"]})
                assert not [c for c in jar["cookies"] if c["name"] == "serverio-session"]
                # An upload with whatever the browser still holds: refused.
                # (credentials 'omit' only keeps Chrome from prompting for
                # Basic credentials on the 401; the jar is empty anyway.)
                refused = await _await(
                    tools,
                    "(async () => { const f = new FormData();"
                    " f.append('file', new File(['late'], 'late.txt'));"
                    " return (await fetch('/in/', {method: 'POST', body: f,"
                    " credentials: 'omit'})).status; })()",
                )
                assert refused == 401
                assert not (root / "in" / "late.txt").exists()
                assert tools.exceptions == []

            # The share link in a fresh profile: the file, and nothing beside.
            async with _devtools(tmp_path / "profile-guest") as guest:
                await guest.load(link)
                assert await guest.evaluate("document.body.innerText") == "REPORT\n"
                sibling = link.rsplit("/", 1)[0] + "/picked.txt"
                await guest.load(sibling)
                assert "UPLOADED" not in await guest.evaluate("document.body.innerText")
