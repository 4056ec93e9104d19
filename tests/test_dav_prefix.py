"""WebDAV under a prefix (``--webdav-prefix /dav``), over HTTP/1.1 and
HTTP/2 through the real transports on memory streams: the DAV methods,
``DAV`` and the DAV ``Allow`` at the prefix and under it; outside it the
server answers as without ``--webdav`` (405 with the uploads' ``Allow``,
PUT and DELETE the uploads' own); a ``Destination`` outside the prefix is
502 (another URL namespace, RFC 4918 §9.8.5); the prefix's top is never
removed or moved; hrefs are the full paths; the option's spellings."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from serverio.errors import ConfigError
from serverio.upload.service import ALLOW_WRITES

from .conftest import make_config
from .test_dav_locking import CLIENTS, LOCKINFO

PLAIN = ALLOW_WRITES.decode()
PROPFIND = (
    b'<?xml version="1.0"?><D:propfind xmlns:D="DAV:"><D:prop><D:getetag/></D:prop></D:propfind>'
)


def hrefs(body: bytes) -> list[str]:
    return re.findall(r"<D:href>([^<]*)</D:href>", body.decode())


@pytest.mark.parametrize("proto", CLIENTS)
async def test_the_allow_under_and_outside_the_prefix_with_site_rules(
    root: Path, proto: str
) -> None:
    # With site rules the core's OPTIONS and 405 are reached through
    # Site.route: the write feature's Allow (the pipeline's allow hook,
    # which the core no longer computes from --webdav) reaches them too.
    (root / "dav").mkdir()
    with trio.fail_after(30):
        async with CLIENTS[proto](root, webdav_prefix="/dav/", headers=["X-Site: 1"]) as call:
            status, hs, _ = await call("OPTIONS", "/hello.txt", [], b"")
            assert status == 204 and hs["allow"] == PLAIN and hs["x-site"] == "1"
            status, hs, _ = await call("PROPFIND", "/hello.txt", [], b"")
            assert status == 405 and hs["allow"] == PLAIN
            status, hs, _ = await call("POST", "/dav/", [], b"")
            assert status == 405 and "PROPFIND" in hs["allow"] and hs["x-site"] == "1"


@pytest.mark.parametrize("proto", CLIENTS)
async def test_dav_only_under_the_prefix(root: Path, proto: str) -> None:
    (root / "dav").mkdir()
    (root / "davx").mkdir()
    with trio.fail_after(30):
        async with CLIENTS[proto](root, webdav_prefix="/dav/") as call:
            # OPTIONS: DAV at the prefix and under it; the plain Allow elsewhere.
            for path in ("/dav", "/dav/", "/dav/no/such"):
                status, hs, _ = await call("OPTIONS", path, [], b"")
                assert status == 200 and hs["dav"] == "1, 2", path
                assert "PROPFIND" in hs["allow"] and "LOCK" in hs["allow"]
            for path in ("/", "/davx/", "/hello.txt"):
                status, hs, _ = await call("OPTIONS", path, [], b"")
                assert status == 204 and "dav" not in hs and hs["allow"] == PLAIN, path
            # The DAV methods outside: 405 with the plain Allow, nothing done.
            for method in ("PROPFIND", "PROPPATCH", "MKCOL", "COPY", "MOVE", "LOCK", "UNLOCK"):
                for path in ("/", "/davx/", "/hello.txt", "/newdir"):
                    status, hs, _ = await call(method, path, [("destination", "/dav/x")], b"")
                    assert status == 405 and hs["allow"] == PLAIN, (method, path)
            assert not (root / "newdir").exists() and not (root / "dav" / "x").exists()

            # Under the prefix: the DAV methods, full paths in every href.
            assert (await call("MKCOL", "/dav/c", [], b""))[0] == 201
            assert (await call("PUT", "/dav/c/a.txt", [], b"alpha"))[0] == 201
            status, _, body = await call("PROPFIND", "/dav/", [("depth", "1")], PROPFIND)
            assert status == 207
            assert hrefs(body) == ["/dav/", "/dav/c/"]
            status, _, body = await call("PROPFIND", "/dav/c/", [("depth", "1")], PROPFIND)
            assert hrefs(body) == ["/dav/c/", "/dav/c/a.txt"]
            # A POST under the prefix is no DAV method: 405 with the DAV Allow.
            status, hs, _ = await call("POST", "/dav/", [], b"")
            assert status == 405 and "PROPFIND" in hs["allow"]

            # Uploads outside: PUT and DELETE as without --webdav.
            assert (await call("PUT", "/davx/out.txt", [], b"out"))[0] == 201
            assert (root / "davx" / "out.txt").read_bytes() == b"out"
            assert (await call("DELETE", "/davx/out.txt", [], b""))[0] == 204

            # A Destination outside the prefix: 502, nothing copied or moved.
            for method in ("COPY", "MOVE"):
                for dest in ("/b.txt", "http://t/davx/b.txt", "/"):
                    status, _, _ = await call(method, "/dav/c/a.txt", [("destination", dest)], b"")
                    assert status == 502, (method, dest)
            assert not (root / "b.txt").exists() and not (root / "davx" / "b.txt").exists()
            assert (root / "dav" / "c" / "a.txt").read_bytes() == b"alpha"
            # The prefix's top is never removed, moved or replaced.
            assert (await call("DELETE", "/dav/", [], b""))[0] == 403
            status, _, _ = await call("MOVE", "/dav/", [("destination", "/dav/z/")], b"")
            assert status == 403
            status, _, _ = await call("COPY", "/dav/c/", [("destination", "/dav/")], b"")
            assert status == 403
            assert (root / "dav" / "c" / "a.txt").exists()
            # Inside it, MOVE works; the Location is the full path.
            status, hs, _ = await call("MOVE", "/dav/c/a.txt", [("destination", "/dav/b.txt")], b"")
            assert status == 201 and hs["location"] == "/dav/b.txt"

            # Locks live under the prefix and guard its writes.
            status, hs, body = await call("LOCK", "/dav/b.txt", [], LOCKINFO)
            assert status == 200 and b"<D:lockroot><D:href>/dav/b.txt</D:href>" in body
            status, _, body = await call("PUT", "/dav/b.txt", [], b"x")
            assert status == 423 and b"<D:href>/dav/b.txt</D:href>" in body
            assert (root / "dav" / "b.txt").read_bytes() == b"alpha"
            # GET stays the read path, inside and outside.
            assert (await call("GET", "/dav/b.txt", [], b""))[0] == 200
            assert (await call("GET", "/hello.txt", [], b""))[0] == 200


async def test_the_upload_form_only_outside_the_prefix(root: Path) -> None:
    (root / "dav").mkdir()
    with trio.fail_after(30):
        async with CLIENTS["h1"](root, webdav_prefix="/dav") as call:
            _, _, page = await call("GET", "/noindex/", [], b"")
            assert b'enctype="multipart/form-data"' in page
            _, _, page = await call("GET", "/dav/", [], b"")
            assert b'enctype="multipart/form-data"' not in page


def test_the_prefix_option(root: Path, tmp_path: Path) -> None:
    cfg = make_config(root, webdav_prefix="/dav/")
    assert cfg.uploads.webdav_prefix == "/dav"
    assert cfg.uploads.webdav and cfg.uploads.upload  # it implies both
    assert make_config(root, webdav_prefix="/").uploads.webdav_prefix is None  # the whole root
    for bad in ("dav", "/a/../b", "/.dav", "/a%2fb"):
        with pytest.raises(ConfigError, match="--webdav-prefix"):
            make_config(root, webdav_prefix=bad)
    toml = tmp_path / "serverio.toml"
    toml.write_text('webdav-prefix = "/share/"\n')
    args = ["--config", str(toml), "-d", str(root), "--print-config"]
    done = subprocess.run(
        [sys.executable, "-m", "serverio", *args],
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode()
    # --print-config shows the settings as given (validate() normalises it).
    assert 'webdav-prefix = "/share/"' in out
