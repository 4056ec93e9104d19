"""The reverse proxy in a real browser (headless Chromium over the DevTools
pipe): a page served from files whose script calls ``/api`` (fetch, JSON)
and opens a WebSocket through serverio to the uvicorn echo of
tests/asgi_upstream.py, under ``--watch``.

What live reload does on an edit, and so what "the websocket keeps echoing
across an edit" can honestly mean:

* a stylesheet edit is swapped in place, the document stays: the *same*
  WebSocket (the same object, never reopened: ``window.__opened`` stays 1)
  keeps echoing after it;
* a page edit reloads the page: the old document's socket is closed by the
  browser with it, the new document opens a new one (``__opened`` is 1
  again, in a new document), which echoes; serverio's tunnel count goes
  back to one (the old tunnel was closed, not leaked).

Skipped where Chromium is not installed.  Only 127.0.0.1 URLs are loaded.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from tests.asgi_upstream import uvicorn_upstream

from .conftest import make_config, running_server, wait_until
from .devtools_kit import CHROMIUM, LIVE_STREAM_OPEN, _DevTools, _devtools

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt install chromium)"),
]

APP_JS = """
window.__echoes = [];
window.__opened = 0;
window.__json = null;
fetch('/api/json?from=page').then(r => r.json()).then(j => { window.__json = j; });
const ws = new WebSocket('ws://' + location.host + '/api/ws');
window.__ws = ws;
ws.onopen = () => { window.__opened += 1; };
ws.onmessage = (e) => { window.__echoes.push(e.data); };
window.ping = (text) => ws.send(text);
"""


def _page(n: int) -> str:
    return (
        "<!doctype html><html><head><link rel=stylesheet href=/style.css>"
        "<script src=/app.js></script></head>"
        f"<body><p id=v>{n}</p></body></html>"
    )


@pytest.fixture(scope="module")
def asgi_port() -> Iterator[int]:
    with uvicorn_upstream() as port:
        yield port


async def _until(tools: _DevTools, expression: str, limit: float = 5.0) -> None:
    with trio.fail_after(limit):
        while not await tools.evaluate(expression):  # noqa: ASYNC110 - browser state, no event
            await trio.sleep(0.02)


async def _echo(tools: _DevTools, text: str) -> None:
    await tools.evaluate(f"window.ping({text!r})")
    await _until(tools, f"window.__echoes.includes({text!r})")


async def test_fetch_and_a_websocket_through_the_proxy_across_edits(
    root: Path, tmp_path: Path, asgi_port: int
) -> None:
    page = root / "app.html"
    page.write_text(_page(0))
    (root / "app.js").write_text(APP_JS)
    (root / "style.css").write_text("p { color: rgb(255, 0, 0) }")
    cfg = make_config(root, watch=True, proxy=(f"/api=http://127.0.0.1:{asgi_port}",))
    with trio.fail_after(60):
        async with (
            running_server(cfg) as (srv, port),
            _devtools(tmp_path / "profile-proxy") as tools,
        ):
            proxy, live = srv.services.proxy, srv.live
            assert proxy is not None and live is not None
            await tools.load(f"http://127.0.0.1:{port}/app.html")
            # fetch('/api/json') through the proxy: the upstream's JSON.
            await _until(tools, "window.__json !== null")
            assert await tools.evaluate("window.__json.path") == "/api/json"
            assert await tools.evaluate("window.__json.query") == "from=page"
            # The websocket through the proxy echoes.
            await _until(tools, "window.__opened === 1")
            await _echo(tools, "first")
            assert proxy.tunnels.open == 1
            # A stylesheet edit: swapped in place, the same socket echoes on.
            # Only an edit made once the page's event stream is open can
            # reach it (an edit before, while the script still waits for
            # its Web Lock, is published to no one): the page says so once
            # the stream's answer arrived, which the server sends after it
            # subscribed the stream.
            await _until(tools, LIVE_STREAM_OPEN)
            assert len(live.broadcast.subscribers) == 1
            await tools.evaluate("window.__sameDocument = 42")
            color = "getComputedStyle(document.getElementById('v')).color"
            (root / "style.css").write_text("p { color: rgb(0, 0, 255) }")
            await _until(tools, f"{color} === 'rgb(0, 0, 255)'")
            await _echo(tools, "after css")
            assert await tools.evaluate("window.__sameDocument") == 42
            assert await tools.evaluate("window.__opened") == 1  # never reopened
            assert await tools.evaluate("window.__ws.readyState") == 1  # OPEN
            # A page edit: the page reloads, its new socket echoes.
            tools._pending = [m for m in tools._pending if m["method"] != "Page.loadEventFired"]
            page.write_text(_page(1))
            with trio.fail_after(5):
                await tools.event("Page.loadEventFired")
            await _until(tools, "document.getElementById('v').textContent === '1'")
            assert await tools.evaluate("window.__sameDocument") is None  # a new document
            await _until(tools, "window.__opened === 1")
            await _echo(tools, "after reload")
            await wait_until(lambda: proxy.tunnels.open == 1)  # the old tunnel closed
            assert srv.stats.proxy.tunnels == 2
            assert tools.exceptions == []
