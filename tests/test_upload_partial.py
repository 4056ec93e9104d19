"""A PUT with ``Content-Range`` (a partial PUT, ``curl -C 6 -T``) is 400
and leaves the file as it was (RFC 9110 §9.3.4: serverio does not apply
partial updates, so it must refuse them rather than store the part as the
whole file): over HTTP/1.1 and HTTP/2, with ``--upload`` and ``--webdav``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from serverio.config import Config

from .conftest import make_config, memory_connection
from .h2client import h2_memory
from .test_upload import temps

FULL = b"0123456789abcdefghijklm\n"  # 24 bytes; the file holds them already
PART = FULL[6:]  # what curl -C 6 -T sends: bytes 6-23


def configs(root: Path) -> dict[str, Config]:
    return {
        "upload": make_config(root, upload=True, min_free_space=0),
        "webdav": make_config(root, webdav=True, min_free_space=0),
    }


def raw_put(path: str, body: bytes, content_range: str, extra: str = "") -> bytes:
    return (
        f"PUT {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}\r\n"
        f"Content-Range: {content_range}\r\n{extra}\r\n"
    ).encode() + body


@pytest.mark.parametrize("mode", ["upload", "webdav"])
async def test_h1_a_put_with_content_range_is_400_and_the_file_is_untouched(
    root: Path, mode: str
) -> None:
    (root / "full.txt").write_bytes(FULL)
    cfg = configs(root)[mode]
    async with memory_connection(cfg) as (client, srv, _):
        await client.send_raw(raw_put("/full.txt", PART, f"bytes 6-23/{len(FULL)}"))
        r = await client.read_response()
        assert r.status == 400, r
        # A new file is refused as well (no 5-byte file from bytes 0-4/100).
        await client.send_raw(raw_put("/new.txt", b"HELLO", "bytes 0-4/100"))
        assert (await client.read_response()).status == 400
        # The connection lives on, and the file reads as before.
        got = await client.get("/full.txt")
        assert got.status == 200 and got.body == FULL
        assert srv.stats.writes.files == 0
    assert (root / "full.txt").read_bytes() == FULL
    assert not (root / "new.txt").exists() and temps(root) == []


@pytest.mark.parametrize("mode", ["upload", "webdav"])
async def test_h1_expect_100_continue_with_content_range_sends_no_100_and_reads_nothing(
    root: Path, mode: str
) -> None:
    (root / "full.txt").write_bytes(FULL)
    async with memory_connection(configs(root)[mode]) as (client, _srv, _):
        head = raw_put("/full.txt", b"", "bytes 6-23/24", "Expect: 100-continue\r\n")
        head = head.replace(b"Content-Length: 0", b"Content-Length: %d" % len(PART))
        await client.send_raw(head)
        raw = b""
        with trio.fail_after(5):
            while b"400 Bad Request\n" not in raw:
                raw += await client.stream.receive_some(4096)
        assert b"100 Continue" not in raw
    assert (root / "full.txt").read_bytes() == FULL


@pytest.mark.parametrize("mode", ["upload", "webdav"])
async def test_h2_a_put_with_content_range_is_400_and_the_file_is_untouched(
    root: Path, mode: str
) -> None:
    (root / "full.txt").write_bytes(FULL)
    async with h2_memory(configs(root)[mode]) as (client, srv, _):
        sid = client.request(
            "/full.txt",
            "PUT",
            [("content-length", str(len(PART))), ("content-range", "bytes 6-23/24")],
            end_stream=False,
        )
        client.conn.send_data(sid, PART, end_stream=True)
        await client.flush()
        (r,) = await client.wait(sid)
        assert r.status == 400
        got = await client.get("/full.txt")
        assert got.status == 200 and bytes(got.body) == FULL
        assert srv.stats.writes.files == 0
    assert (root / "full.txt").read_bytes() == FULL and temps(root) == []


async def test_a_put_without_content_range_still_replaces(root: Path) -> None:
    """The refusal keys on the field: a plain PUT of the same bytes is 204."""
    (root / "full.txt").write_bytes(FULL)
    async with memory_connection(configs(root)["upload"]) as (client, _srv, _):
        put = f"PUT /full.txt HTTP/1.1\r\nHost: t\r\nContent-Length: {len(PART)}\r\n\r\n"
        await client.send_raw(put.encode() + PART)
        assert (await client.read_response()).status == 204
    assert (root / "full.txt").read_bytes() == PART
