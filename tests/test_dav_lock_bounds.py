"""WebDAV locks that would reach past what their client may do, and the
lock table's bounds (issue 41 items 6 and 12).

* A depth-infinity LOCK covers every member of its collection, existing
  or not (RFC 4918 §7.4): a client must be able to write each member
  itself.  An anonymous ``LOCK /`` over an ``[[auth]]`` area is 401 (its
  owner's writes are not locked out), one over a ``[[writable]]`` table
  that refuses ``put`` is 403; ``Depth: 0`` and a subtree no rule reaches
  stay allowed; the rule's own users may lock it all.  The pure question
  underneath, "can this glob match below that collection", is
  :func:`serverio.site.rules.glob_below`.
* Timeouts: a lock without credentials is held at most
  ``--webdav-anonymous-lock-timeout-max`` (3600 s) however long it asks.
* Bounds: ``--webdav-max-locks-per-client`` per client address (another
  client still gets its lock), ``--webdav-max-locks-per-resource`` locks
  covering one resource (so its lockdiscovery stays small), and a
  ``DAV:owner`` of at most 1 KiB: each 507 / 400 past it.
"""

from __future__ import annotations

import base64
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
import trio.testing

from serverio import Server
from serverio.dav.locks import LockRefusal, LockRefused, LockTable
from serverio.dav.xml import LockInfo, LockScope
from serverio.http.access import AccessTarget, Kind, Right
from serverio.net.connection import ConnectionTask
from serverio.site.access import rules_below, write_allowed
from serverio.site.passwords import hash_password
from serverio.site.rules import compile_rules, glob_below

from .conftest import HTTPClient, make_config
from .test_dav_locking import CLIENTS, LOCKINFO, h1_caller

SHARED = LOCKINFO.replace(b"<D:exclusive/>", b"<D:shared/>")
ALICE = [("authorization", "Basic " + base64.b64encode(b"alice:pw").decode())]
INFINITE = [("timeout", "Infinite")]

Call = Callable[
    [str, str, list[tuple[str, str]], bytes], Awaitable[tuple[int, dict[str, str], bytes]]
]


def _users(tmp_path: Path) -> str:
    users = tmp_path / "users"
    users.write_text(f"alice:{hash_password('pw', 1000)}\n")
    return str(users)


def _timeout(body: bytes) -> int:
    found = re.search(rb"<D:timeout>Second-(\d+)</D:timeout>", body)
    assert found is not None, body
    return int(found.group(1))


# ------------------------------------------------------------ item 6


@pytest.mark.parametrize("proto", CLIENTS)
async def test_an_anonymous_depth_infinity_lock_cannot_cover_protected_members(
    root: Path, tmp_path: Path, proto: str
) -> None:
    (root / "private").mkdir()
    (root / "private" / "plan.txt").write_bytes(b"v1")
    (root / "pub").mkdir()
    auth = (("/private/**", _users(tmp_path)),)
    with trio.fail_after(30):
        async with CLIENTS[proto](root, auth=auth) as call:
            # Depth infinity (the default) on "/" reaches /private/: 401,
            # with the challenge, whatever the timeout asked.
            for depth in ([], [("depth", "infinity")]):
                status, hs, _ = await call("LOCK", "/", [*depth, *INFINITE], LOCKINFO)
                assert status == 401 and "basic" in hs["www-authenticate"].lower()
            # No lock was taken: alice writes her file, and it is not 423.
            status, _, _ = await call("PUT", "/private/plan.txt", ALICE, b"v2")
            assert status == 204
            assert (root / "private" / "plan.txt").read_bytes() == b"v2"
            # A subtree no rule reaches, and the root alone (Depth 0): granted.
            status, hs, _ = await call("LOCK", "/pub/", INFINITE, LOCKINFO)
            assert status == 200
            pub = hs["lock-token"]
            status, hs, _ = await call("LOCK", "/", [("depth", "0")], SHARED)
            assert status == 200
            root_token = hs["lock-token"]
            # The depth-0 lock leaves alice's existing file writable.
            assert (await call("PUT", "/private/plan.txt", ALICE, b"v3"))[0] == 204
            for path, tok in (("/pub/", pub), ("/", root_token)):
                assert (await call("UNLOCK", path, [("lock-token", tok)], b""))[0] == 204
            # Alice passes the rule: her depth-infinity lock on "/" is granted.
            status, hs, _ = await call("LOCK", "/", ALICE, LOCKINFO)
            assert status == 200
            tok = hs["lock-token"]
            status, _, _ = await call(
                "PUT", "/private/plan.txt", [*ALICE, ("if", f"({tok})")], b"v4"
            )
            assert status == 204
            assert (await call("UNLOCK", "/", [*ALICE, ("lock-token", tok)], b""))[0] == 204


async def test_a_writable_table_refusing_put_below_refuses_a_tree_lock(root: Path) -> None:
    (root / "keep").mkdir()
    (root / "keep" / "a.txt").write_bytes(b"a")
    (root / "work").mkdir()
    writable = (("/keep/**", ("delete",)), ("/**", ("put", "delete")))
    with trio.fail_after(30):
        async with CLIENTS["h1"](root, writable=writable) as call:
            assert (await call("LOCK", "/", [], LOCKINFO))[0] == 403
            assert (await call("LOCK", "/work/", [], LOCKINFO))[0] == 200
            # Depth 0 on "/" covers no member of /keep/.
            assert (await call("LOCK", "/", [("depth", "0")], SHARED))[0] == 200
            assert (await call("DELETE", "/keep/a.txt", [], b""))[0] == 204


def test_glob_below_is_decided_on_the_globs_segments() -> None:
    cases = [
        ("/private/**", "/", True),
        ("/private/**", "/private/", True),
        ("/private/**", "/private/x/y/", True),
        ("/private/**", "/pub/", False),
        ("/private/*.txt", "/", True),
        ("/private/*.txt", "/private/", True),
        ("/private/*.txt", "/private/sub/", False),
        ("/docs/secret.txt", "/docs/", True),
        ("/docs/secret.txt", "/docs/secret.txt/", False),
        ("/docs/", "/docs/", False),  # the collection itself, not below it
        ("/docs/", "/", True),
        ("**/*.html", "/a/b/", True),
        ("/a/*/c", "/a/zz/", True),
        ("/a/*/c", "/a/zz/c/", False),
        ("/a/x*", "/a/y/", False),
        ("/a", "/a/", False),
        ("/", "/", False),
    ]
    for pattern, collection, below in cases:
        assert glob_below(pattern, collection) is below, (pattern, collection)


def test_rules_below_and_a_tree_write_on_compiled_rules() -> None:
    rules = compile_rules(
        auth=(("/private/**", {}, ""), ("/pub/*.key", {}, "")),
        writable=(("/ro/**", ("delete",)), ("/**", ("put", "delete")), ("/x/**", ("delete",))),
    )
    assert [r.pattern for r in rules_below(rules, "/")] == ["/private/**", "/pub/*.key"]
    assert [r.pattern for r in rules_below(rules, "/pub/")] == ["/pub/*.key"]
    assert rules_below(rules, "/pub/sub/") == ()

    def tree(path: str) -> bool:
        return write_allowed(rules, AccessTarget((path,), Kind.WRITE, Right.LOCK, tree=True))

    assert not tree("/")  # /ro/ below refuses put
    assert tree("/pub/")
    assert tree("/x/")  # "/**" decides /x/ before "/x/**" (the first table matching)
    assert write_allowed(rules, AccessTarget(("/",), Kind.WRITE, Right.LOCK))  # not a tree


# ------------------------------------------------------------ item 12


@pytest.mark.parametrize("proto", CLIENTS)
async def test_an_anonymous_lock_timeout_is_capped(root: Path, tmp_path: Path, proto: str) -> None:
    (root / "a.txt").write_bytes(b"a")
    (root / "b.txt").write_bytes(b"b")
    auth = (("/b.txt", _users(tmp_path)),)
    with trio.fail_after(30):
        async with CLIENTS[proto](root, auth=auth) as call:
            status, hs, body = await call("LOCK", "/a.txt", INFINITE, LOCKINFO)
            assert status == 200 and _timeout(body) == 3600
            # A refresh asking for more gets no more either.
            refresh = [("if", f"({hs['lock-token']})"), ("timeout", "Second-99999")]
            status, _, body = await call("LOCK", "/a.txt", refresh, b"")
            assert status == 200 and _timeout(body) == 3600
            # With credentials: --webdav-lock-timeout-max (86400).
            status, _, body = await call("LOCK", "/b.txt", [*ALICE, *INFINITE], LOCKINFO)
            assert status == 200 and _timeout(body) == 86400


@asynccontextmanager
async def _two_clients(root: Path, **cfg: object) -> AsyncIterator[tuple[Call, Call]]:
    """Two HTTP/1.1 connections to one server from two client addresses."""
    srv = Server(make_config(root, webdav=True, min_free_space=0, **cfg))
    try:
        async with srv.handler.running(), trio.open_nursery() as nursery:
            calls = []
            for address in ("192.0.2.1", "192.0.2.2"):
                mine, theirs = trio.testing.memory_stream_pair()
                nursery.start_soon(ConnectionTask(srv.env, theirs, address).run)
                calls.append(h1_caller(HTTPClient(mine, theirs)))
            yield calls[0], calls[1]
            nursery.cancel_scope.cancel()
    finally:
        srv.opener.close()


async def test_one_client_cannot_take_every_lock(root: Path) -> None:
    for i in range(5):
        (root / f"f{i}.txt").write_bytes(b"x")
    with trio.fail_after(30):
        async with _two_clients(root, webdav_max_locks_per_client=3) as (one, two):
            got = [await one("LOCK", f"/f{i}.txt", INFINITE, LOCKINFO) for i in range(4)]
            assert [status for status, _, _ in got] == [200, 200, 200, 507]
            # Another client address still gets its lock.
            assert (await two("LOCK", "/f4.txt", [], LOCKINFO))[0] == 200
            # An UNLOCK gives the first client its share back.
            tok = got[0][1]["lock-token"]
            assert (await one("UNLOCK", "/f0.txt", [("lock-token", tok)], b""))[0] == 204
            assert (await one("LOCK", "/f3.txt", [], LOCKINFO))[0] == 200


async def test_locks_on_one_resource_are_bounded_so_is_its_lockdiscovery(root: Path) -> None:
    (root / "c").mkdir()
    (root / "c" / "f.txt").write_bytes(b"x")
    with trio.fail_after(30):
        async with CLIENTS["h1"](root, webdav_max_locks_per_resource=3) as call:
            tokens = []
            for _ in range(3):
                status, hs, _ = await call("LOCK", "/c/f.txt", [("depth", "0")], SHARED)
                assert status == 200
                tokens.append(hs["lock-token"])
            status, _, _ = await call("LOCK", "/c/f.txt", [("depth", "0")], SHARED)
            assert status == 507
            # A depth-infinity lock above it would be a fourth over f.txt.
            assert (await call("LOCK", "/c/", [], SHARED))[0] == 507
            status, _, body = await call("PROPFIND", "/c/f.txt", [("depth", "0")], b"")
            assert status == 207 and body.count(b"<D:activelock>") == 3
            # One released: the collection's lock fits again.
            assert (await call("UNLOCK", "/c/f.txt", [("lock-token", tokens[0])], b""))[0] == 204
            assert (await call("LOCK", "/c/", [], SHARED))[0] == 200


async def test_a_large_owner_is_refused(root: Path) -> None:
    (root / "f.txt").write_bytes(b"x")
    big = LOCKINFO.replace(b"mailto:ann@example.org", b"x" * 2000)
    with trio.fail_after(30):
        async with CLIENTS["h1"](root) as call:
            assert (await call("LOCK", "/f.txt", [], big))[0] == 400
            assert (await call("LOCK", "/f.txt", [], LOCKINFO))[0] == 200


def test_the_table_counts_locks_per_client_and_caps_anonymous_timeouts() -> None:
    n = iter(range(1000))
    table = LockTable(
        max_locks=10,
        timeout_max=600,
        tokens=lambda: f"urn:t:{next(n)}",
        per_client=2,
        per_resource=10,
        anonymous_timeout_max=60,
    )
    info = LockInfo(LockScope.EXCLUSIVE)

    def grant(path: str, client: str, principal: str | None = None) -> int:
        lock = table.grant(
            (path,),
            info,
            collection=False,
            infinite=False,
            timeouts=(None,),
            principal=principal,
            now=0.0,
            client=client,
        )
        return lock.timeout

    assert grant("a", "c1") == 60  # no principal: the anonymous cap
    assert grant("b", "c1", "alice") == 600
    with pytest.raises(LockRefused) as exc:
        grant("c", "c1")
    assert exc.value.refusal is LockRefusal.CLIENT_FULL
    assert grant("c", "c2") == 60
    # A refresh does not count again; an expired lock frees its share.
    (tok,) = (lk.token for lk in table.covering(("a",), 0.0))
    assert table.refresh(("a",), [tok], timeouts=(), principal=None, now=1.0)
    assert table.expire(100.0) == 2  # "a" and "c" (60 s); alice's stays
    assert grant("d", "c1") == 60
