"""WebDAV locks against writes in flight, and the ``If`` field of a LOCK.

* A LOCK granted while a PUT's content streams refuses that PUT at its
  commit (423, the lock's root named): the file keeps what it had, no
  temporary is left, ``/metrics``' counters say an upload was aborted and
  a temporary removed (no lost update; the service driven with a
  controllable content, no sockets, no sleeps).
* A LOCK that would cover a write being committed waits for the commit to
  end (the guard's ``committing`` mark), then is granted: no lock is ever
  granted between a write's last check and its rename.
* An ``If`` field with an entity tag on a LOCK (a new lock or a refresh)
  is compared with the resource's current ETag (RFC 4918 §10.4.2), over
  HTTP/1.1 and HTTP/2.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from serverio.dav.lockguard import TableLocks, new_token
from serverio.dav.locks import LockTable
from serverio.dav.service import DavService
from serverio.fs.filecache import FileCache
from serverio.fs.opener import RootOpener
from serverio.http.core import Plan, RequestFacts
from serverio.http.target import parse_target
from serverio.observe.stats import Stats
from serverio.pipeline.request import NO_CONTENT
from serverio.upload.service import Uploads

from .conftest import extra
from .test_dav import dav_config, temps
from .test_dav_locking import CLIENTS, LOCKINFO
from .test_upload_writer import allow


def tree_of(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


class Gated:
    """A PUT's content: the first chunk at once, the rest only after
    ``go`` is set; ``started`` is set once the first chunk was taken."""

    def __init__(self, first: bytes, rest: bytes) -> None:
        self.declared: int | None = len(first) + len(rest)
        self.received = 0
        self.parts = [first, rest]
        self.started = trio.Event()
        self.go = trio.Event()

    async def next_chunk(self) -> bytes | None:
        if not self.parts:
            return None
        if len(self.parts) == 1:
            self.started.set()
            await self.go.wait()
        part = self.parts.pop(0)
        self.received += len(part)
        return part


class Body:
    """A request's whole content in one chunk (a LOCK's XML)."""

    def __init__(self, data: bytes) -> None:
        self.declared: int | None = len(data)
        self.received = 0
        self.data: bytes | None = data

    async def next_chunk(self) -> bytes | None:
        data, self.data = self.data, None
        self.received += len(data or b"")
        return data


SHARED = LOCKINFO.replace(b"<D:exclusive/>", b"<D:shared/>")


def service(root: Path) -> tuple[DavService, Stats, RootOpener]:
    cfg = dav_config(root)
    opener = RootOpener(str(root), follow_symlinks=False)
    files = FileCache(1 << 20, 65536)
    stats = Stats()
    uploads = Uploads(cfg, stats, lambda: opener, files)
    locks = TableLocks(LockTable(max_locks=16, timeout_max=3600, tokens=new_token))
    svc = DavService(cfg, lambda: opener, files, uploads, locks)
    svc.clock = trio.current_time  # the clock these requests' ``now`` comes from
    return svc, stats, opener


def request(method: bytes, path: bytes, **fields: str) -> RequestFacts:
    return RequestFacts(method, parse_target(method, path), extra=extra(**fields))


async def answer(svc: DavService, req: RequestFacts, content: Any = NO_CONTENT) -> Plan:
    got = await svc.write(req, content, trio.current_time(), allow)
    assert isinstance(got, Plan)
    return got


@pytest.mark.parametrize("new", [False, True], ids=["replace", "create"])
async def test_a_lock_granted_while_a_put_streams_refuses_its_commit(root: Path, new: bool) -> None:
    svc, stats, opener = service(root)
    name = "fresh.txt" if new else "hello.txt"
    before = None if new else (root / name).read_bytes()
    content = Gated(b"A" * 1000, b"B" * 1000)
    got: list[Plan] = []

    async def put() -> None:
        got.append(await answer(svc, request(b"PUT", b"/" + name.encode()), content))

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(put)
            await content.started.wait()
            # The PUT passed the guard and streams; a LOCK comes now (a
            # depth-0 lock of the parent for a new file: its membership).
            target = b"/" if new else b"/" + name.encode()
            lock = await answer(svc, request(b"LOCK", target, depth="0"), Body(LOCKINFO))
            assert lock.status == 200
            content.go.set()
    (plan,) = got
    assert plan.status == 423
    body = b"".join(b for b in plan.body if isinstance(b, bytes))
    href = b"/" if new else b"/" + name.encode()
    assert b"<D:lock-token-submitted><D:href>" + href + b"</D:href>" in body
    if new:
        assert not (root / name).exists()
    else:
        assert (root / name).read_bytes() == before
    assert temps(root) == []  # the temporary was removed, nothing half written
    assert stats.writes.aborted == 1 and stats.writes.files == 0
    assert stats.writes.temps_removed == 1
    opener.close()


async def test_a_put_with_the_token_of_a_lock_granted_before_commits(root: Path) -> None:
    # The check at the commit is the guard's: a PUT that submits the token
    # of the lock (granted before it began) commits as usual.
    svc, stats, opener = service(root)
    lock = await answer(svc, request(b"LOCK", b"/hello.txt", depth="0"), Body(LOCKINFO))
    token = dict(lock.headers)[b"lock-token"].decode()
    content = Gated(b"new ", b"text")
    content.go.set()
    put = request(b"PUT", b"/hello.txt", dav_if=f"({token})")
    plan = await answer(svc, put, content)
    assert plan.status == 204 and (root / "hello.txt").read_bytes() == b"new text"
    assert stats.writes.files == 1 and temps(root) == []
    opener.close()


async def test_a_lock_waits_for_a_commit_in_progress() -> None:
    guard = TableLocks(LockTable(max_locks=16, timeout_max=3600, tokens=new_token))
    put = request(b"PUT", b"/d/f.txt")
    done = guard.committing(put, ["d/f.txt", "d"], etag_of=lambda p: None, now=1.0)
    assert callable(done)
    granted: list[int] = []

    async def lock(path: str, depth: str) -> None:
        req = request(b"LOCK", b"/" + path.encode(), depth=depth)

        async def create() -> int:
            return 201

        plan = await guard.lock(req, SHARED, path, True, 1.0, create)
        granted.append(plan.status)

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            # Covering the file, its parent, or an ancestor with depth
            # infinity: each waits; a depth-0 lock of the ancestor does not.
            nursery.start_soon(lock, "d/f.txt", "0")
            nursery.start_soon(lock, "d", "0")
            nursery.start_soon(lock, "", "infinity")
            await trio.testing.wait_all_tasks_blocked()
            assert granted == []
            assert len(guard.table) == 0  # nothing granted during the commit
            done()
            done()  # a second call changes nothing
    assert granted == [200, 200, 200]  # shared locks: none conflicts
    # Another write's commit is now checked against those locks: 423.
    got = guard.committing(put, ["d/f.txt"], etag_of=lambda p: None, now=2.0)
    assert isinstance(got, tuple) and got[0] == 423


async def test_a_depth_0_lock_of_an_ancestor_does_not_wait() -> None:
    guard = TableLocks(LockTable(max_locks=16, timeout_max=3600, tokens=new_token))
    done = guard.committing(
        request(b"PUT", b"/a/b/f"), ["a/b/f", "a/b"], etag_of=lambda p: None, now=1.0
    )
    assert callable(done)

    async def create() -> int:
        return 201

    with trio.fail_after(10):
        req = request(b"LOCK", b"/a", depth="0")
        plan = await guard.lock(req, LOCKINFO, "a", True, 1.0, create)
    assert plan.status == 200
    done()


@pytest.mark.parametrize("proto", CLIENTS)
async def test_if_with_an_entity_tag_on_a_lock(root: Path, proto: str) -> None:
    with trio.fail_after(30):
        async with CLIENTS[proto](root) as call:
            status, hs, _ = await call("PUT", "/doc.txt", [], b"one")
            assert status == 201
            etag = hs["etag"]
            assert etag.startswith('"')
            # A new lock whose If holds on the current ETag: granted.
            status, _, _ = await call("LOCK", "/doc.txt", [("if", '(["nope"])')], LOCKINFO)
            assert status == 412
            status, hs, body = await call("LOCK", "/doc.txt", [("if", f"([{etag}])")], LOCKINFO)
            assert status == 200, body
            token = re.fullmatch(r"<(urn:uuid:[0-9a-f-]{36})>", hs["lock-token"])
            assert token is not None
            tok = token.group(1)
            # A refresh with the token and the ETag: 200; a stale ETag: 412.
            status, _, _ = await call("LOCK", "/doc.txt", [("if", f"(<{tok}> [{etag}])")], b"")
            assert status == 200
            status, _, _ = await call("LOCK", "/doc.txt", [("if", f'(<{tok}> ["old"])')], b"")
            assert status == 412
            # Tagged with the resource itself: the same.
            tagged = f"</doc.txt> (<{tok}> [{etag}])"
            assert (await call("LOCK", "/doc.txt", [("if", tagged)], b""))[0] == 200
            # After the file changes (with the token), the old ETag fails.
            status, hs, _ = await call("PUT", "/doc.txt", [("if", f"(<{tok}>)")], b"two")
            assert status == 204
            status, _, _ = await call("LOCK", "/doc.txt", [("if", f"(<{tok}> [{etag}])")], b"")
            assert status == 412
            fresh = hs["etag"]
            status, _, _ = await call("LOCK", "/doc.txt", [("if", f"(<{tok}> [{fresh}])")], b"")
            assert status == 200


async def test_mkcol_counts_a_directory_in_the_write_metrics(root: Path) -> None:
    svc, stats, opener = service(root)
    assert (await answer(svc, request(b"MKCOL", b"/made"))).status == 201
    assert (await answer(svc, request(b"MKCOL", b"/made"))).status == 405
    assert stats.writes.directories == 1 and (root / "made").is_dir()
    opener.close()


@pytest.mark.parametrize("proto", CLIENTS)
async def test_a_destination_is_contained_like_a_write(root: Path, proto: str) -> None:
    # RFC 4918 §9.8, issue 29 "Contained": a COPY/MOVE Destination goes
    # through the writes' name check and containment: no dotfile, no
    # Windows-reserved name (on every platform), no write temporary's
    # name, nothing through a symlink out of the root: 403, nothing made.
    outside = root.parent / "elsewhere"
    outside.mkdir()
    (root / "link").symlink_to(outside, target_is_directory=True)
    before = tree_of(root)
    with trio.fail_after(30):
        async with CLIENTS[proto](root) as call:
            for dest in (
                "/.dot.txt",
                "/CON",
                "/con.txt",
                "/sub/NUL.log",
                "/sub/a%3Ab.txt",
                "/.serverio-tmp-x",
                "/link/stolen.txt",
            ):
                for method in ("COPY", "MOVE"):
                    status, _, _ = await call(method, "/hello.txt", [("destination", dest)], b"")
                    assert status == 403, (method, dest, status)
            assert (root / "hello.txt").exists()
            assert list(outside.iterdir()) == []
            assert tree_of(root) == before
