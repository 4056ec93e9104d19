"""A directory listing rendered by a real browser (headless Chromium).

Skipped, with the reason, where Chromium is not installed (``.ci/run``
installs the Debian ``chromium`` package).  Only 127.0.0.1 URLs are loaded.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import struct
import subprocess
import sys
import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urljoin

import pytest
import trio

from serverio.http import readme as readme_mod

from .conftest import make_config, running_server

CHROMIUM = next(
    (p for p in (shutil.which("chromium"), shutil.which("chromium-browser")) if p), None
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt install chromium)"),
]

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--window-size=1000,700",
)


async def _chromium(profile: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    assert CHROMIUM is not None
    with trio.fail_after(90):
        return await trio.run_process(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


async def test_listing_in_headless_chromium(root: Path, tmp_path: Path) -> None:
    d = root / "noindex"
    (d / "docs").mkdir()
    (d / "<img src=x onerror=alert(1)>.txt").write_text("x")
    (d / "r\u00e9sum\u00e9 2026.pdf").write_bytes(b"%PDF" + b"x" * 40_000)
    for i in range(12):
        (d / f"file-{i:02d}.log").write_text("line\n" * (i * 300))
    shot = tmp_path / "listing.png"
    async with running_server(make_config(root)) as (_, port):
        url = f"http://127.0.0.1:{port}/noindex/"
        dom = await _chromium(tmp_path / "profile-dom", "--dump-dom", url)
        png = await _chromium(tmp_path / "profile-png", f"--screenshot={shot}", url)
    page = dom.stdout.decode("utf-8", "replace")
    assert dom.returncode == 0, dom.stderr.decode("utf-8", "replace")[-2000:]
    assert "<title>Index of /noindex/</title>" in page
    for href in ('href="./docs/"', 'href="./a.txt"', 'href="./r%C3%A9sum%C3%A9%202026.pdf"'):
        assert href in page
    # The hostile name is text in the DOM, never an element the browser built.
    assert "&lt;img src=x onerror=alert(1)&gt;.txt" in page
    assert "<img" not in page
    assert png.returncode == 0, png.stderr.decode("utf-8", "replace")[-2000:]
    data = shot.read_bytes()
    assert _png_size(data) == (1000, 700)
    # A blank page compresses to a few KiB; text, table rules and links do not.
    assert len(data) > 20_000
    keep = os.environ.get("SERVERIO_KEEP_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)


# ------------------------------------------------ hostile names, clicked


# The live-reload script's state (serverio/live/script.py): its event
# stream is open in the current document. Browser tests that edit a file
# wait for it: an edit before is published to no stream of that page.
LIVE_STREAM_OPEN = "!!(window.__serverioLiveReload && window.__serverioLiveReload.connected)"


class _DevTools:
    """A minimal Chrome DevTools Protocol client over ``--remote-debugging-pipe``
    (JSON messages separated by NUL on fds 3 and 4: no websocket needed)."""

    def __init__(self, send: trio.lowlevel.FdStream, recv: trio.lowlevel.FdStream) -> None:
        self._send, self._recv = send, recv
        self._buf = b""
        self._id = 0
        self._pending: list[dict[str, Any]] = []
        self.session: str | None = None
        self.dialogs: list[str] = []
        self.exceptions: list[str] = []

    async def _message(self) -> dict[str, Any]:
        while b"\0" not in self._buf:
            data = await self._recv.receive_some(65536)
            if not data:
                raise EOFError("chromium closed the DevTools pipe")
            self._buf += data
        raw, self._buf = self._buf.split(b"\0", 1)
        msg: dict[str, Any] = json.loads(raw)
        method = msg.get("method")
        if method == "Page.javascriptDialogOpening":
            # A dialog is the proof that script ran: record it, then close it
            # so the page does not hang.
            self.dialogs.append(msg["params"].get("message", ""))
            await self._write("Page.handleJavaScriptDialog", {"accept": True})
        elif method == "Runtime.exceptionThrown":
            self.exceptions.append(json.dumps(msg["params"])[:300])
        return msg

    async def _write(self, method: str, params: dict[str, Any] | None = None) -> int:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if self.session is not None and not method.startswith("Target."):
            msg["sessionId"] = self.session
        await self._send.send_all(json.dumps(msg).encode() + b"\0")
        return self._id

    async def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        want = await self._write(method, params)
        while True:
            msg = await self._message()
            if msg.get("id") == want:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                result: dict[str, Any] = msg.get("result", {})
                return result
            if "method" in msg:
                self._pending.append(msg)

    async def event(self, method: str) -> dict[str, Any]:
        for i, msg in enumerate(self._pending):
            if msg["method"] == method:
                return self._pending.pop(i)
        while True:
            msg = await self._message()
            if msg.get("method") == method:
                return msg
            if "method" in msg:
                self._pending.append(msg)

    async def evaluate(self, expression: str) -> Any:
        r = await self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        return r["result"].get("value")

    async def load(self, url: str | None = None, *, click: str | None = None) -> None:
        """Navigate (to ``url``, or by clicking the element ``click`` selects)
        and wait for the load event; a dialog on the way fails at once."""
        self._pending = [m for m in self._pending if m["method"] != "Page.loadEventFired"]
        if url is not None:
            await self.call("Page.navigate", {"url": url})
        else:
            await self.evaluate(f"{click}.click()")
        with trio.move_on_after(5):
            await self.event("Page.loadEventFired")
            return
        raise AssertionError(f"no page load after {url or click}; dialogs: {self.dialogs}")


@asynccontextmanager
async def _devtools(profile: Path, *extra_flags: str) -> AsyncIterator[_DevTools]:
    assert CHROMIUM is not None
    to_child, from_us = os.pipe()  # chromium reads commands on fd 3
    to_us, from_child = os.pipe()  # and writes replies and events on fd 4
    # Put the pipe ends on fds 3 and 4, then become chromium (dup2 clears
    # close-on-exec on the copies).
    script = "import os,sys; os.dup2(int(sys.argv[1]),3); os.dup2(int(sys.argv[2]),4); "
    script += "os.execv(sys.argv[3], sys.argv[3:])"
    argv = [sys.executable, "-c", script, str(to_child), str(from_child), CHROMIUM, *FLAGS]
    argv += [f"--user-data-dir={profile}", *extra_flags, "--remote-debugging-pipe", "about:blank"]
    proc = await trio.lowlevel.open_process(
        argv, pass_fds=(to_child, from_child), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    os.close(to_child)
    os.close(from_child)
    send, recv = trio.lowlevel.FdStream(from_us), trio.lowlevel.FdStream(to_us)
    try:
        tools = _DevTools(send, recv)
        targets = await tools.call("Target.getTargets")
        [page] = [t for t in targets["targetInfos"] if t["type"] == "page"]
        attached = await tools.call(
            "Target.attachToTarget", {"targetId": page["targetId"], "flatten": True}
        )
        tools.session = attached["sessionId"]
        await tools.call("Page.enable")
        await tools.call("Runtime.enable")
        yield tools
    finally:
        with trio.CancelScope(shield=True):
            with contextlib.suppress(Exception):
                await send.send_all(b'{"id":999999,"method":"Browser.close"}\0')
            with trio.move_on_after(5):
                await proc.wait()
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            await send.aclose()
            await recv.aclose()


HOSTILE_TXT = [
    "javascript:alert(1).txt",
    "JaVaScRiPt:alert(document.domain).txt",
    "data:text,alert(2).txt",
    "<img src=x onerror=alert(3)>.txt",
    "<svg onload=alert(4)>.txt",
    "\"'><b onclick=alert(6)>x.txt",
    "%2e%2e%2fescape.txt",
    "q?a#b;c.txt",
    "back\\slash.txt",
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
    with trio.fail_after(30):
        async with (
            running_server(make_config(root)) as (_, port),
            _devtools(tmp_path / "profile-cdp") as tools,
        ):
            listing = f"http://127.0.0.1:{port}/d/"
            await tools.load(listing)
            hrefs = await tools.evaluate(
                "[...document.querySelectorAll('td.name a')].map(a => a.getAttribute('href'))"
            )
            # The inline style applied: its CSP hash is right.
            assert await tools.evaluate("getComputedStyle(document.body).maxWidth") == "960px"
            assert len(hrefs) == len(HOSTILE_TXT) + 2  # "../", the directory, the files
            for i, href in enumerate(hrefs):
                if href == "../":
                    continue
                await tools.load(listing)
                await tools.load(click=f"document.querySelectorAll('td.name a')[{i}]")
                where, text = await tools.evaluate("[location.href, document.body.innerText]")
                assert where == urljoin(listing, href)
                if href.endswith("/"):
                    assert text.startswith("Index of /d/javascript:alert(5)/"), text
                else:
                    name = unquote(href[2:])
                    assert text == f"content-{HOSTILE_TXT.index(name)}", (href, text)
            assert tools.dialogs == [] and tools.exceptions == []


# ------------------------------------------------ the filter box (issue 28)


async def test_the_filter_box_filters_as_you_type_under_the_csp_and_submits(
    tmp_path: Path,
) -> None:
    root = tmp_path / "www"
    root.mkdir()
    for name in ("apple.txt", "Banana.txt", "cherry.txt", "bandana"):
        (root / name).write_text("x")
    with trio.fail_after(30):
        async with (
            running_server(make_config(root)) as (_, port),
            _devtools(tmp_path / "profile-filter") as tools,
        ):
            await tools.load(f"http://127.0.0.1:{port}/")
            shown = (
                "[...document.querySelectorAll('tbody tr')].filter(r => !r.hidden)"
                ".map(r => r.dataset.name)"
            )
            every = ["apple.txt", "banana.txt", "bandana", "cherry.txt"]
            assert await tools.evaluate(shown) == every
            # Typing runs the page's script: allowed by its hash, nothing else.
            typed = (
                "(() => { const f = document.querySelector('form.filter input');"
                " f.value = 'ANA'; f.dispatchEvent(new Event('input')); })()"
            )
            await tools.evaluate(typed)
            assert await tools.evaluate(shown) == ["banana.txt", "bandana"]
            # The same box is a GET form the server answers (form-action 'self').
            await tools.load(click="document.querySelector('form.filter button')")
            where = await tools.evaluate("location.search")
            assert where == "?filter=ANA"
            rows = await tools.evaluate("[...document.querySelectorAll('tbody tr')].length")
            assert rows == 2 and "2 of 4 entries match" in await tools.evaluate(
                "document.querySelector('footer').innerText"
            )
            assert tools.dialogs == [] and tools.exceptions == []


# ------------------------------------------------ the README below (issue 28)


def _png(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\0" + b"\x80\x20\x20" * width for _ in range(height))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(rows))
        + (chunk(b"IEND", b""))
    )


@pytest.mark.skipif(
    not readme_mod.MARKDOWN, reason="markdown-it-py (the markdown extra) is not installed"
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
    with trio.fail_after(30):
        async with (
            running_server(make_config(root)) as (_, port),
            _devtools(tmp_path / "profile-readme") as tools,
        ):
            await tools.load(f"http://127.0.0.1:{port}/")
            h1 = await tools.evaluate("document.querySelector('.readme h1').innerText")
            assert h1 == "Hello"
            # The relative image loaded under img-src 'self'; it is the only image.
            sizes = await tools.evaluate(
                "[...document.images].map(i => [i.getAttribute('src'), i.naturalWidth])"
            )
            assert sizes == [["pic.png", 7]]
            hrefs = await tools.evaluate(
                "[...document.querySelectorAll('.readme a')].map(a => a.getAttribute('href'))"
            )
            assert hrefs == ["./README.md", "http://127.0.0.2:9/x.png", "pic.png"]
            text = await tools.evaluate("document.querySelector('.readme').innerText")
            assert "<script>alert(2)</script>" in text
            assert tools.dialogs == [] and tools.exceptions == []


# ------------------------------------------------ built-in error pages (issue 28)


async def test_the_error_page_is_styled_under_its_csp_and_links_home(tmp_path: Path) -> None:
    root = tmp_path / "www"
    root.mkdir()
    (root / "index.html").write_text("<!doctype html><title>home</title><p>home page</p>\n")
    hostile = "/%3Cimg%20src=x%20onerror=alert(1)%3E/%22%27%3E%3Cscript%3Ealert(2)%3C/script%3E"
    with trio.fail_after(30):
        async with (
            running_server(make_config(root)) as (_, port),
            _devtools(tmp_path / "profile-errors") as tools,
        ):
            await tools.load(f"http://127.0.0.1:{port}{hostile}")
            got = await tools.evaluate(
                "[document.contentType, document.title, document.querySelector('h1').innerText,"
                " document.images.length, document.scripts.length]"
            )
            assert got == ["text/html", "404 Not Found", "404 Not Found", 0, 0]
            # The inline style applied: the CSP's hash is the style's.
            assert await tools.evaluate("getComputedStyle(document.body).maxWidth") == "960px"
            text = await tools.evaluate("document.body.innerText")
            assert "alert" not in text and "script" not in text
            await tools.load(click="document.querySelector('footer a')")
            where = await tools.evaluate("[location.href, document.title]")
            assert where == [f"http://127.0.0.1:{port}/", "home"]
            assert tools.dialogs == [] and tools.exceptions == []
