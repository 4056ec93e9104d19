"""WebDAV tree operations decide on every member (security round 4,
issue 41 items 2, 4 and 5), over HTTP/1.1 and HTTP/2.

* COPY, MOVE and DELETE of a collection ask the access hook on each
  member they touch (a COPY's source members as reads, a MOVE's and a
  DELETE's as ``delete``, what they make as ``put``, an existing
  destination's members as ``delete``): one refusal answers the whole
  request (401 with its challenge) and nothing changes;
* removing or replacing an existing collection needs the ``delete``
  right, also as a COPY/MOVE destination (a put-only ``[[writable]]``
  rule no longer empties a tree);
* PROPFIND Depth 1 and Depth infinity list only the members a listing
  would show this client;
* an abandoned tree operation stops at its next member (the
  ``TreeJob.stopped`` guarantee, checked by the number of files copied).
"""

from __future__ import annotations

import base64
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from serverio import Server
from serverio.config import Config
from serverio.dav.service import DavService
from serverio.fs import davtree
from serverio.fs.filecache import FileCache
from serverio.fs.opener import RootOpener
from serverio.http.core import RequestFacts
from serverio.http.target import parse_target
from serverio.observe.stats import Stats
from serverio.pipeline.request import NO_CONTENT
from serverio.site.passwords import hash_password
from serverio.upload.service import Uploads

from .conftest import extra, make_config, memory_connection
from .h2client import h2_memory
from .test_dav import dav, h2_dav, hrefs, temps
from .test_upload_writer import allow

PASSWORD = "wonderland"
ALICE = "Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
PROTOS = ["h1", "h2"]
PATCH = (
    b'<D:propertyupdate xmlns:D="DAV:"><D:set><D:prop><x xmlns="urn:t">SECRET-PROP</x>'
    b"</D:prop></D:set></D:propertyupdate>"
)
ALLPROP = b'<?xml version="1.0"?><D:propfind xmlns:D="DAV:"><D:allprop/></D:propfind>'


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


@asynccontextmanager
async def client_for(
    cfg: Config, proto: str, server: Server | None = None
) -> AsyncIterator[Callable[..., Awaitable[Answer]]]:
    """``send(method, path, headers={}, body=b"")`` -> :class:`Answer`,
    over HTTP/1.1 or HTTP/2 (memory streams, the real transports).
    ``server``: one connection more to that server (its lock table and
    verified credentials kept; HTTP/1.1 closes its opener on exit)."""
    if proto == "h1":
        async with memory_connection(cfg, server=server) as (client, _, _):

            async def send1(
                method: str, path: str, headers: dict[str, str] | None = None, body: bytes = b""
            ) -> Answer:
                extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
                r = await dav(client, method, path, extra, body)
                return Answer(r.status, r.headers, bytes(r.body))

            yield send1
    else:
        async with h2_memory(cfg, server=server) as (h2, _, _):

            async def send2(
                method: str, path: str, headers: dict[str, str] | None = None, body: bytes = b""
            ) -> Answer:
                fields = [(k.lower(), v) for k, v in (headers or {}).items()]
                r = await h2_dav(h2, method, path, fields, body)
                return Answer(r.status, dict(r.headers), bytes(r.body))

            yield send2


@pytest.fixture
def users(tmp_path: Path) -> Path:
    f = tmp_path / "users.htpasswd"
    f.write_text(f"alice:{hash_password(PASSWORD, 1000)}\n")
    return f


def files_under(top: Path) -> dict[str, bytes]:
    """Every regular file under ``top`` but the props store's."""
    return {
        str(p.relative_to(top)): p.read_bytes()
        for p in sorted(top.rglob("*"))
        if p.is_file() and davtree.PROPS_DIR not in p.parts
    }


def secret_tree(root: Path) -> None:
    (root / "docs" / "secret").mkdir(parents=True)
    (root / "docs" / "readme.txt").write_text("public\n")
    (root / "docs" / "secret" / "plan.txt").write_text("TOP-SECRET\n")
    (root / "team" / "alice").mkdir(parents=True)
    (root / "team" / "bob.txt").write_text("bob\n")
    (root / "team" / "alice" / "thesis.txt").write_text("THESIS\n")
    (root / "pub").mkdir()
    (root / "pubsrc" / "secret").mkdir(parents=True)
    (root / "pubsrc" / "secret" / "a.txt").write_text("a\n")


def secret_config(root: Path, users: Path) -> Config:
    return make_config(
        root,
        webdav=True,
        min_free_space=0,
        auth=(
            ("/docs/secret/**", str(users)),
            ("/team/alice/**", str(users)),
            ("/drop/secret/**", str(users)),
        ),
    )


# ------------------------------------------------------------ item 2


@pytest.mark.parametrize("proto", PROTOS)
async def test_tree_operations_ask_the_access_hook_on_every_member(
    root: Path, users: Path, proto: str
) -> None:
    secret_tree(root)
    before = files_under(root)
    async with client_for(secret_config(root, users), proto) as send:
        # The protected member's dead properties (alice may set them).
        r = await send("PROPPATCH", "/docs/secret/plan.txt", {"Authorization": ALICE}, PATCH)
        assert r.status == 207
        for method in ("COPY", "MOVE"):
            r = await send(method, "/docs/", {"Destination": "/pub/leak/"})
            assert r.status == 401, (method, r.status)
            assert r.headers.get("www-authenticate", "").startswith("Basic")
            assert not (root / "pub" / "leak").exists()
            assert (root / "docs" / "secret" / "plan.txt").read_text() == "TOP-SECRET\n"
        r = await send("GET", "/pub/leak/secret/plan.txt")
        assert r.status == 404 and b"TOP-SECRET" not in r.body
        # DELETE: every member needs the delete right; nothing is removed.
        r = await send("DELETE", "/team/")
        assert r.status == 401 and r.headers.get("www-authenticate")
        assert files_under(root) == before
        # An existing destination whose members are protected is not removed.
        r = await send("COPY", "/pub/", {"Destination": "/team/", "Overwrite": "T"})
        assert r.status == 401
        # What a COPY would make at the destination needs put there.
        r = await send("COPY", "/pubsrc/", {"Destination": "/drop/"})
        assert r.status == 401 and not (root / "drop").exists()
        assert files_under(root) == before
        assert temps(root) == []
        # The right credentials: each succeeds.
        r = await send("COPY", "/docs/", {"Destination": "/pub/ok/", "Authorization": ALICE})
        assert r.status == 201
        assert (root / "pub" / "ok" / "secret" / "plan.txt").read_text() == "TOP-SECRET\n"
        # The member's dead properties were copied with it (member by member).
        r = await send(
            "PROPFIND", "/pub/ok/secret/plan.txt", {"Depth": "0", "Authorization": ALICE}, ALLPROP
        )
        assert r.status == 207 and b"SECRET-PROP" in r.body
        # A collection holding dead properties (its store is no member) goes whole.
        r = await send("DELETE", "/pub/ok/", {"Authorization": ALICE})
        assert r.status == 204 and not (root / "pub" / "ok").exists()
        r = await send("MOVE", "/docs/", {"Destination": "/pub/moved/", "Authorization": ALICE})
        assert r.status == 201 and (root / "pub" / "moved" / "secret" / "plan.txt").exists()
        r = await send("DELETE", "/team/", {"Authorization": ALICE})
        assert r.status == 204 and not (root / "team").exists()


async def test_a_member_made_after_the_check_is_left_alone(root: Path, users: Path) -> None:
    """The operation touches only the members the hook was asked about: one
    that appears between the check and the copy is not read (a 207 names
    it), nor are its dead properties copied."""
    secret_tree(root)
    real = davtree.list_tree

    def listed_then_grown(dir_fd: int, name: str, limit: int) -> list[tuple[str, bool]]:
        got = real(dir_fd, name, limit)
        (root / "pub" / "late.txt").write_text("LATE\n")  # after the hook's answers
        return got

    cfg = make_config(root, webdav=True, min_free_space=0)
    async with memory_connection(cfg) as (client, _, _):
        (root / "pub" / "early.txt").write_text("early\n")
        mp = pytest.MonkeyPatch()
        mp.setattr("serverio.dav.methods.list_tree", listed_then_grown)
        try:
            r = await dav(client, "COPY", "/pub/", "Destination: /copy/\r\n")
        finally:
            mp.undo()
        assert r.status == 207 and "/copy/late.txt" in hrefs(r.body)
        assert (root / "copy" / "early.txt").exists() and not (root / "copy" / "late.txt").exists()


# ------------------------------------------------------------ item 5


@pytest.mark.parametrize("proto", PROTOS)
async def test_a_put_only_rule_never_removes_a_tree(root: Path, proto: str) -> None:
    (root / "incoming" / "empty").mkdir(parents=True)
    keep = root / "incoming" / "keep"
    keep.mkdir()
    for i in range(5):
        (keep / f"f{i}.txt").write_text(f"keep {i}\n")
    (root / "incoming" / "a.txt").write_text("a\n")
    (root / "incoming" / "b.txt").write_text("b\n")
    cfg = make_config(root, webdav=True, min_free_space=0, writable=(("/incoming/**", ("put",)),))
    async with client_for(cfg, proto) as send:
        assert (await send("DELETE", "/incoming/keep/")).status == 403
        for dest in ("/incoming/keep/", "/incoming/keep"):
            r = await send("COPY", "/incoming/empty/", {"Destination": dest, "Overwrite": "T"})
            assert r.status == 403, dest
        # A file onto a collection removes it too.
        r = await send("COPY", "/incoming/a.txt", {"Destination": "/incoming/keep"})
        assert r.status == 403
        assert sorted(p.name for p in keep.iterdir()) == [f"f{i}.txt" for i in range(5)]
        # Putting a new collection is allowed, and a file over a file stays
        # "put", as a PUT over it.
        r = await send("COPY", "/incoming/empty/", {"Destination": "/incoming/new/"})
        assert r.status == 201
        r = await send("COPY", "/incoming/a.txt", {"Destination": "/incoming/b.txt"})
        assert r.status == 204 and (root / "incoming" / "b.txt").read_text() == "a\n"
    cfg = make_config(
        root, webdav=True, min_free_space=0, writable=(("/incoming/**", ("put", "delete")),)
    )
    async with client_for(cfg, proto) as send:
        r = await send("COPY", "/incoming/empty/", {"Destination": "/incoming/keep/"})
        assert r.status == 204 and list(keep.iterdir()) == []


# ------------------------------------------------------------ item 4


@pytest.mark.parametrize("proto", PROTOS)
async def test_propfind_lists_only_what_a_listing_shows(
    root: Path, users: Path, proto: str
) -> None:
    docs = root / "docs"
    (docs / "private" / "deep").mkdir(parents=True)
    (docs / "open").mkdir()
    (docs / "secret.txt").write_text("SECRET\n")
    (docs / "plain.txt").write_text("plain\n")
    (docs / "private" / "deep" / "x.txt").write_text("X\n")
    (docs / "open" / "y.txt").write_text("Y\n")
    (docs / "open" / "z.key").write_text("Z\n")
    cfg = make_config(
        root,
        webdav=True,
        min_free_space=0,
        webdav_depth_infinity=100,
        auth=(
            ("/docs/secret.txt", str(users)),
            ("/docs/private/**", str(users)),
            ("**/*.key", str(users)),
        ),
    )
    async with client_for(cfg, proto) as send:
        assert (await send("PROPFIND", "/docs/secret.txt", {"Depth": "0"})).status == 401
        for depth in ("1", "infinity"):
            r = await send("PROPFIND", "/docs/", {"Depth": depth}, ALLPROP)
            assert r.status == 207, depth
            got = hrefs(r.body)
            assert "/docs/plain.txt" in got and "/docs/open/" in got, got
            assert not [h for h in got if "secret" in h or "private" in h or ".key" in h], got
            assert b"SECRET" not in r.body
            if depth == "infinity":
                assert "/docs/open/y.txt" in got
        # Credentials verified for the rule (a GET with them): listed, as
        # in a listing.
        auth = {"Authorization": ALICE}
        assert (await send("GET", "/docs/secret.txt", auth)).status == 200
        r = await send("PROPFIND", "/docs/", {"Depth": "1", **auth}, ALLPROP)
        assert "/docs/secret.txt" in hrefs(r.body)


# ------------------------------------------------------------ the guarantee


async def test_an_abandoned_copy_stops_at_its_next_member(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A COPY of 12 files whose caller is cancelled (its client left) while
    its pool thread is inside the second file's copy ends there: two files
    copied, not twelve (TreeJob.stopped, checked between members)."""
    src = root / "src"
    src.mkdir()
    for i in range(12):
        (src / f"f{i:02}.bin").write_bytes(bytes([i]) * 4096)
    inside = trio.Event()
    token = trio.lowlevel.current_trio_token()
    leave = threading.Event()
    copied: list[str] = []
    real = davtree._copy_file

    def second_waits(src_dir: int, name: str, dst_dir: int, dst_name: str) -> None:
        copied.append(name)
        if len(copied) == 2:
            token.run_sync_soon(inside.set)  # tell the test, on its loop
            leave.wait(10)  # until the caller has been cancelled
        real(src_dir, name, dst_dir, dst_name)

    monkeypatch.setattr(davtree, "_copy_file", second_waits)
    cfg = make_config(root, webdav=True, min_free_space=0)
    opener = RootOpener(str(root), follow_symlinks=False)
    files = FileCache(1 << 20, 65536)
    uploads = Uploads(cfg, Stats(), lambda: opener, files)
    svc = DavService(cfg, lambda: opener, files, uploads)
    req = RequestFacts(b"COPY", parse_target(b"COPY", b"/src"), extra=extra(destination="/dst"))
    try:
        with trio.move_on_after(10) as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(svc.write, req, NO_CONTENT, trio.current_time(), allow)
                await inside.wait()
                nursery.cancel_scope.cancel()  # the client left
        assert not scope.cancelled_caught
        leave.set()
        assert await uploads.pool.wait_idle(trio.current_time() + 10) == 0
    finally:
        leave.set()
        opener.close()
    assert len(copied) == 2, copied
    assert len(list((root / "dst").iterdir())) == 2
    assert temps(root) == []


# ------------------------------------------------------------ property

# A small universe: files in up to two levels of collections; globs over it.
_FILES = [
    "a/x.txt",
    "a/y.key",
    "a/b/x.txt",
    "a/b/y.key",
    "b/x.txt",
    "b/c/x.txt",
    "c/y.key",
]
_GLOBS = ["/a/**", "/a/b/**", "**/*.key", "/b/x.txt", "/a/*/x.txt", "/b/c/**", "/out/**"]
_COLLECTIONS = ["a", "a/b", "b", "b/c", "c"]


def _oracle_match(glob: str, path: str) -> bool:
    """The glob rules of docs/reference/site-rules.md ("Globs"), by
    segments (not the server's regular expressions): ``*`` within a segment, ``**`` any number of
    whole segments; a trailing ``/`` is an empty last segment."""
    if glob.startswith("**"):
        glob = "/" + glob

    def seg(g: str, s: str) -> bool:
        if not g:
            return not s
        if g[0] == "*":
            return any(seg(g[1:], s[i:]) for i in range(len(s) + 1))
        return bool(s) and g[0] == s[0] and seg(g[1:], s[1:])

    def walk(gs: list[str], ps: list[str]) -> bool:
        if not gs:
            return not ps
        if gs[0] == "**":
            return any(walk(gs[1:], ps[i:]) for i in range(len(ps) + 1))
        return bool(ps) and seg(gs[0], ps[0]) and walk(gs[1:], ps[1:])

    return walk(glob[1:].split("/"), path[1:].split("/"))


def _protected(globs: list[str], path: str) -> bool:
    return any(_oracle_match(g, path) for g in globs)


@dataclass(frozen=True)
class _Case:
    files: tuple[str, ...]
    globs: tuple[str, ...]
    method: str
    src: str
    dst: str


def _cases() -> st.SearchStrategy[_Case]:
    return st.builds(
        _Case,
        files=st.lists(st.sampled_from(_FILES), min_size=1, max_size=6, unique=True).map(tuple),
        globs=st.lists(st.sampled_from(_GLOBS), min_size=1, max_size=2, unique=True).map(tuple),
        method=st.sampled_from(["COPY", "MOVE", "DELETE", "PROPFIND1", "PROPFINDinf"]),
        src=st.sampled_from(_COLLECTIONS),
        dst=st.sampled_from(["out", "out/new", *_COLLECTIONS]),
    )


async def _run_case(case: _Case, top: Path) -> None:
    root = top / "root"
    root.mkdir()
    users = top / "users"
    users.write_text(f"alice:{hash_password(PASSWORD, 1000)}\n")
    for f in case.files:
        (root / f).parent.mkdir(parents=True, exist_ok=True)
        (root / f).write_text(f"M:{f}\n")
    cfg = make_config(
        root,
        webdav=True,
        min_free_space=0,
        webdav_depth_infinity=100,
        auth=tuple((g, str(users)) for g in case.globs),
    )
    globs = list(case.globs)
    secret = [f for f in case.files if _protected(globs, "/" + f)]
    async with memory_connection(cfg) as (client, _, _):
        method, src = case.method, "/" + case.src + "/"
        if method.startswith("PROPFIND"):
            depth = "1" if method == "PROPFIND1" else "infinity"
            r = await dav(client, "PROPFIND", src, f"Depth: {depth}\r\n", ALLPROP)
            if r.status == 207:
                for href in hrefs(r.body):
                    if href != src:  # the target itself was decided as a read
                        assert not _protected(globs, href), (case, href)
        elif method == "DELETE":
            r = await dav(client, "DELETE", src)
        else:
            r = await dav(client, method, src, f"Destination: /{case.dst}/\r\nOverwrite: T\r\n")
    assert r.status < 500, (case, r.status)
    # No protected byte read, moved or deleted without credentials: each
    # protected file is where it was, whole, and its bytes nowhere else.
    for f in secret:
        assert (root / f).read_text() == f"M:{f}\n", (case, f, r.status)
    for p in root.rglob("*"):
        if p.is_file() and davtree.PROPS_DIR not in p.parts:
            text = p.read_text()
            if text.startswith("M:") and text[2:-1] in secret:
                assert str(p.relative_to(root)) == text[2:-1], (case, p, r.status)


def test_no_protected_byte_moves_without_credentials(tmp_path: Path) -> None:
    """Generated ``[[auth]]`` rules, trees and anonymous COPY / MOVE /
    DELETE / PROPFIND of collections, checked with an oracle of its own
    (not the server's glob code): no protected file is read into another
    place, moved, removed or listed (bounded: 40 examples, memory
    streams)."""
    counter = iter(range(1_000_000))

    @settings(
        max_examples=40,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(_cases())
    def check(case: _Case) -> None:
        top = tmp_path / f"case{next(counter)}"
        top.mkdir()
        trio.run(_run_case, case, top)

    check()


@pytest.mark.parametrize("method", ["COPY", "MOVE"])
async def test_a_collection_is_never_replaced_by_its_own_member(root: Path, method: str) -> None:
    """COPY or MOVE of /a/b/ onto /a/ with Overwrite: T would remove the
    destination first, the source with it (found by the property test):
    403, as onto itself or into itself, and nothing removed."""
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "x.txt").write_text("x\n")
    (root / "a" / "b" / "y.txt").write_text("y\n")
    async with memory_connection(make_config(root, webdav=True, min_free_space=0)) as (c, _, _):
        for dest in ("/a/", "/a"):
            r = await dav(c, method, "/a/b/", f"Destination: {dest}\r\nOverwrite: T\r\n")
            assert r.status == 403, (dest, r.status)
    assert (root / "a" / "x.txt").exists() and (root / "a" / "b" / "y.txt").exists()


def test_the_tree_walks_share_one_bounded_walk(tmp_path: Path) -> None:
    # count_tree (--webdav-max-tree), list_tree (the members the access
    # hook decides on) and _tree_bytes (a COPY's --min-free-space) walk
    # the same way: every entry counted (hidden ones, temporaries, the
    # props store), symlinks not followed, TreeTooLarge past the limit,
    # and every descriptor closed however the walk ends.
    import os

    from serverio.http.target import WRITE_TEMP_PREFIX

    top = tmp_path / "t"
    (top / "a" / "b").mkdir(parents=True)
    (top / "a" / "b" / "f.txt").write_bytes(b"x" * 10)
    (top / ".hidden").write_bytes(b"y" * 3)
    (top / (WRITE_TEMP_PREFIX + "1")).write_bytes(b"z" * 5)
    (top / "outside").symlink_to(tmp_path)  # a member, never descended into
    (tmp_path / "big").write_bytes(b"w" * 1000)
    fds = Path("/proc/self/fd")
    before = len(list(fds.iterdir())) if fds.exists() else 0
    dir_fd = os.open(tmp_path, os.O_RDONLY)
    try:
        assert davtree.count_tree(dir_fd, "t", 100) == 6
        listed = davtree.list_tree(dir_fd, "t", 100)
        assert sorted(listed) == [
            (".hidden", False),
            ("a", True),
            ("a/b", True),
            ("a/b/f.txt", False),
            ("outside", False),
        ]
        paths = [p for p, _ in listed]
        assert paths.index("a") < paths.index("a/b") < paths.index("a/b/f.txt")
        assert davtree._tree_bytes(dir_fd, "t", 100) == 10 + 3 + 5
        for walk in (davtree.count_tree, davtree.list_tree, davtree._tree_bytes):
            with pytest.raises(davtree.TreeTooLarge):
                walk(dir_fd, "t", 5)
            walk(dir_fd, "t", 6)  # the limit itself is allowed
    finally:
        os.close(dir_fd)
    if fds.exists():
        assert len(list(fds.iterdir())) == before
