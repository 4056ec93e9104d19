"""An h2c "server" with no HTTP in it: the throughput ceiling of framing a file through user space.

``python -m bench h2floor`` serves h2load (``h2load -c 16 -m 1`` on the
other CPU, as the ``8m-h2`` workload runs it) from a process that does the
least an HTTP/2 server can do to send a file: it answers the preface and
SETTINGS, and for every request HEADERS frame sends a one-byte HEADERS
block (``:status 200``, HPACK index 8) and the 8 MiB file as DATA frames
of the peer's SETTINGS_MAX_FRAME_SIZE, read with one ``os.preadv`` per
``--piece`` bytes straight into a reused buffer between the frame heads
and written with one blocking ``sendall``, honouring the connection and
stream windows.  No request parsing, no HPACK, no validators, no event
loop: one thread per connection, blocking sockets.  The file goes through
user space, as it must for HTTP/2 (frames interleave with the body) and
for TLS, so each byte is copied twice by the kernel (page cache -> buffer,
buffer -> socket).

It prints h2load's MiB/s and this process's CPU seconds per second (user,
system) and CPU milliseconds per 8 MiB response: a figure for what *any*
server that copies bodies through user space can reach on this machine
with this load generator, against which ``8m-h2`` and ``8m-h1`` are read
(docs/performance.md).  A measurement tool only; it is not HTTP/2-complete
(it ignores PING, PRIORITY, RST_STREAM and trailers, and assumes END_HEADERS).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import struct
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.h2load import h2load_command, parse_h2load_output

FILE_SIZE = 8 << 20
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_HEAD = struct.Struct(">I B I")  # length << 8 | type, flags, stream id
_DATA, _HEADERS, _SETTINGS, _GOAWAY, _WINDOW_UPDATE = 0, 1, 4, 7, 8
_END_STREAM, _END_HEADERS, _ACK = 0x1, 0x4, 0x1


def _frame(ftype: int, flags: int, sid: int, payload: bytes = b"") -> bytes:
    return _HEAD.pack(len(payload) << 8 | ftype, flags, sid) + payload


class _Conn:
    """One client connection, served on its own thread."""

    def __init__(self, sock: socket.socket, fd: int, piece: int) -> None:
        self.sock = sock
        self.fd = fd
        self.piece = piece
        self.rbuf = bytearray()
        self.conn_window = 65535  # RFC 9113 section 6.9.2
        self.initial_window = 65535
        self.stream_windows: dict[int, int] = {}
        self.max_frame = 16384
        self.buf = bytearray(piece + (piece // 16384 + 1) * _HEAD.size)
        self.sent = 0

    def _recv_exact(self, n: int) -> bool:
        while len(self.rbuf) < n:
            got = self.sock.recv(65536)
            if not got:
                return False
            self.rbuf += got
        return True

    def _read_frame(self) -> tuple[int, int, int, bytes] | None:
        if not self._recv_exact(9):
            return None
        word, flags, sid = _HEAD.unpack_from(self.rbuf)
        length = word >> 8
        if not self._recv_exact(9 + length):
            return None
        payload = bytes(self.rbuf[9 : 9 + length])
        del self.rbuf[: 9 + length]
        return word & 0xFF, flags, sid & 0x7FFFFFFF, payload

    def _handle(self, frame: tuple[int, int, int, bytes]) -> int | None:
        """Process a control frame; the stream id of a request, if it was one."""
        ftype, flags, sid, payload = frame
        if ftype == _SETTINGS and not flags & _ACK:
            for i in range(0, len(payload) - 5, 6):
                key, value = struct.unpack_from(">HI", payload, i)
                if key == 0x4:  # SETTINGS_INITIAL_WINDOW_SIZE
                    delta = value - self.initial_window
                    self.initial_window = value
                    for s in self.stream_windows:
                        self.stream_windows[s] += delta
                elif key == 0x5:  # SETTINGS_MAX_FRAME_SIZE
                    self.max_frame = value
            self.sock.sendall(_frame(_SETTINGS, _ACK, 0))
        elif ftype == _WINDOW_UPDATE:
            inc = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
            if sid == 0:
                self.conn_window += inc
            elif sid in self.stream_windows:
                self.stream_windows[sid] += inc
        elif ftype == _HEADERS:
            return sid
        return None

    def serve(self) -> None:
        try:
            if not self._recv_exact(len(PREFACE)) or bytes(self.rbuf[:24]) != PREFACE:
                return
            del self.rbuf[:24]
            self.sock.sendall(_frame(_SETTINGS, 0, 0))
            while True:
                frame = self._read_frame()
                if frame is None or frame[0] == _GOAWAY:
                    return
                sid = self._handle(frame)
                if sid is not None:
                    self._respond(sid)
        except OSError:
            return  # the client went away at the end of its run

    def _respond(self, sid: int) -> None:
        self.stream_windows[sid] = self.initial_window
        self.sock.sendall(_frame(_HEADERS, _END_HEADERS, sid, b"\x88"))
        buf = self.buf
        view = memoryview(buf)
        off = 0
        while off < FILE_SIZE:
            n = min(self.piece, FILE_SIZE - off, self.conn_window, self.stream_windows[sid])
            if n <= 0:
                frame = self._read_frame()
                if frame is None:
                    raise OSError("closed")
                self._handle(frame)
                continue
            size = self.max_frame
            parts = []
            pos = 0
            for i in range(0, n, size):
                k = min(size, n - i)
                last = off + i + k == FILE_SIZE
                _HEAD.pack_into(buf, pos, k << 8 | _DATA, _END_STREAM if last else 0, sid)
                parts.append(view[pos + 9 : pos + 9 + k])
                pos += 9 + k
            got = os.preadv(self.fd, parts, off)
            del parts
            if got != n:
                raise OSError("short read")
            self.sock.sendall(view[:pos])
            off += n
            self.conn_window -= n
            self.stream_windows[sid] -= n
            self.sent += n
        view.release()
        del self.stream_windows[sid]


def once(path: Path, piece: int, connections: int, seconds: int, cpu: int | None) -> dict[str, Any]:
    """One h2load run against the frames-only server; the figures."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(connections)
    port = ls.getsockname()[1]
    fd = os.open(path, os.O_RDONLY)
    conns: list[_Conn] = []
    threads: list[threading.Thread] = []

    def accept() -> None:
        for _ in range(connections):
            try:
                sock, _ = ls.accept()
            except OSError:
                return
            c = _Conn(sock, fd, piece)
            conns.append(c)
            t = threading.Thread(target=c.serve, daemon=True)
            t.start()
            threads.append(t)

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    argv = h2load_command(
        [f"http://127.0.0.1:{port}/8m.bin"],
        connections=connections,
        streams=1,
        duration_s=seconds,
        cpu=cpu,
    )
    c0 = os.times()
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60)
    elapsed = time.perf_counter() - t0
    c1 = os.times()
    ls.close()
    for c in conns:
        c.sock.close()
    for t in threads:
        t.join(5)
    os.close(fd)
    result = parse_h2load_output(proc.stdout)
    user = (c1.user - c0.user) / elapsed
    system = (c1.system - c0.system) / elapsed
    responses = max(1, result.succeeded)
    return {
        "mib_s": result.bytes_data / max(result.duration_s, 1e-9) / 2**20,
        "rps": result.rps,
        "errors": result.error_count,
        "user": user,
        "sys": system,
        "cpu_ms_per_response": (c1.user - c0.user + c1.system - c0.system) * 1000 / responses,
    }


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=int, default=5)
    p.add_argument("-c", "--connections", type=int, default=16)
    p.add_argument("--piece", type=int, action="append", help="bytes per read+write (repeatable)")


def add_parser(sub: Any) -> None:
    add_arguments(
        sub.add_parser("h2floor", help="h2load against an h2c server with no HTTP in it (8 MiB)")
    )


def run(args: argparse.Namespace) -> int:
    if shutil.which("h2load") is None:
        print("h2floor: h2load not found (Debian nghttp2-client)")
        return 2
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    server_cpu, load_cpu = (cpus[0], cpus[1]) if len(cpus) >= 2 else (None, None)
    if server_cpu is not None:
        os.sched_setaffinity(0, {server_cpu})
    pieces = tuple(args.piece) if args.piece else (262144, 524288)
    trials: dict[int, list[dict[str, Any]]] = {p: [] for p in pieces}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "8m.bin"
        path.write_bytes(os.urandom(FILE_SIZE))
        for r in range(args.rounds):
            order = pieces[r % len(pieces) :] + pieces[: r % len(pieces)]
            for piece in order:
                trials[piece].append(once(path, piece, args.connections, args.seconds, load_cpu))
    print(
        f"h2load -c {args.connections} -m 1 -D {args.seconds} on CPU {load_cpu}, "
        f"frames-only server on CPU {server_cpu}; {args.rounds} rotated rounds, medians"
    )
    print("| piece | MiB/s | server user CPU/s | server system CPU/s | CPU ms per response |")
    print("|---:|---:|---:|---:|---:|")
    for piece in pieces:
        got = trials[piece]
        med = {k: statistics.median(t[k] for t in got) for k in got[0]}
        cells = [f"{piece >> 10} KiB", f"{med['mib_s']:,.0f}", f"{med['user']:.2f}"]
        cells += [f"{med['sys']:.2f}", f"{med['cpu_ms_per_response']:.2f}"]
        print("| " + " | ".join(cells) + " |")
    return 0
