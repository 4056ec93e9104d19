"""Cancellation of resumable uploads at every await point of a request
(memory content driven step by step; the write path's fault-injection
seam, serverio.fs.writer.SYS; the real clock: the steps run in pool
threads, which a MockClock's autojump would race with its deadlines):

* the access hook, the 104, each pull of the content, each write step
  stuck in the disk, the commit: after the cancellation the request's
  write slot and client share are back, no descriptor is left open, and
  every byte that reached the file is there (fsynced) for the next HEAD;
* a newer request for the same upload cancels the one still holding it
  (the draft's "terminate the previous request").
"""

from __future__ import annotations

import os
import threading
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from serverio.app.server import Server
from serverio.fs import writer
from serverio.http.access import AccessTarget
from serverio.http.core import Plan, RequestFacts
from serverio.http.target import WRITE_TEMP_PREFIX, parse_target
from serverio.resumable.protocol import PURPOSE
from serverio.resumable.service import Resumable

from .conftest import make_config, open_fd_count, wait_until

MiB = 1 << 20


class Content:
    """Memory content: ``chunks`` handed out in order; pull number
    ``block_at`` (0-based) waits until cancelled."""

    def __init__(self, chunks: list[bytes], block_at: int | None = None) -> None:
        self.chunks = chunks
        self.block_at = block_at
        self.declared: int | None = sum(map(len, chunks))
        self.received = 0
        self.pulls = 0
        self.interim: Callable[[int, Sequence[tuple[bytes, bytes]]], Awaitable[None]] | None = None

    async def next_chunk(self) -> bytes | None:
        n = self.pulls
        self.pulls += 1
        if n == self.block_at:
            await trio.sleep_forever()
        await trio.lowlevel.checkpoint()
        if n >= len(self.chunks):
            return None
        self.received += len(self.chunks[n])
        return self.chunks[n]


_NAMES = {"upload_interop": "upload-draft-interop-version"}


def facts(method: bytes, path: str, **extra: str) -> RequestFacts:
    fields = tuple((_NAMES.get(k, k.replace("_", "-")), v) for k, v in extra.items())
    return RequestFacts(
        method, parse_target(method, path.encode()), extra=fields, client="203.0.113.9"
    )


async def allow(target: AccessTarget) -> Plan | None:
    await trio.lowlevel.checkpoint()
    return None


@pytest.fixture
def server(tmp_path: Path) -> Server:
    root = tmp_path / "www"
    root.mkdir()
    secret = tmp_path / "secret"
    secret.write_bytes(os.urandom(32).hex().encode())
    cfg = make_config(
        root, upload=True, min_free_space=0, secret_file=str(secret), min_upload_rate=0
    )
    srv = Server(cfg)
    assert srv.services.opener is not None  # the root opened first: fds counted after
    return srv


def step(server: Server) -> Resumable:
    # Its stage, ahead of the write step.
    (route,) = [r for r in server.services.hooks.write_ahead if r.name == "resumable"]
    owner = getattr(route.run, "__self__", None)
    assert isinstance(owner, Resumable)
    return owner


def temps(root: Path) -> list[str]:
    return sorted(n for n in os.listdir(root) if n.startswith(WRITE_TEMP_PREFIX))


def settled(res: Resumable) -> None:
    assert res.uploads.in_flight == 0
    assert not res.uploads.clients.held if hasattr(res.uploads.clients, "held") else True
    assert res.holders == {}


async def create(res: Resumable, name: str) -> str:
    plan = await res.write(facts(b"PUT", "/" + name, upload_complete="?0"), Content([]), 1e9, allow)
    assert isinstance(plan, Plan) and plan.status == 201, plan
    return dict(plan.headers)[b"location"].decode()


async def offset(res: Resumable, location: str) -> int:
    plan = await res.write(facts(b"HEAD", location), Content([]), 1e9, allow)
    assert isinstance(plan, Plan) and plan.status == 204, plan
    return int(dict(plan.headers)[b"upload-offset"])


def append(location: str, at: int, complete: bool = False) -> RequestFacts:
    return facts(
        b"PATCH",
        location,
        upload_offset=str(at),
        upload_complete="?1" if complete else "?0",
        content_type="application/partial-upload",
    )


async def test_cancelled_in_the_access_hook_creates_nothing(server: Server) -> None:
    res = step(server)
    root = Path(server.config.root)
    before = open_fd_count()

    async def stuck(target: AccessTarget) -> Plan | None:
        await trio.sleep_forever()

    with trio.CancelScope() as scope:
        scope.cancel()
        await res.write(facts(b"PUT", "/a.bin", upload_complete="?0"), Content([b"x"]), 1e9, stuck)
    assert temps(root) == [] and open_fd_count() == before
    settled(res)


async def test_cancelled_while_sending_the_104_keeps_an_empty_upload(server: Server) -> None:
    res = step(server)
    root = Path(server.config.root)
    before = open_fd_count()
    content = Content([b"x" * 100])
    sent: list[int] = []

    async def interim(status: int, fields: Sequence[tuple[bytes, bytes]]) -> None:
        sent.append(status)
        await trio.sleep_forever()

    content.interim = interim
    req = facts(b"PUT", "/b.bin", upload_complete="?0", upload_interop="8")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(res.write, req, content, 1e9, allow)
        await wait_until(lambda: sent == [104])
        nursery.cancel_scope.cancel()
    assert len(temps(root)) == 2  # the upload exists (its 104 was on the way)
    await wait_until(lambda: open_fd_count() == before)
    settled(res)


@pytest.mark.parametrize("block_at", [0, 1, 2, 3])
async def test_cancelled_at_each_pull_keeps_what_was_written(server: Server, block_at: int) -> None:
    res = step(server)
    location = await create(res, "c.bin")
    before = open_fd_count()
    chunks = [os.urandom(MiB) for _ in range(3)]  # one pool write per MiB
    content = Content(chunks, block_at)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(res.write, append(location, 0, True), content, 1e9, allow)
        await wait_until(lambda: content.pulls > block_at)
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    await wait_until(lambda: open_fd_count() == before)
    settled(res)
    # Every MiB handed to the pool before the cancelled pull is in, durable.
    got = await offset(res, location)
    assert got == min(block_at, 3) * MiB
    root = Path(server.config.root)
    (data,) = [n for n in temps(root) if not n.endswith(".info")]
    assert (root / data).read_bytes() == b"".join(chunks[:block_at])


@pytest.mark.parametrize("call", ["write", "fsync", "replace"])
async def test_cancelled_while_a_step_is_stuck_in_the_disk(
    server: Server, monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    res = step(server)
    root = Path(server.config.root)
    location = await create(res, "d.bin")
    before = open_fd_count()
    gate = threading.Event()
    inside = threading.Event()
    real = getattr(writer.SYS, call)
    # fsync: the append's own (the first is its hold's, before any write);
    # replace: the commit's (the first replaces the info file: the length).
    skip = [0 if call == "write" else 1]

    def stuck(*args: Any, **kw: Any) -> Any:
        if skip[0]:
            skip[0] -= 1
        elif not gate.is_set():
            inside.set()
            gate.wait(10)
        return real(*args, **kw)

    monkeypatch.setattr(writer.SYS, call, stuck)
    data = os.urandom(MiB)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(res.write, append(location, 0, True), Content([data]), 1e9, allow)
        await wait_until(inside.is_set)
        nursery.cancel_scope.cancel()  # the request ends; the thread is abandoned
    settled(res)
    gate.set()  # the disk comes back: the thread ends its step, then settles
    await wait_until(lambda: open_fd_count() == before)
    monkeypatch.setattr(writer.SYS, call, real)
    if call == "replace":
        assert (root / "d.bin").read_bytes() == data  # the commit was already under way
    else:
        assert await offset(res, location) == MiB  # nothing lost, nothing committed
        assert not (root / "d.bin").exists()


async def test_a_newer_request_takes_the_upload_over(server: Server) -> None:
    res = step(server)
    location = await create(res, "e.bin")
    stalled = Content([b"a" * 1000, b"b" * 1000], block_at=1)
    results: list[object] = []

    async def old() -> None:
        try:
            results.append(await res.write(append(location, 0), stalled, 1e9, allow))
        except trio.BrokenResourceError as exc:
            results.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(old)
        await wait_until(lambda: stalled.pulls == 2)
        await trio.testing.wait_all_tasks_blocked()
        # The client gave up on the stalled connection and asks again.
        assert await offset(res, location) == 1000
    assert len(results) == 1 and isinstance(results[0], trio.BrokenResourceError)
    plan = await res.write(append(location, 1000, True), Content([b"c"]), 1e9, allow)
    assert isinstance(plan, Plan) and plan.status == 201
    assert (Path(server.config.root) / "e.bin").read_bytes() == b"a" * 1000 + b"c"
    settled(res)


def test_the_token_names_the_target_and_the_upload_only(server: Server) -> None:
    opened = step(server).signer.sign(PURPOSE, ("a/b.bin", "0" * 24), 2**40)
    assert "/" not in opened and len(opened) < 200
