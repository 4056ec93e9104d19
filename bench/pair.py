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

``--assets`` (serverio only) requests the many-assets files of
``bench/fixtures.py`` round robin with the workload's Accept-Encoding
(``br;q=1, gzip;q=0.8``) instead: the warm path of a negotiated response
from a precompressed sidecar.  Use request counts that are multiples of 20.
``--variant plain`` asks for the same files in the directory without
sidecars (the answer is the compression cache's br), ``--variant
identity`` for those with ``Accept-Encoding: identity``: the pair the
negotiated-path gate compares (docs/performance.md).

``--churn C`` (serverio only) measures the churn workload instead: a whole
:class:`~serverio.Server` on a loopback TCP listener (port 0) and, in the
same process, C client tasks that each open a connection, send one
``GET /1k.bin`` with ``Connection: close`` and read until EOF, N
connections in all: the per-connection work (accept, socket wrapping,
task start, one request, close) on top of the request.  trio's
batch-order coin is seeded so that two runs schedule alike.

``--proxy`` measures a proxied ``GET /1k.bin`` instead: serverio with
``--proxy /=UPSTREAM`` on the socketpair (or, with ``--server
h11-proxy-floor``, the floor of bench/baselines/h11_proxy_floor.py), the
upstream the bare loop above serving the same file in a process of its
own (valgrind does not follow it, so its work is not counted).

``--files K`` (serverio only) measures the per-file cost instead: K
distinct 1 KiB files (``fNNNNN.bin``) requested round robin with a
warm-file cache of :data:`FILES_CACHE_BYTES`, which holds none of them,
so that every request misses the cached bytes while whatever serverio
keeps per file apart from the bytes stays warm: the "cold bytes, warm
metadata" path of the many-files workload (issue 47).  (A cache that
holds a few no longer misses on every request of a round robin: a full
cache admits a file on its second miss, so the files it holds stay.)
Use request counts that are multiples of K.

``--h2`` (serverio only) measures a warm 1 KiB HTTP/2 stream instead: one
h2c connection (prior knowledge) over the socketpair, N ``GET /1k.bin``
streams on it, ``--streams M`` at a time (default 1: each stream is
answered before the next is sent, as the HTTP/1.1 requests are).  The
client is bench/h2profile.py's (``stream_loop``): header blocks HPACK-encoded
once, so every later request is indexed as h2load's are; it only splits
frames, counts DATA bytes and END_STREAM flags, acknowledges SETTINGS and
returns connection-window credit.

``--tls`` measures the warm 1 KiB GET over TLS instead (HTTP/1.1, a
throwaway P-256 certificate made with openssl, TLS 1.3): serverio's
ConnectionTask on the stream its listener makes
(:class:`serverio.net.tlsstream.TLSStream`, or ``trio.SSLStream`` for a
commit before it; :func:`serverio.net.tls.make_ssl_context`), or with ``--server
tls-floor`` the floor of the ``1k-tls`` workload
(``bench/baselines/tls_floor.py``: one canned response per request head
over ``trio.SSLStream``).  The client's TLS (a ``trio.SSLStream``
too) is counted for both, so the difference of the two figures is the
difference of the servers (issue 47's TLS target is a ratio to that
floor: compare its wall-clock figures in the harness).

In every mode the wall clock (``time.time()``) stands still once the file
has settled (:func:`freeze_wall_clock`): the once-a-second work serverio
does (a new Date field, the memoised response per file and second, HPACK's
remembered blocks) is then done once per run instead of once per valgrind
second, whose request count depends on how loaded the machine is.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import trio

from bench.baselines.bare_trio_h11 import handle
from serverio import Config, ConnectionTask, Server

REQUEST = b"GET /1k.bin HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nUser-Agent: wrk\r\n\r\n"
CLOSE_REQUEST = (
    b"GET /1k.bin HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nUser-Agent: wrk\r\nConnection: close\r\n\r\n"
)


def _asset_requests(variant: str = "sidecars") -> list[bytes]:
    """The 20 asset requests of a variant: ``sidecars`` (the precompressed
    directory, the workload's Accept-Encoding), ``plain`` (the directory
    without sidecars, the same Accept-Encoding: a cached on-the-fly br
    answer) or ``identity`` (that directory, ``Accept-Encoding: identity``)."""
    # Imported here: the 1 KiB measurement keeps the modules (and the
    # heap the garbage collector walks) it always had.
    from bench import fixtures
    from bench.workloads import ASSETS_ACCEPT_ENCODING

    paths = fixtures.many_asset_paths() if variant == "sidecars" else fixtures.many_plain_paths()
    accept = "identity" if variant == "identity" else ASSETS_ACCEPT_ENCODING
    return [
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nUser-Agent: wrk\r\n"
        f"Accept-Encoding: {accept}\r\n\r\n".encode()
        for path in paths
    ]


async def read_response(client: trio.socket.SocketType) -> bytes:
    """One whole response: its head (returned), then Content-Length bytes
    of body (none without the field: a 204)."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += await client.recv(1 << 20)
    head, _, got = buf.partition(b"\r\n\r\n")
    _, found, rest = head.lower().partition(b"\r\ncontent-length: ")
    length = int(rest.split(b"\r\n", 1)[0]) if found else 0
    received = len(got)
    while received < length:
        received += len(await client.recv(1 << 20))
    return head


@asynccontextmanager
async def connected(cfg: Config) -> AsyncIterator[trio.socket.SocketType]:
    """A serverio ConnectionTask of ``cfg`` on one end of a socketpair, in
    this trio run, and the other end (the client's socket).

    The handler's job nursery runs for the block: on-the-fly compression
    (the first request of each file in the ``plain`` assets variant) and
    the other cache jobs run there.  Leaving the block cancels the
    connection task and closes the client's socket.
    """
    a, b = socket.socketpair()
    stream = trio.SocketStream(trio.socket.from_stdlib_socket(b))
    client = trio.socket.from_stdlib_socket(a)
    srv = Server(cfg.validate())
    try:
        async with srv.handler.running(), trio.open_nursery() as nursery:
            nursery.start_soon(ConnectionTask(srv.env, stream).run)
            yield client
            nursery.cancel_scope.cancel()
    finally:
        client.close()


def seed_scheduler() -> None:
    """Seed trio's batch-order coin: trio reverses each scheduling batch
    at random, so tasks runnable together (reader, writer, stream or
    client tasks) run in an order, and the work counted, that a fixed
    seed makes repeat from run to run."""
    trio_run = getattr(trio._core, "_run", None)
    if trio_run is not None and hasattr(trio_run, "_r"):
        trio_run._r.seed(0)


async def run_assets(n: int, root: Path, variant: str = "sidecars") -> float:
    requests = _asset_requests(variant)
    cfg = Config.of(directory=str(root), access_log="off", max_requests=10**9)
    async with connected(cfg) as client:
        start = time.perf_counter()
        for i in range(n):
            await client.send(requests[i % len(requests)])
            await read_response(client)
        elapsed = time.perf_counter() - start
    return elapsed / n * 1e6


async def run_churn(n: int, clients: int, root: Path) -> float:
    """N connections of one request each (Connection: close), ``clients`` at a time."""
    seed_scheduler()
    cfg = Config.of(
        directory=str(root), host="127.0.0.1", port=0, access_log="off", max_requests=10**9
    )
    srv = Server(cfg.validate())
    left = n
    bad = 0

    async def client(address: tuple[str, int]) -> None:
        nonlocal left, bad
        while left > 0:
            left -= 1
            sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            with sock:
                await sock.connect(address)
                await sock.send(CLOSE_REQUEST)
                got = b""
                while chunk := await sock.recv(65536):
                    got += chunk
            if not got.startswith(b"HTTP/1.1 200 ") or len(got) < 1024:
                bad += 1

    async with trio.open_nursery() as nursery:
        await nursery.start(srv.serve)
        address = srv.addresses()[0]
        start = time.perf_counter()
        async with trio.open_nursery() as clients_nursery:
            for _ in range(clients):
                clients_nursery.start_soon(client, address)
        elapsed = time.perf_counter() - start
        srv.shutdown()
    if bad:
        raise SystemExit(f"churn: {bad} of {n} responses were not a whole 200")
    return elapsed / n * 1e6


async def run_h2(n: int, streams: int, root: Path) -> float:
    """N warm ``GET /1k.bin`` streams on one h2c connection, ``streams`` at a time."""
    # Imported here, as the assets requests are: the HTTP/1.1 measurement
    # keeps the modules it always had.
    from bench.h2profile import stream_loop

    # As for churn: the reader, writer and stream tasks can be runnable in
    # one batch.
    seed_scheduler()
    size = (root / "1k.bin").stat().st_size
    return await stream_loop(n, streams, size, root, "/1k.bin")


async def run(server: str, n: int, root: Path, upstream: str | None = None) -> float:
    a, b = socket.socketpair()
    stream = trio.SocketStream(trio.socket.from_stdlib_socket(b))
    client = trio.socket.from_stdlib_socket(a)
    body = (root / "1k.bin").read_bytes()
    proxy = (f"/={upstream}",) if upstream else ()
    cfg = Config.of(directory=str(root), access_log="off", max_requests=10**9, proxy=proxy)
    srv = Server(cfg.validate())
    async with trio.open_nursery() as nursery:
        if server == "serverio":
            nursery.start_soon(ConnectionTask(srv.env, stream).run)
            # head + body, at least (a proxied head is shorter: no ETag,
            # Last-Modified or Accept-Ranges of serverio's own)
            expect = 1100 if upstream else 1200
        elif server == "h11-proxy-floor":
            from bench.baselines.h11_proxy_floor import proxy as floor

            assert upstream is not None
            host, _, port = upstream.removeprefix("http://").rpartition(":")
            nursery.start_soon(floor, (host, int(port)), stream)
            expect = 1024 + 60  # the upstream's head, its hop-by-hop fields out, Via in
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
    if srv.services.proxy is not None:
        srv.services.proxy.close_idle()  # the pooled upstream connection
    return elapsed / n * 1e6


async def run_tls(server: str, n: int, root: Path, cert: Path, key: Path) -> float:
    """``n`` warm GETs over TLS on one connection (see the module doc)."""
    import ssl

    from bench.baselines.tls_floor import answer, canned, context
    from serverio.net.tls import make_ssl_context

    a, b = socket.socketpair()
    raw = trio.SocketStream(trio.socket.from_stdlib_socket(b))
    cfg = Config.of(
        directory=str(root),
        access_log="off",
        max_requests=10**9,
        certfile=str(cert),
        keyfile=str(key),
        fs_workers=0,
    )
    client_ctx = ssl.create_default_context()
    client_ctx.check_hostname = False
    client_ctx.verify_mode = ssl.CERT_NONE
    client = trio.SSLStream(
        trio.SocketStream(trio.socket.from_stdlib_socket(a)), client_ctx, server_hostname="x"
    )
    async with trio.open_nursery() as nursery:
        if server == "serverio":
            srv = Server(cfg.validate())
            ctx = make_ssl_context(srv.config)
            assert ctx is not None
            stream: trio.abc.Stream
            try:
                from serverio.net.tlsstream import TLSStream
            except ImportError:  # a commit before it: trio's stream, as its listener made it
                stream = trio.SSLStream(raw, ctx, server_side=True, https_compatible=True)
            else:
                stream = TLSStream(raw, ctx)
            nursery.start_soon(ConnectionTask(srv.env, stream, "127.0.0.1", http2=False).run)
            expect = 1200
        else:
            response = canned((root / "1k.bin").read_bytes())
            stream = trio.SSLStream(raw, context(str(cert), str(key)), server_side=True)
            nursery.start_soon(answer, response, stream)
            expect = 1024 + 40
        await client.do_handshake()
        # One checked answer first: the status, and the file's bytes last.
        body, got_bytes = (root / "1k.bin").read_bytes(), b""
        await client.send_all(REQUEST)
        while len(got_bytes) < expect:
            got_bytes += await client.receive_some(65536)
        if not got_bytes.startswith(b"HTTP/1.1 200 ") or not got_bytes.endswith(body):
            raise SystemExit(f"pair --tls: {server} answered {got_bytes[:40]!r}")
        start = time.perf_counter()
        for _ in range(n):
            await client.send_all(REQUEST)
            got = 0
            while got < expect:
                got += len(await client.receive_some(65536))
        elapsed = time.perf_counter() - start
        nursery.cancel_scope.cancel()
    raw.socket.close()
    client.transport_stream.socket.close()
    return elapsed / n * 1e6


# --files: a warm-file cache that holds no file of 1 KiB (an entry costs
# its bytes plus 512), but is on, so that the metadata cache is too.
FILES_CACHE_BYTES = 1024


async def run_files(n: int, root: Path, count: int, meta_entries: int | None = None) -> float:
    """N GETs of ``count`` distinct 1 KiB files round robin (``--files``);
    ``meta_entries``: ``--file-meta-entries`` (None: serverio's default)."""
    requests = [
        f"GET /f{i:05d}.bin HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nUser-Agent: wrk\r\n\r\n".encode()
        for i in range(count)
    ]
    cfg = Config.of(
        directory=str(root),
        access_log="off",
        max_requests=10**9,
        file_cache_size=FILES_CACHE_BYTES,
        **({} if meta_entries is None else {"file_meta_entries": meta_entries}),
    )
    async with connected(cfg) as client:
        for request in requests:  # every file seen once: the per-file state is warm
            await client.send(request)
            await read_response(client)
        start = time.perf_counter()
        for i in range(n):
            await client.send(requests[i % count])
            head = await read_response(client)
            assert head.startswith(b"HTTP/1.1 200"), head
        elapsed = time.perf_counter() - start
    return elapsed / n * 1e6


LOGIN_VARIANTS = ("anonymous", "cookie", "cookie-public")


async def run_login(n: int, root: Path, variant: str) -> float:
    """A warm 1 KiB GET on a server with users (an ``[[auth]]`` rule over
    ``/private/**``, the sign-in page, sessions): ``anonymous``, the public
    file without a cookie; ``cookie``, the protected copy with a valid
    session cookie (what a signed-in browser sends); ``cookie-public``,
    the public file with that cookie."""
    from serverio.signing import Signer
    from serverio.site.passwords import hash_password
    from serverio.site.principal import password_tag

    with tempfile.TemporaryDirectory() as etc:
        users, secret = Path(etc) / "users", Path(etc) / "secret"
        stored = hash_password("pw", 1000)
        users.write_text(f"alice:{stored}\n")
        secret.write_bytes(b"k" * 32)
        token = Signer(b"k" * 32).sign("session", ("alice", password_tag(stored)), 2**40)
        path = "/private/1k.bin" if variant == "cookie" else "/1k.bin"
        cookie = f"Cookie: serverio-session={token}\r\n" if variant != "anonymous" else ""
        request = (
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nUser-Agent: wrk\r\n{cookie}\r\n"
        ).encode()
        cfg = Config.of(
            directory=str(root),
            access_log="off",
            max_requests=10**9,
            auth=(("/private/**", str(users)),),
            secret_file=str(secret),
        )
        async with connected(cfg) as client:
            start = time.perf_counter()
            for _ in range(n):
                await client.send(request)
                head = await read_response(client)
                assert head.startswith(b"HTTP/1.1 200"), head
            elapsed = time.perf_counter() - start
    return elapsed / n * 1e6


@contextmanager
def bare_upstream(root: Path) -> Iterator[str]:
    """The bare trio+h11 loop serving ``root/1k.bin`` in a process of its
    own (valgrind does not follow it: its work is not counted); its URL."""
    script = Path(__file__).resolve().parent / "baselines" / "bare_trio_h11.py"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, str(script), str(root / "1k.bin"), str(port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        proc.stdout.readline()  # "Serving ... at http://127.0.0.1:PORT/": it listens
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def freeze_wall_clock() -> float:
    """Make ``time.time()`` return this instant from now on (this process only).

    serverio reads the wall clock per request (the Date field, the memoised
    response per file and Date second, HPACK's remembered blocks); under
    valgrind a second holds only tens of requests, so the once-a-second work
    would be spread over few of them, by how fast the loaded machine runs
    valgrind.  Two ``--h2`` runs of the same code then counted 1,061,222 and
    1,071,721 instructions per stream (1.0% apart); frozen, 1,050,866 and
    1,050,130 (0.07%).  With one
    second for the whole run that work is done once, as it is amortised
    over thousands of requests at real speed.  trio's clock (deadlines) is
    ``perf_counter``, not this."""
    frozen = time.time()
    time.time = lambda: frozen
    return frozen


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--server", choices=("serverio", "bare", "tls-floor", "h11-proxy-floor"), default="serverio"
    )
    p.add_argument(
        "--tls", action="store_true", help="HTTP/1.1 over TLS (serverio, or --server tls-floor)"
    )
    p.add_argument("-n", type=int, default=20000)
    p.add_argument("--assets", action="store_true", help="many assets, negotiated (serverio)")
    p.add_argument(
        "--variant",
        choices=("sidecars", "plain", "identity"),
        default="sidecars",
        help="with --assets: precompressed sidecars (default), none (cached on-the-fly br), "
        "or none asked with Accept-Encoding: identity",
    )
    p.add_argument(
        "--churn",
        type=int,
        default=0,
        metavar="C",
        help="one request per TCP connection, C clients at once (serverio)",
    )
    p.add_argument("--h2", action="store_true", help="HTTP/2 streams on one h2c connection")
    p.add_argument(
        "--files",
        type=int,
        default=0,
        metavar="K",
        help="K distinct 1 KiB files round robin, more than the warm-file cache holds (serverio)",
    )
    p.add_argument(
        "--meta-entries",
        type=int,
        default=None,
        metavar="N",
        help="with --files: serverio's --file-meta-entries (default: its default; 0: off)",
    )
    p.add_argument(
        "--login",
        choices=LOGIN_VARIANTS,
        default="",
        help="a server with users: the public file anonymously, the protected one with a "
        "session cookie, or the public one with the cookie",
    )
    p.add_argument(
        "--proxy", action="store_true", help="serverio --proxy /=UPSTREAM (a bare upstream)"
    )
    p.add_argument(
        "--streams",
        type=int,
        default=1,
        metavar="M",
        help="with --h2: streams in flight at a time (default 1)",
    )
    args = p.parse_args()
    if args.streams < 1:
        p.error("--streams must be at least 1")
    if args.assets:
        from bench import fixtures

        with tempfile.TemporaryDirectory() as tmp:
            fixtures.create(Path(tmp))
            time.sleep(2.1)  # settled files only are cached (see below)
            freeze_wall_clock()
            us = trio.run(run_assets, args.n, Path(tmp), args.variant)
        print(
            f"serverio assets ({args.variant}): {us:.1f} us per request "
            "(client and server, one process)"
        )
        return
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "1k.bin").write_bytes(bytes(range(256)) * 4)
        for i in range(args.files):
            (root / f"f{i:05d}.bin").write_bytes(i.to_bytes(4, "big") * 256)
        if args.login:  # the protected copy (run_login), settled like the other
            (root / "private").mkdir()
            (root / "private" / "1k.bin").write_bytes(bytes(range(256)) * 4)
        # serverio caches a file only once it has been unchanged for 2 s
        # (the "racy" rule of serverio.fs.filecache), as a served site's files
        # are; ctime cannot be back-dated, so wait that out.
        time.sleep(2.1)
        freeze_wall_clock()
        if args.churn:
            us = trio.run(run_churn, args.n, args.churn, root)
            print(f"serverio churn: {us:.1f} us per connection (client and server, one process)")
            return
        if args.files:
            us = trio.run(run_files, args.n, root, args.files, args.meta_entries)
            print(f"serverio files ({args.files}): {us:.1f} us per request (one process)")
            return
        if args.login:
            us = trio.run(run_login, args.n, root, args.login)
            print(f"serverio login ({args.login}): {us:.1f} us per request (one process)")
            return
        if args.h2:
            us = trio.run(run_h2, args.n, args.streams, root)
            print(
                f"serverio h2: {us:.1f} us per stream, {args.streams} in flight "
                "(client and server, one process)"
            )
            return
        if args.tls or args.server == "tls-floor":
            from bench.servers import self_signed

            made = self_signed(root)
            if isinstance(made, str):
                sys.exit(f"pair --tls: {made}")
            server = "serverio" if args.server == "serverio" else "tls-floor"
            us = trio.run(run_tls, server, args.n, root, *made)
            print(f"{server} over TLS: {us:.1f} us per request (client and server, one process)")
            return
        if args.proxy or args.server == "h11-proxy-floor":
            server = "serverio" if args.server == "serverio" else "h11-proxy-floor"
            with bare_upstream(root) as url:
                us = trio.run(run, server, args.n, root, url)
            print(f"{server} proxy: {us:.1f} us per proxied request (upstream not counted)")
            return
        us = trio.run(run, args.server, args.n, root)
    print(f"{args.server}: {us:.1f} us per request (client and server, one process)")


if __name__ == "__main__":
    main()
