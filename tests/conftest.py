"""Shared fixtures: a served tree, in-memory connections, real listeners."""

from __future__ import annotations

import functools
import gc
import os
import socket
import struct
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import h11
import pytest
import trio
import trio.testing
import trustme

from serverio import Config, Server
from serverio.fs import filecache as _filecache
from serverio.fs import mounts as _mounts
from serverio.fs.opener import STRATEGIES, RootOpener
from serverio.http.core import RequestFacts
from serverio.net.connection import ConnectionTask
from serverio.ops.options import env_names
from serverio.pipeline.handler import Handler
from testkit.simulation import open_fd_count as open_fd_count

if sys.platform == "win32":
    # The tests write their fixture files as text with "\n" and compare the
    # bytes served: Windows' text mode would write "\r\n".  Every
    # write_text of the tests writes the characters it is given, as on POSIX.
    _write_text = Path.write_text

    def _write_text_as_given(
        self: Path,
        data: str,
        encoding: str | None = None,
        errors: str | None = None,
        newline: str | None = "",
    ) -> int:
        return _write_text(self, data, encoding, errors, newline)

    Path.write_text = _write_text_as_given  # type: ignore[method-assign]

# serverio reads SERVERIO_<OPTION> and PORT (docs/cli.md "Environment
# variables"): the suite runs with none of them, whatever the developer's
# shell exports (PORT=3000 is common), in-process and in subprocesses alike.
# (The suite's own SERVERIO_SIMULATION, SERVERIO_FUZZ_CASES ... are kept.)
for _name in env_names():
    os.environ.pop(_name, None)


# The README's test command runs the suite in parallel (pytest -n auto),
# then the tests marked ``serial`` on their own (pytest -n 0 -m serial):
# they time cancellations against stalled threads and truncations against
# transfers in flight, which another worker's load would blur.  Under
# xdist they are skipped, with where they run said in the -ra summary.
SERIAL_SKIP = "runs alone, after the parallel run: pytest -n 0 -m serial (the README's command)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not hasattr(config, "workerinput"):  # not an xdist worker: run everything asked
        return
    for item in items:
        if item.get_closest_marker("serial") is not None:
            item.add_marker(pytest.mark.skip(reason=SERIAL_SKIP))


def _symlinks_work() -> bool:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        try:
            os.symlink("target", os.path.join(d, "link"))
        except OSError:
            return False
        return os.path.islink(os.path.join(d, "link"))


if sys.platform == "win32":
    # A test that needs what this Windows cannot make is skipped where it
    # asks for it, with the reason, instead of failing on a missing
    # function or (Wine 8.0) on a link that os.symlink reported made but
    # never created.
    if not _symlinks_work():
        _SYMLINK_REASON = (
            "needs a symlink: os.symlink creates none here (Wine 8.0 reports "
            "success and makes nothing; Windows needs the privilege or Developer Mode)"
        )

        def _no_symlink(*args: object, **kwargs: object) -> None:
            frame = sys._getframe(1)
            for _ in range(4):  # the caller, or the one that called pathlib
                name = frame.f_globals.get("__name__", "")
                if name.startswith("_pytest"):
                    # pytest's own "*-current" links: it ignores an OSError.
                    raise OSError(1, _SYMLINK_REASON)
                if name.startswith(("tests", "testkit")) or frame.f_back is None:
                    break
                frame = frame.f_back
            pytest.skip(_SYMLINK_REASON)

        os.symlink = _no_symlink
        Path.symlink_to = _no_symlink  # type: ignore[method-assign, assignment]

    def _no_fifo(*args: object, **kwargs: object) -> None:
        pytest.skip("needs os.mkfifo (POSIX named pipes)")

    os.mkfifo = _no_fifo


@pytest.fixture(autouse=True)
def _unfreeze_collector() -> Iterator[None]:
    """A serving process freezes its start-up objects out of the collector's
    reach (serverio.observe.collector); a test that ran one gives them back,
    so later tests' cyclic garbage is collected as usual."""
    yield
    if gc.get_freeze_count():
        gc.unfreeze()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A served tree, plus a sibling 'outside' directory that must never leak."""
    www = tmp_path / "www"
    www.mkdir()
    (www / "index.html").write_text("<h1>home</h1>\n")
    (www / "hello.txt").write_text("hello world\n")
    (www / "data.bin").write_bytes(bytes(range(256)) * 4)  # 1 KiB
    (www / "big.bin").write_bytes(os.urandom(300_000))
    (www / "sub").mkdir()
    (www / "sub" / "index.html").write_text("<p>sub</p>\n")
    (www / "noindex").mkdir()
    (www / "noindex" / "a.txt").write_text("a\n")
    (www / ".secret").write_text("hidden\n")
    (www / ".well-known").mkdir()
    (www / ".well-known" / "security.txt").write_text("Contact: x\n")
    (www / "caf\u00e9.txt").write_text("unicode name\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("OUTSIDE-SECRET\n")
    return www


@pytest.fixture(params=STRATEGIES)
def strategy(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test under each containment strategy of RootOpener: the server
    it starts creates its opener with that strategy forced."""
    name: str = request.param
    if name != "windows" and os.open not in os.supports_dir_fd:
        pytest.skip(f"{name} needs os.open(dir_fd=), which this platform (Windows) lacks")
    if name == "openat2":
        probe = RootOpener("/", follow_symlinks=False)
        available = probe.strategy == "openat2"
        probe.close()
        if not available:
            pytest.skip("openat2 is not available on this kernel")
    monkeypatch.setattr(_mounts, "RootOpener", functools.partial(RootOpener, strategy=name))
    return name


# The Host values the suite's raw requests send ("Host: t", "a", "b", "x").
# With writes or the proxy on, serverio answers only for expected hosts
# (serverio.http.hosts); make_config admits these unless a test names its
# own --allowed-hosts (tests/test_hosts.py does, to test the rule itself).
SUITE_HOSTS = ("t", "a", "b", "x")


def make_config(root: Path, **kw: object) -> Config:
    cfg = Config.of(directory=str(root), access_log="off").evolve(**kw).validate()
    if "allowed_hosts" not in kw and cfg.site.check_hosts:
        cfg = cfg.evolve(allowed_hosts=SUITE_HOSTS).validate()
    return cfg


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes
    raw_headers: list[tuple[bytes, bytes]] = field(default_factory=list)

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


class HTTPClient:
    """A client-side h11 parser over any trio stream."""

    def __init__(self, stream: trio.abc.Stream, server_end: trio.abc.Stream | None = None) -> None:
        self.stream = stream
        self.conn = h11.Connection(h11.CLIENT)
        # In-memory connections: the server's end, so that reset() can make
        # the server's reads fail as a TCP reset would.
        self.server_end = server_end

    def _reset(self) -> None:
        leftover = self.conn.trailing_data[0]
        self.conn = h11.Connection(h11.CLIENT)
        if leftover:
            self.conn.receive_data(leftover)

    async def send_raw(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def read_response(self, *, head: bool = False) -> Response:
        """Read one response.  ``head``: it answers a HEAD (no body)."""
        if head:
            # Tell the client parser that this response answers a HEAD.
            self._reset()
            self.conn.send(h11.Request(method="HEAD", target="/", headers=[("Host", "x")]))
            self.conn.send(h11.EndOfMessage())
        elif self.conn.our_state is h11.IDLE:
            self.conn.send(h11.Request(method="GET", target="/", headers=[("Host", "x")]))
            self.conn.send(h11.EndOfMessage())
        status = 0
        headers: dict[str, str] = {}
        raw: list[tuple[bytes, bytes]] = []
        body = bytearray()
        while True:
            event = self.conn.next_event()
            if event is h11.NEED_DATA:
                data = await self.stream.receive_some(65536)
                self.conn.receive_data(bytes(data))
                continue
            if isinstance(event, h11.Response):
                status = event.status_code
                raw = list(event.headers.raw_items())
                for k, v in event.headers:
                    headers[k.decode()] = v.decode("latin-1")
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                break
            elif isinstance(event, h11.ConnectionClosed):
                raise EOFError("connection closed before the response ended")
        if self.conn.our_state is h11.DONE and self.conn.their_state is h11.DONE:
            self.conn.start_next_cycle()
        else:
            self._reset()
        return Response(status, headers, bytes(body), raw)

    async def get(self, target: str, headers: str = "", method: str = "GET") -> Response:
        await self.send_raw(
            f"{method} {target} HTTP/1.1\r\nHost: t\r\n{headers}\r\n".encode("latin-1")
        )
        return await self.read_response(head=method == "HEAD")

    async def at_eof(self) -> bool:
        """True when the server closed (reads EOF with no further bytes)."""
        try:
            data = await self.stream.receive_some(65536)
        except trio.BrokenResourceError:
            return True
        return data == b""


async def reset(client: HTTPClient) -> None:
    """Hang up abortively, as a TCP reset: the server's next read fails.

    (Closing with a FIN alone is a half-close, after which the server still
    answers the request it has, RFC 9112 §9.6.)  Sockets: SO_LINGER 0 makes
    close() send an RST.  Memory streams: the server's receiving end is
    closed, so its pending read raises.
    """
    stream = client.stream
    if isinstance(stream, trio.SocketStream):
        stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    elif isinstance(client.server_end, trio.StapledStream):
        receive = client.server_end.receive_stream
        assert isinstance(receive, trio.testing.MemoryReceiveStream)
        receive.close()
    await stream.aclose()


@asynccontextmanager
async def memory_connection(
    cfg: Config, *, lockstep: bool = False, server: Server | None = None
) -> AsyncIterator[tuple[HTTPClient, Server, ConnectionTask]]:
    """One ConnectionTask over an in-memory stream pair (no sockets)."""
    srv = server or Server(cfg)
    client: trio.abc.Stream
    theirs: trio.abc.Stream
    if lockstep:
        client, theirs = trio.testing.lockstep_stream_pair()
    else:
        client, theirs = trio.testing.memory_stream_pair()
    conn = ConnectionTask(srv.env, theirs, "memory")
    # The server's cache-job nursery (what Server.serve opens), re-entrant.
    async with srv.handler.running(), trio.open_nursery() as nursery:
        nursery.start_soon(conn.run)
        try:
            yield HTTPClient(client, theirs), srv, conn
        finally:
            nursery.cancel_scope.cancel()
    srv.opener.close()


@asynccontextmanager
async def running_server(cfg: Config) -> AsyncIterator[tuple[Server, int]]:
    """A real Server on 127.0.0.1 port 0; shut down gracefully on exit."""
    srv = Server(cfg.evolve(host="127.0.0.1", port=0))
    async with trio.open_nursery() as nursery:
        await nursery.start(srv.serve)
        port = srv.addresses()[0][1]
        try:
            yield srv, port
        finally:
            srv.shutdown()


async def connect(port: int) -> HTTPClient:
    return HTTPClient(await trio.open_tcp_stream("127.0.0.1", port))


async def wait_until(predicate: Callable[[], bool], limit: float = 5.0) -> None:
    """Poll a condition that has no event to wait on, bounded by ``limit`` seconds."""
    with trio.fail_after(limit):
        while not predicate():  # noqa: ASYNC110 - state owned by the server, no event
            await trio.sleep(0.005)


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    """A throwaway certificate authority for TLS tests (trustme)."""
    return trustme.CA()


@pytest.fixture
def cert_files(ca: trustme.CA, tmp_path: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1/localhost signed by ``ca``, and its key."""
    leaf = ca.issue_cert("127.0.0.1", "localhost")
    certfile, keyfile = tmp_path / "cert.pem", tmp_path / "key.pem"
    leaf.cert_chain_pems[0].write_to_path(str(certfile))
    leaf.private_key_pem.write_to_path(str(keyfile))
    return certfile, keyfile


# The request fields features register (serverio.http.extra), by the
# keyword the tests name them with; a keyword not listed is its field name
# with "_" for "-".
_FIELD_NAMES = {
    "dav_if": "if",
    "cors_method": "access-control-request-method",
    "cors_headers": "access-control-request-headers",
    "digests": "content-digest",
}


def extra(**fields: str | None) -> tuple[tuple[str, str], ...]:
    """``RequestFacts.extra`` holding ``fields`` (None: left out)."""
    return tuple(
        (_FIELD_NAMES.get(k, k.replace("_", "-")), v) for k, v in fields.items() if v is not None
    )


# ------------------------------------------------------------ the warm path

# The second the ``clock`` fixture freezes the wall clock at (the warm-path
# tests: tests/test_warm_answers.py, tests/test_warm_rules.py).
WARM_NOW = float(int(time.time()))


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """The wall clock, frozen at :data:`WARM_NOW` until the test moves it
    (``clock[0] = ...``); every file is settled (cached at once)."""
    now = [WARM_NOW]
    monkeypatch.setattr(time, "time", lambda: now[0])
    monkeypatch.setattr(_filecache, "RACY_SECONDS", -3600.0)
    yield now


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The targets Handler.respond_now was asked for (it still answers)."""
    seen: list[bytes] = []
    real = Handler.respond_now

    def counting(self: Handler, req: RequestFacts, now: float, transform: bool = True) -> object:
        seen.append(req.target.relpath.encode())
        return real(self, req, now, transform)

    monkeypatch.setattr(Handler, "respond_now", counting)
    return seen
