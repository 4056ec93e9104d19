"""The atomic write path (serverio.fs.writer) through the write step
(serverio.upload.service.Uploads.write), without a transport.

Every test ends with the same check (:func:`clean`): no temporary file
anywhere under the root, no descriptor more than before, no pool token
held.  Faults are injected through :data:`serverio.fs.writer.SYS`;
cancellation is injected at every checkpoint of the write step's task
(an instrument cancels the step's scope at its k-th task step, for every
k until the step completes).
"""

from __future__ import annotations

import errno
import hashlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.lowlevel

from serverio.fs import writer
from serverio.fs.filecache import FileCache
from serverio.fs.opener import RootOpener
from serverio.http.access import AccessTarget, Right
from serverio.http.core import Plan, RequestFacts, error_plan
from serverio.http.target import WRITE_TEMP_PREFIX, parse_target
from serverio.observe.stats import Stats
from serverio.upload.service import Uploads

from .conftest import extra, make_config, open_fd_count, wait_until


class Chunks:
    """A request's content: ``parts``, one per pull, each pull a checkpoint."""

    def __init__(self, parts: list[bytes], declared: int | None = -1) -> None:
        self.parts = list(parts)
        self.declared = sum(map(len, parts)) if declared == -1 else declared
        self.received = 0

    async def next_chunk(self) -> bytes | None:
        await trio.lowlevel.checkpoint()
        if not self.parts:
            return None
        part = self.parts.pop(0)
        self.received += len(part)
        return part


async def allow(target: AccessTarget) -> Plan | None:
    return None


def put(path: str, **fields: Any) -> RequestFacts:
    return RequestFacts(method=b"PUT", target=parse_target(b"PUT", path.encode()), **fields)


def delete(path: str, **fields: Any) -> RequestFacts:
    return RequestFacts(method=b"DELETE", target=parse_target(b"DELETE", path.encode()), **fields)


def temps(root: Path) -> list[str]:
    return [
        os.path.join(d, n)
        for d, _, names in os.walk(root)
        for n in names
        if n.startswith(WRITE_TEMP_PREFIX)
    ]


class Rig:
    """An Uploads over ``root`` with its own opener."""

    def __init__(self, root: Path, strategy: str | None = None, **kw: Any) -> None:
        self.cfg = make_config(root, upload=True, min_free_space=0, **kw)
        self.opener = RootOpener(str(root), follow_symlinks=False, strategy=strategy)
        self.stats = Stats()
        self.files = FileCache(1 << 20, 65536)
        self.up = Uploads(self.cfg, self.stats, lambda: self.opener, self.files)
        self.root = root

    async def run(self, req: RequestFacts, content: Chunks | None = None) -> Plan:
        return await self.up.write(req, content or Chunks([]), trio.current_time(), allow)

    async def idle(self) -> None:
        assert await self.up.pool.wait_idle(trio.current_time() + 10) == 0

    def close(self) -> None:
        self.opener.close()


@pytest.fixture
def rig(root: Path) -> Any:
    r = Rig(root)
    yield r
    r.close()


async def clean(rig: Rig, fds: int) -> None:
    await rig.idle()
    assert temps(rig.root) == []
    assert open_fd_count() == fds
    assert rig.up.pool.running == 0 and rig.up.in_flight == 0


def header(plan: Plan, name: bytes) -> bytes | None:
    return next((v for k, v in plan.headers if k == name), None)


# ------------------------------------------------------------------ basics


async def test_put_creates_then_replaces_atomically(rig: Rig) -> None:
    fds = open_fd_count()
    plan = await rig.run(put("/new.txt"), Chunks([b"one ", b"two"]))
    assert plan.status == 201 and header(plan, b"location") == b"/new.txt"
    assert (rig.root / "new.txt").read_bytes() == b"one two"
    tag = header(plan, b"etag")
    # A small file's ETag is its content hash, as a GET would show it.
    assert tag == b'"' + hashlib.blake2b(b"one two", digest_size=16).hexdigest().encode() + b'"'
    again = await rig.run(put("/new.txt"), Chunks([b"three"]))
    assert again.status == 204 and header(again, b"etag") not in (None, tag)
    assert (rig.root / "new.txt").read_bytes() == b"three"
    assert rig.stats.writes.files == 2 and rig.stats.writes.bytes == 12
    await clean(rig, fds)


async def test_a_small_put_costs_two_pool_hops(rig: Rig) -> None:
    # The placement and its temporary in one hop, the content and the
    # commit in the other (a third, for the temporary alone, is gone).
    fds = open_fd_count()
    for path, status in (("/two.txt", 201), ("/two.txt", 204)):
        before = rig.up.pool.stats.completed
        assert (await rig.run(put(path), Chunks([b"x" * 1024]))).status == status
        assert rig.up.pool.stats.completed - before == 2
    await clean(rig, fds)


async def test_a_put_refused_after_its_placement_leaves_no_temporary(rig: Rig) -> None:
    # The temporary is made with the placement; the one right asked once
    # the file is placed (an overwrite here) and a failed precondition
    # each refuse after it: it is removed, the old file stays.
    fds = open_fd_count()
    (rig.root / "kept.txt").write_bytes(b"old")
    asked: list[AccessTarget] = []

    async def no_overwrite(target: AccessTarget) -> Plan | None:
        asked.append(target)
        if target.also is None and target.right is Right.OVERWRITE:
            return error_plan(403, 0.0)
        return None

    plan = await rig.up.write(put("/kept.txt"), Chunks([b"new"]), 0.0, no_overwrite)
    assert plan.status == 403 and [t.right for t in asked] == [Right.UPLOAD, Right.OVERWRITE]
    assert (await rig.run(put("/kept.txt", if_none_match="*"), Chunks([b"new"]))).status == 412
    assert (rig.root / "kept.txt").read_bytes() == b"old"
    await clean(rig, fds)
    assert rig.stats.writes.temps_removed == 2


async def test_delete_removes_a_file_and_refuses_directories(rig: Rig) -> None:
    fds = open_fd_count()
    assert (await rig.run(delete("/hello.txt"))).status == 204
    assert not (rig.root / "hello.txt").exists()
    assert (await rig.run(delete("/hello.txt"))).status == 404
    assert (await rig.run(delete("/sub"))).status == 409
    assert (await rig.run(delete("/sub/"))).status == 409
    assert (rig.root / "sub" / "index.html").exists()
    assert rig.stats.writes.deletes == 1
    await clean(rig, fds)


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/missing/a.txt", 409),  # no parent: nothing is created on the way
        ("/hello.txt/a.txt", 409),  # the parent is a file
        ("/sub", 409),  # a directory
        ("/sub/", 409),  # a collection
        ("/.env", 403),  # a dotfile without --hidden
        ("/.secret/x", 403),  # nor below a dot name
        ("/CON", 403),  # a Windows-reserved name, on every platform
        ("/a%3A.txt", 403),  # ':' is refused too
        ("/" + WRITE_TEMP_PREFIX + "x", 403),  # a temporary's name, never a target
    ],
)
async def test_refused_targets_write_nothing(rig: Rig, path: str, status: int) -> None:
    fds = open_fd_count()
    before = sorted(str(p) for p in rig.root.rglob("*"))
    plan = await rig.run(put(path), Chunks([b"x"]))
    assert plan.status == status
    assert sorted(str(p) for p in rig.root.rglob("*")) == before
    await clean(rig, fds)


async def test_no_write_through_or_onto_a_symlink(
    root: Path, tmp_path: Path, strategy: str
) -> None:
    rig = Rig(root, strategy)
    fds = open_fd_count()
    outside = tmp_path / "outside"
    os.symlink(outside, rig.root / "out")
    os.symlink(outside / "secret.txt", rig.root / "link.txt")
    assert (await rig.run(put("/out/new.txt"), Chunks([b"x"]))).status == 403
    assert (await rig.run(put("/out/secret.txt"), Chunks([b"x"]))).status == 403
    assert (await rig.run(put("/link.txt"), Chunks([b"x"]))).status == 409
    assert (await rig.run(delete("/link.txt"))).status == 409
    assert sorted(os.listdir(outside)) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "OUTSIDE-SECRET\n"
    assert (rig.root / "link.txt").is_symlink()
    # And a plain write works under this strategy.
    assert (await rig.run(put("/sub/w.txt"), Chunks([b"w"]))).status == 201
    assert (rig.root / "sub" / "w.txt").read_bytes() == b"w"
    assert (await rig.run(delete("/sub/w.txt"))).status == 204
    await clean(rig, fds)
    rig.close()


# ------------------------------------------------------------ preconditions


async def test_preconditions_are_decided_on_the_current_file(rig: Rig) -> None:
    fds = open_fd_count()
    first = await rig.run(put("/p.txt"), Chunks([b"v1"]))
    tag = (header(first, b"etag") or b"").decode()
    # If-None-Match: * never overwrites.
    assert (await rig.run(put("/p.txt", if_none_match="*"), Chunks([b"x"]))).status == 412
    assert (await rig.run(put("/p.txt", if_match='"other"'), Chunks([b"x"]))).status == 412
    old = "Thu, 01 Jan 1970 00:00:10 GMT"
    assert (await rig.run(put("/p.txt", if_unmodified_since=old), Chunks([b"x"]))).status == 412
    assert (await rig.run(delete("/p.txt", if_match='"other"'))).status == 412
    assert (rig.root / "p.txt").read_bytes() == b"v1"
    ok = await rig.run(put("/p.txt", if_match=tag), Chunks([b"v2"]))
    assert ok.status == 204 and (rig.root / "p.txt").read_bytes() == b"v2"
    # Absent: If-Match never holds (not even *); If-None-Match: * creates.
    assert (await rig.run(put("/q.txt", if_match="*"), Chunks([b"x"]))).status == 412
    assert not (rig.root / "q.txt").exists()
    assert (await rig.run(put("/q.txt", if_none_match="*"), Chunks([b"x"]))).status == 201
    await clean(rig, fds)


async def test_a_file_that_appears_meanwhile_is_not_overwritten(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If-None-Match: * decided on an absent file; another writer creates
    it before the commit: the no-replace rename refuses (412)."""
    fds = open_fd_count()
    real_fsync = writer.SYS.fsync

    def racing_fsync(fd: int) -> None:
        real_fsync(fd)
        if not (rig.root / "race.txt").exists():
            (rig.root / "race.txt").write_bytes(b"theirs")

    monkeypatch.setattr(writer.SYS, "fsync", racing_fsync)
    plan = await rig.run(put("/race.txt", if_none_match="*"), Chunks([b"mine"]))
    assert plan.status == 412 and (rig.root / "race.txt").read_bytes() == b"theirs"
    await clean(rig, fds)


async def test_the_no_replace_strategy_never_replaces(rig: Rig, tmp_path: Path) -> None:
    (rig.root / "t").write_bytes(b"temp")
    place = writer.open_target(rig.opener, ("existing.txt",), False)
    try:
        (rig.root / "existing.txt").write_bytes(b"kept")
        with pytest.raises(FileExistsError):
            writer.NO_REPLACE(place, "t", "existing.txt")
        writer.NO_REPLACE(place, "t", "fresh.txt")
    finally:
        place.close()
    assert (rig.root / "existing.txt").read_bytes() == b"kept"
    assert (rig.root / "fresh.txt").read_bytes() == b"temp" and not (rig.root / "t").exists()


# ------------------------------------------------------------ limits, digests


async def test_size_limits_declared_and_streamed(root: Path) -> None:
    rig = Rig(root, max_upload_size=10)
    try:
        fds = open_fd_count()
        assert (await rig.run(put("/a.bin"), Chunks([b"x" * 11]))).status == 413
        streamed = Chunks([b"x" * 6, b"y" * 6], declared=None)  # chunked: no length
        assert (await rig.run(put("/a.bin"), streamed)).status == 413
        assert not (root / "a.bin").exists()
        assert (await rig.run(put("/a.bin"), Chunks([b"x" * 10]))).status == 201
        assert rig.stats.writes.aborted == 2 and rig.stats.writes.temps_removed == 1
        await clean(rig, fds)
    finally:
        rig.close()


async def test_a_digest_mismatch_writes_nothing(rig: Rig) -> None:
    fds = open_fd_count()
    import base64

    good = base64.b64encode(hashlib.sha256(b"payload").digest()).decode()
    bad = base64.b64encode(hashlib.sha256(b"other").digest()).decode()
    refused = await rig.run(
        put("/d.txt", extra=extra(digests=f"sha-256=:{bad}:")), Chunks([b"payload"])
    )
    assert refused.status == 400 and not (rig.root / "d.txt").exists()
    ok = await rig.run(
        put("/d.txt", extra=extra(digests=f"sha-256=:{good}:")), Chunks([b"pay", b"load"])
    )
    assert ok.status == 201 and (rig.root / "d.txt").read_bytes() == b"payload"
    with pytest.raises(Exception) as info:  # a malformed field: 400 from writes.digest
        await rig.run(put("/e.txt", extra=extra(digests="sha-256=nope")), Chunks([b"x"]))
    assert getattr(info.value, "status", None) == 400
    await clean(rig, fds)


@pytest.mark.parametrize(("no_fsync", "syncs"), [(False, 2), (True, 0)])
async def test_no_fsync_commits_atomically_without_syncing(
    root: Path, monkeypatch: pytest.MonkeyPatch, no_fsync: bool, syncs: int
) -> None:
    """--no-fsync: the file and its directory are not synced (default: both
    are); the commit is the same rename, so the file is whole and nothing
    is left behind."""
    calls: list[int] = []
    real = writer.SYS.fsync

    def counted(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(writer.SYS, "fsync", counted)
    rig = Rig(root, no_fsync=no_fsync)
    try:
        assert rig.cfg.uploads.no_fsync is no_fsync
        fds = open_fd_count()
        plan = await rig.run(put("/s.bin"), Chunks([b"a" * 1000, b"b" * 1000]))
        assert plan.status == 201 and (root / "s.bin").read_bytes() == b"a" * 1000 + b"b" * 1000
        assert len(calls) == syncs
        await clean(rig, fds)
    finally:
        rig.close()


async def test_a_large_put_goes_to_the_pool_in_batches_and_hashes_no_more_than_its_etag_needs(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chunks reach the pool a batch (_WRITE_BATCH) at a time, not one hop
    each; past --small-file-size the ETag carries no content hash (as a GET
    of the file shows), so the write stops hashing."""
    from serverio.upload.service import _WRITE_BATCH

    batches: list[int] = []
    updates: list[int] = []
    from serverio.http.core import content_hasher as real_content_hasher

    real_all = writer.WriteJob.write_all

    def write_all(job: writer.WriteJob, chunks: list[bytes]) -> None:
        batches.append(sum(map(len, chunks)))
        real_all(job, chunks)

    class Counting:
        def __init__(self) -> None:
            self.h = real_content_hasher()

        def update(self, data: bytes) -> None:
            updates.append(len(data))
            self.h.update(data)

        def digest(self) -> bytes:
            return self.h.digest()

    monkeypatch.setattr(writer.WriteJob, "write_all", write_all)
    monkeypatch.setattr(writer, "content_hasher", Counting)
    fds = open_fd_count()
    part = 64 * 1024
    data = os.urandom(part * 40)  # 2.5 MiB in 40 received chunks
    plan = await rig.run(
        put("/batched.bin"), Chunks([data[i : i + part] for i in range(0, len(data), part)])
    )
    assert plan.status == 201 and (rig.root / "batched.bin").read_bytes() == data
    assert batches == [_WRITE_BATCH, _WRITE_BATCH, len(data) - 2 * _WRITE_BATCH]
    # Hashed while the file could still be small enough for a hashed ETag.
    assert sum(updates) <= rig.cfg.files.small_file_size
    tag = header(plan, b"etag")
    assert tag is not None and b"-" in tag  # size-mtime, no content hash
    await clean(rig, fds)


async def test_too_little_free_space_is_507_before_writing(root: Path) -> None:
    rig = Rig(root)
    try:
        rig.up.config = rig.cfg.evolve(min_free_space=1 << 62)
        fds = open_fd_count()
        plan = await rig.run(put("/f.txt"), Chunks([b"x"]))
        assert plan.status == 507 and not (root / "f.txt").exists()
        await clean(rig, fds)
    finally:
        rig.close()


async def test_writes_in_flight_are_bounded(rig: Rig) -> None:
    gate = trio.Event()

    class Slow(Chunks):
        async def next_chunk(self) -> bytes | None:
            await gate.wait()
            return await super().next_chunk()

    rig.up.config = rig.cfg.evolve(max_uploads=1)
    got: list[int] = []
    async with trio.open_nursery() as nursery:

        async def first() -> None:
            got.append((await rig.run(put("/slow.txt"), Slow([b"x"]))).status)

        nursery.start_soon(first)
        await wait_until(lambda: rig.up.in_flight == 1)
        got.append((await rig.run(put("/other.txt"), Chunks([b"y"]))).status)
        gate.set()
    assert got == [503, 201]


# ------------------------------------------------------------ faults


@pytest.mark.parametrize(
    ("call", "code", "status"),
    [
        ("write", errno.ENOSPC, 507),
        ("write", errno.EIO, 500),
        ("fsync", errno.EIO, 500),
        ("replace", errno.EIO, 500),
        ("open", errno.EACCES, 403),
    ],
)
async def test_a_failing_file_layer_leaves_nothing(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, call: str, code: int, status: int
) -> None:
    fds = open_fd_count()
    (rig.root / "keep.txt").write_bytes(b"old")
    real = getattr(writer.SYS, call)
    calls = [0]

    def failing(*args: Any, **kw: Any) -> Any:
        calls[0] += 1
        if calls[0] == 2 or call != "write":  # a write fails part-way, the rest at once
            raise OSError(code, os.strerror(code))
        return real(*args, **kw)

    monkeypatch.setattr(writer.SYS, call, failing)
    plan = await rig.run(put("/keep.txt"), Chunks([b"a" * 100, b"b" * 100]))
    assert plan.status == status
    assert (rig.root / "keep.txt").read_bytes() == b"old"
    assert rig.stats.writes.aborted == 1
    await clean(rig, fds)


async def test_a_failing_unlink_of_the_temporary_is_logged_not_raised(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    fds = open_fd_count()
    real = writer.SYS.unlink

    def failing(*args: Any, **kw: Any) -> None:
        raise OSError(errno.EIO, "unlink failed")

    monkeypatch.setattr(writer.SYS, "unlink", failing)
    plan = await rig.run(put("/x.bin"), Chunks([b"x"] * 3))
    assert plan.status == 201  # committed: no temporary to remove
    big = Chunks([b"x" * 8], declared=None)
    rig.up.config = rig.cfg.evolve(max_upload_size=4)
    assert (await rig.run(put("/y.bin"), big)).status == 413
    monkeypatch.setattr(writer.SYS, "unlink", real)
    left = temps(rig.root)
    assert len(left) == 1  # the one the failing unlink could not remove
    os.unlink(left[0])
    await clean(rig, fds)


# ------------------------------------------------------------ cancellation


class CancelAt(trio.abc.Instrument):
    """Cancel ``scope`` when ``task`` takes its ``k``-th step."""

    def __init__(self, task: trio.lowlevel.Task, scope: trio.CancelScope, k: int) -> None:
        self.task, self.scope, self.k, self.steps = task, scope, k, 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.steps += 1
            if self.steps == self.k:
                self.scope.cancel()


async def _cancelled_at_every_step(
    rig: Rig, make: Callable[[], tuple[RequestFacts, Chunks]], check: Callable[[bool], None]
) -> int:
    fds = open_fd_count()
    k = 0
    while True:
        k += 1
        assert k < 400, "the write step never completed"
        req, content = make()
        with trio.CancelScope() as scope:
            inst = CancelAt(trio.lowlevel.current_task(), scope, k)
            trio.lowlevel.add_instrument(inst)
            try:
                await rig.run(req, content)
            finally:
                trio.lowlevel.remove_instrument(inst)
        await clean(rig, fds)
        check(scope.cancelled_caught)
        if not scope.cancelled_caught:
            return k


async def test_a_put_cancelled_at_any_checkpoint_leaves_old_or_new_never_a_temporary(
    rig: Rig,
) -> None:
    (rig.root / "c.txt").write_bytes(b"old")
    parts = [b"n" * 5000, b"e" * 5000, b"w" * 5000]

    def make() -> tuple[RequestFacts, Chunks]:
        (rig.root / "c.txt").write_bytes(b"old")
        return put("/c.txt"), Chunks(parts)

    def check(cancelled: bool) -> None:
        data = (rig.root / "c.txt").read_bytes()
        assert data in (b"old", b"".join(parts))
        if not cancelled:
            assert data == b"".join(parts)

    steps = await _cancelled_at_every_step(rig, make, check)
    # Every pull, every pool hop (the placement with its temporary, the
    # last batch with the commit): each a checkpoint.
    assert steps > 6
    assert rig.stats.writes.aborted >= steps - 2


async def test_a_delete_cancelled_at_any_checkpoint_holds_nothing(rig: Rig) -> None:
    def make() -> tuple[RequestFacts, Chunks]:
        (rig.root / "gone.txt").write_bytes(b"x")
        return delete("/gone.txt"), Chunks([])

    await _cancelled_at_every_step(rig, make, lambda cancelled: None)


async def test_an_abandoned_write_thread_removes_its_own_temporary(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write stuck in the disk: the request is cancelled and returns at
    once (its thread abandoned, its token held); when the write comes
    back, the thread itself removes the temporary and releases the token."""
    fds = open_fd_count()
    entered, release = threading.Event(), threading.Event()
    real = writer.SYS.write

    def stuck(fd: int, data: bytes) -> int:
        entered.set()
        release.wait(10)
        return real(fd, data)

    monkeypatch.setattr(writer.SYS, "write", stuck)
    with trio.move_on_after(5) as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(rig.run, put("/stuck.txt"), Chunks([b"x" * 10]))
            await trio.to_thread.run_sync(entered.wait, 5)
            nursery.cancel_scope.cancel()
    assert not scope.cancelled_caught
    assert rig.up.pool.running == 1 and len(temps(rig.root)) == 1  # still the thread's
    release.set()
    await clean(rig, fds)
    assert not (rig.root / "stuck.txt").exists()
    await trio.lowlevel.checkpoint()  # the thread's count reaches the trio thread
    assert rig.stats.writes.temps_removed == 1


# ------------------------------------------------------------ sweep, hiding


def test_the_start_up_sweep_removes_only_stale_temporaries(root: Path, tmp_path: Path) -> None:
    old = time.time() - 3600
    stale = [root / (WRITE_TEMP_PREFIX + "a"), root / "sub" / (WRITE_TEMP_PREFIX + "b")]
    for p in stale:
        p.write_bytes(b"left by a SIGKILL")
        os.utime(p, (old, old))
    fresh = root / (WRITE_TEMP_PREFIX + "live")
    fresh.write_bytes(b"an upload in progress")
    (root / "loop").symlink_to(root)  # never followed
    outside = tmp_path / "outside" / (WRITE_TEMP_PREFIX + "o")
    outside.write_bytes(b"not ours")
    os.utime(outside, (old, old))
    (root / "out").symlink_to(tmp_path / "outside")
    assert writer.sweep(str(root), 60) == 2
    assert not any(p.exists() for p in stale) and fresh.exists() and outside.exists()


async def test_uploads_sweep_when_the_handler_starts(root: Path) -> None:
    old = time.time() - 3600
    p = root / "sub" / (WRITE_TEMP_PREFIX + "z")
    p.write_bytes(b"x")
    os.utime(p, (old, old))
    rig = Rig(root)
    try:
        async with rig.up.running():
            pass
        assert not p.exists() and rig.stats.writes.temps_removed == 1
    finally:
        rig.close()
