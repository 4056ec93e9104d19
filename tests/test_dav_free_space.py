"""``--min-free-space`` on every write path (issue 41 item 10): WebDAV's
COPY (the bytes of the file or the tree), PROPPATCH (the property file),
MKCOL and a LOCK of an unmapped URL (the reserve alone), and a PUT or a
form's file whose size is not declared (checked as the body grows, once
per MiB).  Each is refused with 507 before the reserve is eaten into, and
leaves nothing behind; a MOVE on one filesystem (a rename) writes nothing
and goes through.

The disk is faked at the write path's seam (:data:`serverio.fs.writer.SYS`):
``free`` reports a number that every ``write`` lowers.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from serverio.fs import writer
from serverio.fs.writer import Placement
from serverio.http.target import WRITE_TEMP_PREFIX

from .conftest import HTTPClient, make_config, memory_connection

MiB = 1 << 20
RESERVE = 8 * MiB
LOCKINFO = (
    b'<?xml version="1.0" encoding="utf-8"?><D:lockinfo xmlns:D="DAV:">'
    b"<D:lockscope><D:exclusive/></D:lockscope><D:locktype><D:write/></D:locktype>"
    b"</D:lockinfo>"
)

Call = Callable[[str, str, list[tuple[str, str]], bytes], Awaitable[tuple[int, bytes]]]


class Disk:
    """A filesystem with ``left`` bytes free, lowered by every write."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, left: int) -> None:
        self.left = left
        real = writer.SYS.write

        def write(fd: int, data: bytes) -> int:
            n = real(fd, data)
            self.left -= n
            return n

        monkeypatch.setattr(writer.SYS, "write", write)
        monkeypatch.setattr(writer.SYS, "free", self.free)

    def free(self, place: Placement) -> int:
        return self.left


@asynccontextmanager
async def calls(root: Path, **cfg: object) -> AsyncIterator[tuple[Call, HTTPClient]]:
    config = make_config(root, min_free_space=RESERVE, **cfg)
    async with memory_connection(config) as (client, _, _):

        async def call(
            method: str, path: str, headers: list[tuple[str, str]], body: bytes
        ) -> tuple[int, bytes]:
            fields = "".join(f"{k}: {v}\r\n" for k, v in [*headers, ("content-length", len(body))])
            head = f"{method} {path} HTTP/1.1\r\nHost: t\r\n{fields}\r\n"
            await client.send_raw(head.encode("latin-1") + body)
            r = await client.read_response()
            return r.status, r.body

        yield call, client


def _temps(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.startswith(WRITE_TEMP_PREFIX) and p.is_file()]


async def test_copy_checks_the_reserve_against_the_tree_it_writes(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (root / "tree").mkdir()
    for i in range(3):
        (root / "tree" / f"{i}.bin").write_bytes(os.urandom(MiB))
    (root / "big.bin").write_bytes(os.urandom(3 * MiB))
    disk = Disk(monkeypatch, RESERVE + 2 * MiB)  # room for 2 MiB
    with trio.fail_after(30):
        async with calls(root, webdav=True) as (call, _):
            for src in ("/tree/", "/big.bin"):
                status, _ = await call("COPY", src, [("destination", "/copy")], b"")
                assert status == 507, src
                assert not (root / "copy").exists()
            assert disk.left == RESERVE + 2 * MiB  # nothing was written
            # What fits is copied (the dead properties count too).
            status, _ = await call("COPY", "/hello.txt", [("destination", "/copy.txt")], b"")
            assert status == 201 and (root / "copy.txt").read_bytes() == b"hello world\n"
            # A MOVE on the same filesystem is a rename: nothing to write.
            disk.left = RESERVE - 1
            status, _ = await call("MOVE", "/tree/", [("destination", "/moved/")], b"")
            assert status == 201 and len(list((root / "moved").iterdir())) == 3
    assert _temps(root) == []


async def test_proppatch_keeps_the_reserve(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    disk = Disk(monkeypatch, RESERVE + 100_000)
    value = b"v" * 200_000
    patch = (
        b'<?xml version="1.0"?><D:propertyupdate xmlns:D="DAV:" xmlns:Z="urn:z">'
        b"<D:set><D:prop><Z:note>%s</Z:note></D:prop></D:set></D:propertyupdate>"
    )
    with trio.fail_after(30):
        async with calls(root, webdav=True) as (call, _):
            assert (await call("PROPPATCH", "/hello.txt", [], patch % value))[0] == 507
            assert disk.left == RESERVE + 100_000  # nothing was written
            status, body = await call("PROPPATCH", "/hello.txt", [], patch % b"short")
            assert status == 207 and b"200 OK" in body
    assert _temps(root) == []


async def test_mkcol_and_lock_keep_the_reserve(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    disk = Disk(monkeypatch, RESERVE - 1)
    with trio.fail_after(30):
        async with calls(root, webdav=True) as (call, _):
            # Below the reserve: nothing new is made.
            assert (await call("MKCOL", "/newdir", [], b""))[0] == 507
            assert not (root / "newdir").exists()
            assert (await call("LOCK", "/new.txt", [], LOCKINFO))[0] == 507
            assert not (root / "new.txt").exists()
            # ... and no lock was kept: with room, the same LOCK is granted.
            disk.left = RESERVE + MiB
            assert (await call("LOCK", "/new.txt", [], LOCKINFO))[0] == 201
            assert (await call("MKCOL", "/newdir", [], b""))[0] == 201
    assert _temps(root) == []


async def _chunked_put(client: HTTPClient, path: str, parts: int) -> int:
    head = f"PUT {path} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
    await client.send_raw(head.encode())
    chunk = os.urandom(256 * 1024)
    for _ in range(parts):
        await client.send_raw(b"%x\r\n%s\r\n" % (len(chunk), chunk))
    await client.send_raw(b"0\r\n\r\n")
    return (await client.read_response()).status


@pytest.mark.parametrize("webdav", [False, True])
async def test_a_chunked_put_is_checked_as_it_grows(
    root: Path, monkeypatch: pytest.MonkeyPatch, webdav: bool
) -> None:
    disk = Disk(monkeypatch, RESERVE + 2 * MiB)
    with trio.fail_after(30):
        async with calls(root, upload=True, webdav=webdav) as (_, client):
            status = await _chunked_put(client, "/chunked.bin", 12)  # 3 MiB
        assert status == 507 and not (root / "chunked.bin").exists()
        assert disk.left >= RESERVE
        disk.left = RESERVE + 2 * MiB  # the refused temporary was removed
        async with calls(root, upload=True, webdav=webdav) as (_, client):
            assert await _chunked_put(client, "/chunked.bin", 4) == 201  # 1 MiB fits
    assert (root / "chunked.bin").stat().st_size == MiB
    assert _temps(root) == []


async def test_a_form_file_is_checked_as_it_grows(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = Disk(monkeypatch, RESERVE + 2 * MiB)
    data = os.urandom(3 * MiB)
    body = (
        b"--XyZ\r\n"
        b'Content-Disposition: form-data; name="file"; filename="up.bin"\r\n'
        b"Content-Type: application/octet-stream\r\n\r\n" + data + b"\r\n--XyZ--\r\n"
    )
    with trio.fail_after(30):
        async with calls(root, upload=True) as (call, _):
            status, _ = await call(
                "POST",
                "/noindex/",
                [("content-type", "multipart/form-data; boundary=XyZ"), ("origin", "http://t")],
                body,
            )
    assert status == 507 and not (root / "noindex" / "up.bin").exists()
    assert disk.left >= RESERVE
    assert _temps(root) == []
