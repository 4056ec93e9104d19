"""Transport robustness over real loopback sockets.

* memory: clients that stop reading pin no private copy of a shared body;
* half-close: a client that sends its request and then ``shutdown(SHUT_WR)``
  still gets the whole response;
* descriptors: under a low RLIMIT_NOFILE, clients past the limit still get
  a 503 at once, and the accept-failure log line is rate limited;
* admin: idle connections (public or admin) do not lock out ``/healthz``.

Every socket is 127.0.0.1 with port 0; every wait is bounded.
"""

from __future__ import annotations

import base64
import gzip
import os
import random
import re
import select
import socket
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import trio
import trio.testing

from serverio import Config
from serverio.app.admin import AdminBudget, open_admin_listener, serve_admin, text
from serverio.app.admin import _one as _admin_one
from serverio.ops.fdlimit import per_connection
from serverio.ops.run import make_admin_handler
from testkit import reliability, simulation
from testkit.reliability import HOST, MiB, ServerProcess

from .conftest import (
    HTTPClient,
    Response,
    make_config,
    memory_connection,
    running_server,
    wait_until,
)

resource: ModuleType | None
try:
    import resource
except ImportError:  # Windows
    resource = None

KiB = 1024


def _request(target: str, headers: str = "") -> bytes:
    return f"GET {target} HTTP/1.1\r\nHost: t\r\n{headers}\r\n".encode()


def _read_response(sock: socket.socket, limit: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    """One whole response (Content-Length framed) from a blocking socket."""
    sock.settimeout(limit)
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = sock.recv(65536)
        if not data:
            raise EOFError(f"closed before the head ended: {buf[:200]!r}")
        buf += data
    head, _, buf = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    n = int(headers.get("content-length", "0"))
    while len(buf) < n:
        data = sock.recv(1 << 20)
        if not data:
            raise EOFError(f"closed after {len(buf)} of {n} body bytes")
        buf += data
    return status, headers, buf[:n]


def _connect(port: int, *, rcvbuf: int = 0) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        # Before connect(), so the advertised window is small from the start.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(10)
    sock.connect((HOST, port))
    return sock


def _compressible_text(size: int, seed: int) -> bytes:
    """Text that gzip shrinks to about 3/4 (base64 of random bytes, in lines)."""
    raw = base64.b64encode(random.Random(seed).randbytes(size * 3 // 4))
    return b"\n".join(raw[i : i + 76] for i in range(0, len(raw), 76))


def stalled_readers_rss(srv: ServerProcess, conns: int, request: bytes) -> tuple[int, int]:
    """The server's RSS before and after ``conns`` clients each send
    ``request``, read 100 bytes of a 200 response and stall (a 4 KiB
    receive buffer), so that every writer is blocked on a full socket."""
    time.sleep(0.3)
    before = srv.rss()[0]
    stalled = []
    try:
        for _ in range(conns):
            sock = _connect(srv.port, rcvbuf=4096)
            stalled.append(sock)
            sock.sendall(request)
            got = sock.recv(100)
            assert got.startswith(b"HTTP/1.1 200"), got
        time.sleep(0.5)  # every writer is now blocked on its full socket
        return before, srv.rss()[0]
    finally:
        for sock in stalled:
            sock.close()


# ------------------------------------------------------------------ memory


@pytest.mark.skipif(simulation.measuring_proc() is None, reason="reads VmRSS through a procfs")
def test_stalled_readers_of_a_cached_gzip_body_pin_no_private_copy(tmp_path: Path) -> None:
    """N clients ask for a 4 MB text from the compression cache, read 100
    bytes and stall: the server's RSS grows by less than 64 KiB each (plus a
    fixed allowance), not by a copy of the ~3 MB coded body each."""
    www = tmp_path / "www"
    www.mkdir()
    text = _compressible_text(4 * MiB, seed=7)
    (www / "big.txt").write_bytes(text)
    conns = 30
    gz = "Accept-Encoding: gzip\r\n"
    with ServerProcess(www, "--write-timeout", "60", probed=False) as srv:
        # Warm the compression cache with one full read.
        with _connect(srv.port) as sock:
            sock.sendall(_request("/big.txt", gz + "Connection: close\r\n"))
            status, headers, body = _read_response(sock)
        assert status == 200 and headers.get("content-encoding") == "gzip"
        assert gzip.decompress(body) == text
        coded = len(body)
        before, after = stalled_readers_rss(srv, conns, _request("/big.txt", gz))
    grown = after - before
    per_conn = grown / conns
    print(
        f"\nstalled readers: {conns}, coded body {coded / MiB:.2f} MiB, "
        f"RSS {before / MiB:.1f} -> {after / MiB:.1f} MiB ({per_conn / KiB:.0f} KiB each)"
    )
    assert grown < conns * 64 * KiB + 8 * MiB, (
        f"RSS grew {grown / MiB:.1f} MiB for {conns} stalled readers "
        f"({per_conn / KiB:.0f} KiB each; coded body {coded / KiB:.0f} KiB)"
    )


# ------------------------------------------------------------------ half-close


async def _half_closed_exchange(port: int, request: bytes) -> tuple[Response, bool]:
    """Send ``request``, then shutdown(SHUT_WR) (as ``nc -N`` does); read the
    response and whether the server closed after it."""
    stream = await trio.open_tcp_stream(HOST, port)
    try:
        await stream.send_all(request)
        await stream.send_eof()
        client = HTTPClient(stream)
        with trio.fail_after(10):
            response = await client.read_response(head=request.startswith(b"HEAD"))
            closed = await client.at_eof()
        return response, closed
    finally:
        await stream.aclose()


HALF_CLOSE_TEXT = b"half-closed clients still get their answer; " * 200
HALF_CLOSE_CASES: dict[str, tuple[str, str, Callable[[Response], bool]]] = {
    # name: (target, extra request fields, check of the response)
    "listing": ("/noindex/", "", lambda r: b"a.txt" in r.body),
    "plain file": ("/big.bin", "", lambda r: len(r.body) == 300_000),
    "gzip miss": (
        "/text.txt",
        "Accept-Encoding: gzip\r\n",
        lambda r: (
            r.header("content-encoding") == "gzip" and gzip.decompress(r.body) == HALF_CLOSE_TEXT
        ),
    ),
    "digest miss": (
        "/hello.txt",
        "Want-Repr-Digest: sha-256=9\r\n",
        lambda r: (
            r.body == b"hello world\n" and (r.header("repr-digest") or "").startswith("sha-256=")
        ),
    ),
}


@pytest.mark.parametrize("fs_workers", [0, 2], ids=["inline", "pooled"])
@pytest.mark.parametrize("case", list(HALF_CLOSE_CASES))
async def test_half_closed_client_gets_whole_response_then_close(
    root: Path, case: str, fs_workers: int
) -> None:
    """EOF on the read side is not a disconnect: the response is complete
    (Connection: close) and the server closes after it; nothing is counted
    as cancelled."""
    (root / "text.txt").write_bytes(HALF_CLOSE_TEXT)
    target, fields, ok = HALF_CLOSE_CASES[case]
    cfg = make_config(root, fs_workers=fs_workers, digest=True)
    async with running_server(cfg) as (srv, port):
        response, closed = await _half_closed_exchange(port, _request(target, fields))
        assert response.status == 200
        assert ok(response), (response.headers, response.body[:200])
        assert response.header("connection") == "close"
        assert closed
        assert srv.stats.conns.cancelled == 0


async def test_half_closed_client_gets_every_pipelined_response(root: Path) -> None:
    """Two pipelined requests, then EOF: both are answered, the last with
    Connection: close."""
    async with running_server(make_config(root, fs_workers=2)) as (srv, port):
        stream = await trio.open_tcp_stream(HOST, port)
        try:
            await stream.send_all(_request("/noindex/") + _request("/hello.txt"))
            await stream.send_eof()
            client = HTTPClient(stream)
            with trio.fail_after(10):
                first = await client.read_response()
                second = await client.read_response()
                closed = await client.at_eof()
        finally:
            await stream.aclose()
    assert first.status == 200 and b"a.txt" in first.body
    assert second.status == 200 and second.body == b"hello world\n"
    assert second.header("connection") == "close" and closed
    assert srv.stats.conns.cancelled == 0


# ------------------------------------------------------------------ descriptors


def _open_idle(port: int, count: int) -> list[socket.socket]:
    """``count`` connections that send nothing (each holds a server fd)."""
    return [_connect(port) for _ in range(count)]


def _answered(socks: list[socket.socket], limit: float) -> dict[socket.socket, bytes]:
    """What each socket received within ``limit`` seconds (until EOF), for
    the sockets that received anything."""
    got: dict[socket.socket, bytes] = {}
    pending = set(socks)
    deadline = time.monotonic() + limit
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select(list(pending), [], [], left)
        for sock in ready:
            try:
                data = sock.recv(65536)
            except OSError:
                data = b""
            if data:
                got[sock] = got.get(sock, b"") + data
            else:
                pending.discard(sock)  # EOF (or reset)
                got.setdefault(sock, b"")
    return got


def _low_fd_limit(n: int) -> Callable[[], None]:
    def preexec() -> None:
        assert resource is not None
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))

    return preexec


@pytest.mark.skipif(resource is None, reason="RLIMIT_NOFILE is POSIX only")
def test_low_fd_limit_lowers_the_connection_limit_and_the_rest_get_503(
    tmp_path: Path,
) -> None:
    """Hard and soft limit 64 with --max-connections 200: the server says it
    lowered the limit, admits what fits, and every client past it gets its
    503 at once instead of waiting in the backlog."""
    www = tmp_path / "www"
    www.mkdir()
    (www / "hello.txt").write_text("hello\n")
    clients = 80
    with ServerProcess(
        www, "--max-connections", "200", probed=False, preexec=_low_fd_limit(64)
    ) as srv:
        note = [ln for ln in srv.stderr().splitlines() if "--max-connections lowered" in ln]
        assert len(note) == 1, srv.stderr()
        admitted = int(re.search(r"lowered from 200 to (\d+)", note[0]).group(1))  # type: ignore[union-attr]
        assert 1 <= admitted < 64
        socks = _open_idle(srv.port, clients)
        try:
            # Well inside the head timeout (10 s): an answer here is the
            # 503, not a timeout; the admitted connections stay silent.
            got = _answered(socks, limit=1.5)
            statuses = [data[:12] for data in got.values()]
        finally:
            for sock in socks:
                sock.close()
        print(f"\nfd limit 64: admitted {admitted}, answered {len(got)} of {clients - admitted}")
        assert len(got) == clients - admitted, (len(got), admitted, srv.stderr())
        assert all(s == b"HTTP/1.1 503" for s in statuses), statuses
        # Service goes on once the idle clients' closes have been noticed.
        deadline = time.monotonic() + 5
        status = 0
        while status != 200 and time.monotonic() < deadline:
            with _connect(srv.port) as sock:
                sock.sendall(_request("/hello.txt", "Connection: close\r\n"))
                status = _read_response(sock)[0]
            if status != 200:
                time.sleep(0.05)
        assert status == 200


@pytest.mark.skipif(
    resource is None or not hasattr(resource, "prlimit") or simulation.measuring_proc() is None,
    reason="needs prlimit(2) (Linux) and a procfs to count the server's descriptors",
)
def test_out_of_descriptors_new_clients_still_get_503_and_the_log_is_rate_limited(
    tmp_path: Path,
) -> None:
    """The process runs out of descriptors below --max-connections (its
    limit lowered from outside, as other fd use would): clients keep
    arriving for two seconds and each gets a 503 at once from the spare
    descriptor; "accept failed" is logged about once a second, not ten
    times."""
    assert resource is not None
    www = tmp_path / "www"
    www.mkdir()
    with ServerProcess(www, "--max-connections", "500", probed=False) as srv:
        in_use = len(os.listdir(f"{simulation.measuring_proc()}/{srv.pid}/fd"))
        _, hard = resource.prlimit(srv.pid, resource.RLIMIT_NOFILE)
        resource.prlimit(srv.pid, resource.RLIMIT_NOFILE, (in_use + 4, hard))
        idle = _open_idle(srv.port, 4)  # the last free descriptors
        late: list[socket.socket] = []
        try:
            time.sleep(0.2)
            t0 = time.monotonic()
            waits = []
            while time.monotonic() - t0 < 2.0:
                sock = _connect(srv.port)
                late.append(sock)
                c0 = time.monotonic()
                got = _answered([sock], limit=2.0)
                waits.append(time.monotonic() - c0)
                assert got.get(sock, b"")[:12] == b"HTTP/1.1 503", (len(late), srv.stderr())
                time.sleep(0.05)
            elapsed = time.monotonic() - t0
        finally:
            for sock in idle + late:
                sock.close()
        time.sleep(0.2)
        lines = [ln for ln in srv.stderr().splitlines() if "accept failed" in ln]
    print(
        f"\nout of fds: {len(late)} late clients all 503, slowest {max(waits) * 1000:.0f} ms; "
        f"{len(lines)} 'accept failed' lines in {elapsed:.1f} s"
    )
    assert max(waits) < 1.0
    assert 1 <= len(lines) <= elapsed / 1.0 + 2, lines


@pytest.mark.skipif(resource is None, reason="RLIMIT_NOFILE is POSIX only")
@pytest.mark.parametrize("http2", [False, True])
def test_start_up_raises_the_soft_fd_limit_toward_the_hard_limit(http2: bool) -> None:
    """Soft 256 under a hard limit of 4096: HTTP/1.1 only, raised to two
    descriptors per connection plus the reserve, nothing lowered or said.
    With HTTP/2 a connection may hold 1 + --h2-max-open-files (4): that
    does not fit 4096 for 1024 connections, so the soft limit goes to the
    hard one and --h2-max-open-files is lowered to what fits (2), once."""
    assert resource is not None
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 4096:
        pytest.skip("hard open-file limit below 4096")
    code = (
        "import resource, sys\n"
        "from serverio import Config\n"
        "from serverio.ops.fdlimit import fd_reserve, fit_fd_limit, per_connection\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, 4096))\n"
        f"cfg = Config.of(directory='.', max_connections=1024, http2={http2}).validate()\n"
        "out, note = fit_fd_limit(cfg)\n"
        "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0], per_connection(cfg),"
        " fd_reserve(cfg), out.conn.max_connections, out.h2.h2_max_open_files)\n"
        "print(note)\n"
    )
    lines = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True
    ).stdout.splitlines()
    soft, per, reserve, conns, files = map(int, lines[0].split())
    assert conns == 1024
    if not http2:
        assert (per, soft, files, lines[1]) == (2, 2 * 1024 + reserve, 4, "None")
    else:
        assert (per, soft) == (5, 4096)
        assert files == (4096 - reserve) // 1024 - 1 == 2
        assert lines[1].startswith("serverio: note: --h2-max-open-files lowered from 4 to 2")


def test_per_connection_descriptors_follow_the_protocols() -> None:
    assert per_connection(Config.of(http2=False)) == 2
    assert per_connection(Config.of(h2_max_open_files=7)) == 8
    # HTTP/2 only on one listener still counts.
    assert per_connection(Config.of(http2=False, listen=("127.0.0.1:0/h2",))) == 5


# ------------------------------------------------------------------ admin


async def _ok_handler(path: str) -> tuple[int, str, bytes]:
    return text(200, "ok\n")


async def _admin_get(port: int, target: str) -> reliability.Reply:
    return await reliability.get(port, target, limit=5)


async def test_healthz_answers_while_public_connections_are_all_idle(root: Path) -> None:
    """--max-connections filled with idle clients (the next public client
    gets 503): the admin endpoint has its own budget and answers 200."""
    async with running_server(make_config(root, max_connections=8)) as (srv, port):
        listener = await open_admin_listener("127.0.0.1:0")
        admin_port = listener.socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_admin, listener, make_admin_handler(srv, lambda: False))
            idle = [await trio.open_tcp_stream(HOST, port) for _ in range(8)]
            try:
                await wait_until(lambda: len(srv.connections) == 8)
                assert (await reliability.get(port, "/hello.txt", limit=5)).status == 503
                health = await _admin_get(admin_port, "/healthz")
                assert health.status == 200 and health.body == b"ok\n"
            finally:
                for s in idle:
                    await s.aclose()
            nursery.cancel_scope.cancel()


async def test_idle_admin_connections_do_not_lock_out_healthz_or_public_traffic(
    root: Path,
) -> None:
    """64 idle admin connections (four times the admin budget): the oldest
    idle ones are closed to make room, /healthz answers 200 at once, and
    public traffic neither sees nor pays for them."""
    async with running_server(make_config(root, max_connections=8)) as (srv, port):
        listener = await open_admin_listener("127.0.0.1:0")
        admin_port = listener.socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_admin, listener, make_admin_handler(srv, lambda: False))
            idle = [await trio.open_tcp_stream(HOST, admin_port) for _ in range(64)]
            try:
                with trio.fail_after(2):
                    health = await _admin_get(admin_port, "/healthz")
                assert health.status == 200 and health.body == b"ok\n"
                assert len(srv.connections) == 0  # admin connections are not public ones
                public = await reliability.get(port, "/hello.txt", limit=5)
                assert public.status == 200 and public.body == b"hello world\n"
                # The evicted idle connections were closed, not left hanging.
                closed = 0
                for s in idle:
                    with trio.move_on_after(0.05):
                        closed += (await s.receive_some(100)) == b""
                assert closed >= 64 - 16
            finally:
                for s in idle:
                    await s.aclose()
            nursery.cancel_scope.cancel()


async def test_admin_connection_without_a_head_closes_at_the_head_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An admin connection that sends nothing is closed after the short head
    deadline (2 s), not the whole exchange's 5 s, and gives its slot back."""
    budget = AdminBudget(4)
    client, server_end = trio.testing.memory_stream_pair()
    slot = budget.admit()
    assert slot is not None and budget.active == 1
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_admin_one, server_end, _ok_handler, budget, slot)
        assert await client.receive_some(100) == b""
    assert trio.current_time() - start == pytest.approx(2.0)
    assert budget.active == 0 and not budget.idle


async def test_admin_budget_full_of_busy_connections_answers_503() -> None:
    """Every slot is answering (none idle to evict): a newcomer gets None
    (the listener answers it 503 at once); an idle slot is evicted instead."""
    budget = AdminBudget(2)
    first, second = budget.admit(), budget.admit()
    assert first is not None and second is not None
    third = budget.admit()  # evicts the oldest idle one, `first`
    assert third is not None and first.evicted and first.scope.cancel_called
    budget.busy(second)
    budget.busy(third)
    assert budget.admit() is None
    budget.release(first)  # the evicted task ends: counted once only
    assert budget.active == 2
    budget.release(second)
    assert budget.admit() is not None


async def test_stalled_reader_over_a_buffered_stream_pins_no_copy(root: Path) -> None:
    """The path for streams that are not plain sockets (TLS): a client that
    stops reading a compression-cache hit makes the server hold no joined
    copy of head and body, only the piece in flight."""
    text = _compressible_text(4 * MiB, seed=3)
    (root / "big.txt").write_bytes(text)
    gz = "Accept-Encoding: gzip\r\n"
    async with memory_connection(make_config(root), lockstep=True) as (client, _, _):
        warm = await client.get("/big.txt", gz)
        assert warm.header("content-encoding") == "gzip"
        assert gzip.decompress(warm.body) == text
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            await client.send_raw(_request("/big.txt", gz))
            assert (await client.stream.receive_some(100)).startswith(b"HTTP/1.1 200")
            await trio.sleep(0.05)  # the server is now blocked in its next write
            grown = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
    print(f"\nbuffered path, one stalled reader: {grown / KiB:.0f} KiB held")
    assert grown < 256 * KiB, f"{grown / KiB:.0f} KiB held for one stalled reader"
