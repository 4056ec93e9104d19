"""One connection over a socketpair, in one process: serverio vs the bare loop.

``python -m bench.pair --server serverio|bare -n N`` (from the repository root) sends N sequential
``GET /1k.bin`` requests over a ``socket.socketpair()`` to either a
``serverio`` ConnectionTask or the bare trio+h11 handler
(``bench/baselines/bare_trio_h11.py``), and prints microseconds per request
(client and server together).  No TCP stack, no second process: the point is
to count the *user-space* work per request deterministically, e.g.::

    for n in 1000 3000; do
      valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.$n \\
        python -m bench.pair --server serverio -n $n
    done
    # instructions per request = (Ir[3000] - Ir[1000]) / 2000

The client's share is identical for both servers, so the difference between
the two per-request figures is the difference between the servers.
"""

from __future__ import annotations

import argparse
import socket
import tempfile
import time
from pathlib import Path

import trio

from bench.baselines.bare_trio_h11 import handle
from serverio import Config, ConnectionTask, Server

REQUEST = b"GET /1k.bin HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nUser-Agent: wrk\r\n\r\n"


async def run(server: str, n: int, root: Path) -> float:
    a, b = socket.socketpair()
    stream = trio.SocketStream(trio.socket.from_stdlib_socket(b))
    client = trio.socket.from_stdlib_socket(a)
    body = (root / "1k.bin").read_bytes()
    srv = Server(Config(directory=str(root), access_log="off", max_requests=10**9).validate())
    async with trio.open_nursery() as nursery:
        if server == "serverio":
            nursery.start_soon(ConnectionTask(srv.env, stream).run)
            expect = 1200  # head + body, at least
        else:
            nursery.start_soon(handle, stream, body)
            expect = 1024 + 40
        start = time.perf_counter()
        for _ in range(n):
            await client.send(REQUEST)
            got = 0
            while got < expect:
                got += len(await client.recv(65536))
        elapsed = time.perf_counter() - start
        nursery.cancel_scope.cancel()
    client.close()
    return elapsed / n * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--server", choices=("serverio", "bare"), default="serverio")
    p.add_argument("-n", type=int, default=20000)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "1k.bin").write_bytes(bytes(range(256)) * 4)
        # serverio caches a file only once it has been unchanged for 2 s
        # (the "racy" rule of serverio.fs.filecache), as a served site's files
        # are; ctime cannot be back-dated, so wait that out.
        time.sleep(2.1)
        us = trio.run(run, args.server, args.n, root)
    print(f"{args.server}: {us:.1f} us per request (client and server, one process)")


if __name__ == "__main__":
    main()
