"""Mounts (--mount ROUTE=DIR, [[mount]]) and --route-prefix (issue 28).

The matcher table (pure), two mounts holding different files of the same
name over HTTP/1.1 and HTTP/2 (the caches key by the path as served),
listings and redirects under a mount, traversal attempts out of a mount,
an [[auth]] rule protecting a mount, the route prefix, the bad
configurations (exit 2)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from serverio.config import Config, normal_route
from serverio.errors import ConfigError
from serverio.fs import filecache as _filecache
from serverio.fs.mounts import MountedRoot, match_mount, mount_table
from serverio.site.passwords import hash_password

from .conftest import make_config, memory_connection
from .h2client import h2_memory
from .test_cli import run_cli
from .test_site import basic

ROUTES = ("docs/deep", "docs", "a", "")


@pytest.mark.parametrize(
    ("relpath", "want"),
    [
        (".", (3, ".")),
        ("x.txt", (3, "x.txt")),
        ("docs", (1, ".")),
        ("docs/x", (1, "x")),
        ("docsx", (3, "docsx")),  # segment boundary: never a string prefix
        ("docsx/y", (3, "docsx/y")),
        ("docs/deep", (0, ".")),
        ("docs/deep/z/w", (0, "z/w")),
        ("docs/deeper", (1, "deeper")),
        ("a", (2, ".")),
        ("ab", (3, "ab")),
    ],
)
def test_matcher_longest_route_on_segment_boundaries(relpath: str, want: tuple[int, str]) -> None:
    assert match_mount(ROUTES, relpath) == want


def test_matcher_outside_every_route_under_a_prefix() -> None:
    routes = ("app/docs", "app")
    assert match_mount(routes, ".") is None
    assert match_mount(routes, "apple") is None
    assert match_mount(routes, "x/app") is None
    assert match_mount(routes, "app") == (1, ".")
    assert match_mount(routes, "app/docs/a") == (0, "a")


@pytest.mark.parametrize(
    ("route", "want"), [("/docs", "/docs"), ("/docs/", "/docs"), ("/", ""), ("/a/b/", "/a/b")]
)
def test_routes_are_normalised(route: str, want: str) -> None:
    assert normal_route(route, "--mount") == want


@pytest.mark.parametrize(
    "route", ["docs", "", "/a/../b", "/a//b", "/%2e%2e", "/a%2fb", "/a\\b", "/.git", "/a/./b"]
)
def test_bad_routes_are_refused(route: str) -> None:
    with pytest.raises(ConfigError, match="--mount"):
        normal_route(route, "--mount")


@pytest.fixture
def tree(root: Path, tmp_path: Path) -> dict[str, Path]:
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    d1.mkdir()
    d2.mkdir()
    (root / "a.txt").write_text("root a\n")
    (d1 / "a.txt").write_text("docs a\n")
    (d2 / "a.txt").write_text("deep a\n")
    (d1 / "sub").mkdir()
    (d1 / "sub" / "s.txt").write_text("sub s\n")
    (d1 / "index-less").mkdir()
    (d2 / "index.html").write_text("<p>deep index</p>\n")
    # A symlink from inside the mount to outside it (and to the main root).
    os.symlink(tmp_path / "outside" / "secret.txt", d1 / "escape.txt")
    os.symlink(root / "hello.txt", d1 / "to-root.txt")
    return {"root": root, "d1": d1, "d2": d2}


def _cfg(tree: dict[str, Path], **kw: object) -> Config:
    mounts = (("/docs/", str(tree["d1"])), ("/docs/deep", str(tree["d2"])))
    return make_config(tree["root"], mounts=mounts, **kw)


def test_mount_table_longest_first(tree: dict[str, Path]) -> None:
    cfg = _cfg(tree)
    assert [r for r, _ in mount_table(cfg)] == ["docs/deep", "docs", ""]
    pre = _cfg(tree, route_prefix="/app/")
    assert [r for r, _ in mount_table(pre)] == ["app/docs/deep", "app/docs", "app"]
    assert mount_table(make_config(tree["root"])) == ()


SAME_NAME = [
    ("/a.txt", b"root a\n"),
    ("/docs/a.txt", b"docs a\n"),
    ("/docs/deep/a.txt", b"deep a\n"),
]


async def test_two_mounts_same_name_http1(
    tree: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_filecache, "RACY_SECONDS", -3600.0)  # every file settled: cached
    cfg = _cfg(tree)
    async with memory_connection(cfg) as (client, srv, _):
        assert isinstance(srv.opener, MountedRoot)
        etags = set()
        for _ in range(3):  # cold, then warm-file cache hits and memos
            for path, body in SAME_NAME:
                r = await client.get(path)
                assert (r.status, r.body) == (200, body), path
                etags.add((path, r.header("etag")))
        assert len({e for _, e in etags}) == 3  # one ETag per file, never shared
        assert len(etags) == 3  # and stable across the warm hits
        assert srv.files.stats.hits >= 6  # the warm path was exercised


async def test_two_mounts_same_name_http2(tree: dict[str, Path]) -> None:
    cfg = _cfg(tree)
    async with h2_memory(cfg) as (client, _, _):
        for _ in range(3):
            for path, body in SAME_NAME:
                r = await client.get(path)
                assert (r.status, bytes(r.body)) == (200, body), path


async def test_listing_and_redirects_under_a_mount(tree: dict[str, Path]) -> None:
    cfg = _cfg(tree)
    async with memory_connection(cfg) as (client, _, _):
        r = await client.get("/docs")
        assert (r.status, r.header("location")) == (301, "/docs/")
        r = await client.get("/docs/sub")
        assert (r.status, r.header("location")) == (301, "/docs/sub/")
        r = await client.get("/docs/")
        assert r.status == 200
        page = r.body.decode()
        # The mount root's listing: its own names, '..' to the parent route.
        assert 'href="./sub/"' in page and 'href="./a.txt"' in page
        assert 'href="../"' in page and "hello.txt" not in page
        assert "<title>Index of /docs/</title>" in page or "/docs/" in page
        r = await client.get("/docs/deep/")  # the nested mount's index file
        assert (r.status, r.body) == (200, b"<p>deep index</p>\n")
        r = await client.get("/docs/?format=json")
        assert r.status == 200 and b'"path": "/docs/"' in r.body.replace(b'":"', b'": "')


@pytest.mark.parametrize(
    "target",
    [
        "/docs/../hello.txt",
        "/docs/%2e%2e/hello.txt",
        "/docs/..%2fhello.txt",
        "/docs/..%2f..%2foutside/secret.txt",
        "/docs/%2e%2e%2f%2e%2e%2foutside%2fsecret.txt",
        "/docs/..%5chello.txt",
        "/docs/sub\\..\\a.txt",
        "/docs/escape.txt",
        "/docs/to-root.txt",
        "/docsx/a.txt",
    ],
)
async def test_traversal_out_of_a_mount_is_refused(
    tree: dict[str, Path], target: str, strategy: str
) -> None:
    # ``strategy``: every mount's RootOpener forced to openat2, walk, windows.
    cfg = _cfg(tree)
    async with memory_connection(cfg) as (client, _, _):
        r = await client.get(target)
        assert r.status in (400, 404), (target, r.status)
        assert b"OUTSIDE-SECRET" not in r.body and b"hello world" not in r.body


async def test_auth_rule_protects_a_mount(tree: dict[str, Path], tmp_path: Path) -> None:
    users = tmp_path / "users.htpasswd"
    users.write_text(f"alice:{hash_password('wonderland', 1000)}\n")
    cfg = _cfg(tree, auth=(("/docs/**", str(users)),))
    async with memory_connection(cfg) as (client, _, _):
        for path in ("/docs/a.txt", "/docs/", "/docs/deep/", "/docs/sub/s.txt", "/docs/nope"):
            r = await client.get(path)
            assert r.status == 401, path
            assert b"docs a" not in r.body and b"deep" not in r.body
        r = await client.get("/docs/a.txt", basic("alice", "wonderland"))
        assert (r.status, r.body) == (200, b"docs a\n")
        assert (await client.get("/a.txt")).status == 200  # the root mount is not covered


async def test_route_prefix(tree: dict[str, Path]) -> None:
    cfg = _cfg(tree, route_prefix="/app/")
    async with memory_connection(cfg) as (client, _, _):
        r = await client.get("/app")
        assert (r.status, r.header("location")) == (301, "/app/")
        assert (await client.get("/app/")).status == 200
        assert (await client.get("/app/a.txt")).body == b"root a\n"
        assert (await client.get("/app/docs/a.txt")).body == b"docs a\n"
        assert (await client.get("/app/docs/deep/a.txt")).body == b"deep a\n"
        for outside in ("/", "/a.txt", "/hello.txt", "/docs/a.txt", "/apple", "/application/a.txt"):
            assert (await client.get(outside)).status == 404, outside


async def test_spa_file_of_the_matched_mount(tree: dict[str, Path]) -> None:
    (tree["d1"] / "index.html").write_text("<p>docs app</p>\n")
    cfg = _cfg(tree, spa="index.html")
    async with memory_connection(cfg) as (client, _, _):
        assert (await client.get("/docs/some/route")).body == b"<p>docs app</p>\n"
        assert (await client.get("/docs/deep/route")).body == b"<p>deep index</p>\n"
        assert (await client.get("/route")).body == b"<h1>home</h1>\n"
    pre = _cfg(tree, spa="index.html", route_prefix="/app")
    async with memory_connection(pre) as (client, _, _):
        assert (await client.get("/elsewhere")).status == 404  # no SPA outside the prefix
        assert (await client.get("/app/route")).body == b"<h1>home</h1>\n"


def test_toml_mount_tables_round_trip(tree: dict[str, Path], tmp_path: Path) -> None:
    conf = tmp_path / "c.toml"
    conf.write_text(f'[[mount]]\nroute = "/docs/"\ndir = "{tree["d1"]}"\n')
    one = run_cli("-d", str(tree["root"]), "--config", str(conf), "--print-config")
    assert one.returncode == 0, one.stderr
    assert f'[[mount]]\nroute = "/docs/"\ndir = "{tree["d1"]}"' in one.stdout
    again = tmp_path / "again.toml"
    again.write_text(one.stdout)
    two = run_cli("--config", str(again), "--print-config")
    assert two.stdout == one.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--mount", "/x=/nonexistent-serverio-dir"], "--mount /x: directory"),
        (["--mount", "docs=."], "must start with '/'"),
        (["--mount", "/a=.", "--mount", "/a/=."], "given twice"),
        (["--mount", "/=."], "served directory itself"),
        (["--mount", "/a%2fb=."], "plain names"),
        (["--mount", "nodir"], "ROUTE=DIR"),
        (["--route-prefix", "/a/../b"], "--route-prefix"),
    ],
)
def test_bad_mounts_exit_2(tmp_path: Path, args: list[str], needle: str) -> None:
    (tmp_path / "f").write_text("x")
    done = run_cli("-d", str(tmp_path), "-b", "127.0.0.1", *args, "0")
    assert done.returncode == 2
    assert needle in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_mount_dir_that_is_a_file_exits_2(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    done = run_cli("-d", str(tmp_path), "-b", "127.0.0.1", "--mount", f"/f={tmp_path / 'f'}", "0")
    assert done.returncode == 2 and "not a directory" in done.stderr


def test_users_file_inside_a_mount_is_refused(tree: dict[str, Path]) -> None:
    users = tree["d1"] / "users.htpasswd"
    users.write_text(f"alice:{hash_password('wonderland', 1000)}\n")
    from serverio.site.service import load_site

    with pytest.raises(ConfigError, match="inside the served root"):
        load_site(_cfg(tree, auth=(("/x/**", str(users)),)))
