"""Raw-request fuzzer: mutated request heads driven through the real engine.

Each case is a byte string (one or more pipelined request heads, built from
a grammar of hostile pieces and then mutated byte-wise) fed to a real
:class:`~serverio.net.connection.ConnectionTask` in 1-4 reads, alternately over
an in-memory stream (the generic stream paths, buffered bodies) and over a
real ``socketpair`` (the socket fast paths and ``os.sendfile``).  The oracle
checks, per case:

* nothing escapes ``ConnectionTask.run`` (it handles every error itself);
* the output parses as a sequence of well-formed HTTP/1.1 responses, one
  per access-log record, each with exact Content-Length framing;
* no 500 (no 5xx at all except 501 and 505, which are protocol answers);
* the planted outside secret and the root's real path never appear;
* a 200 body is byte-for-byte the content of a file under the root (so
  pipelined responses never mix);
* connection state is clean: a response saying ``Connection: close`` is the
  last thing sent before the server closes; if the server stays open after
  input that ended with a complete head, the next valid request gets exactly
  the right answer; if it ended mid-head, the head deadline answers 408 and
  closes; an EOF from the client ends the task silently;
* request bodies never become requests: cases whose (unmutated) framing
  headers announce a body carry a complete request for ``/SMUGGLED`` inside
  that body, and no such request may ever be answered.
* a case whose bytes hold a framing field (``Content-Length`` or
  ``Transfer-Encoding``, :attr:`Case.content`) may leave the connection
  reading content after its answer (the bounded drain, issue 26): the
  probe may then be read as that content, and the drain's deadline may
  close the connection without a ``Connection: close`` having been sent
  (RFC 9112 §9.6 lets a server close at any time); the other checks hold.

It runs under trio's ``MockClock(autojump_threshold=0)``: deadlines fire
without real waiting, and ``wait_all_tasks_blocked`` (which takes priority
over the autojump) tells us the engine has consumed everything fed so far.
The memory stream is a purpose-built one rather than ``trio.testing``'s
memory pair: the driver must see "all output so far" without blocking, and
a million cases should not pay for the pump.

Used by tests/test_reliability.py (short budget) and bench/stress.py (long).
"""

from __future__ import annotations

import contextlib
import gzip
import os
import random
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import trio
import trio.lowlevel
import trio.testing

from serverio import AccessLog, AccessRecord, Config, ConnectionTask, Server
from testkit import simulation

SECRET = b"OUTSIDE-SECRET-7f3a"
SMUGGLED = b"/SMUGGLED"
HELLO = b"hello world\n"
PROBE = b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n"
ALLOWED_5XX = frozenset({501, 505})


# ------------------------------------------------------------------ the tree


def make_tree(base: Path) -> Path:
    """The served tree (returned) and a sibling ``outside`` holding the secret."""
    www = base / "www"
    www.mkdir(parents=True)
    (www / "hello.txt").write_bytes(HELLO)
    (www / "index.html").write_bytes(b"<h1>home</h1>\n")
    (www / "data.bin").write_bytes(bytes(range(256)) * 4)
    # Larger than small_file_size: streamed from the open fd (buffered path).
    (www / "big.bin").write_bytes(random.Random(7).randbytes(100_000))
    (www / "sub").mkdir()
    (www / "sub" / "index.html").write_bytes(b"<p>sub</p>\n")
    (www / "noindex").mkdir()
    (www / ".secret").write_bytes(b"hidden\n")
    (www / ".well-known").mkdir()
    (www / ".well-known" / "security.txt").write_bytes(b"Contact: x\n")
    (www / "caf\u00e9.txt").write_bytes(b"unicode name\n")
    outside = base / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_bytes(SECRET + b"\n")
    (www / "out-link").symlink_to("../outside/secret.txt")
    (www / "out-dir").symlink_to("../outside")
    (www / "abs-out").symlink_to(outside / "secret.txt")
    os.mkfifo(www / "fifo")
    return www


def tree_contents(root: Path) -> set[bytes]:
    out: set[bytes] = set()
    for dirpath, _, files in os.walk(root):
        for name in files:
            p = Path(dirpath, name)
            if p.is_file() and not p.is_symlink():
                out.add(p.read_bytes())
    return out


# ------------------------------------------------------------------ the stream


class FuzzStream(trio.abc.Stream):
    """The server's end of an in-memory connection, driven by the fuzzer."""

    def __init__(self) -> None:
        self.inbox = bytearray()
        self.eof = False
        self.out = bytearray()
        self.closed = False
        self.closed_event = trio.Event()
        self._lot = trio.lowlevel.ParkingLot()

    def is_closed(self) -> bool:
        # A method, not the attribute: the engine closes the stream while the
        # driver awaits, which type narrowing on the attribute cannot see.
        return self.closed

    def feed(self, data: bytes) -> None:
        self.inbox += data
        self._lot.unpark_all()

    def feed_eof(self) -> None:
        self.eof = True
        self._lot.unpark_all()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        await trio.lowlevel.checkpoint_if_cancelled()
        while not self.inbox and not self.eof and not self.closed:
            await self._lot.park()
        if self.closed:
            raise trio.ClosedResourceError
        n = max_bytes or 65536
        data = bytes(self.inbox[:n])
        del self.inbox[:n]
        await trio.lowlevel.cancel_shielded_checkpoint()
        return data

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()
        if self.closed:
            raise trio.ClosedResourceError
        self.out += data
        await trio.lowlevel.cancel_shielded_checkpoint()

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        self.closed = True
        self.closed_event.set()
        self._lot.unpark_all()
        await trio.lowlevel.checkpoint()


class _MemoryEnd:
    """The driver's side of a :class:`FuzzStream` (no kernel involved)."""

    transport = "memory"

    def __init__(self) -> None:
        self.stream = FuzzStream()
        self.server_stream: trio.abc.Stream = self.stream
        self.out = self.stream.out

    def feed(self, data: bytes) -> None:
        self.stream.feed(data)

    def feed_eof(self) -> None:
        self.stream.feed_eof()

    def is_closed(self) -> bool:
        return self.stream.closed

    async def settle(self) -> None:
        await trio.testing.wait_all_tasks_blocked()

    async def wait_closed(self) -> None:
        await self.stream.closed_event.wait()

    def close(self) -> None:
        pass


class _SocketEnd:
    """The driver's side of a real ``socketpair``: the engine then takes its
    socket paths (non-blocking read/write fast paths, ``os.sendfile``),
    which memory streams never reach.

    ``wait_all_tasks_blocked`` still means "the engine consumed everything":
    bytes written to a socketpair are readable at once, and trio polls for
    I/O before it declares the loop idle.
    """

    transport = "socket"

    def __init__(self) -> None:
        mine, theirs = socket.socketpair()
        mine.setblocking(False)
        self.sock = mine
        self.server_stream = trio.SocketStream(trio.socket.from_stdlib_socket(theirs))
        self.out = bytearray()
        self.closed = False

    def feed(self, data: bytes) -> None:
        # Inputs are far smaller than the socket buffer: this never blocks.
        # After the server closed, the bytes go nowhere (as in memory mode).
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.sock.sendall(data)

    def feed_eof(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_WR)

    def is_closed(self) -> bool:
        return self.closed

    def _drain(self) -> bool:
        got = False
        while not self.closed:
            try:
                data = self.sock.recv(1 << 20)
            except BlockingIOError:
                break
            except ConnectionResetError:
                data = b""
            if not data:
                self.closed = True
                break
            self.out += data
            got = True
        return got

    async def settle(self) -> None:
        # Reading may unblock a server waiting to write: repeat until quiet.
        while True:
            await trio.testing.wait_all_tasks_blocked()
            if not self._drain():
                return

    async def wait_closed(self) -> None:
        while not self.closed:
            await trio.lowlevel.wait_readable(self.sock)
            self._drain()

    def close(self) -> None:
        self.sock.close()


class _Records(AccessLog):
    """An access log that keeps the records (the ground truth of responses)."""

    def __init__(self) -> None:
        super().__init__("common")
        self.records: list[AccessRecord] = []

    def write(self, r: AccessRecord, now: float) -> None:
        self.records.append(r)


# ------------------------------------------------------------------ generator

_METHODS = (
    [b"GET"] * 8
    + [b"HEAD"] * 2
    + [
        b"OPTIONS",
        b"POST",
        b"PUT",
        b"DELETE",
        b"CONNECT",
        b"TRACE",
        b"get",
        b"G\x00T",
        b"GET\x7f",
        b"",
        b"X" * 300,
        b"PRI",
    ]
)
_TARGETS = [
    b"/",
    b"/hello.txt",
    b"/hello.txt?x=1",
    b"/data.bin",
    b"/big.bin",
    b"/sub",
    b"/sub/",
    b"/noindex/",
    b"/caf%C3%A9.txt",
    b"/caf\xc3\xa9.txt",
    b"*",
    b"/.secret",
    b"/.well-known/security.txt",
    b"/fifo",
    b"/out-link",
    b"/out-dir/secret.txt",
    b"/abs-out",
    b"/../outside/secret.txt",
    b"/%2e%2e/outside/secret.txt",
    b"/%2E%2e%2foutside%2fsecret.txt",
    b"/sub/..%2f..%2foutside/secret.txt",
    b"/sub/%2e%2e/%2e%2e/outside/secret.txt",
    b"/..%5c..%5coutside%5csecret.txt",
    b"/..\\..\\outside\\secret.txt",
    b"/%c0%ae%c0%ae/outside/secret.txt",
    b"/%e0%80%ae%e0%80%ae/outside/secret.txt",
    b"/.well-known/../../outside/secret.txt",
    b"//outside/secret.txt",
    b"///..//..//outside/secret.txt",
    b"http://h/../outside/secret.txt",
    b"http://h/hello.txt",
    b"HTTPS://h:443?x",
    b"http://",
    b"http:///hello.txt",
    b"outside/secret.txt",
    b"example.com:80",
    b"/hello.txt%00",
    b"/hello.txt\x00",
    b"/%zz",
    b"/%",
    b"/%f",
    b"/%ff%fe",
    b"/%ed%a0%80",
    b"/hello.txt#frag",
    b"/a b",
    b"/\xff",
    b"/" + b"a" * 9000,
    b"/" + b"%2e" * 300,
    b"/" + b"x/" * 2000,
]
_VERSIONS = [b"HTTP/1.1"] * 8 + [
    b"HTTP/1.0",
    b"HTTP/1.0",
    b"HTTP/2.0",
    b"HTTP/1.2",
    b"HTTP/0.9",
    b"http/1.1",
    b"HTTP/1.10",
    b"HTTP/11",
    b"",
]
_HOSTS = [
    b"Host: t",
    b"Host: t",
    b"Host: t",
    b"Host: 127.0.0.1:8000",
    b"Host: [::1]:80",
    b"Host: ",
    b"Host: a b",
    b"Host: a/b",
    b"Host: t\r\nHost: u",
    b"host:t",
    b"HOST:   t   ",
    b"Host:\tt",
    b"Host : t",
    b"",
]
# (header line, framing: "none" | "body" | "zero" | "reject")
_FRAMING: list[tuple[bytes, str]] = [
    (b"Content-Length: 0", "zero"),
    (b"Content-Length: %d", "body"),
    (b"content-length:%d", "body"),
    (b"Content-Length: 0%d", "body"),
    (b"Content-Length: %d\r\nContent-Length: %d", "body"),
    (b"Content-Length: %d, %d", "reject"),
    (b"Content-Length: -1", "reject"),
    (b"Content-Length: +5", "reject"),
    (b"Content-Length: 0x10", "reject"),
    (b"Content-Length: 99999999999999999999999", "reject"),
    (b"Content-Length : %d", "reject"),
    (b"Transfer-Encoding: chunked", "chunked"),
    (b"Transfer-Encoding: Chunked", "chunked"),
    (b"Transfer-Encoding: chunked\r\nContent-Length: %d", "chunked"),
    (b"Content-Length: %d\r\nTransfer-Encoding: chunked", "chunked"),
    (b"Transfer-Encoding: gzip, chunked", "reject"),
    (b"Transfer-Encoding: chunked, gzip", "reject"),
    (b"Transfer-Encoding: gzip", "reject"),
    (b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked", "reject"),
    (b"Transfer-Encoding:\tchunked", "chunked"),
    (b"Transfer-Encoding : chunked", "reject"),
    (b"Transfer-Encoding: \x0bchunked", "reject"),
    (b"Transfer_Encoding: chunked", "none"),
    (b"X-Transfer-Encoding: chunked", "none"),
]
_HEADERS = [
    b"Connection: close",
    b"Connection: keep-alive",
    b"Connection: close, keep-alive",
    b"Connection: Upgrade\r\nUpgrade: h2c",
    b"Expect: 100-continue",
    b"Range: bytes=0-4",
    b"Range: bytes=-5",
    b"Range: bytes=0-0,2-2,4-4",
    b"Range: bytes=99999-",
    b"Range: bytes=5-1",
    b"Range: bytes=" + b"0-0," * 200 + b"0-0",
    b"Range: bytes=0-18446744073709551616",
    b"Range: items=0-1",
    b"Range: bytes=0-1\r\nRange: bytes=2-3",
    b'If-Range: "x"\r\nRange: bytes=0-1',
    b"If-Range: Sat, 01 Jan 2000 00:00:00 GMT\r\nRange: bytes=0-1",
    b'If-None-Match: "x", W/"y", *',
    b"If-None-Match: *",
    b'If-Match: "nope"',
    b"If-Match: *",
    b"If-Modified-Since: Sat, 01 Jan 2000 00:00:00 GMT",
    b"If-Modified-Since: garbage",
    b"If-Unmodified-Since: Sat, 01 Jan 2000 00:00:00 GMT",
    b"If-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\nIf-Modified-Since: x",
    b"Accept-Encoding: gzip, br, zstd",
    b'User-Agent: \x01\x7f\xff"\\',
    b"Referer: http://evil/\r\n \tfolded",
    b"X-Folded: a\r\n b\r\n\tc",
    b" X-Leading-Space: x",
    b"X-Nul: a\x00b",
    b"X-CR: a\rb",
    b"X-Bad Name: x",
    b"X-Empty:",
    b":no-name",
    b"X-Utf8: \xc3\xa9\xff",
    b"X-Long: " + b"v" * 9000,
    b"X-Huge: " + b"v" * 20000,
    b"\r\n".join(b"X-Many-%d: v" % i for i in range(300)),
]
_INTERESTING = b"\x00\r\n \t:%/\\.\x7f\xff\x80,;\"'?#"


@dataclass(slots=True)
class Case:
    data: bytes
    chunks: list[bytes]
    smuggle_check: bool
    stall: bool = False  # input ending mid-head: wait for the deadline, no probe
    # A framing field is in the bytes: the server may be draining content
    # after its answer (see the module docstring).
    content: bool = False


def _pick(rng: random.Random, hostile: list[bytes], clean: bytes, p: float) -> bytes:
    return rng.choice(hostile) if rng.random() < p else clean


def _request(rng: random.Random, eol: bytes) -> tuple[bytes, bool]:
    """One request (head, and a body when the framing says so).

    Each part is hostile with a small probability, so that most requests
    get past the first check and reach the deeper paths (ranges,
    conditionals, pipelining, keep-alive) with a few hostile parts.
    """
    method = _pick(rng, _METHODS, rng.choice((b"GET", b"GET", b"HEAD")), 0.15)
    target = _pick(rng, _TARGETS, rng.choice(_TARGETS[:11]), 0.35)
    version = _pick(rng, _VERSIONS, b"HTTP/1.1", 0.1)
    line = b" ".join(p for p in (method, target, version) if p or rng.random() < 0.3)
    lines = [line]
    host = _pick(rng, _HOSTS, b"Host: t", 0.1)
    headers = [host] if host else []
    for _ in range(rng.choice((0, 0, 1, 1, 2, 3))):
        headers.append(rng.choice(_HEADERS))
    smuggle = False
    body = b""
    if rng.random() < 0.2:
        tmpl, kind = rng.choice(_FRAMING)
        inner = b"GET " + SMUGGLED + b" HTTP/1.1\r\nHost: t\r\n\r\n"
        n = len(inner)
        hdr = tmpl.replace(b"%d", str(n).encode())
        headers.insert(rng.randrange(len(headers) + 1), hdr)
        if kind == "body":
            body, smuggle = inner, True
        elif kind == "chunked":
            body, smuggle = b"%x\r\n%s\r\n0\r\n\r\n" % (n, inner), True
        elif kind == "reject":
            body, smuggle = inner, True
    rng.shuffle(headers)
    lines.extend(headers)
    head = eol.join(lines) + eol + eol
    return head + body, smuggle


def _mutate(rng: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.choice((1, 1, 1, 2, 3, 5))):
        if not buf:
            buf += bytes([rng.choice(_INTERESTING)])
            continue
        op = rng.randrange(7)
        i = rng.randrange(len(buf))
        if op == 0:
            buf[i] = rng.randrange(256)
        elif op == 1:
            buf[i] = rng.choice(_INTERESTING)
        elif op == 2:
            buf.insert(i, rng.choice(_INTERESTING))
        elif op == 3:
            del buf[i : i + rng.randrange(1, 16)]
        elif op == 4:
            j = min(len(buf), i + rng.randrange(1, 64))
            buf[i:i] = buf[i:j] * rng.randrange(1, 4)
        elif op == 5:
            # line endings are where parsers disagree: CRLF <-> LF <-> CR
            k = buf.find(b"\r\n", i)
            if k != -1:
                buf[k : k + 2] = rng.choice((b"\n", b"\r", b"\r\r\n", b"\n\r"))
        else:
            del buf[i:]
    return bytes(buf)


def make_case(seed: int, index: int) -> Case:
    """Case ``index`` of run ``seed``: reproducible on its own."""
    rng = random.Random(seed * 1_000_003 + index)
    eol = b"\r\n" if rng.random() < 0.85 else b"\n"
    parts: list[bytes] = []
    smuggle = False
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3, 4))):
        req, s = _request(rng, eol)
        parts.append(req)
        smuggle = smuggle or s
    data = b"".join(parts)
    mutated = rng.random() < 0.4
    if mutated:
        data = _mutate(rng, data)
    if rng.random() < 0.05:
        data = rng.randbytes(rng.randrange(1, 200))
        mutated = True
    # How the bytes arrive: whole, in a few pieces, or (short ones) byte by byte.
    chunks: list[bytes]
    r = rng.random()
    if r < 0.5 or len(data) < 2:
        chunks = [data]
    elif r < 0.97 or len(data) > 400:
        cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randrange(1, 4))))
        chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    else:
        chunks = [data[i : i + 1] for i in range(len(data))]
    lowered = data.lower()
    content = b"content-length" in lowered or b"transfer-encoding" in lowered
    return Case(data, chunks, smuggle and not mutated, stall=rng.random() < 0.3, content=content)


# ------------------------------------------------------------------ the oracle


class CaseFailure(AssertionError):
    pass


@dataclass(slots=True)
class _Resp:
    status: int
    headers: dict[bytes, bytes]
    body: bytes
    close: bool


_STATUS_RE = re.compile(rb"HTTP/1\.1 ([1-5][0-9][0-9]) [\x20-\x7e]*\Z")
_FIELD_RE = re.compile(rb"([!#$%&'*+.^_`|~0-9A-Za-z-]+): ([\x20-\x7e\x80-\xff]*)\Z")


def _parse(out: bytes, records: list[AccessRecord]) -> tuple[list[_Resp], bytes]:
    """Split ``out`` into responses, one per record; returns them and the rest."""
    resps: list[_Resp] = []
    pos = 0
    for rec in records:
        end = out.find(b"\r\n\r\n", pos)
        if end == -1:
            raise CaseFailure(f"response head missing for {rec.status}")
        lines = out[pos:end].split(b"\r\n")
        m = _STATUS_RE.match(lines[0])
        if m is None:
            raise CaseFailure(f"bad status line {lines[0][:80]!r}")
        status = int(m.group(1))
        headers: dict[bytes, bytes] = {}
        for ln in lines[1:]:
            fm = _FIELD_RE.match(ln)
            if fm is None or b"\n" in ln or b"\r" in ln:
                raise CaseFailure(f"bad header line {ln[:80]!r}")
            name = fm.group(1).lower()
            if name in headers:
                raise CaseFailure(f"duplicate header {name!r}")
            headers[name] = fm.group(2)
        pos = end + 4
        if status != rec.status:
            raise CaseFailure(f"status {status} but access log says {rec.status}")
        if b"transfer-encoding" in headers:
            raise CaseFailure("response uses Transfer-Encoding")
        cl = headers.get(b"content-length")
        if status in (204, 304) or 100 <= status < 200:
            if cl is not None and status == 204:
                raise CaseFailure("204 with Content-Length")
            n = 0
        else:
            if cl is None or not cl.isdigit():
                raise CaseFailure(f"{status} without a valid Content-Length")
            n = 0 if rec.method == "HEAD" else int(cl)
        if len(out) - pos < n:
            raise CaseFailure(f"body shorter than Content-Length ({len(out) - pos} < {n})")
        if rec.size != n:
            raise CaseFailure(f"access log size {rec.size} but framed body is {n}")
        body = out[pos : pos + n]
        pos += n
        close = headers.get(b"connection", b"").lower() == b"close"
        resps.append(_Resp(status, headers, body, close))
    return resps, out[pos:]


def _content(r: _Resp) -> bytes:
    """The body with its Content-Encoding undone."""
    coding = r.headers.get(b"content-encoding")
    if coding is None:
        return r.body
    try:
        if coding == b"gzip":
            return gzip.decompress(r.body)
        if coding == b"br":
            import brotli

            return bytes(brotli.decompress(r.body))
        if coding == b"zstd":
            import zstandard

            return bytes(zstandard.ZstdDecompressor().decompressobj().decompress(r.body))
    except Exception as exc:  # any decoder error means a corrupt body
        raise CaseFailure(f"{coding!r} body does not decode: {exc!r}") from None
    raise CaseFailure(f"unknown Content-Encoding {coding!r}")


@dataclass(slots=True)
class FuzzEnv:
    root: Path
    server: Server
    log: _Records
    contents: set[bytes]
    root_bytes: bytes


def make_env(base: Path, **config: object) -> FuzzEnv:
    root = make_tree(base)
    # Both pools inline: a task waiting for a worker thread counts as
    # "blocked", so wait_all_tasks_blocked would return early, and the mock
    # clock would jump while the thread runs.  Pools under load are the fs
    # stall scenario's subject (real time, real threads).
    cfg = Config.of(
        directory=str(root),
        head_timeout=7.0,
        keepalive_timeout=3.0,
        fs_workers=0,
        fs_queue=0,
        work_workers=0,
        work_queue=0,
        **config,
    )
    log = _Records()
    server = Server(cfg.validate(), access_log=log)
    _ = server.opener  # open the root now, so fd counts start from the steady state
    return FuzzEnv(root, server, log, tree_contents(root), str(root).encode())


class _Run:
    """One case in flight: the stream, the engine task, and what was checked."""

    def __init__(self, env: FuzzEnv, case: Case, transport: str) -> None:
        self.env = env
        self.case = case
        self.records = env.log.records
        self.records.clear()
        self.stream: _MemoryEnd | _SocketEnd = (
            _SocketEnd() if transport == "socket" else _MemoryEnd()
        )
        self.conn = ConnectionTask(env.server.env, self.stream.server_stream, "fuzz")
        self.crashed: list[BaseException] = []
        self.checked_out = 0
        self.checked_rec = 0

    async def serve(self) -> None:
        try:
            await self.conn.run()
        except Exception as exc:  # the property under test: nothing escapes
            self.crashed.append(exc)
            await trio.aclose_forcefully(self.stream.server_stream)

    def check(self, expect_probe: bool | None) -> list[_Resp]:
        """Parse what arrived since the last check and apply the invariants.

        ``expect_probe``: True when the new output must be exactly the right
        answer to PROBE; None for the fuzzed input's own responses.
        """
        if self.crashed:
            raise CaseFailure(f"exception escaped ConnectionTask.run: {self.crashed[0]!r}")
        stream, env = self.stream, self.env
        out = bytes(stream.out[self.checked_out :])
        new = self.records[self.checked_rec :]
        resps, rest = _parse(out, new)
        if rest:
            raise CaseFailure(f"{len(rest)} bytes after the last logged response: {rest[:60]!r}")
        self.checked_out, self.checked_rec = len(stream.out), len(self.records)
        if SECRET in out or env.root_bytes in out:
            raise CaseFailure("outside secret or root path in the output")
        for i, (r, rec) in enumerate(zip(resps, new, strict=True)):
            if r.status >= 500 and r.status not in ALLOWED_5XX:
                raise CaseFailure(f"server error {r.status}")
            if self.case.smuggle_check and rec.target.encode("latin-1").startswith(SMUGGLED):
                raise CaseFailure("a request body was parsed as a request")
            if r.status == 200 and rec.method == "GET" and _content(r) not in env.contents:
                listing = r.headers.get(b"content-type", b"").startswith(b"text/html")
                if not (listing and _content(r).startswith(b"<!DOCTYPE html>")):
                    raise CaseFailure(f"200 body is not a file's content: {r.body[:40]!r}")
            if r.close and (i != len(resps) - 1 or not stream.is_closed()):
                raise CaseFailure("Connection: close but the connection went on")
        drained = self.case.content  # the connection may be draining content
        if (
            stream.is_closed()
            and resps
            and not resps[-1].close
            and expect_probe is None
            and not drained
        ):
            raise CaseFailure("closed after a response that did not say Connection: close")
        if expect_probe and not drained:
            if len(resps) != 1 or resps[0].status != 200 or resps[0].body != HELLO:
                got = [(r.status, r.body[:20]) for r in resps]
                raise CaseFailure(f"clean connection answered the probe wrongly: {got}")
        return resps

    async def drive(self) -> str:
        failure: CaseFailure | None = None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.serve)
            try:
                outcome = await self._steps()
            except CaseFailure as exc:
                # Raised outside the nursery, so it is not wrapped in a group.
                failure = exc
            nursery.cancel_scope.cancel()
        if failure is not None:
            raise failure
        return outcome

    async def _steps(self) -> str:
        stream = self.stream
        outcome = "closed"
        for chunk in self.case.chunks:
            stream.feed(chunk)
            await stream.settle()
        resps = self.check(None)
        if stream.is_closed() and not resps:
            raise CaseFailure("closed without any response")
        if not stream.is_closed() and not self.case.data.endswith((b"\n\n", b"\n\r\n")):
            # The input ended mid-head (or with junk after a head): the
            # probe may complete that head and be refused with it.
            if not self.case.stall:
                stream.feed(PROBE)
                await stream.settle()
            if not stream.is_closed() and len(self.records) == self.checked_rec:
                # Still waiting for the end of a head: the head deadline
                # must answer 408 and close (mock time: instant).
                await stream.wait_closed()
                got = self.check(False)
                quiet = self.case.content and not got  # a drain past its deadline
                if not quiet and ([r.status for r in got] != [408] or not got[0].close):
                    raise CaseFailure(f"stalled head ended with {got!r}")
                outcome = "stalled"
            else:
                self.check(False)
                outcome = "absorbed"
        if not stream.is_closed():
            # Open after a complete head: the connection must be clean.
            stream.feed(PROBE)
            await stream.settle()
            self.check(True)
            if stream.is_closed() and not self.case.content:
                raise CaseFailure("closed after answering the probe")
            outcome = "clean"
            stream.feed_eof()
            await stream.settle()
            if not stream.is_closed() or len(stream.out) != self.checked_out:
                raise CaseFailure("client EOF did not end the connection silently")
        return outcome


async def run_case(env: FuzzEnv, case: Case, transport: str = "memory") -> str:
    """Drive one case; raises :class:`CaseFailure` if any property breaks.

    Returns how the connection ended: ``closed`` (by the server, after the
    fuzzed input), ``stalled`` (mid-head, then 408), ``absorbed`` (the
    probe completed a broken head and was refused) or ``clean`` (the probe
    was answered correctly on the same connection).
    """
    run = _Run(env, case, transport)
    try:
        # Mock time: only a connection that never times out can reach this.
        with trio.fail_after(3600):
            outcome = await run.drive()
    except trio.TooSlowError:
        raise CaseFailure("connection hung: no deadline fired") from None
    finally:
        run.stream.close()
    if run.crashed:
        raise CaseFailure(f"exception escaped ConnectionTask.run: {run.crashed[0]!r}")
    return outcome


@dataclass
class FuzzReport:
    seed: int
    cases: int = 0
    failures: list[tuple[int, str, bytes]] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    outcomes: dict[str, int] = field(default_factory=dict)
    transports: dict[str, int] = field(default_factory=dict)
    responses: int = 0
    bytes_in: int = 0
    seconds: float = 0.0
    fds_before: int = 0
    fds_after: int = 0

    def as_dict(self) -> dict[str, object]:
        return {
            "seed": self.seed,
            "cases": self.cases,
            "responses": self.responses,
            "bytes_in": self.bytes_in,
            "failures": [
                {"index": i, "reason": why, "case": repr(data[:300])}
                for i, why, data in self.failures
            ],
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
            "outcomes": dict(sorted(self.outcomes.items())),
            "transports": dict(sorted(self.transports.items())),
            "seconds": round(self.seconds, 1),
            "fds_before": self.fds_before,
            "fds_after": self.fds_after,
        }


async def fuzz(
    env: FuzzEnv,
    cases: int,
    seed: int = 0,
    *,
    start: int = 0,
    max_failures: int = 20,
    progress: Callable[[int], None] | None = None,
) -> FuzzReport:
    """Run cases ``start .. start+cases`` of run ``seed`` (mock clock required)."""
    report = FuzzReport(seed)
    report.fds_before = simulation.open_fd_count()
    t0 = time.perf_counter()
    seen: set[str] = set()
    for index in range(start, start + cases):
        case = make_case(seed, index)
        # Alternate transports: memory streams (buffered body path, slow
        # read path) and socketpairs (fast paths, sendfile).
        transport = "socket" if index % 2 else "memory"
        report.transports[transport] = report.transports.get(transport, 0) + 1
        try:
            outcome = await run_case(env, case, transport)
            report.outcomes[outcome] = report.outcomes.get(outcome, 0) + 1
        except CaseFailure as exc:
            why = str(exc)
            key = why.split(":")[0]
            if key not in seen:  # one example per kind of failure
                seen.add(key)
                report.failures.append((index, f"{transport}: {why}", case.data))
            if len(report.failures) >= max_failures:
                break
        report.cases += 1
        report.bytes_in += len(case.data)
        for rec in env.log.records:
            report.statuses[rec.status] = report.statuses.get(rec.status, 0) + 1
            report.responses += 1
        if progress is not None and report.cases % 10000 == 0:
            progress(report.cases)
    report.seconds = time.perf_counter() - t0
    report.fds_after = simulation.open_fd_count()
    return report


def fuzz_sync(
    base: Path,
    cases: int,
    seed: int = 0,
    start: int = 0,
    progress: Callable[[int], None] | None = None,
) -> FuzzReport:
    """A whole fuzz run in a fresh trio loop (for bench/stress.py's workers)."""
    env = make_env(base)

    async def main() -> FuzzReport:
        try:
            return await fuzz(env, cases, seed, start=start, progress=progress)
        finally:
            env.server.opener.close()

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
