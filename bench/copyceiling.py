"""The ceiling of moving a file to loopback sockets without HTTP: read+write vs sendfile.

An HTTP/2 server cannot hand a file to the kernel with ``sendfile``: DATA
frames interleave frame heads with the body, and over TLS the bytes are
encrypted in user space, so every body byte is read into memory (one copy,
page cache -> buffer) and written to the socket (a second copy, buffer ->
socket buffer).  HTTP/1.1 sends the same file with ``sendfile`` and no copy
into user space.  This tool measures both ways with *no* HTTP, framing,
event loop or per-request work at all: one process (pinned to the server
CPU) moves an 8 MiB file round robin to ``-c`` loopback connections, in
pieces of ``--piece`` bytes, either with ``os.preadv`` into one reused
buffer plus ``sendall`` or with ``os.sendfile``; a reader process (pinned to
the other CPU) drains the sockets.  It prints MiB/s and the sender's CPU
seconds per second (user, system): a sender at ~1.0 CPU is the bottleneck,
so its read+write figure is an upper bound for any server that copies the
body through user space on this machine, however little else it does.

    python -m bench copyceiling            # 3 rotated rounds x 4 s
    python -m bench copyceiling --rounds 1 --seconds 2 --piece 65536
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

FILE_SIZE = 8 << 20
PIECES = (65536, 131072, 262144, 524288)


def _pin(cpu: int | None) -> None:
    if cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})


def reader(port: int, connections: int) -> int:
    """Open ``connections`` sockets to ``port``, drain each with its own ``dd``
    (C, 1 MiB reads, so the reader is not the bottleneck); bytes read."""
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(connections)]
    procs = [
        subprocess.Popen(
            ["dd", "bs=1M", "of=/dev/null"],
            stdin=s.fileno(),
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "LC_ALL": "C"},
        )
        for s in socks
    ]
    for s in socks:
        s.close()  # each dd holds its own descriptor
    total = 0
    for proc in procs:
        _, err = proc.communicate()
        # "<n> bytes (...) copied, ..." is dd's last line
        for line in err.splitlines():
            if " bytes" in line and "copied" in line:
                total += int(line.split()[0])
    return total


def sender(
    path: Path, mode: str, piece: int, connections: int, seconds: float, reader_cpu: int | None
) -> dict[str, float]:
    """Move ``path`` to ``connections`` loopback sockets for ``seconds``; the figures."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(connections)
    port = ls.getsockname()[1]
    argv = [
        sys.executable,
        "-m",
        "bench.copyceiling",
        "--reader",
        str(port),
        "-c",
        str(connections),
    ]
    if reader_cpu is not None:
        argv = ["taskset", "-c", str(reader_cpu), *argv]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        conns = [ls.accept()[0] for _ in range(connections)]
    finally:
        ls.close()
    fd = os.open(path, os.O_RDONLY)
    buf = memoryview(bytearray(piece))
    offsets = [0] * connections
    sent = 0
    try:
        t0 = time.perf_counter()
        c0 = os.times()
        while time.perf_counter() - t0 < seconds:
            for i, conn in enumerate(conns):
                off = offsets[i]
                n = min(piece, FILE_SIZE - off)
                if mode == "sendfile":
                    k = os.sendfile(conn.fileno(), fd, off, n)
                else:
                    k = os.preadv(fd, [buf[:n]], off)
                    conn.sendall(buf[:k])
                sent += k
                offsets[i] = (off + k) % FILE_SIZE
        elapsed = time.perf_counter() - t0
        c1 = os.times()
    finally:
        os.close(fd)
        for conn in conns:
            conn.close()
    out, _ = proc.communicate(timeout=60)
    received = int(out.strip() or 0)
    if received != sent:
        raise RuntimeError(f"reader got {received} bytes of {sent}")
    return {
        "mib_s": sent / elapsed / 2**20,
        "user": (c1.user - c0.user) / elapsed,
        "sys": (c1.system - c0.system) / elapsed,
    }


def measure(
    rounds: int,
    seconds: float,
    connections: int,
    pieces: tuple[int, ...],
    cpus: tuple[int | None, int | None],
) -> list[tuple[str, int, dict[str, float]]]:
    """Median figures per (mode, piece), trials rotated over ``rounds``."""
    configs = [("sendfile", 524288)] + [("read+write", p) for p in pieces]
    trials: dict[tuple[str, int], list[dict[str, float]]] = {c: [] for c in configs}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "8m.bin"
        path.write_bytes(os.urandom(FILE_SIZE))
        _pin(cpus[0])
        for r in range(rounds):
            for mode, piece in configs[r % len(configs) :] + configs[: r % len(configs)]:
                trials[(mode, piece)].append(
                    sender(path, mode, piece, connections, seconds, cpus[1])
                )
    result = []
    for mode, piece in configs:
        got = trials[(mode, piece)]
        med = {k: statistics.median(t[k] for t in got) for k in ("mib_s", "user", "sys")}
        result.append((mode, piece, med))
    return result


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("-c", "--connections", type=int, default=16)
    p.add_argument("--piece", type=int, action="append", help="read+write piece size (repeatable)")
    p.add_argument("--reader", type=int, help=argparse.SUPPRESS)
    p.add_argument("--reader-cpu", type=int, help=argparse.SUPPRESS)


def add_parser(sub: Any) -> None:
    add_arguments(
        sub.add_parser(
            "copyceiling", help="file -> loopback sockets with no HTTP: read+write vs sendfile"
        )
    )


def run(args: argparse.Namespace) -> int:
    if args.reader is not None:
        _pin(args.reader_cpu)
        print(reader(args.reader, args.connections))
        return 0
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    pinned: tuple[int | None, int | None] = (cpus[0], cpus[1]) if len(cpus) >= 2 else (None, None)
    pieces = tuple(args.piece) if args.piece else PIECES
    rows = measure(args.rounds, args.seconds, args.connections, pieces, pinned)
    print(
        f"{args.connections} connections, {args.rounds} rotated rounds x {args.seconds:g} s, "
        f"sender on CPU {pinned[0]}, reader on CPU {pinned[1]}; medians"
    )
    print("| mode | piece | MiB/s | sender user CPU/s | sender system CPU/s |")
    print("|---|---:|---:|---:|---:|")
    for mode, piece, med in rows:
        cells = [mode, f"{piece >> 10} KiB", f"{med['mib_s']:,.0f}"]
        cells += [f"{med['user']:.2f}", f"{med['sys']:.2f}"]
        print("| " + " | ".join(cells) + " |")
    return 0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    add_arguments(p)
    raise SystemExit(run(p.parse_args()))


if __name__ == "__main__":
    main()
