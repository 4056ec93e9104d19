"""``--workers N``: N processes, each with its own SO_REUSEPORT listener.

Why separate sockets: with one shared listening socket, every process would
wait on the same accept queue, and trio's one-shot epoll registration gives
the kernel no way to balance between them.  With SO_REUSEPORT each process
has its own accept queue and the kernel hashes each new connection to one
of them.

The parent (supervisor) never serves and never forks a running trio loop:

1. it resolves the address and binds a *reservation* socket with
   SO_REUSEPORT but does not listen on it: the port is concrete (port 0
   becomes a real number) and stays ours across worker restarts, yet the
   kernel never queues connections on a socket that is not listening;
2. it starts each worker as a fresh interpreter (``sys.executable -c``, a
   spawn, not a fork), in its own process group so a terminal's Ctrl-C
   reaches only the parent; the validated :class:`Config` goes down the
   worker's stdin (pickled, length-prefixed), and the pipe then stays open:
   EOF on it means the supervisor is gone and the worker drains and exits;
3. a worker binds its own listener, then writes ``ready`` on its stdout;
   once all are ready the parent prints the one ``Serving ...`` line;
4. SIGINT/SIGTERM are forwarded as SIGTERM (a second one, as a second
   SIGTERM: abort), SIGHUP as SIGHUP (reopen the access log);
5. a worker that exits while we are not stopping is restarted after a
   backoff (0.1 s doubling to 5 s); more than ``CRASH_LIMIT`` crashes
   within ``CRASH_WINDOW`` seconds stops everything with exit status 1.

Metrics (``--admin-bind``) are served by the parent: each worker answers
its own snapshot on a private Unix socket (in a 0700 temporary directory),
the parent fetches them per scrape and adds them up
(:func:`serverio.ops.metrics.merge`).  A worker that dies contributes the
counters of the last scrape that saw it, so the sums stay monotonic except
for what it counted since that scrape.
"""

from __future__ import annotations

import errno
import functools
import json
import logging
import os
import pickle
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from ..app.admin import PROMETHEUS_TYPE, open_admin_listener, serve_admin, text
from ..app.server import Server, bind_public, public_addresses
from ..config import Config
from ..errors import ConfigError
from ..net.tls import make_ssl_context
from ..observe.logpipe import LogPipe, PipeHandler, route_logging
from .lan import network_urls
from .metrics import Snapshot, counters_only, family, merge, render, snapshot
from .notify import notify
from .qr import qr_text
from .run import (
    SIGHUP,
    SIGNALS,
    bind_exit_status,
    browse,
    browser_url,
    counters_line,
    draining_line,
    run_server,
    summary_line,
    url_host,
)

__all__ = ["CRASH_LIMIT", "CRASH_WINDOW", "supervise", "worker_main"]

log = logging.getLogger("serverio")

CRASH_LIMIT = 5  # crashes tolerated within CRASH_WINDOW; one more gives up
CRASH_WINDOW = 60.0
_BACKOFF_FIRST = 0.1
_BACKOFF_MAX = 5.0
_KILL_GRACE = 5.0  # after --shutdown-timeout, stragglers get SIGKILL
_SCRAPE_TIMEOUT = 1.0
_FINAL_GRACE = 1.0  # seconds to read a worker's last stdout bytes after its exit
_LINE_MAX = 1 << 20  # a stdout line longer than this is dropped unread
_HEADER = struct.Struct("!I")
# Workers import serverio from where the parent did, installed or not: the
# directory that holds the top-level package (this file is serverio/ops/).
_PKG_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_NO_REUSEPORT = "--workers needs SO_REUSEPORT, which this platform does not support"


def _socket_constant(name: str) -> int | None:
    """Looked up when needed, not named: Windows has neither SO_REUSEPORT
    nor AF_UNIX."""
    value: int | None = getattr(socket, name, None)
    return value


# Workers get a process group of their own (a terminal's Ctrl+C reaches the
# supervisor only, which forwards it); a POSIX-only keyword of open_process.
_NEW_GROUP: dict[str, Any] = {"process_group": 0}


def workers_unsupported() -> str | None:
    """Why ``--workers`` cannot run here (one line), or None.

    Each worker binds its own SO_REUSEPORT listener and relies on the kernel
    to balance connections between them: Linux does (since 3.9).  macOS and
    FreeBSD accept SO_REUSEPORT but do not balance with it (one socket gets
    the connections; FreeBSD's SO_REUSEPORT_LB is not used), and Windows has
    neither SO_REUSEPORT nor the AF_UNIX scrape sockets: there the option is
    refused rather than run as N processes of which one works.
    """
    if _socket_constant("SO_REUSEPORT") is None or _socket_constant("AF_UNIX") is None:
        return _NO_REUSEPORT
    platform: str = sys.platform  # a runtime check, also for mypy --platform
    if not platform.startswith("linux"):
        return (
            f"--workers needs SO_REUSEPORT load balancing, which {platform} does not "
            "provide; run one process"
        )
    return None


# ----------------------------------------------------------------- parent


def supervise(cfg: Config) -> int:
    """Run ``cfg.listeners.workers`` worker processes until SIGINT/SIGTERM; exit status."""
    unsupported = workers_unsupported()
    if unsupported is not None:
        print(f"serverio: error: {unsupported}", file=sys.stderr)
        return 2
    reservations: list[socket.socket] = []
    try:
        for host, port in public_addresses(cfg):
            reservations.append(_reserve(host, port))
    except OSError as exc:
        for r in reservations:
            r.close()
        if exc.errno in (errno.ENOPROTOOPT, errno.EINVAL, errno.EOPNOTSUPP):
            msg = _NO_REUSEPORT
        else:
            reason = exc.strerror or str(exc)
            where = " and ".join(f"{h} port {p}" for h, p in public_addresses(cfg))
            msg = f"cannot listen on {where}: {reason}"
            print(f"serverio: error: {msg}", file=sys.stderr)
            return bind_exit_status(exc)
        print(f"serverio: error: {msg}", file=sys.stderr)
        return 2
    try:
        if not (cfg.listeners.listen or cfg.listeners.listen_tls):
            cfg = cfg.evolve(port=reservations[0].getsockname()[1])
        return trio.run(_Supervisor(cfg).run)
    finally:
        for r in reservations:
            r.close()


def _reserve(host: str, port: int) -> socket.socket:
    family_, type_, proto, _, sockaddr = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family_, type_, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        reuseport = _socket_constant("SO_REUSEPORT")
        assert reuseport is not None  # workers_unsupported() checked
        sock.setsockopt(socket.SOL_SOCKET, reuseport, 1)
        if family_ == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(sockaddr)
    except BaseException:
        sock.close()
        raise
    return sock


@dataclass
class _Slot:
    index: int
    sock_path: str
    proc: trio.Process | None = None
    ready: bool = False
    restarts: int = 0
    last: Snapshot | None = None  # last snapshot scraped from this process
    final: Snapshot | None = None  # the counters it wrote on stdout as it exited
    ready_event: trio.Event = field(default_factory=trio.Event)


class _Supervisor:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.slots: list[_Slot] = []
        self.stopping = False
        self.signals = 0
        self.exit_code = 0
        self.crashes: list[float] = []
        # Counters of processes that ended, folded into one snapshot.
        self.retired: Snapshot = merge([])
        self.started = False  # every worker was ready once
        self.stopped = trio.Event()  # set once by stop()
        self.start_time = 0.0
        # The supervisor's own stderr lines (draining, a worker's crash, the
        # summary): through a log pipe, so that a stalled stderr reader
        # cannot stop it forwarding a signal (serverio.observe.logpipe).
        self.messages = LogPipe(name="stderr")

    async def run(self) -> int:
        cfg = self.cfg
        self.start_time = trio.current_time()
        sockdir = tempfile.mkdtemp(prefix="serverio-")
        slots = range(cfg.listeners.workers)
        self.slots = [_Slot(i, os.path.join(sockdir, f"w{i}.sock")) for i in slots]
        try:
            bind = cfg.listeners.admin_bind
            admin = await open_admin_listener(bind) if bind else None
        except (OSError, ConfigError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            print(
                f"serverio: error: cannot listen on --admin-bind "
                f"{cfg.listeners.admin_bind}: {reason}",
                file=sys.stderr,
            )
            shutil.rmtree(sockdir, ignore_errors=True)
            return bind_exit_status(exc) if isinstance(exc, OSError) else 2
        with route_logging(self.messages):
            try:
                with trio.open_signal_receiver(*SIGNALS) as signals:
                    async with self.messages.running(), trio.open_nursery() as nursery:
                        nursery.start_soon(self._signals, signals)
                        if admin is not None:
                            await nursery.start(serve_admin, admin, self._admin)
                        async with trio.open_nursery() as workers:
                            for slot in self.slots:
                                workers.start_soon(self._keep_running, slot)
                            nursery.start_soon(self._announce, admin)
                        nursery.cancel_scope.cancel()
            finally:
                shutil.rmtree(sockdir, ignore_errors=True)
            if self.started:
                # One line for all workers (each handed its counters over on exit).
                stats = self._own(self.retired["stats"])
                uptime = trio.current_time() - self.start_time
                self.say(summary_line(stats, uptime))
                if cfg.log.verbose:
                    self.say(counters_line(stats, self.retired["caches"]))
        return self.exit_code

    def say(self, line: str) -> None:
        """One line on stderr, never blocking (dropped and counted if stuck)."""
        self.messages.put(line, True)

    def _own(self, stats: dict[str, int]) -> dict[str, int]:
        """The workers' counters plus the supervisor's own dropped lines."""
        own = self.messages.counts.messages_dropped
        return {**stats, "log_messages_dropped": stats.get("log_messages_dropped", 0) + own}

    async def _announce(self, admin: trio.SocketListener | None) -> None:
        for slot in self.slots:
            await slot.ready_event.wait()
        if self.stopping:
            return
        self.started = True
        cfg = self.cfg
        addrs = public_addresses(cfg)
        lan: list[str] = []  # --qr: the first network URL, else the first URL
        shown: list[str] = []
        for i, (host, port) in enumerate(addrs):
            lis = cfg.listeners
            tls = i >= len(lis.listen) if (lis.listen or lis.listen_tls) else bool(cfg.tls.certfile)
            scheme = "https" if tls else "http"
            print(f"Serving {cfg.root} at {scheme}://{url_host(host)}:{port}/", flush=True)
            shown.append(browser_url(scheme, host, port))
            for url in network_urls(scheme, host, port):  # 0.0.0.0, :: (ops/lan.py)
                print(f"Network: {url}", file=sys.stderr, flush=True)
                lan.append(url)
        if cfg.live.qr and (lan or shown):
            print(qr_text((lan or shown)[0]), flush=True)
        if admin is not None:
            name = admin.socket.getsockname()
            print(f"Admin at http://{url_host(name[0])}:{name[1]}/metrics", flush=True)
        notify("READY=1")  # every worker listens (Type=notify units)
        if cfg.live.open_browser and addrs:
            host, port = addrs[0]
            lis = cfg.listeners
            tls = not lis.listen if (lis.listen or lis.listen_tls) else bool(cfg.tls.certfile)
            await browse(browser_url("https" if tls else "http", host, port))

    async def _signals(self, signals: AsyncIterator[int]) -> None:
        async for signum in signals:
            if signum == SIGHUP:
                self._send_all(SIGHUP)
                continue
            self.signals += 1
            if self.signals == 1 and self.started:
                self.say(draining_line(len(self.slots), "worker"))
            elif self.signals == 2:
                self.say("serverio: stopping now")
            self.stop()
            if self.signals > 1:
                self._send_all(signal.SIGTERM)  # the worker's second signal: abort

    def _is_stopping(self) -> bool:
        return self.stopping

    def stop(self) -> None:
        if not self.stopping:
            self.stopping = True
            if self.started:
                notify("STOPPING=1")
            self.stopped.set()
            self._send_all(signal.SIGTERM)
            for slot in self.slots:
                slot.ready_event.set()  # nobody waits for a start any more

    def _send_all(self, signum: int) -> None:
        for slot in self.slots:
            if slot.proc is not None and slot.proc.returncode is None:
                try:
                    slot.proc.send_signal(signum)
                except ProcessLookupError:
                    pass

    async def _keep_running(self, slot: _Slot) -> None:
        while not self.stopping:
            rc = await self._run_once(slot)
            if self._is_stopping():  # (a method: mypy would keep the narrowing above)
                return
            now = trio.current_time()
            self.crashes = [t for t in self.crashes if now - t < CRASH_WINDOW]
            self.crashes.append(now)
            if not self.started:
                # Failing before the first start completed is a set-up
                # problem (bind, certificate): retrying will not fix it.
                self.say(
                    f"serverio: error: worker {slot.index} exited with status {rc} at start-up"
                )
                self.exit_code = rc if rc and rc > 0 else 1
                self.stop()
                return
            if len(self.crashes) > CRASH_LIMIT:
                self.say(
                    f"serverio: error: workers keep crashing ({len(self.crashes)} crashes "
                    f"within {CRASH_WINDOW:g} s); giving up"
                )
                self.exit_code = 1
                self.stop()
                return
            delay = min(_BACKOFF_FIRST * 2 ** (len(self.crashes) - 1), _BACKOFF_MAX)
            log.warning(
                "worker %d exited with status %s; restarting in %.1f s", slot.index, rc, delay
            )
            slot.restarts += 1
            with trio.move_on_after(delay):
                await self.stopped.wait()

    async def _run_once(self, slot: _Slot) -> int:
        cfg = self.cfg
        _unlink_stale(slot.sock_path)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_PKG_PARENT, env.get("PYTHONPATH")]))
        proc = await trio.lowlevel.open_process(
            [sys.executable, "-c", "from serverio.ops.workers import worker_main; worker_main()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            **_NEW_GROUP,
        )
        slot.proc = proc
        slot.ready = False
        assert proc.stdin is not None and proc.stdout is not None
        payload = pickle.dumps((slot.index, slot.sock_path, cfg))
        try:
            await proc.stdin.send_all(_HEADER.pack(len(payload)) + payload)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # it died already; wait() below reports how
        eof = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._read_ready, slot, proc.stdout, eof)
            if self.stopping:
                proc.send_signal(signal.SIGTERM)
            nursery.start_soon(self._kill_late, proc)
            rc = await proc.wait()
            # The pipe's last bytes (the "final" counters) may still be
            # unread: the reader ends at EOF, shortly after the exit.
            with trio.move_on_after(_FINAL_GRACE):
                await eof.wait()
            nursery.cancel_scope.cancel()
        await proc.stdin.aclose()
        await proc.stdout.aclose()
        slot.ready = False
        last = slot.final if slot.final is not None else slot.last
        if last is not None:
            self.retired = merge([self.retired, counters_only(last)])
        slot.last = slot.final = None
        if not self.started or self.stopping:
            slot.ready_event.set()  # a failed start must not block _announce
        return rc

    async def _read_ready(
        self, slot: _Slot, stdout: trio.abc.ReceiveStream, eof: trio.Event
    ) -> None:
        """``ready`` and ``final <json>`` lines from a worker; ``eof`` set at its end."""
        try:
            await self._read_lines(slot, stdout)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        eof.set()

    async def _read_lines(self, slot: _Slot, stdout: trio.abc.ReceiveStream) -> None:
        buf = b""
        async for chunk in stdout:
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if line == b"ready" and not slot.ready:
                    slot.ready = True
                    slot.ready_event.set()
                elif line.startswith(b"final "):
                    try:
                        slot.final = json.loads(line[6:])
                    except ValueError:
                        pass
            # Anything else a worker writes there is read and dropped (past
            # _LINE_MAX), so a chatty worker can never block on a full pipe.
            if len(buf) > _LINE_MAX:
                buf = b""

    async def _kill_late(self, proc: trio.Process) -> None:
        # Workers drain within --shutdown-timeout; one that does not (wedged
        # beyond trio's reach) is killed so that the supervisor can exit.
        await self.stopped.wait()
        conn = self.cfg.conn
        await trio.sleep(conn.shutdown_delay + conn.shutdown_timeout + _KILL_GRACE)
        if proc.returncode is None:
            log.error("worker pid %d did not stop in time; killing it", proc.pid)
            proc.kill()

    # --------------------------------------------------------- admin

    async def _scrape(self, slot: _Slot) -> Snapshot | None:
        if slot.proc is None or not slot.ready:
            return None
        try:
            with trio.fail_after(_SCRAPE_TIMEOUT):
                stream = await trio.open_unix_socket(slot.sock_path)
                async with stream:
                    data = b""
                    async for chunk in stream:
                        data += chunk
            snap: Snapshot = json.loads(data)
        except (OSError, trio.TooSlowError, ValueError, trio.BrokenResourceError):
            return None
        slot.last = snap
        return snap

    async def _admin(self, path: str) -> tuple[int, str, bytes]:
        if path == "/healthz":
            ready = sum(s.ready for s in self.slots)
            if self.stopping:
                return text(503, "draining\n")
            if not ready:
                return text(503, "no worker ready\n")
            return text(200, f"ok {ready}/{len(self.slots)} workers ready\n")
        if path != "/metrics":
            return text(404, "not found\n")
        snaps: list[tuple[_Slot, Snapshot]] = []
        for slot in self.slots:
            snap = await self._scrape(slot)
            if snap is not None:
                snaps.append((slot, snap))
        total = merge([self.retired, *(s for _, s in snaps)])
        total["stats"] = self._own(total["stats"])
        extra = [
            *family(
                "serverio_workers",
                "gauge",
                "Worker processes configured (--workers).",
                [({}, len(self.slots))],
            ),
            *family(
                "serverio_workers_ready",
                "gauge",
                "Worker processes serving now.",
                [({}, sum(s.ready for s in self.slots))],
            ),
            *family(
                "serverio_worker_restarts_total",
                "counter",
                "Worker processes restarted after they exited unexpectedly.",
                [({"worker": str(s.index)}, s.restarts) for s in self.slots],
            ),
            *family(
                "serverio_worker_accepted_total",
                "counter",
                "Sockets accepted per worker process (this process's lifetime).",
                [
                    (
                        {"worker": str(slot.index), "pid": str(snap["pid"])},
                        snap["stats"]["accepted"],
                    )
                    for slot, snap in snaps
                ],
            ),
        ]
        return 200, PROMETHEUS_TYPE, render(total, extra).encode()


def _unlink_stale(path: str) -> None:
    """Remove the Unix socket file a crashed worker of this slot left behind."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


# ----------------------------------------------------------------- worker


def worker_main() -> None:
    """Entry point of one worker process (started by :func:`supervise`)."""
    # Raw reads of exactly the framed payload: the rest of the pipe is the
    # parent-alive signal that _watch_parent waits on.
    (length,) = _HEADER.unpack(_read_exactly(0, _HEADER.size))
    _slot, sock_path, cfg = pickle.loads(_read_exactly(0, length))
    assert isinstance(cfg, Config)
    logging.basicConfig(
        level=cfg.log.log_level.upper(),
        format=f"serverio[{os.getpid()}]: %(levelname)s: %(message)s",
        handlers=[PipeHandler()],  # the worker's log pipe while it serves
    )
    try:
        ssl_context = make_ssl_context(cfg)
    except ConfigError as exc:
        print(f"serverio: error: {exc}", file=sys.stderr)
        sys.exit(2)
    sys.exit(trio.run(functools.partial(_worker, cfg, ssl_context, sock_path)))


def _read_exactly(fd: int, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            sys.exit(2)  # the supervisor went away before sending the config
        buf += chunk
    return buf


async def _worker(cfg: Config, ssl_context: object, sock_path: str) -> int:
    try:
        listeners = await bind_public(cfg, reuse_port=True)
    except OSError as exc:
        where = " and ".join(f"{h} port {p}" for h, p in public_addresses(cfg))
        print(f"serverio: error: cannot listen on {where}: {exc.strerror or exc}", file=sys.stderr)
        return bind_exit_status(exc)

    def ready(_: Server) -> None:
        os.write(1, b"ready\n")

    def final(server: Server) -> None:
        # The supervisor prints one summary line for all workers from these.
        data = b"final " + json.dumps(snapshot(server)).encode() + b"\n"
        while data:
            data = data[os.write(1, data) :]

    return await run_server(
        cfg,
        ssl_context=ssl_context,  # type: ignore[arg-type]
        listeners=listeners,
        announce=False,
        admin=False,
        extra=[functools.partial(_snapshot_service, sock_path), _watch_parent],
        on_ready=ready,
        on_exit=final,
    )


async def _snapshot_service(sock_path: str, server: Server) -> None:
    """Answer each connection on ``sock_path`` with this process's snapshot."""
    af_unix = _socket_constant("AF_UNIX")
    assert af_unix is not None  # workers_unsupported() checked
    sock = trio.socket.socket(af_unix, socket.SOCK_STREAM)
    await sock.bind(sock_path)
    sock.listen(16)
    listener = trio.SocketListener(sock)

    async def answer(stream: trio.SocketStream) -> None:
        snap = snapshot(server)
        snap["pid"] = os.getpid()
        try:
            await stream.send_all(json.dumps(snap).encode())
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(stream)

    await trio.serve_listeners(answer, [listener])


async def _watch_parent(server: Server) -> None:
    """EOF on stdin: the supervisor is gone (even SIGKILLed): drain and exit."""
    fd_stream: Callable[[int], trio.abc.ReceiveStream] = getattr(trio.lowlevel, "FdStream")  # noqa: B009
    stream = fd_stream(os.dup(0))
    async with stream:
        while True:
            try:
                data = await stream.receive_some(4096)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            if not data:
                server.shutdown()
                return
