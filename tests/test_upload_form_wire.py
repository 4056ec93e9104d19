"""The upload form's POST end to end over HTTP/1.1 and HTTP/2 (memory
streams through the real transports): two files written and read back
byte-identical, the CSRF rule before any byte is read (no
``100 Continue``), and HTTP/2's flow-control window as the backpressure
of a form upload (a stuck disk: the client cannot send past a window).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import trio

from serverio.fs import writer
from serverio.upload.service import _WRITE_BATCH

from .conftest import memory_connection, open_fd_count, wait_until
from .h2client import h2_memory
from .test_body_seam import send_body
from .test_upload import request, temps, upload_config
from .test_upload_form import BOUNDARY, form_body

CTYPE = f"multipart/form-data; boundary={BOUNDARY}"


def h1_post(path: str, body: bytes, headers: str = "Origin: http://t\r\n") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: {CTYPE}\r\n"
        f"Content-Length: {len(body)}\r\n{headers}\r\n"
    ).encode() + body


async def test_h1_form_post_writes_two_files_read_back_identical(root: Path) -> None:
    a, b = os.urandom(300_000), os.urandom(1234)
    body = form_body(("file", "one.bin", a), ("file", "two.bin", b))
    async with memory_connection(upload_config(root)) as (client, srv, _):
        status, hs, _ = await request(client, h1_post("/sub/", body))
        assert status == 303 and hs["location"] == "/sub/"
        assert (await client.get("/sub/one.bin")).body == a
        assert (await client.get("/sub/two.bin")).body == b
        assert srv.stats.writes.files == 2 and srv.stats.writes.bytes == len(a) + len(b)
    assert temps(root) == []


async def test_h1_cross_site_form_is_403_before_a_byte_is_read(root: Path) -> None:
    body = form_body(("file", "x.txt", b"x" * 1000))
    async with memory_connection(upload_config(root)) as (client, _srv, _):
        head = h1_post("/", body, "Origin: http://evil.example\r\nExpect: 100-continue\r\n")
        await client.send_raw(head[: head.index(b"\r\n\r\n") + 4])  # the head alone
        r = await client.read_response()
        assert r.status == 403  # answered without a 100 Continue: the body was never asked for
        assert not (root / "x.txt").exists()
    async with memory_connection(upload_config(root)) as (client, _srv, _):
        fetch = "Sec-Fetch-Site: cross-site\r\n"
        status, _, _ = await request(client, h1_post("/", body, fetch))
        assert status == 403
        status, _, _ = await request(client, h1_post("/", body, ""))  # curl: no Origin
        assert status == 303 and (root / "x.txt").read_bytes() == b"x" * 1000


async def test_h2_put_and_form_post(root: Path) -> None:
    a, b = os.urandom(200_000), b"tiny"
    body = form_body(("file", "a.bin", a), ("file", "b.txt", b))
    headers = [("content-type", CTYPE), ("origin", "http://localhost")]
    async with h2_memory(upload_config(root)) as (client, srv, _):
        sid = client.request("/noindex/", "POST", headers, end_stream=False)
        await send_body(client, sid, body)
        (r,) = await client.wait(sid)
        assert r.status == 303 and r.headers["location"] == "/noindex/"
        assert bytes((await client.get("/noindex/a.bin")).body) == a
        assert bytes((await client.get("/noindex/b.txt")).body) == b
        evil = [("content-type", CTYPE), ("origin", "http://evil.example")]
        sid = client.request("/noindex/", "POST", evil, end_stream=False)
        await send_body(client, sid, form_body(("file", "c.txt", b"c")))
        (r,) = await client.wait(sid)
        assert r.status == 403 and not (root / "noindex" / "c.txt").exists()
        assert srv.stats.writes.files == 2
    assert temps(root) == []


@pytest.mark.parametrize("kind", ["form", "put"])
async def test_h2_the_window_is_the_backpressure_of_an_upload(
    root: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """The disk is stuck: the client can send a window's worth and then
    nothing more until the write returns; released, the upload completes."""
    fds = open_fd_count()
    entered, release = threading.Event(), threading.Event()
    real = writer.SYS.write

    def stuck(fd: int, data: bytes) -> int:
        entered.set()
        release.wait(10)
        return real(fd, data)

    monkeypatch.setattr(writer.SYS, "write", stuck)
    data = os.urandom(4 << 20)
    if kind == "form":
        body = form_body(("file", "w.bin", data))
        headers = [("content-type", CTYPE), ("origin", "http://localhost")]
        method, path, status = "POST", "/", 303
    else:
        body, method, path, status = data, "PUT", "/w.bin", 201
        headers = [("content-length", str(len(data)))]
    async with h2_memory(upload_config(root)) as (client, srv, _):
        sid = client.request(path, method, headers, end_stream=False)
        sent = 0
        deadline = trio.current_time() + 1.0  # as much as the windows let through in 1 s
        while sent < len(body) and trio.current_time() < deadline:
            room = min(
                client.conn.local_flow_control_window(sid),
                client.conn.max_outbound_frame_size,
                len(body) - sent,
            )
            if room:
                client.conn.send_data(sid, body[sent : sent + room])
                sent += room
                await client.flush()
                continue
            # Only the wait for the server is cut short: never a frame half sent.
            with trio.move_on_at(deadline):
                got = await client.stream.receive_some(65536)
                for ev in client.conn.receive_data(got):
                    client._event(ev)
                with trio.CancelScope(shield=True):
                    await client.flush()
        assert entered.is_set()
        # At most the initial stream window (65,535) plus what the server had
        # already consumed into the stuck write and its read buffer; a PUT
        # hands the pool batches of _WRITE_BATCH bytes (one hop per MiB), so
        # it takes in up to one batch before the write that blocks.
        allowed = 2 * 65_535 + (_WRITE_BATCH if kind == "put" else 0)
        # measured: form exactly 65,535 (the initial window), PUT 1,114,095
        assert sent <= allowed, sent
        assert sent < len(body) // 2  # the 4 MiB body is held back all the same
        release.set()
        rest = body[sent:]
        try:
            await send_body(client, sid, rest)
        except EOFError:
            # Said in full: the connection closed under the rest of the body.
            raise AssertionError(
                f"connection closed: goaway={client.goaway} stats={srv.stats.as_dict()}"
            ) from None
        (r,) = await client.wait(sid)
        assert r.status == status
        assert (root / "w.bin").read_bytes() == data
        up = srv.services.uploads
        assert up is not None
        await wait_until(lambda: up.pool.running == 0)
    assert temps(root) == [] and open_fd_count() == fds
