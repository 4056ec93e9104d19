"""The reverse proxy in a real browser (headless Chromium through
Playwright, tests/browser_kit.py): a page served from files whose script
calls ``/api`` (fetch, JSON) and opens a WebSocket through serverio to the
uvicorn echo of tests/asgi_upstream.py, under ``--watch``.

What live reload does on an edit, and so what "the websocket keeps echoing
across an edit" can honestly mean:

* a stylesheet edit is swapped in place, the document stays: the *same*
  WebSocket (the same object, never reopened: ``window.__opened`` stays 1)
  keeps echoing after it;
* a page edit reloads the page: the old document's socket is closed by the
  browser with it, the new document opens a new one (``__opened`` is 1
  again, in a new document), which echoes; serverio's tunnel count goes
  back to one (the old tunnel was closed, not leaked).

Skipped where Chromium or Playwright is missing.  Only 127.0.0.1 URLs are
loaded.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.asgi_upstream import uvicorn_upstream

from .browser_kit import LIVE_STREAM_OPEN, in_browser, needs_browser, poll
from .conftest import make_config, running_server

pytestmark = needs_browser

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


def _until(page: Any, expression: str, limit: float = 5.0) -> None:
    poll(lambda: page.evaluate(expression), limit, expression)


def _echo(page: Any, text: str) -> None:
    page.evaluate(f"window.ping({text!r})")
    _until(page, f"window.__echoes.includes({text!r})")


async def test_fetch_and_a_websocket_through_the_proxy_across_edits(
    root: Path, tmp_path: Path, asgi_port: int
) -> None:
    page_file = root / "app.html"
    page_file.write_text(_page(0))
    (root / "app.js").write_text(APP_JS)
    (root / "style.css").write_text("p { color: rgb(255, 0, 0) }")
    cfg = make_config(root, watch=True, proxy=(f"/api=http://127.0.0.1:{asgi_port}",))

    def drive(browser: Any) -> None:
        proxy, live = srv.services.proxy, srv.live
        assert proxy is not None and live is not None
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"http://127.0.0.1:{port}/app.html")
        # fetch('/api/json') through the proxy: the upstream's JSON.
        _until(page, "window.__json !== null")
        assert page.evaluate("window.__json.path") == "/api/json"
        assert page.evaluate("window.__json.query") == "from=page"
        # The websocket through the proxy echoes.
        _until(page, "window.__opened === 1")
        _echo(page, "first")
        assert proxy.tunnels.open == 1
        # A stylesheet edit: swapped in place, the same socket echoes on.
        # Only an edit made once the page's event stream is open can
        # reach it (an edit before, while the script still waits for
        # its Web Lock, is published to no one): the page says so once
        # the stream's answer arrived, which the server sends after it
        # subscribed the stream.
        _until(page, LIVE_STREAM_OPEN)
        assert len(live.broadcast.subscribers) == 1
        page.evaluate("window.__sameDocument = 42")
        color = "getComputedStyle(document.getElementById('v')).color"
        (root / "style.css").write_text("p { color: rgb(0, 0, 255) }")
        _until(page, f"{color} === 'rgb(0, 0, 255)'")
        _echo(page, "after css")
        assert page.evaluate("window.__sameDocument") == 42
        assert page.evaluate("window.__opened") == 1  # never reopened
        assert page.evaluate("window.__ws.readyState") == 1  # OPEN
        # A page edit: the page reloads, its new socket echoes.
        with page.expect_event("load", timeout=5000):
            page_file.write_text(_page(1))
        # Null-safe: an edit can reload the page twice (two change events),
        # and between a page's unload and the next one's parse there is no
        # element to read.
        _until(page, "document.getElementById('v')?.textContent === '1'")
        assert page.evaluate("window.__sameDocument") is None  # a new document
        _until(page, "window.__opened === 1")
        _echo(page, "after reload")
        poll(lambda: proxy.tunnels.open == 1, what="the old tunnel closed")
        assert srv.stats.proxy.tunnels == 2
        assert errors == []

    async with running_server(cfg) as (srv, port):
        await in_browser(drive, limit=60)
