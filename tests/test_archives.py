"""Folder archives end to end (``--archives``, serverio.archive), over
memory streams: HTTP/1.1 (chunked; close-delimited for HTTP/1.0) and
HTTP/2 (DATA frames); the flag off; a bad format; the listing's walk
rules (dotfiles, symlinks out of the root, the access hook); the bounds
(413 before, a cut stream during); cancellation (no descriptor left, the
pool tokens back)."""

from __future__ import annotations

import base64
import io
import os
import tarfile
import zipfile
from pathlib import Path

import pytest
import trio
import trio.testing

from serverio.archive import stream as stream_mod
from serverio.archive import walk as walk_mod
from serverio.site.passwords import hash_password

from .conftest import make_config, memory_connection
from .h2client import h2_memory

PASSWORD = "wonderland"


def _basic() -> str:
    return (
        "Authorization: Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode() + "\r\n"
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    www = tmp_path / "www"
    d = www / "d"
    (d / "sub" / "deeper").mkdir(parents=True)
    (d / "empty").mkdir()
    (d / "a.txt").write_bytes(b"hello\n")
    (d / "sub" / "big.bin").write_bytes(os.urandom(400_000))
    (d / "sub" / "deeper" / "z.txt").write_bytes(b"z" * 70_000)
    (d / ".hidden").write_bytes(b"dot")
    (d / "caf\u00e9.txt").write_bytes(b"accent")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_bytes(b"OUTSIDE")
    os.symlink(outside / "secret.txt", d / "escape.txt")
    os.symlink(outside, d / "escape-dir")
    os.symlink("a.txt", d / "inside-link.txt")
    os.symlink("..", d / "sub" / "loop")  # back to d: walked once
    return www


EXPECTED = {
    "d/a.txt": b"hello\n",
    "d/caf\u00e9.txt": b"accent",
    "d/inside-link.txt": b"hello\n",
    "d/sub/deeper/z.txt": b"z" * 70_000,
}


def _zip_files(body: bytes) -> dict[str, bytes]:
    z = zipfile.ZipFile(io.BytesIO(body))
    assert z.testzip() is None
    return {n: z.read(n) for n in z.namelist() if not n.endswith("/")}


def _check_members(files: dict[str, bytes], tree: Path) -> None:
    for name, data in EXPECTED.items():
        assert files[name] == data, name
    assert files["d/sub/big.bin"] == (tree / "d" / "sub" / "big.bin").read_bytes()
    assert not any("hidden" in n or "escape" in n or "loop" in n for n in files), files.keys()
    assert all(b"OUTSIDE" not in v for v in files.values())


async def test_zip_and_tar_gz_over_http1_chunked(tree: Path) -> None:
    async with memory_connection(make_config(tree, archives=True)) as (client, _, _):
        r = await client.get("/d/?archive=zip")
        assert r.status == 200
        assert r.header("content-type") == "application/zip"
        assert r.header("transfer-encoding") == "chunked"
        assert r.header("content-length") is None and r.header("etag") is None
        assert r.header("content-disposition") == (
            "attachment; filename=\"d.zip\"; filename*=UTF-8''d.zip"
        )
        _check_members(_zip_files(r.body), tree)
        names = zipfile.ZipFile(io.BytesIO(r.body)).namelist()
        assert "d/empty/" in names and "d/sub/deeper/" in names
        r = await client.get("/d/?archive=tar.gz")
        assert r.status == 200 and r.header("content-type") == "application/gzip"
        with tarfile.open(fileobj=io.BytesIO(r.body), mode="r:gz") as t:
            files = {}
            for m in t.getmembers():
                if m.isfile():
                    f = t.extractfile(m)
                    assert f is not None
                    files[m.name] = f.read()
            assert t.getmember("d/empty").isdir()
        _check_members(files, tree)
        # The connection is kept: the chunked body ended cleanly.
        again = await client.get("/d/a.txt")
        assert again.status == 200 and again.body == b"hello\n"


async def test_the_root_a_non_ascii_name_head_and_http10(tree: Path) -> None:
    (tree / "d" / "\u00e9t\u00e9").mkdir()
    (tree / "d" / "\u00e9t\u00e9" / "x").write_bytes(b"x")
    async with memory_connection(make_config(tree, archives=True)) as (client, _, _):
        r = await client.get("/?archive=zip")
        assert r.status == 200 and r.header(
            "content-disposition",
        ).startswith(  # type: ignore[union-attr]
            'attachment; filename="www.zip"'
        )
        assert "www/d/a.txt" in _zip_files(r.body)
        r = await client.get("/d/%C3%A9t%C3%A9/?archive=zip")
        assert r.header("content-disposition") == (
            "attachment; filename=\"ete.zip\"; filename*=UTF-8''%C3%A9t%C3%A9.zip"
        )
        assert _zip_files(r.body) == {"\u00e9t\u00e9/x": b"x"}
        head = await client.get("/d/?archive=zip", method="HEAD")
        assert head.status == 200 and head.body == b"" and head.header("transfer-encoding") is None
        # HTTP/1.0: no chunked coding; the body ends with the connection.
        await client.send_raw(b"GET /d/?archive=zip HTTP/1.0\r\n\r\n")
        raw = b""
        while chunk := await client.stream.receive_some(65536):
            raw += chunk
    head_bytes, _, body = raw.partition(b"\r\n\r\n")
    assert b"Transfer-Encoding" not in head_bytes and b"Connection: close" in head_bytes
    _check_members(_zip_files(body), tree)


async def test_without_the_flag_the_query_is_ignored_and_no_links(tree: Path) -> None:
    async with memory_connection(make_config(tree)) as (client, _, _):
        plain = await client.get("/d/")
        for q in ("archive=zip", "archive=rar"):
            r = await client.get(f"/d/?{q}")
            assert r.status == 200 and r.header("content-type") == "text/html; charset=utf-8"
            assert r.body == plain.body
        assert b"?archive=" not in plain.body
    async with memory_connection(make_config(tree, archives=True)) as (client, _, _):
        page = await client.get("/d/")
        assert b'href="?archive=zip"' in page.body and b'href="?archive=tar.gz"' in page.body
        assert (await client.get("/d/?archive=rar")).status == 400
        assert (await client.get("/d/?archive=")).status == 400
        # Not a directory listing: a file ignores the query.
        f = await client.get("/d/a.txt?archive=zip")
        assert f.status == 200 and f.body == b"hello\n"


async def test_hidden_files_with_the_hidden_flag(tree: Path) -> None:
    async with memory_connection(make_config(tree, archives=True, hidden=True)) as (c, _, _):
        files = _zip_files((await c.get("/d/?archive=zip")).body)
    assert files["d/.hidden"] == b"dot"


async def test_zip_over_http2_data_frames(tree: Path) -> None:
    async with h2_memory(make_config(tree, archives=True)) as (client, _, _):
        r = await client.get("/d/?archive=zip")
        assert r.status == 200 and r.reset is None and r.ended
        assert r.headers.get("content-type") == "application/zip"
        assert "content-length" not in r.headers
        _check_members(_zip_files(bytes(r.body)), tree)
        t = await client.get("/d/?archive=tar.gz")
        with tarfile.open(fileobj=io.BytesIO(bytes(t.body)), mode="r:gz") as tf:
            assert "d/sub/big.bin" in tf.getnames()
        nxt = await client.get("/d/a.txt")
        assert nxt.status == 200 and bytes(nxt.body) == b"hello\n"


async def test_a_protected_member_is_left_out_for_anonymous_clients(
    tree: Path, tmp_path: Path
) -> None:
    users = tmp_path / "users.htpasswd"
    users.write_text(f"alice:{hash_password(PASSWORD, 1000)}\n")
    (tree / "d" / "private").mkdir()
    (tree / "d" / "private" / "p.txt").write_bytes(b"PRIVATE")
    (tree / "d" / "report.secret").write_bytes(b"SECRET")
    cfg = make_config(
        tree, archives=True, auth=(("/d/private/*", str(users)), ("/**/*.secret", str(users)))
    )
    async with memory_connection(cfg) as (client, _, _):
        anon = await client.get("/d/?archive=zip")
        assert anon.status == 200 and anon.header("cache-control") == "private"
        files = _zip_files(anon.body)
        assert "d/a.txt" in files
        assert not any("private" in n or "secret" in n for n in files), files.keys()
        assert b"PRIVATE" not in anon.body and b"SECRET" not in anon.body
        # Credentials verified (by a request for a protected file), then
        # the same client's archive holds the protected members.
        assert (await client.get("/d/report.secret", _basic())).status == 200
        assert (await client.get("/d/private/p.txt", _basic())).status == 200
        authed = await client.get("/d/?archive=zip", _basic())
        files = _zip_files(authed.body)
        assert files["d/private/p.txt"] == b"PRIVATE" and files["d/report.secret"] == b"SECRET"
        # A protected directory itself: 401 without credentials, as its listing.
        assert (await client.get("/d/private/?archive=zip")).status == 401


async def test_bounds_413_before_the_response(tree: Path) -> None:
    for kw in ({"archive_max_entries": 3}, {"archive_max_bytes": 1000}):
        async with memory_connection(make_config(tree, archives=True, **kw)) as (c, _, _):
            r = await c.get("/d/?archive=zip")
            assert r.status == 413, kw
            assert (
                await c.get(
                    "/d/sub/deeper/?archive=zip"
                    if "archive_max_bytes" not in kw
                    else "/d/empty/?archive=zip"
                )
            ).status == 200


async def test_a_bound_passed_while_streaming_cuts_the_stream(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A member that grew after the walk takes the archive past
    --archive-max-bytes: the stream is cut (no last-chunk, no central
    directory), the connection closed."""
    real = walk_mod.open_member

    def growing(opener: object, relpath: str) -> object:
        if relpath.endswith("big.bin"):
            with open(tree / relpath, "ab") as f:
                f.write(b"g" * 600_000)
        return real(opener, relpath)  # type: ignore[arg-type]

    monkeypatch.setattr(stream_mod, "open_member", growing)
    cfg = make_config(tree, archives=True, archive_max_bytes=600_000)
    async with memory_connection(cfg) as (client, _, _):
        await client.send_raw(b"GET /d/?archive=zip HTTP/1.1\r\nHost: t\r\n\r\n")
        raw = b""
        while chunk := await client.stream.receive_some(65536):
            raw += chunk
    assert raw.startswith(b"HTTP/1.1 200 ")
    assert not raw.endswith(b"0\r\n\r\n")
    assert b"PK\x05\x06" not in raw  # the end of central directory never came
    with pytest.raises(zipfile.BadZipFile):
        zipfile.ZipFile(io.BytesIO(raw.partition(b"\r\n\r\n")[2]))


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def _settled(srv: object, before: int) -> None:
    pool = srv.handler.fs  # type: ignore[attr-defined]
    with trio.fail_after(5):
        while pool.running or _fds() > before:  # noqa: ASYNC110 - threads and fds, no event
            await trio.sleep(0.01)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
@pytest.mark.parametrize("workers", [0, 2])
async def test_client_gone_mid_archive_leaves_no_descriptor_http1(tree: Path, workers: int) -> None:
    (tree / "d" / "sub" / "huge.bin").write_bytes(os.urandom(3_000_000))
    cfg = make_config(tree, archives=True, fs_workers=workers)
    async with memory_connection(cfg, lockstep=True) as (client, srv, _):
        await client.get("/d/a.txt")
        before = _fds()
        await client.send_raw(b"GET /d/?archive=zip HTTP/1.1\r\nHost: t\r\n\r\n")
        got = 0
        while got < 200_000:
            got += len(await client.stream.receive_some(16384))
        await client.stream.aclose()  # the server's next write fails: the client is gone
        await _settled(srv, before)
        assert srv.handler.fs.running == 0
    assert srv.stats.responses.completed >= 1


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
async def test_stream_reset_mid_archive_leaves_no_descriptor_http2(tree: Path) -> None:
    from h2.errors import ErrorCodes

    (tree / "d" / "sub" / "huge.bin").write_bytes(os.urandom(3_000_000))
    cfg = make_config(tree, archives=True, fs_workers=2)
    async with h2_memory(cfg, ack=False) as (client, srv, _):
        await client.get("/d/a.txt")
        before = _fds()
        sid = client.request("/d/?archive=zip", "GET", [])
        await client.flush()
        r = client.responses[sid]
        with trio.fail_after(5):
            while len(r.body) < 60_000:  # the window (65,535) nearly spent
                assert await client.pump()
        client.conn.reset_stream(sid, ErrorCodes.CANCEL)
        await client.flush()
        await _settled(srv, before)
        assert srv.handler.fs.running == 0
        # The connection serves on.
        client.ack = True
        client.conn.increment_flow_control_window(1 << 20)
        await client.flush()
        nxt = await client.get("/d/a.txt")
        assert nxt.status == 200


async def test_with_live_reload_on_the_archive_is_not_transformed(tree: Path) -> None:
    """--watch's transform takes HTML-accepting GETs; an archive is not HTML,
    so it goes out as made (whether the transform returns it or declines)."""
    cfg = make_config(tree, archives=True, watch=True)
    async with memory_connection(cfg) as (client, _, _):
        for extra in (
            "Accept: text/html,*/*\r\n",
            "Accept: text/html\r\nAccept-Encoding: gzip\r\n",
        ):
            r = await client.get("/d/?archive=zip", extra)
            assert r.status == 200 and r.header("content-type") == "application/zip"
            _check_members(_zip_files(r.body), tree)
        page = await client.get("/d/", "Accept: text/html\r\n")
        assert b'href="?archive=zip"' in page.body


@pytest.mark.skipif(os.name != "posix", reason="POSIX byte names")
async def test_hostile_names_on_disk(tree: Path) -> None:
    """A non-UTF-8 name keeps its bytes; a backslash name (a separator to
    Windows extractors) is left out of the zip; a long name is kept."""
    d = bytes(tree / "d")
    try:
        fd = os.open(os.path.join(d, b"caf\xe9.bin"), os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(fd, b"latin")
        os.close(fd)
    except OSError:
        pytest.skip("the filesystem refuses non-UTF-8 names")
    (tree / "d" / "..\\evil.txt").write_bytes(b"evil")
    (tree / "d" / ("n" * 250)).write_bytes(b"long")
    async with memory_connection(make_config(tree, archives=True)) as (client, _, _):
        z = zipfile.ZipFile(io.BytesIO((await client.get("/d/?archive=zip")).body))
        raw = {
            i.filename.encode("cp437" if not i.flag_bits & 0x800 else "utf-8"): i
            for i in z.infolist()
        }
        assert z.read(raw[b"d/caf\xe9.bin"]) == b"latin"
        assert not any(b"evil" in n for n in raw)
        assert z.read("d/" + "n" * 250) == b"long"
        r = await client.get("/d/?archive=tar.gz")
        with tarfile.open(fileobj=io.BytesIO(r.body), mode="r:gz", errors="surrogateescape") as t:
            names = t.getnames()
        assert "d/caf\udce9.bin" in names and not any("evil" in n for n in names)


async def test_a_stalled_read_ends_the_archive_at_the_write_deadline(
    tree: Path, monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.testing.MockClock
) -> None:
    """A member read that never returns (a stalled filesystem) is no
    progress: at --write-timeout the response is cut and the read
    abandoned; its thread, once released, closes its descriptor."""
    import threading

    release = threading.Event()
    real = walk_mod.read_span

    def stalled(*args: object) -> object:
        release.wait(10)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(stream_mod, "read_span", stalled)
    cfg = make_config(tree, archives=True, fs_workers=1, write_timeout=5.0)
    async with memory_connection(cfg) as (client, srv, _):
        await client.get("/d/a.txt")
        before = _fds()
        await client.send_raw(b"GET /d/?archive=zip HTTP/1.1\r\nHost: t\r\n\r\n")
        raw = b""
        # Mock time jumps only after 0.2 s of real idleness: the walk's and
        # the first reads' threads finish first, the stalled read does not.
        autojump_clock.autojump_threshold = 0.2
        with trio.fail_after(60):  # mock time: the write deadline is 5 s
            while chunk := await client.stream.receive_some(65536):
                raw += chunk
        assert raw.startswith(b"HTTP/1.1 200 ") and not raw.endswith(b"0\r\n\r\n")
        assert srv.stats.timeouts.write >= 1
        release.set()
        await _settled(srv, before)


async def test_a_stalled_read_resets_the_http2_stream_at_the_write_deadline(
    tree: Path, monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.testing.MockClock
) -> None:
    import threading

    from h2.errors import ErrorCodes

    release = threading.Event()
    real = walk_mod.read_span

    def stalled(*args: object) -> object:
        release.wait(10)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(stream_mod, "read_span", stalled)
    cfg = make_config(tree, archives=True, fs_workers=1, write_timeout=5.0)
    async with h2_memory(cfg) as (client, srv, _):
        await client.get("/d/a.txt")
        before = _fds()
        autojump_clock.autojump_threshold = 0.2  # as in the HTTP/1.1 test
        with trio.fail_after(60):
            r = await client.get("/d/?archive=zip")
        assert r.status == 200 and r.reset == ErrorCodes.CANCEL and not r.ended
        assert srv.stats.timeouts.write >= 1
        release.set()
        await _settled(srv, before)
        assert (await client.get("/d/a.txt")).status == 200  # the connection serves on
