"""bench trace's figures for the PUT and the proxied GET, pinned (issue 42's
gate "no request type gets worse"; docs/history/trace-put-proxy-round5.md).

The baseline of 6c7bf43 was a PUT of 10 distinct packages and 70
``call_returns`` (a package called again after the request was in
another one), a proxied GET of 7 and 49.  The figures reached here are
the bounds: a change that makes either walk back and forth more fails.
One run of the real tool on the working tree (a child process, about
five seconds: the file cache's two-second racy rule is waited out)."""

from __future__ import annotations

from typing import Any

import pytest

from bench import commits, trace

# (distinct, call_returns) reached; 6c7bf43: put (10, 70), proxy (7, 49).
REACHED = {"put": (10, 59), "proxy": (7, 47)}


@pytest.fixture(scope="module")
def traced() -> dict[str, Any]:
    kinds: dict[str, Any] = trace.trace(commits.REPO, list(REACHED), 5, False)["kinds"]
    return kinds


@pytest.mark.parametrize("kind", list(REACHED))
def test_no_more_packages_nor_returns_than_reached(traced: dict[str, Any], kind: str) -> None:
    got = traced[kind]
    distinct, call_returns = REACHED[kind]
    assert got["status"] == (204 if kind == "put" else 200)
    assert got["distinct"] <= distinct, got["packages"]
    assert got["call_returns"] <= call_returns, got["packages"]


def test_a_plain_put_passes_resumable_uploads_by_and_asks_the_site_once(
    traced: dict[str, Any],
) -> None:
    packages = traced["put"]["packages"]
    # A PUT without Upload-Complete is no resumable upload: never entered.
    assert "resumable" not in packages
    # Without site rules no access target is described: the site package
    # is entered once (the client's key for the write slots).
    assert packages.count("site") == 1
