"""Deep request paths: bounded filesystem work per request, and the segment cap.

Every test runs under each strategy of :class:`serverio.fs.opener.RootOpener`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from serverio import Server
from serverio.fs import opener as _fsopen
from serverio.http.target import MAX_SEGMENTS

from .conftest import make_config, memory_connection


@dataclass
class OpenCounts:
    calls: int = 0  # RootOpener.open
    syscalls: int = 0  # openat / openat2 / readlinkat made by the opener


@contextmanager
def counting(srv: Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenCounts]:
    counts = OpenCounts()
    opener = srv.opener
    real_open = opener.open

    def counted_open(rel: str) -> int:
        counts.calls += 1
        return real_open(rel)

    def counted(fn: Callable[..., object]) -> Callable[..., object]:
        def wrapper(*args: object, **kwargs: object) -> object:
            counts.syscalls += 1
            return fn(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(opener, "open", counted_open)
    monkeypatch.setattr(os, "open", counted(os.open))
    monkeypatch.setattr(os, "readlink", counted(os.readlink))
    if _fsopen._syscall is not None:
        monkeypatch.setattr(_fsopen, "_syscall", counted(_fsopen._syscall))
    yield counts


async def test_spa_deep_missing_path_costs_a_bounded_number_of_opens(
    root: Path, strategy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A missing path just under the segment cap: the target's open and the
    SPA file's, not one open per missing level."""
    path = "/a" * MAX_SEGMENTS
    async with memory_connection(make_config(root, spa="index.html")) as (client, srv, _):
        _ = srv.opener
        with counting(srv, monkeypatch) as counts:
            r = await client.get(path)
    assert r.status == 200 and r.body == b"<h1>home</h1>\n"
    assert counts.calls == 2
    assert counts.syscalls <= 4


async def test_deep_existing_prefix_is_walked_once(
    root: Path, strategy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deep existing prefix, then missing levels: at most one open per
    segment of the target (a walk), never one per level and prefix."""
    deep = root.joinpath(*["d"] * 60)
    deep.mkdir(parents=True)
    path = "/d" * 60 + "/x" * (MAX_SEGMENTS - 60)
    async with memory_connection(make_config(root, spa="index.html")) as (client, srv, _):
        _ = srv.opener
        with counting(srv, monkeypatch) as counts:
            r = await client.get(path)
    assert r.status == 200
    assert counts.calls == 2
    assert counts.syscalls <= 61 + 2


@pytest.mark.parametrize("spa", [None, "index.html"])
async def test_too_many_segments_is_414(
    root: Path, strategy: str, spa: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = make_config(root, spa=spa)
    statuses = []
    for path in ("/a" * (MAX_SEGMENTS + 1), "/a" * 2040):
        # A bad target ends its connection (like every request-target error).
        async with memory_connection(cfg) as (client, srv, _):
            _ = srv.opener
            with counting(srv, monkeypatch) as counts:
                statuses.append((await client.get(path)).status)
            assert counts.calls == 0  # refused before any filesystem work
    assert statuses == [414, 414]
