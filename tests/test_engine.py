"""Engine behaviour over in-memory streams: semantics, errors, deadlines.

No sockets and no real sleeping: deadlines run on trio's MockClock
(``autojump_clock``), so a 10-second head timeout takes no time at all.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from serverio import Server

from .conftest import make_config, memory_connection

# ------------------------------------------------------------------ basics


async def test_get_and_head_same_headers(root: Path) -> None:
    async with memory_connection(make_config(root)) as (client, _, _):
        get = await client.get("/hello.txt")
        head = await client.get("/hello.txt", method="HEAD")
    assert get.status == 200 and get.body == b"hello world\n"
    assert get.header("content-type") == "text/plain; charset=utf-8"
    assert get.header("content-length") == "12"
    assert get.header("accept-ranges") == "bytes"
    assert get.header(
        "etag",
    ) and get.header("etag").startswith('"')  # type: ignore[union-attr]
    assert get.header("last-modified") and get.header("date")
    assert head.status == 200 and head.body == b""
    for name in ("content-type", "content-length", "etag", "last-modified", "accept-ranges"):
        assert head.header(name) == get.header(name)


async def test_index_and_redirect_keeps_query(root: Path) -> None:
    async with memory_connection(make_config(root, listing=False)) as (client, _, _):
        home = await client.get("/")
        redirect = await client.get("/sub?x=1&y=%20")
        sub = await client.get("/sub/")
        noindex = await client.get("/noindex/")
    assert home.status == 200 and home.body == b"<h1>home</h1>\n"
    assert redirect.status == 301 and redirect.header("location") == "/sub/?x=1&y=%20"
    assert sub.body == b"<p>sub</p>\n"
    assert noindex.status == 404


@pytest.mark.parametrize("target", ["//evil.com/..", "//sub", "///sub", "/sub//", "//%2fsub"])
async def test_redirect_never_open(root: Path, target: str) -> None:
    async with memory_connection(make_config(root)) as (client, _, _):
        r = await client.get(target)
    loc = r.header("location")
    assert loc is None or (loc.startswith("/") and not loc.startswith("//"))


async def test_options_and_405(root: Path) -> None:
    async with memory_connection(make_config(root)) as (client, _, _):
        opt = await client.get("/hello.txt", method="OPTIONS")
        star = await client.get("*", method="OPTIONS")
        post = await client.get("/hello.txt", method="DELETE")
    assert opt.status == 204 and opt.header("allow") == "GET, HEAD, OPTIONS"
    assert opt.header("content-length") is None
    assert star.status == 204
    assert post.status == 405 and post.header("allow") == "GET, HEAD, OPTIONS"


async def test_conditionals(root: Path) -> None:
    async with memory_connection(make_config(root, cache_control="max-age=60")) as (client, _, _):
        first = await client.get("/hello.txt")
        etag = first.header("etag")
        lm = first.header("last-modified")
        inm = await client.get("/hello.txt", f"If-None-Match: W/{etag}\r\n")
        ims = await client.get("/hello.txt", f"If-Modified-Since: {lm}\r\n")
        im_fail = await client.get("/hello.txt", 'If-Match: "nope"\r\n')
        im_ok = await client.get("/hello.txt", f"If-Match: {etag}\r\n")
        both = await client.get(
            "/hello.txt", f'If-None-Match: "other"\r\nIf-Modified-Since: {lm}\r\n'
        )
    assert inm.status == 304 and inm.body == b""
    assert inm.header("etag") == etag and inm.header("cache-control") == "max-age=60"
    assert inm.header("last-modified") == lm and inm.header("date")
    assert ims.status == 304
    assert im_fail.status == 412
    assert im_ok.status == 200
    # If-None-Match present: If-Modified-Since is not evaluated (§13.2.2).
    assert both.status == 200


async def test_ranges(root: Path) -> None:
    data = (root / "data.bin").read_bytes()
    async with memory_connection(make_config(root)) as (client, _, _):
        one = await client.get("/data.bin", "Range: bytes=10-19\r\n")
        suffix = await client.get("/data.bin", "Range: bytes=-5\r\n")
        clamp = await client.get("/data.bin", "Range: bytes=1000-5000\r\n")
        bad = await client.get("/data.bin", "Range: bytes=5-1\r\n")
        unit = await client.get("/data.bin", "Range: items=0-1\r\n")
        unsat = await client.get("/data.bin", "Range: bytes=1024-\r\n")
        multi = await client.get("/data.bin", "Range: bytes=0-1,100-101\r\n")
        etag = one.header("etag")
        ifr_ok = await client.get("/data.bin", f"Range: bytes=0-0\r\nIf-Range: {etag}\r\n")
        ifr_bad = await client.get("/data.bin", 'Range: bytes=0-0\r\nIf-Range: "x"\r\n')
    assert one.status == 206 and one.body == data[10:20]
    assert one.header("content-range") == "bytes 10-19/1024"
    assert suffix.body == data[-5:]
    assert clamp.status == 206 and clamp.body == data[1000:]
    assert bad.status == 200 and unit.status == 200 and len(bad.body) == 1024
    assert unsat.status == 416 and unsat.header("content-range") == "bytes */1024"
    assert multi.status == 206
    assert multi.header(
        "content-type",
    ).startswith("multipart/byteranges; boundary=")  # type: ignore[union-attr]
    assert int(multi.header("content-length") or 0) == len(multi.body)
    assert b"Content-Range: bytes 0-1/1024\r\n\r\n" + data[0:2] in multi.body.replace(
        b"content-range", b"Content-Range"
    )
    assert ifr_ok.status == 206 and ifr_bad.status == 200


# ------------------------------------------------------------- containment


@pytest.mark.parametrize(
    ("target", "statuses"),
    [
        ("/../outside/secret.txt", {400}),
        ("/%2e%2e/outside/secret.txt", {400}),
        ("/%2E%2e/outside/secret.txt", {400}),
        ("/sub/..%2f..%2foutside/secret.txt", {400, 404}),
        ("/..%5c..%5coutside/secret.txt", {404}),  # one literal name: "..\\..\\outside"
        ("/hello.txt%00.png", {400}),
        # Overlong '..': the name of those four bytes (not UTF-8), not a dot segment.
        ("/%c0%ae%c0%ae/outside/secret.txt", {404}),
        ("/%zz", {400}),
        ("/..", {400}),
        ("/.secret", {404}),
        ("/sub/%2e%2e/%2e%2e/outside/secret.txt", {400}),
        ("http://host/../outside/secret.txt", {400}),
    ],
)
async def test_containment(root: Path, target: str, statuses: set[int], strategy: str) -> None:
    async with memory_connection(make_config(root)) as (client, _, _):
        await client.send_raw(f"GET {target} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
        r = await client.read_response()
    assert r.status in statuses
    assert b"OUTSIDE" not in r.body and str(root) not in r.body.decode("latin-1")


async def test_symlinks(root: Path, strategy: str) -> None:
    outside = root.parent / "outside"
    (root / "out-link").symlink_to(outside / "secret.txt")
    (root / "out-dir").symlink_to(outside)
    (root / "in-link").symlink_to("hello.txt")
    (root / "abs-in-link").symlink_to(root / "hello.txt")
    (root / "dev-null").symlink_to("/dev/null")
    async with memory_connection(make_config(root)) as (client, _, _):
        out = await client.get("/out-link")
        out_dir = await client.get("/out-dir/secret.txt")
        inside = await client.get("/in-link")
        abs_inside = await client.get("/abs-in-link")
        dev = await client.get("/dev-null")
    assert out.status == 404 and out_dir.status == 404 and dev.status == 404
    assert inside.body == b"hello world\n" and abs_inside.body == b"hello world\n"
    async with memory_connection(make_config(root, follow_symlinks=True)) as (client, _, _):
        followed = await client.get("/out-link")
        dev2 = await client.get("/dev-null")
    assert followed.body == b"OUTSIDE-SECRET\n"
    assert dev2.status == 404  # not a regular file


async def test_hidden_policy(root: Path, strategy: str) -> None:
    async with memory_connection(make_config(root)) as (client, _, _):
        hidden = await client.get("/.secret")
        known = await client.get("/.well-known/security.txt")
    assert hidden.status == 404 and known.status == 200
    async with memory_connection(make_config(root, hidden=True)) as (client, _, _):
        shown = await client.get("/.secret")
    assert shown.status == 200 and shown.body == b"hidden\n"


async def test_fifo_is_404_and_does_not_hang(root: Path, strategy: str) -> None:
    import os

    os.mkfifo(root / "pipe")
    async with memory_connection(make_config(root)) as (client, _, _):
        with trio.fail_after(5):
            r = await client.get("/pipe")
    assert r.status == 404


async def test_unicode_names(root: Path) -> None:
    async with memory_connection(make_config(root)) as (client, _, _):
        r = await client.get("/caf%C3%A9.txt")
    assert r.status == 200 and r.body == b"unicode name\n"


# ------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"GET / HTTP/1.1\r\n\r\n", 400),  # missing Host
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: x\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
        (
            b"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
            400,
        ),
        (b"GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505),
        (b"GET / HTTP/1.2\r\nHost: a\r\n\r\n", 505),
        (b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03garbage\r\n\r\n", 400),
        (b"GET /a b HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nBad Header: x\r\n\r\n", 400),
        (b"GET * HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        (b"GET example.com:80 HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: a\r\n\r\n", 414),
        (b"GET / HTTP/1.1\r\nHost: a\r\nX: " + b"a" * 20000 + b"\r\n\r\n", 431),
    ],
)
async def test_bad_requests_close(root: Path, raw: bytes, status: int) -> None:
    async with memory_connection(make_config(root)) as (client, srv, _):
        await client.send_raw(raw)
        r = await client.read_response()
        closed = await client.at_eof()
    assert r.status == status
    assert r.header("connection") == "close" and closed
    # Fixed body: no path, no exception text.
    assert r.body.startswith(str(status).encode()) and len(r.body) < 64
    assert str(root).encode() not in r.body
    assert srv.stats.responses.client_errors + srv.stats.responses.server_errors == 1


async def test_oversized_head_split_reads(root: Path) -> None:
    """h11 itself catches a head that grows past the limit across reads."""
    async with memory_connection(make_config(root)) as (client, _, _):
        await client.send_raw(b"GET / HTTP/1.1\r\nHost: a\r\n")
        try:
            for _ in range(40):
                await client.send_raw(b"X-Pad: " + b"p" * 500 + b"\r\n")
        except trio.BrokenResourceError:
            pass  # the server answered and closed before we finished
        r = await client.read_response()
    assert r.status == 431


async def test_one_byte_at_a_time(root: Path) -> None:
    raw = (
        b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nRange: bytes=0-4\r\n\r\n"
        b"GET /data.bin HTTP/1.1\r\nHost: t\r\n\r\n"
    )
    async with memory_connection(make_config(root)) as (client, _, _):
        for i in range(len(raw)):
            await client.send_raw(raw[i : i + 1])
        first = await client.read_response()
        second = await client.read_response()
    assert first.status == 206 and first.body == b"hello"
    assert second.status == 200 and len(second.body) == 1024


async def test_pipelining_in_order(root: Path) -> None:
    async with memory_connection(make_config(root)) as (client, _, _):
        await client.send_raw(
            b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n"
            b"HEAD /data.bin HTTP/1.1\r\nHost: t\r\n\r\n"
            b"GET /sub/ HTTP/1.1\r\nHost: t\r\n\r\n"
        )
        a = await client.read_response()
        b = await client.read_response(head=True)
        c = await client.read_response()
    assert (a.body, b.status, b.body, c.body) == (b"hello world\n", 200, b"", b"<p>sub</p>\n")


async def test_request_body_is_never_parsed_as_request(root: Path) -> None:
    """A request body that looks like a request is content: drained after
    the answer (the connection is kept, issue 26 item 4; it used to close),
    never answered.  The next request on the connection is the real one."""
    smuggled = b"GET /.secret HTTP/1.1\r\nHost: t\r\n\r\n"
    async with memory_connection(make_config(root, hidden=True)) as (client, srv, _):
        await client.send_raw(
            b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % len(smuggled)
            + smuggled
        )
        r = await client.read_response()
        assert r.status == 200 and r.header("connection") is None
        nxt = await client.get("/sub/")
    assert nxt.status == 200 and nxt.body == b"<p>sub</p>\n"
    assert srv.stats.responses.completed == 2


async def test_http10_keepalive_rules(root: Path) -> None:
    async with memory_connection(make_config(root)) as (client, _, _):
        await client.send_raw(b"GET /hello.txt HTTP/1.0\r\n\r\n")
        r = await client.read_response()
        assert r.header("connection") == "close" and await client.at_eof()
    async with memory_connection(make_config(root)) as (client, _, _):
        await client.send_raw(b"GET /hello.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        r1 = await client.read_response()
        await client.send_raw(b"GET /hello.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        r2 = await client.read_response()
    assert r1.header("connection") == "keep-alive" and r2.status == 200


async def test_max_requests(root: Path) -> None:
    async with memory_connection(make_config(root, max_requests=2)) as (client, _, _):
        r1 = await client.get("/hello.txt")
        r2 = await client.get("/hello.txt")
        closed = await client.at_eof()
    assert r1.header("connection") is None
    assert r2.header("connection") == "close" and closed


async def test_connection_close_requested(root: Path) -> None:
    async with memory_connection(make_config(root)) as (client, _, _):
        r = await client.get("/hello.txt", "Connection: close\r\n")
        assert r.header("connection") == "close" and await client.at_eof()


# --------------------------------------------------------------- deadlines


async def test_head_timeout_408(root: Path, autojump_clock: trio.testing.MockClock) -> None:
    async with memory_connection(make_config(root, head_timeout=10)) as (client, srv, _):
        await client.send_raw(b"GET / HTTP/1.1\r\nHo")
        start = trio.current_time()
        r = await client.read_response()
        assert await client.at_eof()
    assert r.status == 408 and r.header("connection") == "close"
    assert trio.current_time() - start == pytest.approx(10, abs=0.01)
    assert srv.stats.timeouts.head == 1


async def test_head_timeout_is_total_not_per_byte(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Slowloris: a byte every second never extends the head deadline."""
    async with memory_connection(make_config(root, head_timeout=5)) as (client, srv, _):
        start = trio.current_time()
        with pytest.raises(trio.BrokenResourceError):
            for ch in b"GET / HTTP/1.1\r\nHost: t\r\nX-Slow: " + b"a" * 100:
                await client.send_raw(bytes([ch]))
                await trio.sleep(1)
    assert srv.stats.timeouts.head == 1
    assert trio.current_time() - start < 7


async def test_keepalive_timeout_silent(root: Path, autojump_clock: trio.testing.MockClock) -> None:
    async with memory_connection(make_config(root, keepalive_timeout=3)) as (client, srv, _):
        await client.get("/hello.txt")
        start = trio.current_time()
        assert await client.at_eof()  # no 408 bytes: a silent close
    assert trio.current_time() - start == pytest.approx(3, abs=0.01)
    assert srv.stats.timeouts.keepalive == 1 and srv.stats.timeouts.head == 0


async def test_keepalive_then_head_deadline(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    cfg = make_config(root, keepalive_timeout=3, head_timeout=10)
    async with memory_connection(cfg) as (client, _, _):
        await client.get("/hello.txt")
        await trio.sleep(2)  # within keep-alive
        await client.send_raw(b"GET /hello.txt HTTP/1.1\r\n")
        start = trio.current_time()
        r = await client.read_response()
    assert r.status == 408
    assert trio.current_time() - start == pytest.approx(10, abs=0.01)


async def test_write_timeout_aborts_non_reader(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    cfg = make_config(root, write_timeout=7)
    async with memory_connection(cfg, lockstep=True) as (client, srv, _):
        await client.send_raw(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
        # Never read: the server's write cannot progress.
        await trio.sleep(6)
        assert srv.stats.timeouts.write == 0
        await trio.sleep(2)
        assert srv.stats.timeouts.write == 1
    assert srv.stats.responses.completed == 0


async def test_write_deadline_is_per_progress(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """A slow reader that keeps making progress is not cut off."""
    cfg = make_config(root, write_timeout=5)
    async with memory_connection(cfg, lockstep=True) as (client, srv, _):
        await client.send_raw(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
        got = 0
        with trio.move_on_after(600):
            while got < 300_000:
                data = await client.stream.receive_some(16384)
                if not data:
                    break
                got += len(data)
                await trio.sleep(4)  # under the deadline each time
        assert srv.stats.timeouts.write == 0
        assert got > 300_000  # the head plus all 300,000 body bytes


async def test_read_deadlines_never_cut_a_slow_response(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """The keep-alive and head deadlines armed while waiting for the second
    request stay on the lifetime scope until the answer could wait
    (Lifetime.lift); a response that outlives them both must
    still be written in full."""
    cfg = make_config(root, keepalive_timeout=2, head_timeout=3, write_timeout=5)
    async with memory_connection(cfg, lockstep=True) as (client, srv, _):
        assert (await client.get("/hello.txt")).status == 200
        await trio.sleep(1)  # inside keep-alive: the deadline is armed
        await client.send_raw(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
        got = 0
        while got < 300_000:
            data = await client.stream.receive_some(16384)
            if not data:
                break
            got += len(data)
            await trio.sleep(1)  # ~20 s in all, far past 2 s and 3 s
        assert got > 300_000
        assert trio.current_time() > 15
    assert srv.stats.timeouts.keepalive == srv.stats.timeouts.head == 0
    assert srv.stats.timeouts.write == 0


# ------------------------------------------------------------ counters/log


async def test_counters(root: Path) -> None:
    async with memory_connection(make_config(root)) as (client, srv, _):
        await client.get("/hello.txt")
        await client.get("/missing")
        await client.get("/big.bin")
    s = srv.stats.responses
    assert (s.completed, s.client_errors, s.server_errors) == (3, 1, 0)
    assert s.buffered_responses == 1  # memory streams take the buffered path
    assert "completed=3" in srv.stats.summary()


async def test_access_log_common(root: Path) -> None:
    import io

    from serverio import AccessLog

    buf = io.StringIO()
    srv = Server(make_config(root), access_log=AccessLog("common", buf))
    async with memory_connection(srv.config, server=srv) as (client, _, _):
        await client.get("/hello.txt")
        await client.get("/x%0a%22y")
    lines = buf.getvalue().splitlines()
    assert len(lines) == 2
    assert '"GET /hello.txt HTTP/1.1" 200 12' in lines[0]
    assert lines[1].endswith('"GET /x%0a%22y HTTP/1.1" 404 14')


async def test_index_names_tried_in_order(root: Path) -> None:
    (root / "noindex" / "home.htm").write_text("htm\n")
    cfg = make_config(root, index=("index.html", "home.htm"), listing=False)
    async with memory_connection(cfg) as (client, _, _):
        sub = await client.get("/sub/")  # has index.html
        alt = await client.get("/noindex/")  # only home.htm
    assert sub.body == b"<p>sub</p>\n" and alt.body == b"htm\n"


def test_cli_index_list() -> None:
    from serverio.ops.cli import build_parser, config_from_args

    args = build_parser().parse_args(["--index", "a.html,b.html", "--index", "c.html", "-d", "."])
    assert config_from_args(args).files.index == ("a.html", "b.html", "c.html")


async def test_bytes_sent_counts_head_and_body_once(root: Path) -> None:
    import socket as _s

    a, b = _s.socketpair()
    srv = Server(make_config(root))
    from serverio.net.connection import ConnectionTask

    conn = ConnectionTask(srv.env, trio.SocketStream(trio.socket.from_stdlib_socket(b)))
    client = trio.socket.from_stdlib_socket(a)
    received = b""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.run)
        for target in (b"/hello.txt", b"/big.bin"):  # small (with head) and sendfile
            await client.send(b"GET " + target + b" HTTP/1.1\r\nHost: t\r\n\r\n")
        await client.send(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        while data := await client.recv(1 << 20):
            received += data
    client.close()
    srv.opener.close()
    assert srv.stats.responses.completed == 3 and srv.stats.responses.sendfile_responses == 1
    assert srv.stats.responses.bytes_sent == len(received)


async def test_a_directory_with_only_index_htm_serves_it(root: Path) -> None:
    """http.server's index list (index.html, then index.htm) is the default:
    a directory holding only ``index.htm`` serves it, not a listing."""
    (root / "old").mkdir()
    (root / "old" / "index.htm").write_bytes(b"<p>old</p>\n")
    async with memory_connection(make_config(root)) as (client, _, _):
        r = await client.get("/old/")
        assert r.status == 200 and r.body == b"<p>old</p>\n"
        assert r.header("content-type") == "text/html; charset=utf-8"
