"""Validators that agree across replicas and change with the bytes.

Real serverio processes on loopback, serving byte-identical copies of one
tree (``cp -a``: same mtimes, other inodes; plain ``cp``: other mtimes).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from serverio.fs.filecache import SHARED_MTIME_FILES, HashStore

from .fleet import replicas, request, wait_for_etag

pytestmark = pytest.mark.slow

SMALL = b"small file body\n" * 64  # 1 KiB: hashed, read anyway
TEXT = b"".join(b"line %d of a compressible text file\n" % i for i in range(4000))
BIG = os.urandom(300 * 1024)  # larger than --small-file-size


def _tree(base: Path) -> Path:
    root = base / "rep1"
    root.mkdir()
    (root / "small.txt").write_bytes(SMALL)
    (root / "app.txt").write_bytes(TEXT)
    (root / "big.bin").write_bytes(BIG)
    for name in ("small.txt", "app.txt", "big.bin"):
        os.utime(root / name, ns=(1_700_000_000_123_456_789,) * 2)
    return root


def _copy_keeping_times(src: str, dst: str) -> None:
    # shutil.copy2 without CopyFile2 (CPython 3.12+ on Windows), which Wine
    # 8.0 lacks (the process aborts): bytes, then mode and times.
    shutil.copyfile(src, dst)
    shutil.copystat(src, dst)


def _cp(src: Path, dst: Path, *flags: str) -> Path:
    if os.name == "nt":  # no cp: the same copies by shutil (-a keeps the times)
        shutil.copytree(
            src, dst, copy_function=_copy_keeping_times if "-a" in flags else shutil.copy
        )
        return dst
    subprocess.run(["cp", *flags, "-r", str(src), str(dst)], check=True)
    return dst


def test_cp_a_replicas_send_identical_etags_and_validate_each_others(tmp_path: Path) -> None:
    rep1 = _tree(tmp_path)
    rep2 = _cp(rep1, tmp_path / "rep2", "-a")
    rep3 = _cp(rep1, tmp_path / "rep3", "-a")
    assert os.stat(rep1 / "big.bin").st_ino != os.stat(rep2 / "big.bin").st_ino
    gz = {"Accept-Encoding": "gzip"}
    with replicas(rep1, rep2, rep3) as (a, b, c):
        for path, hs in (("/small.txt", {}), ("/big.bin", {}), ("/app.txt", gz)):
            tags = {r.url: request(r.url, path, hs)[1]["etag"] for r in (a, b, c)}
            assert len(set(tags.values())) == 1, (path, tags)
            tag = tags[a.url]
            for other in (b, c):
                status, _, body = request(other.url, path, {**hs, "If-None-Match": tag})
                assert (status, body) == (304, b""), path
        big_tag = request(a.url, "/big.bin")[1]["etag"]
        status, hs, body = request(
            b.url, "/big.bin", {"Range": "bytes=1000-1999", "If-Range": big_tag}
        )
        assert status == 206 and body == BIG[1000:2000]
        assert hs["content-range"] == f"bytes 1000-1999/{len(BIG)}"
        small_tag = request(a.url, "/small.txt")[1]["etag"]
        ranged = {"Range": "bytes=0-3", "If-Range": small_tag}
        status, _, body = request(c.url, "/small.txt", ranged)
        assert status == 206 and body == SMALL[:4]


def test_content_mode_agrees_across_plain_copies_with_other_mtimes(tmp_path: Path) -> None:
    rep1 = _tree(tmp_path)
    rep2 = _cp(rep1, tmp_path / "rep2")  # plain cp: new mtimes
    os.utime(rep2 / "big.bin", ns=(1_800_000_000_000_000_000,) * 2)
    assert os.stat(rep1 / "big.bin").st_mtime_ns != os.stat(rep2 / "big.bin").st_mtime_ns
    with replicas(rep1, rep2, extra=("--etag", "content")) as (a, b):
        tag = wait_for_etag(a.url, "/big.bin")
        assert wait_for_etag(b.url, "/big.bin") == tag
        assert request(b.url, "/big.bin", {"If-None-Match": tag})[0] == 304
        status, _, body = request(b.url, "/big.bin", {"Range": "bytes=5-9", "If-Range": tag})
        assert (status, body) == (206, BIG[5:10])
        small = request(a.url, "/small.txt")[1]["etag"]
        assert request(b.url, "/small.txt")[1]["etag"] == small


def _rewrite_keeping_mtime(path: Path, data: bytes, mtime_ns: int) -> None:
    with open(path, "r+b") as f:  # in place: same inode
        f.write(data)
    os.utime(path, ns=(mtime_ns, mtime_ns))


@pytest.mark.parametrize("name", ["small.txt", "big.bin", "app.txt"])
def test_same_size_edit_under_constant_mtime_is_never_a_304(tmp_path: Path, name: str) -> None:
    root = _tree(tmp_path)
    one = 10**9  # mtime 1, what Nix and reproducible image builds set
    os.utime(root / name, ns=(one, one))
    old = (root / name).read_bytes()
    new = bytes(b ^ 0xFF for b in old)
    gz = {"Accept-Encoding": "gzip"} if name == "app.txt" else {}
    with replicas(root) as (a,):
        tag = wait_for_etag(a.url, "/" + name, gz)
        _, before, _ = request(a.url, "/" + name, gz)
        _rewrite_keeping_mtime(root / name, new, one)
        st = os.stat(root / name)
        assert (st.st_size, st.st_mtime_ns) == (len(old), one)
        status, hs, body = request(a.url, "/" + name, {**gz, "If-None-Match": tag})
        assert status == 200 and hs.get("etag") != tag
        if gz:
            import gzip

            body = gzip.decompress(body)
        assert body == new
        status, _, body = request(a.url, "/" + name, {"Range": "bytes=0-9", "If-Range": tag})
        assert status == 200 and body == new  # never old validator + new bytes
        assert "last-modified" not in before  # a constant mtime is no modification date


@pytest.mark.parametrize("name", ["small.txt", "big.bin"])
def test_rename_over_with_same_size_and_mtime_changes_the_etag(tmp_path: Path, name: str) -> None:
    root = _tree(tmp_path)
    when = 10**9 if name == "big.bin" else 1_700_000_000_123_456_789
    os.utime(root / name, ns=(when, when))
    old = (root / name).read_bytes()
    with replicas(root) as (a,):
        tag = wait_for_etag(a.url, "/" + name)
        tmp = root / (name + ".new")
        tmp.write_bytes(bytes(b ^ 0x55 for b in old))
        os.utime(tmp, ns=(when, when))
        os.replace(tmp, root / name)  # rename(2)'s semantics on Windows too
        status, hs, body = request(a.url, "/" + name, {"If-None-Match": tag})
        assert status == 200 and body != old and hs.get("etag") != tag


def test_many_files_sharing_one_mtime_get_content_hashes(tmp_path: Path) -> None:
    root = tmp_path / "www"
    root.mkdir()
    shared = 1_650_000_000 * 10**9  # a release tarball's time on every file
    for i in range(SHARED_MTIME_FILES + 1):
        (root / f"f{i}.bin").write_bytes(bytes([i]) * (100 * 1024))
        os.utime(root / f"f{i}.bin", ns=(shared, shared))
    with replicas(root) as (a,):
        for i in range(SHARED_MTIME_FILES):
            request(a.url, f"/f{i}.bin", method="HEAD")
        last = f"/f{SHARED_MTIME_FILES}.bin"
        tag = wait_for_etag(a.url, last)
        assert "-" not in tag  # a content hash, not size-mtime
        _rewrite_keeping_mtime(root / last[1:], b"\xee" * (100 * 1024), shared)
        assert request(a.url, last, {"If-None-Match": tag})[0] == 200


def test_hash_store_counts_distinct_files_per_mtime() -> None:
    store = HashStore()

    class St:
        def __init__(self, ino: int, mtime: int) -> None:
            self.st_dev, self.st_ino, self.st_mtime_ns = 1, ino, mtime

    for _ in range(20):  # the same file seen again and again: not shared
        assert not store.shared_mtime(St(1, 5))  # type: ignore[arg-type]
    results = [store.shared_mtime(St(i, 7)) for i in range(SHARED_MTIME_FILES)]  # type: ignore[arg-type]
    assert results == [False] * (SHARED_MTIME_FILES - 1) + [True]
    assert store.shared_mtime(St(99, 7))  # type: ignore[arg-type]
    store.put((1, 2, 3, 4, 5), b"h")
    assert store.get((1, 2, 3, 4, 5)) == b"h" and store.get((1, 2, 3, 4, 6)) is None
    small = HashStore(max_entries=2)
    for i in range(3):
        small.put((i, 0, 0, 0, 0), b"x")
    assert len(small) == 2 and small.get((0, 0, 0, 0, 0)) is None
