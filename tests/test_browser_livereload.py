"""Live reload in a real browser (headless Chromium over the DevTools pipe).

Skipped where Chromium is not installed.  Only 127.0.0.1 URLs are loaded.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import pytest
import trio

from .conftest import make_config, running_server, wait_until
from .test_browser import CHROMIUM, _DevTools, _devtools

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

            def connected() -> bool:
                assert live is not None
                return len(live.broadcast.subscribers) == 1

            await tools.load(f"http://127.0.0.1:{port}/live.html")
            await wait_until(connected)
            # Edit the page: it reloads with the new bytes.
            times = []
            for n in range(1, EDITS + 1):
                _forget_loads(tools)
                saved = time.monotonic()
                page.write_text(_page(n))
                await _reloaded(tools)
                times.append(time.monotonic() - saved)
                assert await tools.evaluate("document.getElementById('v').textContent") == str(n)
                await wait_until(connected)
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
            await wait_until(connected)
            _forget_loads(tools)
            page.write_text(_page(99))
            await _reloaded(tools)
            assert await tools.evaluate("document.getElementById('v').textContent") == "99"
            assert tools.exceptions == []
