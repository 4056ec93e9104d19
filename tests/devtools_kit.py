"""A minimal Chrome DevTools Protocol client for the browser tests of other
features (live reload, the proxy, HTTP/2, --dev-tls, archives): Chromium
over ``--remote-debugging-pipe``.  The listing page's own tests use
Playwright (tests/browser_kit.py).  Skipped where Chromium is not
installed."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

__all__ = ["CHROMIUM", "FLAGS", "LIVE_STREAM_OPEN", "_DevTools", "_devtools", "pytestmark"]

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
