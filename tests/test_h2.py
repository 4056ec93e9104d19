"""HTTP/2 over in-memory streams, with h2 as the client."""

from __future__ import annotations

import os
from pathlib import Path

import h2.settings
import pytest
import trio
import trio.testing
from h2.errors import ErrorCodes
from hyperframe.frame import ContinuationFrame, DataFrame, HeadersFrame, PingFrame, SettingsFrame

from serverio import Server
from serverio.net.connection import ConnectionTask
from serverio.net.h2conn import H2Connection

from .conftest import HTTPClient, make_config, memory_connection, open_fd_count, wait_until
from .h2client import H2Client, h2_memory

S = h2.settings.SettingCodes


def _in_flight(conn: object, *, sending: bool = False) -> int:
    """Streams (or body sources) of the connection's HTTP/2 side; 0 before the switch."""
    h = getattr(conn, "_switched", None)
    if not isinstance(h, H2Connection):
        return 0
    return len(h._sending if sending else h._streams)


# ---------------------------------------------------------------- basics


async def test_prior_knowledge_get_serves_the_file(root: Path) -> None:
    cfg = make_config(root)
    async with h2_memory(cfg) as (client, srv, _):
        r = await client.get("/hello.txt")
    assert r.status == 200
    assert bytes(r.body) == b"hello world\n"
    assert r.headers["content-length"] == "12"
    assert r.headers["content-type"].startswith("text/plain")
    # RFC 9113 §8.2.2: no connection-specific fields; names lower-case.
    names = [k for k, _ in r.header_list]
    assert all(n == n.lower() for n in names)
    assert not {b"connection", b"keep-alive", b"transfer-encoding"} & set(names)
    assert srv.stats.h2.connections == 1 and srv.stats.h2.streams == 1
    assert srv.stats.responses.completed == 1


async def test_head_has_no_data_and_the_get_length(root: Path) -> None:
    cfg = make_config(root)
    async with h2_memory(cfg) as (client, _, _):
        r = await client.get("/big.bin", method="HEAD")
    assert r.status == 200 and r.ended
    assert r.data_frames == 0 and not r.body
    assert r.headers["content-length"] == str((root / "big.bin").stat().st_size)


@pytest.mark.parametrize("fs_workers", [0, 2])
async def test_large_file_respects_flow_control_windows(root: Path, fs_workers: int) -> None:
    # 300 kB against the default 65,535-byte windows: the server must wait
    # for WINDOW_UPDATEs, never exceed a window, and never exceed the
    # client's SETTINGS_MAX_FRAME_SIZE.
    cfg = make_config(root, fs_workers=fs_workers, fs_queue=4 if fs_workers else 0)
    async with h2_memory(cfg) as (client, srv, _):
        r = await client.get("/big.bin")
        r2 = await client.get("/big.bin", [("range", "bytes=1000-70999")])
    assert r.status == 200 and bytes(r.body) == (root / "big.bin").read_bytes()
    assert r2.status == 206 and bytes(r2.body) == (root / "big.bin").read_bytes()[1000:71000]
    assert r.data_frames >= 300_000 // 16384
    assert srv.stats.responses.completed == 2


async def test_many_streams_multiplexed_on_one_connection(root: Path) -> None:
    cfg = make_config(root)
    async with h2_memory(cfg) as (client, srv, _):
        sids = [client.request(p) for p in ("/hello.txt", "/data.bin", "/nope", "/sub/") * 5]
        await client.flush()
        rs = await client.wait(*sids)
    assert [r.status for r in rs] == [200, 200, 404, 200] * 5
    assert all(bytes(r.body) == b"hello world\n" for r in rs[0::4])
    assert srv.stats.h2.streams == 20 and srv.stats.responses.completed == 20


async def test_http2_off_answers_the_preface_as_http11(root: Path) -> None:
    cfg = make_config(root, http2=False)
    async with memory_connection(cfg) as (client, _, _):
        await client.send_raw(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        r = await client.read_response()
    assert r.status == 505


# ---------------------------------------------------------------- stream errors


@pytest.mark.parametrize(
    "headers",
    [
        [(b":method", b"GET"), (b":scheme", b"http"), (b":authority", b"x")],  # no :path
        [(b":method", b"GET"), (b":path", b"/"), (b":scheme", b"http"), (b"X-Up", b"1")],
        [(b":method", b"GET"), (b":path", b"/"), (b":scheme", b"http"), (b"connection", b"x")],
        [(b":method", b"GET"), (b":method", b"GET"), (b":path", b"/"), (b":scheme", b"http")],
        [(b":method", b"GET"), (b"accept", b"*/*"), (b":path", b"/"), (b":scheme", b"http")],
        [(b":method", b"GET"), (b":path", b"/"), (b":scheme", b"http"), (b":status", b"200")],
        [(b":method", b"GET"), (b":path", b"/"), (b":scheme", b"http"), (b"te", b"gzip")],
    ],
    ids=["no-path", "uppercase", "connection", "dup-method", "late-pseudo", "status", "te"],
)
async def test_malformed_request_is_a_stream_error_not_a_connection_error(
    root: Path, headers: list[tuple[bytes, bytes]]
) -> None:
    cfg = make_config(root)
    async with h2_memory(cfg) as (client, srv, _):
        client.conn.config.validate_outbound_headers = False
        client.conn.config.normalize_outbound_headers = False
        bad = client.request(raw=headers)
        await client.flush()
        (r,) = await client.wait(bad)
        ok = await client.get("/hello.txt")  # the connection carries on
    assert r.reset == ErrorCodes.PROTOCOL_ERROR and r.status == 0
    assert ok.status == 200 and client.goaway is None
    assert srv.stats.h2.stream_errors == 1


async def test_connect_is_refused_with_405(root: Path) -> None:
    cfg = make_config(root)
    async with h2_memory(cfg) as (client, _, _):
        sid = client.request(raw=[(b":method", b"CONNECT"), (b":authority", b"example:443")])
        await client.flush()
        (r,) = await client.wait(sid)
    assert r.status == 405


async def test_stream_past_the_limit_is_refused(root: Path) -> None:
    # Zero initial window: the first two responses cannot send their bodies
    # and stay in flight; the third stream is past the limit.
    cfg = make_config(root, h2_max_streams=2)
    async with h2_memory(cfg, settings={S.INITIAL_WINDOW_SIZE: 0}) as (client, srv, _):
        a, b, c = (client.request("/big.bin") for _ in range(3))
        await client.flush()
        (rc,) = await client.wait(c)
        assert rc.reset == ErrorCodes.REFUSED_STREAM
        assert not client.responses[a].done and not client.responses[b].done
        # Open the windows: the two in flight complete.
        client.conn.update_settings({S.INITIAL_WINDOW_SIZE: 1 << 20})
        client.conn.increment_flow_control_window(1 << 20)
        await client.flush()
        ra, rb = await client.wait(a, b)
    assert ra.status == rb.status == 200 and len(ra.body) == len(rb.body) == 300_000
    assert srv.stats.h2.refused_streams == 1


async def test_client_reset_cancels_exactly_that_stream(root: Path) -> None:
    cfg = make_config(root)
    async with h2_memory(cfg, settings={S.INITIAL_WINDOW_SIZE: 0}) as (client, srv, conn):
        warm = await client.get("/hello.txt", method="HEAD")  # opens the root
        assert warm.status == 200
        baseline = open_fd_count()
        stuck = client.request("/big.bin")
        other = client.request("/big.bin")
        await client.flush()
        await wait_until(lambda: _in_flight(conn, sending=True) == 2)
        assert open_fd_count() == baseline + 2  # one descriptor per body in flight
        client.conn.reset_stream(stuck, ErrorCodes.CANCEL)
        await client.flush()
        await wait_until(lambda: _in_flight(conn) == 1)
        assert open_fd_count() == baseline + 1  # its file closed, the other's not
        client.conn.update_settings({S.INITIAL_WINDOW_SIZE: 1 << 20})
        client.conn.increment_flow_control_window(1 << 20)
        await client.flush()
        (r,) = await client.wait(other)
        assert r.status == 200 and len(r.body) == 300_000
        await wait_until(lambda: _in_flight(conn) == 0)
        assert open_fd_count() == baseline
    assert srv.stats.h2.client_resets == 1 and srv.stats.responses.completed == 2


async def test_reset_during_a_pooled_preparation_cancels_the_handler_call(root: Path) -> None:
    cfg = make_config(root, fs_workers=1, fs_queue=4)
    srv = Server(cfg)
    release = trio.Event()
    started = trio.Event()

    async def slow_run(self: object, need: object, now: float) -> object:
        started.set()
        await release.wait()
        raise AssertionError("not reached: the stream is reset first")

    from serverio.pipeline import exchange as exchange_mod
    from serverio.pipeline import handler as handler_mod

    original = handler_mod.Handler.fulfil
    handler_mod.Handler.fulfil = slow_run  # type: ignore[method-assign,assignment]
    closed: list[int] = []
    original_close = exchange_mod.Resolve.close

    def close(self: exchange_mod.Resolve) -> None:
        closed.append(1)
        original_close(self)

    exchange_mod.Resolve.close = close  # type: ignore[method-assign]
    try:
        async with h2_memory(cfg, server=srv) as (client, _, conn):
            sid = client.request("/hello.txt")
            await client.flush()
            await started.wait()
            client.conn.reset_stream(sid, ErrorCodes.CANCEL)
            await client.flush()
            await wait_until(lambda: _in_flight(conn) == 0)
            ok = client.request("/data.bin")
            handler_mod.Handler.fulfil = original  # type: ignore[method-assign]
            await client.flush()
            (r,) = await client.wait(ok)
    finally:
        handler_mod.Handler.fulfil = original  # type: ignore[method-assign]
        exchange_mod.Resolve.close = original_close  # type: ignore[method-assign]
        srv.opener.close()
    assert closed  # the handler's need was closed when its stream was reset
    assert r.status == 200 and len(r.body) == 1024


async def test_fairness_small_responses_are_not_starved_by_a_large_one(root: Path) -> None:
    (root / "huge.bin").write_bytes(os.urandom(4 << 20))
    cfg = make_config(root)
    big_window = {S.INITIAL_WINDOW_SIZE: (1 << 31) - 1}
    async with h2_memory(cfg, settings=big_window) as (client, _, _):
        client.conn.increment_flow_control_window((1 << 31) - 1 - 65535)
        huge = client.request("/huge.bin")
        small = [client.request("/data.bin") for _ in range(8)]
        await client.flush()
        rs = await client.wait(huge, *small)
    assert all(r.status == 200 for r in rs)
    assert len(rs[0].body) == 4 << 20
    # Every small response ended before the large one, which was still
    # mid-body: the writer interleaves streams instead of sending in order.
    assert client.ended_order[-1] == huge
    assert set(client.ended_order[:-1]) == set(small)


# ---------------------------------------------------------------- attacks


async def _assert_calm_and_others_served(client: H2Client, srv: Server, cfg: object) -> None:
    await client.until_closed()
    assert client.goaway is not None
    assert client.goaway.error_code in (ErrorCodes.ENHANCE_YOUR_CALM, ErrorCodes.PROTOCOL_ERROR)
    # A second, well-behaved client on the same server is served.
    async with h2_memory(srv.config, server=srv) as (good, _, _):
        r = await good.get("/hello.txt")
    assert r.status == 200


async def test_rapid_reset_ends_the_connection_with_enhance_your_calm(root: Path) -> None:
    cfg = make_config(root, h2_max_resets=50)
    srv = Server(cfg)
    try:
        async with h2_memory(cfg, server=srv) as (client, _, _):
            for _ in range(60):
                sid = client.request("/big.bin")
                client.conn.reset_stream(sid, ErrorCodes.CANCEL)
            await client.flush()
            await _assert_calm_and_others_served(client, srv, cfg)
        assert client.goaway is not None
        assert client.goaway.error_code == ErrorCodes.ENHANCE_YOUR_CALM
        assert srv.stats.h2.calm == 1
    finally:
        srv.opener.close()


@pytest.mark.parametrize("kind", ["ping", "settings", "empty-data"])
async def test_control_frame_floods_end_the_connection(root: Path, kind: str) -> None:
    cfg = make_config(root, h2_max_control=100)
    srv = Server(cfg)
    try:
        async with h2_memory(cfg, server=srv) as (client, _, _):
            if kind == "ping":
                flood = b"".join(PingFrame(0, b"12345678").serialize() for _ in range(150))
            elif kind == "settings":
                flood = b"".join(SettingsFrame(0).serialize() for _ in range(150))
            else:
                sid = client.request("/hello.txt", end_stream=False)
                await client.flush()
                flood = b"".join(DataFrame(sid, b"").serialize() for _ in range(150))
            await client.send_raw(flood)
            await _assert_calm_and_others_served(client, srv, cfg)
        assert client.goaway is not None
        assert client.goaway.error_code == ErrorCodes.ENHANCE_YOUR_CALM
        assert srv.stats.h2.calm == 1
    finally:
        srv.opener.close()


async def test_continuation_flood_ends_the_connection(root: Path) -> None:
    cfg = make_config(root)
    srv = Server(cfg)
    try:
        async with h2_memory(cfg, server=srv) as (client, _, _):
            first = HeadersFrame(1, b"")  # no END_HEADERS: CONTINUATION must follow
            frames = [first.serialize()]
            frames += [ContinuationFrame(1, b"\x00" * 4000).serialize() for _ in range(50)]
            await client.send_raw(b"".join(frames))
            await _assert_calm_and_others_served(client, srv, cfg)
        assert client.goaway is not None
        assert client.goaway.error_code == ErrorCodes.ENHANCE_YOUR_CALM
    finally:
        srv.opener.close()


async def test_hpack_bomb_ends_the_connection_and_a_large_head_gets_431(root: Path) -> None:
    cfg = make_config(root, max_head_size=8192)
    srv = Server(cfg)
    try:
        async with h2_memory(cfg, server=srv) as (client, _, _):
            # Over the advertised list size, under the hard cap: 431 on the stream.
            r = await client.get("/hello.txt", [("x-big", "a" * 10000)])
            assert r.status == 431
            # One large literal indexed once, then referenced many times: the
            # decoded list grows far past the cap from a small block.
            client.conn.encoder.header_table_size = 4096
            sid = client.request("/hello.txt", headers=[("x-bomb", "b" * 3000)] * 40)
            await client.flush()
            await _assert_calm_and_others_served(client, srv, cfg)
            assert client.responses[sid].status == 0
        assert client.goaway is not None
        assert client.goaway.error_code == ErrorCodes.ENHANCE_YOUR_CALM
    finally:
        srv.opener.close()


async def test_zero_window_stream_is_reset_after_the_write_timeout(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    cfg = make_config(root, write_timeout=7.0, keepalive_timeout=3.0)
    async with h2_memory(cfg, settings={S.INITIAL_WINDOW_SIZE: 0}) as (client, srv, _):
        t0 = trio.current_time()
        sid = client.request("/big.bin")
        await client.flush()
        (r,) = await client.wait(sid)
        t_reset = trio.current_time() - t0
        await client.until_closed()
        t_closed = trio.current_time() - t0
    assert r.status == 200 and r.reset == ErrorCodes.CANCEL and not r.body
    assert 7.0 <= t_reset < 7.5
    # No body on the connection moved either: GOAWAY with the reset, and the
    # connection closes (as an HTTP/1.1 client past its write deadline).
    assert client.goaway is not None and client.goaway.error_code == ErrorCodes.NO_ERROR
    assert 7.0 <= t_closed < 7.5
    assert srv.stats.timeouts.write == 1 and srv.stats.timeouts.keepalive == 0


async def test_idle_connection_gets_goaway_at_the_head_deadline(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    cfg = make_config(root, head_timeout=4.0)
    async with h2_memory(cfg) as (client, srv, _):
        t0 = trio.current_time()
        # PINGs do not extend the deadline.
        for _ in range(3):
            await client.send_raw(PingFrame(0, b"abcdefgh").serialize())
            await trio.sleep(1.0)
        await client.until_closed()
        elapsed = trio.current_time() - t0
    assert client.goaway is not None and client.goaway.error_code == ErrorCodes.NO_ERROR
    assert 4.0 <= elapsed < 4.5
    assert srv.stats.timeouts.head == 1


# ---------------------------------------------------------------- same table as HTTP/1.1

TEXT = ("serverio compresses text on the fly; " * 400).encode()
# (method, target, request fields) -> compared over both protocols.
TABLE: list[tuple[str, str, tuple[tuple[str, str], ...]]] = [
    ("GET", "/hello.txt", ()),
    ("HEAD", "/hello.txt", ()),
    ("GET", "/hello.txt", (("if-modified-since", "Fri, 01 Jan 2100 00:00:00 GMT"),)),
    ("GET", "/hello.txt", (("if-none-match", "*"),)),
    ("GET", "/hello.txt", (("if-match", '"nope"'),)),
    ("GET", "/big.bin", (("range", "bytes=10-19"),)),
    ("GET", "/big.bin", (("range", "bytes=-5"),)),
    ("GET", "/big.bin", (("range", "bytes=999999-"),)),
    ("GET", "/big.bin", (("range", "bytes=0-1,5-6"),)),
    ("GET", "/text.txt", (("accept-encoding", "gzip"),)),
    ("GET", "/text.txt", (("accept-encoding", "identity"),)),
    ("GET", "/noindex/", ()),
    ("GET", "/noindex", ()),
    ("GET", "/sub/", ()),
    ("GET", "/missing.txt", ()),
    ("GET", "/.secret", ()),
    ("GET", "/../outside/secret.txt", ()),
    ("GET", "/caf%C3%A9.txt", ()),
    ("POST", "/hello.txt", ()),
    ("DELETE", "/hello.txt", ()),
    ("OPTIONS", "/hello.txt", ()),
    ("GET", "/big.bin", ()),
]
_COMPARED = (
    "content-type",
    "content-length",
    "content-range",
    "content-encoding",
    "etag",
    "last-modified",
    "vary",
    "location",
    "allow",
    "accept-ranges",
    "cache-control",
)


@pytest.mark.parametrize("fs_workers", [0, 2])
async def test_same_responses_as_http11(root: Path, fs_workers: int) -> None:
    (root / "text.txt").write_bytes(TEXT)
    cfg = make_config(root, fs_workers=fs_workers, fs_queue=8 if fs_workers else 0)
    srv = Server(cfg)
    try:
        h1: list[tuple[int, dict[str, str], bytes]] = []
        async with srv.handler.running(), trio.open_nursery() as nursery:
            for method, target, fields in TABLE:
                # A fresh HTTP/1.1 connection per row (some answers close).
                ours, theirs = trio.testing.memory_stream_pair()
                nursery.start_soon(ConnectionTask(srv.env, theirs, "memory").run)
                client = HTTPClient(ours, theirs)
                extra = "".join(f"{k}: {v}\r\n" for k, v in fields)
                r = await client.get(target, extra, method=method)
                h1.append((r.status, {k.lower(): v for k, v in r.headers.items()}, r.body))
                await ours.aclose()
        h2r: list[tuple[int, dict[str, str], bytes]] = []
        async with h2_memory(cfg, server=srv) as (c2, _, _):
            for method, target, fields in TABLE:
                r2 = await c2.get(target, list(fields), method=method)
                h2r.append((r2.status, r2.headers, bytes(r2.body)))
    finally:
        srv.opener.close()
    for (method, target, _), (s1, hs1, b1), (s2, hs2, b2) in zip(TABLE, h1, h2r, strict=True):
        where = f"{method} {target}"
        assert s1 == s2, where
        for name in _COMPARED:
            if name == "content-type" and hs1.get(name, "").startswith("multipart/"):
                assert hs2[name].startswith("multipart/byteranges; boundary="), where
                continue
            if name == "content-length" and "multipart" in hs1.get("content-type", ""):
                continue  # boundaries differ per response
            assert hs1.get(name) == hs2.get(name), f"{where}: {name}"
        if "multipart" not in hs1.get("content-type", ""):
            assert b1 == b2, where
    statuses = [s for s, _, _ in h1]
    assert {200, 206, 301, 304, 404, 405, 412, 416, 204} <= set(statuses)


async def test_encoder_table_stays_bounded_whatever_the_client_allows(root: Path) -> None:
    cfg = make_config(root)
    async with h2_memory(cfg, settings={S.HEADER_TABLE_SIZE: 1 << 30}) as (client, _, conn):
        for name in ("hello.txt", "data.bin", "index.html", "sub/", "noindex/"):
            r = await client.get(f"/{name}")
            assert r.status == 200
        h = getattr(conn, "_switched", None)
        assert isinstance(h, H2Connection)
        assert h._conn.encoder.header_table_size == 4096


# ---------------------------------------------------------------- site rules


async def test_site_rules_apply_to_http2_streams_too(root: Path, tmp_path: Path) -> None:
    """Basic auth, header rules and CORS are not an HTTP/1.1 feature: an
    HTTP/2 stream goes through the same site rules, so switching protocol
    is never a way around a password."""
    import base64

    from serverio.site.passwords import hash_password

    users = tmp_path / "users.htpasswd"
    users.write_text(f"alice:{hash_password('wonderland', 1000)}\n")
    cfg = make_config(root, auth_file=str(users), headers=("X-Rule: on",))
    token = base64.b64encode(b"alice:wonderland").decode()
    async with h2_memory(cfg) as (client, _, _):
        anonymous = await client.get("/hello.txt")
        wrong = await client.get("/hello.txt", [("authorization", "Basic eDp5")])
        alice = await client.get("/hello.txt", [("authorization", f"Basic {token}")])
    assert anonymous.status == 401 and b"hello" not in bytes(anonymous.body)
    assert "www-authenticate" in anonymous.headers
    assert wrong.status == 401
    assert alice.status == 200 and bytes(alice.body) == b"hello world\n"
    assert alice.headers["x-rule"] == "on" and anonymous.headers["x-rule"] == "on"


async def test_lame_duck_ends_an_http2_connection_after_its_next_response(root: Path) -> None:
    """During --shutdown-delay (env.draining before the listener closes) an
    HTTP/2 response is followed by GOAWAY, as an HTTP/1.1 one carries
    Connection: close: the balancer moves the client to another replica."""
    cfg = make_config(root)
    async with h2_memory(cfg) as (client, srv, _):
        first = await client.get("/hello.txt")
        no_goaway_yet = client.goaway is None
        srv.env.draining = True  # what serve() sets when the delay starts
        second = await client.get("/hello.txt")
        with trio.fail_after(5):
            while client.goaway is None and await client.pump():
                pass
    assert first.status == 200 and no_goaway_yet
    assert second.status == 200 and bytes(second.body) == b"hello world\n"
    assert client.goaway is not None and client.goaway.error_code == ErrorCodes.NO_ERROR
    assert client.goaway.last_stream_id == 3
