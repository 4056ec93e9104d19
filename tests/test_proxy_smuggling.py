"""A request-smuggling corpus against the proxy: nothing ambiguous reaches
the recording upstream (tests/proxy_upstream.py).

Each payload hides a second request (``GET /api/json?smuggled=1``) behind a
framing two parsers could read differently (RFC 9112 §6.1, §6.3, §11.2).
The HTTP/1.1 transport refuses the ambiguous ones (wire/bodyframe.py, h11)
before the proxy runs; the upstream request is re-serialised by h11 from
the framing serverio chose, so even an accepted payload can only ever
reach the upstream as the one request serverio saw."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.conftest import make_config, running_server
from tests.proxy_upstream import upstream

SMUGGLED = b"GET /api/json?smuggled=1 HTTP/1.1\r\nHost: t\r\n\r\n"
HEAD = b"POST /api/echo HTTP/1.1\r\nHost: t\r\n"

# (name, bytes, refused): ``refused`` payloads must get an error and reach
# the upstream not at all; the others may be answered (as one request).
CORPUS: list[tuple[str, bytes, bool]] = [
    (
        "CL.TE",
        HEAD + b"Content-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + SMUGGLED,
        True,
    ),
    (
        "TE.CL",
        HEAD
        + b"Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n"
        + b"%x\r\n" % len(SMUGGLED)
        + SMUGGLED
        + b"\r\n0\r\n\r\n",
        True,
    ),
    (
        "TE.TE xchunked",
        HEAD + b"Transfer-Encoding: xchunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n" + SMUGGLED,
        True,
    ),
    (
        "TE.TE twice",
        HEAD
        + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n"
        + SMUGGLED,
        True,
    ),
    (
        "TE.TE space before colon",
        HEAD + b"Transfer-Encoding : chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n" + SMUGGLED,
        True,
    ),
    (
        "TE.TE identity, chunked",
        HEAD + b"Transfer-Encoding: identity, chunked\r\n\r\n0\r\n\r\n" + SMUGGLED,
        True,
    ),
    (
        "TE.TE chunked, chunked",
        HEAD + b"Transfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n" + SMUGGLED,
        True,
    ),
    (
        "TE.TE tab",
        HEAD + b"Transfer-Encoding:\tchunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n" + SMUGGLED,
        True,
    ),
    (
        "TE.TE vertical tab",
        HEAD + b"Transfer-Encoding:\x0bchunked\r\n\r\n0\r\n\r\n" + SMUGGLED,
        True,
    ),
    (
        "TE in HTTP/1.0",
        b"POST /api/echo HTTP/1.0\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
        + SMUGGLED,
        True,
    ),
    (
        "duplicate Content-Length",
        HEAD + b"Content-Length: 0\r\nContent-Length: 48\r\n\r\n" + SMUGGLED,
        True,
    ),
    ("Content-Length list", HEAD + b"Content-Length: 0, 48\r\n\r\n" + SMUGGLED, True),
    ("Content-Length +0", HEAD + b"Content-Length: +0\r\n\r\n" + SMUGGLED, True),
    ("Content-Length -1", HEAD + b"Content-Length: -1\r\n\r\n" + SMUGGLED, True),
    ("Content-Length hex", HEAD + b"Content-Length: 0x30\r\n\r\n" + SMUGGLED, True),
    (
        "bare LF in a field",
        HEAD
        + b"X-A: b\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n"
        + SMUGGLED,
        True,
    ),
    ("bare CR", HEAD + b"X-A: b\rTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + SMUGGLED, True),
    ("obs-fold CL", HEAD + b"Content-Length: 0\r\n 48\r\n\r\n" + SMUGGLED, True),
    ("chunk size 0x", HEAD + b"Transfer-Encoding: chunked\r\n\r\n0x0\r\n\r\n" + SMUGGLED, True),
    (
        "chunk size with space",
        HEAD + b"Transfer-Encoding: chunked\r\n\r\n 0\r\n\r\n" + SMUGGLED,
        True,
    ),
    ("chunk bare LF", HEAD + b"Transfer-Encoding: chunked\r\n\r\n3\nabc\n0\n\n" + SMUGGLED, True),
    (
        "chunk overlong size",
        HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + b"0" * 17 + b"1\r\na\r\n0\r\n\r\n",
        True,
    ),
    # Unambiguous: forwarded as exactly one request, and the smuggled one
    # after it is an ordinary pipelined request (forwarded as itself).
    (
        "chunked with extension",
        HEAD + b"Transfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\n\r\n",
        False,
    ),
]


async def test_an_obs_fold_reaches_the_upstream_unfolded_on_one_line(root: Path) -> None:
    # RFC 9112 §5.2: a server replaces obs-fold with SP before interpreting
    # or forwarding (h11 does).  The TE text stays inside X-A's value: the
    # upstream gets one request, framed by the Content-Length serverio read,
    # and no Transfer-Encoding field at all.
    payload = HEAD + b"X-A: b\r\n Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\nabc"
    async with upstream() as up:
        cfg = make_config(root, proxy=(f"/api=http://127.0.0.1:{up.port}",), keepalive_timeout=0.5)
        async with running_server(cfg) as (_, port):
            got = await _exchange(port, payload)
    assert got.startswith(b"HTTP/1.1 200")
    (seen,) = up.seen
    assert seen.header("x-a") == "b Transfer-Encoding: chunked"
    assert seen.header("transfer-encoding") is None and seen.body == b"abc"


async def _exchange(port: int, payload: bytes) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    got = b""
    with trio.move_on_after(2):
        await stream.send_all(payload)
        try:
            while data := await stream.receive_some(65536):
                got += data
        except trio.BrokenResourceError:
            pass
    await stream.aclose()
    return got


@pytest.mark.parametrize(("name", "payload", "refused"), CORPUS, ids=[c[0] for c in CORPUS])
async def test_nothing_ambiguous_reaches_the_upstream(
    root: Path, name: str, payload: bytes, refused: bool
) -> None:
    async with upstream() as up:
        cfg = make_config(root, proxy=(f"/api=http://127.0.0.1:{up.port}",), keepalive_timeout=0.5)
        async with running_server(cfg) as (_, port):
            got = await _exchange(port, payload)
    assert not any("smuggled" in s.target for s in up.seen), (name, up.seen)
    status = int(got.split(b" ", 2)[1]) if got.startswith(b"HTTP/1.1 ") else 0
    if refused:
        assert up.seen == [], (name, up.seen)
        assert status in (400, 501), (name, got[:200])
    else:
        assert status == 200, (name, got[:200])
        assert len(up.seen) == 1 and up.seen[0].body == b"abc"
