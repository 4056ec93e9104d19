"""Two serverio processes on one directory (a fleet sharing its storage
and its --secret-file): an upload started on one is resumed and completed
on the other, and two replicas appending to one upload at the same offset
cannot both win (the lock on the upload's data file)."""

from __future__ import annotations

import http.client
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from serverio.http.target import WRITE_TEMP_PREFIX

from .fleet import replicas

PARTIAL = "application/partial-upload"


def _port(url: str) -> int:
    return int(url.rstrip("/").rsplit(":", 1)[1])


def call(
    url: str, method: str, path: str, headers: dict[str, str], body: bytes = b""
) -> tuple[int, dict[str, str]]:
    conn = http.client.HTTPConnection("127.0.0.1", _port(url), timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}
    finally:
        conn.close()


def _locked(path: Path) -> bool:
    """Is ``path`` locked by another process (flock, as serverio takes it)?"""
    import fcntl

    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases ours, if we got it
    return False


def temps(root: Path) -> list[str]:
    return [n for _, _, names in os.walk(root) for n in names if n.startswith(WRITE_TEMP_PREFIX)]


def test_start_on_one_replica_resume_on_the_other(tmp_path: Path) -> None:
    root = tmp_path / "www"
    root.mkdir()
    secret = tmp_path / "secret"
    secret.write_bytes(os.urandom(32).hex().encode())
    extra = ("--upload", "--min-free-space", "0", "--secret-file", str(secret))
    data = os.urandom(3 << 20)
    with replicas(root, root, extra=extra) as (a, b):
        status, hs = call(a.url, "PUT", "/f.bin", {"Upload-Complete": "?0"}, data[: 1 << 20])
        assert status == 201
        loc = hs["location"]
        # The other replica knows it from the disk and the shared secret.
        status, hs = call(b.url, "HEAD", loc, {})
        assert status == 204 and hs["upload-offset"] == str(1 << 20)
        patch = {"Upload-Offset": str(1 << 20), "Upload-Complete": "?0", "Content-Type": PARTIAL}
        status, hs = call(b.url, "PATCH", loc, patch, data[1 << 20 : 2 << 20])
        assert status == 204 and hs["upload-offset"] == str(2 << 20)
        # Back on the first one: the offset B reported is the one A accepts.
        patch = {"Upload-Offset": str(2 << 20), "Upload-Complete": "?1", "Content-Type": PARTIAL}
        status, hs = call(a.url, "PATCH", loc, patch, data[2 << 20 :])
        assert status == 201 and hs["upload-complete"] == "?1"
    assert (root / "f.bin").read_bytes() == data
    assert temps(root) == []


@pytest.mark.skipif(sys.platform == "win32", reason="the test looks at the lock with flock")
def test_two_replicas_appending_at_one_offset_cannot_both_win(tmp_path: Path) -> None:
    root = tmp_path / "www"
    root.mkdir()
    secret = tmp_path / "secret"
    secret.write_bytes(os.urandom(32).hex().encode())
    extra = ("--upload", "--min-free-space", "0", "--secret-file", str(secret))
    part = os.urandom(1 << 20)
    with replicas(root, root, extra=extra) as (a, b):
        status, hs = call(a.url, "PUT", "/race.bin", {"Upload-Complete": "?0"}, b"")
        loc = hs["location"]
        # A's PATCH holds the upload: its content arrives slowly.
        slow = http.client.HTTPConnection("127.0.0.1", _port(a.url), timeout=30)
        slow.putrequest("PATCH", loc)
        for k, v in {
            "Upload-Offset": "0",
            "Upload-Complete": "?0",
            "Content-Type": PARTIAL,
            "Content-Length": str(len(part)),
        }.items():
            slow.putheader(k, v)
        slow.endheaders()
        slow.send(part[:1000])
        # Wait until A holds it (the lock on the data file, seen from here).
        (data_file,) = [n for n in temps(root) if not n.endswith(".info")]
        deadline = time.monotonic() + 10
        while not _locked(root / data_file):
            assert time.monotonic() < deadline, "replica A never took the upload"
            time.sleep(0.02)
        results: list[tuple[int, dict[str, str]]] = []

        def other() -> None:
            patch = {"Upload-Offset": "0", "Upload-Complete": "?0", "Content-Type": PARTIAL}
            results.append(call(b.url, "PATCH", loc, patch, part))

        t = threading.Thread(target=other)
        t.start()
        t.join(timeout=30)
        slow.send(part[1000:])
        resp = slow.getresponse()
        resp.read()
        slow.close()
        ((b_status, _),) = results
        # One winner: B was refused while A held the upload (503, retry);
        # A's append went in whole.
        assert b_status == 503
        assert resp.status == 204 and resp.getheader("upload-offset") == str(len(part))
        # B's retry at the old offset now gets the 409 with the right one.
        patch = {"Upload-Offset": "0", "Upload-Complete": "?0", "Content-Type": PARTIAL}
        status, hs = call(b.url, "PATCH", loc, patch, part)
        assert status == 409 and hs["upload-offset"] == str(len(part))
        status, hs = call(a.url, "HEAD", loc, {})
        assert hs["upload-offset"] == str(len(part))
