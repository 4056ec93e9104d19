"""Live reload (--watch): injection, the event stream, the watcher, shutdown."""

from __future__ import annotations

import base64
import gzip
import hashlib
import os
import re
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import trio
import trio.testing

from serverio.app.server import Server
from serverio.concurrency.broadcast import CREATED, GONE, MODIFIED, Broadcast, Debouncer
from serverio.config import Config
from serverio.errors import ConfigError
from serverio.fs import watch as fswatch
from serverio.http.core import Plan, RequestFacts, route
from serverio.http.target import parse_target
from serverio.live.protocol import (
    csp_blocks_scripts,
    decide_injected,
    inject_html,
    injected_coding,
    injected_etag,
    injected_precondition,
    watch_csp,
)
from serverio.live.script import live_assets, sse_reload
from serverio.pipeline.exchange import Final
from serverio.pipeline.stages import begin

from .conftest import connect, make_config, memory_connection, running_server, wait_until

TAG = b"<script>x</script>"
ASSETS = live_assets("/.serverio")


# ------------------------------------------------------------------ pure


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"<html><body><p>x</p></body></html>", b"<html><body><p>x</p>" + TAG + b"</body></html>"),
        (b"<HTML><BODY>x</BODY></HTML>", b"<HTML><BODY>x" + TAG + b"</BODY></HTML>"),
        # The last </body> counts (an earlier one inside a comment or text).
        (b"<!-- </body> --><body>y</body>", b"<!-- </body> --><body>y" + TAG + b"</body>"),
        (b"<html><p>no body tag</p></html>", b"<html><p>no body tag</p>" + TAG + b"</html>"),
        (b"<p>fragment", b"<p>fragment" + TAG),
        (b"", TAG),
        (b"\xef\xbb\xbf<body>bom</body>", b"\xef\xbb\xbf<body>bom" + TAG + b"</body>"),
        ("\ufeff<body>u16</body>".encode("utf-16-le"), None),
        ("\ufeff<body>u16</body>".encode("utf-16-be"), None),
        (gzip.compress(b"<body>zipped</body>", mtime=0), None),
    ],
)
def test_inject_html_places_the_script(body: bytes, expected: bytes | None) -> None:
    assert inject_html(body, TAG) == expected


def test_injected_etag_is_a_different_validator() -> None:
    assert injected_etag('"abc"') == '"abc-lr"'
    assert injected_etag('W/"abc"') == 'W/"abc-lr"'


def _req(target: str = "/p.html", method: bytes = b"GET", **kw: object) -> RequestFacts:
    return replace(RequestFacts(method, parse_target(method, target.encode())), **kw)  # type: ignore[arg-type]


BASE = Plan(
    200,
    (
        (b"date", b"D"),
        (b"last-modified", b"L"),
        (b"etag", b'"base"'),
        (b"accept-ranges", b"bytes"),
        (b"content-type", b"text/html"),
        (b"content-length", b"4"),
    ),
    (b"page",),
)


def test_decide_injected_has_its_own_etag_and_length() -> None:
    body = b"page" + TAG
    plan = decide_injected(_req(), BASE, body, 100, 0.0, ASSETS)
    hs = dict(plan.headers)
    assert plan.status == 200 and plan.body == (body,)
    assert hs[b"etag"] == b'"base-lr"' and hs[b"content-length"] == b"%d" % len(body)
    assert hs[b"accept-ranges"] == b"none"
    # Revalidation with the injected tag: 304; with the plain file's tag: 200.
    assert (
        decide_injected(_req(if_none_match='"base-lr"'), BASE, body, 100, 0.0, ASSETS).status == 304
    )
    assert decide_injected(_req(if_none_match='"base"'), BASE, body, 100, 0.0, ASSETS).status == 200
    assert decide_injected(_req(if_match='"base"'), BASE, body, 100, 0.0, ASSETS).status == 412
    # Range is ignored (whole injected bytes); HEAD sends no body.
    assert decide_injected(_req(range="bytes=0-1"), BASE, body, 100, 0.0, ASSETS).status == 200
    assert not decide_injected(_req(method=b"HEAD"), BASE, body, 100, 0.0, ASSETS).send_body


def test_injected_coding_follows_the_file_rules_on_the_injected_size(root: Path) -> None:
    cfg = make_config(root)
    varied = replace(BASE, headers=(*BASE.headers, (b"vary", b"Accept-Encoding")))
    gz = "gzip"
    assert injected_coding(_req(accept_encoding=gz), varied, 1000, cfg) == "gzip"
    # Not negotiated for the base (a listing): identity.
    assert injected_coding(_req(accept_encoding=gz), BASE, 1000, cfg) == ""
    assert injected_coding(_req(range="bytes=0-1", accept_encoding=gz), varied, 1000, cfg) == ""
    assert injected_coding(_req(accept_encoding=gz), varied, 100, cfg) == ""  # below the minimum
    assert injected_coding(_req(), varied, 1000, cfg) == ""
    off = make_config(root, compress_max_size=0)
    # On the fly only: with compression off, sidecars do not count.
    assert injected_coding(_req(accept_encoding=gz), varied, 1000, off) == ""
    # The coded variant: its own tag, matched by its own validator only.
    plan = decide_injected(_req(accept_encoding=gz), varied, b"GZ", 100, 0.0, ASSETS, coding="gzip")
    hs = dict(plan.headers)
    assert hs[b"etag"] == b'"base-lr-gzip"' and hs[b"content-encoding"] == b"gzip"
    assert hs[b"content-length"] == b"2" and hs[b"vary"] == b"Accept-Encoding"
    pre = injected_precondition(_req(if_none_match='"base-lr-gzip"'), varied, 100, 0.0, "gzip")
    assert pre is not None and pre.status == 304
    assert dict(pre.headers)[b"etag"] == b'"base-lr-gzip"'
    assert injected_precondition(_req(if_none_match='"base-lr"'), varied, 100, 0.0, "gzip") is None


def test_listing_csp_allows_exactly_the_injected_script() -> None:
    base = replace(
        BASE, headers=(*BASE.headers, (b"content-security-policy", b"default-src 'none'"))
    )
    plan = decide_injected(_req("/d/"), base, b"x" + ASSETS.tag, None, 0.0, ASSETS)
    csp = dict(plan.headers)[b"content-security-policy"].decode()
    digest = base64.b64encode(hashlib.sha256(ASSETS.script).digest()).decode()
    assert csp == f"default-src 'none'; script-src 'sha256-{digest}'; connect-src 'self'"
    assert ASSETS.tag == b"<script>" + ASSETS.script + b"</script>"


H = ASSETS.script_source.decode()


@pytest.mark.parametrize(
    ("csp", "expected"),
    [
        # No script-src: added with default-src's sources (not narrowed to ours).
        ("default-src 'self'", f"default-src 'self'; script-src 'self' {H}"),
        ("default-src 'none'", f"default-src 'none'; script-src {H}; connect-src 'self'"),
        # Present: our source joins the first occurrence (the enforced one).
        (
            "script-src 'self'; connect-src 'none'; script-src *",
            f"script-src 'self' {H}; connect-src 'self'; script-src *",
        ),
        ("Script-Src https://cdn.example", f"Script-Src https://cdn.example {H}"),
        # 'unsafe-inline' alone runs it already; a hash would switch it off.
        ("script-src 'self' 'unsafe-inline'", "script-src 'self' 'unsafe-inline'"),
        ("script-src 'unsafe-inline' 'nonce-abc'", f"script-src 'unsafe-inline' 'nonce-abc' {H}"),
        # script-src-elem governs elements: edited, script-src left alone.
        (
            "default-src 'none'; script-src-elem 'self'",
            f"default-src 'none'; script-src-elem 'self' {H}; connect-src 'self'",
        ),
        # Nothing restricts scripts or connections: unchanged.
        ("frame-ancestors 'none'", "frame-ancestors 'none'"),
        ("", ""),
    ],
)
def test_watch_csp_lets_the_script_through_and_narrows_nothing(csp: str, expected: str) -> None:
    assert watch_csp(csp.encode(), ASSETS).decode() == expected


def test_csp_blocks_scripts_only_for_a_sandbox_without_allow_scripts() -> None:
    assert csp_blocks_scripts(b"default-src 'self'; sandbox")
    assert csp_blocks_scripts(b"sandbox allow-forms")
    assert not csp_blocks_scripts(b"sandbox allow-scripts allow-forms")
    assert not csp_blocks_scripts(b"script-src 'none'")


async def test_a_header_rule_csp_is_sent_beside_the_listing_csp_and_lets_the_script_run(
    root: Path,
) -> None:
    rule = ("/**", (("Content-Security-Policy", "default-src 'self'"),), ())
    cfg = make_config(root, watch=True, header_rules=(rule,))
    async with memory_connection(cfg) as (client, _, _):
        listing = await client.get("/noindex/")
        page = await client.get("/")
    digest = base64.b64encode(hashlib.sha256(ASSETS.script).digest()).decode()
    script = f"'sha256-{digest}'"
    csps = [v.decode() for n, v in listing.raw_headers if n.lower() == b"content-security-policy"]
    # Both policies are enforced: the listing's own (strict, with the
    # script's hash) is not replaced; the rule's lets the script run too.
    assert len(csps) == 2
    assert csps[0].startswith("default-src 'none'; style-src 'sha256-")
    # The listing's two scripts keep their hashes; the live script's is
    # added; the listing already allows connect-src 'self' (its fetches).
    assert re.search(f"; script-src '[^' ]+' '[^' ]+' {re.escape(script)};", csps[0])
    assert "; connect-src 'self';" in csps[0]
    assert csps[1] == f"default-src 'self'; script-src 'self' {script}"
    assert ASSETS.tag in listing.body and ASSETS.tag in page.body
    assert [v for n, v in page.raw_headers if n.lower() == b"content-security-policy"] == [
        f"default-src 'self'; script-src 'self' {script}".encode()
    ]


def test_a_sandboxing_rule_csp_under_watch_warns(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from serverio.site.service import load_site

    rule = ("/app/**", (("Content-Security-Policy", "sandbox allow-forms"),), ())
    with caplog.at_level("WARNING", logger="serverio"):
        load_site(make_config(root, header_rules=(rule,)))
    assert caplog.text == ""
    with caplog.at_level("WARNING", logger="serverio"):
        load_site(make_config(root, watch=True, header_rules=(rule,)))
    assert "header rule for /app/** sandboxes pages without allow-scripts" in caplog.text


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        # One editor save (vim): backup by rename, new file, write, close,
        # backup deleted: one change of the page, the backup is transient.
        (
            [
                ("p.html", GONE),
                ("p.html~", CREATED),
                ("p.html", CREATED),
                ("p.html", MODIFIED),
                ("p.html~", GONE),
            ],
            {"p.html": "changed"},
        ),
        ([("a.css", MODIFIED), ("a.css", MODIFIED)], {"a.css": "changed"}),
        ([("old.html", GONE)], {"old.html": "gone"}),
        ([("4913", CREATED), ("4913", GONE)], {}),
    ],
)
def test_debouncer_merges_one_save_into_one_batch(
    events: list[tuple[str, str]], expected: dict[str, str]
) -> None:
    d = Debouncer(0.05, 0.5)
    for i, e in enumerate(events):
        d.add([e], 10.0 + i * 0.001)
    assert d.take(10.0 + 0.04) is None  # still inside the quiet window
    assert d.deadline() == pytest.approx(10.0 + (len(events) - 1) * 0.001 + 0.05)
    assert d.take(d.deadline()) == expected
    assert d.deadline() == float("inf") and d.take(100.0) is None


def test_debouncer_fires_by_max_delay_while_events_keep_coming() -> None:
    d = Debouncer(0.05, 0.5)
    t = 0.0
    while t < 0.6:
        d.add([("log.html", MODIFIED)], t)
        if d.take(t) is not None:
            break
        t += 0.01
    assert t == pytest.approx(0.5, abs=0.011)


async def test_broadcast_queue_is_bounded_and_a_slow_reader_gets_reload() -> None:
    b = Broadcast(3, b"RELOAD")
    slow, fast = b.subscribe(), b.subscribe()
    for i in range(10):
        b.publish([b"m%d" % i])
        if i < 2:
            assert await b.next(fast, 1) == b"m%d" % i
    assert len(slow.queue) == 0 and slow.overflowed  # nothing buffered past the limit
    assert await b.next(slow, 1) == b"RELOAD"
    assert await b.next(fast, 1) == b"RELOAD"  # it fell behind too, after m1
    b.unsubscribe(slow)
    b.publish([b"after"])
    assert await b.next(fast, 1) == b"after"
    assert b.subscribers == {fast}


def _routed(cfg: Config, req: RequestFacts) -> Plan:
    # The pipeline's first step: the hooks' router, then the core's route.
    _, got = begin(Server(cfg).env, req, 0.0)
    assert type(got) is Final
    return got.plan


def test_reserved_paths_are_routed_before_the_hidden_rule(root: Path) -> None:
    on = make_config(root, watch=True)
    off = make_config(root)
    events = _req("/.serverio/events")
    plan = _routed(on, events)
    assert plan.stream and plan.status == 200
    assert dict(plan.headers)[b"content-type"] == b"text/event-stream"
    assert not _routed(on, _req("/.serverio/events", method=b"HEAD")).send_body
    script = _routed(on, _req("/.serverio/livereload.js"))
    assert script.status == 200 and script.body == (ASSETS.script,)
    for cfg in (on, off):
        # Anything else under the prefix is an ordinary hidden path.
        assert _routed(cfg, _req("/.serverio/other")).status == 404
        # Only GET and HEAD are the router's: the core answers the rest.
        assert _routed(cfg, _req("/.serverio/events", method=b"POST")).status == 405
        assert _routed(cfg, _req("/.serverio/events", method=b"OPTIONS")).status == 204
    assert _routed(off, events).status == 404
    # The core itself knows no reserved path: a hidden one is a 404.
    core = route(events, on, 0.0)
    assert core is not None and core.status == 404


def test_a_real_file_at_a_reserved_path_is_a_startup_error(root: Path) -> None:
    (root / ".serverio").mkdir()
    (root / ".serverio" / "events").write_text("mine")
    with pytest.raises(ConfigError, match="reserved"):
        make_config(root, watch=True)
    make_config(root)  # without --watch the file is just a hidden file
    with pytest.raises(ConfigError, match="watch-prefix"):
        make_config(root, watch=True, watch_prefix="/visible")


# ------------------------------------------------------------------ served


async def _read_until(stream: trio.abc.Stream, marker: bytes, limit: float = 5.0) -> bytes:
    data = b""
    with trio.fail_after(limit):
        while marker not in data:
            chunk = await stream.receive_some(65536)
            if not chunk:
                raise EOFError(data)
            data += chunk
    return data


async def _open_events(port: int) -> trio.SocketStream:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(b"GET /.serverio/events HTTP/1.1\r\nHost: t\r\n\r\n")
    await _read_until(stream, b"serverio live reload\n\n")
    return stream


async def test_html_is_injected_and_nothing_else(root: Path) -> None:
    (root / "style.css").write_text("p{color:red}")
    async with running_server(make_config(root, watch=True)) as (srv, port):
        client = await connect(port)
        page = await client.get("/")
        assert page.status == 200 and page.body == b"<h1>home</h1>\n" + ASSETS.tag
        assert page.header("content-length") == str(len(page.body))
        etag = page.header("etag")
        assert etag is not None and etag.endswith('-lr"')
        again = await client.get("/", f"If-None-Match: {etag}\r\n")
        assert again.status == 304 and again.header("etag") == etag
        assert (await client.get("/", "Range: bytes=0-3\r\n")).status == 200
        css = await client.get("/style.css")
        assert (
            css.body == b"p{color:red}"
            and css.header(
                "etag",
            )
            is not None
        )
        assert not css.header("etag").endswith('-lr"')  # type: ignore[union-attr]
        assert (await client.get("/hello.txt")).body == b"hello world\n"
        listing = await client.get("/noindex/")
        assert ASSETS.tag + b"</body>" in listing.body
        assert "script-src 'sha256-" in (listing.header("content-security-policy") or "")
        missing = await client.get("/gone.html", "Accept: text/html\r\n")
        assert missing.status == 404 and ASSETS.tag in missing.body
        assert missing.header("content-type") == "text/html; charset=utf-8"
        plain = await client.get("/gone.html")
        assert plain.body == b"404 Not Found\n"
        js = await client.get("/.serverio/livereload.js")
        assert js.body == ASSETS.script
        assert (await client.get("/.secret")).status == 404  # hidden rule unchanged
        await client.stream.aclose()
    # inotify on Linux; elsewhere (Windows) the poll watcher.
    assert srv.live is not None and srv.live.backend == (
        "inotify" if sys.platform.startswith("linux") else "poll"
    )


async def test_event_stream_keepalive_comments_and_no_idle_timeout(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    cfg = make_config(root, watch=True, keepalive_timeout=3)
    async with memory_connection(cfg) as (client, srv, _):
        await client.send_raw(b"GET /.serverio/events HTTP/1.1\r\nHost: t\r\n\r\n")
        start = trio.current_time()
        head = await _read_until(client.stream, b"serverio live reload\n\n")
        assert head.startswith(b"HTTP/1.1 200 OK\r\n")
        assert b"Content-Type: text/event-stream\r\n" in head and b"Connection: close" in head
        for n in (1, 2, 3):
            await _read_until(client.stream, b": keep-alive\n\n", limit=100)
            assert trio.current_time() - start == pytest.approx(15 * n, abs=0.01)
        assert srv.stats.timeouts.keepalive == 0
        assert srv.live is not None
        srv.live.publish({"a.css": "changed", "b.css": "changed"})
        got = await _read_until(client.stream, b"data: /b.css\n\n")
        assert got == b"event: css\ndata: /a.css\n\nevent: css\ndata: /b.css\n\n"
        srv.live.publish({"x.html": "changed"})
        assert await _read_until(client.stream, b"\n\n") == sse_reload()


async def test_shutdown_closes_event_streams_first(root: Path) -> None:
    cfg = make_config(root, watch=True, shutdown_timeout=10)
    srv = Server(cfg.evolve(host="127.0.0.1", port=0))
    async with trio.open_nursery() as nursery:
        await nursery.start(srv.serve)
        port = srv.addresses()[0][1]
        streams = [await _open_events(port) for _ in range(3)]
        assert srv.live is not None
        await wait_until(lambda: len(srv.live.broadcast.subscribers) == 3)  # type: ignore[union-attr]
        start = trio.current_time()
        srv.shutdown()
        for s in streams:
            assert await s.receive_some(65536) == b""  # closed, not left to the deadline
            await s.aclose()
    # Everything (streams, watcher, pools) ended long before shutdown_timeout.
    assert trio.current_time() - start < 2
    assert srv.abandoned_threads == 0 and srv.live.broadcast.subscribers == set()


async def test_event_streams_have_their_own_budget_outside_max_connections(root: Path) -> None:
    # N + 1 event streams against --max-connections N: the streams leave
    # the connection budget, the one past --watch-max-streams gets a 503,
    # and ordinary clients are served meanwhile.
    cfg = make_config(root, watch=True, max_connections=2, watch_max_streams=2)
    async with running_server(cfg) as (srv, port):
        events = [await _open_events(port) for _ in range(2)]
        assert srv.live is not None
        slots = srv.live.slots
        assert slots.open == 2 and len(slots) == 2
        extra = await connect(port)
        refused = await extra.get("/.serverio/events")
        assert refused.status == 503 and refused.header("retry-after") == "1"
        assert slots.refused == 1 and slots.open == 2
        await extra.stream.aclose()
        clients = [await connect(port) for _ in range(2)]  # the whole connection budget
        for c in clients:
            assert (await c.get("/hello.txt")).status == 200
        # Past --max-connections (streams left out), ordinary clients are shed.
        third = await connect(port)
        assert (await third.get("/hello.txt")).status == 503
        for c in [*clients, third]:
            await c.stream.aclose()
        # A stream that ends gives its slot back; a new one is served.
        await events.pop().aclose()
        await wait_until(lambda: slots.open == 1)
        events.append(await _open_events(port))
        for e in events:
            await e.aclose()
        await wait_until(lambda: slots.open == 0 and len(slots) == 0)


async def test_an_event_client_that_stops_reading_is_closed_after_the_write_timeout(
    root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # Lockstep memory streams: a write completes only when the client reads.
    # The client reads the head, then nothing: the next heartbeat (15 s)
    # stalls, and write_timeout later the stream is closed, its slot and
    # subscription given back.
    cfg = make_config(root, watch=True, write_timeout=7.0)
    async with memory_connection(cfg, lockstep=True) as (client, srv, _):
        await client.send_raw(b"GET /.serverio/events HTTP/1.1\r\nHost: t\r\n\r\n")
        t0 = trio.current_time()
        await _read_until(client.stream, b"serverio live reload\n\n")
        live = srv.live
        assert live is not None and live.slots.open == 1
        await wait_until(lambda: live.slots.open == 0, limit=100)
        assert trio.current_time() - t0 == pytest.approx(15 + 7.0, abs=0.01)
        assert srv.stats.timeouts.write == 1 and live.broadcast.subscribers == set()


# ------------------------------------------------------------------ watcher


async def _changes(srv: Server, events: trio.SocketStream, action: object, marker: bytes) -> bytes:
    assert srv.live is not None
    before = srv.live.batches
    action()  # type: ignore[operator]
    data = await _read_until(events, marker)
    # Exactly one batch per action (debounced), nothing more after it.
    await trio.sleep(0.3)
    assert srv.live.batches == before + 1, data
    return data


@pytest.mark.parametrize(
    "poll",
    [
        pytest.param(
            False,
            id="inotify",
            marks=pytest.mark.skipif(
                not sys.platform.startswith("linux"), reason="needs inotify (Linux)"
            ),
        ),
        pytest.param(True, id="poll"),
    ],
)
async def test_watcher_reports_each_edit_rename_and_delete_once(root: Path, poll: bool) -> None:
    (root / "css").mkdir()
    (root / "css" / "a.css").write_text("p{}")
    async with running_server(make_config(root, watch=True, watch_poll=poll)) as (srv, port):
        assert srv.live is not None
        assert srv.live.backend == ("poll" if poll else "inotify")
        srv.live.poll_interval = 0.1
        events = await _open_events(port)
        r = await _changes(
            srv, events, lambda: (root / "css" / "a.css").write_text("p{a}"), b"\n\n"
        )
        assert r == b"event: css\ndata: /css/a.css\n\n"
        reload = sse_reload()
        assert (
            await _changes(
                srv, events, lambda: (root / "hello.txt").write_text("edited\n"), b"\n\n"
            )
            == reload
        )
        assert (
            await _changes(
                srv, events, lambda: os.rename(root / "hello.txt", root / "moved.txt"), b"\n\n"
            )
            == reload
        )
        assert await _changes(srv, events, lambda: os.unlink(root / "moved.txt"), b"\n\n") == reload
        # A new directory is watched too.
        (root / "new").mkdir()
        await trio.sleep(0.3)
        await _read_until(events, b"\n\n")
        r = await _changes(
            srv, events, lambda: (root / "new" / "n.html").write_text("<p>"), b"\n\n"
        )
        assert r == reload
        # Dot paths reload nothing.
        before = srv.live.batches
        (root / ".git").mkdir()
        (root / ".git" / "HEAD").write_text("ref")
        (root / ".secret").write_text("changed")
        await trio.sleep(0.5 if poll else 0.3)
        assert srv.live.batches == before
        await events.aclose()


async def test_a_change_invalidates_the_pooled_warm_cache(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Files are cached only once settled; make "just written" settled.
    monkeypatch.setattr("serverio.fs.filecache.RACY_SECONDS", -1.0)
    page = root / "page.txt"
    page.write_text("version 1")
    old = time.time() - 100
    os.utime(page, (old, old))
    cfg = make_config(root, watch=True, fs_workers=1, fs_queue=4, fs_cache_valid=3600)
    async with running_server(cfg) as (srv, port):
        client = await connect(port)
        assert (await client.get("/page.txt")).body == b"version 1"
        assert (await client.get("/page.txt")).body == b"version 1"
        assert srv.files.stats.hits >= 1  # served from memory inside the window
        assert (await client.get("/noindex/")).status == 200
        assert len(srv.content.listings) == 1
        assert srv.live is not None
        batches = srv.live.batches
        page.write_text("version 2")  # same size
        os.utime(page, (old - 50, old - 50))
        await wait_until(lambda: srv.live.batches > batches)  # type: ignore[union-attr]
        assert (await client.get("/page.txt")).body == b"version 2"
        assert len(srv.content.listings) == 0
        await client.stream.aclose()


def test_poll_diff_reports_created_modified_gone() -> None:
    old = {"a": (1, 1, 1, 1), "b": (2, 1, 1, 1), "d": (9,)}
    new = {"a": (1, 2, 2, 2), "c": (3, 1, 1, 1), "d": (9,)}
    assert sorted(fswatch.poll_diff(old, new)) == [
        ("a", MODIFIED),
        ("b", GONE),
        ("c", CREATED),
    ]


def test_watch_config_defaults() -> None:
    assert Config().live.watch is False and Config().live.watch_prefix == "/.serverio"


async def test_a_stuck_polling_scan_is_abandoned_at_shutdown(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from serverio.live import service as livereload

    release = threading.Event()
    scans = 0
    real = fswatch.poll_scan

    def scan(root_: str, hidden: bool) -> tuple[dict[str, tuple[int, ...]], bool]:
        nonlocal scans
        scans += 1
        if scans > 1:
            release.wait(10)  # a scan stuck on a hung network filesystem
        return real(root_, hidden)

    monkeypatch.setattr(livereload, "poll_scan", scan)
    cfg = make_config(root, watch=True, watch_poll=True, shutdown_timeout=0.5)
    srv = Server(cfg.evolve(host="127.0.0.1", port=0))
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(srv.serve)
            assert srv.live is not None
            srv.live.poll_interval = 0.05
            await wait_until(lambda: scans > 1)
            start = trio.current_time()
            srv.shutdown()
        # serve() returned at the deadline, the watch thread counted as abandoned.
        assert trio.current_time() - start < 2
        assert srv.abandoned_threads == 1
    finally:
        release.set()


# ------------------------------------------------------------------ compression


PAGE = "<!doctype html><html><body>" + "<p>a paragraph of the page</p>\n" * 40 + "</body></html>"


def _gunzip_or_unbrotli(coding: str, body: bytes) -> bytes:
    if coding == "gzip":
        return gzip.decompress(body)
    import brotli

    return bytes(brotli.decompress(body))


async def test_injected_html_is_compressed_with_its_own_etag_per_coding(root: Path) -> None:
    page = root / "page.html"
    page.write_text(PAGE)
    # A precompressed sidecar of the original holds the bytes without the
    # script: it must not answer for the injected variant.
    sidecar = root / "page.html.gz"
    sidecar.write_bytes(gzip.compress(PAGE.encode()))
    later = page.stat().st_mtime + 10
    os.utime(sidecar, (later, later))
    expected = inject_html(PAGE.encode(), ASSETS.tag)
    assert expected is not None
    async with memory_connection(make_config(root, watch=True)) as (client, _, _):
        plain = await client.get("/page.html")
        assert plain.body == expected and plain.header("content-encoding") is None
        assert plain.header("vary") == "Accept-Encoding"
        plain_etag = plain.header("etag")
        assert plain_etag is not None and plain_etag.endswith('-lr"')
        for coding in ("gzip", "br"):
            r = await client.get("/page.html", f"Accept-Encoding: {coding}\r\n")
            assert r.status == 200 and r.header("content-encoding") == coding
            assert _gunzip_or_unbrotli(coding, r.body) == expected
            assert r.header("content-length") == str(len(r.body)) and len(r.body) < len(expected)
            assert r.header("vary") == "Accept-Encoding"
            assert r.header("etag") == plain_etag[:-1] + f'-{coding}"'
            assert r.header("accept-ranges") == "none"
            # Revalidation: the coded tag matches its own coding only.
            again = await client.get(
                "/page.html", f"Accept-Encoding: {coding}\r\nIf-None-Match: {r.header('etag')}\r\n"
            )
            assert again.status == 304 and again.header("etag") == r.header("etag")
            assert again.header("vary") == "Accept-Encoding"
            other = await client.get(
                "/page.html", f"Accept-Encoding: {coding}\r\nIf-None-Match: {plain_etag}\r\n"
            )
            assert other.status == 200 and other.header("content-encoding") == coding
            head = await client.get("/page.html", f"Accept-Encoding: {coding}\r\n", method="HEAD")
            assert head.body == b"" and head.header("content-length") == r.header("content-length")
            assert head.header("etag") == r.header("etag")
        # A Range request gets the identity injected bytes, whole.
        ranged = await client.get("/page.html", "Accept-Encoding: gzip\r\nRange: bytes=0-9\r\n")
        assert ranged.status == 200 and ranged.body == expected
        assert ranged.header("content-encoding") is None
        # The size rule applies to the injected bytes: a 14-byte page with
        # the script is past the minimum and compressed.
        small = await client.get("/", "Accept-Encoding: gzip\r\n")
        assert small.header("content-encoding") == "gzip"
        assert gzip.decompress(small.body) == b"<h1>home</h1>\n" + ASSETS.tag


async def test_injected_html_stays_identity_without_on_the_fly_compression(root: Path) -> None:
    (root / "page.html").write_text(PAGE)
    cfg = make_config(root, watch=True, compress_max_size=0)
    async with memory_connection(cfg) as (client, _, _):
        r = await client.get("/page.html", "Accept-Encoding: gzip\r\n")
        assert r.status == 200 and r.header("content-encoding") is None
        assert r.body == inject_html(PAGE.encode(), ASSETS.tag)


async def test_injected_html_is_compressed_over_a_real_socket(root: Path) -> None:
    (root / "page.html").write_text(PAGE)
    expected = inject_html(PAGE.encode(), ASSETS.tag)
    async with running_server(make_config(root, watch=True)) as (srv, port):
        client = await connect(port)
        r = await client.get("/page.html", "Accept-Encoding: gzip, br;q=0.5\r\n")
        assert r.status == 200 and r.header("content-encoding") == "gzip"
        assert gzip.decompress(r.body) == expected
        assert r.header("content-length") == str(len(r.body))
        assert r.header("vary") == "Accept-Encoding"
        etag = r.header("etag")
        assert etag is not None and etag.endswith('-lr-gzip"')
        # Served from the compression cache the second time; an edit
        # replaces it (the watcher clears every cache).
        hits = srv.content.compressed.stats.hits
        assert (await client.get("/page.html", "Accept-Encoding: gzip\r\n")).body == r.body
        assert srv.content.compressed.stats.hits == hits + 1
        assert srv.live is not None
        batches = srv.live.batches
        (root / "page.html").write_text(PAGE.replace("a paragraph", "an edited paragraph"))
        await wait_until(lambda: srv.live.batches > batches)  # type: ignore[union-attr]
        edited = await client.get("/page.html", "Accept-Encoding: gzip\r\n")
        assert b"an edited paragraph" in gzip.decompress(edited.body)
        assert edited.header("etag") != etag
        await client.stream.aclose()
