"""Live reload in a real browser (headless Chromium through Playwright,
tests/browser_kit.py): a save reloads the page, a stylesheet is swapped in
place, a deleted page shows the 404; several tabs share one event stream
and the next leader takes over; a restarted server is reconnected to; over
TLS the event stream is HTTP/2; the script runs under a header rule's CSP.

Skipped where Chromium or Playwright is missing.  Only 127.0.0.1 URLs are
loaded.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from serverio.app.server import Server

from .browser_kit import LIVE_STREAM_OPEN, in_browser, needs_browser, poll
from .conftest import make_config, running_server

pytestmark = needs_browser

EDITS = 20


def _page(n: int) -> str:
    return (
        "<!doctype html><html><head><link rel=stylesheet href=/style.css></head>"
        f"<body><p id=v>{n}</p></body></html>"
    )


def _until(page: Any, expression: str, limit: float = 10.0) -> None:
    poll(lambda: page.evaluate(expression), limit, expression)


async def test_save_reloads_css_swaps_delete_shows_404(root: Path, tmp_path: Path) -> None:
    page_file = root / "live.html"
    page_file.write_text(_page(0))
    (root / "style.css").write_text("p { color: rgb(255, 0, 0) }")

    def drive(browser: Any) -> None:
        live = srv.live
        assert live is not None and live.backend == "inotify"
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))

        def connected() -> None:
            # An edit reaches this document only once its own stream is
            # open (the old document's may still be counted a moment
            # after a reload): the page says so, and the server has
            # dropped the old stream.
            assert live is not None
            _until(page, LIVE_STREAM_OPEN, 5)
            poll(lambda: len(live.broadcast.subscribers) == 1, what="one stream")

        page.goto(f"http://127.0.0.1:{port}/live.html")
        connected()
        # Edit the page: it reloads with the new bytes.
        times = []
        for n in range(1, EDITS + 1):
            saved = time.monotonic()
            with page.expect_event("load", timeout=5000):
                page_file.write_text(_page(n))
            times.append(time.monotonic() - saved)
            assert page.evaluate("document.getElementById('v').textContent") == str(n)
            connected()
        median, worst = statistics.median(times), max(times)
        print(
            f"\nsave-to-reload over {EDITS} edits: median {median * 1000:.0f} ms, "
            f"max {worst * 1000:.0f} ms",
            file=sys.stderr,
        )
        assert median < 0.5
        # Edit the stylesheet: swapped in place, no navigation.
        page.evaluate("window.__sameDocument = 42")
        color = "getComputedStyle(document.getElementById('v')).color"
        assert page.evaluate(color) == "rgb(255, 0, 0)"
        (root / "style.css").write_text("p { color: rgb(0, 0, 255) }")
        _until(page, f"{color} === 'rgb(0, 0, 255)'", 5)
        assert page.evaluate("window.__sameDocument") == 42
        # Delete the page: the reload shows the 404, which reloads again
        # when the page comes back.
        with page.expect_event("load", timeout=5000):
            page_file.unlink()
        assert page.evaluate("document.body.innerText") == "404 Not Found"
        connected()
        with page.expect_event("load", timeout=5000):
            page_file.write_text(_page(99))
        assert page.evaluate("document.getElementById('v').textContent") == "99"
        assert errors == []

    async with running_server(make_config(root, watch=True)) as (srv, port):
        await in_browser(drive, limit=60)


# ------------------------------------------------ several tabs, one stream

# What an insecure origin (http://<LAN address>) looks like to the script.
NO_WEB_LOCKS = "Object.defineProperty(Navigator.prototype, 'locks', {get: () => undefined})"


@pytest.mark.parametrize("locks", [True, False], ids=["web-locks", "heartbeats"])
async def test_tabs_share_one_stream_the_next_leader_takes_over_and_restarts_reconnect(
    root: Path, tmp_path: Path, locks: bool
) -> None:
    page_file = root / "tabs.html"
    page_file.write_text(_page(0))
    (root / "style.css").write_text("p {}")
    cfg = make_config(root, watch=True, shutdown_timeout=2).evolve(host="127.0.0.1", port=0)
    leader = "window.__serverioLiveReload.leader"
    value = "document.getElementById('v').textContent"
    srv: Server  # bound below, before drive runs; drive rebinds it on a restart

    def streams(n: int) -> Callable[[], bool]:
        return lambda: srv.live is not None and len(srv.live.broadcast.subscribers) == n

    def drive(browser: Any) -> None:
        nonlocal srv
        context = browser.new_context()
        errors: list[str] = []

        def tab() -> Any:
            page = context.new_page()
            page.on("pageerror", lambda e: errors.append(str(e)))
            if not locks:
                page.add_init_script(NO_WEB_LOCKS)
            page.goto(url)
            return page

        a, b = tab(), tab()
        assert a.evaluate("!!navigator.locks") is locks
        # Exactly one stream for the two tabs, held by the leader.
        poll(streams(1), what="one stream")
        _until(a, f"{leader} || window.__serverioLiveReload.connected === false")
        time.sleep(2.0)  # a second stream, if any, would show by now
        assert streams(1)()
        assert [p.evaluate(leader) for p in (a, b)].count(True) == 1
        # Edit: both tabs reload, still one stream.
        for n in (1, 2):
            with a.expect_event("load", timeout=10000), b.expect_event("load", timeout=10000):
                page_file.write_text(_page(n))
            for p in (a, b):
                assert p.evaluate(value) == str(n)
            poll(streams(1), what="one stream")
        time.sleep(2.0)  # after the reloads: still one stream
        assert streams(1)()
        # Close the leader: the other tab opens its own stream and still
        # reloads on the next edit.
        leading = [p for p in (a, b) if p.evaluate(leader)]
        assert len(leading) == 1
        other = b if leading[0] is a else a
        leading[0].close()
        _until(other, f"{leader} && window.__serverioLiveReload.connected")
        poll(streams(1), what="one stream")
        with other.expect_event("load", timeout=10000):
            page_file.write_text(_page(3))
        assert other.evaluate(value) == "3"
        _until(other, "window.__serverioLiveReload.connected")
        # Restart the server on the same port: the page reconnects (with
        # back-off) and reloads on the next edit.
        trio.from_thread.run_sync(srv.shutdown)
        _until(other, "window.__serverioLiveReload.connected === false")
        page_file.write_text(_page(4))  # while no server runs
        srv = Server(cfg.evolve(port=port))
        # Reconnected: the first open after a failure reloads (the page
        # may have changed while the server was down).
        with other.expect_event("load", timeout=20000):
            trio.from_thread.run(nursery.start, srv.serve)
        assert other.evaluate(value) == "4"
        poll(streams(1), 20, "one stream on the new server")
        _until(other, "window.__serverioLiveReload.connected")
        with other.expect_event("load", timeout=10000):
            page_file.write_text(_page(5))
        assert other.evaluate(value) == "5"
        assert errors == []
        context.close()
        trio.from_thread.run_sync(srv.shutdown)

    async with trio.open_nursery() as nursery:
        srv = Server(cfg)
        await nursery.start(srv.serve)
        port = srv.addresses()[0][1]
        url = f"http://127.0.0.1:{port}/tabs.html"
        try:
            await in_browser(drive, limit=90)
        finally:
            srv.shutdown()


async def test_live_reload_over_tls_uses_an_http2_event_stream(
    root: Path, tmp_path: Path, cert_files: tuple[Path, Path]
) -> None:
    certfile, keyfile = cert_files
    page_file = root / "tls.html"
    page_file.write_text(_page(0))
    cfg = make_config(root, watch=True, certfile=str(certfile), keyfile=str(keyfile))
    value = "document.getElementById('v').textContent"

    def drive(browser: Any) -> None:
        # The test CA is not in the profile's trust store.
        context = browser.new_context(ignore_https_errors=True)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        # The event stream never ends, so it has no resource timing entry:
        # its response (and protocol) as the DevTools protocol reports it.
        cdp = context.new_cdp_session(page)
        cdp.send("Network.enable")
        responses: list[dict[str, Any]] = []
        cdp.on("Network.responseReceived", lambda e: responses.append(e["response"]))
        page.goto(f"https://127.0.0.1:{port}/tls.html")
        live = srv.live
        assert live is not None
        poll(lambda: len(live.broadcast.subscribers) == 1, what="one stream")

        def events() -> list[dict[str, Any]]:
            page.evaluate("0")  # Playwright delivers events during its calls
            return [r for r in responses if r["url"].endswith("/.serverio/events")]

        poll(events, 10, "the event stream's response")
        assert events()[0]["protocol"] == "h2"
        assert events()[0]["status"] == 200
        assert srv.stats.h2.connections >= 1
        with page.expect_event("load", timeout=10000):
            page_file.write_text(_page(1))
        assert page.evaluate(value) == "1"
        assert errors == []
        context.close()

    async with running_server(cfg) as (srv, port):
        await in_browser(drive, limit=60)


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

    def drive(browser: Any) -> None:
        live = srv.live
        assert live is not None
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        for path in ("/live.html", "/noindex/"):
            page.goto(f"http://127.0.0.1:{port}{path}")
            _until(page, LIVE_STREAM_OPEN, 5)
            poll(lambda: len(live.broadcast.subscribers) == 1, what="one stream")
            if path == "/live.html":
                # The rule's policy is not widened: its own 'self'
                # stylesheet applies, as it would without --watch.
                color = "getComputedStyle(document.getElementById('v')).color"
                assert page.evaluate(color) == "rgb(255, 0, 0)"
        assert errors == []

    cfg = make_config(root, watch=True, header_rules=(rule,))
    async with running_server(cfg) as (srv, port):
        await in_browser(drive, limit=60)
