"""The body source (serverio.model.Body) and every descriptor a request
opens are closed exactly once, on every path: sent in full, client gone
mid-send, cancelled while the handler waits, an error plan; over HTTP/1.1
and HTTP/2.

A ledger records each descriptor the root opener hands out and each
``os.close``; between one open of a number and the next open of the same
number there must be exactly one close of it (a double close would close
somebody else's descriptor; a missing one is a leak)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trio.testing
from h2.errors import ErrorCodes

from serverio import Server
from serverio.fs.body import NO_BODY, Body
from serverio.fs.opener import RootOpener
from serverio.http.core import FileSpan, Plan

from .conftest import make_config, memory_connection, reset, wait_until
from .h2client import h2_memory


class Ledger:
    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []
        self.gate: threading.Event | None = None  # held: opens of big.bin wait for it
        self.waiting = threading.Event()

    def unbalanced(self) -> list[tuple[int, int]]:
        """(fd, closes) for every open not followed by exactly one close."""
        out: list[tuple[int, int]] = []
        opened: dict[int, int] = {}  # fd -> closes since its open
        for kind, fd in self.events:
            if kind == "open":
                if fd in opened and opened[fd] != 1:
                    out.append((fd, opened[fd]))
                opened[fd] = 0
            elif fd in opened:
                opened[fd] += 1
        out.extend((fd, n) for fd, n in opened.items() if n != 1)
        return out

    def opens(self) -> int:
        return sum(1 for kind, _ in self.events if kind == "open")

    def balanced(self) -> bool:
        return self.opens() > 0 and not self.unbalanced()


@pytest.fixture
def ledger(monkeypatch: pytest.MonkeyPatch) -> Iterator[Ledger]:
    book = Ledger()
    real_open = RootOpener.open
    real_close = os.close

    def open_(self: RootOpener, rel: str) -> int:
        if rel == "big.bin" and book.gate is not None:
            book.waiting.set()
            book.gate.wait(5)
        fd = real_open(self, rel)
        book.events.append(("open", fd))
        return fd

    def close(fd: int) -> None:
        book.events.append(("close", fd))
        real_close(fd)

    monkeypatch.setattr(RootOpener, "open", open_)
    monkeypatch.setattr(os, "close", close)
    yield book
    if book.gate is not None:
        book.gate.set()


# ---------------------------------------------------------------- the type


def test_a_file_body_closes_its_descriptor_once(ledger: Ledger) -> None:
    fd = os.open(os.devnull, os.O_RDONLY)
    ledger.events.append(("open", fd))
    plan = Plan(200, (), (FileSpan(0, 10),))
    body = Body.of(plan, fd)
    assert body.fd == fd and body.pieces == plan.body
    body.close()
    body.close()
    assert body.fd == -1 and not ledger.unbalanced()


def test_a_plan_without_spans_does_not_keep_the_descriptor(ledger: Ledger) -> None:
    for plan in (Plan(200, (), (b"x",)), Plan(200, (), (FileSpan(0, 1),), send_body=False)):
        fd = os.open(os.devnull, os.O_RDONLY)
        ledger.events.append(("open", fd))
        body = Body.of(plan, fd)
        assert body.fd == -1  # closed at once: nothing will read it
        body.close()
    assert Body.of(Plan(304, (), (), send_body=False)) is NO_BODY
    assert not ledger.unbalanced()


# ---------------------------------------------------------------- HTTP/1.1


@pytest.mark.parametrize("fs_workers", [0, 2])
async def test_http11_sent_in_full(root: Path, ledger: Ledger, fs_workers: int) -> None:
    cfg = make_config(root, fs_workers=fs_workers)
    async with memory_connection(cfg) as (client, _, conn):
        r = await client.get("/big.bin")
        assert r.status == 200 and len(r.body) == 300_000
        await wait_until(lambda: not conn.in_flight)
        assert ledger.balanced(), ledger.unbalanced()


async def test_http11_client_gone_mid_send(root: Path, ledger: Ledger) -> None:
    cfg = make_config(root)
    async with memory_connection(cfg, lockstep=True) as (client, srv, _):
        await client.send_raw(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
        got = b""
        while len(got) < 32_768:
            got += await client.stream.receive_some(16384)
        await client.stream.aclose()
        await wait_until(lambda: srv.stats.conns.resets == 1)
        assert ledger.balanced(), ledger.unbalanced()
    assert srv.stats.responses.completed == 0


async def test_http11_cancelled_while_waiting_for_the_pool(root: Path, ledger: Ledger) -> None:
    cfg = make_config(root, fs_workers=1, fs_queue=4)
    ledger.gate = threading.Event()
    async with memory_connection(cfg) as (client, srv, _):
        await client.send_raw(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
        await trio.to_thread.run_sync(ledger.waiting.wait, 5)
        await reset(client)
        await wait_until(lambda: srv.stats.conns.cancelled == 1)
        ledger.gate.set()  # the abandoned hop opens the file now: late-closed
        await wait_until(lambda: srv.fs.stats.late_closed == 1)
        assert ledger.balanced(), ledger.unbalanced()


@pytest.mark.parametrize("fs_workers", [0, 2])
async def test_http11_error_plan(root: Path, ledger: Ledger, fs_workers: int) -> None:
    cfg = make_config(root, fs_workers=fs_workers)
    async with memory_connection(cfg) as (client, _, conn):
        r = await client.get("/big.bin", "Range: bytes=999999999-\r\n")
        assert r.status == 416
        r = await client.get("/big.bin", "If-None-Match: *\r\n")
        assert r.status == 304
        await wait_until(lambda: not conn.in_flight)
        assert ledger.opens() == 2 and not ledger.unbalanced()


# ---------------------------------------------------------------- HTTP/2


@pytest.mark.parametrize("fs_workers", [0, 2])
async def test_http2_sent_in_full_and_error_plan(
    root: Path, ledger: Ledger, fs_workers: int
) -> None:
    cfg = make_config(root, fs_workers=fs_workers)
    async with h2_memory(cfg) as (client, _, _):
        r = await client.get("/big.bin")
        assert r.status == 200 and len(r.body) == 300_000
        r = await client.get("/big.bin", [("range", "bytes=999999999-")])
        assert r.status == 416
        await wait_until(lambda: ledger.opens() == 2 and not ledger.unbalanced())


async def test_http2_reset_mid_send(root: Path, ledger: Ledger) -> None:
    cfg = make_config(root)
    async with h2_memory(cfg) as (client, srv, _):
        sid = client.request("/big.bin")
        await client.flush()
        while not client.responses[sid].body:
            assert await client.pump()
        client.conn.reset_stream(sid, ErrorCodes.CANCEL)
        await client.flush()
        await wait_until(lambda: ledger.balanced())
        r = await client.get("/hello.txt")  # the connection serves on
        assert r.status == 200
    assert srv.stats.h2.client_resets == 1


async def test_http2_reset_while_waiting_for_the_pool(root: Path, ledger: Ledger) -> None:
    cfg = make_config(root, fs_workers=1, fs_queue=4)
    ledger.gate = threading.Event()
    srv = Server(cfg)
    async with h2_memory(cfg, server=srv) as (client, _, _):
        sid = client.request("/big.bin")
        await client.flush()
        await trio.to_thread.run_sync(ledger.waiting.wait, 5)
        client.conn.reset_stream(sid, ErrorCodes.CANCEL)
        await client.flush()
        await wait_until(lambda: srv.stats.h2.client_resets == 1)
        ledger.gate.set()
        await wait_until(lambda: srv.fs.stats.late_closed == 1)
        assert ledger.balanced(), ledger.unbalanced()
    srv.opener.close()
