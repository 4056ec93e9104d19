"""tus 1.0 on the wire (the scripted side; tuspy itself judges in
tests/test_resumable_tus.py): discovery, creation with and without
content, Upload-Metadata with hostile file names, the version check,
checksums (460), termination, expiration fields, Tus-Max-Size."""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

import pytest

from serverio.config import Config
from serverio.http.target import WRITE_TEMP_PREFIX
from serverio.resumable.protocol import parse_checksum, parse_metadata

from .conftest import make_config, running_server
from .resumable_client import Answer, h1_request

TUS = {"tus-resumable": "1.0.0"}
OCTETS = "application/offset+octet-stream"


def b64(text: str | bytes) -> str:
    raw = text.encode() if isinstance(text, str) else text
    return base64.b64encode(raw).decode()


async def h1(
    port: int, method: str, path: str, headers: dict[str, str] | None = None, body: bytes = b""
) -> Answer:
    got = await h1_request(port, method, path, headers, body)
    assert got is not None
    return got


def temps(root: Path) -> list[str]:
    return [n for _, _, names in os.walk(root) for n in names if n.startswith(WRITE_TEMP_PREFIX)]


@pytest.fixture
def cfg(tmp_path: Path) -> Config:
    root = tmp_path / "www"
    (root / "in").mkdir(parents=True)
    secret = tmp_path / "secret"
    secret.write_bytes(os.urandom(32).hex().encode())
    return make_config(
        root, upload=True, min_free_space=0, secret_file=str(secret), max_upload_size=1 << 20
    )


async def test_discovery_create_patch_terminate(cfg: Config, tmp_path: Path) -> None:
    root = tmp_path / "www"
    async with running_server(cfg) as (_, port):
        o = await h1(port, "OPTIONS", "/in/", TUS)
        assert o.status == 204 and o.headers["tus-version"] == "1.0.0"
        assert "creation" in o.headers["tus-extension"].split(",")
        assert o.headers["tus-max-size"] == str(1 << 20)
        assert "sha256" in o.headers["tus-checksum-algorithm"].split(",")
        meta = f"filename {b64('a b.txt')},filetype {b64('text/plain')}"
        c = await h1(port, "POST", "/in/", {**TUS, "upload-length": "10", "upload-metadata": meta})
        assert c.status == 201 and c.headers["tus-resumable"] == "1.0.0"
        assert "upload-expires" in c.headers
        loc = c.headers["location"]
        h = await h1(port, "HEAD", loc, TUS)
        assert h.status == 200 and h.headers["upload-offset"] == "0"
        assert h.headers["upload-length"] == "10" and h.headers["cache-control"] == "no-store"
        p = await h1(
            port, "PATCH", loc, {**TUS, "upload-offset": "0", "content-type": OCTETS}, b"01234"
        )
        assert p.status == 204 and p.headers["upload-offset"] == "5"
        wrong = await h1(
            port, "PATCH", loc, {**TUS, "upload-offset": "0", "content-type": OCTETS}, b"x"
        )
        assert wrong.status == 409
        d = await h1(port, "DELETE", loc, TUS)
        assert d.status == 204
        assert (await h1(port, "HEAD", loc, TUS)).status == 404
    assert temps(root) == [] and not (root / "in" / "a b.txt").exists()


async def test_creation_with_upload_and_checksums(cfg: Config, tmp_path: Path) -> None:
    root = tmp_path / "www"
    data = os.urandom(5000)
    async with running_server(cfg) as (_, port):
        hs = {
            **TUS,
            "upload-length": "5000",
            "upload-metadata": f"filename {b64('c.bin')}",
            "content-type": OCTETS,
        }
        c = await h1(port, "POST", "/in/", hs, data[:2000])
        assert c.status == 201 and c.headers["upload-offset"] == "2000"
        loc = c.headers["location"]
        bad = b64(hashlib.sha256(b"not it").digest())
        p = await h1(
            port,
            "PATCH",
            loc,
            {
                **TUS,
                "upload-offset": "2000",
                "content-type": OCTETS,
                "upload-checksum": f"sha256 {bad}",
            },
            data[2000:],
        )
        assert p.status == 460  # the part is not appended
        assert (await h1(port, "HEAD", loc, TUS)).headers["upload-offset"] == "2000"
        odd = await h1(
            port,
            "PATCH",
            loc,
            {
                **TUS,
                "upload-offset": "2000",
                "content-type": OCTETS,
                "upload-checksum": "crc32 AAAA",
            },
            data[2000:],
        )
        assert odd.status == 400
        good = b64(hashlib.sha256(data[2000:]).digest())
        p = await h1(
            port,
            "PATCH",
            loc,
            {
                **TUS,
                "upload-offset": "2000",
                "content-type": OCTETS,
                "upload-checksum": f"sha256 {good}",
            },
            data[2000:],
        )
        assert p.status == 204 and p.headers["upload-offset"] == "5000"
    assert (root / "in" / "c.bin").read_bytes() == data
    assert temps(root) == []


@pytest.mark.parametrize(
    ("name", "status"),
    [
        (b"../escape.txt", 400),
        (b"a/b.txt", 400),
        (b"..", 403),
        (b".hidden", 403),
        (b".serverio-tmp-up-x", 403),
        (b"nul\x00.txt", 400),
        (b"\xff\xfe", 400),
        (b"CON", 403),
    ],
)
async def test_hostile_file_names_are_refused(
    cfg: Config, tmp_path: Path, name: bytes, status: int
) -> None:
    root = tmp_path / "www"
    async with running_server(cfg) as (_, port):
        hs = {**TUS, "upload-length": "1", "upload-metadata": f"filename {b64(name)}"}
        got = await h1(port, "POST", "/in/", hs)
        assert got.status == status
    assert temps(root) == []
    assert sorted(os.listdir(root)) == ["in"] and os.listdir(root / "in") == []


async def test_versions_sizes_and_malformed_fields(cfg: Config) -> None:
    async with running_server(cfg) as (_, port):
        meta = f"filename {b64('v.bin')}"
        old = await h1(
            port,
            "POST",
            "/in/",
            {"tus-resumable": "0.2.2", "upload-length": "1", "upload-metadata": meta},
        )
        assert old.status == 412 and old.headers["tus-version"] == "1.0.0"
        big = await h1(
            port, "POST", "/in/", {**TUS, "upload-length": str(2 << 20), "upload-metadata": meta}
        )
        assert big.status == 413
        for bad in ("-1", "1e3", "x", "99999999999999999999"):
            got = await h1(
                port, "POST", "/in/", {**TUS, "upload-length": bad, "upload-metadata": meta}
            )
            assert got.status == 400, bad
        no_len = await h1(port, "POST", "/in/", {**TUS, "upload-metadata": meta})
        assert no_len.status == 400
        for meta_bad in ("filename", "filename !!!", "a b,a c", "k" * 100 + " YQ==", "x" * 5000):
            got = await h1(
                port, "POST", "/in/", {**TUS, "upload-length": "1", "upload-metadata": meta_bad}
            )
            assert got.status == 400, meta_bad
        onto_file = await h1(
            port, "POST", "/in/x.bin", {**TUS, "upload-length": "1", "upload-metadata": meta}
        )
        assert onto_file.status in (403, 405)


def test_metadata_and_checksum_parsers_on_hostile_input() -> None:
    assert parse_metadata("filename YS50eHQ=,flag") == {"filename": b"a.txt", "flag": b""}
    assert parse_metadata("filename ###") is None
    assert parse_metadata(",".join(f"k{i} YQ==" for i in range(40))) is None
    assert parse_metadata("ke\u00ffy YQ==") is None
    assert parse_checksum("sha256 " + b64(b"x" * 32)) == ("sha256", b"x" * 32)
    assert parse_metadata("filename") == {"filename": b""}  # a key alone: no usable name
    assert parse_checksum(None) is None
    for bad in ("sha256", "sha256 ***", "crc32 AAAA", "sha256 " + "=" * 8):
        assert not isinstance(parse_checksum(bad), tuple), bad
