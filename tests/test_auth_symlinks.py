"""Rules decided on the resolved target of a symlink inside the root
(security round 4, issue 41 item 7).

``pub/link -> ../private`` with ``[[auth]] path = "/private/**"``: a GET,
a listing, a PUT, a DELETE, a form upload, an archive member and a WebDAV
request through the link need the credentials ``/private/**`` asks for,
as the same requests for ``/private/...`` do; with them they work.  A
link to an unprotected place works as before.  Every open that decides
this goes through the contained opener's ``open_resolved`` (the same
resolution as the open), under each containment strategy.
"""

from __future__ import annotations

import base64
import errno
import io
import os
import zipfile
from pathlib import Path
from typing import Any

import pytest

from serverio.config import Config
from serverio.fs.mounts import MountedRoot
from serverio.fs.opener import RootOpener
from serverio.site.passwords import hash_password

from .conftest import make_config, memory_connection
from .h2client import h2_memory

PASSWORD = "wonderland"
SECRET = b"TOP-SECRET\n"

pytestmark = pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")


def basic() -> str:
    token = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    return f"Authorization: Basic {token}\r\n"


@pytest.fixture
def users(tmp_path: Path) -> Path:
    f = tmp_path / "users.htpasswd"
    f.write_text(f"alice:{hash_password(PASSWORD, 1000)}\n")
    return f


@pytest.fixture
def site(root: Path) -> Path:
    """``private/`` (protected), ``pub/`` with links into it and one to a
    public place."""
    (root / "private").mkdir()
    (root / "private" / "secret.txt").write_bytes(SECRET)
    (root / "open").mkdir()
    (root / "open" / "free.txt").write_bytes(b"free\n")
    (root / "pub").mkdir()
    (root / "pub" / "plain.txt").write_bytes(b"plain\n")
    os.symlink("../private", root / "pub" / "link")
    os.symlink("../private/secret.txt", root / "pub" / "s.txt")
    os.symlink("../open", root / "pub" / "free")
    return root


def _cfg(root: Path, users: Path, **kw: Any) -> Config:
    return make_config(root, auth=(("/private/**", str(users)),), **kw)


def _zip_files(body: bytes) -> dict[str, bytes]:
    z = zipfile.ZipFile(io.BytesIO(body))
    return {n: z.read(n) for n in z.namelist() if not n.endswith("/")}


# ------------------------------------------------------------ reads


async def test_get_through_a_link_needs_the_targets_credentials(site: Path, users: Path) -> None:
    async with memory_connection(_cfg(site, users)) as (client, _, _):
        for target in ("/pub/link/secret.txt", "/pub/s.txt"):
            for method in ("GET", "HEAD"):
                r = await client.get(target, method=method)
                assert r.status == 401, (target, method, r.status)
                assert SECRET not in r.body
            r = await client.get(target, basic())
            assert (r.status, r.body) == (200, SECRET), target
            assert r.header("cache-control") == "private"
        # The direct path, as before.
        assert (await client.get("/private/secret.txt")).status == 401
        # Twice: a file reached through a link is never answered from the
        # warm-file cache without its resolved target's check.
        for _ in range(2):
            assert (await client.get("/pub/s.txt")).status == 401
        # A link to an unprotected place, and a plain file: as before.
        r = await client.get("/pub/free/free.txt")
        assert (r.status, r.body) == (200, b"free\n")
        assert r.header("cache-control") != "private"
        assert (await client.get("/pub/plain.txt")).status == 200


async def test_a_listing_through_a_link_needs_the_targets_credentials(
    site: Path, users: Path
) -> None:
    async with memory_connection(_cfg(site, users)) as (client, _, _):
        for target in ("/pub/link/", "/pub/link/?format=json"):
            r = await client.get(target)
            assert r.status == 401, target
            assert b"secret.txt" not in r.body
        # The listing's own check verifies the credentials; its protected
        # names are shown to credentials verified within the window (as
        # any listing's: "Listings leave protected names out").
        r = await client.get("/pub/link/", basic())
        assert r.status == 200 and r.header("cache-control") == "private"
        r = await client.get("/pub/link/", basic())
        assert r.status == 200 and b"secret.txt" in r.body
        r = await client.get("/pub/free/")
        assert r.status == 200 and b"free.txt" in r.body
        # The listing of /pub/ leaves out the link to the protected file
        # (its size and time are the protected file's) for a client that
        # has not passed that rule; the linked directory's name is its own.
        r = await client.get("/pub/")
        assert r.status == 200 and b"plain.txt" in r.body and b"s.txt" not in r.body


async def test_an_index_file_through_a_link_is_decided_on_its_target(
    site: Path, users: Path
) -> None:
    (site / "private" / "index.html").write_bytes(b"PRIVATE-INDEX")
    os.symlink("../private/index.html", site / "open" / "index.html")
    async with memory_connection(_cfg(site, users)) as (client, _, _):
        for target in ("/open/", "/pub/free/", "/pub/link/"):
            r = await client.get(target)
            assert r.status == 401 and b"PRIVATE-INDEX" not in r.body, target
        r = await client.get("/open/", basic())
        assert (r.status, r.body) == (200, b"PRIVATE-INDEX")


async def test_a_sidecar_linked_elsewhere_is_not_served(site: Path, users: Path) -> None:
    (site / "pub" / "page.html").write_bytes(b"<p>page</p>" * 20)
    os.symlink("../private/secret.txt", site / "pub" / "page.html.gz")
    async with memory_connection(_cfg(site, users)) as (client, _, _):
        r = await client.get("/pub/page.html", "Accept-Encoding: gzip\r\n")
        assert r.status == 200 and SECRET not in r.body
        assert r.header("content-encoding") != "gzip" or b"page" not in r.body
        # Asked for by name: the link's target rule.
        assert (await client.get("/pub/page.html.gz")).status == 401


async def test_the_resolved_target_is_decided_over_http2(site: Path, users: Path) -> None:
    async with h2_memory(_cfg(site, users, archives=True)) as (client, _, _):
        for target in ("/pub/link/secret.txt", "/pub/link/", "/pub/s.txt"):
            r = await client.get(target)
            assert r.status == 401 and SECRET not in r.body, target
        (auth,) = [(k, v.strip()) for k, v in [basic().split(":", 1)]]
        r = await client.get("/pub/link/secret.txt", [auth])
        assert (r.status, bytes(r.body)) == (200, SECRET)
        r = await client.get("/pub/?archive=zip")
        assert r.status == 200 and SECRET not in bytes(r.body)
        r = await client.get("/pub/free/free.txt")
        assert r.status == 200


async def test_an_archive_leaves_out_members_reached_through_a_link(
    site: Path, users: Path
) -> None:
    async with memory_connection(_cfg(site, users, archives=True)) as (client, _, _):
        anon = await client.get("/pub/?archive=zip")
        assert anon.status == 200
        files = _zip_files(anon.body)
        assert SECRET not in anon.body, files.keys()
        assert files["pub/plain.txt"] == b"plain\n"
        assert files["pub/free/free.txt"] == b"free\n"  # an unprotected link: kept
        assert not any("secret" in n or n == "pub/s.txt" for n in files), files.keys()
        # The linked directory's own archive: its listing's rule (401).
        assert (await client.get("/pub/link/?archive=zip")).status == 401
        # Credentials verified (as for any protected member), then the
        # same client's archive holds them.
        assert (await client.get("/private/secret.txt", basic())).status == 200
        authed = await client.get("/pub/?archive=zip", basic())
        files = _zip_files(authed.body)
        assert files["pub/link/secret.txt"] == SECRET
        assert files["pub/s.txt"] == SECRET
        r = await client.get("/pub/link/?archive=zip", basic())
        assert _zip_files(r.body)["link/secret.txt"] == SECRET


# ------------------------------------------------------------ existence


# Names below the protected folder, reached through the link: each answer
# must be the one a protected existing name gets (401), so that an
# anonymous client cannot tell which names exist there.
_BELOW_LINK = (
    "/pub/link/missing",  # nothing there
    "/pub/link/missing/deeper.txt",  # below a missing directory
    "/pub/link/secret.txt/x",  # below a file (ENOTDIR)
    "/pub/link/missing/",
)


async def test_a_missing_name_through_a_link_tells_nothing(site: Path, users: Path) -> None:
    (site / "private" / "sub").mkdir()
    async with memory_connection(_cfg(site, users)) as (client, _, _):
        # The direct requests: the request path's rule answers first.
        for target in ("/private/missing", "/private/secret.txt", "/private/sub"):
            assert (await client.get(target)).status == 401, target
        for target in (*_BELOW_LINK, "/pub/link/secret.txt", "/pub/link/sub"):
            for method in ("GET", "HEAD"):
                r = await client.get(target, method=method)
                assert r.status == 401, (target, method, r.status)
                assert r.header("www-authenticate") is not None
        # With the credentials the answers are the files' own.
        assert (await client.get("/pub/link/missing", basic())).status == 404
        assert (await client.get("/pub/link/sub", basic())).status in (301, 308)
        # A missing name through an unprotected link, or without a link: 404.
        assert (await client.get("/pub/free/missing")).status == 404
        assert (await client.get("/pub/missing")).status == 404
        assert (await client.get("/pub/free/free.txt/x")).status == 404


async def test_a_missing_name_through_a_link_tells_nothing_over_http2(
    site: Path, users: Path
) -> None:
    async with h2_memory(_cfg(site, users)) as (client, _, _):
        for target in (*_BELOW_LINK, "/pub/link/secret.txt"):
            r = await client.get(target)
            assert r.status == 401, (target, r.status)
        (auth,) = [(k, v.strip()) for k, v in [basic().split(":", 1)]]
        r = await client.get("/pub/link/missing", [auth])
        assert r.status == 404
        assert (await client.get("/pub/free/missing")).status == 404


# ------------------------------------------------------------ the pure parts


def test_resolved_path_is_the_match_path_of_a_resolved_path() -> None:
    from serverio.http.access import resolved_path

    assert resolved_path("") == "/"
    assert resolved_path("", True) == "/"
    assert resolved_path("private/secret.txt") == "/private/secret.txt"
    assert resolved_path("private", True) == "/private/"


@pytest.mark.parametrize("strategy", ["walk", "windows", None])
def test_open_resolved_names_where_a_link_led(site: Path, strategy: str | None) -> None:
    os.symlink(str(site / "private"), site / "pub" / "abs")
    for hidden in (False, True):
        opener = RootOpener(str(site), follow_symlinks=False, hidden=hidden, strategy=strategy)
        try:
            for rel, want in (
                ("pub/link/secret.txt", "private/secret.txt"),
                ("pub/link", "private"),
                ("pub/s.txt", "private/secret.txt"),
                ("pub/abs/secret.txt", "private/secret.txt"),
                ("pub/free/free.txt", "open/free.txt"),
                ("pub/link/..", ""),
                ("pub/plain.txt", None),
                ("private/secret.txt", None),
                (".", None),
            ):
                fd, got = opener.open_resolved(rel)
                os.close(fd)
                assert got == want, (strategy, hidden, rel, got)
        finally:
            opener.close()


def test_open_resolved_with_follow_symlinks_and_mounts(site: Path, tmp_path: Path) -> None:
    opener = RootOpener(str(site), follow_symlinks=True)
    try:
        for rel, want in (
            ("pub/link/secret.txt", "private/secret.txt"),
            ("pub/plain.txt", None),
        ):
            fd, got = opener.open_resolved(rel)
            os.close(fd)
            assert got == want, rel
    finally:
        opener.close()
    mounted = MountedRoot(["docs", ""], [RootOpener(str(site), follow_symlinks=False)] * 2)
    try:
        fd, got = mounted.open_resolved("docs/pub/link/secret.txt")
        os.close(fd)
        assert got == "docs/private/secret.txt"
        fd, got = mounted.open_resolved("pub/link")
        os.close(fd)
        assert got == "private"
    finally:
        mounted.openers[0].close()


@pytest.mark.parametrize("strategy", ["walk", "windows", None, "follow"])
def test_open_resolved_says_how_far_a_failed_resolution_got(
    site: Path, strategy: str | None
) -> None:
    from serverio.fs.opener import Unreached

    follow = strategy == "follow"
    opener = RootOpener(str(site), follow_symlinks=follow, strategy=None if follow else strategy)
    try:
        for rel, want in (
            ("pub/link/missing", "private/missing"),
            ("pub/link/missing/deeper.txt", "private/missing/deeper.txt"),
            ("pub/link/secret.txt/x", "private/secret.txt/x"),
            ("pub/free/missing", "open/missing"),
        ):
            with pytest.raises(Unreached) as got:
                opener.open_resolved(rel)
            assert got.value.path == want, (strategy, rel)
            assert got.value.errno in (errno.ENOENT, errno.ENOTDIR), rel
        # No link on the way: the plain error (the request path is that
        # path), and open() never reports.
        for rel in ("pub/missing", "private/missing"):
            with pytest.raises(OSError) as plain:
                opener.open_resolved(rel)
            assert not isinstance(plain.value, Unreached), rel
        with pytest.raises(OSError) as plain:
            opener.open("pub/link/missing")
        assert not isinstance(plain.value, Unreached)
    finally:
        opener.close()
    # Under a mount, in the request's space.
    mounted = MountedRoot(["docs", ""], [RootOpener(str(site), follow_symlinks=False)] * 2)
    try:
        with pytest.raises(Unreached) as got:
            mounted.open_resolved("docs/pub/link/missing")
        assert got.value.path == "docs/private/missing"
        with pytest.raises(Unreached) as got:
            mounted.open_resolved("pub/link/missing")
        assert got.value.path == "private/missing"
    finally:
        mounted.openers[0].close()


# ------------------------------------------------------------ writes


def _put(path: str, body: bytes, headers: str = "") -> bytes:
    return (
        f"PUT {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}\r\n{headers}\r\n"
    ).encode() + body


def _raw(method: str, path: str, headers: str = "") -> bytes:
    return f"{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n{headers}\r\n".encode()


async def _send(client: object, raw: bytes) -> int:
    await client.send_raw(raw)  # type: ignore[attr-defined]
    r = await client.read_response()  # type: ignore[attr-defined]
    return int(r.status)


async def test_put_and_delete_through_a_link_need_the_targets_credentials(
    site: Path, users: Path
) -> None:
    cfg = _cfg(site, users, upload=True, min_free_space=0, allow_anonymous_writes=True)
    async with memory_connection(cfg) as (client, _, _):
        for path in ("/pub/link/secret.txt", "/pub/link/new.txt"):
            assert await _send(client, _put(path, b"REPLACED")) == 401, path
        assert await _send(client, _raw("DELETE", "/pub/link/secret.txt")) == 401
        assert (site / "private" / "secret.txt").read_bytes() == SECRET
        assert not (site / "private" / "new.txt").exists()
        # With the credentials: written through the link, as asked.
        assert await _send(client, _put("/pub/link/new.txt", b"NEW", basic())) == 201
        assert (site / "private" / "new.txt").read_bytes() == b"NEW"
        assert await _send(client, _raw("DELETE", "/pub/link/new.txt", basic())) == 204
        assert not (site / "private" / "new.txt").exists()
        # A link to an unprotected place: as before.
        assert await _send(client, _put("/pub/free/up.txt", b"UP")) == 201
        assert (site / "open" / "up.txt").read_bytes() == b"UP"


async def test_a_write_below_a_missing_name_through_a_link_tells_nothing(
    site: Path, users: Path
) -> None:
    # As for reads: a write whose directory is missing below the link's
    # protected target answers what one to an existing directory there
    # does (401), not a 409/404 that tells which names exist.
    (site / "private" / "sub").mkdir()
    cfg = _cfg(site, users, upload=True, min_free_space=0, allow_anonymous_writes=True)
    async with memory_connection(cfg) as (client, _, _):
        for path in ("/private/missing/x.txt", "/pub/link/sub/x.txt", "/pub/link/missing/x.txt"):
            assert await _send(client, _put(path, b"X")) == 401, path
        for path in ("/pub/link/missing", "/pub/link/missing/x.txt", "/pub/link/secret.txt/x"):
            assert await _send(client, _raw("DELETE", path)) == 401, path
        # With the credentials, the writes' own answers.
        assert await _send(client, _put("/pub/link/missing/x.txt", b"X", basic())) == 409
        assert await _send(client, _raw("DELETE", "/pub/link/missing", basic())) == 404
        # Through an unprotected link: as before.
        assert await _send(client, _put("/pub/free/missing/x.txt", b"X")) == 409
    assert sorted(os.listdir(site / "private")) == ["secret.txt", "sub"]


async def test_a_writable_table_applies_to_the_resolved_target(site: Path, users: Path) -> None:
    # [[writable]] /pub/** alone: a link out of /pub/ does not make its
    # target writable, whatever the credentials.
    cfg = make_config(
        site,
        upload=True,
        min_free_space=0,
        allow_anonymous_writes=True,
        writable=(("/pub/**", ("put", "delete")),),
    )
    async with memory_connection(cfg) as (client, _, _):
        assert await _send(client, _put("/pub/free/x.txt", b"X")) == 403
        assert await _send(client, _raw("DELETE", "/pub/free/free.txt")) == 403
        assert (site / "open" / "free.txt").exists() and not (site / "open" / "x.txt").exists()
        assert await _send(client, _put("/pub/x.txt", b"X")) == 201


async def test_a_form_upload_through_a_link_needs_the_targets_credentials(
    site: Path, users: Path
) -> None:
    from .test_upload_form import BOUNDARY, form_body

    body = form_body(("file", "secret.txt", b"FORM"))
    cfg = _cfg(
        site,
        users,
        upload=True,
        min_free_space=0,
        allow_anonymous_writes=True,
        on_duplicate="overwrite",
    )

    def post(path: str, headers: str = "") -> bytes:
        return (
            f"POST {path} HTTP/1.1\r\nHost: t\r\nOrigin: http://t\r\n"
            f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\n"
            f"Content-Length: {len(body)}\r\n{headers}\r\n"
        ).encode() + body

    async with memory_connection(cfg) as (client, _, _):
        assert await _send(client, post("/pub/link/")) == 401
        assert (site / "private" / "secret.txt").read_bytes() == SECRET
        assert await _send(client, post("/pub/link/", basic())) == 303
        assert (site / "private" / "secret.txt").read_bytes() == b"FORM"


async def test_webdav_through_a_link_needs_the_targets_credentials(site: Path, users: Path) -> None:
    cfg = _cfg(site, users, webdav=True, min_free_space=0, allow_anonymous_writes=True)
    dest = "Destination: http://t/pub/leak.txt\r\n"
    async with memory_connection(cfg) as (client, _, _):
        assert await _send(client, _raw("COPY", "/pub/link/secret.txt", dest)) == 401
        assert not (site / "pub" / "leak.txt").exists()
        assert await _send(client, _raw("PROPFIND", "/pub/link/", "Depth: 1\r\n")) == 401
        assert await _send(client, _raw("PROPFIND", "/pub/s.txt", "Depth: 0\r\n")) == 401
        assert await _send(client, _raw("DELETE", "/pub/link/secret.txt")) == 401
        assert await _send(client, _put("/pub/link/secret.txt", b"DAV")) == 401
        into = "Destination: http://t/pub/link/copied.txt\r\n"
        assert await _send(client, _raw("COPY", "/pub/plain.txt", into)) == 401
        assert await _send(client, _raw("MKCOL", "/pub/link/newdir")) == 401
        assert (site / "private" / "secret.txt").read_bytes() == SECRET
        assert sorted(os.listdir(site / "private")) == ["secret.txt"]
        # With the credentials, and through an unprotected link: allowed.
        assert await _send(client, _raw("COPY", "/pub/link/secret.txt", dest + basic())) == 201
        assert (site / "pub" / "leak.txt").read_bytes() == SECRET
        r = await _send(client, _raw("PROPFIND", "/pub/free/", "Depth: 1\r\n"))
        assert r == 207


async def test_propfind_of_a_missing_protected_name_tells_nothing(site: Path, users: Path) -> None:
    # PROPFIND answered 404 for a missing name below /private/ (directly or
    # through the link) and 401 for an existing one: decided as a read of
    # the path first, as a GET is.
    cfg = _cfg(site, users, webdav=True, min_free_space=0, allow_anonymous_writes=True)
    depth = "Depth: 0\r\n"
    async with memory_connection(cfg) as (client, _, _):
        for path in ("/private/missing", "/private/missing/x", "/pub/link/missing", "/pub/s.txt"):
            assert await _send(client, _raw("PROPFIND", path, depth)) == 401, path
        assert await _send(client, _raw("PROPFIND", "/private/missing", depth + basic())) == 404
        assert await _send(client, _raw("PROPFIND", "/pub/missing", depth)) == 404
        assert await _send(client, _raw("PROPFIND", "/pub/free/missing", depth)) == 404


async def test_a_put_through_a_link_over_http2(site: Path, users: Path) -> None:
    from .test_body_seam import send_body

    cfg = _cfg(site, users, upload=True, min_free_space=0, allow_anonymous_writes=True)
    async with h2_memory(cfg) as (client, _, _):
        sid = client.request("/pub/link/secret.txt", "PUT", [], end_stream=False)
        await send_body(client, sid, b"H2")
        (r,) = await client.wait(sid)
        assert r.status == 401
        assert (site / "private" / "secret.txt").read_bytes() == SECRET


# ------------------------------------------------------------ portability


async def test_a_windows_link_target_is_decided_on_its_resolved_path(
    site: Path, users: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The windows strategy given Windows' separators: a link target
    # "..\\private" (a junction's or mklink's form) resolves to /private.
    import re

    from serverio.fs import opener as opener_mod

    os.symlink("..\\private", site / "pub" / "wlink")
    monkeypatch.setattr(opener_mod, "_SEPARATORS", re.compile(r"[\\/]"))
    plain_init = RootOpener.__init__

    def windows_init(self: RootOpener, root: str, **kw: object) -> None:
        kw["strategy"] = "windows"
        plain_init(self, root, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(RootOpener, "__init__", windows_init)
    opener = RootOpener(str(site), follow_symlinks=False)
    try:
        fd, got = opener.open_resolved("pub/wlink/secret.txt")
        os.close(fd)
        assert got == "private/secret.txt"
    finally:
        opener.close()
    async with memory_connection(_cfg(site, users, archives=True)) as (client, _, _):
        # (Not the listing /pub/wlink/: the strategy lists a directory by
        # its real path, which Linux's realpath cannot make of "..\\private".)
        for target in ("/pub/wlink/secret.txt", "/pub/link/secret.txt", "/pub/link/"):
            r = await client.get(target)
            assert r.status == 401 and SECRET not in r.body, target
        r = await client.get("/pub/wlink/secret.txt", basic())
        assert (r.status, r.body) == (200, SECRET)
        r = await client.get("/pub/?archive=zip")
        assert r.status == 200 and SECRET not in r.body


def test_a_resolved_path_is_folded_on_a_case_insensitive_root() -> None:
    # On a case-insensitive root a link spelled ../PRIVATE opens /private:
    # its resolved path is matched folded, as a requested path is.
    from serverio.http.access import AccessTarget, Kind, resolved_path
    from serverio.site.access import rule_for
    from serverio.site.passwords import cost_profile
    from serverio.site.rules import compile_rules

    users = {"alice": hash_password(PASSWORD, 1000)}
    auth = [("/private/**", users, cost_profile(users.values()))]
    for fold, protected in ((True, True), (False, False)):
        rules = compile_rules(auth=auth, fold=fold)
        for real, is_dir in (("PRIVATE/Secret.TXT", False), ("Private", True)):
            target = AccessTarget((resolved_path(real, is_dir),), Kind.FILE)
            assert (rule_for(rules, target) is not None) is protected, (fold, real)
