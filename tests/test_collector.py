"""The collector's figures in /metrics and the freeze policy
(serverio.observe.collector, serverio.ops.run)."""

from __future__ import annotations

import gc
import itertools
from pathlib import Path

import pytest
import trio
import trio.testing

from serverio import Server
from serverio.observe import collector as _collector
from serverio.observe.collector import (
    COLLECTOR,
    YOUNG_IDLE,
    YOUNG_MAX,
    Collector,
    merge_gc,
    young_objects,
)
from serverio.ops.metrics import counters_only, merge, render, snapshot
from serverio.ops.run import run_server, watch_collector

from .conftest import connect, make_config
from .test_metrics import samples


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.25  # every reading a quarter second later
        return self.now


def test_callback_counts_and_times_each_generation() -> None:
    c = Collector(clock=_Clock())
    c.install()
    c.install()  # idempotent: one callback
    try:
        assert gc.callbacks.count(c._callback) == 1
        gc.collect(0)
        gc.collect(2)
        gc.collect(2)
    finally:
        c.uninstall()
    assert not c.installed
    assert c.collections[0] >= 1 and c.collections[2] == 2
    # Each collection read the clock twice, 0.25 s apart.
    assert c.pause_seconds[2] == pytest.approx(0.5)
    assert c.pause_longest[2] == pytest.approx(0.25)
    snap = c.snapshot()
    assert snap["collections"] == c.collections
    assert snap["frozen_objects"] == gc.get_freeze_count()


def test_callback_counts_cyclic_garbage_found() -> None:
    c = Collector()
    c.install()
    try:
        gc.collect()
        before = sum(c.collected)
        a: list[object] = []
        a.append(a)  # a cycle
        del a
        gc.collect()
    finally:
        c.uninstall()
    assert sum(c.collected) - before >= 1


def _spy_on_gc(monkeypatch: pytest.MonkeyPatch, calls: list[str]) -> None:
    def collect(*args: int) -> int:
        calls.append(f"collect{args}")
        return 0

    def freeze() -> None:
        calls.append("freeze")

    monkeypatch.setattr(gc, "collect", collect)
    monkeypatch.setattr(gc, "freeze", freeze)
    monkeypatch.setattr(_collector, "young_objects", lambda: 0)


def test_after_start_collects_then_freezes(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    _spy_on_gc(monkeypatch, calls)
    c = Collector()
    c.after_start()
    assert calls == ["collect()", "freeze"]
    assert c.freezes == 1


def test_grown_freezes_on_new_high_water_marks_only(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    _spy_on_gc(monkeypatch, calls)
    c = Collector()
    assert not c.grown(0) and not c.grown(1023)
    assert c.grown(1024)
    assert calls == ["collect(1,)", "freeze"]  # the young generations only
    assert not c.grown(2047)  # less than 1,024 more
    assert c.grown(2048)
    assert not c.grown(100)  # shrinking never freezes
    # Past 8,192 the step is an eighth of the last mark: few freezes.
    assert c.grown(10_000) and not c.grown(11_249) and c.grown(11_250)
    assert c.freezes == 4
    # Growth to 100,000 entries one at a time: a bounded number of freezes.
    c = Collector()
    assert sum(c.grown(n) for n in range(0, 100_001, 64)) <= 30


def test_tick_freezes_after_promotion_while_no_cycle_was_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    _spy_on_gc(monkeypatch, calls)
    c = Collector()
    assert not c.tick(10)  # no growth, nothing promoted
    c.collections[1] += 1  # a generation-1 collection promoted objects
    assert c.tick(10)
    assert calls == ["collect(1,)", "freeze"]
    assert not c.tick(10)  # nothing promoted since
    c.collections[2] += 1
    assert c.tick(10)
    # Growth is still its own rule.
    assert c.tick(5000) and c.freezes == 3
    # Once a collection of generation 1 or 2 found cyclic garbage, only
    # growth freezes (few), never promotion.
    c.collected[2] = 1
    c.collections[1] += 5
    assert not c.tick(5000)
    assert c.tick(10_000)
    assert c.freezes == 4


def test_tick_collects_young_generations_over_their_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    _spy_on_gc(monkeypatch, calls)
    c = Collector()
    young = [YOUNG_MAX]
    monkeypatch.setattr(_collector, "young_objects", lambda: young[0])
    assert not c.tick(10) and calls == []  # at the bound: left to CPython's schedule
    young[0] = YOUNG_MAX + 1

    def collect(*args: int) -> int:
        calls.append(f"collect{args}")
        c.collections[args[0]] += 1  # as the callback counts it
        return 0

    monkeypatch.setattr(gc, "collect", collect)
    # Collected once, which promoted objects: frozen with no second collection.
    assert c.tick(10) and calls == ["collect(1,)", "freeze"]
    # Once cyclic garbage was found in an older generation: collected, not frozen.
    c.collected[1] = 1
    calls.clear()
    assert not c.tick(10) and calls == ["collect(1,)"]


def test_a_stalled_allocation_count_is_collected_by_the_tick() -> None:
    """CPython collects generation 0 when allocations outnumber
    deallocations by its threshold: a process that frees an old object
    for each new one it keeps (a full cache replacing its entries) never
    gets there, and its young generation grows without bound.  The tick
    collects it (its objects then reach the oldest generation)."""
    gc.collect()
    old = [[i] for i in range(3 * YOUNG_MAX)]
    gc.collect()  # now in the oldest generation
    young = []
    try:
        for i in range(3 * YOUNG_MAX):
            young.append([i])  # one more tracked object kept...
            old.pop()  # ...and one freed: the count does not move
        assert young_objects() > 2 * YOUNG_MAX  # no collection came
        Collector().tick(0)
        assert young_objects() < YOUNG_MAX
    finally:
        del young


def test_metrics_render_collector_families() -> None:
    c = Collector(clock=_Clock())
    c._callback("start", {"generation": 2})
    c._callback("stop", {"generation": 2, "collected": 3, "uncollectable": 0})
    c.freezes = 2
    text = render({**_empty_snapshot(), "gc": c.snapshot()})
    m = samples(text)
    assert m[("serverio_gc_collections_total", (("generation", "2"),))] == 1
    assert m[("serverio_gc_collections_total", (("generation", "0"),))] == 0
    assert m[("serverio_gc_pause_seconds_total", (("generation", "2"),))] == 0.25
    assert m[("serverio_gc_pause_longest_seconds", (("generation", "2"),))] == 0.25
    assert m[("serverio_gc_collected_total", (("generation", "2"),))] == 3
    assert m[("serverio_gc_freezes_total", ())] == 2
    assert ("serverio_gc_frozen_objects", ()) in m


def test_merge_adds_counts_and_keeps_the_longest_pause() -> None:
    a = {
        "collections": [1, 2, 3],
        "pause_seconds": [0.1, 0.2, 0.3],
        "pause_longest_seconds": [0.01, 0.02, 0.3],
        "collected": [0, 0, 1],
        "uncollectable": [0, 0, 0],
        "freezes": 1,
        "frozen_objects": 10,
    }
    b = {**a, "pause_longest_seconds": [0.05, 0.01, 0.1], "freezes": 2}
    m = merge_gc(a, b)
    assert m is not None
    assert m["collections"] == [2, 4, 6]
    assert m["pause_longest_seconds"] == [0.05, 0.02, 0.3]
    assert m["freezes"] == 3 and m["frozen_objects"] == 20
    assert merge_gc(None, a) is a and merge_gc(a, None) is a
    merged = merge([{**_empty_snapshot(), "gc": a}, {**_empty_snapshot(), "gc": b}])
    assert merged["gc"]["collections"] == [2, 4, 6]
    # A retired worker hands on its counters, not what it had frozen.
    assert "frozen_objects" not in counters_only({**_empty_snapshot(), "gc": a})["gc"]
    assert "gc" not in merge([_empty_snapshot()])


def _empty_snapshot() -> dict[str, object]:
    return {
        "stats": {},
        "caches": {},
        "pools": {},
        "open_connections": 0,
        "proxy_tunnels_open": 0,
        "draining": 0,
        "abandoned_threads": 0,
        "histogram": {"counts": [0] * 13, "sum": 0.0},
    }


def test_snapshot_of_a_server_has_the_collector(root: Path) -> None:
    srv = Server(make_config(root))
    assert snapshot(srv)["gc"].keys() == COLLECTOR.snapshot().keys()


async def test_run_server_measures_and_freezes_after_start(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
    installed: list[bool] = []
    cfg = make_config(root).evolve(host="127.0.0.1", port=0)

    before: list[str] = []

    async def traffic(srv: Server) -> None:
        installed.append(COLLECTOR.installed)
        before.extend(calls)
        client = await connect(srv.addresses()[0][1])
        assert (await client.get("/hello.txt")).status == 200
        await client.stream.aclose()
        srv.shutdown()

    try:
        with trio.fail_after(10):
            assert await run_server(cfg, admin=False, announce=False, extra=[traffic]) == 0
    finally:
        COLLECTOR.uninstall()
    assert installed == [True]
    # Once, after start-up, before any request (watch_collector may freeze
    # again later, each tenth of a second, after a promotion).
    assert before == ["freeze"]


async def test_watch_collector_looks_at_the_cache_size(root: Path) -> None:
    seen: list[int] = []

    class Spy(Collector):
        def tick(self, entries: int) -> bool:
            seen.append(entries)
            return False

    srv = Server(make_config(root, file_meta_entries=10))
    assert srv.files.meta is not None
    srv.files.meta.put("a", None)  # type: ignore[arg-type]  # only counted here
    with trio.move_on_after(0.05):
        await watch_collector(srv, Spy(), period=0.01)
    # The byte cache's entries and the metadata cache's.
    assert seen and set(seen) == {len(srv.files) + 1}


async def test_watch_collector_looks_less_often_while_idle(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Ten looks a second while the process makes objects or collects, one
    a second once a look finds it idle (no collection since the one
    before, fewer than YOUNG_IDLE young objects)."""
    times: list[float] = []
    busy = [True]

    class Spy(Collector):
        def tick(self, entries: int) -> bool:
            times.append(trio.current_time())
            self.young = YOUNG_IDLE * 4 if busy[0] else YOUNG_IDLE - 1
            return False

    srv = Server(make_config(root))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch_collector, srv, Spy(), 0.1, 1.0)
        await trio.sleep(1.05)
        assert len(times) == 10  # busy: every 0.1 s
        busy[0] = False
        await trio.sleep(3.0)  # one more look at 0.1 s finds it idle
        assert 3 <= len(times) - 10 <= 4
        gaps = [round(b - a, 3) for a, b in itertools.pairwise(times[10:])]
        assert gaps and set(gaps[1:]) == {1.0}
        busy[0] = True  # busy again: seen at the next look, then every 0.1 s
        await trio.sleep(1.5)
        gaps = [round(b - a, 3) for a, b in itertools.pairwise(times[-4:])]
        assert set(gaps) == {0.1}
        nursery.cancel_scope.cancel()
