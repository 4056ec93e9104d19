"""The recursive search ``?q=`` streams its results (issue 46): the first
ones reach the client while the walk is still under way (a scan held in
its thread by a gate), in HTML, JSON and text, on HTTP/1.1 (chunked) and
HTTP/2 (DATA frames); the ending says whether and why the walk stopped;
a client that leaves (a closed connection, a reset stream) stops the walk
and leaves no task and no busy thread behind."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

import serverio.pipeline.search as search_mod
from serverio.concurrency.blocking import run_blocking
from serverio.fs.search import scan_batch

from .conftest import make_config, memory_connection
from .h2client import h2_memory


class Gate:
    """Holds every scan after the searched folder's own in its thread
    until :attr:`open` is set (a filesystem that blocks)."""

    def __init__(self, real: Callable[..., Any]) -> None:
        self.real = real
        self.open = threading.Event()
        self.held = threading.Event()
        self.calls = 0

    def scan(
        self, opener: object, base: object, dirs: list[tuple[str, ...]], *rest: object
    ) -> object:
        self.calls += 1
        if dirs != [()]:
            self.held.set()
            self.open.wait(10)
        return self.real(opener, base, dirs, *rest)


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[Gate]:
    g = Gate(scan_batch)
    monkeypatch.setattr(search_mod, "scan_batch", g.scan)
    yield g
    g.open.set()


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "www"
    deep = root / "sub" / "s1" / "s2" / "s3"
    deep.mkdir(parents=True)
    (root / "a_match.txt").write_text("a")
    (root / "sub" / "b_match.txt").write_text("b")
    (deep / "c_match.txt").write_text("c")
    return root


def _dechunk(raw: bytes) -> bytes:
    out = b""
    while True:
        size, _, raw = raw.partition(b"\r\n")
        n = int(size, 16)
        if n == 0:
            return out
        out, raw = out + raw[:n], raw[n + 2 :]


def _tasks() -> int:
    def count(task: trio.lowlevel.Task) -> int:
        return 1 + sum(count(t) for n in task.child_nurseries for t in n.child_tasks)

    root = trio.lowlevel.current_root_task()
    assert root is not None
    return count(root)


async def _wait(predicate: Callable[[], bool]) -> None:
    with trio.fail_after(10):
        while not predicate():  # noqa: ASYNC110 - a thread's state, no event to wait on
            await trio.sleep(0.01)


@pytest.mark.parametrize(
    ("fmt", "end"),
    [
        ("json", b'],"truncated":false,"visited":'),
        ("html", b"3 matches for \xe2\x80\x9cmatch\xe2\x80\x9d"),
        ("text", b"sub/s1/s2/s3/c_match.txt\n"),
    ],
)
async def test_first_results_arrive_before_the_walk_ends_http1(
    tree: Path, gate: Gate, fmt: str, end: bytes
) -> None:
    cfg = make_config(tree, work_workers=2)
    async with memory_connection(cfg) as (client, _, _):
        await client.send_raw(f"GET /?q=match&format={fmt} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
        raw = b""
        with trio.fail_after(10):
            while b"a_match.txt" not in raw:
                raw += await client.stream.receive_some(65536)
        head, _, body = raw.partition(b"\r\n\r\n")
        assert b"transfer-encoding: chunked" in head.lower() and b"etag" not in head.lower()
        # The walk is held in its second batch: the folder's own match is out.
        await _wait(gate.held.is_set)
        assert end not in raw and b"b_match" not in raw
        gate.open.set()
        with trio.fail_after(10):
            while not raw.endswith(b"0\r\n\r\n"):
                raw += await client.stream.receive_some(65536)
        body = _dechunk(raw.partition(b"\r\n\r\n")[2])
        assert end in body
        if fmt == "json":
            doc = json.loads(body)
            names = [e["name"] for e in doc["entries"]]
            assert names == ["a_match.txt", "sub/b_match.txt", "sub/s1/s2/s3/c_match.txt"]
            assert doc["stopped"] is None and doc["truncated"] is False
        if fmt == "text":
            assert body == b"a_match.txt\nsub/b_match.txt\nsub/s1/s2/s3/c_match.txt\n"


async def test_first_results_arrive_as_data_frames_before_the_walk_ends_http2(
    tree: Path, gate: Gate
) -> None:
    async with h2_memory(make_config(tree, work_workers=2)) as (client, _, _):
        sid = client.request("/?q=match&format=json")
        await client.flush()
        r = client.responses[sid]
        with trio.fail_after(10):
            while b"a_match.txt" not in r.body:
                assert await client.pump()
        await _wait(gate.held.is_set)
        assert not r.ended and b"b_match" not in r.body
        gate.open.set()
        (r,) = await client.wait(sid)
        assert r.status == 200 and r.ended and "content-length" not in r.headers
        assert r.data_frames >= 2
        assert len(json.loads(bytes(r.body))["entries"]) == 3


async def test_the_bounds_still_apply_and_the_ending_names_them(tmp_path: Path) -> None:
    root = tmp_path / "www"
    for d in range(30):
        (root / f"d{d}").mkdir(parents=True)
        for f in range(10):
            (root / f"d{d}" / f"f{f}.txt").write_bytes(b"")
    cfg = make_config(root, search_max_entries=100, work_workers=2)
    async with memory_connection(cfg) as (client, _, _):
        r = await client.get("/?q=f&format=json")
        doc = json.loads(r.body)
        assert doc["stopped"] == "entries" and doc["visited"] <= 100
        assert len(doc["entries"]) <= 100


async def test_a_walk_that_outlives_search_time_ends_at_it_with_the_thread_abandoned(
    tree: Path, gate: Gate
) -> None:
    cfg = make_config(tree, search_time=2.0, work_workers=2)
    async with memory_connection(cfg) as (client, srv, _):
        with trio.fail_after(10):
            r = await client.get("/?q=match&format=json")
        doc = json.loads(r.body)
        assert doc["stopped"] == "time" and [e["name"] for e in doc["entries"]] == ["a_match.txt"]
        assert srv.services.work.running == 1  # the held scan, abandoned
        gate.open.set()
        await _wait(lambda: srv.services.work.running == 0)


async def test_a_closed_connection_stops_the_walk_http1(tree: Path, gate: Gate) -> None:
    async with memory_connection(make_config(tree, work_workers=2)) as (client, srv, _):
        await client.get("/a_match.txt")
        baseline = _tasks()
        await client.send_raw(b"GET /?q=match HTTP/1.1\r\nHost: t\r\n\r\n")
        raw = b""
        with trio.fail_after(10):
            while b"a_match.txt" not in raw:
                raw += await client.stream.receive_some(65536)
        await _wait(gate.held.is_set)
        await client.stream.aclose()
        # HTTP/1.1 learns of it at its next write: after the held batch.
        gate.open.set()
        await _wait(lambda: srv.services.work.running == 0 and _tasks() < baseline)
        assert gate.calls == 2  # no batch after the client left


async def test_a_reset_stream_stops_the_walk_at_once_http2(tree: Path, gate: Gate) -> None:
    from h2.errors import ErrorCodes

    async with h2_memory(make_config(tree, work_workers=2)) as (client, srv, _):
        await client.get("/a_match.txt")
        baseline = _tasks()
        sid = client.request("/?q=match")
        await client.flush()
        with trio.fail_after(10):
            while b"a_match.txt" not in client.responses[sid].body:
                assert await client.pump()
        await _wait(gate.held.is_set)
        client.conn.reset_stream(sid, ErrorCodes.CANCEL)
        await client.flush()
        # The stream's task is gone while the scan is still held in its
        # thread (abandoned, it keeps its pool token until it returns).
        await _wait(lambda: _tasks() == baseline)
        assert srv.services.work.running == 1
        gate.open.set()
        await _wait(lambda: srv.services.work.running == 0)
        assert gate.calls == 2
        nxt = await client.get("/a_match.txt")
        assert nxt.status == 200


async def test_head_walks_nothing(tree: Path, gate: Gate) -> None:
    async with memory_connection(make_config(tree, work_workers=2)) as (client, _, _):
        r = await client.get("/?q=match", method="HEAD")
        assert r.status == 200 and r.body == b"" and gate.calls == 0


@pytest.mark.slow
async def test_a_search_over_100000_files_answers_within_its_bounds(tmp_path: Path) -> None:
    """100,000 files in 200 folders: the default bounds (100,000 entries,
    5 seconds) end the walk, the ending says which, and the answer comes
    within --search-time (and a margin for a loaded machine)."""
    import os
    import time

    root = tmp_path / "www"
    for d in range(200):
        folder = root / f"d{d:03}"
        folder.mkdir(parents=True)
        for f in range(500):
            os.close(os.open(folder / f"file_{d * 500 + f}.txt", os.O_CREAT | os.O_WRONLY, 0o644))
    cfg = make_config(root)
    assert (cfg.content.search_max_entries, cfg.content.search_time) == (100_000, 5.0)
    async with memory_connection(cfg) as (client, _, _):
        started = time.monotonic()
        r = await client.get("/?q=file_4242.*&format=json")
        took = time.monotonic() - started
    doc = json.loads(r.body)
    print(f"\n100,000-file search: {took:.2f} s, {doc['visited']} entries, {doc['stopped']}")
    assert doc["stopped"] in ("entries", "time") and doc["visited"] <= 100_000
    if doc["stopped"] == "entries":
        # 200 folders + 100,000 files: the entry bound ends it first.
        assert doc["visited"] == 100_000
        # A glob: that one name; its folder comes early in the walk.
        assert [e["name"] for e in doc["entries"]] == ["d008/file_4242.txt"]
    assert took < 5.0 + 3.0


async def test_a_full_pool_is_a_503_before_the_answer_and_busy_after(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The folder's own scan runs before the response starts: a full work
    pool is the listing's 503.  Later, the walk ends with "busy" and a
    complete body."""
    from serverio.concurrency.blocking import PoolSaturated

    real = run_blocking
    refuse = {"from": 1}
    calls = [0]

    async def saturated(pool: object, fn: object, *args: object) -> object:
        calls[0] += 1
        if fn is scan_batch and calls[0] >= refuse["from"]:
            raise PoolSaturated("work")
        return await real(pool, fn, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(search_mod, "run_blocking", saturated)
    cfg = make_config(tree, work_workers=2)
    async with memory_connection(cfg) as (client, _, _):
        r = await client.get("/?q=match&format=json")
        assert r.status == 503 and r.header("retry-after") == "1"
    calls[0], refuse["from"] = 0, 2
    async with memory_connection(cfg) as (client, _, _):
        doc = json.loads((await client.get("/?q=match&format=json")).body)
        assert doc["stopped"] == "busy" and doc["truncated"] is True
        assert [e["name"] for e in doc["entries"]] == ["a_match.txt"]
        calls[0] = 0
        page = await client.get("/?q=match", "Accept: text/html\r\n")
        assert b"The search stopped because the work pool was full" in page.body
