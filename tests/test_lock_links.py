"""What a depth-infinity LOCK covers through the links below it
(:func:`serverio.upload.resolved.linked_below`; the service asks the
access hook about each, :meth:`serverio.dav.service.DavService._lock_links`),
under each strategy of the opener (the ``strategy`` fixture).

The property test of every way of reaching a byte
(``tests/test_rights_properties.py``) holds the answers; these hold the
walk's edges: links to links, a link back to an ancestor, links that leave
the root or lead nowhere, the tree limit, and no walk without rules.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from serverio import Server
from serverio.config import Config
from serverio.fs.davtree import TreeTooLarge
from serverio.fs.opener import RootOpener
from serverio.upload import resolved as resolved_mod
from serverio.upload.resolved import linked_below

from .conftest import make_config
from .test_dav_members import client_for

pytestmark = pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")


def _tree(root: Path) -> None:
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "x.txt").write_text("x")
    (root / "c").mkdir()
    (root / "c" / "z.txt").write_text("z")
    (root / "pub").mkdir()


@contextmanager
def _opened(root: Path, strategy: str) -> Iterator[RootOpener]:
    opener = RootOpener(str(root), follow_symlinks=False, strategy=strategy)
    try:
        yield opener
    finally:
        opener.close()


def test_links_below_a_collection_and_below_their_targets(tmp_path: Path, strategy: str) -> None:
    _tree(tmp_path)
    os.symlink("../a/b/x.txt", tmp_path / "c" / "lf")  # a file link
    os.symlink("../c", tmp_path / "pub" / "lc")  # a directory link, with a link inside
    with _opened(tmp_path, strategy) as opener:
        assert sorted(linked_below(opener, "pub", 100)) == ["/a/b/x.txt", "/c/"]
        assert linked_below(opener, "c", 100) == ["/a/b/x.txt"]
        assert linked_below(opener, "a", 100) == []  # no link below
        # The root: every link, each target once scanned.
        assert sorted(linked_below(opener, "", 100)) == ["/a/b/x.txt", "/c/"]


def test_a_collection_reached_through_a_link_is_walked_where_it_is(
    tmp_path: Path, strategy: str
) -> None:
    _tree(tmp_path)
    os.symlink("../a/b/x.txt", tmp_path / "c" / "lf")
    os.symlink("../c", tmp_path / "pub" / "lc")
    with _opened(tmp_path, strategy) as opener:
        assert linked_below(opener, "pub/lc", 100) == ["/a/b/x.txt"]


def test_a_link_back_to_an_ancestor_ends_the_walk(tmp_path: Path, strategy: str) -> None:
    _tree(tmp_path)
    os.symlink("..", tmp_path / "a" / "up")  # a/up -> the root
    os.symlink("../..", tmp_path / "a" / "b" / "top")  # a/b/top -> the root
    with _opened(tmp_path, strategy) as opener:
        # Each directory scanned once: a handful of entries, not a loop.
        assert sorted(linked_below(opener, "a", 20)) == ["/", "/"]


def test_links_out_of_the_root_are_skipped_and_dangling_ones_decided_where_they_got(
    tmp_path: Path, strategy: str
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    _tree(root)
    (tmp_path / "outside").mkdir()
    os.symlink(str(tmp_path / "outside"), root / "pub" / "out")  # absolute, outside
    os.symlink("../../outside", root / "pub" / "up")  # relative, outside
    os.symlink("../a/b/gone.txt", root / "pub" / "gone")  # dangling, inside
    os.symlink("l2", root / "pub" / "l1")  # a loop
    os.symlink("l1", root / "pub" / "l2")
    with _opened(root, strategy) as opener:
        assert linked_below(opener, "pub", 100) == ["/a/b/gone.txt"]


def test_not_a_collection_or_nothing_there_covers_no_link(tmp_path: Path, strategy: str) -> None:
    _tree(tmp_path)
    os.symlink("../a/b/x.txt", tmp_path / "c" / "lf")
    with _opened(tmp_path, strategy) as opener:
        assert linked_below(opener, "c/z.txt", 100) == []
        assert linked_below(opener, "c/lf", 100) == []  # a link to a file
        assert linked_below(opener, "missing", 100) == []


def test_the_walk_is_bounded_by_the_tree_limit(tmp_path: Path, strategy: str) -> None:
    _tree(tmp_path)
    for i in range(5):
        (tmp_path / "c" / f"f{i}").write_text("")
    with _opened(tmp_path, strategy) as opener:
        assert linked_below(opener, "c", 6) == []  # z.txt and five more: six entries
        with pytest.raises(TreeTooLarge):
            linked_below(opener, "c", 5)


def _users(tmp_path: Path) -> Path:
    from serverio.site.passwords import hash_password

    users = tmp_path / "users"
    users.write_text(f"alice:{hash_password('wonderland', 1000)}\n")
    return users


_LOCK_BODY = (
    b'<?xml version="1.0" encoding="utf-8"?><D:lockinfo xmlns:D="DAV:">'
    b"<D:lockscope><D:exclusive/></D:lockscope><D:locktype><D:write/></D:locktype>"
    b"</D:lockinfo>"
)
_LOCK_HEADERS = {"Depth": "infinity", "Timeout": "Second-60"}


async def _lock_statuses(cfg: Config, *targets: str) -> list[int]:
    """The statuses of a depth-infinity LOCK of each of ``targets``, in
    turn, on one fresh server."""
    srv = Server(cfg)
    statuses = []
    try:
        async with client_for(cfg, "h1", srv) as send:
            for target in targets:
                statuses.append((await send("LOCK", target, _LOCK_HEADERS, _LOCK_BODY)).status)
    finally:
        srv.opener.close()
    return statuses


async def test_a_lock_over_a_link_to_a_protected_file_is_refused_over_the_tree_limit_403(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    _tree(root)
    os.symlink("../a/b/x.txt", root / "c" / "lf")
    auth = (("/a/b/**", str(_users(tmp_path))),)
    cfg = make_config(root, webdav=True, upload=True, auth=auth, webdav_max_tree=100)
    # /c/lf is alice's /a/b/x.txt; /a/ has her rule below it (already so).
    assert await _lock_statuses(cfg, "/c/", "/a/") == [401, 401]
    cfg = make_config(root, webdav=True, upload=True, auth=auth, webdav_max_tree=1)
    # Two entries below /c/: over --webdav-max-tree.
    assert await _lock_statuses(cfg, "/c/") == [403]


async def test_without_rules_a_lock_walks_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tree(tmp_path)
    os.symlink("../a/b/x.txt", tmp_path / "c" / "lf")
    walked: list[str] = []
    real = resolved_mod.linked_below

    def spy(opener: RootOpener, relpath: str, limit: int) -> list[str]:
        walked.append(relpath)
        return real(opener, relpath, limit)

    monkeypatch.setattr("serverio.dav.service.linked_below", spy)
    cfg = make_config(tmp_path, webdav=True, upload=True, webdav_max_tree=1)
    # Not walked: no tree limit either.
    assert await _lock_statuses(cfg, "/c/") == [200]
    assert walked == []
