"""The WebDAV dead-property store (issue 45): ONE hidden directory at the
root (``PROPS_DIR``), a shadow tree keyed by path, never a directory of
its own in each folder a client set a property in; never shown by a
listing, PROPFIND or an archive, never a target, whatever ``--hidden``
says; properties follow MOVE and COPY and go with DELETE; a store of the
former layout (one per directory) is moved in when first touched.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import zipfile
from pathlib import Path
from typing import Any

import pytest

from serverio.fs.davtree import PROPS_DIR, props_name

from .conftest import make_config, memory_connection
from .test_dav import dav, hrefs

PATCH = (
    b'<D:propertyupdate xmlns:D="DAV:" xmlns:Z="urn:z"><D:set><D:prop>'
    b"<Z:k>%s</Z:k></D:prop></D:set></D:propertyupdate>"
)
ASK = b'<D:propfind xmlns:D="DAV:"><D:prop><k xmlns="urn:z"/></D:prop></D:propfind>'


def config(root: Path, **kw: object) -> Any:
    return make_config(root, webdav=True, min_free_space=0, archives=True, **kw)


def node_key(name: str) -> str:
    """The store's node of a directory member (a hash, as serverio names it)."""
    return hashlib.blake2b(name.encode(), digest_size=16).hexdigest()


def stores(root: Path) -> list[str]:
    """Every directory named like the store, below the root (not the root's)."""
    return [
        os.path.relpath(os.path.join(d, n), root)
        for d, dirs, _ in os.walk(root)
        for n in dirs
        if n == PROPS_DIR and Path(d) != root
    ]


def prop_of(body: bytes) -> bytes | None:
    m = re.search(rb'<ns\d:k xmlns:ns\d="urn:z">([^<]*)</ns\d:k>', body)
    return None if m is None else m[1]


async def patch(client: Any, path: str, value: bytes) -> None:
    r = await dav(client, "PROPPATCH", path, "", PATCH % value)
    assert r.status == 207 and b"200 OK" in r.body, (path, r.body)


async def ask(client: Any, path: str) -> bytes | None:
    r = await dav(client, "PROPFIND", path, "Depth: 0\r\n", ASK)
    assert r.status == 207, (path, r.status)
    return prop_of(r.body)


@pytest.fixture
def tree(root: Path) -> Path:
    (root / "index.html").unlink()  # the root is a listing
    (root / "d" / "e").mkdir(parents=True)
    (root / "d" / "x.txt").write_bytes(b"x\n")
    (root / "d" / "e" / "y.txt").write_bytes(b"y\n")
    return root


@pytest.mark.parametrize("hidden", [False, True])
async def test_properties_leave_no_store_in_the_folders(tree: Path, hidden: bool) -> None:
    async with memory_connection(config(tree, hidden=hidden)) as (client, _, _):
        for path in ("/", "/d/", "/d/x.txt", "/d/e/", "/d/e/y.txt"):
            await patch(client, path, path.encode())
        # One store, at the root; none in the folders other tools look at.
        assert (tree / PROPS_DIR).is_dir()
        assert stores(tree) == []
        assert sorted(os.listdir(tree / "d")) == ["e", "x.txt"]
        assert sorted(os.listdir(tree / "d" / "e")) == ["y.txt"]
        for path in ("/", "/d/", "/d/x.txt", "/d/e/", "/d/e/y.txt"):
            assert await ask(client, path) == path.encode()
        # Never shown: PROPFIND, the listing (HTML and JSON), the archives.
        for path in ("/", "/d/"):
            r = await dav(client, "PROPFIND", path, "Depth: 1\r\n")
            assert r.status == 207 and not [h for h in hrefs(r.body) if PROPS_DIR in h]
            page = await client.get(path)
            assert page.status == 200 and PROPS_DIR.encode() not in page.body
            listing = await client.get(path, "Accept: application/json\r\n")
            assert PROPS_DIR not in json.dumps(json.loads(listing.body))
        r = await client.get("/?archive=zip")
        assert r.status == 200
        names = zipfile.ZipFile(io.BytesIO(r.body)).namelist()
        assert names and not [n for n in names if PROPS_DIR in n], names
        r = await client.get("/?archive=tar.gz")
        assert r.status == 200


@pytest.mark.parametrize("hidden", [False, True])
async def test_the_store_is_never_a_target(tree: Path, hidden: bool) -> None:
    async with memory_connection(config(tree, hidden=hidden)) as (client, _, _):
        await patch(client, "/d/x.txt", b"v")
        before = sorted(p.relative_to(tree).as_posix() for p in (tree / PROPS_DIR).rglob("*"))
        inside = f"/{PROPS_DIR}/{props_name('d')}"
        for target in (f"/{PROPS_DIR}", f"/{PROPS_DIR}/", inside, f"/d/{PROPS_DIR}"):
            assert (await client.get(target)).status == 404, target
            r = await dav(client, "PROPFIND", target, "Depth: 0\r\n")
            assert r.status == 404, target
            for method in ("PUT", "MKCOL", "DELETE", "PROPPATCH"):
                body = PATCH % b"w" if method == "PROPPATCH" else b"z"
                r = await dav(client, method, target, "", body)
                assert r.status in (403, 404), (method, target, r.status)
            dest = f"Destination: http://t{target}\r\n"
            for method in ("COPY", "MOVE"):
                r = await dav(client, method, "/d/x.txt", dest + "Overwrite: T\r\n")
                assert r.status in (403, 404), (method, target, r.status)
                r = await dav(client, method, target, "Destination: http://t/z.txt\r\n")
                assert r.status in (403, 404), (method, target, r.status)
        after = sorted(p.relative_to(tree).as_posix() for p in (tree / PROPS_DIR).rglob("*"))
        assert after == before
        assert (tree / "d" / "x.txt").read_bytes() == b"x\n"
        assert not (tree / "z.txt").exists() and not (tree / "d" / PROPS_DIR).exists()


async def test_properties_follow_move_and_copy_and_go_with_delete(tree: Path) -> None:
    async with memory_connection(config(tree)) as (client, _, _):
        await patch(client, "/d/", b"dir")
        await patch(client, "/d/e/y.txt", b"deep")
        r = await dav(client, "MOVE", "/d/", "Destination: http://t/m/\r\n")
        assert r.status == 201
        assert await ask(client, "/m/") == b"dir"
        assert await ask(client, "/m/e/y.txt") == b"deep"
        r = await dav(client, "COPY", "/m/", "Destination: http://t/c/\r\n")
        assert r.status == 201
        assert await ask(client, "/c/e/y.txt") == b"deep" and await ask(client, "/c/") == b"dir"
        # A name made anew starts with none: nothing stays behind at /d/.
        assert (await dav(client, "MKCOL", "/d/")).status == 201
        assert (await dav(client, "MKCOL", "/d/e/")).status == 201
        (tree / "d" / "e" / "y.txt").write_bytes(b"new")
        assert await ask(client, "/d/") is None and await ask(client, "/d/e/y.txt") is None
        assert (await dav(client, "DELETE", "/m/")).status == 204
        (tree / "m" / "e").mkdir(parents=True)
        (tree / "m" / "e" / "y.txt").write_bytes(b"other")
        assert await ask(client, "/m/") is None and await ask(client, "/m/e/y.txt") is None
        assert await ask(client, "/c/e/y.txt") == b"deep"  # the copy keeps its own
    # The deleted collection's node went with it; the copy's stayed.
    top = tree / PROPS_DIR
    assert not (top / node_key("m")).exists() and (top / node_key("c")).is_dir()


async def test_a_store_of_the_former_layout_is_moved_in(tree: Path) -> None:
    # As the previous release kept it: one store inside each directory.
    old = tree / "d" / PROPS_DIR
    old.mkdir()
    (old / props_name("x.txt")).write_bytes(
        b'<D:prop xmlns:D="DAV:"><k xmlns="urn:z">old</k></D:prop>'
    )
    root_old = tree / PROPS_DIR
    root_old.mkdir()
    (root_old / props_name("d")).write_bytes(
        b'<D:prop xmlns:D="DAV:"><k xmlns="urn:z">top</k></D:prop>'
    )
    async with memory_connection(config(tree)) as (client, _, _):
        r = await dav(client, "PROPFIND", "/d/", "Depth: 1\r\n", ASK)
        assert r.status == 207 and b">old<" in r.body, r.body
        assert not old.exists()  # moved into the root's store
        assert (root_old / node_key("d") / props_name("x.txt")).is_file()
        assert await ask(client, "/d/x.txt") == b"old"
        assert await ask(client, "/d/") == b"top"  # the root's former store is the new one
    assert stores(tree) == []


def test_migration_keeps_the_new_stores_file_and_tolerates_a_racing_migrator(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from serverio.fs import davtree
    from serverio.fs.writer import SYS

    old = tree / "d" / PROPS_DIR
    old.mkdir()
    for name, text in (("x.txt", b"old-x"), ("e", b"old-e"), ("gone", b"old-gone")):
        (old / props_name(name)).write_bytes(text)
    node = tree / PROPS_DIR / node_key("d")
    node.mkdir(parents=True)
    (node / props_name("x.txt")).write_bytes(b"new-x")  # written since: it wins
    real_rename = SYS.rename

    def racing(src: str, dst: str, **kw: object) -> None:
        if src == props_name("gone"):  # another request moved it first
            real_rename(src, dst, **kw)
            raise FileNotFoundError(src)
        real_rename(src, dst, **kw)

    monkeypatch.setattr(SYS, "rename", racing)
    root_fd = os.open(tree, os.O_RDONLY | os.O_DIRECTORY)
    dir_fd = os.open(tree / "d", os.O_RDONLY | os.O_DIRECTORY)
    try:
        davtree.migrate_old_store(dir_fd, root_fd, "d")
        davtree.migrate_old_store(dir_fd, root_fd, "d")  # nothing left: a no-op
    finally:
        os.close(dir_fd)
        os.close(root_fd)
    assert not old.exists()
    assert (node / props_name("x.txt")).read_bytes() == b"new-x"
    assert (node / props_name("e")).read_bytes() == b"old-e"
    assert (node / props_name("gone")).read_bytes() == b"old-gone"


def test_a_node_written_while_it_is_removed_is_no_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from serverio.fs import davtree
    from serverio.fs.writer import SYS

    node = tmp_path / "n"
    node.mkdir()
    (node / props_name("a")).write_bytes(b"a")
    real_unlink = SYS.unlink

    def and_a_write(name: str, **kw: object) -> None:
        real_unlink(name, **kw)
        (node / props_name("late")).write_bytes(b"late")  # a PROPPATCH meanwhile

    monkeypatch.setattr(SYS, "unlink", and_a_write)
    parent = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        davtree._remove_node(parent, "n")  # ENOTEMPTY at the end: left, no error
        davtree._remove_node(parent, "missing")
    finally:
        os.close(parent)
    assert sorted(os.listdir(node)) == [props_name("late")]
