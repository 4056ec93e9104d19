"""run_blocking with plain threads and events (no filesystem involved)."""

from __future__ import annotations

import ast
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

import serverio
from serverio import Pool, PoolSaturated, run_blocking
from serverio.concurrency import blocking as _blocking

from .conftest import wait_until


class Resource:
    """Something a thread produces that must be closed exactly once."""

    def __init__(self) -> None:
        self.closes = 0

    def close(self) -> None:
        self.closes += 1


def blocker(gate: threading.Event, entered: threading.Event | None = None) -> Resource:
    if entered is not None:
        entered.set()
    gate.wait(30)
    return Resource()


async def test_inline_and_pooled_success() -> None:
    assert await run_blocking(Pool("t", 0, 0), lambda x: x + 1, 1) == 2
    pool = Pool("t", 2, 2)
    assert await run_blocking(pool, lambda x: x * 2, 21) == 42
    assert pool.stats.submitted == 1 and pool.stats.completed == 1
    assert pool.running == 0


async def test_exceptions_propagate() -> None:
    def boom() -> None:
        raise KeyError("x")

    with pytest.raises(KeyError):
        await run_blocking(Pool("t", 1, 0), boom)


async def test_saturation_rejects_at_once_and_recovers() -> None:
    pool = Pool("t", 1, 1)
    gate = threading.Event()
    results: list[Resource] = []

    async def call() -> None:
        results.append(await run_blocking(pool, blocker, gate))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call)
        await wait_until(lambda: pool.running == 1)
        nursery.start_soon(call)
        await wait_until(lambda: pool.queued == 1)
        with trio.fail_after(1):  # "at once": no waiting for a token
            with pytest.raises(PoolSaturated) as info:
                await run_blocking(pool, blocker, gate)
        assert info.value.status == 503
        assert pool.stats.rejected == 1 and pool.stats.peak_queued == 1
        gate.set()
    assert len(results) == 2
    # Recovery: the moment tokens are back, calls are admitted again.
    assert await run_blocking(pool, lambda: 7) == 7
    assert pool.stats.completed == 3


async def test_abandon_on_cancel_keeps_token_and_late_closes_once() -> None:
    pool = Pool("t", 1, 0)
    gate = threading.Event()
    produced: list[Resource] = []
    scope = trio.CancelScope()

    def work() -> Resource:
        # Cancel the caller once this thread runs, then block: the thread
        # finishes only after its caller abandoned it.
        trio.from_thread.run_sync(scope.cancel)
        r = blocker(gate)
        produced.append(r)
        return r

    with scope:
        await run_blocking(pool, work, late_close=Resource.close)
    # The caller came back at once ...
    assert scope.cancelled_caught and produced == []
    assert pool.stats.abandoned == 1
    # ... but the thread still runs and still holds its token: the pool is
    # full and refuses new work rather than over-committing threads.
    assert pool.running == 1
    with pytest.raises(PoolSaturated):
        await run_blocking(pool, lambda: None)
    gate.set()
    await wait_until(lambda: pool.running == 0)
    assert len(produced) == 1 and produced[0].closes == 1
    assert pool.stats.late_closed == 1
    # And never a second close, whatever happens later.
    await trio.sleep(0.05)
    assert produced[0].closes == 1


async def test_result_stored_before_a_cancelled_caller_resumes_is_late_closed_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker stores its result, then (before trio reports the thread's
    return, which is queued only after the thread's function returns) the
    caller is cancelled: the caller owns the stored result and closes it,
    the thread does not."""
    pool = Pool("t", 1, 0)
    scope = trio.CancelScope()
    token = trio.lowlevel.current_trio_token()
    order: list[str] = []
    real_offer = _blocking._Handoff.offer

    def offer_then_cancel(
        self: _blocking._Handoff[Resource], value: Resource | None, error: BaseException | None
    ) -> bool:
        stored = real_offer(self, value, error)
        order.append(f"offer:{stored}")
        token.run_sync_soon(scope.cancel)  # ahead of trio's report of the return
        return stored

    monkeypatch.setattr(_blocking._Handoff, "offer", offer_then_cancel)
    produced: list[Resource] = []
    closed: list[Resource] = []

    def work() -> Resource:
        produced.append(Resource())
        return produced[-1]

    def late_close(r: Resource) -> None:
        closed.append(r)
        r.close()

    with scope:
        await run_blocking(pool, work, late_close=late_close)
    monkeypatch.undo()
    assert scope.cancelled_caught
    assert order == ["offer:True"]
    assert len(produced) == 1 and closed == produced and produced[0].closes == 1
    assert pool.stats.late_closed == 1
    assert pool.stats.abandoned == 1 and pool.stats.completed == 0
    await wait_until(lambda: pool.running == 0)  # trio's wake-up released the token
    assert produced[0].closes == 1 and pool.stats.late_closed == 1


async def test_a_hop_wakes_the_event_loop_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """No callback of serverio's own crosses back to the trio thread: the
    only one is trio's report of the thread's return."""
    pool = Pool("t", 1, 0)
    token = trio.lowlevel.current_trio_token()
    calls: list[object] = []
    real = type(token).run_sync_soon

    def counting(self: trio.lowlevel.TrioToken, fn: Callable[..., object], *args: object) -> None:
        calls.append(fn)
        real(self, fn, *args)

    monkeypatch.setattr(type(token), "run_sync_soon", counting)
    assert await run_blocking(pool, lambda: 7) == 7
    monkeypatch.undo()
    assert len(calls) == 1


def test_result_of_a_thread_outliving_the_event_loop_is_closed_in_the_thread() -> None:
    pool = Pool("t", 1, 0)
    gate, closed = threading.Event(), threading.Event()
    scope = trio.CancelScope()
    produced: list[Resource] = []

    def work() -> Resource:
        trio.from_thread.run_sync(scope.cancel)  # abandon this thread, then block
        r = blocker(gate)
        produced.append(r)
        return r

    def late_close(r: Resource) -> None:
        r.close()
        closed.set()

    async def main() -> None:
        with scope:
            await run_blocking(pool, work, late_close=late_close)

    trio.run(main)
    # The loop is gone and the thread still holds its result.
    assert produced == [] and pool.stats.abandoned == 1
    gate.set()
    assert closed.wait(10)
    assert len(produced) == 1 and produced[0].closes == 1
    assert pool.stats.late_closed == 1  # counted by the thread that closed it


async def test_cancel_while_queued_never_runs() -> None:
    pool = Pool("t", 1, 1)
    gate = threading.Event()
    ran: list[int] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_blocking, pool, blocker, gate)
        await wait_until(lambda: pool.running == 1)
        with trio.move_on_after(0.05):
            await run_blocking(pool, ran.append, 1)
        gate.set()
    assert ran == [] and pool.stats.cancelled_waiting == 1


async def test_default_thread_limiter_untouched() -> None:
    """A stall in our pool does not consume trio's default limiter."""
    pool = Pool("t", 3, 0)
    gate = threading.Event()
    default = trio.to_thread.current_default_thread_limiter()
    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(run_blocking, pool, blocker, gate)
        await wait_until(lambda: pool.running == 3)
        assert default.borrowed_tokens == 0
        gate.set()


async def test_wait_idle_reports_stuck_threads() -> None:
    pool = Pool("t", 2, 0)
    gate = threading.Event()
    with trio.move_on_after(0.05):
        await run_blocking(pool, blocker, gate, late_close=Resource.close)
    stuck = await pool.wait_idle(trio.current_time() + 0.05)
    assert stuck == 1
    gate.set()
    assert await pool.wait_idle(trio.current_time() + 5) == 0
    assert pool.stats.late_closed == 1


def test_invalid_policies() -> None:
    for args in ((-1, 0), (0, 1), (1, -1)):
        with pytest.raises(ValueError):
            Pool("t", *args)


def test_only_blocking_module_calls_to_thread() -> None:
    """run_blocking is the only offload path in the package."""
    offenders = []
    pkg = Path(serverio.__file__).parent
    for path in sorted(pkg.glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("to_thread", "run_in_executor"):
                if path.name != "_blocking.py":
                    offenders.append(f"{path.name}:{node.lineno}")
            if isinstance(node, ast.alias) and node.name == "to_thread":
                if path.name != "_blocking.py":
                    offenders.append(f"{path.name}:{node.lineno} imports to_thread")
            if isinstance(node, ast.alias) and node.name.split(".")[0] == "asyncio":
                offenders.append(f"{path.name}:{node.lineno} imports asyncio")
    assert offenders == []


async def test_warns_once_when_nearly_full(caplog: pytest.LogCaptureFixture) -> None:
    """Passing 80% of workers + queue logs one warning (rate-limited), so
    exhaustion is visible before it becomes 503s."""
    pool = Pool("t", 4, 1)  # capacity 5: the 4th admission reaches 80%
    gate = threading.Event()
    with caplog.at_level("WARNING", logger="serverio"):
        async with trio.open_nursery() as nursery:
            for i in range(4):
                nursery.start_soon(run_blocking, pool, blocker, gate)
                await wait_until(lambda i=i: pool.running == i + 1)  # type: ignore[misc]
                if i == 2:
                    assert "of capacity" not in caplog.text  # 3/5 = 60%: quiet
            nursery.start_soon(run_blocking, pool, blocker, gate)  # queued: 100%
            await wait_until(lambda: pool.queued == 1)
            gate.set()
    warnings = [r for r in caplog.records if "of capacity" in r.getMessage()]
    assert len(warnings) == 1  # rate-limited: 80% and 100% within 10 s
    assert "t pool at 80% of capacity" in warnings[0].getMessage()


async def test_a_stalled_pool_does_not_starve_another() -> None:
    """fs stuck in syscalls: the work pool (and trio's default) still run."""
    fs, work = Pool("fs", 2, 0), Pool("work", 1, 0)
    gate = threading.Event()
    async with trio.open_nursery() as nursery:
        for _ in range(2):
            nursery.start_soon(run_blocking, fs, blocker, gate)
        await wait_until(lambda: fs.running == 2)
        with pytest.raises(PoolSaturated):
            await run_blocking(fs, lambda: None)
        with trio.fail_after(5):
            assert await run_blocking(work, lambda: "ran") == "ran"
            assert await trio.to_thread.run_sync(lambda: "default") == "default"
        gate.set()
