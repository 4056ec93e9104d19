"""A loopback TCP relay the resumable-upload browser judges cut, and the
headless Chromium they drive (Playwright, the system's ``chromium``).

:class:`Relay` listens on 127.0.0.1 port 0 and forwards each connection to
the server under test, optionally paced (bytes per second, each direction
of each connection), so a test can catch an upload mid-way; :meth:`Relay.cut`
drops every connection at once (a lost network: the browser sees its
requests fail) and refuses new ones until :meth:`Relay.restore`.

:func:`in_chromium` runs a plain function with a Playwright ``Browser`` in
a worker thread while the test's trio loop serves (the server and the
relay); the function reaches the relay with ``trio.from_thread``.
Chromium is never downloaded: ``executable_path`` is the Debian package's.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
import trio

__all__ = ["CHROMIUM", "Relay", "browser_marks", "in_chromium"]

os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")

CHROMIUM = next(
    (p for p in (shutil.which("chromium"), shutil.which("chromium-browser")) if p), None
)

try:
    import playwright.sync_api as _pw
except ImportError:  # pragma: no cover - the [test] extra installs it
    _pw = None  # type: ignore[assignment]

browser_marks = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt install chromium)"),
    pytest.mark.skipif(_pw is None, reason="playwright is not installed (the [test] extra)"),
]

T = TypeVar("T")


class Relay:
    """127.0.0.1:``port`` -> 127.0.0.1:``target``; :meth:`cut` drops it all."""

    def __init__(self, target: int, rate: int = 0) -> None:
        self.target = target
        self.rate = rate  # bytes per second per direction and connection; 0: unpaced
        self.port = 0
        self.down = False
        self.relayed = 0  # bytes forwarded client -> server
        self._scopes: set[trio.CancelScope] = set()

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._handle, listeners)

    def cut(self) -> None:
        """Drop every connection now and refuse new ones."""
        self.down = True
        for scope in list(self._scopes):
            scope.cancel()

    def restore(self, rate: int = 0) -> None:
        self.down = False
        self.rate = rate

    async def _pump(self, src: trio.SocketStream, dst: trio.SocketStream, up: bool) -> None:
        while True:
            data = await src.receive_some(16384)
            if not data:
                raise _Closed
            if up:
                self.relayed += len(data)
            await dst.send_all(data)
            if self.rate:
                await trio.sleep(len(data) / self.rate)

    async def _handle(self, client: trio.SocketStream) -> None:
        if self.down:
            await client.aclose()
            return
        try:
            server = await trio.open_tcp_stream("127.0.0.1", self.target)
        except OSError:
            await client.aclose()
            return
        with trio.CancelScope() as scope:
            self._scopes.add(scope)
            try:
                async with trio.open_nursery() as nursery:

                    async def one(src: trio.SocketStream, dst: trio.SocketStream, up: bool) -> None:
                        try:
                            await self._pump(src, dst, up)
                        except (
                            _Closed,
                            trio.BrokenResourceError,
                            trio.ClosedResourceError,
                            OSError,
                        ):
                            pass
                        nursery.cancel_scope.cancel()  # one side ended: the pair ends

                    nursery.start_soon(one, client, server, True)
                    nursery.start_soon(one, server, client, False)
            finally:
                self._scopes.discard(scope)
        with trio.CancelScope(shield=True):
            await client.aclose()
            await server.aclose()


class _Closed(Exception):
    """One side closed: the pair ends."""


def _run(work: Callable[[Any], T]) -> T:
    assert _pw is not None and CHROMIUM is not None
    with _pw.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-dev-shm-usage"],
        )
        try:
            return work(browser)
        finally:
            browser.close()


async def in_chromium(work: Callable[[Any], T], limit: float = 240) -> T:
    """``work(browser)`` in a worker thread; the trio loop keeps serving.
    Past ``limit`` seconds the test fails."""
    with trio.fail_after(limit):
        return await trio.to_thread.run_sync(_run, work, abandon_on_cancel=True)
