"""Live reload in a real browser (headless Chromium over the DevTools pipe).

Skipped where Chromium is not installed.  Only 127.0.0.1 URLs are loaded.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from serverio.app.server import Server

from .conftest import make_config, running_server, wait_until
from .devtools_kit import CHROMIUM, LIVE_STREAM_OPEN, _DevTools, _devtools

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt install chromium)"),
]

EDITS = 20


def _page(n: int) -> str:
    return (
        "<!doctype html><html><head><link rel=stylesheet href=/style.css></head>"
        f"<body><p id=v>{n}</p></body></html>"
    )


async def _reloaded(tools: _DevTools, limit: float = 5.0) -> None:
    with trio.fail_after(limit):
        await tools.event("Page.loadEventFired")


async def _until_open(tools: _DevTools, limit: float = 5.0) -> None:
    with trio.fail_after(limit):
        while not await tools.evaluate(LIVE_STREAM_OPEN):  # noqa: ASYNC110 - browser state, no event
            await trio.sleep(0.02)


def _forget_loads(tools: _DevTools) -> None:
    tools._pending = [m for m in tools._pending if m["method"] != "Page.loadEventFired"]


async def test_save_reloads_css_swaps_delete_shows_404(root: Path, tmp_path: Path) -> None:
    page = root / "live.html"
    page.write_text(_page(0))
    (root / "style.css").write_text("p { color: rgb(255, 0, 0) }")
    with trio.fail_after(30):
        async with (
            running_server(make_config(root, watch=True)) as (srv, port),
            _devtools(tmp_path / "profile-live") as tools,
        ):
            live = srv.live
            assert live is not None and live.backend == "inotify"

            async def connected() -> None:
                # An edit reaches this document only once its own stream is
                # open (the old document's may still be counted a moment
                # after a reload): the page says so, and the server has
                # dropped the old stream.
                assert live is not None
                await _until_open(tools)
                await wait_until(lambda: len(live.broadcast.subscribers) == 1)

            await tools.load(f"http://127.0.0.1:{port}/live.html")
            await connected()
            # Edit the page: it reloads with the new bytes.
            times = []
            for n in range(1, EDITS + 1):
                _forget_loads(tools)
                saved = time.monotonic()
                page.write_text(_page(n))
                await _reloaded(tools)
                times.append(time.monotonic() - saved)
                assert await tools.evaluate("document.getElementById('v').textContent") == str(n)
                await connected()
            median, worst = statistics.median(times), max(times)
            print(
                f"\nsave-to-reload over {EDITS} edits: median {median * 1000:.0f} ms, "
                f"max {worst * 1000:.0f} ms",
                file=sys.stderr,
            )
            assert median < 0.5
            # Edit the stylesheet: swapped in place, no navigation.
            await tools.evaluate("window.__sameDocument = 42")
            color = "getComputedStyle(document.getElementById('v')).color"
            assert await tools.evaluate(color) == "rgb(255, 0, 0)"
            (root / "style.css").write_text("p { color: rgb(0, 0, 255) }")
            with trio.fail_after(5):
                while await tools.evaluate(color) != "rgb(0, 0, 255)":  # noqa: ASYNC110 - browser state, no event
                    await trio.sleep(0.02)
            assert await tools.evaluate("window.__sameDocument") == 42
            # Delete the page: the reload shows the 404, which reloads again
            # when the page comes back.
            _forget_loads(tools)
            page.unlink()
            await _reloaded(tools)
            assert await tools.evaluate("document.body.innerText") == "404 Not Found"
            await connected()
            _forget_loads(tools)
            page.write_text(_page(99))
            await _reloaded(tools)
            assert await tools.evaluate("document.getElementById('v').textContent") == "99"
            assert tools.exceptions == []


# ------------------------------------------------ several tabs, one stream


class _Tabs:
    """Several pages of one browser over the DevTools pipe: each tab is a
    flattened session; events are kept per session."""

    def __init__(self, tools: _DevTools) -> None:
        self.tools = tools
        self.events: list[dict[str, Any]] = []

    async def call(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None
    ) -> dict[str, Any]:
        tools = self.tools
        tools._id += 1
        want = tools._id
        msg: dict[str, Any] = {"id": want, "method": method, "params": params or {}}
        if session is not None:
            msg["sessionId"] = session
        await tools._send.send_all(json.dumps(msg).encode() + b"\0")
        while True:
            got = await tools._message()
            if got.get("id") == want:
                if "error" in got:
                    raise RuntimeError(f"{method}: {got['error']}")
                result: dict[str, Any] = got.get("result", {})
                return result
            if "method" in got:
                self.events.append(got)

    async def open(self, url: str, init: str = "") -> tuple[str, str]:
        """A new tab at ``url``, loaded: (target id, session id).  ``init``
        runs in every document of the tab before its own scripts."""
        target = (await self.call("Target.createTarget", {"url": "about:blank"}))["targetId"]
        attached = await self.call("Target.attachToTarget", {"targetId": target, "flatten": True})
        session: str = attached["sessionId"]
        await self.call("Page.enable", session=session)
        await self.call("Runtime.enable", session=session)
        if init:
            await self.call("Page.addScriptToEvaluateOnNewDocument", {"source": init}, session)
        self.forget_loads(session)
        await self.call("Page.navigate", {"url": url}, session)
        await self.loaded(session)
        return target, session

    def forget_loads(self, session: str) -> None:
        self.events = [
            e
            for e in self.events
            if not (e["method"] == "Page.loadEventFired" and e.get("sessionId") == session)
        ]

    async def event(
        self, session: str, method: str, match: Callable[[dict[str, Any]], bool] = lambda _: True
    ) -> dict[str, Any]:
        """The first event ``method`` of the tab that ``match`` accepts (taken)."""
        while True:
            for i, e in enumerate(self.events):
                if e["method"] == method and e.get("sessionId") == session and match(e):
                    return self.events.pop(i)
            got = await self.tools._message()
            if "method" in got:
                self.events.append(got)

    async def loaded(self, session: str, limit: float = 10.0) -> None:
        with trio.fail_after(limit):
            await self.event(session, "Page.loadEventFired")

    async def evaluate(self, session: str, expression: str) -> Any:
        r = await self.call(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True}, session
        )
        return r["result"].get("value")

    async def until(self, session: str, expression: str, limit: float = 10.0) -> None:
        with trio.fail_after(limit):
            while not await self.evaluate(session, expression):  # noqa: ASYNC110 - browser state, no event
                await trio.sleep(0.02)


# What an insecure origin (http://<LAN address>) looks like to the script.
NO_WEB_LOCKS = "Object.defineProperty(Navigator.prototype, 'locks', {get: () => undefined})"


@pytest.mark.parametrize("locks", [True, False], ids=["web-locks", "heartbeats"])
async def test_tabs_share_one_stream_the_next_leader_takes_over_and_restarts_reconnect(
    root: Path, tmp_path: Path, locks: bool
) -> None:
    page = root / "tabs.html"
    page.write_text(_page(0))
    (root / "style.css").write_text("p {}")
    cfg = make_config(root, watch=True, shutdown_timeout=2).evolve(host="127.0.0.1", port=0)
    leader = "window.__serverioLiveReload.leader"
    value = "document.getElementById('v').textContent"
    with trio.fail_after(90):
        async with trio.open_nursery() as nursery, _devtools(tmp_path / "profile-tabs") as tools:
            srv = Server(cfg)
            await nursery.start(srv.serve)
            port = srv.addresses()[0][1]
            url = f"http://127.0.0.1:{port}/tabs.html"
            tabs = _Tabs(tools)
            init = "" if locks else NO_WEB_LOCKS
            a_target, a = await tabs.open(url, init)
            b_target, b = await tabs.open(url, init)
            assert await tabs.evaluate(a, "!!navigator.locks") is locks
            # Exactly one stream for the two tabs, held by the leader.
            live = srv.live
            assert live is not None

            def streams(n: int) -> Callable[[], bool]:
                return lambda: len(live.broadcast.subscribers) == n  # type: ignore[union-attr]

            await wait_until(streams(1))
            await tabs.until(a, f"{leader} || window.__serverioLiveReload.connected === false")
            await trio.sleep(2.0)  # a second stream, if any, would show by now
            assert len(live.broadcast.subscribers) == 1
            assert [await tabs.evaluate(s, leader) for s in (a, b)].count(True) == 1
            # Edit: both tabs reload, still one stream.
            for n in (1, 2):
                for s in (a, b):
                    tabs.forget_loads(s)
                page.write_text(_page(n))
                for s in (a, b):
                    await tabs.loaded(s)
                    assert await tabs.evaluate(s, value) == str(n)
                await wait_until(streams(1))
            await trio.sleep(2.0)  # after the reloads: still one stream
            assert len(live.broadcast.subscribers) == 1
            # Close the leader: the other tab opens its own stream and
            # still reloads on the next edit.
            leading = [s for s in (a, b) if await tabs.evaluate(s, leader)]
            assert len(leading) == 1
            gone, other = (a_target, b) if leading[0] == a else (b_target, a)
            await tabs.call("Target.closeTarget", {"targetId": gone})
            await tabs.until(other, f"{leader} && window.__serverioLiveReload.connected")
            await wait_until(streams(1))
            tabs.forget_loads(other)
            page.write_text(_page(3))
            await tabs.loaded(other)
            assert await tabs.evaluate(other, value) == "3"
            await tabs.until(other, "window.__serverioLiveReload.connected")
            # Restart the server on the same port: the page reconnects
            # (with back-off) and reloads on the next edit.
            srv.shutdown()
            await tabs.until(other, "window.__serverioLiveReload.connected === false")
            page.write_text(_page(4))  # while no server runs
            srv = Server(cfg.evolve(port=port))
            tabs.forget_loads(other)
            await nursery.start(srv.serve)
            # Reconnected: the first open after a failure reloads (the
            # page may have changed while the server was down).
            await tabs.loaded(other, limit=20)
            assert await tabs.evaluate(other, value) == "4"
            live = srv.live
            await wait_until(streams(1), limit=20)
            await tabs.until(other, "window.__serverioLiveReload.connected")
            tabs.forget_loads(other)
            page.write_text(_page(5))
            await tabs.loaded(other)
            assert await tabs.evaluate(other, value) == "5"
            assert tools.exceptions == []
            srv.shutdown()


async def test_live_reload_over_tls_uses_an_http2_event_stream(
    root: Path, tmp_path: Path, cert_files: tuple[Path, Path]
) -> None:
    certfile, keyfile = cert_files
    page = root / "tls.html"
    page.write_text(_page(0))
    cfg = make_config(root, watch=True, certfile=str(certfile), keyfile=str(keyfile))
    value = "document.getElementById('v').textContent"
    with trio.fail_after(60):
        async with (
            running_server(cfg) as (srv, port),
            _devtools(tmp_path / "profile-tls") as tools,
        ):
            tabs = _Tabs(tools)
            # The test CA is not in the profile's trust store.
            await tabs.call("Security.setIgnoreCertificateErrors", {"ignore": True})
            target = (await tabs.call("Target.createTarget", {"url": "about:blank"}))["targetId"]
            attached = await tabs.call(
                "Target.attachToTarget", {"targetId": target, "flatten": True}
            )
            s = attached["sessionId"]
            for domain in ("Page", "Runtime", "Network"):
                await tabs.call(f"{domain}.enable", session=s)
            await tabs.call("Page.navigate", {"url": f"https://127.0.0.1:{port}/tls.html"}, s)
            await tabs.loaded(s)
            live = srv.live
            assert live is not None
            await wait_until(lambda: len(live.broadcast.subscribers) == 1)
            with trio.fail_after(10):
                events = await tabs.event(
                    s,
                    "Network.responseReceived",
                    lambda e: e["params"]["response"]["url"].endswith("/.serverio/events"),
                )
            assert events["params"]["response"]["protocol"] == "h2"
            assert events["params"]["response"]["status"] == 200
            assert srv.stats.h2.connections >= 1
            tabs.forget_loads(s)
            page.write_text(_page(1))
            await tabs.loaded(s)
            assert await tabs.evaluate(s, value) == "1"
            assert tools.exceptions == []


# ------------------------------------------------ header-rule CSPs


async def test_the_script_runs_under_a_header_rule_csp_on_pages_and_listings(
    root: Path, tmp_path: Path
) -> None:
    # A /** rule with a strict policy of its own: the browser enforces it
    # beside the listing's, and the injected script still runs and opens
    # its stream on a page and on a listing.
    rule = ("/**", (("Content-Security-Policy", "default-src 'self'"),), ())
    (root / "live.html").write_text(_page(0))
    (root / "style.css").write_text("p { color: rgb(255, 0, 0) }")
    with trio.fail_after(30):
        async with (
            running_server(make_config(root, watch=True, header_rules=(rule,))) as (srv, port),
            _devtools(tmp_path / "profile-csp") as tools,
        ):
            live = srv.live
            assert live is not None
            for path in ("/live.html", "/noindex/"):
                await tools.load(f"http://127.0.0.1:{port}{path}")
                await _until_open(tools)
                await wait_until(lambda: len(live.broadcast.subscribers) == 1)
                if path == "/live.html":
                    # The rule's policy is not widened: its own 'self'
                    # stylesheet applies, as it would without --watch.
                    color = "getComputedStyle(document.getElementById('v')).color"
                    assert await tools.evaluate(color) == "rgb(255, 0, 0)"
            assert tools.exceptions == []
