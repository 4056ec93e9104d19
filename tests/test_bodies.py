"""Response bodies: sendfile and buffered paths, truncation and replacement
during a send, multipart ranges, resets, and what preparation reads."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from serverio import FileSpan, Plan, RequestFacts, parse_target, prepare
from serverio.fs.opener import RootOpener
from testkit import simulation

from .conftest import HTTPClient, connect, make_config, running_server, wait_until

SIZE = 8 * 1024 * 1024


def original(root: Path) -> bytes:
    data = os.urandom(SIZE)
    (root / "video.bin").write_bytes(data)
    return data


async def read_head_then_pause(port: int, request: bytes) -> tuple[HTTPClient, int]:
    """Send ``request`` with a small receive buffer, read the head, return the
    client and the announced Content-Length (the body is mostly not read)."""
    sock = trio.socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
    await sock.connect(("127.0.0.1", port))
    client = HTTPClient(trio.SocketStream(sock))
    await client.send_raw(request)
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += await client.stream.receive_some(1)
    head = buf.decode("latin-1")
    length = int(
        next(
            ln.split(":")[1] for ln in head.split("\r\n") if ln.lower().startswith("content-length")
        )
    )
    return client, length


async def drain(client: HTTPClient, limit: int) -> bytes:
    out = bytearray()
    with trio.fail_after(30):
        while len(out) < limit:
            data = await client.stream.receive_some(1 << 20)
            if not data:
                break
            out += data
    return bytes(out)


@pytest.mark.parametrize("sendfile", [True, False], ids=["sendfile", "buffered"])
async def test_replaced_during_send_serves_original_inode(root: Path, sendfile: bool) -> None:
    data = original(root)
    async with running_server(make_config(root, sendfile=sendfile)) as (srv, port):
        client, length = await read_head_then_pause(
            port, b"GET /video.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
        )
        await wait_until(lambda: any(c.in_flight for c in srv.connections))
        # Replace the file by rename while the body is in flight.
        (root / "video.new").write_bytes(b"N" * SIZE)
        if simulation.REAL_WINDOWS:
            # Windows will not rename onto an open file (MoveFileExW; Wine
            # too): a deploy renames the served one aside first, which the
            # opener's FILE_SHARE_DELETE allows.
            os.replace(root / "video.bin", root / "video.old")
        os.replace(root / "video.new", root / "video.bin")
        body = await drain(client, length)
        await client.stream.aclose()
    assert length == SIZE and body == data  # the bytes of the inode we opened
    assert srv.stats.responses.truncated == 0


@pytest.mark.parametrize("sendfile", [True, False], ids=["sendfile", "buffered"])
@pytest.mark.parametrize("ranged", [False, True], ids=["full", "range"])
async def test_truncated_during_send_aborts(root: Path, sendfile: bool, ranged: bool) -> None:
    data = original(root)
    rng = b"Range: bytes=1000-8000000\r\n" if ranged else b""
    async with running_server(make_config(root, sendfile=sendfile)) as (srv, port):
        client, length = await read_head_then_pause(
            port, b"GET /video.bin HTTP/1.1\r\nHost: t\r\n" + rng + b"\r\n"
        )
        await wait_until(lambda: any(c.in_flight for c in srv.connections))
        os.truncate(root / "video.bin", 1024 * 1024)
        body = await drain(client, length)
        await client.stream.aclose()
        await wait_until(lambda: srv.stats.responses.truncated == 1)
    # Never padded, never complete: fewer bytes than Content-Length, and the
    # bytes that did arrive are the file's.
    assert len(body) < length
    start = 1000 if ranged else 0
    assert body == data[start : start + len(body)]
    assert srv.stats.responses.completed == 0


async def test_multipart_ranges_use_sendfile_per_part(root: Path) -> None:
    data = original(root)
    async with running_server(make_config(root, small_file_size=1024)) as (srv, port):
        client = await connect(port)
        r = await client.get("/video.bin", "Range: bytes=0-99999,5000000-5099999,-10\r\n")
        await client.stream.aclose()
    assert r.status == 206
    ctype = r.header("content-type") or ""
    boundary = ctype.split("boundary=", 1)[1].encode()
    parts = r.body.split(b"--" + boundary)
    assert parts[0] == b"" and parts[-1] == b"--\r\n"
    got = []
    for part in parts[1:-1]:
        head, _, payload = part.partition(b"\r\n\r\n")
        assert payload.endswith(b"\r\n")
        got.append((head, payload[:-2]))
    assert [g[1] for g in got] == [data[:100000], data[5000000:5100000], data[-10:]]
    assert b"content-range: bytes 5000000-5099999/8388608" in got[1][0].lower()
    if simulation.WINDOWS_SHAPED:  # no os.sendfile: the portable buffered path
        sent = srv.stats.responses
        assert (sent.sendfile_responses, sent.buffered_responses) == (0, 1)
    else:
        assert srv.stats.responses.sendfile_responses == 1


async def test_overlapping_ranges_coalesced_and_guarded(root: Path) -> None:
    original(root)
    async with running_server(make_config(root, max_ranges=3)) as (_, port):
        client = await connect(port)
        merged = await client.get("/video.bin", "Range: bytes=0-9,5-19,20-29\r\n")
        too_many = await client.get("/video.bin", "Range: bytes=0-0,2-2,4-4,6-6\r\n")
        await client.stream.aclose()
    assert merged.status == 206 and merged.header("content-range") == f"bytes 0-29/{SIZE}"
    assert too_many.status == 200 and len(too_many.body) == SIZE


async def test_reset_mid_transfer_is_counted(root: Path) -> None:
    original(root)
    async with running_server(make_config(root)) as (srv, port):
        client, _ = await read_head_then_pause(port, b"GET /video.bin HTTP/1.1\r\nHost: t\r\n\r\n")
        await wait_until(lambda: any(c.in_flight for c in srv.connections))
        assert isinstance(client.stream, trio.SocketStream)
        client.stream.socket.setsockopt(
            socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
        )
        await client.stream.aclose()  # RST
        await wait_until(lambda: srv.stats.conns.resets == 1)
    assert srv.stats.responses.completed == 0


def test_head_304_416_read_nothing(root: Path) -> None:
    """Preparation reads body bytes only when the plan sends them."""
    cfg = make_config(root)
    opener = RootOpener(cfg.root, follow_symlinks=False)

    def run(method: bytes, **headers: str) -> Plan:
        target = parse_target(method, b"/data.bin")
        req = RequestFacts(method=method, target=target, **headers)  # type: ignore[arg-type]
        p = prepare(req, cfg, opener, time.time())
        assert p.fd == -1  # nothing left open for the emitter
        return p.plan

    try:
        get = run(b"GET")
        tag = dict(get.headers)[b"etag"].decode()
        head = run(b"HEAD")
        not_modified = run(b"GET", if_none_match=tag)
        unsatisfiable = run(b"GET", range="bytes=5000-")
    finally:
        opener.close()
    # GET of a small file: the bytes were read during preparation.
    assert [len(p) for p in get.body] == [1024] and isinstance(get.body[0], bytes)
    # HEAD: the body is still a file span, never read; 304/416: no file body.
    assert [type(p) for p in head.body] == [FileSpan] and not head.send_body
    assert not_modified.status == 304 and not_modified.body == ()
    assert unsatisfiable.status == 416
    assert not any(isinstance(p, FileSpan) for p in unsatisfiable.body)


@pytest.mark.slow
def test_non_reading_clients_bounded_memory(root: Path) -> None:
    """200 clients ask for 8 MiB and never read: RSS stays bounded, and the
    write deadline releases every one of them."""
    if simulation.measuring_proc() is None:
        pytest.skip("needs a procfs to read the server's peak RSS (VmHWM)")
    original(root)
    proc = subprocess.Popen(
        # -v: the exit counters, read below.
        [
            sys.executable,
            "-m",
            "serverio",
            "0",
            "-d",
            str(root),
            "-q",
            "-v",
            "--write-timeout",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    socks: list[socket.socket] = []
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline().rsplit(":", 1)[1].strip("/\n"))
        for _ in range(200):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(("127.0.0.1", port))
            s.sendall(b"GET /video.bin HTTP/1.1\r\nHost: t\r\n\r\n")
            socks.append(s)
        # Every connection is released by the write deadline: the server
        # closes it, so each client eventually sees EOF or a reset after the
        # bytes the kernel buffered.
        deadline = time.monotonic() + 60
        released = 0
        for s in socks:
            s.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                while s.recv(1 << 20):
                    pass
            except ConnectionResetError:
                pass
            released += 1
        hwm_kib = simulation.status_kib(proc.pid, "VmHWM")
    finally:
        for s in socks:
            s.close()
        proc.terminate()
        _, err = proc.communicate(timeout=20)
    assert released == 200
    assert "timeouts_write=" in err
    timeouts = int(err.split("timeouts_write=")[1].split()[0])
    completed = int(err.split("completed=")[1].split()[0])
    # Reading after the deadline may let a few finish; none may hang.
    assert timeouts + completed == 200 and timeouts > 0
    assert hwm_kib < 100 * 1024, f"peak RSS {hwm_kib} KiB"


@pytest.mark.parametrize(
    "kw",
    [{}, {"sendfile": False}, {"small_file_size": 16 * 1024 * 1024}],
    ids=["sendfile", "buffered", "small-file-path"],
)
async def test_server_survives_client_gone_mid_body(root: Path, kw: dict[str, object]) -> None:
    """Broken pipe or reset mid-body, on every write path (sendfile, buffered
    pread+send, one big head+body write): the connection ends, counted, and
    the server serves on."""
    original(root)
    srv_ok = True
    async with running_server(make_config(root, **kw)) as (srv, port):
        for _ in range(5):
            client, _ = await read_head_then_pause(
                port, b"GET /video.bin HTTP/1.1\r\nHost: t\r\n\r\n"
            )
            await client.stream.aclose()
        await wait_until(lambda: not srv.connections)
        c = await connect(port)
        srv_ok = (await c.get("/hello.txt")).status == 200
        await c.stream.aclose()
    # Each vanished client is counted as a reset; only the last request completed.
    assert srv_ok and (srv.stats.conns.resets, srv.stats.responses.completed) == (5, 1)
