"""The streaming archive encoders (serverio.archive.zipenc / tarenc), read
back with the standard library's own readers: stored and deflated members,
empty directories, ZIP64 records (reached with small inputs through the
thresholds), hostile names, a member whose data does not match its header."""

from __future__ import annotations

import io
import os
import struct
import tarfile
import zipfile

import pytest

from serverio.archive.plan import Bounds, archive_format, archive_name, check_bounds
from serverio.archive.tarenc import TarEncoder
from serverio.archive.zipenc import ZipEncoder, check_segments, encode_name
from serverio.errors import HTTPError

MTIME = 1_700_000_000.0


def _zip(members: list[tuple[tuple[str, ...], bytes | None]], **kw: object) -> bytes:
    enc = ZipEncoder(**kw)  # type: ignore[arg-type]
    out = []
    for segs, data in members:
        if data is None:
            out.append(enc.directory(segs, MTIME))
            continue
        out.append(enc.start(segs, MTIME, len(data), deflate=len(segs[-1]) % 2 == 0))
        for i in range(0, len(data), 1000):  # fed in pieces, as the stream does
            out.append(enc.data(data[i : i + 1000]))
        out.append(enc.end())
    out.append(enc.finish())
    return b"".join(out)


def _tar(members: list[tuple[tuple[str, ...], bytes | None]]) -> bytes:
    enc = TarEncoder()
    out = []
    for segs, data in members:
        if data is None:
            out.append(enc.directory(segs, MTIME))
            continue
        out.append(enc.start(segs, MTIME, len(data)))
        for i in range(0, len(data), 777):
            out.append(enc.data(data[i : i + 777]))
        out.append(enc.end())
    out.append(enc.finish())
    return b"".join(out)


MEMBERS: list[tuple[tuple[str, ...], bytes | None]] = [
    (("top",), None),
    (("top", "a.txt"), b"hello\n" * 1000),
    (("top", "bb.bin"), os.urandom(5000)),
    (("top", "empty"), None),
    (("top", "zero"), b""),
    (("top", "caf\u00e9 \u2603.txt"), b"snow"),
    (("top", "l" * 250, "m" * 250, "deep.txt"), b"long"),
]


def test_zip_round_trip_stored_deflated_dirs_unicode_long() -> None:
    z = zipfile.ZipFile(io.BytesIO(_zip(MEMBERS)))
    assert z.testzip() is None
    names = z.namelist()
    assert names == [
        "top/",
        "top/a.txt",
        "top/bb.bin",
        "top/empty/",
        "top/zero",
        "top/caf\u00e9 \u2603.txt",
        "top/" + "l" * 250 + "/" + "m" * 250 + "/deep.txt",
    ]
    for segs, data in MEMBERS:
        if data is not None:
            assert z.read("/".join(segs)) == data
    info = z.getinfo("top/a.txt")
    assert info.compress_type in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
    methods = {z.getinfo("/".join(s)).compress_type for s, d in MEMBERS if d}
    assert methods == {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED}
    assert z.getinfo("top/empty/").is_dir()
    assert z.getinfo("top/a.txt").date_time == (2023, 11, 14, 22, 13, 20)


def test_zip64_records_with_small_thresholds() -> None:
    """Every ZIP64 form: local headers, 8-byte descriptors, central
    directory extras (sizes and offsets), the ZIP64 end records."""
    data = _zip(MEMBERS, zip64_at=1, entries_zip64_at=2)
    assert b"PK\x06\x06" in data and b"PK\x06\x07" in data  # end record, locator
    z = zipfile.ZipFile(io.BytesIO(data))
    assert z.testzip() is None
    for segs, body in MEMBERS:
        if body is not None:
            assert z.read("/".join(segs)) == body
    # The classic end record defers to the ZIP64 one.
    eocd = data[-22:]
    _, _, _, n_disk, n_total, size, offset, _ = struct.unpack("<IHHHHIIH", eocd)
    assert (n_disk, n_total, size, offset) == (0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF)


def test_zip64_decided_from_the_size_before_the_data() -> None:
    enc = ZipEncoder()
    head = enc.start(("big",), MTIME, 0xFFFFFFFF - 10)
    assert struct.unpack("<H", head[4:6])[0] == 45  # version needed: ZIP64
    small = ZipEncoder().start(("small",), MTIME, 10)
    assert struct.unpack("<H", small[4:6])[0] == 20


def test_zip_non_utf8_name_keeps_its_bytes_without_the_utf8_flag() -> None:
    raw = b"caf\xe9.txt"  # latin-1 on a POSIX filesystem
    name = raw.decode("utf-8", "surrogateescape")
    assert encode_name(("top", name), False) == (b"top/" + raw, False)
    z = zipfile.ZipFile(io.BytesIO(_zip([(("top", name), b"x")])))
    (info,) = z.infolist()
    assert not info.flag_bits & 0x800
    assert info.filename.encode("cp437") == b"top/" + raw  # the bytes, as written
    assert z.read(info) == b"x"


@pytest.mark.parametrize(
    "segments",
    [(), ("..",), ("a", ".."), (".",), ("",), ("a/b",), ("..\\evil",), ("a\x00b",)],
)
def test_hostile_names_are_refused(segments: tuple[str, ...]) -> None:
    with pytest.raises(ValueError):
        check_segments(segments)
    with pytest.raises(ValueError):
        ZipEncoder().start(segments, MTIME, 1)
    with pytest.raises(ValueError):
        TarEncoder().start(segments, MTIME, 1)


def test_a_zip_name_over_65535_bytes_is_refused() -> None:
    with pytest.raises(ValueError):
        encode_name(tuple("d" * 200 for _ in range(400)), False)


def test_tar_gz_round_trip_dirs_unicode_long_and_non_utf8() -> None:
    odd = b"caf\xe9".decode("utf-8", "surrogateescape")
    members = [*MEMBERS, (("top", odd), b"latin")]
    blob = _tar(members)
    assert blob[:2] == b"\x1f\x8b"  # gzip (RFC 1952)
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz", errors="surrogateescape") as t:
        got = {m.name: m for m in t.getmembers()}
        for segs, data in members:
            m = got["/".join(segs)]
            if data is None:
                assert m.isdir()
            else:
                assert m.isfile() and m.size == len(data)
                f = t.extractfile(m)
                assert f is not None and f.read() == data
                assert m.mtime == int(MTIME)
    assert len(got) == len(members)


def test_tar_member_data_must_match_its_header() -> None:
    enc = TarEncoder()
    enc.start(("a",), MTIME, 3)
    with pytest.raises(ValueError):
        enc.data(b"abcd")
    enc2 = TarEncoder()
    enc2.start(("a",), MTIME, 3)
    enc2.data(b"ab")
    with pytest.raises(ValueError):
        enc2.end()


def test_query_format_name_and_bounds() -> None:
    assert archive_format(None) is None
    assert archive_format("sort=name") is None
    assert archive_format("archive=zip") == "zip"
    assert archive_format("archive=tar.gz&x=1") == "tar.gz"
    for bad in ("archive=rar", "archive=", "archive"):
        with pytest.raises(HTTPError) as exc:
            archive_format(bad)
        assert exc.value.status == 400
    assert archive_name(("a", "b"), "www") == "b"
    assert archive_name((), "www") == "www"
    check_bounds(10, 100, Bounds(10, 100))
    for count, size in ((11, 0), (0, 101)):
        with pytest.raises(HTTPError) as exc:
            check_bounds(count, size, Bounds(10, 100))
        assert exc.value.status == 413
