"""WebDAV (``--webdav``) end to end over memory streams, HTTP/1.1 and
HTTP/2, through the real transports: what litmus does not check (the
ETag a GET shows, hidden names, Destination containment, preconditions,
caches, a 10,000-entry PROPFIND streamed, the start-up refusals), and the
tree operations' cancellation and fault guarantees (serverio.fs.davtree).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from serverio.config import Config
from serverio.dav.service import DavService
from serverio.errors import ConfigError
from serverio.fs import writer
from serverio.fs.davtree import PROPS_DIR, copy_tree, remove_tree
from serverio.fs.filecache import FileCache
from serverio.fs.opener import RootOpener
from serverio.fs.writer import open_target
from serverio.http.core import Plan, RequestFacts
from serverio.http.target import WRITE_TEMP_PREFIX, parse_target
from serverio.observe.stats import Stats
from serverio.pipeline.request import NO_CONTENT
from serverio.upload.service import Uploads

from .conftest import HTTPClient, extra, make_config, memory_connection, open_fd_count
from .h2client import H2Client, h2_memory
from .test_body_seam import send_body
from .test_upload_writer import CancelAt, allow


def dav_config(root: Path, **kw: object) -> Config:
    return make_config(root, webdav=True, min_free_space=0, **kw)


def temps(root: Path) -> list[str]:
    return [
        n
        for _, _, names in os.walk(root)
        for n in names
        if n.startswith(WRITE_TEMP_PREFIX) and not n.endswith(".xml")
    ]


async def dav(
    client: HTTPClient, method: str, target: str, headers: str = "", body: bytes = b""
) -> Any:
    length = f"Content-Length: {len(body)}\r\n" if body else ""
    await client.send_raw(
        f"{method} {target} HTTP/1.1\r\nHost: t\r\n{length}{headers}\r\n".encode() + body
    )
    return await client.read_response(head=method == "HEAD")


def hrefs(body: bytes) -> list[str]:
    return re.findall(r"<D:href>([^<]*)</D:href>", body.decode())


PROP_ETAG = (
    b'<?xml version="1.0"?><D:propfind xmlns:D="DAV:"><D:prop><D:getetag/>'
    b"<D:resourcetype/></D:prop></D:propfind>"
)


# ================================================================ HTTP/1.1


async def test_options_advertises_class_2_and_the_methods(root: Path) -> None:
    # --webdav has the lock table (serverio.dav.lockguard): class 2; locking
    # itself is tested in tests/test_dav_locking.py.
    async with memory_connection(dav_config(root)) as (client, _, _):
        r = await dav(client, "OPTIONS", "/")
        assert r.status == 200 and r.header("dav") == "1, 2"
        allow = r.header("allow")
        assert allow is not None
        assert {
            "PROPFIND",
            "PROPPATCH",
            "MKCOL",
            "COPY",
            "MOVE",
            "PUT",
            "DELETE",
            "LOCK",
            "UNLOCK",
        } <= set(allow.split(", "))
        r = await dav(client, "LOCK", "/hello.txt")
        assert r.status == 400  # no body and no If: not a refresh (RFC 4918 §9.10.2)


async def test_without_webdav_dav_methods_take_the_read_path(root: Path) -> None:
    async with memory_connection(make_config(root, upload=True)) as (client, srv, _):
        assert b"PROPFIND" not in srv.handler.write_methods
        r = await dav(client, "PROPFIND", "/", "Depth: 0\r\n")
        assert r.status == 405 and r.header("dav") is None


async def test_propfind_getetag_is_the_etag_a_get_shows(root: Path) -> None:
    async with memory_connection(dav_config(root)) as (client, _, _):
        got = await client.get("/hello.txt")
        r = await dav(client, "PROPFIND", "/hello.txt", "Depth: 0\r\n", PROP_ETAG)
        assert r.status == 207 and r.header("content-type").startswith("application/xml")
        etag = re.search(r"<D:getetag>([^<]*)</D:getetag>", r.body.decode())
        assert etag is not None and etag[1].replace("&quot;", '"') == got.header("etag")
        # A collection has no ETag: 404 in its own propstat.
        r = await dav(client, "PROPFIND", "/", "Depth: 0\r\n", PROP_ETAG)
        assert "<D:collection/>" in r.body.decode() and "404 Not Found" in r.body.decode()


async def test_depth_infinity_is_refused_unless_bounded(root: Path) -> None:
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "deep.txt").write_bytes(b"x")
    async with memory_connection(dav_config(root)) as (client, _, _):
        r = await dav(client, "PROPFIND", "/", "Depth: infinity\r\n")
        assert r.status == 403 and b"propfind-finite-depth" in r.body
        r = await dav(client, "PROPFIND", "/")  # no Depth: infinity (RFC 4918 §9.1)
        assert r.status == 403
    async with memory_connection(dav_config(root, webdav_depth_infinity=100)) as (client, _, _):
        r = await dav(client, "PROPFIND", "/", "Depth: infinity\r\n")
        assert r.status == 207 and "/a/b/deep.txt" in hrefs(r.body)
    for i in range(20):
        (root / "a" / f"n{i}").write_bytes(b"")
    async with memory_connection(dav_config(root, webdav_depth_infinity=5)) as (client, _, _):
        r = await dav(client, "PROPFIND", "/", "Depth: infinity\r\n")
        assert r.status == 207 and len(hrefs(r.body)) == 5  # the bound, and a whole 207
        assert r.body.endswith(b"</D:multistatus>\n")


async def test_propfind_of_10000_entries_is_streamed_whole(root: Path) -> None:
    big = root / "big"
    big.mkdir()
    for i in range(10_000):
        (big / f"f{i:05}").write_bytes(b"")
    async with memory_connection(dav_config(root)) as (client, _, _):
        with trio.fail_after(60):
            r = await dav(client, "PROPFIND", "/big/", "Depth: 1\r\n")
    assert r.status == 207 and r.header("transfer-encoding") == "chunked"
    assert r.header("content-length") is None  # produced while sent, never held whole
    got = hrefs(r.body)
    assert len(got) == 10_001 and got[0] == "/big/" and "/big/f09999" in got


async def test_hidden_names_and_the_props_store_are_never_shown(root: Path) -> None:
    async with memory_connection(dav_config(root)) as (client, _, _):
        prop = (
            b'<D:propertyupdate xmlns:D="DAV:" xmlns:Z="urn:z"><D:set><D:prop>'
            b"<Z:k>v</Z:k></D:prop></D:set></D:propertyupdate>"
        )
        assert (await dav(client, "PROPPATCH", "/hello.txt", "", prop)).status == 207
        assert (root / PROPS_DIR).is_dir()
        r = await dav(client, "PROPFIND", "/", "Depth: 1\r\n")
        assert r.status == 207
        assert not [h for h in hrefs(r.body) if "/." in h]  # no dotfile, no store
        assert (await client.get(f"/{PROPS_DIR}/")).status == 404
        assert (await dav(client, "PROPFIND", f"/{PROPS_DIR}/", "Depth: 0\r\n")).status == 404
        assert (await dav(client, "MKCOL", "/.secret")).status == 403
        src = "Destination: http://t/.hidden.txt\r\n"
        assert (await dav(client, "COPY", "/hello.txt", src)).status == 403
        # The dead property came back, in its namespace.
        ask = b'<D:propfind xmlns:D="DAV:"><D:prop><k xmlns="urn:z"/></D:prop></D:propfind>'
        r = await dav(client, "PROPFIND", "/hello.txt", "Depth: 0\r\n", ask)
        assert re.search(rb'<ns\d:k xmlns:ns\d="urn:z">v</ns\d:k>', r.body), r.body


async def test_destination_on_another_server_is_502(root: Path) -> None:
    async with memory_connection(dav_config(root)) as (client, _, _):
        for dest in ("http://elsewhere.example/x.txt", "ftp://t/x.txt", "https://t/x.txt"):
            r = await dav(client, "COPY", "/hello.txt", f"Destination: {dest}\r\n")
            assert r.status == 502, dest
        r = await dav(client, "COPY", "/hello.txt", "Destination: http://t/x.txt\r\n")
        assert (
            r.status == 201 and (root / "x.txt").read_bytes() == (root / "hello.txt").read_bytes()
        )
        r = await dav(client, "MOVE", "/x.txt", "Destination: /hello.txt\r\nOverwrite: F\r\n")
        assert r.status == 412 and (root / "x.txt").exists()


async def test_move_and_copy_honour_if_match(root: Path) -> None:
    async with memory_connection(dav_config(root)) as (client, _, _):
        etag = (await client.get("/hello.txt")).header("etag")
        r = await dav(client, "MOVE", "/hello.txt", 'Destination: /m.txt\r\nIf-Match: "nope"\r\n')
        assert r.status == 412 and (root / "hello.txt").exists()
        r = await dav(client, "COPY", "/hello.txt", f"Destination: /c.txt\r\nIf-Match: {etag}\r\n")
        assert r.status == 201
        r = await dav(client, "MOVE", "/hello.txt", f"Destination: /m.txt\r\nIf-Match: {etag}\r\n")
        assert r.status == 201 and not (root / "hello.txt").exists()


async def test_the_warm_cache_sees_moves_and_deletes(root: Path) -> None:
    (root / "d").mkdir()
    (root / "d" / "f.txt").write_bytes(b"one")
    (root / "g.txt").write_bytes(b"two")
    async with memory_connection(dav_config(root)) as (client, _, _):
        for _ in range(2):  # warm both
            assert (await client.get("/d/f.txt")).body == b"one"
            assert (await client.get("/g.txt")).body == b"two"
        assert (await dav(client, "MOVE", "/g.txt", "Destination: /d/f.txt\r\n")).status == 204
        assert (await client.get("/d/f.txt")).body == b"two"
        assert (await client.get("/g.txt")).status == 404
        assert (await dav(client, "MOVE", "/d", "Destination: /e\r\n")).status == 201
        assert (await client.get("/d/f.txt")).status == 404
        assert (await client.get("/e/f.txt")).body == b"two"
        assert (await dav(client, "DELETE", "/e/")).status == 204
        assert (await client.get("/e/f.txt")).status == 404


async def test_writable_rules_apply_to_dav_writes(root: Path) -> None:
    cfg = dav_config(root).evolve(writable=(("/up/**", ("put",)),)).validate()
    (root / "up").mkdir()
    async with memory_connection(cfg) as (client, _, _):
        assert (await dav(client, "MKCOL", "/up/new")).status == 201
        assert (await dav(client, "MKCOL", "/elsewhere")).status == 403
        assert (await dav(client, "DELETE", "/up/new")).status == 403  # put only
        r = await dav(client, "COPY", "/hello.txt", "Destination: /up/h.txt\r\n")
        assert r.status == 201
        r = await dav(client, "MOVE", "/up/h.txt", "Destination: /up/i.txt\r\n")
        assert r.status == 403  # a MOVE removes its source: "delete"


# ================================================================ HTTP/2


async def h2_dav(
    client: H2Client, method: str, path: str, headers: list[tuple[str, str]], body: bytes = b""
) -> Any:
    if not body:
        return await client.get(path, headers, method=method)
    sid = client.request(
        path, method, [*headers, ("content-length", str(len(body)))], end_stream=False
    )
    await send_body(client, sid, body)
    (r,) = await client.wait(sid)
    return r


async def test_h2_propfind_mkcol_move(root: Path) -> None:
    async with h2_memory(dav_config(root)) as (client, _, _):
        r = await h2_dav(client, "MKCOL", "/h2col", [])
        assert r.status == 201
        r = await h2_dav(client, "PROPFIND", "/", [("depth", "1")], PROP_ETAG)
        assert r.status == 207 and "/h2col/" in hrefs(bytes(r.body))
        r = await h2_dav(client, "MOVE", "/h2col", [("destination", "/h2moved")])
        assert r.status == 201 and (root / "h2moved").is_dir() and not (root / "h2col").exists()
        # An absolute Destination is compared with :authority.
        r = await h2_dav(client, "COPY", "/hello.txt", [("destination", "http://other/x")])
        assert r.status == 502


# ================================================================ start-up


def test_webdav_with_several_workers_is_refused(root: Path) -> None:
    with pytest.raises(ConfigError, match="--webdav cannot be used with --workers"):
        dav_config(root, workers=2)
    done = subprocess.run(
        [sys.executable, "-m", "serverio", "--webdav", "--workers", "2", "-d", str(root)],
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2
    lines = done.stderr.decode().strip().splitlines()
    assert lines == [
        "serverio: error: --webdav cannot be used with --workers > 1 (locks are per process)"
    ]


def test_webdav_implies_upload(root: Path) -> None:
    assert dav_config(root).uploads.upload


# ================================================================ tree operations


def tree(root: Path, n: int = 30) -> Path:
    src = root / "src"
    for i in range(n):
        d = src / f"d{i % 3}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}.bin").write_bytes(os.urandom(64 * 1024))
    return src


def placements(
    root: Path, src: str, dst: str
) -> tuple[RootOpener, writer.Placement, writer.Placement]:
    opener = RootOpener(str(root), follow_symlinks=False)
    return opener, open_target(opener, (src,), False), open_target(opener, (dst,), False)


def test_a_copy_failing_mid_file_leaves_no_temporary(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree(root)
    calls = {"n": 0}
    real = writer.SYS.write

    def failing(fd: int, data: bytes) -> int:
        calls["n"] += 1
        if calls["n"] == 7:
            raise OSError(errno.ENOSPC, "full")
        return real(fd, data)

    monkeypatch.setattr(writer.SYS, "write", failing)
    opener, src, dst = placements(root, "src", "dst")
    try:
        failed = copy_tree(src, dst, True, 1000, lambda: False)
    finally:
        src.close()
        dst.close()
        opener.close()
    assert len(failed) == 1 and failed[0][1] == errno.ENOSPC
    assert temps(root) == []
    # Every other file is whole.
    copied = [p for p in (root / "dst").rglob("*.bin")]
    assert len(copied) == 29
    for p in copied:
        assert p.read_bytes() == (root / "src" / p.relative_to(root / "dst")).read_bytes()


def test_a_stopped_tree_operation_ends_at_the_next_member(root: Path) -> None:
    tree(root)
    seen = {"n": 0}

    def stop() -> bool:
        seen["n"] += 1
        return seen["n"] > 5

    opener, src, dst = placements(root, "src", "dst")
    try:
        with pytest.raises(OSError) as got:
            copy_tree(src, dst, True, 1000, stop)
        assert got.value.errno == errno.ECANCELED
        with pytest.raises(OSError):
            remove_tree(src, 1000, lambda: True)
    finally:
        src.close()
        dst.close()
        opener.close()
    assert temps(root) == []
    for p in (root / "dst").rglob("*.bin"):  # what was copied is whole
        assert p.read_bytes() == (root / "src" / p.relative_to(root / "dst")).read_bytes()


@pytest.mark.parametrize("method", ["COPY", "MOVE", "DELETE"])
async def test_tree_methods_cancelled_at_every_checkpoint_leave_nothing(
    root: Path, method: str
) -> None:
    """The step's task cancelled at its k-th step, for every k until it
    completes: no temporary, no descriptor, no pool thread, and every
    copied file whole.  That an abandoned pool thread stops at its next
    member is checked by the count of files copied in
    tests/test_dav_members.py::test_an_abandoned_copy_stops_at_its_next_member."""
    cfg = dav_config(root)
    opener = RootOpener(str(root), follow_symlinks=False)
    files = FileCache(1 << 20, 65536)
    uploads = Uploads(cfg, Stats(), lambda: opener, files)
    svc = DavService(cfg, lambda: opener, files, uploads)
    dest = extra(destination="/dst") if method != "DELETE" else extra()
    req = RequestFacts(method.encode(), parse_target(method.encode(), b"/src"), extra=dest)
    fds = open_fd_count()
    k = 0
    while True:
        k += 1
        assert k < 400, "the step never completed"
        for old in ("src", "dst"):
            shutil.rmtree(root / old, ignore_errors=True)
        tree(root, 12)
        with trio.CancelScope() as scope:
            inst = CancelAt(trio.lowlevel.current_task(), scope, k)
            trio.lowlevel.add_instrument(inst)
            try:
                plan = await svc.write(req, NO_CONTENT, trio.current_time(), allow)
            finally:
                trio.lowlevel.remove_instrument(inst)
        assert await uploads.pool.wait_idle(trio.current_time() + 10) == 0
        assert temps(root) == [], k
        assert open_fd_count() == fds, k
        for p in (root / "dst").rglob("*.bin"):
            assert p.stat().st_size == 64 * 1024, k
        if not scope.cancelled_caught:
            assert isinstance(plan, Plan) and plan.status in (201, 204), plan
            break
    assert k > 3  # the placements, the checks and the operation: each a checkpoint
    opener.close()


async def test_an_if_field_is_evaluated_without_locks(root: Path) -> None:
    """Class 1 (NO_LOCKS): no state token ever matches, entity tags are
    compared with the current ETag (RFC 4918 §10.4)."""
    async with memory_connection(dav_config(root)) as (client, _, _):
        etag = (await client.get("/hello.txt")).header("etag")
        r = await dav(client, "PROPPATCH", "/hello.txt", "If: (<urn:uuid:nope>)\r\n", PATCH)
        assert r.status == 412
        r = await dav(client, "PROPPATCH", "/hello.txt", "If: (Not <urn:uuid:nope>)\r\n", PATCH)
        assert r.status == 207
        r = await dav(client, "PROPPATCH", "/hello.txt", f"If: ([{etag}])\r\n", PATCH)
        assert r.status == 207
        r = await dav(client, "PROPPATCH", "/hello.txt", 'If: (["other"])\r\n', PATCH)
        assert r.status == 412
        r = await dav(client, "MKCOL", "/m", "If: (<urn:uuid:nope>)\r\n")
        assert r.status == 412 and not (root / "m").exists()


PATCH = (
    b'<D:propertyupdate xmlns:D="DAV:"><D:set><D:prop><x xmlns="urn:t">1</x>'
    b"</D:prop></D:set></D:propertyupdate>"
)


def test_webdav_in_toml(root: Path, tmp_path: Path) -> None:
    toml = tmp_path / "serverio.toml"
    toml.write_text("webdav = true\nwebdav-depth-infinity = 50\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "serverio",
            "--config",
            str(toml),
            "-d",
            str(root),
            "--print-config",
        ],
        capture_output=True,
        timeout=30,
        check=False,
    )
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr
    assert "webdav = true" in out and "webdav-depth-infinity = 50" in out


class RecordingGuard:
    """A class 2 stand-in: records what the service asks, refuses on cue."""

    classes = b"1, 2"

    def __init__(self) -> None:
        self.checks: list[tuple[bytes, tuple[str, ...], bool]] = []
        self.moves: list[tuple[str, str | None]] = []
        self.commits: list[tuple[bytes, tuple[str, ...]]] = []
        self.refuse: str | None = None

    def check(
        self, req: RequestFacts, paths: Any, *, depth_infinity: bool, etag_of: Any, now: float
    ) -> Any:
        self.checks.append((req.method, tuple(paths), depth_infinity))
        return None if self.refuse is None else (423, self.refuse)

    def committing(self, req: RequestFacts, paths: Any, *, etag_of: Any, now: float) -> Any:
        self.commits.append((req.method, tuple(paths)))
        return (lambda: None) if self.refuse is None else (423, self.refuse)

    def discovery(self, path: str, now: float) -> Any:
        from serverio.dav.xml import DAV, Element, QName

        return (Element(QName(DAV, "activelock"), children=(path,)),)

    def supported(self) -> Any:
        return ()

    def moved(self, src: str, dst: str | None) -> None:
        self.moves.append((src, dst))

    async def lock(
        self,
        req: RequestFacts,
        body: bytes,
        path: str,
        exists: bool,
        now: float,
        create: Any,
        etag: Any = None,
    ) -> Plan:
        status = 200 if exists else await create()
        from serverio.dav.answers import status_plan

        return status_plan(status if status != 200 else 204, now)

    async def unlock(self, req: RequestFacts, path: str, now: float) -> Plan:
        from serverio.dav.answers import status_plan

        return status_plan(204, now)


async def test_the_service_asks_the_lock_guard_before_every_write(root: Path) -> None:
    cfg = dav_config(root)
    opener = RootOpener(str(root), follow_symlinks=False)
    files = FileCache(1 << 20, 65536)
    uploads = Uploads(cfg, Stats(), lambda: opener, files)
    guard = RecordingGuard()
    svc = DavService(cfg, lambda: opener, files, uploads, guard)

    async def run(method: str, path: str, **fields: str) -> Any:
        req = RequestFacts(
            method.encode(),
            parse_target(method.encode(), path.encode()),
            extra=extra(**fields),
        )
        got = await svc.write(req, NO_CONTENT, trio.current_time(), allow)
        return got if isinstance(got, Plan) else got[0]

    options = dict((await run("OPTIONS", "/")).headers)
    assert options[b"dav"] == b"1, 2" and options[b"allow"].endswith(b", LOCK, UNLOCK")
    assert (await run("MKCOL", "/c")).status == 201
    assert (await run("COPY", "/hello.txt", destination="/c/h.txt")).status == 201
    assert (await run("MOVE", "/c/h.txt", destination="/c/i.txt")).status == 201
    assert (await run("DELETE", "/c")).status == 204
    assert (await run("LOCK", "/new.txt")).status == 201 and (root / "new.txt").exists()
    assert guard.checks == [
        (b"MKCOL", ("c", ""), False),
        # A COPY does not change its source: the guard is not asked about
        # it (a locked file can be copied, litmus locks "copy").
        (b"COPY", ("c/h.txt", "c"), False),
        (b"MOVE", ("c/i.txt", "c", "c/h.txt", "c"), False),
        (b"DELETE", ("c", ""), True),
    ]
    assert guard.moves == [("c/h.txt", "c/i.txt"), ("c", None)]
    guard.refuse = "hello.txt"
    plan = await run("PUT", "/hello.txt")
    assert plan.status == 423 and isinstance(plan.body[0], bytes)
    assert b"<D:href>/hello.txt</D:href>" in plan.body[0]
    assert (await run("MOVE", "/hello.txt", destination="/x.txt")).status == 423
    assert (root / "hello.txt").exists() and not (root / "x.txt").exists()
    guard.refuse = None
    r = await svc.write(
        RequestFacts(b"PROPFIND", parse_target(b"PROPFIND", b"/hello.txt"), extra=extra(depth="0")),
        NO_CONTENT,
        trio.current_time(),
        allow,
    )
    assert isinstance(r, Plan) and isinstance(r.body[0], bytes)
    assert b"<D:lockdiscovery><D:activelock>hello.txt</D:activelock>" in r.body[0]
    opener.close()


async def test_hostile_xml_and_protected_properties(root: Path) -> None:
    bomb = (
        b'<?xml version="1.0"?><!DOCTYPE d [<!ENTITY a "aaaaaaaaaa">'
        b'<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>'
        b'<D:propfind xmlns:D="DAV:"><D:prop>&b;</D:prop></D:propfind>'
    )
    protected = (
        b'<D:propertyupdate xmlns:D="DAV:"><D:set><D:prop><D:getetag>"x"</D:getetag>'
        b'<z xmlns="urn:z">1</z></D:prop></D:set></D:propertyupdate>'
    )
    async with memory_connection(dav_config(root)) as (client, _, _):
        with trio.fail_after(5):
            r = await dav(client, "PROPFIND", "/", "Depth: 0\r\n", bomb)
        assert r.status == 400
        r = await dav(client, "PROPPATCH", "/hello.txt", "", protected)
        assert r.status == 207
        text = r.body.decode()
        assert "cannot-modify-protected-property" in text and "403 Forbidden" in text
        assert "424 Failed Dependency" in text  # all or nothing: z was not set
        ask = b'<D:propfind xmlns:D="DAV:"><D:prop><z xmlns="urn:z"/></D:prop></D:propfind>'
        r = await dav(client, "PROPFIND", "/hello.txt", "Depth: 0\r\n", ask)
        assert "404 Not Found" in r.body.decode()
        r = await dav(client, "MKCOL", "/withbody", "", b"<x/>")
        assert r.status == 415 and not (root / "withbody").exists()


async def test_a_405_lists_the_dav_methods(root: Path) -> None:
    async with memory_connection(dav_config(root)) as (client, _, _):
        r = await dav(client, "POST", "/hello.txt", "", b"x")
        assert r.status == 405
        assert r.header("allow") == (
            "OPTIONS, GET, HEAD, PUT, DELETE, PROPFIND, PROPPATCH, MKCOL, COPY, MOVE"
        )
