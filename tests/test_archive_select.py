"""A selection as one archive (``?archive=zip&name=A&name=B``, issue 46):
exactly the named entries of the folder, byte-identical, a selected folder
with what it holds; every name attacker input: separators, ``..``, NUL,
encoded separators, symlinks out of the root, dotfiles, ``--hide``, names
without the right, too many names; problem+json for a JSON client."""

from __future__ import annotations

import base64
import io
import json
import os
import zipfile
from pathlib import Path
from urllib.parse import quote

import pytest

from serverio.archive.plan import SELECT_MAX, selected_names
from serverio.errors import HTTPError
from serverio.site.passwords import hash_password

from .conftest import make_config, memory_connection

JSON = "Accept: application/json\r\n"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    www = tmp_path / "www"
    d = www / "d"
    (d / "sub" / "deeper").mkdir(parents=True)
    (d / "a.txt").write_bytes(b"alpha\n")
    (d / "b.bin").write_bytes(os.urandom(200_000))
    (d / "c.txt").write_bytes(b"not selected")
    (d / "sub" / "s.txt").write_bytes(b"in sub")
    (d / "sub" / "deeper" / "z.bin").write_bytes(os.urandom(70_000))
    (d / ".dot").write_bytes(b"dotfile")
    (d / "x.log").write_bytes(b"hidden by --hide")
    (d / "caf\u00e9 & \u201cquotes\u201d.txt").write_bytes(b"accent")
    (d / "a&name=b+c%20#?.txt").write_bytes(b"query characters")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_bytes(b"OUTSIDE")
    os.symlink(outside / "secret.txt", d / "escape.txt")
    os.symlink(outside, d / "escape-dir")
    return www


def _q(*names: str) -> str:
    return "/d/?archive=zip" + "".join("&name=" + quote(n, safe="") for n in names)


def _files(body: bytes) -> dict[str, bytes]:
    z = zipfile.ZipFile(io.BytesIO(body))
    assert z.testzip() is None
    return {n: z.read(n) for n in z.namelist() if not n.endswith("/")}


async def test_exactly_the_selected_names_byte_identical(tree: Path) -> None:
    d = tree / "d"
    accent = "caf\u00e9 & \u201cquotes\u201d.txt"
    async with memory_connection(make_config(tree, archives=True, hide=("*.log",))) as (c, _, _):
        odd = "a&name=b+c%20#?.txt"  # each character of a query's syntax, encoded
        r = await c.get(_q("a.txt", "b.bin", accent, odd, "a.txt"))  # a repeat counts once
        assert r.status == 200 and r.header("content-type") == "application/zip"
        assert r.header("content-length") is None and r.header("transfer-encoding") == "chunked"
        assert r.header(
            "content-disposition",
        ) == ("attachment; filename=\"d.zip\"; filename*=UTF-8''d.zip")
        assert _files(r.body) == {
            "d/a.txt": b"alpha\n",
            "d/b.bin": (d / "b.bin").read_bytes(),
            f"d/{accent}": b"accent",
            f"d/{odd}": b"query characters",
        }
        # A selected folder brings everything below it; tar.gz works too.
        r = await c.get(_q("sub", "a.txt"))
        assert _files(r.body) == {
            "d/a.txt": b"alpha\n",
            "d/sub/s.txt": b"in sub",
            "d/sub/deeper/z.bin": (d / "sub" / "deeper" / "z.bin").read_bytes(),
        }
        t = await c.get(_q("a.txt").replace("zip", "tar.gz"))
        assert t.status == 200 and t.header("content-type") == "application/gzip"
        # Without &name= the folder archive is unchanged; &name= without
        # ?archive= is a plain listing.
        whole = _files((await c.get("/d/?archive=zip")).body)
        assert "d/c.txt" in whole and "d/x.log" not in whole
        page = await c.get("/d/?name=a.txt")
        assert page.status == 200 and page.header("content-type") == "text/html; charset=utf-8"


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        ("..", 400),
        (".", 400),
        ("", 400),
        ("sub/s.txt", 400),  # a descendant: only names of this folder
        ("../d/a.txt", 400),
        ("sub%2Fs.txt", 400),  # encoded once: "sub/s.txt" after the query's decoding
        ("..%2F..%2Fetc%2Fpasswd", 400),
        ("sub%5Cs.txt", 400),  # a backslash
        ("a.txt%00", 400),  # NUL
        ("sub%252Fs.txt", 404),  # encoded twice: the name "sub%2Fs.txt", absent
        ("escape.txt", 404),  # a symlink out of the root: not in the listing
        ("escape-dir", 404),
        (".dot", 404),  # a dotfile (no --hidden)
        ("x.log", 404),  # --hide
        ("nothing-here", 404),
        ("a.txt%0D%0AX-Evil:%201", 404),  # header injection is just an absent name
    ],
)
async def test_hostile_names_are_refused_before_anything_is_sent(
    tree: Path, raw: str, status: int
) -> None:
    async with memory_connection(make_config(tree, archives=True, hide=("*.log",))) as (c, _, _):
        r = await c.get(f"/d/?archive=zip&name=a.txt&name={raw}", JSON)
        assert r.status == status, raw
        assert r.header("content-type") == "application/problem+json"
        doc = json.loads(r.body)
        assert doc["status"] == status and "name" in doc and doc["detail"]
        assert b"OUTSIDE" not in r.body and b"dotfile" not in r.body
        # HTML clients get the page, the name escaped.
        h = await c.get(f"/d/?archive=zip&name=%3Cscript%3E{raw}", "Accept: text/html\r\n")
        assert h.status in (400, 404) and b"<script>" not in h.body
        # The connection is still good.
        assert (await c.get("/d/a.txt")).body == b"alpha\n"


async def test_the_dotfile_is_selectable_with_hidden(tree: Path) -> None:
    async with memory_connection(make_config(tree, archives=True, hidden=True)) as (c, _, _):
        assert _files((await c.get(_q(".dot"))).body) == {"d/.dot": b"dotfile"}


async def test_too_many_names_is_a_400_naming_the_limit(tree: Path) -> None:
    async with memory_connection(make_config(tree, archives=True)) as (c, _, _):
        # Short names: the target stays under its own 8 KiB bound (414).
        target = "/?archive=zip" + "&name=d" * (SELECT_MAX + 1)
        r = await c.get(target, JSON)
        assert r.status == 400 and r.header("content-type") == "application/problem+json"
        doc = json.loads(r.body)
        assert doc["limit"] == SELECT_MAX and doc["names"] == SELECT_MAX + 1
        assert str(SELECT_MAX) in doc["detail"]
        ok = await c.get("/?archive=zip" + "&name=d" * SELECT_MAX)
        assert ok.status == 200 and _files(ok.body)["www/d/a.txt"] == b"alpha\n"
    with pytest.raises(HTTPError) as info:
        selected_names("archive=zip" + "&name=a" * (SELECT_MAX + 1))
    assert info.value.status == 400 and info.value.problem is not None
    assert ("limit", SELECT_MAX) in info.value.problem.members
    assert selected_names("archive=zip" + "&name=a" * SELECT_MAX) == frozenset({"a"})
    assert selected_names("archive=zip") is None and selected_names("archive=zip&names=x") is None
    # A byte that is not UTF-8 stays the name's byte (as listed names are).
    assert selected_names("name=caf%E9") == frozenset({"caf\udce9"})


async def test_a_name_without_the_right_is_a_404_until_credentials_pass(
    tree: Path, tmp_path: Path
) -> None:
    users = tmp_path / "users.htpasswd"
    users.write_text(f"alice:{hash_password('wonderland', 1000)}\n")
    (tree / "d" / "report.secret").write_bytes(b"SECRET")
    basic = "Authorization: Basic " + base64.b64encode(b"alice:wonderland").decode() + "\r\n"
    cfg = make_config(tree, archives=True, auth=(("/**/*.secret", str(users)),))
    async with memory_connection(cfg) as (c, _, _):
        anon = await c.get(_q("a.txt", "report.secret"), JSON)
        assert anon.status == 404 and b"SECRET" not in anon.body
        # The same answer as for a name that does not exist: nothing told.
        absent = await c.get(_q("a.txt", "report.secreu"), JSON)
        assert (
            json.loads(absent.body)["detail"].replace("secreu", "secret")
            == json.loads(anon.body)["detail"]
        )
        assert (await c.get("/d/report.secret", basic)).status == 200
        authed = await c.get(_q("a.txt", "report.secret"), basic)
        assert authed.status == 200 and authed.header("cache-control") == "private"
        assert _files(authed.body) == {"d/a.txt": b"alpha\n", "d/report.secret": b"SECRET"}


async def test_the_bounds_apply_to_the_selection(tree: Path) -> None:
    cfg = make_config(tree, archives=True, archive_max_bytes=100_000)
    async with memory_connection(cfg) as (c, _, _):
        assert (await c.get(_q("b.bin"))).status == 413  # 200,000 bytes
        assert (await c.get(_q("a.txt"))).status == 200
    # A folder past --archive-max-entries still gives a small selection.
    for i in range(20):
        (tree / "d" / f"f{i:02d}").write_bytes(b"%d" % i)
    cfg = make_config(tree, archives=True, archive_max_entries=5)
    async with memory_connection(cfg) as (c, _, _):
        assert (await c.get("/d/?archive=zip")).status == 413
        r = await c.get(_q("f19", "f00"))
        assert r.status == 200 and _files(r.body) == {"d/f19": b"19", "d/f00": b"0"}
