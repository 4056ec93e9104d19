"""serverio.net.h2phase: the HTTP/2 connection's phase table, its guard, and
the transitions a real connection walks (over memory streams)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trio.testing
from h2.errors import ErrorCodes

from serverio.net.h2conn import H2Connection
from serverio.net.h2phase import (
    BROKEN,
    CLOSED,
    DRAINING,
    FINISHING,
    FLAGS,
    OPEN,
    TRANSITIONS,
    ConnPhase,
    check,
)

from .conftest import make_config, wait_until
from .h2client import h2_memory

Step = tuple[ConnPhase, ConnPhase, bool, bool]


def test_every_phase_has_a_row_and_the_constants_are_the_members() -> None:
    assert set(TRANSITIONS) == set(ConnPhase) == set(FLAGS)
    assert [OPEN, DRAINING, FINISHING, CLOSED, BROKEN] == list(ConnPhase)


def test_every_phase_is_reachable_from_open_and_only_broken_is_final() -> None:
    seen = {OPEN}
    todo = [OPEN]
    while todo:
        for nxt in TRANSITIONS[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    assert seen == set(ConnPhase)
    assert {p for p, nxt in TRANSITIONS.items() if not nxt} == {BROKEN}
    assert all(OPEN not in nxt for nxt in TRANSITIONS.values())  # nothing reopens


def test_the_writer_flags() -> None:
    # Reading only before the end of input; closed (no frame more) never
    # while reading; once closed, always closed.
    assert [p for p in ConnPhase if FLAGS[p][0]] == [OPEN, DRAINING]
    assert not any(reading and closed for reading, closed in FLAGS.values())
    for old, nxt in TRANSITIONS.items():
        if FLAGS[old][1]:
            assert all(FLAGS[n][1] for n in nxt)


@pytest.mark.parametrize("old", list(ConnPhase))
@pytest.mark.parametrize("new", list(ConnPhase))
def test_check_allows_exactly_the_table(old: ConnPhase, new: ConnPhase) -> None:
    if new in TRANSITIONS[old]:
        assert check(old, new) == FLAGS[new]
    else:
        with pytest.raises(RuntimeError, match=f"{old.name} -> {new.name}"):
            check(old, new)


# ---------------------------------------------------------------- a real connection


@pytest.fixture
def steps(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Step]]:
    """Every transition an H2Connection makes, with the writer's flags after it."""
    seen: list[Step] = []
    original = H2Connection._to

    def recording(self: H2Connection, new: ConnPhase) -> None:
        old = self._phase
        original(self, new)
        seen.append((old, new, self._writer.reading, self._writer.closed))

    monkeypatch.setattr(H2Connection, "_to", recording)
    yield seen


def _h2(conn: object) -> H2Connection:
    switched = getattr(conn, "_switched", None)
    assert isinstance(switched, H2Connection)
    return switched


async def test_drain_of_an_idle_connection_goaway_then_finishing(
    root: Path, steps: list[Step]
) -> None:
    async with h2_memory(make_config(root)) as (client, _, conn):
        assert (await client.get("/hello.txt")).status == 200
        _h2(conn).drain()
        _h2(conn).drain()  # once
        await client.until_closed()
    assert steps == [(OPEN, DRAINING, True, False), (DRAINING, FINISHING, False, False)]
    assert client.goaway is not None and client.goaway.error_code == ErrorCodes.NO_ERROR
    assert client.goaway.last_stream_id == 1


async def test_client_eof_is_finishing_without_goaway(root: Path, steps: list[Step]) -> None:
    async with h2_memory(make_config(root)) as (client, _, conn):
        assert (await client.get("/hello.txt")).status == 200
        h2conn = _h2(conn)  # (the connection task drops it once it ended)
        stream = client.stream
        assert isinstance(stream, trio.StapledStream)  # memory_stream_pair's
        await stream.send_stream.aclose()
        await wait_until(lambda: h2conn._phase == FINISHING)
    assert steps == [(OPEN, FINISHING, False, False)]


async def test_a_flood_closes_with_enhance_your_calm(root: Path, steps: list[Step]) -> None:
    cfg = make_config(root, h2_max_resets=5)
    async with h2_memory(cfg) as (client, srv, _):
        for _ in range(10):
            sid = client.request("/big.bin")
            client.conn.reset_stream(sid, ErrorCodes.CANCEL)
        await client.flush()
        await client.until_closed()
    assert steps == [(OPEN, CLOSED, False, True)]
    assert client.goaway is not None and client.goaway.error_code == ErrorCodes.ENHANCE_YOUR_CALM
    assert srv.stats.h2.calm == 1


async def test_the_idle_deadline_closes(
    root: Path, steps: list[Step], autojump_clock: trio.testing.MockClock
) -> None:
    async with h2_memory(make_config(root, head_timeout=4.0)) as (client, srv, _):
        await client.until_closed()
    assert steps == [(OPEN, CLOSED, False, True)]
    assert srv.stats.timeouts.head == 1


async def test_a_read_that_fails_is_broken_and_counted(root: Path, steps: list[Step]) -> None:
    async with h2_memory(make_config(root)) as (client, srv, conn):
        assert (await client.get("/hello.txt")).status == 200
        h2conn = _h2(conn)
        receive = h2conn.stream.receive_stream  # type: ignore[attr-defined]
        await receive.aclose()  # the waiting read raises ClosedResourceError
        await wait_until(lambda: srv.stats.conns.resets == 1)  # counted at the end
    assert steps == [(OPEN, BROKEN, False, True)]
    assert srv.stats.conns.resets == 1
