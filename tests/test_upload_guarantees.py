"""Write-safety guarantees that each had one test, or none (issue 41,
"Guarantees no test guards"), each held up from a second angle.

* The ``If-Match`` re-check at a PUT's commit
  (:meth:`serverio.fs.writer.WriteJob.commit`): a file replaced by another
  writer while the body streams is never overwritten (412, theirs kept);
  through the write step, and over HTTP/1.1 through the real transport.
* The same re-check at a DELETE's removal
  (:func:`serverio.fs.writer.delete_file`): through the write step's commit
  gate, and over HTTP/2.
* The directory fsync after the rename (a PUT) and the unlink (a DELETE),
  over HTTP/2: the descriptor synced is the directory, after the entry
  changed.
* The abandoned-thread checks of :class:`~serverio.fs.writer.WriteJob`:
  an HTTP/2 stream reset while its last write step is stuck in the disk;
  when the disk comes back the thread neither commits (``finish``'s check)
  nor leaves its temporary (``run``'s discard).

Each was checked against its one-line mutation (see the test docstrings).
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
from h2.errors import ErrorCodes

from serverio.fs import writer
from serverio.upload import service as upload_service

from .conftest import memory_connection, open_fd_count, wait_until
from .h2client import h2_memory
from .test_upload import put as raw_put
from .test_upload import temps, upload_config
from .test_upload_writer import Chunks, Rig, allow, clean, delete, header, put


def replace_with(path: Path, data: bytes) -> None:
    """Another writer's atomic replacement: a new file renamed over ``path``
    (a new inode, as any atomic writer makes)."""
    other = path.with_name(path.name + ".other")
    other.write_bytes(data)
    os.replace(other, path)


class ReplacingChunks(Chunks):
    """Content whose ``at``-th pull first has another writer replace
    ``path`` (the body is still streaming when the target changes)."""

    def __init__(self, parts: list[bytes], path: Path, data: bytes, at: int = 1) -> None:
        super().__init__(parts)
        self.path, self.data, self.at, self.pulls = path, data, at, 0

    async def next_chunk(self) -> bytes | None:
        if self.pulls == self.at:
            replace_with(self.path, self.data)
        self.pulls += 1
        return await super().next_chunk()


@pytest.fixture
def rig(root: Path) -> Any:
    r = Rig(root)
    yield r
    r.close()


# ------------------------------------------------------------ If-Match at the commit


async def test_a_put_if_match_whose_target_is_replaced_while_streaming_is_412(rig: Rig) -> None:
    """Mutation: fs/writer.py WriteJob.commit without ``if checked and not
    _same(now, expect): raise WriteRefused(Refusal.CHANGED)`` answers 204
    and v2 is lost; this test then fails."""
    fds = open_fd_count()
    target = rig.root / "doc.txt"
    first = await rig.run(put("/doc.txt"), Chunks([b"v1"]))
    tag = header(first, b"etag")
    assert first.status == 201 and tag is not None
    content = ReplacingChunks([b"mine, ", b"decided on v1"], target, b"v2 from someone else")
    plan = await rig.run(put("/doc.txt", if_match=tag.decode()), content)
    assert plan.status == 412
    assert target.read_bytes() == b"v2 from someone else"
    assert rig.stats.writes.files == 1 and rig.stats.writes.aborted == 1
    # Unchanged target, same request: the precondition holds and it commits.
    tag2 = header(await rig.run(put("/doc.txt"), Chunks([b"v3"])), b"etag")
    assert tag2 is not None
    ok = await rig.run(put("/doc.txt", if_match=tag2.decode()), Chunks([b"v4"]))
    assert ok.status == 204 and target.read_bytes() == b"v4"
    await clean(rig, fds)


async def test_h1_a_put_if_match_whose_target_is_replaced_mid_body_is_412(root: Path) -> None:
    """The same guarantee through the HTTP/1.1 transport: the target is
    replaced once the temporary exists (the body is half sent)."""
    target = root / "doc.txt"
    target.write_bytes(b"v1")
    async with memory_connection(upload_config(root)) as (client, _srv, _):
        tag = (await client.get("/doc.txt")).header("etag")
        assert tag is not None
        body = b"m" * 20_000
        head = raw_put("/doc.txt", body, f"If-Match: {tag}\r\n")
        split = len(head) - len(body) // 2
        await client.send_raw(head[:split])
        await wait_until(lambda: temps(root) != [])  # the content is streaming
        replace_with(target, b"v2")
        await client.send_raw(head[split:])
        r = await client.read_response()
        assert r.status == 412
        got = await client.get("/doc.txt")
        assert got.body == b"v2" and got.header("etag") != tag
    assert target.read_bytes() == b"v2" and temps(root) == []


# ------------------------------------------------------------ If-Match at the removal


async def test_a_delete_if_match_whose_target_is_replaced_before_the_removal_is_412(
    rig: Rig,
) -> None:
    """Mutation: fs/writer.py delete_file without ``if checked and not
    _same(now, expect): raise WriteRefused(Refusal.CHANGED)`` deletes v2
    (204); this test then fails.  The replacement comes at the commit gate,
    between the precondition check and the removal (where WebDAV's lock
    check sits)."""
    fds = open_fd_count()
    target = rig.root / "doc.txt"
    tag = header(await rig.run(put("/doc.txt"), Chunks([b"v1"])), b"etag")
    assert tag is not None

    def gate() -> Callable[[], None]:
        replace_with(target, b"v2")
        return lambda: None

    req = delete("/doc.txt", if_match=tag.decode())
    plan = await rig.up.write(req, Chunks([]), trio.current_time(), allow, gate)
    assert plan.status == 412 and target.read_bytes() == b"v2"
    assert rig.stats.writes.deletes == 0
    await clean(rig, fds)


async def test_h2_a_delete_if_match_whose_target_is_replaced_before_the_removal_is_412(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same over HTTP/2: another writer replaces the file as the
    removal step starts in the pool."""
    target = root / "doc.txt"
    target.write_bytes(b"v1")
    real = writer.delete_file  # what serverio.upload.service calls

    def racing(place: writer.Placement, checked: bool, expect: Any) -> None:
        replace_with(target, b"v2")
        real(place, checked, expect)

    monkeypatch.setattr(upload_service, "delete_file", racing)
    async with h2_memory(upload_config(root)) as (client, srv, _):
        tag = (await client.get("/doc.txt")).headers["etag"]
        r = await client.get("/doc.txt", [("if-match", tag)], method="DELETE")
        assert r.status == 412
        assert bytes((await client.get("/doc.txt")).body) == b"v2"
        assert srv.stats.writes.deletes == 0
    assert target.read_bytes() == b"v2"


# ------------------------------------------------------------ the directory fsync


async def test_h2_a_put_and_a_delete_fsync_the_directory_after_the_entry_changed(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mutation: fs/writer.py without ``_fsync_dir(place)`` after the
    rename (commit) or the unlink (delete_file): no directory descriptor
    is synced, and this test fails (as tests/test_upload_writer.py's
    count does, through the write step alone)."""
    target = root / "sub" / "d.bin"
    seen: list[tuple[str, bool]] = []
    real = writer.SYS.fsync

    def watched(fd: int) -> None:
        kind = "dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"
        seen.append((kind, target.exists()))
        real(fd)

    monkeypatch.setattr(writer.SYS, "fsync", watched)
    async with h2_memory(upload_config(root)) as (client, _srv, _):
        sid = client.request("/sub/d.bin", "PUT", [("content-length", "5")], end_stream=False)
        client.conn.send_data(sid, b"hello", end_stream=True)
        await client.flush()
        (r,) = await client.wait(sid)
        assert r.status == 201
        # The file's content first, then the directory once the name is there.
        assert seen == [("file", False), ("dir", True)]
        seen.clear()
        assert (await client.get("/sub/d.bin", method="DELETE")).status == 204
        assert seen == [("dir", False)]


# ------------------------------------------------------------ an abandoned write thread


async def test_h2_a_reset_while_the_last_write_is_stuck_never_commits_and_leaves_nothing(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stream is reset while its one write step (the last batch and
    the commit, WriteJob.finish) is stuck in the disk: the request ends at
    once, its thread abandoned.  When the disk comes back, that thread must
    not commit and must remove its temporary.

    Mutations: WriteJob.finish without its ``if self._released: raise``
    commits the abandoned upload (``late.bin`` appears); WriteJob.run
    without ``if self._leave(): self.discard()`` leaves the temporary.
    Either fails this test."""
    entered, release = threading.Event(), threading.Event()
    real = writer.SYS.write

    def stuck(fd: int, data: bytes) -> int:
        entered.set()
        release.wait(10)
        return real(fd, data)

    monkeypatch.setattr(writer.SYS, "write", stuck)
    fds = open_fd_count()
    try:
        async with h2_memory(upload_config(root)) as (client, srv, _):
            sid = client.request("/late.bin", "PUT", [("content-length", "4")], end_stream=False)
            client.conn.send_data(sid, b"late", end_stream=True)
            await client.flush()
            await trio.to_thread.run_sync(entered.wait, 5)
            client.conn.reset_stream(sid, ErrorCodes.CANCEL)
            await client.flush()
            await wait_until(lambda: srv.stats.writes.aborted == 1)
            pool = next(p for p in srv.services.pools if p.name == "write")
            assert pool.running == 1 and len(temps(root)) == 1  # the thread's, still
            release.set()
            assert await pool.wait_idle(trio.current_time() + 10) == 0
            assert (await client.get("/hello.txt")).status == 200  # the connection lives
    finally:
        release.set()
    assert not (root / "late.bin").exists() and temps(root) == []
    assert open_fd_count() == fds
