"""WebDAV class 2 through the whole server (``--webdav``: the DAV service
with the lock table), over HTTP/1.1 and HTTP/2 alike, on memory streams:
OPTIONS says ``DAV: 1, 2``; a LOCK answers 200 with ``Lock-Token`` and
the lockdiscovery; a PUT or DELETE without the token is refused with 423
and ``DAV:lock-token-submitted``; with it (``If``) it goes through; PROPFIND
shows the lock; a refresh, an UNLOCK (409 for a wrong token, 204), then
an unlocked PUT; a LOCK of an unmapped URL makes an empty file (201); the
``--webdav-max-locks`` bound answers 507 and ``--webdav-lock-timeout-max``
caps a timeout."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from .conftest import HTTPClient, make_config, memory_connection
from .h2client import h2_memory

Call = Callable[
    [str, str, list[tuple[str, str]], bytes], Awaitable[tuple[int, dict[str, str], bytes]]
]

LOCKINFO = (
    b'<?xml version="1.0" encoding="utf-8"?><D:lockinfo xmlns:D="DAV:">'
    b"<D:lockscope><D:exclusive/></D:lockscope><D:locktype><D:write/></D:locktype>"
    b"<D:owner><D:href>mailto:ann@example.org</D:href></D:owner></D:lockinfo>"
)
PROPFIND = (
    b'<?xml version="1.0"?><D:propfind xmlns:D="DAV:"><D:prop>'
    b"<D:lockdiscovery/><D:supportedlock/></D:prop></D:propfind>"
)


def h1_caller(client: HTTPClient) -> Call:
    """One request at a time over ``client``'s HTTP/1.1 connection."""

    async def call(
        method: str, path: str, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        fields = "".join(f"{k}: {v}\r\n" for k, v in [*headers, ("content-length", len(body))])
        head = f"{method} {path} HTTP/1.1\r\nHost: t\r\n{fields}\r\n"
        await client.send_raw(head.encode("latin-1") + body)
        r = await client.read_response()
        return r.status, r.headers, r.body

    return call


@asynccontextmanager
async def h1_calls(root: Path, **cfg: object) -> AsyncIterator[Call]:
    async with memory_connection(make_config(root, webdav=True, min_free_space=0, **cfg)) as (
        client,
        _,
        _,
    ):
        yield h1_caller(client)


@asynccontextmanager
async def h2_calls(root: Path, **cfg: object) -> AsyncIterator[Call]:
    async with h2_memory(make_config(root, webdav=True, min_free_space=0, **cfg)) as (
        client,
        _,
        _,
    ):

        async def call(
            method: str, path: str, headers: list[tuple[str, str]], body: bytes
        ) -> tuple[int, dict[str, str], bytes]:
            hs = [*headers, ("content-length", str(len(body)))]
            sid = client.request(path, method, hs, end_stream=not body)
            if body:
                client.conn.send_data(sid, body, end_stream=True)
            await client.flush()
            (r,) = await client.wait(sid)
            assert r.ended and r.reset is None
            return r.status, r.headers, bytes(r.body)

        yield call


CLIENTS = {"h1": h1_calls, "h2": h2_calls}


@pytest.mark.parametrize("proto", CLIENTS)
async def test_lock_refused_put_unlock(root: Path, proto: str) -> None:
    with trio.fail_after(30):
        async with CLIENTS[proto](root) as call:
            status, hs, _ = await call("OPTIONS", "/", [], b"")
            assert status == 200 and hs["dav"] == "1, 2"
            assert "LOCK" in hs["allow"] and "UNLOCK" in hs["allow"]
            assert (await call("PUT", "/doc.txt", [], b"one"))[0] == 201

            status, hs, body = await call("LOCK", "/doc.txt", [("timeout", "Second-600")], LOCKINFO)
            assert status == 200, body
            assert hs["content-type"] == "application/xml; charset=utf-8"
            assert hs["x-content-type-options"] == "nosniff"
            token = re.fullmatch(r"<(urn:uuid:[0-9a-f-]{36})>", hs["lock-token"])
            assert token is not None
            tok = token.group(1)
            assert f"<D:locktoken><D:href>{tok}</D:href></D:locktoken>".encode() in body
            assert b"<D:timeout>Second-600</D:timeout>" in body
            assert b"mailto:ann@example.org" in body

            # Another LOCK: 423 naming the conflicting lock.
            status, _, body = await call("LOCK", "/doc.txt", [], LOCKINFO)
            assert status == 423 and b"no-conflicting-lock" in body

            # Writes without the token: 423, DAV:lock-token-submitted.
            for method, content in (("PUT", b"two"), ("DELETE", b"")):
                status, hs, body = await call(method, "/doc.txt", [], content)
                assert status == 423, (method, body)
                assert b"<D:lock-token-submitted><D:href>/doc.txt</D:href>" in body
            assert (root / "doc.txt").read_bytes() == b"one"
            # A wrong token: the field holds nothing (412).
            status, _, _ = await call("PUT", "/doc.txt", [("if", "(<urn:uuid:nope>)")], b"x")
            assert status == 412
            # With the token: written.
            status, _, _ = await call("PUT", "/doc.txt", [("if", f"(<{tok}>)")], b"two")
            assert status == 204
            assert (root / "doc.txt").read_bytes() == b"two"

            # PROPFIND shows the lock and what can be locked.
            status, _, body = await call("PROPFIND", "/doc.txt", [("depth", "0")], PROPFIND)
            assert status == 207 and tok.encode() in body
            assert b"<D:lockentry>" in body and b"<D:shared/>" in body

            # A refresh (no body, the token in If): 200, no Lock-Token.
            refresh = [("if", f"(<{tok}>)"), ("timeout", "Second-60")]
            status, hs, body = await call("LOCK", "/doc.txt", refresh, b"")
            assert status == 200 and "lock-token" not in hs
            assert b"<D:timeout>Second-60</D:timeout>" in body

            # UNLOCK: a wrong token 409, the right one 204.
            status, _, body = await call(
                "UNLOCK", "/doc.txt", [("lock-token", "<urn:uuid:no>")], b""
            )
            assert status == 409 and b"lock-token-matches-request-uri" in body
            status, _, _ = await call("UNLOCK", "/doc.txt", [("lock-token", f"<{tok}>")], b"")
            assert status == 204
            assert (await call("PUT", "/doc.txt", [], b"three"))[0] == 204
            assert (root / "doc.txt").read_bytes() == b"three"


@pytest.mark.parametrize("proto", CLIENTS)
async def test_lock_of_an_unmapped_url_and_the_bound(root: Path, proto: str) -> None:
    with trio.fail_after(30):
        async with CLIENTS[proto](root, webdav_max_locks=1, webdav_lock_timeout_max=60) as call:
            # No parent collection: 409 (RFC 4918 §9.10.4), nothing made, no lock.
            status, _, _ = await call("LOCK", "/no/such.txt", [], LOCKINFO)
            assert status == 409
            assert not (root / "no").exists()
            # Infinite is granted as --webdav-lock-timeout-max.
            status, hs, body = await call("LOCK", "/new.txt", [("timeout", "Infinite")], LOCKINFO)
            assert status == 201 and "lock-token" in hs
            assert b"<D:timeout>Second-60</D:timeout>" in body
            assert (root / "new.txt").read_bytes() == b""  # a locked empty resource
            # One lock at most: the next LOCK gets 507.
            assert (await call("PUT", "/other.txt", [], b"x"))[0] == 201
            status, _, _ = await call("LOCK", "/other.txt", [], LOCKINFO)
            assert status == 507
            # Deleting the locked file (with its token) drops its lock.
            tok = hs["lock-token"]
            status, _, _ = await call("DELETE", "/new.txt", [("if", f"({tok})")], b"")
            assert status == 204
            status, _, _ = await call("LOCK", "/other.txt", [], LOCKINFO)
            assert status == 200


DEPTH0 = LOCKINFO.replace(b"<D:exclusive/>", b"<D:shared/>")


@pytest.mark.parametrize("proto", CLIENTS)
async def test_a_depth_0_collection_lock_guards_membership_only(root: Path, proto: str) -> None:
    """RFC 4918 §7.4: a depth-0 lock on a collection protects its members'
    names, not their content: a new member needs the token, a replaced
    one does not; a depth-infinity lock protects both."""
    (root / "c").mkdir()
    (root / "c" / "old.txt").write_bytes(b"old")
    with trio.fail_after(30):
        async with CLIENTS[proto](root) as call:
            status, hs, _ = await call("LOCK", "/c/", [("depth", "0")], DEPTH0)
            assert status == 200
            tok = hs["lock-token"]
            assert (await call("PUT", "/c/old.txt", [], b"new"))[0] == 204
            status, _, body = await call("PUT", "/c/fresh.txt", [], b"x")
            assert status == 423 and b"<D:href>/c</D:href>" in body
            # An untagged list is about the request URL, which the depth-0
            # lock does not cover (RFC 4918 §10.4.1): 412; tagged with the
            # collection, the token is submitted and holds.
            assert (await call("PUT", "/c/fresh.txt", [("if", f"({tok})")], b"x"))[0] == 412
            tagged = [("if", f"</c/> ({tok})")]
            assert (await call("PUT", "/c/fresh.txt", tagged, b"x"))[0] == 201
            assert (await call("UNLOCK", "/c/", [("lock-token", tok)], b""))[0] == 204
            status, hs, _ = await call("LOCK", "/c/", [("depth", "infinity")], DEPTH0)
            assert status == 200
            status, _, body = await call("PUT", "/c/old.txt", [], b"newer")
            assert status == 423 and b"<D:href>/c</D:href>" in body
    assert (root / "c" / "old.txt").read_bytes() == b"new"
