"""HTTP/2 robustness, round 3: body-length stream errors, WINDOW_UPDATE
floods, descriptor budgets and window stalls, nosniff, raw query bytes.
In-memory streams with h2 as the (attacking) client."""

from __future__ import annotations

from pathlib import Path

import h2.settings
import pytest
import trio
import trio.testing
from h2.errors import ErrorCodes

from serverio import Config, Server
from serverio.http.core import RequestFacts, decide_directory
from serverio.http.target import Target, quote_query
from serverio.net.connection import ConnectionTask
from serverio.net.h2conn import H2Connection
from serverio.site.rules import compile_rules, slash_redirect

from .conftest import make_config, memory_connection, open_fd_count, wait_until
from .h2client import H2Client, H2Response, h2_memory

S = h2.settings.SettingCodes


# ---------------------------------------------------------------- content-length


async def test_body_length_mismatch_resets_only_that_stream(root: Path) -> None:
    """RFC 9113 §8.1.1: DATA that disagrees with content-length makes the
    request malformed, a *stream* error.  h2's own check raised a
    connection error (GOAWAY PROTOCOL_ERROR) and killed the download on
    the other stream."""
    cfg = make_config(root)
    # Small windows: the download is still in flight when the bad request ends.
    async with h2_memory(cfg, settings={S.INITIAL_WINDOW_SIZE: 16384}) as (client, srv, _):
        big = client.request("/big.bin")
        await client.flush()
        await client.pump()  # the download has started
        short = client.request("/hello.txt", "POST", [("content-length", "5")], end_stream=False)
        long = client.request("/hello.txt", "POST", [("content-length", "2")], end_stream=False)
        client.conn.send_data(short, b"abc", end_stream=True)
        client.conn.send_data(long, b"abcd", end_stream=True)
        await client.flush()
        rs, rl, rb = await client.wait(short, long, big)
    assert client.goaway is None
    assert rs.reset == ErrorCodes.PROTOCOL_ERROR and rl.reset == ErrorCodes.PROTOCOL_ERROR
    assert rb.status == 200 and len(rb.body) == 300_000 and rb.ended
    assert bytes(rb.body) == (root / "big.bin").read_bytes()
    assert srv.stats.h2.stream_errors == 2 and srv.stats.h2.protocol_errors == 0


# ---------------------------------------------------------------- nosniff

_NOSNIFF_ROWS: list[tuple[str, str, tuple[tuple[str, str], ...], int]] = [
    ("GET", "/hello.txt", (), 200),  # small file
    ("GET", "/big.bin", (), 200),  # streamed file
    ("HEAD", "/hello.txt", (), 200),
    ("GET", "/sub/", (), 200),  # index file
    ("GET", "/noindex/", (), 200),  # listing
    ("GET", "/noindex/?format=json", (), 200),
    ("GET", "/noindex", (), 301),
    ("GET", "/missing.txt", (), 404),
    ("GET", "/.secret", (), 404),
    ("GET", "/big.bin", (("range", "bytes=10-19"),), 206),
    ("GET", "/big.bin", (("range", "bytes=0-1,5-6"),), 206),
    ("GET", "/big.bin", (("range", "bytes=999999-"),), 416),
    ("GET", "/text.txt", (("accept-encoding", "gzip"),), 200),
    ("POST", "/hello.txt", (), 405),
    ("OPTIONS", "/hello.txt", (), 204),
    ("GET", "/hello.txt", (("if-none-match", "*"),), 304),
    ("GET", "/hello.txt", (("if-match", '"nope"'),), 412),
    ("GET", "/.serverio/livereload.js", (), 200),
    ("GET", "/.serverio/livereload.js", (("if-none-match", "*"),), 304),
    ("HEAD", "/.serverio/events", (), 200),
    ("GET", "/.serverio/events", (), 200),
]


def _nosniff_count(fields: list[tuple[bytes, bytes]]) -> int:
    return sum(1 for k, v in fields if k.lower() == b"x-content-type-options" and v == b"nosniff")


async def _h1_head(
    srv: Server, method: str, target: str, fields: tuple[tuple[str, str], ...]
) -> bytes:
    """The raw HTTP/1.1 response head (an event stream never ends its body)."""
    ours, theirs = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ConnectionTask(srv.env, theirs, "memory").run)
        extra = "".join(f"{k}: {v}\r\n" for k, v in fields)
        await ours.send_all(f"{method} {target} HTTP/1.1\r\nHost: t\r\n{extra}\r\n".encode())
        got = b""
        with trio.fail_after(5):
            while b"\r\n\r\n" not in got:
                got += await ours.receive_some(65536)
        nursery.cancel_scope.cancel()
    return got.split(b"\r\n\r\n", 1)[0]


async def test_every_response_says_nosniff_exactly_once_over_both_protocols(root: Path) -> None:
    (root / "text.txt").write_bytes(b"compress me " * 500)
    cfg = make_config(root, watch=True)
    srv = Server(cfg)
    h1: list[tuple[int, int]] = []
    h2r: list[tuple[int, int]] = []
    try:
        async with srv.handler.running():
            for method, target, fields, _ in _NOSNIFF_ROWS:
                head = await _h1_head(srv, method, target, fields)
                lines = head.split(b"\r\n")
                parsed = [tuple(ln.split(b": ", 1)) for ln in lines[1:]]
                h1.append((int(lines[0].split()[1]), _nosniff_count(parsed)))  # type: ignore[arg-type]
        async with h2_memory(cfg, server=srv) as (client, _, _):
            for method, target, fields, _ in _NOSNIFF_ROWS:
                sid = client.request(target, method, list(fields))
                await client.flush()
                r = client.responses[sid]
                endless = method == "GET" and target.endswith("/events")
                with trio.fail_after(5):
                    while not r.done and not (endless and r.status):  # an event stream: its head
                        assert await client.pump()
                h2r.append((r.status, _nosniff_count(r.header_list)))
    finally:
        srv.opener.close()
    want = [(status, 1) for *_, status in _NOSNIFF_ROWS]
    assert h1 == want
    assert h2r == want


# ---------------------------------------------------------------- raw query bytes

_RAW_QUERY = b"/noindex?a\x01b\x1b[31mRED\x7f\xff c"
# VCHARs both parsers accept that are not query characters (RFC 3986 §3.4).
_ODD_QUERY = '?q="<x>"{|}^`\\&p=%41%zz'
_ODD_ENCODED = "?q=%22%3Cx%3E%22%7B%7C%7D%5E%60%5C&p=%41%25zz"


async def _h2_raw(client: H2Client, path: bytes) -> H2Response:
    client.conn.config.validate_outbound_headers = False
    client.conn.config.normalize_outbound_headers = False
    sid = client.request(
        raw=[(b":method", b"GET"), (b":path", path), (b":scheme", b"http"), (b":authority", b"t")]
    )
    await client.flush()
    (r,) = await client.wait(sid)
    return r


async def test_control_and_non_ascii_bytes_in_the_target_are_400_on_both_protocols(
    root: Path,
) -> None:
    cfg = make_config(root)
    async with memory_connection(cfg) as (h1, _, _):
        await h1.send_raw(b"GET " + _RAW_QUERY + b" HTTP/1.1\r\nHost: t\r\n\r\n")
        r1 = await h1.read_response()
    assert r1.status == 400 and r1.header("location") is None
    for bad in (_RAW_QUERY, b"/noindex?a\x01b", b"/noindex?a b", b"/noindex?\xff", b"/no\x7findex"):
        async with h2_memory(cfg) as (client, _, _):
            r2 = await _h2_raw(client, bad)
            ok = await client.get("/hello.txt")  # a stream error at most: the connection lives
        assert r2.status == 400 and "location" not in r2.headers, bad
        assert ok.status == 200 and client.goaway is None


async def test_location_carries_the_query_percent_encoded_on_both_protocols(
    root: Path, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "about.html").write_text("<p>about</p>\n")
    (site / "d").mkdir()
    cfg = make_config(site, clean_urls=True, redirects=(("/old", "/about", 301),))
    cases = [
        ("/d" + _ODD_QUERY, "/d/" + _ODD_ENCODED),  # directory slash redirect
        ("/about.html" + _ODD_QUERY, "/about" + _ODD_ENCODED),  # clean URL
        ("/old" + _ODD_QUERY, "/about" + _ODD_ENCODED),  # a redirect rule
    ]
    for target, want in cases:
        async with memory_connection(cfg) as (h1, _, _):
            r1 = await h1.get(target)
        async with h2_memory(cfg) as (client, _, _):
            r2 = await _h2_raw(client, target.encode())
        assert (r1.status, r1.header("location")) == (301, want), target
        assert (r2.status, r2.headers.get("location")) == (301, want), target


def test_quote_query_leaves_only_query_characters() -> None:
    """The pure rule, including bytes no transport lets through any more."""
    raw = _RAW_QUERY.split(b"?", 1)[1].decode("latin-1")
    assert quote_query(raw) == "a%01b%1B[31mRED%7F%FF%20c".replace("[", "%5B")
    assert quote_query("a=1&b=%2F/x?y:z@w") == "a=1&b=%2F/x?y:z@w"  # already fine: unchanged
    assert quote_query("%") == "%25" and quote_query("%4") == "%254"
    req = RequestFacts(method=b"GET", target=Target(("noindex",), False, raw))
    plan = decide_directory(req, Config(), 0.0)
    (loc,) = [v for k, v in plan.headers if k == b"location"]
    assert loc == b"/noindex/?a%01b%1B%5B31mRED%7F%FF%20c"
    rules_target = Target(("about.html",), False, raw)
    site_rules = compile_rules(clean_urls=True)
    assert slash_redirect(site_rules, rules_target) == b"/about?a%01b%1B%5B31mRED%7F%FF%20c"


# ---------------------------------------------------------------- WINDOW_UPDATE floods


def _h2_side(conn: ConnectionTask) -> H2Connection:
    h = conn._switched
    assert isinstance(h, H2Connection)
    return h


def _sending(conn: ConnectionTask) -> int:
    """Body sources of the connection's HTTP/2 side (0 before the switch)."""
    h = conn._switched
    return len(h._sending) if isinstance(h, H2Connection) else 0


@pytest.mark.parametrize("kind", ["connection", "dribble"])
async def test_window_update_flood_gets_enhance_your_calm_within_the_budget(
    root: Path, kind: str
) -> None:
    """WINDOW_UPDATEs with no data moving cost work and carry nothing: past
    --h2-max-control per second, GOAWAY ENHANCE_YOUR_CALM (they were never
    counted: 300k frames left the connection open).  "dribble": one byte of
    window at a time on a stream with a body to send, each answered by a
    one-byte DATA frame, earns no allowance either."""
    cfg = make_config(root, h2_max_control=100)
    srv = Server(cfg)
    sent = 0
    settings = {S.INITIAL_WINDOW_SIZE: 0} if kind == "dribble" else None
    try:
        async with h2_memory(cfg, server=srv, settings=settings, ack=False) as (client, _, conn):
            if kind == "dribble":
                sid = client.request("/big.bin")
                await client.flush()
                await wait_until(lambda: _sending(conn) == 1)
            else:
                sid = 0
                r = await client.get("/hello.txt")  # an ordinary request first
                assert r.status == 200
            h = _h2_side(conn)
            with trio.fail_after(10):
                while not h._closed and sent < 3000:
                    for _ in range(10):  # through the client's h2: it knows its windows
                        client.conn.increment_flow_control_window(1, stream_id=sid or None)
                    await client.flush()
                    sent += 10
                    await trio.testing.wait_all_tasks_blocked()
            await client.until_closed()
        assert client.goaway is not None
        assert client.goaway.error_code == ErrorCodes.ENHANCE_YOUR_CALM
        assert srv.stats.h2.calm == 1
        # The budget (100) plus the last batch: never the whole flood.
        assert sent <= 100 + 10, sent
    finally:
        srv.opener.close()


async def test_small_windows_download_is_not_a_window_update_flood(root: Path) -> None:
    """A client with 1 KiB stream windows answers every DATA frame with a
    WINDOW_UPDATE (about 300 for big.bin, plus connection ones), far past a
    control budget of 20 per second: each follows DATA the server sent, so
    none spends the budget."""
    cfg = make_config(root, h2_max_control=20)
    async with h2_memory(cfg, settings={S.INITIAL_WINDOW_SIZE: 1024}) as (client, srv, _):
        r = await client.get("/big.bin")
        again = await client.get("/big.bin", [("range", "bytes=0-99999")])
    assert r.status == 200 and bytes(r.body) == (root / "big.bin").read_bytes()
    assert r.data_frames >= 290
    assert again.status == 206 and len(again.body) == 100_000
    assert client.goaway is None and srv.stats.h2.calm == 0


# ---------------------------------------------------------------- descriptors and window stalls


async def _h2_client(
    srv: Server, nursery: trio.Nursery, settings: dict[h2.settings.SettingCodes, int]
) -> H2Client:
    """Another HTTP/2 connection to ``srv`` over memory streams."""
    ours, theirs = trio.testing.memory_stream_pair()
    nursery.start_soon(ConnectionTask(srv.env, theirs, "memory").run)
    client = H2Client(ours)
    await client.start(settings)
    return client


async def _open_windows(client: H2Client) -> None:
    client.conn.update_settings({S.INITIAL_WINDOW_SIZE: 1 << 20})
    client.conn.increment_flow_control_window(1 << 24)
    await client.flush()


@pytest.mark.parametrize("fs_workers", [0, 2])
async def test_zero_window_streams_hold_at_most_the_cap_of_descriptors(
    root: Path, fs_workers: int
) -> None:
    """SETTINGS_INITIAL_WINDOW_SIZE=0 and many streams for a large file:
    each stream held a descriptor (100 per connection, where ops/fdlimit.py
    budgets 2).  Now a connection holds at most --h2-max-open-files; the
    other streams wait for a slot and are all served once windows open."""
    cfg = make_config(
        root, h2_max_open_files=3, fs_workers=fs_workers, fs_queue=64 if fs_workers else 0
    )
    srv = Server(cfg)
    zero = {S.INITIAL_WINDOW_SIZE: 0}
    try:
        async with srv.handler.running(), trio.open_nursery() as nursery:
            a = await _h2_client(srv, nursery, zero)
            b = await _h2_client(srv, nursery, zero)
            assert (await a.get("/hello.txt", method="HEAD")).status == 200  # the root is open
            assert (await b.get("/hello.txt", method="HEAD")).status == 200
            await trio.testing.wait_all_tasks_blocked()
            baseline = open_fd_count()
            sids = {c: [c.request("/big.bin") for _ in range(20)] for c in (a, b)}
            for c in (a, b):
                await c.flush()
            await trio.testing.wait_all_tasks_blocked()
            held = open_fd_count() - baseline
            assert held <= 2 * 3, held
            assert srv.stats.h2.streams == 42
            # Windows open: every stream is served, the cap holding throughout.
            peak = held
            for c in (a, b):
                await _open_windows(c)
                with trio.fail_after(20):
                    while not all(c.responses[s].done for s in sids[c]):
                        assert await c.pump()
                        peak = max(peak, open_fd_count() - baseline)
            await trio.testing.wait_all_tasks_blocked()
            left = open_fd_count() - baseline
            nursery.cancel_scope.cancel()
        body = (root / "big.bin").read_bytes()
        for c in (a, b):
            assert all(c.responses[s].ended and bytes(c.responses[s].body) == body for s in sids[c])
        assert peak <= 2 * 3, peak
        assert left == 0
    finally:
        srv.opener.close()


async def test_small_answers_do_not_wait_behind_the_descriptor_cap(root: Path) -> None:
    """At the cap (every slot held by a stalled large body) a small file, an
    error and a 304 are still answered at once: only an answer that needs
    a descriptor waits for one."""
    cfg = make_config(root, h2_max_open_files=1)
    async with h2_memory(cfg, settings={S.INITIAL_WINDOW_SIZE: 0}) as (client, _, conn):
        stalled = client.request("/big.bin")
        waiting = client.request("/big.bin")
        await client.flush()
        await wait_until(lambda: _sending(conn) == 1)
        small = client.request("/hello.txt")
        missing = client.request("/missing.txt")
        cached = client.request("/hello.txt", headers=[("if-none-match", "*")])
        await client.flush()
        with trio.fail_after(5):
            while not all(client.responses[s].status for s in (small, missing, cached)):
                assert await client.pump()
        assert [client.responses[s].status for s in (small, missing, cached)] == [200, 404, 304]
        # One of the two large bodies holds the slot (trio does not promise
        # which stream task runs first), the other waits for it unanswered.
        big = [client.responses[s] for s in (stalled, waiting)]
        assert not any(r.done for r in big)
        assert sorted(r.status for r in big) == [0, 200]
        await _open_windows(client)
        rs = await client.wait(small, stalled, waiting)
    assert all(r.ended for r in rs) and bytes(rs[0].body) == b"hello world\n"
    assert len(rs[1].body) == len(rs[2].body) == 300_000


async def test_window_trickle_does_not_keep_streams_past_the_write_timeout(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """One byte of window per stream every 2 s used to move each stream's
    write deadline forever.  Progress is now 16 KiB (as HTTP/1.1 counts
    it on a stream), so the streams are reset and, no body on the
    connection having moved, the connection ends at --write-timeout."""
    cfg = make_config(root, write_timeout=7.0, keepalive_timeout=60.0)
    srv = Server(cfg)
    try:
        zero = {S.INITIAL_WINDOW_SIZE: 0}
        async with h2_memory(cfg, server=srv, settings=zero, ack=False) as (client, _, _):
            assert (await client.get("/hello.txt", method="HEAD")).status == 200
            await trio.testing.wait_all_tasks_blocked()
            baseline = open_fd_count()
            t0 = trio.current_time()
            sids = [client.request("/big.bin") for _ in range(10)]
            await client.flush()

            async def trickle() -> None:
                while True:
                    await trio.sleep(2.0)
                    for sid in sids:
                        if not client.responses[sid].done:
                            client.conn.increment_flow_control_window(1, stream_id=sid)
                    await client.flush()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(trickle)
                with trio.fail_after(60):
                    await client.until_closed()
                nursery.cancel_scope.cancel()
            closed = trio.current_time() - t0
            await trio.testing.wait_all_tasks_blocked()
            left = open_fd_count() - baseline
        assert 7.0 <= closed < 9.0, closed
        assert client.goaway is not None
        assert not any(client.responses[s].ended for s in sids)
        assert 0 < sum(len(client.responses[s].body) for s in sids) < 100  # the trickle's bytes
        assert srv.stats.timeouts.write >= 1
        assert left == 0
    finally:
        srv.opener.close()


async def test_descriptors_are_released_as_soon_as_the_client_is_gone(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """EOF from a client whose windows are shut: no WINDOW_UPDATE can come
    any more, so the streams' descriptors are closed at once (they used to
    stay until --write-timeout, 30 s)."""
    cfg = make_config(root)
    srv = Server(cfg)
    try:
        async with h2_memory(cfg, server=srv, settings={S.INITIAL_WINDOW_SIZE: 0}) as (
            client,
            _,
            conn,
        ):
            assert (await client.get("/hello.txt", method="HEAD")).status == 200
            await trio.testing.wait_all_tasks_blocked()
            baseline = open_fd_count()
            for _ in range(4):
                client.request("/big.bin")
            await client.flush()
            await wait_until(lambda: _sending(conn) == 4)
            assert open_fd_count() - baseline == 4
            t0 = trio.current_time()
            stream = client.stream
            assert isinstance(stream, trio.StapledStream)
            await stream.send_stream.aclose()  # the client's side ends (FIN)
            with trio.fail_after(60):
                await client.until_closed()
            gone = trio.current_time() - t0
            await trio.testing.wait_all_tasks_blocked()
            left = open_fd_count() - baseline
        assert gone < 0.5, gone
        assert left == 0
    finally:
        srv.opener.close()
