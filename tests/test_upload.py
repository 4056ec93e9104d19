"""PUT and DELETE end to end (``--upload``), over HTTP/1.1 and HTTP/2.

Both protocols are driven over memory streams through the real
transports (as tests/test_body_seam.py does): the answers, the ETag a
GET shows afterwards, ``Expect: 100-continue``, the access hook before
any byte is read, the limits, the caches seeing a write at once, the
counters; and the start-up refusal of anonymous writes on a public
address, through the CLI.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from serverio.app.server import Server
from serverio.config import Config
from serverio.errors import ConfigError
from serverio.fs import prepare
from serverio.http.target import WRITE_TEMP_PREFIX
from serverio.site.passwords import hash_password
from serverio.site.rules import compile_writable

from .conftest import (
    HTTPClient,
    make_config,
    memory_connection,
    open_fd_count,
    reset,
    wait_until,
)
from .h2client import H2Client, h2_memory
from .test_body_seam import send_body

PASSWORD = "wonderland"


def put(target: str, body: bytes = b"", headers: str = "") -> bytes:
    return (
        f"PUT {target} HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}\r\n{headers}\r\n".encode()
        + body
    )


async def request(client: HTTPClient, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    await client.send_raw(raw)
    r = await client.read_response()
    return r.status, r.headers, r.body


def temps(root: Path) -> list[str]:
    return [n for _, _, names in os.walk(root) for n in names if n.startswith(WRITE_TEMP_PREFIX)]


def upload_config(root: Path, **kw: object) -> Config:
    return make_config(root, upload=True, min_free_space=0, **kw)


# ================================================================ HTTP/1.1


async def test_h1_put_creates_replaces_and_a_get_shows_the_same_etag(root: Path) -> None:
    async with memory_connection(upload_config(root)) as (client, srv, _):
        status, hs, body = await request(client, put("/sub/new.txt", b"first"))
        assert status == 201 and hs["location"] == "/sub/new.txt" and body == b"201 Created\n"
        got = await client.get("/sub/new.txt")
        assert got.body == b"first" and got.header("etag") == hs["etag"]
        status, hs2, _ = await request(client, put("/sub/new.txt", b"second!"))
        assert status == 204 and hs2["etag"] != hs["etag"]
        got = await client.get("/sub/new.txt")
        assert got.body == b"second!" and got.header("etag") == hs2["etag"]
        # An empty PUT has no body (Content-Length: 0): an empty file.
        assert (await request(client, put("/empty.txt")))[0] == 201
        status, _, _ = await request(client, b"DELETE /sub/new.txt HTTP/1.1\r\nHost: t\r\n\r\n")
        assert status == 204 and (await client.get("/sub/new.txt")).status == 404
        writes = srv.stats.writes
    assert (root / "empty.txt").read_bytes() == b"" and temps(root) == []
    assert (writes.files, writes.deletes, writes.bytes) == (3, 1, 12)
    flat = srv.stats.as_dict()
    assert flat["writes_files"] == 3 and flat["writes_bytes"] == 12


async def test_h1_expect_100_continue_then_the_content(root: Path) -> None:
    async with memory_connection(upload_config(root)) as (client, _srv, _):
        head = (
            b"PUT /c.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"
        )
        await client.send_raw(head)
        interim = b""
        while b"\r\n\r\n" not in interim:
            interim += await client.stream.receive_some(1024)
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        await client.send_raw(b"hello")
        r = await client.read_response()
        after = await client.get("/c.txt")
    assert r.status == 201 and r.header("connection") is None
    assert after.status == 200 and after.body == b"hello"


async def test_h1_a_refused_write_reads_nothing_and_sends_no_100_continue(
    root: Path, tmp_path: Path
) -> None:
    (root / "up").mkdir()
    cfg = upload_config(root, writable=(("/up/**", ("put",)),))
    async with memory_connection(cfg) as (client, _srv, _):
        await client.send_raw(
            b"PUT /x.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"
        )
        raw = b""
        while b"403 Forbidden\n" not in raw:
            raw += await client.stream.receive_some(4096)
        assert b"100 Continue" not in raw and b"\r\nConnection: close\r\n" in raw
    async with memory_connection(cfg) as (client, _srv, _):
        assert (await request(client, put("/up/y.txt", b"ok")))[0] == 201
        delete = b"DELETE /up/y.txt HTTP/1.1\r\nHost: t\r\n\r\n"
        assert (await request(client, delete))[0] == 403  # put only
    assert not (root / "x.txt").exists() and (root / "up" / "y.txt").read_bytes() == b"ok"


async def test_h1_writes_under_an_auth_rule_need_its_credentials(
    root: Path, tmp_path: Path
) -> None:
    users = tmp_path / "users"
    users.write_text(f"alice:{hash_password(PASSWORD, 1000)}\n")
    cfg = upload_config(root, auth=(("/**", str(users)),))
    import base64

    good = "Authorization: Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    async with memory_connection(cfg) as (client, _srv, _):
        status, hs, _ = await request(client, put("/a.txt", b"x"))
        assert status == 401 and "www-authenticate" in hs
    async with memory_connection(cfg) as (client, _srv, _):
        assert (await request(client, put("/a.txt", b"x", good + "\r\n")))[0] == 201
    assert (root / "a.txt").read_bytes() == b"x"


async def test_h1_chunked_past_the_limit_is_413_and_leaves_nothing(root: Path) -> None:
    cfg = upload_config(root, max_upload_size=10)
    async with memory_connection(cfg) as (client, _srv, _):
        chunked = b"8\r\n12345678\r\n8\r\n12345678\r\n0\r\n\r\n"
        raw = b"PUT /huge.bin HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked
        status, hs, _ = await request(client, raw)
        assert status == 413 and hs.get("connection") == "close"
    assert not (root / "huge.bin").exists() and temps(root) == []


async def test_h1_the_warm_cache_sees_a_write_at_once(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pooled mode trusts a cached file for --fs-cache-valid without a
    stat; a write forgets the entry, so the next GET has the new bytes."""
    # The file was just written: take it as settled (the 2 s rule) to cache it.
    monkeypatch.setattr(prepare, "settled", lambda st, now: True)
    cfg = upload_config(root, fs_workers=1, fs_queue=4, fs_cache_valid=60.0)
    async with memory_connection(cfg) as (client, srv, _):
        for _ in range(2):
            assert (await client.get("/hello.txt")).body == b"hello world\n"
        assert srv.files.get("hello.txt") is not None
        assert (await request(client, put("/hello.txt", b"new bytes")))[0] == 204
        assert srv.files.get("hello.txt") is None
        assert (await client.get("/hello.txt")).body == b"new bytes"


async def test_temporaries_stay_hidden_even_with_hidden(root: Path) -> None:
    temp = root / "noindex" / (WRITE_TEMP_PREFIX + "abc")
    temp.write_bytes(b"half an upload")
    (root / "noindex" / ".dot").write_bytes(b"shown with --hidden")
    async with memory_connection(upload_config(root, hidden=True)) as (client, _srv, _):
        assert (await client.get("/noindex/" + WRITE_TEMP_PREFIX + "abc")).status == 404
        listing = await client.get("/noindex/")
        assert listing.status == 200 and b".dot" in listing.body
        assert WRITE_TEMP_PREFIX.encode() not in listing.body
        path = "/noindex/" + WRITE_TEMP_PREFIX + "abc"
        assert (await request(client, put(path, b"x")))[0] == 403
    assert temp.read_bytes() == b"half an upload"


async def test_without_upload_writes_are_405_and_the_read_path_has_no_step(root: Path) -> None:
    srv = Server(make_config(root))
    assert srv.handler.write is None and srv.handler.hooks.write is None
    async with memory_connection(make_config(root), server=srv) as (client, _srv, _):
        assert (await request(client, put("/hello.txt", b"x")))[0] == 405
    assert (root / "hello.txt").read_bytes() == b"hello world\n"
    on = Server(upload_config(root))
    assert on.handler.write is not None
    async with memory_connection(upload_config(root), server=on) as (client, _srv, _):
        options = await client.get("/hello.txt", method="OPTIONS")
        # MOVE: the page's rename and move (serverio.app.pagewrites).
        assert options.header("allow") == "GET, HEAD, OPTIONS, PUT, DELETE, POST, MOVE"
        post = b"POST /hello.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n\r\nx"
        status, hs, _ = await request(client, post)
        assert status == 405 and hs["allow"] == "GET, HEAD, OPTIONS, PUT, DELETE, POST"


async def test_a_put_of_a_name_with_a_bidi_control_is_refused(root: Path) -> None:
    """As a control character in the name is (403: check_name refuses it)."""
    async with memory_connection(upload_config(root)) as (client, _srv, _):
        for name in ("invoice%E2%80%AEfdp.exe", "bell%07.txt"):
            put = f"PUT /{name} HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n\r\nx"
            await client.send_raw(put.encode())
            assert (await client.read_response()).status == 403, name
    assert not (root / "invoice\u202efdp.exe").exists()


# ================================================================ HTTP/2


async def h2_put(client: H2Client, path: str, data: bytes) -> tuple[int, dict[str, str]]:
    sid = client.request(path, "PUT", [("content-length", str(len(data)))], end_stream=False)
    await send_body(client, sid, data)
    (r,) = await client.wait(sid)
    return r.status, dict(r.headers)


async def test_h2_put_and_delete(root: Path) -> None:
    data = os.urandom(200_000)  # past the stream window: the window reopens as it is written
    async with h2_memory(upload_config(root)) as (client, srv, _):
        status, hs = await h2_put(client, "/sub/h2.bin", data)
        assert status == 201 and hs["location"] == "/sub/h2.bin"
        got = await client.get("/sub/h2.bin")
        assert bytes(got.body) == data and got.headers.get("etag") == hs["etag"]
        status, _ = await h2_put(client, "/sub/h2.bin", b"small")
        assert status == 204
        r = await client.get("/sub/h2.bin", method="DELETE")
        assert r.status == 204
        assert (await client.get("/sub/h2.bin")).status == 404
        assert srv.stats.writes.files == 2
    assert temps(root) == []


async def test_h2_too_large_declared_is_413_without_a_temporary(root: Path) -> None:
    async with h2_memory(upload_config(root, max_upload_size=100)) as (client, srv, _):
        sid = client.request("/huge.bin", "PUT", [("content-length", "101")], end_stream=False)
        await client.flush()
        (r,) = await client.wait(sid)
        assert r.status == 413
        assert (await client.get("/hello.txt")).status == 200  # the connection lives on
        assert srv.stats.writes.aborted == 1
    assert not (root / "huge.bin").exists() and temps(root) == []


# ================================================================ start-up


def test_anonymous_writes_on_a_public_address_are_refused(root: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="under no \\[\\[auth\\]\\] rule"):
        Config.of(directory=str(root), upload=True, host="0.0.0.0").validate()
    users = tmp_path / "u"
    users.write_text("alice:x\n")
    auth = (("/up/**", str(users)),)
    for ok in (
        {"host": "127.0.0.1"},
        {"host": "0.0.0.0", "allow_anonymous_writes": True},
        {"host": "0.0.0.0", "auth_file": str(users)},
        {"host": "::", "auth": auth, "writable": (("/up/sub/**", ("put",)),)},
        {"host": "0.0.0.0", "auth": (("/**", str(users)),)},
    ):
        Config.of(directory=str(root), upload=True, **ok).validate()
    with pytest.raises(ConfigError):  # /upload/** is not under /up/**
        Config.of(
            directory=str(root),
            upload=True,
            host="0.0.0.0",
            auth=auth,
            writable=(("/upload/**", ("put",)),),
        ).validate()


def test_the_cli_refuses_anonymous_writes_with_one_line_and_exit_2(root: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.run(
        [sys.executable, "-m", "serverio", "0", "-d", str(root), "--upload", "-b", "0.0.0.0"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--allow-anonymous-writes" in lines[0], proc.stderr


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (("/up/*", ("put",)), "key 'path' must be PREFIX/\\*\\* or /\\*\\*"),
        (("/up/**", ("post",)), "key 'allow' must list"),
        (("/up/**", ()), "key 'allow' must list"),
        (("/u*/**", ("put",)), "key 'path': the prefix must be literal"),
    ],
)
def test_bad_writable_tables_name_the_file_and_key(
    table: tuple[str, tuple[str, ...]], message: str
) -> None:
    with pytest.raises(ConfigError, match="^site.toml: \\[\\[writable\\]\\] #1 " + message):
        compile_writable([table], "site.toml")


async def test_h1_content_digest_is_verified_and_the_access_log_has_the_write(
    root: Path, tmp_path: Path
) -> None:
    import base64
    import hashlib

    log = tmp_path / "access.log"
    cfg = upload_config(root, access_log="common", access_log_file=str(log))
    good = base64.b64encode(hashlib.sha256(b"data").digest()).decode()
    bad = base64.b64encode(hashlib.sha256(b"else").digest()).decode()
    async with memory_connection(cfg) as (client, srv, _):
        refused = put("/d.txt", b"data", f"Content-Digest: sha-256=:{bad}:\r\n")
        assert (await request(client, refused))[0] == 400
        ok = put("/d.txt", b"data", f"Repr-Digest: sha-256=:{good}:\r\n")
        assert (await request(client, ok))[0] == 201
        srv.access_log.close()
    assert (root / "d.txt").read_bytes() == b"data"
    lines = log.read_text().splitlines()
    assert any('"PUT /d.txt HTTP/1.1" 400' in line for line in lines)
    assert any('"PUT /d.txt HTTP/1.1" 201' in line for line in lines)


async def test_h1_a_client_gone_mid_upload_leaves_nothing(root: Path) -> None:
    fds = open_fd_count()
    async with memory_connection(upload_config(root)) as (client, srv, _):
        head = b"PUT /gone.bin HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n"
        await client.send_raw(head + b"x" * 30000)
        await wait_until(lambda: temps(root) != [])  # the temporary is being written
        await reset(client)
        await wait_until(lambda: srv.stats.writes.aborted == 1)
    assert temps(root) == [] and not (root / "gone.bin").exists()
    assert open_fd_count() == fds


async def test_h2_a_reset_stream_mid_upload_leaves_nothing(root: Path) -> None:
    from h2.errors import ErrorCodes

    async with h2_memory(upload_config(root)) as (client, srv, _):
        sid = client.request("/gone.bin", "PUT", [("content-length", "100000")], end_stream=False)
        await send_body(client, sid, b"x" * 30000, end=False)
        await wait_until(lambda: temps(root) != [])
        client.conn.reset_stream(sid, ErrorCodes.CANCEL)
        await client.flush()
        await wait_until(lambda: srv.stats.writes.aborted == 1)
        # A reset that lands while a pool step runs abandons that thread,
        # which removes the temporary when its call returns (upload.service
        # settle: "the abandoned thread removes it"), possibly just after
        # the abort was counted: wait for it, bounded like the count.
        await wait_until(lambda: temps(root) == [])
        assert (await client.get("/hello.txt")).status == 200
    assert not (root / "gone.bin").exists()


@pytest.mark.parametrize("watch", [False, True])
async def test_the_server_sweeps_stale_temporaries_when_it_starts(root: Path, watch: bool) -> None:
    """With or without live reload (whose watcher shares the running hook)."""
    import time

    stale = root / "sub" / (WRITE_TEMP_PREFIX + "killed")
    stale.write_bytes(b"left by a SIGKILL")
    old = time.time() - 3600
    os.utime(stale, (old, old))
    async with memory_connection(upload_config(root, watch=watch)) as (client, srv, _):
        await wait_until(lambda: not stale.exists())
        assert srv.stats.writes.temps_removed == 1
        assert (await client.get("/hello.txt")).status == 200


async def test_the_start_up_sweep_covers_every_mount(root: Path, tmp_path: Path) -> None:
    import time

    docs = tmp_path / "docs-dir"
    docs.mkdir()
    old = time.time() - 3600
    stale = [root / "sub" / (WRITE_TEMP_PREFIX + "a"), docs / (WRITE_TEMP_PREFIX + "b")]
    for path in stale:
        path.write_bytes(b"left by a SIGKILL")
        os.utime(path, (old, old))
    cfg = upload_config(root, mounts=[("/docs", str(docs))])
    async with memory_connection(cfg) as (_client, srv, _):
        await wait_until(lambda: not any(p.exists() for p in stale))
        assert srv.stats.writes.temps_removed == 2


async def test_h1_a_body_deadline_mid_upload_is_408_and_leaves_nothing(
    root: Path, autojump_clock: object
) -> None:
    """A client that stops sending: --body-timeout (MockClock) ends the
    upload with 408, and its temporary is removed."""
    cfg = upload_config(root, body_timeout=5.0)
    async with memory_connection(cfg) as (client, srv, _):
        head = b"PUT /slow.bin HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n"
        await client.send_raw(head + b"x" * 20000)
        r = await client.read_response()
        assert r.status == 408
        assert srv.stats.writes.aborted == 1
        pool = next(p for p in srv.services.pools if p.name == "write")
        # The write thread runs in real time while the MockClock jumps: a
        # bound in trio time (wait_idle) can run out before a loaded machine
        # schedules the thread, so the bound is real seconds here.
        stop = time.monotonic() + 30
        while pool.running and time.monotonic() < stop:  # noqa: ASYNC110
            await trio.sleep(0.01)
        assert pool.running == 0
    assert temps(root) == [] and not (root / "slow.bin").exists()


async def test_a_put_under_a_mount_writes_into_that_mounts_directory(
    root: Path, tmp_path: Path
) -> None:
    docs = tmp_path / "docs-dir"
    docs.mkdir()
    cfg = upload_config(root, mounts=[("/docs", str(docs))])
    async with memory_connection(cfg) as (client, _srv, _):
        status, hs, _ = await request(client, put("/docs/new.txt", b"mounted"))
        assert status == 201 and hs["location"] == "/docs/new.txt"
        assert (docs / "new.txt").read_bytes() == b"mounted"
        assert not (root / "docs" / "new.txt").exists() and not (root / "new.txt").exists()
        got = await client.get("/docs/new.txt")
        assert got.body == b"mounted" and got.header("etag") == hs["etag"]
        status, _, _ = await request(client, b"DELETE /docs/new.txt HTTP/1.1\r\nHost: t\r\n\r\n")
        assert status == 204 and not (docs / "new.txt").exists()
    assert temps(docs) == [] and temps(root) == []
