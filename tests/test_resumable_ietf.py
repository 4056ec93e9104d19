"""The IETF resumable-upload draft, judged by a scripted client (h11 and
h2 directly, over TCP on loopback): the 104 (Upload Resumption Supported)
with the upload resource on HTTP/1.1 and HTTP/2, offset retrieval, the
409 with the right offset, completion, cancellation, the length and size
checks, the Repr-Digest, expiry and the sweeper, the access hook on the
target, hostile tokens, and a client gone mid-PATCH keeping its bytes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trio

from serverio.config import Config
from serverio.http.target import WRITE_TEMP_PREFIX
from serverio.resumable.protocol import INTEROP_VERSION
from serverio.site.passwords import hash_password

from .conftest import make_config, running_server, wait_until
from .resumable_client import Answer, h1_request, h2_request

Request = Callable[..., Awaitable[Answer]]
PARTIAL = "application/partial-upload"
IV = {"upload-draft-interop-version": str(INTEROP_VERSION)}


def temps(root: Path) -> list[str]:
    return [n for _, _, names in os.walk(root) for n in names if n.startswith(WRITE_TEMP_PREFIX)]


def config(root: Path, tmp_path: Path, **kw: object) -> Config:
    secret = tmp_path / "secret"
    if not secret.exists():
        secret.write_bytes(os.urandom(32).hex().encode())
    return make_config(root, upload=True, min_free_space=0, secret_file=str(secret), **kw)


async def h1(
    port: int, method: str, path: str, headers: dict[str, str] | None = None, body: bytes = b""
) -> Answer:
    got = await h1_request(port, method, path, headers, body)
    assert got is not None
    return got


def patch(offset: int, complete: bool, **more: str) -> dict[str, str]:
    return {
        "upload-offset": str(offset),
        "upload-complete": "?1" if complete else "?0",
        "content-type": PARTIAL,
        **more,
    }


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "www"
    r.mkdir()
    return r


@pytest.mark.parametrize("send", [h1, h2_request], ids=["http1.1", "http2"])
async def test_create_104_offset_409_append_complete(
    root: Path, tmp_path: Path, send: Request
) -> None:
    data = os.urandom(300_000)
    async with running_server(config(root, tmp_path)) as (_, port):
        a = await send(port, "PUT", "/big.bin", {"upload-complete": "?0", **IV}, data[:100_000])
        assert a.status == 201
        location = a.headers["location"]
        assert location.startswith("/.serverio/uploads/")
        # The 104 came first, with the same Location, the interop version, the limits.
        ((status, hs),) = a.interim
        assert status == 104 and hs["location"] == location
        assert hs["upload-draft-interop-version"] == str(INTEROP_VERSION)
        assert hs["upload-limit"].startswith("max-size=")
        assert a.headers["upload-complete"] == "?0" and a.headers["upload-offset"] == "100000"
        assert not (root / "big.bin").exists()
        h = await send(port, "HEAD", location)
        assert h.status == 204 and h.headers["upload-offset"] == "100000"
        assert h.headers["upload-complete"] == "?0" and h.headers["cache-control"] == "no-store"
        assert "max-age=" in h.headers["upload-limit"]
        bad = await send(port, "PATCH", location, patch(7, False), b"zz")
        assert bad.status == 409 and bad.headers["upload-offset"] == "100000"
        problem = json.loads(bad.body)
        assert problem["type"].endswith("#mismatching-upload-offset")
        assert problem["expected-offset"] == 100000 and problem["provided-offset"] == 7
        p = await send(port, "PATCH", location, patch(100_000, False), data[100_000:200_000])
        assert p.status == 204 and p.headers["upload-offset"] == "200000"
        assert p.headers["upload-complete"] == "?0"
        assert not (root / "big.bin").exists()
        done = await send(port, "PATCH", location, patch(200_000, True), data[200_000:])
        assert done.status == 201 and done.headers["upload-complete"] == "?1"
        assert done.headers["location"] == "/big.bin" and "etag" in done.headers
        assert (root / "big.bin").read_bytes() == data
        # The upload resource is gone with the upload.
        assert (await send(port, "HEAD", location)).status == 404
    assert temps(root) == []


@pytest.mark.parametrize("send", [h1, h2_request], ids=["http1.1", "http2"])
async def test_an_optimistic_upload_completes_in_one_request_after_its_104(
    root: Path, tmp_path: Path, send: Request
) -> None:
    data = os.urandom(200_000)
    (root / "old.bin").write_bytes(b"old")
    async with running_server(config(root, tmp_path)) as (_, port):
        a = await send(port, "PUT", "/old.bin", {"upload-complete": "?1", **IV}, data)
        assert a.status == 204 and a.headers["upload-complete"] == "?1"  # replaced, as a PUT
        assert [s for s, _ in a.interim] == [104]
    assert (root / "old.bin").read_bytes() == data
    assert temps(root) == []


@pytest.mark.parametrize("version", [None, "3", "9", "x"])
async def test_no_104_without_an_accepted_interop_version(
    root: Path, tmp_path: Path, version: str | None
) -> None:
    hs = {"upload-complete": "?0"} | (
        {} if version is None else {"upload-draft-interop-version": version}
    )
    async with running_server(config(root, tmp_path)) as (_, port):
        a = await h1(port, "PUT", "/f.bin", hs, b"abc")
        assert a.status == 201 and a.interim == []  # the draft: MUST NOT send 104 then
        assert (await h1(port, "HEAD", a.headers["location"])).headers["upload-offset"] == "3"


async def test_delete_cancels_and_removes_the_temporary(root: Path, tmp_path: Path) -> None:
    async with running_server(config(root, tmp_path)) as (_, port):
        a = await h1(port, "PUT", "/c.bin", {"upload-complete": "?0"}, b"x" * 1000)
        assert len(temps(root)) == 2  # the data and its info, hidden
        d = await h1(port, "DELETE", a.headers["location"])
        assert d.status == 204
        assert temps(root) == []
        assert (await h1(port, "HEAD", a.headers["location"])).status == 404
        assert not (root / "c.bin").exists()


async def test_length_checks_and_limits(root: Path, tmp_path: Path) -> None:
    cfg = config(root, tmp_path, max_upload_size=1000)
    async with running_server(cfg) as (_, port):
        big = await h1(port, "PUT", "/b.bin", {"upload-complete": "?0", "upload-length": "1001"})
        assert big.status == 413 and big.headers["upload-limit"].startswith("max-size=1000")
        odd = await h1(
            port, "PUT", "/b.bin", {"upload-complete": "?1", "upload-length": "10"}, b"12345"
        )
        assert odd.status == 400
        assert json.loads(odd.body)["type"].endswith("#inconsistent-upload-length")
        a = await h1(
            port, "PUT", "/b.bin", {"upload-complete": "?0", "upload-length": "10"}, b"1234"
        )
        loc = a.headers["location"]
        h = await h1(port, "HEAD", loc)
        assert h.headers["upload-length"] == "10" and h.headers["upload-offset"] == "4"
        other = await h1(port, "PATCH", loc, patch(4, False, **{"upload-length": "11"}), b"5")
        assert other.status == 400  # a second, different length
        past = await h1(port, "PATCH", loc, patch(4, False), b"5678901")
        assert past.status == 413  # declared past Upload-Length: refused unread
        assert (await h1(port, "HEAD", loc)).headers["upload-offset"] == "4"
        chunked = patch(4, False, **{"transfer-encoding": "chunked"})
        past = await h1(port, "PATCH", loc, chunked, b"5678901")
        assert past.status == 413  # streamed past it: the upload is invalid now (the draft)
        assert (await h1(port, "HEAD", loc)).status == 404
        no_type = await h1(port, "PATCH", loc, {"upload-offset": "0", "upload-complete": "?0"}, b"")
        assert no_type.status in (404, 415)
        assert not (root / "b.bin").exists()
    assert temps(root) == []


async def test_a_repr_digest_mismatch_commits_nothing(root: Path, tmp_path: Path) -> None:
    data = b"hello world" * 100
    good = base64.b64encode(hashlib.sha256(data).digest()).decode()
    wrong = base64.b64encode(hashlib.sha256(b"other").digest()).decode()
    async with running_server(config(root, tmp_path)) as (_, port):
        for name, digest, want in (("ok.txt", good, 201), ("bad.txt", wrong, 400)):
            hs = {"upload-complete": "?0", "repr-digest": f"sha-256=:{digest}:"}
            a = await h1(port, "PUT", f"/{name}", hs, data[:500])
            done = await h1(port, "PATCH", a.headers["location"], patch(500, True), data[500:])
            assert done.status == want and done.headers["upload-complete"] == "?1"
    assert (root / "ok.txt").read_bytes() == data
    assert not (root / "bad.txt").exists()
    assert temps(root) == []


async def test_expired_uploads_are_swept_and_their_urls_refused(root: Path, tmp_path: Path) -> None:
    async with running_server(config(root, tmp_path, upload_expiry=1.0)) as (_, port):
        a = await h1(port, "PUT", "/e.bin", {"upload-complete": "?0"}, b"x" * 10)
        assert a.headers["upload-limit"].endswith("max-age=1")
        assert len(temps(root)) == 2
        await wait_until(lambda: not temps(root), 10)  # the sweeper (every expiry / 4)
        assert (await h1(port, "HEAD", a.headers["location"])).status == 404
        assert not (root / "e.bin").exists()


@pytest.mark.parametrize(
    "token",
    ["", "x", "a.b", "A" * 5000, "..%2f..%2fetc", "AQAAAABrFndXYmlnLmJpbgA0.UHKITykKsOCm"],
)
async def test_hostile_upload_urls_are_404(root: Path, tmp_path: Path, token: str) -> None:
    async with running_server(config(root, tmp_path)) as (_, port):
        for method in ("HEAD", "DELETE"):
            got = await h1(port, method, "/.serverio/uploads/" + token)
            assert got.status in (400, 403, 404, 409), (method, got.status)
        got = await h1(port, "PATCH", "/.serverio/uploads/" + token, patch(0, True), b"x")
        assert got.status in (400, 403, 404, 405, 409)


async def test_a_token_for_another_target_or_secret_is_refused(root: Path, tmp_path: Path) -> None:
    async with running_server(config(root, tmp_path)) as (_, port):
        a = await h1(port, "PUT", "/t.bin", {"upload-complete": "?0"}, b"abc")
        loc = a.headers["location"]
        body, mac = loc.rsplit("/", 1)[1].split(".")
        flipped = body[:12] + ("B" if body[12] != "B" else "C") + body[13:]  # another byte
        tampered = loc.rsplit("/", 1)[0] + "/" + flipped + "." + mac
        assert (await h1(port, "HEAD", tampered)).status == 404
    other = tmp_path / "other"
    other.mkdir()
    cfg = config(root, other)  # another secret: every token refused
    async with running_server(cfg) as (_, port):
        assert (await h1(port, "HEAD", loc)).status == 404


async def test_the_access_hook_decides_on_the_target(root: Path, tmp_path: Path) -> None:
    users = tmp_path / "users"
    users.write_text(f"alice:{hash_password('pw', 1000)}\n")
    auth = {"authorization": "Basic " + base64.b64encode(b"alice:pw").decode()}
    cfg = config(root, tmp_path, auth=(("/private/**", str(users)),))
    (root / "private").mkdir()
    async with running_server(cfg) as (_, port):
        refused = await h1(port, "PUT", "/private/p.bin", {"upload-complete": "?0"}, b"abc")
        assert refused.status == 401 and refused.interim == []
        a = await h1(port, "PUT", "/private/p.bin", {"upload-complete": "?0", **auth}, b"abc")
        assert a.status == 201
        loc = a.headers["location"]
        # The upload URL is no capability of its own: the target's rule applies.
        assert (await h1(port, "HEAD", loc)).status == 401
        assert (await h1(port, "PATCH", loc, patch(3, True), b"d")).status == 401
        assert (await h1(port, "DELETE", loc)).status == 401
        done = await h1(port, "PATCH", loc, patch(3, True, **auth), b"d")
        assert done.status == 201
    assert (root / "private" / "p.bin").read_bytes() == b"abcd"


@pytest.mark.parametrize("path", ["/.hidden.bin", "/d/.serverio-tmp-up-x", "/dir/"])
async def test_hidden_and_temporary_targets_are_refused(
    root: Path, tmp_path: Path, path: str
) -> None:
    (root / "d").mkdir()
    async with running_server(config(root, tmp_path)) as (_, port):
        got = await h1(port, "PUT", path, {"upload-complete": "?0"}, b"x")
        assert got.status in (403, 409)
    assert temps(root) == []


async def test_the_temporaries_are_never_listed_or_served(root: Path, tmp_path: Path) -> None:
    async with running_server(config(root, tmp_path, hidden=True)) as (_, port):
        await h1(port, "PUT", "/l.bin", {"upload-complete": "?0"}, b"secret bytes")
        (name,) = [n for n in temps(root) if not n.endswith(".info")]
        listing = await h1(port, "GET", "/")
        assert b"serverio-tmp" not in listing.body
        assert (await h1(port, "GET", "/" + name)).status in (403, 404)


async def test_a_client_gone_mid_patch_keeps_what_reached_the_disk(
    root: Path, tmp_path: Path
) -> None:
    data = os.urandom(400_000)
    async with running_server(config(root, tmp_path)) as (_, port):
        a = await h1(port, "PUT", "/g.bin", {"upload-complete": "?0"}, b"")
        loc = a.headers["location"]
        hs = patch(0, True) | {"content-length": str(len(data))}
        assert await h1_request(port, "PATCH", loc, hs, data, cut_after=250_000) is None
        with trio.fail_after(10):
            while True:  # the server notices the EOF, keeps and fsyncs the bytes
                h = await h1(port, "HEAD", loc)
                if h.status == 204 and h.headers["upload-offset"] == "250000":
                    break
                await trio.sleep(0.05)
        rest = await h1(port, "PATCH", loc, patch(250_000, True), data[250_000:])
        assert rest.status == 201
    assert (root / "g.bin").read_bytes() == data
    assert temps(root) == []


async def test_the_incomplete_quota_per_client(root: Path, tmp_path: Path) -> None:
    cfg = config(root, tmp_path, max_incomplete_per_client=1000)
    async with running_server(cfg) as (_, port):
        hs = {"upload-complete": "?0", "upload-length": "600"}
        first = await h1(port, "PUT", "/q1.bin", hs, b"")
        assert first.status == 201
        assert (await h1(port, "PUT", "/q2.bin", hs, b"")).status == 507
        # Cancelling gives the bytes back.
        assert (await h1(port, "DELETE", first.headers["location"])).status == 204
        assert (await h1(port, "PUT", "/q2.bin", hs, b"")).status == 201


async def test_plain_puts_are_unchanged_and_partial_put_stays_400(
    root: Path, tmp_path: Path
) -> None:
    async with running_server(config(root, tmp_path)) as (_, port):
        assert (await h1(port, "PUT", "/p.txt", {}, b"plain")).status == 201
        got = await h1(port, "PUT", "/p.txt", {"content-range": "bytes 0-1/5"}, b"xx")
        assert got.status == 400
        assert (await h1(port, "HEAD", "/p.txt")).status == 200  # HEAD of a file: the read path
    assert (root / "p.txt").read_bytes() == b"plain"


async def test_the_put_sweep_at_start_up_keeps_incomplete_uploads(
    root: Path, tmp_path: Path
) -> None:
    from serverio.fs.writer import sweep

    async with running_server(config(root, tmp_path)) as (_, port):
        a = await h1(port, "PUT", "/keep.bin", {"upload-complete": "?0"}, b"kept")
    (root / (WRITE_TEMP_PREFIX + "0123abcd")).write_bytes(b"an abandoned PUT's")
    assert sweep(str(root), 0.0, now=4e9) == 1  # only the PUT's temporary
    assert len(temps(root)) == 2
    # A restarted server finds the upload and goes on from its offset.
    async with running_server(config(root, tmp_path)) as (_, port):
        assert (await h1(port, "HEAD", a.headers["location"])).headers["upload-offset"] == "4"
        done = await h1(port, "PATCH", a.headers["location"], patch(4, True), b"!")
        assert done.status == 201
    assert (root / "keep.bin").read_bytes() == b"kept!"


async def test_min_free_space_checks_the_declared_length_up_front(
    root: Path, tmp_path: Path
) -> None:
    total, _, free = shutil.disk_usage(root)
    # A reserve 64 MiB under what is free now: 256 MiB declared cannot fit,
    # 100 bytes can (other writers on the disk have 64 MiB of slack).
    cfg = config(root, tmp_path).evolve(min_free_space=free - (64 << 20)).validate()
    async with running_server(cfg) as (_, port):
        hs = {"upload-complete": "?0", "upload-length": str(256 << 20)}
        assert (await h1(port, "PUT", "/big.bin", hs, b"")).status == 507
        hs = {"upload-complete": "?0", "upload-length": "100"}
        assert (await h1(port, "PUT", "/small.bin", hs, b"")).status == 201
    assert total > 0


@pytest.mark.parametrize(
    ("naming", "name"),
    [
        ({"content-disposition": 'inline; filename="a b.bin"'}, "a b.bin"),
        ({"content-disposition": "inline; filename*=UTF-8''caf%C3%A9.bin"}, "caf\u00e9.bin"),
        ({"upload-metadata": "filename " + base64.b64encode(b"meta.bin").decode()}, "meta.bin"),
    ],
)
async def test_creation_by_post_to_a_folder(
    root: Path, tmp_path: Path, naming: dict[str, str], name: str
) -> None:
    (root / "in").mkdir()
    data = os.urandom(5000)
    async with running_server(config(root, tmp_path)) as (_, port):
        a = await h1(port, "POST", "/in/", {"upload-complete": "?0", **IV, **naming}, data[:10])
        assert a.status == 201 and [s for s, _ in a.interim] == [104]
        done = await h1(port, "PATCH", a.headers["location"], patch(10, True), data[10:])
        assert done.status == 201 and done.headers["upload-complete"] == "?1"
    assert (root / "in" / name).read_bytes() == data


@pytest.mark.parametrize(
    "disposition",
    ["inline", 'inline; filename="../x"', "inline; filename*=UTF-8''%ff", "x" * 2000],
)
async def test_a_post_creation_without_a_usable_name_is_400(
    root: Path, tmp_path: Path, disposition: str
) -> None:
    async with running_server(config(root, tmp_path)) as (_, port):
        got = await h1(
            port, "POST", "/", {"upload-complete": "?0", "content-disposition": disposition}
        )
        assert got.status == 400
    assert temps(root) == []


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
async def test_curl_sees_the_104_then_the_100_continue(root: Path, tmp_path: Path) -> None:
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(3 << 20))  # curl sends Expect: 100-continue past 1 MiB
    async with running_server(config(root, tmp_path)) as (_, port):
        with trio.fail_after(30):
            done = await trio.run_process(
                [
                    "curl",
                    "-sS",
                    "-v",
                    "-o",
                    os.devnull,
                    "-w",
                    "%{http_code}",
                    "-H",
                    "Upload-Complete: ?1",
                    "-H",
                    "Upload-Draft-Interop-Version: 8",
                    "-T",
                    str(src),
                    f"http://127.0.0.1:{port}/curl.bin",
                ],
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
    log = done.stderr.decode("utf-8", "replace")
    heads = [line for line in log.splitlines() if line.startswith("< HTTP/1.1 ")]
    assert done.stdout == b"201", log[-2000:]
    assert heads[:2] == ["< HTTP/1.1 104 Upload Resumption Supported", "< HTTP/1.1 100 Continue"]
    assert (root / "curl.bin").read_bytes() == src.read_bytes()
