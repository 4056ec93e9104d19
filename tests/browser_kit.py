"""Headless Chromium through Playwright for the browser tests.

Playwright drives the system's Chromium (``.ci/run`` installs the Debian
``chromium``); it never downloads a browser (``PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD``
for the pip install, and ``executable_path`` here).  Its sync API runs in a
worker thread (:func:`in_browser`) while the test's trio loop serves the
requests, so a test is: start a server, then run a plain function that
drives the page.  Only 127.0.0.1 URLs are loaded.

Screenshots are the run's artefacts: :func:`shot` saves them under
``tests/artifacts/`` (ignored by git; ``SERVERIO_ARTIFACTS`` moves it) and
prints each path.  :func:`axe_violations` injects axe-core (npm, installed by
``.ci/run`` under ``.ci/node``; ``SERVERIO_AXE_JS`` names another copy)
through the DevTools protocol, so the page's strict CSP stays as served.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import trio

__all__ = [
    "ARTIFACTS",
    "AXE_JS",
    "CHROMIUM",
    "LIVE_STREAM_OPEN",
    "axe_violations",
    "browser_test",
    "in_browser",
    "needs_browser",
    "poll",
    "shot",
]

os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")

CHROMIUM = next(
    (p for p in (shutil.which("chromium"), shutil.which("chromium-browser")) if p), None
)
_REPO = Path(__file__).resolve().parent.parent
ARTIFACTS = Path(os.environ.get("SERVERIO_ARTIFACTS", _REPO / "tests" / "artifacts"))


def _axe_js() -> Path | None:
    for candidate in (
        os.environ.get("SERVERIO_AXE_JS"),
        _REPO / ".ci" / "node" / "node_modules" / "axe-core" / "axe.min.js",
    ):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


AXE_JS = _axe_js()

try:
    import playwright.sync_api as _pw
except ImportError:  # pragma: no cover - the [test] extra installs it
    _pw = None  # type: ignore[assignment]

needs_browser = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt install chromium)"),
    pytest.mark.skipif(_pw is None, reason="playwright is not installed (the [test] extra)"),
]

# The live-reload script's state (serverio/live/script.py): its event
# stream is open in the current document.  Browser tests that edit a file
# wait for it: an edit before is published to no stream of that page.
LIVE_STREAM_OPEN = "!!(window.__serverioLiveReload && window.__serverioLiveReload.connected)"

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


def browser_test(fn: F) -> F:
    """:data:`needs_browser` on one test (a module of other tests)."""
    for mark in needs_browser:
        fn = mark(fn)
    return fn


def _run(work: Callable[[Any], T], args: tuple[str, ...]) -> T:
    assert _pw is not None and CHROMIUM is not None
    with _pw.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", *args],
        )
        try:
            return work(browser)
        finally:
            browser.close()


async def in_browser(work: Callable[[Any], T], limit: float = 120, args: tuple[str, ...] = ()) -> T:
    """Run ``work(browser)`` (a Playwright ``Browser``, launched with the
    extra command-line ``args``) in a worker thread; the trio loop keeps
    serving meanwhile (``trio.from_thread`` reaches it from ``work``).
    Past ``limit`` seconds the test fails (the thread is abandoned;
    Playwright's own 30 s step timeouts end it)."""
    with trio.fail_after(limit):
        return await trio.to_thread.run_sync(_run, work, args, abandon_on_cancel=True)


def poll(predicate: Callable[[], object], limit: float = 5.0, what: str = "") -> None:
    """In ``work``'s thread: wait (real seconds, at most ``limit``) until
    ``predicate()`` is true: a page's or the server's state that has no
    event to wait on (the server's counters are read, never changed)."""
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {limit} s: {what or predicate}")
        time.sleep(0.02)


def shot(page: Any, name: str) -> Path:
    """Save a full-page screenshot as an artefact of the run; print its path."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")
    return path


def axe_violations(page: Any, impacts: tuple[str, ...] = ("serious", "critical")) -> list[Any]:
    """axe-core's violations of ``impacts`` on the page as it is now (the
    WCAG 2.x A and AA rules and best practices)."""
    if AXE_JS is None:
        pytest.skip("axe-core is not installed (npm install --prefix .ci/node axe-core)")
    if not page.evaluate("typeof axe !== 'undefined'"):
        page.evaluate(AXE_JS.read_text())
    found = page.evaluate(
        """async () => (await axe.run(document, {resultTypes: ["violations"]})).violations
        .map(v => ({id: v.id, impact: v.impact, help: v.help,
                    nodes: v.nodes.map(n => n.target.join(" ")).slice(0, 5)}))"""
    )
    return [v for v in found if v["impact"] in impacts]
