"""A fixed HTTP/2 request loop in one process: cost per stream of serverio's h2.

``python -m bench h2profile [-n 4000] [-m 8] [--size 1024]`` opens one h2c
connection over a ``socket.socketpair()`` to a serverio
:class:`~serverio.ConnectionTask` (which detects the preface and hands over
to the HTTP/2 connection) and runs N GET streams, ``-m`` at a time, as
``h2load -m`` does; it prints microseconds per stream.

``--cprofile`` runs the loop under cProfile and prints the top functions;
``--callgrind N1,N2`` runs it under ``valgrind --tool=callgrind`` with N1 and
N2 streams and prints ``(Ir[N2] - Ir[N1]) / (N2 - N1)``, the instructions of
one warm stream (start-up, imports and the file-settling sleep cancel out),
for this checkout and for each ``--commit REV`` (that commit's serverio,
driven by this same client).

The client is deliberately thin so that the figures are the server's: its
request header blocks are HPACK-encoded once (the second and later requests
are all indexed, as h2load's are), and it only splits the server's output
into frames, counts DATA bytes and END_STREAM flags, acknowledges SETTINGS,
and returns connection-window credit.  It announces what h2load announces:
a 2^30 - 1 stream window and connection window, 100 concurrent streams.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_BIG_WINDOW = 2**30 - 1
_DATA, _HEADERS, _SETTINGS, _PING, _GOAWAY, _RST = 0, 1, 4, 6, 7, 3
_END_STREAM, _END_HEADERS, _ACK = 0x1, 0x4, 0x1


def _frame(kind: int, flags: int, sid: int, payload: bytes) -> bytes:
    return (
        struct.pack(">I", len(payload))[1:]
        + bytes((kind, flags))
        + struct.pack(">I", sid)
        + payload
    )


def _client_start() -> bytes:
    settings = struct.pack(">HI", 0x3, 100) + struct.pack(">HI", 0x4, _BIG_WINDOW)
    settings += struct.pack(">HI", 0x2, 0)  # ENABLE_PUSH off
    update = struct.pack(">I", _BIG_WINDOW - 65535)
    return _PREFACE + _frame(_SETTINGS, 0, 0, settings) + _frame(8, 0, 0, update)


def _header_blocks(path: str) -> tuple[bytes, bytes]:
    import hpack

    enc = hpack.Encoder()
    fields = [
        (b":method", b"GET"),
        (b":scheme", b"http"),
        (b":authority", b"127.0.0.1:8000"),
        (b":path", path.encode()),
        (b"user-agent", b"h2load nghttp2/1.52.0"),
    ]
    return enc.encode(fields), enc.encode(fields)


async def stream_loop(n: int, m: int, size: int, root: Path, path: str = "/f.bin") -> float:
    """N GET streams of ``path`` (``size`` bytes under ``root``), ``m`` at a
    time, on one h2c connection over a socketpair to a serverio
    ConnectionTask; microseconds per stream.  Raises SystemExit if the
    server closes, resets or sends other than ``n * size`` body bytes."""
    import trio

    from serverio import Config, ConnectionTask, Server

    a, b = socket.socketpair()
    stream = trio.SocketStream(trio.socket.from_stdlib_socket(b))
    client = trio.socket.from_stdlib_socket(a)
    cfg = Config.of(directory=str(root), access_log="off", max_requests=10**9).validate()
    srv = Server(cfg)
    first, later = _header_blocks(path)
    buf = bytearray()
    received = 0
    conn_taken = 0
    sid = 1
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ConnectionTask(srv.env, stream).run)
        await client.send(_client_start())
        start = time.perf_counter()
        done = 0
        while done < n:
            batch = min(m, n - done)
            out = bytearray()
            for _ in range(batch):
                block = first if sid == 1 else later
                out += _frame(_HEADERS, _END_STREAM | _END_HEADERS, sid, block)
                sid += 2
            await client.send(out)
            ended = 0
            while ended < batch:
                data = await client.recv(262144)
                if not data:
                    raise SystemExit("h2profile: the server closed the connection")
                buf += data
                pos = 0
                reply = bytearray()
                while len(buf) - pos >= 9:
                    length = int.from_bytes(buf[pos : pos + 3], "big")
                    if len(buf) - pos < 9 + length:
                        break
                    kind = buf[pos + 3]
                    flags = buf[pos + 4]
                    if kind == _DATA:
                        received += length
                        conn_taken += length
                    elif kind == _SETTINGS and not flags & _ACK:
                        reply += _frame(_SETTINGS, _ACK, 0, b"")
                    elif kind in (_GOAWAY, _RST):
                        raise SystemExit(f"h2profile: the server sent frame type {kind}")
                    if flags & _END_STREAM and kind in (_DATA, _HEADERS):
                        ended += 1
                    pos += 9 + length
                del buf[:pos]
                if conn_taken > _BIG_WINDOW // 2:
                    reply += _frame(8, 0, 0, struct.pack(">I", conn_taken))
                    conn_taken = 0
                if reply:
                    await client.send(reply)
            done += batch
        elapsed = time.perf_counter() - start
        nursery.cancel_scope.cancel()
    client.close()
    if received != n * size:
        raise SystemExit(f"h2profile: {received} body bytes, expected {n * size}")
    return elapsed / n * 1e6


def _fixture(tmp: str, size: int) -> Path:
    root = Path(tmp)
    (root / "f.bin").write_bytes((bytes(range(256)) * (size // 256 + 1))[:size])
    # serverio caches a file only once it has been unchanged for 2 s (the
    # "racy" rule of serverio.fs.filecache); ctime cannot be back-dated.
    time.sleep(2.1)
    return root


def child(n: int, m: int, size: int, profile: bool) -> None:
    import trio

    with tempfile.TemporaryDirectory() as tmp:
        root = _fixture(tmp, size)
        if profile:
            import cProfile
            import pstats

            trio.run(stream_loop, 200, m, size, root)  # warm-up, outside the profile
            prof = cProfile.Profile()
            prof.enable()
            us = trio.run(stream_loop, n, m, size, root)
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(35)
        else:
            us = trio.run(stream_loop, n, m, size, root)
    print(f"h2: {us:.1f} us per stream (client and server, one process; m={m}, {size} B)")


def _total_ir(out_file: Path) -> int:
    for line in out_file.read_bytes().splitlines():
        if line.startswith((b"summary:", b"totals:")):
            return int(line.split()[1])
    raise SystemExit(f"h2profile: no summary line in {out_file.name}")


def _measure(tree: Path, n: int, m: int, size: int, workdir: Path, label: str) -> int:
    out = workdir / f"cg.{label}.{n}"
    argv = [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={out}",
        sys.executable,
        str(HERE / "h2profile.py"),
        "--child",
        "-n",
        str(n),
        "-m",
        str(m),
        "--size",
        str(size),
    ]
    # The script runs from its own directory (no package of that name there):
    # PYTHONPATH puts the measured tree's serverio first.
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
    proc = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise SystemExit(f"h2profile: {label} n={n}: exit {proc.returncode}: {tail[0][:200]}")
    return _total_ir(out)


def callgrind(
    ns: tuple[int, int], m: int, size: int, revs: list[str], extra: list[Path] | None = None
) -> int:
    if shutil.which("valgrind") is None:
        print("h2profile: valgrind not found (apt-get install -y valgrind)", file=sys.stderr)
        return 2
    sys.path.insert(0, str(REPO))
    from bench import commits

    trees: list[tuple[str, Path]] = [("this checkout", REPO)]
    for rev in revs:
        commit = commits.resolve(rev)
        trees.append((f"serverio@{commits.short(commit)}", commits.checkout(commit)))
    for path in extra or []:
        trees.append((str(path), path.resolve()))
    rows = []
    with tempfile.TemporaryDirectory(prefix="serverio-h2cg-") as tmp:
        for label, tree in trees:
            print(f"h2profile: callgrind {label} n={ns}", file=sys.stderr)
            tag = "".join(c if c.isalnum() else "_" for c in label)
            lo, hi = (_measure(tree, k, m, size, Path(tmp), tag) for k in ns)
            rows.append((label, (hi - lo) / (ns[1] - ns[0])))
    first = rows[0][1]
    print(f"| serverio | Ir/stream (h2, m={m}, {size} B, n={ns[0]}..{ns[1]}) | vs this checkout |")
    print("|---|---:|---:|")
    for label, ir in rows:
        print(f"| {label} | {ir:,.0f} | {ir / first - 1:+.1%} |")
    return 0


def _ns(value: str) -> tuple[int, int]:
    try:
        lo, hi = (int(v) for v in value.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError("expected N1,N2, e.g. 400,1200") from None
    if not 0 < lo < hi:
        raise argparse.ArgumentTypeError("expected N1,N2 with 0 < N1 < N2")
    return lo, hi


def add_arguments(p: Any) -> None:
    p.add_argument("-n", type=int, default=4000, help="streams (default 4000)")
    p.add_argument("-m", type=int, default=8, help="streams in flight (default 8, as h2load -m 8)")
    p.add_argument("--size", type=int, default=1024, help="file size in bytes (default 1024)")
    p.add_argument("--cprofile", action="store_true", help="print a cProfile of the loop")
    p.add_argument(
        "--callgrind", type=_ns, metavar="N1,N2", help="instructions per stream under callgrind"
    )
    p.add_argument(
        "--commit",
        action="append",
        default=[],
        metavar="REV",
        help="with --callgrind: also measure the serverio of commit REV (repeatable)",
    )
    p.add_argument(
        "--tree",
        action="append",
        default=[],
        type=Path,
        metavar="DIR",
        help="with --callgrind: also measure the serverio in source tree DIR (repeatable)",
    )


def add_parser(sub: Any) -> None:
    add_arguments(sub.add_parser("h2profile", help="cost per HTTP/2 stream (cProfile, callgrind)"))


def run(args: argparse.Namespace) -> int:
    if args.callgrind:
        return callgrind(args.callgrind, args.m, args.size, args.commit, args.tree)
    child(args.n, args.m, args.size, args.cprofile)
    return 0


def main() -> None:
    # Run as a script (the callgrind child): its own directory is not a
    # package root, the measured tree on PYTHONPATH is.
    if sys.path and Path(sys.path[0]).resolve() == HERE:
        sys.path.pop(0)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    add_arguments(p)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    raise SystemExit(run(args))


if __name__ == "__main__":
    main()
