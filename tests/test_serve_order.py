"""The order ready keep-alive connections are served in (serverio.net.order).

Event-loop level, over memory streams: no sockets, no timing.  The clock is
a MockClock that never moves, so no deadline can fire.  The last tests run
the socket path over loopback (bounded in time).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sized
from pathlib import Path

import pytest
import trio
import trio.testing

from serverio import Server
from serverio.app import services as _services
from serverio.net.connection import ConnectionTask
from serverio.net.order import ORDER_MIN_CONNECTIONS, ServeOrder

from .conftest import HTTPClient, connect, make_config, running_server, wait_until

REQUEST = b"GET /data.bin HTTP/1.1\r\nHost: x\r\n\r\n"


def _logging_hook(
    i: int, log: list[int], pump: Callable[[], Awaitable[object]] | None
) -> Callable[[], Awaitable[None]]:
    async def hook() -> None:
        log.append(i)
        if pump is not None:
            await pump()

    return hook


def _first_each(log: list[int]) -> list[int]:
    """Connection indices in the order of their first write (a response may
    take several writes)."""
    seen: list[int] = []
    for i in log:
        if i not in seen:
            seen.append(i)
    return seen


async def _serve_rounds(
    root: Path, n: int, rounds: int, order: Callable[[list[ConnectionTask]], ServeOrder | None]
) -> tuple[list[list[int]], ServeOrder | None]:
    """``n`` keep-alive connections; each round, the next request of every
    connection arrives at once, in the order of the previous round's
    responses (as a closed-loop client sends it).  Returns the order of the
    responses, round by round."""
    srv = Server(make_config(root))
    conns: list[ConnectionTask] = []
    srv.env.order = order(conns)
    log: list[int] = []
    servers = []
    clients = []
    for i in range(n):
        client, theirs = trio.testing.memory_stream_pair()
        send = theirs.send_stream
        assert isinstance(send, trio.testing.MemorySendStream)
        send.send_all_hook = _logging_hook(i, log, send.send_all_hook)
        servers.append(theirs)
        clients.append(client)
        conns.append(ConnectionTask(srv.env, theirs, "memory"))
    orders: list[list[int]] = []

    async def drain_clients() -> None:
        for c in clients:
            while True:
                with trio.move_on_after(0):
                    if not await c.receive_some(1 << 20):
                        break
                    continue
                break

    async with srv.handler.running(), trio.open_nursery() as nursery:
        if srv.env.order is not None:
            nursery.start_soon(srv.env.order.run)
        for conn in conns:
            nursery.start_soon(conn.run)
        await trio.testing.wait_all_tasks_blocked()
        previous = list(range(n))
        for _ in range(rounds + 1):
            log.clear()
            for i in previous:
                receive = servers[i].receive_stream
                assert isinstance(receive, trio.testing.MemoryReceiveStream)
                receive.put_data(REQUEST)
            await trio.testing.wait_all_tasks_blocked()
            served = _first_each(log)
            assert sorted(served) == list(range(n))  # each exactly once per round
            orders.append(served)
            previous = served
            await drain_clients()
        nursery.cancel_scope.cancel()
    srv.opener.close()
    return orders[1:], srv.env.order


def test_ready_connections_are_served_least_recently_served_first(root: Path) -> None:
    # trio runs one batch of woken tasks forward or reversed at random; the
    # order must not depend on that coin: every round repeats the previous.
    def ordered(conns: list[ConnectionTask]) -> ServeOrder:
        return ServeOrder(conns, min_connections=1, chunk=1)

    orders, order = trio.run(_serve_rounds, root, 8, 12, ordered, clock=trio.testing.MockClock())
    assert order is not None and order.parked_total == 8 * 12
    first = orders[0]
    for served in orders:
        assert served == first


def test_release_in_chunks_keeps_the_order_between_chunks(root: Path) -> None:
    # Inside a chunk the order is trio's; chunk k of a round always holds
    # the same connections.
    def ordered(conns: list[ConnectionTask]) -> ServeOrder:
        return ServeOrder(conns, min_connections=1, chunk=3)

    orders, _ = trio.run(_serve_rounds, root, 9, 10, ordered, clock=trio.testing.MockClock())
    chunks = [[set(served[k : k + 3]) for k in range(0, 9, 3)] for served in orders]
    for c in chunks:
        assert c == chunks[0]


def test_below_the_connection_threshold_nothing_parks(root: Path) -> None:
    def few(conns: list[ConnectionTask]) -> ServeOrder:
        return ServeOrder(conns, min_connections=9)

    orders, order = trio.run(_serve_rounds, root, 8, 3, few, clock=trio.testing.MockClock())
    assert order is not None and order.running is False  # stopped with the nursery
    assert order.parked_total == 0
    assert all(sorted(served) == list(range(8)) for served in orders)


async def _park_and_cancel() -> tuple[list[int], int]:
    order = ServeOrder([], min_connections=0, chunk=1)
    released: list[int] = []
    scopes: dict[int, trio.CancelScope] = {}

    async def park(turn: int) -> None:
        with trio.CancelScope() as scope:
            scopes[turn] = scope
            await order.wait_turn(turn)
            released.append(turn)

    async with trio.open_nursery() as nursery:
        # Park before the dispatcher runs, in an order unrelated to the turns.
        for turn in (5, 1, 4, 2, 3):
            nursery.start_soon(park, turn)
        await trio.testing.wait_all_tasks_blocked()
        scopes[2].cancel()  # gives up while parked
        await trio.testing.wait_all_tasks_blocked()
        waiting = order.waiting
        nursery.start_soon(order.run)
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    return released, waiting


def test_parked_connections_are_released_by_turn_and_a_cancelled_one_leaves() -> None:
    released, waiting = trio.run(_park_and_cancel, clock=trio.testing.MockClock())
    assert waiting == 5  # the cancelled entry is skipped lazily
    assert released == [1, 3, 4, 5]


async def _cancel_the_dispatcher() -> list[int]:
    order = ServeOrder([], min_connections=0, chunk=1)
    released: list[int] = []

    async def park(turn: int) -> None:
        await order.wait_turn(turn)
        released.append(turn)

    async with trio.open_nursery() as parkers:
        async with trio.open_nursery() as dispatcher:
            dispatcher.start_soon(order.run)
            await trio.testing.wait_all_tasks_blocked()
            dispatcher.cancel_scope.cancel()  # stop it while it sleeps
        assert not order.running
        # Nothing parks without a dispatcher: the connection checks engaged.
        assert not order.engaged
        order.running = True  # pretend, to park two and stop a second run
        for turn in (2, 1):
            parkers.start_soon(park, turn)
        await trio.testing.wait_all_tasks_blocked()
        with trio.CancelScope() as scope:
            scope.cancel()
            await order.run()  # cancelled at once: releases everyone parked
    return released


def test_a_stopped_dispatcher_releases_every_parked_connection() -> None:
    assert sorted(trio.run(_cancel_the_dispatcher, clock=trio.testing.MockClock())) == [1, 2]


async def _sockets_in_turn(root: Path, clients: int, requests: int, pause: float) -> ServeOrder:
    srv_order: list[ServeOrder] = []

    def engaged_at_once(connections: Sized) -> ServeOrder:
        order = ServeOrder(connections, min_connections=1, chunk=4)
        srv_order.append(order)
        return order

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_services, "ServeOrder", engaged_at_once)
        async with running_server(make_config(root)) as (_, port):
            expected = (root / "data.bin").read_bytes()

            async def client() -> None:
                c = await connect(port)
                for _ in range(requests):
                    got = await c.get("/data.bin")
                    assert got.status == 200 and got.body == expected
                    if pause:
                        await trio.sleep(pause)  # released before the next request is here
                await c.stream.aclose()

            with trio.fail_after(20):
                async with trio.open_nursery() as nursery:
                    for _ in range(clients):
                        nursery.start_soon(client)
    return srv_order[0]


def test_sockets_take_their_turn_before_reading(root: Path) -> None:
    # The socket path parks before it reads (no epoll registration); a busy
    # loop of closed-loop clients is served completely.
    order = trio.run(_sockets_in_turn, root, 16, 20, 0.0)
    # One turn per wait for a next request: 19 requests and the close.
    assert order.parked_total == 16 * 20
    assert order.waiting == 0


def test_a_turn_taken_before_the_request_arrives_waits_for_it(root: Path) -> None:
    # Released with nothing to read yet: the read finds EAGAIN and the
    # connection waits for its request as it would without the order.
    order = trio.run(_sockets_in_turn, root, 2, 4, 0.05)
    assert order.parked_total == 2 * 4  # one turn per wait, none repeated


async def _many_then_shutdown(root: Path, clients: int) -> tuple[ServeOrder, int]:
    async with running_server(make_config(root)) as (srv, port):
        order = srv.env.order
        assert order is not None
        expected = (root / "data.bin").read_bytes()
        conns = [await connect(port) for _ in range(clients)]
        await wait_until(lambda: len(srv.connections) == clients)

        async def client(c: HTTPClient) -> None:
            for _ in range(5):
                got = await c.get("/data.bin")
                assert got.status == 200 and got.body == expected

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                for c in conns:
                    nursery.start_soon(client, c)
        # Every connection is idle now; a graceful shutdown closes them all.
        srv.shutdown()
        with trio.fail_after(10):
            for c in conns:
                assert await c.at_eof()
        for c in conns:
            await c.stream.aclose()
        return order, len(srv.connections)


def test_from_the_threshold_up_connections_are_served_in_turn_and_drained(root: Path) -> None:
    order, left = trio.run(_many_then_shutdown, root, ORDER_MIN_CONNECTIONS + 8)
    assert order.parked_total >= (ORDER_MIN_CONNECTIONS + 8) * 4
    assert left == 0 and not order.running
