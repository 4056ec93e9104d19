"""Resumable uploads: the two targets of issue 43, on loopback.

``python -m bench.resumable [--size-mib 1024] [--chunk-mib 8] [--uploads 100]
[--clients 20] [--each-mib 10]``

1. **chunked vs single**: one file of ``--size-mib`` sent as a single
   ``PUT``, then as an IETF resumable upload (a careful creation, then
   ``PATCH`` parts of ``--chunk-mib``), fsync on in both; the throughput
   ratio (target >= 0.8) and the server's RSS growth across the resumable
   upload (target < 64 MiB);
2. **many at once**: ``--uploads`` resumable uploads of ``--each-mib``
   from ``--clients`` client addresses (127.0.0.2 ...), all concurrent;
   errors (target 0) and temporaries left after completion (target 0),
   then incomplete uploads under a 2-second ``--upload-expiry`` and the
   temporaries left after the sweeper ran (target 0).

Each server is ``python -m serverio`` in a subprocess on a temporary
directory; the figures go to stdout as one line each.
"""

from __future__ import annotations

import argparse
import http.client
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

MiB = 1 << 20
PARTIAL = "application/partial-upload"
TEMP = ".serverio-tmp-"


def start(root: Path, *extra: str) -> tuple[subprocess.Popen[str], int]:
    secret = root.parent / "secret"
    secret.write_bytes(os.urandom(32).hex().encode())
    args = [sys.executable, "-m", "serverio", "-d", str(root), "-q", "--upload"]
    args += ["--min-free-space", "0", "--secret-file", str(secret), "--max-upload-size", "4GiB"]
    args += ["--listen", "127.0.0.1:0", "--min-upload-rate", "0", *extra]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("Serving "), line
    return proc, int(line.rsplit(":", 1)[1].strip().strip("/"))


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def send(
    port: int,
    method: str,
    path: str,
    headers: dict[str, str],
    body: bytes | Path = b"",
    source: str = "127.0.0.1",
    span: tuple[int, int] | None = None,
) -> tuple[int, dict[str, str]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300, source_address=(source, 0))
    try:
        if isinstance(body, Path):
            start_, length = span or (0, body.stat().st_size)
            conn.putrequest(method, path)
            for k, v in {**headers, "Content-Length": str(length)}.items():
                conn.putheader(k, v)
            conn.endheaders()
            with body.open("rb") as f:
                f.seek(start_)
                left = length
                while left:
                    piece = f.read(min(left, MiB))
                    conn.send(piece)
                    left -= len(piece)
        else:
            conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}
    finally:
        conn.close()


def resumable(
    port: int, name: str, src: Path, chunk: int, source: str = "127.0.0.1"
) -> tuple[bool, float]:
    """One careful IETF upload of ``src`` in ``chunk`` parts; (ok, seconds)."""
    size = src.stat().st_size
    t0 = time.monotonic()
    hs = {"Upload-Complete": "?0", "Upload-Length": str(size)}
    status, got = send(port, "PUT", "/" + name, hs, b"", source)
    if status != 201:
        print(f"PUT {name}: {status}", file=sys.stderr)
        return False, 0.0
    loc = got["location"]
    offset = 0
    while offset < size:
        n = min(chunk, size - offset)
        last = offset + n == size
        hs = {
            "Upload-Offset": str(offset),
            "Upload-Complete": "?1" if last else "?0",
            "Content-Type": PARTIAL,
        }
        status, got = send(port, "PATCH", loc, hs, src, source, (offset, n))
        if status not in (200, 201, 204):
            print(f"PATCH {name} at {offset}: {status}", file=sys.stderr)
            return False, 0.0
        offset += n
    return True, time.monotonic() - t0


def temps(root: Path) -> int:
    return sum(n.startswith(TEMP) for _, _, names in os.walk(root) for n in names)


def chunked_vs_single(work: Path, size_mib: int, chunk_mib: int) -> None:
    root = work / "www1"
    root.mkdir()
    src = work / "src.bin"
    with src.open("wb") as f:
        for _ in range(size_mib):
            f.write(os.urandom(MiB))
    proc, port = start(root)
    try:
        t0 = time.monotonic()
        status, _ = send(port, "PUT", "/single.bin", {}, src)
        single = time.monotonic() - t0
        assert status == 201, status
        before = rss_mib(proc.pid)
        ok, chunked = resumable(port, "chunked.bin", src, chunk_mib * MiB)
        after = rss_mib(proc.pid)
        assert ok
        same = (root / "chunked.bin").stat().st_size == src.stat().st_size
        print(
            f"single PUT {size_mib} MiB: {size_mib / single:.0f} MiB/s; "
            f"resumable in {chunk_mib} MiB parts: {size_mib / chunked:.0f} MiB/s; "
            f"ratio {single / chunked:.2f} (target >= 0.8); "
            f"RSS {before:.0f} -> {after:.0f} MiB (growth {after - before:.0f}, target < 64); "
            f"complete {same}; temporaries left {temps(root)}"
        )
    finally:
        proc.terminate()
        proc.communicate(timeout=60)


def many(work: Path, uploads: int, clients: int, each_mib: int) -> None:
    root = work / "www2"
    root.mkdir()
    src = work / "each.bin"
    src.write_bytes(os.urandom(each_mib * MiB))
    share = max(1, -(-uploads // clients))
    proc, port = start(
        root,
        "--max-uploads",
        str(uploads),
        "--max-uploads-per-client",
        str(share),
    )
    errors: list[str] = []
    try:
        t0 = time.monotonic()

        def one(i: int) -> None:
            source = f"127.0.0.{2 + i % clients}"
            try:
                ok, _ = resumable(port, f"u{i}.bin", src, 2 * MiB, source)
            except OSError as exc:
                print(f"u{i}: {exc}", file=sys.stderr)
                ok = False
            if not ok:
                errors.append(f"u{i}")

        threads = [threading.Thread(target=one, args=(i,)) for i in range(uploads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        took = time.monotonic() - t0
        left = temps(root)
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    # Incomplete uploads, left to expire (a server with --upload-expiry 2).
    root = work / "www3"
    root.mkdir()
    proc, port = start(root, "--upload-expiry", "2")
    try:
        for i in range(10):
            hs = {"Upload-Complete": "?0", "Upload-Length": "100"}
            send(port, "PUT", f"/x{i}.bin", hs, b"partial")
        before = temps(root)
        time.sleep(4)
        print(
            f"{uploads} resumable uploads of {each_mib} MiB from {clients} clients: "
            f"{took:.1f} s, {uploads * each_mib / took:.0f} MiB/s, errors {len(errors)} "
            f"(target 0); temporaries left after completion {left} (target 0); "
            f"10 incomplete: {before} files, after expiry {temps(root)} (target 0)"
        )
    finally:
        proc.terminate()
        proc.communicate(timeout=60)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size-mib", type=int, default=1024)
    p.add_argument("--chunk-mib", type=int, default=8)
    p.add_argument("--uploads", type=int, default=100)
    p.add_argument("--clients", type=int, default=20)
    p.add_argument("--each-mib", type=int, default=10)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        work = Path(tmp)
        chunked_vs_single(work, args.size_mib, args.chunk_mib)
        many(work, args.uploads, args.clients, args.each_mib)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
