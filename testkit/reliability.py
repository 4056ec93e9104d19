"""Adversarial scenarios against a real server process on 127.0.0.1.

Each scenario is a plain function: it starts ``testkit/probe_server.py`` (the
real CLI plus a SIGUSR1 snapshot of tasks, fds, threads and counters), runs
its clients in a trio loop in this process, stops the server, and returns a
dict of figures with ``ok`` and a list of ``problems`` (empty when every
guarantee held).  tests/test_reliability.py calls them with reduced counts
and asserts on the figures; bench/stress.py calls them with the issue's
counts (:data:`FULL`) and prints them.

Every loop is bounded in count and in time; every socket is 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
import trio.lowlevel

from testkit import simulation

HOST = "127.0.0.1"
PROBE_SCRIPT = Path(__file__).with_name("probe_server.py")
MiB = 1 << 20
Figures = dict[str, Any]

#: The issue's counts, for bench/stress.py.
FULL: dict[str, dict[str, Any]] = {
    "slowloris": {"conns": 1000, "head_timeout": 2.0, "duration": 6.0},
    "nonreaders": {"conns": 500, "write_timeout": 3.0},
    "nonreaders_buffered": {"conns": 500, "write_timeout": 3.0},
    "flood": {"max_conns": 256, "flood": 2000, "waves": 5},
    "fsstall": {"workers": 8, "queue": 32, "extra": 500},
    "shutdown": {"transfers": 200, "slow": 50, "idle": 50, "shutdown_timeout": 10.0},
    "truncation": {"transfers": 400, "files": 8, "size": 4 * MiB},
    "slowhttptest": {"conns": 1000, "head_timeout": 2.0, "length": 15},
}


def raise_fd_limit() -> int:
    """Raise RLIMIT_NOFILE to the hard limit (children inherit it)."""
    import resource  # POSIX only: imported where a scenario needs it

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))
    return s[k]


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


# ------------------------------------------------------------------ the server


class _LineReader:
    """The first line of a pipe, read by a daemon thread (Windows)."""

    def __init__(self, stream: Any) -> None:
        self._line = b""
        self._done = threading.Event()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: Any) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._line = stream.readline()
        self._done.set()

    def wait(self, timeout: float) -> bytes:
        self._done.wait(timeout)
        return self._line


class ServerProcess:
    """A serverio subprocess on 127.0.0.1 port 0.

    ``probed=True`` runs testkit/probe_server.py (the CLI plus the SIGUSR1
    snapshot); otherwise plain ``python -m serverio``.
    """

    def __init__(
        self,
        directory: Path,
        *args: str,
        probed: bool = True,
        preexec: Callable[[], None] | None = None,
    ) -> None:
        if probed and not hasattr(signal, "SIGUSR1"):
            import pytest

            pytest.skip("needs SIGUSR1 (the probe server's in-process snapshot)")
        self.directory = directory
        self.tmp = tempfile.TemporaryDirectory(prefix="serverio-probe-")
        self.probe_path = Path(self.tmp.name, "probe.json")
        self.stderr_path = Path(self.tmp.name, "stderr")
        entry = [str(PROBE_SCRIPT)] if probed else ["-m", "serverio"]
        cmd = [sys.executable, *entry, "0", "-b", HOST, "-d", str(directory), "-q", "-v", *args]
        env = dict(os.environ, SERVERIO_PROBE=str(self.probe_path), PYTHONUNBUFFERED="1")
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            preexec_fn=preexec,  # e.g. a lower RLIMIT_NOFILE for the server only
        )
        self.returncode: int | None = None
        self._seq = 0
        try:
            self.port = self._read_port()
        except BaseException:
            self.stop()  # the child is ours to reap on every failure
            raise

    def _read_port(self) -> int:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + 15
        buf = b""
        # select() takes pipes on POSIX only: on Windows a thread reads the
        # line (it ends with the pipe, which the child's exit closes).
        line_reader = None if os.name != "nt" else _LineReader(self.proc.stdout)
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                raise RuntimeError(f"server did not start: {self.stderr()}")
            if line_reader is not None:
                buf = line_reader.wait(min(left, 0.1))
                continue
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 4096)
                if not chunk:
                    continue
                buf += chunk
        line = buf.split(b"\n", 1)[0].decode()
        # "Serving /path at http://127.0.0.1:PORT/"
        return int(line.rsplit(":", 1)[1].strip().strip("/"))  # Windows: "\r\n"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def probe(self) -> dict[str, Any]:
        """A snapshot from inside the server (tasks, fds, threads, counters)."""
        self._seq += 1
        os.kill(self.pid, signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):
                data: dict[str, Any] = json.loads(self.probe_path.read_text())
                if data["seq"] >= self._seq:
                    self._seq = data["seq"]
                    return data
            time.sleep(0.005)
        raise RuntimeError(f"no probe answer: {self.stderr()}")

    async def aprobe(self) -> dict[str, Any]:
        return await trio.to_thread.run_sync(self.probe)

    def rss(self) -> tuple[int, int]:
        """(VmRSS, VmHWM) in bytes, read from a procfs from the outside
        (:func:`testkit.simulation.measuring_proc`); zeros once it exited."""
        out = {"VmRSS": 0, "VmHWM": 0}
        with contextlib.suppress(OSError, KeyError):
            for key in out:
                out[key] = simulation.status_kib(self.pid, key) * 1024
        return out["VmRSS"], out["VmHWM"]

    def signal(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def wait(self, timeout: float) -> int | None:
        try:
            self.returncode = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        return self.returncode

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, wait, then SIGKILL if it did not exit (returns the status)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            if self.wait(timeout) is None:
                self.proc.kill()
                self.proc.wait(5)
                self.returncode = None
        else:
            self.returncode = self.proc.returncode
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._stderr.close()
        self.tmp.cleanup()
        return self.returncode

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class Leaks:
    """Leak accounting: the server's snapshot before and after a scenario."""

    before: dict[str, Any]
    after: dict[str, Any] = field(default_factory=dict)

    def figures(self) -> Figures:
        keys = ("tasks", "fds", "threads", "connections")
        return {f"{k}_before_after": [self.before[k], self.after.get(k)] for k in keys}

    def problems(self, *, extra_threads: int = 0) -> list[str]:
        out = []
        for key, slack in (("tasks", 0), ("fds", 0), ("threads", extra_threads)):
            if self.after[key] > self.before[key] + slack:
                out.append(f"{key} grew: {self.before[key]} -> {self.after[key]}")
        if self.after["connections"]:
            out.append(f"{self.after['connections']} connections left")
        return out


async def settle(server: ServerProcess, leaks: Leaks, limit: float = 10.0) -> None:
    """Probe until the server is back to its baseline (or ``limit`` passes)."""
    deadline = trio.current_time() + limit
    while True:
        snap = await server.aprobe()
        leaks.after = snap
        base = leaks.before
        if (
            snap["connections"] == 0
            and snap["tasks"] <= base["tasks"]
            and snap["fds"] <= base["fds"]
            and snap["fs_running"] == 0
        ):
            return
        if trio.current_time() > deadline:
            return
        await trio.sleep(0.05)


# ------------------------------------------------------------------ clients


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes
    complete: bool  # the whole Content-Length arrived
    eof: bool  # the server closed after it


async def read_reply(
    stream: trio.SocketStream, buf: bytearray, *, head: bool = False, limit: float = 30.0
) -> Reply:
    """Read one response from ``stream`` (``buf``: bytes already received).

    A reset or EOF before the end gives ``complete=False`` rather than an
    exception: cut-short responses are an outcome the scenarios count.
    """
    eof = False
    with trio.move_on_after(limit):
        while b"\r\n\r\n" not in buf:
            try:
                data = await stream.receive_some(65536)
            except trio.BrokenResourceError:
                data = b""
            if not data:
                eof = True
                break
            buf += data
    end = buf.find(b"\r\n\r\n")
    if end == -1:
        return Reply(0, {}, bytes(buf), False, eof)
    lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        headers[k.strip().lower()] = v.strip()
    del buf[: end + 4]
    n = 0 if head or status in (204, 304) else int(headers.get("content-length", "0"))
    with trio.move_on_after(limit):
        while len(buf) < n and not eof:
            try:
                data = await stream.receive_some(min(1 << 20, max(65536, n - len(buf))))
            except trio.BrokenResourceError:
                data = b""
            if not data:
                eof = True
                break
            buf += data
    body = bytes(buf[:n])
    del buf[:n]
    return Reply(status, headers, body, len(body) == n, eof)


async def get(
    port: int, target: str, headers: str = "", *, limit: float = 30.0, close: bool = True
) -> Reply:
    """One request on a fresh connection."""
    stream = await trio.open_tcp_stream(HOST, port)
    try:
        extra = "Connection: close\r\n" if close else ""
        await stream.send_all(f"GET {target} HTTP/1.1\r\nHost: t\r\n{extra}{headers}\r\n".encode())
        return await read_reply(stream, bytearray(), limit=limit)
    except (trio.BrokenResourceError, OSError):
        return Reply(0, {}, b"", False, True)
    finally:
        await stream.aclose()


async def wait_closed(stream: trio.SocketStream, limit: float) -> tuple[bool, bytes]:
    """Read (and keep) until EOF/reset; (closed, what arrived) within ``limit``."""
    got = bytearray()
    with trio.move_on_after(limit):
        while True:
            try:
                data = await stream.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return True, bytes(got)
            if not data:
                return True, bytes(got)
            got += data
    return False, bytes(got)


def make_file(path: Path, size: int, seed: int) -> bytes:
    data = random.Random(seed).randbytes(size)
    path.write_bytes(data)
    return data


# ------------------------------------------------------------------ slowloris

# A blocking keep-alive client: GET /hello.txt every 10 ms for DURATION
# seconds; prints its latencies (and when each request started) as JSON.
_GOOD_CLIENT = r"""
import json, socket, sys, time
port, duration = int(sys.argv[1]), float(sys.argv[2])
req = b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n"
want = b"hello world\n"
lat, when, errors = [], [], 0
t_start = time.monotonic()
s = socket.create_connection(("127.0.0.1", port))
s.settimeout(5)
while time.monotonic() - t_start < duration:
    t0 = time.monotonic()
    ok = False
    try:
        s.sendall(req)
        buf = b""
        while b"\r\n\r\n" not in buf or not buf.endswith(want):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
        ok = buf.startswith(b"HTTP/1.1 200 ") and buf.endswith(want)
    except OSError:
        pass
    lat.append(time.monotonic() - t0)
    when.append(t0 - t_start)
    if not ok:
        errors += 1
        s.close()
        s = socket.create_connection(("127.0.0.1", port))
        s.settimeout(5)
    time.sleep(0.01)
s.close()
print(json.dumps({"latencies": lat, "when": when, "errors": errors}))
"""


def slowloris(conns: int = 200, head_timeout: float = 1.0, duration: float = 3.0) -> Figures:
    """``conns`` connections dribble head bytes; a good client keeps asking.

    Guarantee: every dribbler is closed by the head deadline (measured from
    its connect); the good client is answered throughout (its latencies are
    the figure: p50/p99/max).
    """
    raise_fd_limit()
    with tempfile.TemporaryDirectory(prefix="serverio-slowloris-") as tmp:
        root = Path(tmp)
        (root / "hello.txt").write_bytes(b"hello world\n")
        args = ["--head-timeout", str(head_timeout), "--max-connections", str(conns + 64)]
        with ServerProcess(root, *args) as server:
            # The well-behaved client runs in its own process, so that its
            # latencies measure the server, not this process's dribblers.
            good = subprocess.Popen(
                [sys.executable, "-c", _GOOD_CLIENT, str(server.port), repr(duration)],
                stdout=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
            )
            try:
                return trio.run(_slowloris, server, good, conns, head_timeout, duration)
            finally:
                if good.poll() is None:
                    good.kill()
                    good.wait()


async def _slowloris(
    server: ServerProcess,
    good: subprocess.Popen[bytes],
    conns: int,
    head_timeout: float,
    duration: float,
) -> Figures:
    leaks = Leaks(await server.aprobe())
    problems: list[str] = []
    close_after: list[float] = []
    got_408 = 0
    still_open = 0
    # Bounded: a dribbler gives up (and counts as a failure) at this point.
    give_up = head_timeout + 5.0

    async def dribbler(i: int) -> None:
        nonlocal got_408, still_open
        stream = await trio.open_tcp_stream(HOST, server.port)
        t0 = trio.current_time()
        payload = b"GET / HTTP/1.1\r\nHost: t\r\nX-Slow: " + b"a" * 10_000
        got = bytearray()
        closed = False
        try:
            with trio.move_on_after(give_up):
                for b in payload:
                    try:
                        await stream.send_all(bytes([b]))
                    except (trio.BrokenResourceError, OSError):
                        closed = True
                        break
                    with trio.move_on_after(0.1 + random.random() * 0.1):
                        try:
                            data = await stream.receive_some(4096)
                        except trio.BrokenResourceError:
                            data = b""
                        if not data:
                            closed = True
                            break
                        got += data
            if not closed:
                left = max(0.0, give_up - (trio.current_time() - t0))
                closed, rest = await wait_closed(stream, left)
                got += rest
        finally:
            await stream.aclose()
        if closed:
            close_after.append(trio.current_time() - t0)
            got_408 += got.startswith(b"HTTP/1.1 408 ")
        else:
            still_open += 1

    async with trio.open_nursery() as nursery:
        for i in range(conns):
            nursery.start_soon(dribbler, i)
            if i % 50 == 49:
                await trio.lowlevel.checkpoint()  # let the connects go out in waves
    out, _ = await trio.to_thread.run_sync(good.communicate, None, duration + 30)
    report = json.loads(out)
    latencies, when, good_errors = report["latencies"], report["when"], report["errors"]
    await settle(server, leaks)
    snap = leaks.after
    if still_open:
        problems.append(f"{still_open} dribblers still open after {give_up:.1f} s")
    late = [t for t in close_after if t > head_timeout + 1.0]
    if late:
        problems.append(f"{len(late)} dribblers closed late (max {max(late):.2f} s)")
    if good_errors:
        problems.append(f"good client got {good_errors} failed answers")
    problems += leaks.problems()
    p99 = percentile(latencies, 99)
    return {
        "ok": not problems,
        "problems": problems,
        "conns": conns,
        "head_timeout_s": head_timeout,
        "closed": len(close_after),
        "closed_with_408": got_408,
        "close_after_max_s": round(max(close_after, default=0.0), 3),
        "close_after_min_s": round(min(close_after, default=0.0), 3),
        "server_timeouts_head": snap["stats"]["timeouts_head"],
        "good_requests": len(latencies),
        "good_errors": good_errors,
        "good_p50_ms": ms(percentile(latencies, 50)),
        "good_p99_ms": ms(p99),
        "good_max_ms": ms(max(latencies, default=0.0)),
        # The slowest good requests and when they started: they coincide with
        # the connect burst (t ~ 0) or the mass timeout (t ~ head_timeout).
        "good_slowest_at_s_ms": [
            [round(w, 2), ms(lat)]
            for lat, w in sorted(zip(latencies, when, strict=True), reverse=True)[:3]
        ],
        "p99_target_50ms_met": p99 < 0.050,
        **leaks.figures(),
    }


# ------------------------------------------------------------------ non-readers


def nonreaders(conns: int = 100, write_timeout: float = 2.0, sendfile: bool = True) -> Figures:
    """``conns`` clients request an 8 MiB file and never read.

    Guarantee: the write deadline releases every one of them (the server's
    connection set empties and each client sees a cut-short body), and the
    server's peak RSS stays under 200 MiB.
    """
    raise_fd_limit()
    with tempfile.TemporaryDirectory(prefix="serverio-nonreaders-") as tmp:
        root = Path(tmp)
        make_file(root / "big.bin", 8 * MiB, 1)
        (root / "hello.txt").write_bytes(b"hello world\n")
        args = ["--write-timeout", str(write_timeout), "--max-connections", str(conns + 64)]
        if not sendfile:
            args.append("--no-sendfile")
        with ServerProcess(root, *args) as server:
            return trio.run(_nonreaders, server, conns, write_timeout, sendfile)


def nonreaders_buffered(conns: int = 100, write_timeout: float = 2.0) -> Figures:
    """:func:`nonreaders` on the buffered path (``--no-sendfile``)."""
    return nonreaders(conns, write_timeout, sendfile=False)


async def _nonreaders(
    server: ServerProcess, conns: int, write_timeout: float, sendfile: bool
) -> Figures:
    leaks = Leaks(await server.aprobe())
    problems: list[str] = []
    socks: list[trio.socket.SocketType] = []
    rss_peak = 0
    sampling = True

    async def sample_rss() -> None:
        nonlocal rss_peak
        while sampling:
            rss_peak = max(rss_peak, server.rss()[0])
            await trio.sleep(0.02)

    async def one() -> None:
        s = trio.socket.socket()
        # A tiny receive buffer (set before connect, so the window is small
        # from the start): the server's sends stall at once.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        socks.append(s)
        await s.connect((HOST, server.port))
        await s.send(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sample_rss)
        t0 = trio.current_time()
        async with trio.open_nursery() as clients:
            for _ in range(conns):
                clients.start_soon(one)
        t_sent = trio.current_time()
        # Every transfer is stuck now; wait for the write deadline to free them.
        limit = write_timeout * 3 + 10
        snap = await server.aprobe()
        stuck_peak = snap["connections"]
        while snap["connections"] and trio.current_time() - t_sent < limit:
            await trio.sleep(0.1)
            snap = await server.aprobe()
            stuck_peak = max(stuck_peak, snap["connections"])
        released_after = trio.current_time() - t_sent
        sampling = False
    # Now read what each client got: a head and part of the body, then the end.
    cut = full = 0
    for s in socks:
        got = 0
        with trio.move_on_after(5):
            while True:
                try:
                    data = await s.recv(1 << 20)
                except OSError:  # ECONNRESET: the server closed with unread data
                    break
                if not data:
                    break
                got += len(data)
        if got >= 8 * MiB:
            full += 1
        else:
            cut += 1
        s.close()
    await settle(server, leaks)
    stats = leaks.after["stats"]
    _, hwm = server.rss()
    if snap["connections"]:
        problems.append(f"{snap['connections']} connections not released after {limit:.0f} s")
    if full:
        problems.append(f"{full} clients got the whole file: the write deadline never fired")
    if stats["timeouts_write"] < conns:
        problems.append(f"only {stats['timeouts_write']} write timeouts for {conns} clients")
    if hwm >= 200 * MiB:
        problems.append(f"peak RSS {hwm / MiB:.1f} MiB >= 200 MiB")
    problems += leaks.problems()
    return {
        "ok": not problems,
        "problems": problems,
        "conns": conns,
        "file_mib": 8,
        "path": "sendfile" if sendfile else "buffered",
        "write_timeout_s": write_timeout,
        "requests_sent_in_s": round(t_sent - t0, 2),
        "stuck_peak": stuck_peak,
        "all_released_after_s": round(released_after, 2),
        "server_timeouts_write": stats["timeouts_write"],
        "clients_cut_short": cut,
        "rss_peak_mib_sampled": round(rss_peak / MiB, 1),
        "rss_hwm_mib": round(hwm / MiB, 1),
        "rss_baseline_mib": round(leaks.before["VmRSS"] / MiB, 1),
        **leaks.figures(),
    }


# ------------------------------------------------------------------ flood


class _Wave:
    """Outcome counts of one flood wave; ``answered`` fires when all are in."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.counts = {"admitted": 0, "rejected": 0, "closed": 0, "other": 0}
        self.answered = trio.Event()

    def count(self, kind: str) -> None:
        self.counts[kind] += 1
        if sum(self.counts.values()) == self.size:
            self.answered.set()


def flood(max_conns: int = 32, flood: int = 300, waves: int = 3) -> Figures:
    """``waves`` floods of ``flood`` connections against ``--max-connections``.

    Each flood connection sends a request and holds its connection: the
    first ``max_conns`` are admitted (200, kept alive), every one of the
    excess must get an immediate 503.  When the flood stops, a new client must be served at once.
    Across waves, tasks, fds, threads and RSS must not grow.
    """
    raise_fd_limit()
    with tempfile.TemporaryDirectory(prefix="serverio-flood-") as tmp:
        root = Path(tmp)
        (root / "hello.txt").write_bytes(b"hello world\n")
        args = ["--max-connections", str(max_conns), "--keepalive-timeout", "60"]
        with ServerProcess(root, *args) as server:
            return trio.run(_flood, server, max_conns, flood, waves)


async def _flood(server: ServerProcess, max_conns: int, flood: int, waves: int) -> Figures:
    leaks = Leaks(await server.aprobe())
    problems: list[str] = []
    per_wave: list[Figures] = []
    reject_latency: list[float] = []
    recovery: list[float] = []
    for wave in range(waves):
        w = _Wave(flood)
        held: list[trio.SocketStream] = []
        release = trio.Event()

        async def one(w: _Wave, held: list[trio.SocketStream], release: trio.Event) -> None:
            t0 = trio.current_time()
            try:
                stream = await trio.open_tcp_stream(HOST, server.port)
            except OSError:
                w.count("closed")
                return
            try:
                await stream.send_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
                r = await read_reply(stream, bytearray(), limit=10)
            except (trio.BrokenResourceError, OSError):
                r = Reply(0, {}, b"", False, True)
            if r.status == 503:
                w.count("rejected")
                reject_latency.append(trio.current_time() - t0)
                await stream.aclose()
            elif r.status == 200:
                w.count("admitted")
                held.append(stream)  # hold the slot until the wave ends
                await release.wait()
            elif r.status == 0:
                w.count("closed")
                reject_latency.append(trio.current_time() - t0)
                await stream.aclose()
            else:
                w.count("other")
                await stream.aclose()

        t_wave = trio.current_time()
        async with trio.open_nursery() as nursery:
            for _ in range(flood):
                nursery.start_soon(one, w, held, release)
            # Wait until every flood connection has its answer (bounded).
            with trio.move_on_after(30):
                await w.answered.wait()
            answered_in = trio.current_time() - t_wave
            during = await server.aprobe()
            # A well-behaved client during the flood: full, so 503 (fast).
            t_probe = trio.current_time()
            probe_reply = await get(server.port, "/hello.txt", limit=5)
            probe_ms = ms(trio.current_time() - t_probe)
            # The flood stops.
            release.set()
            for s in held:
                await s.aclose()
        t_stop = trio.current_time()
        # Recovery: the next client is served (poll, bounded; the server
        # notices the closes within one event-loop turn).
        ok_reply = Reply(0, {}, b"", False, True)
        with trio.move_on_after(10):
            while ok_reply.status != 200:
                ok_reply = await get(server.port, "/hello.txt", limit=5)
        recovery.append(trio.current_time() - t_stop)
        # Per-wave accounting once the wave's connections are gone (bounded).
        after = await server.aprobe()
        with trio.move_on_after(5):
            while after["connections"] or after["rejectors"]:
                await trio.sleep(0.02)
                after = await server.aprobe()
        admitted, rejected = w.counts["admitted"], w.counts["rejected"]
        closed_only, other = w.counts["closed"], w.counts["other"]
        per_wave.append(
            {
                "admitted": admitted,
                "rejected_503": rejected,
                "closed_without_503": closed_only,
                "other": other,
                "answered_all_in_s": round(answered_in, 3),
                "server_connections_during": during["connections"],
                "server_fds_during": during["fds"],
                "server_tasks_during": during["tasks"],
                "client_during_flood_status": probe_reply.status,
                "client_during_flood_ms": probe_ms,
                "recovered_after_ms": ms(recovery[-1]),
                "rss_mib_after": round(after["VmRSS"] / MiB, 1),
                "fds_after": after["fds"],
                "tasks_after": after["tasks"],
            }
        )
        if admitted != max_conns:
            problems.append(f"wave {wave}: {admitted} admitted, expected {max_conns}")
        if other:
            problems.append(f"wave {wave}: {other} answers other than 200/503")
        if rejected != flood - max_conns:
            problems.append(f"wave {wave}: {rejected} 503s, {closed_only} closed without one")
        if during["connections"] > max_conns:
            problems.append(f"wave {wave}: {during['connections']} connections > limit")
        if probe_reply.status not in (0, 503):
            problems.append(f"wave {wave}: client during flood got {probe_reply.status}")
        if ok_reply.status != 200:
            problems.append(f"wave {wave}: service did not recover")
    await settle(server, leaks)
    problems += leaks.problems()
    first, last = per_wave[0], per_wave[-1]
    if last["fds_after"] > first["fds_after"] or last["tasks_after"] > first["tasks_after"]:
        problems.append("fds or tasks grew from wave to wave")
    if last["rss_mib_after"] > first["rss_mib_after"] + 10:
        problems.append("RSS grew by more than 10 MiB from wave to wave")
    return {
        "ok": not problems,
        "problems": problems,
        "max_connections": max_conns,
        "flood_per_wave": flood,
        "waves": waves,
        "reject_p50_ms": ms(percentile(reject_latency, 50)),
        "reject_p99_ms": ms(percentile(reject_latency, 99)),
        "reject_max_ms": ms(max(reject_latency, default=0.0)),
        "recovery_max_ms": ms(max(recovery, default=0.0)),
        "server_rejected_total": leaks.after["stats"]["rejected"],
        "rss_hwm_mib": round(server.rss()[1] / MiB, 1),
        "per_wave": per_wave,
        **leaks.figures(),
    }


# ------------------------------------------------------------------ fs stall


def fsstall(workers: int = 4, queue: int = 8, extra: int = 60) -> Figures:
    """The filesystem hangs (FUSE, "block" mode) under load.

    ``workers + queue`` requests fill the fs pool; ``extra`` more file
    requests must get 503 at once; requests that need no filesystem work
    are still answered; half of the hung clients hang up; after the release
    every late fd is closed (open-fd count back to its baseline) and the
    service is normal again.
    """
    from .fusefs import SlowFS, fuse_available  # only this scenario needs FUSE

    reason = fuse_available()
    if reason is not None:
        return {"ok": True, "skipped": reason, "problems": []}
    raise_fd_limit()
    with tempfile.TemporaryDirectory(prefix="serverio-fsstall-") as tmp:
        backing, mnt = Path(tmp, "backing"), Path(tmp, "mnt")
        backing.mkdir()
        n = workers + queue
        for i in range(n + extra):
            # Above --small-file-size: the fd stays open after preparation,
            # so an abandoned thread produces a real fd to late-close.
            (backing / f"f{i}.bin").write_bytes(bytes([i % 256]) * 100_000)
        (backing / "hello.txt").write_bytes(b"hello world\n")
        with SlowFS(backing, mnt, max_threads=max(64, 2 * n)) as fs:
            args = ["--fs-workers", str(workers), "--fs-queue", str(queue)]
            args += ["--max-connections", str(4 * (n + extra))]
            with ServerProcess(mnt, *args) as server:
                return trio.run(_fsstall, server, fs, workers, queue, extra)


async def _fsstall(server: ServerProcess, fs: Any, workers: int, queue: int, extra: int) -> Figures:
    leaks = Leaks(await server.aprobe())
    problems: list[str] = []
    n = workers + queue
    # Warm up: one normal request, so the baseline includes trio's worker
    # thread cache (threads are reused, not leaked; they idle out later).
    await get(server.port, "/hello.txt")
    fs.block()
    hung: list[trio.SocketStream] = []

    async def hang(i: int) -> None:
        s = await trio.open_tcp_stream(HOST, server.port)
        await s.send_all(f"GET /f{i}.bin HTTP/1.1\r\nHost: t\r\n\r\n".encode())
        hung.append(s)

    # The first `workers` clients take the pool's threads before the rest
    # are queued, so the clients that give up below (the first half)
    # include requests whose threads are running: those threads are the
    # ones abandoned and late-closed. Sent all at once, which requests get
    # a thread depends on scheduling, and the first half could all be
    # queued ones (cancelled while waiting, nothing to late-close).
    for i in range(workers):
        await hang(i)
    with trio.move_on_after(20):
        # Polls the FUSE layer's count: there is no event to wait on here.
        while (await trio.to_thread.run_sync(fs.stats))["blocked"] < workers:  # noqa: ASYNC110
            await trio.sleep(0.02)
    for i in range(workers, n):
        await hang(i)

    def saturated() -> bool:
        # A pool thread counts as running when it starts; it reaches the
        # FUSE open a moment later, so wait for the filesystem's own count.
        snap = server.probe()
        return bool(
            snap["fs_running"] >= workers
            and snap["fs_queued"] >= queue
            and fs.stats()["blocked"] >= workers
        )

    with trio.move_on_after(20):
        # Polls the server process: there is no event to wait on here.
        while not await trio.to_thread.run_sync(saturated):  # noqa: ASYNC110
            await trio.sleep(0.02)
    blocked = (await trio.to_thread.run_sync(fs.stats))["blocked"]
    if blocked < workers:
        problems.append(f"only {blocked} opens blocked in the filesystem")
    # More file requests: 503 at once.
    statuses: dict[int, int] = {}
    latencies: list[float] = []

    async def extra_req(i: int) -> None:
        t0 = trio.current_time()
        r = await get(server.port, f"/f{n + i}.bin", limit=5)
        latencies.append(trio.current_time() - t0)
        statuses[r.status] = statuses.get(r.status, 0) + 1

    async with trio.open_nursery() as nursery:
        for i in range(extra):
            nursery.start_soon(extra_req, i)
    # One more, on its own (the burst above measures the client's own
    # concurrency as much as the server).
    t0 = trio.current_time()
    single = await get(server.port, f"/f{n}.bin", limit=5)
    single_ms = ms(trio.current_time() - t0)
    if single.status != 503:
        problems.append(f"a lone file request during the stall got {single.status}")
    # Requests that need no filesystem work.
    nofs: list[float] = []
    nofs_ok = 0
    nofs_requests = (("OPTIONS", "*", 204), ("DELETE", "/x", 405), ("GET", "/%zz", 400))
    for method, target, want in nofs_requests:
        for _ in range(10):
            t0 = trio.current_time()
            stream = await trio.open_tcp_stream(HOST, server.port)
            await stream.send_all(f"{method} {target} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
            r = await read_reply(stream, bytearray(), limit=5)
            await stream.aclose()
            nofs.append(trio.current_time() - t0)
            nofs_ok += r.status == want
    # Half the hung clients give up: their threads are abandoned, and the
    # fds those threads open after the release must be closed late.
    for s in hung[: n // 2]:
        # An abortive close (RST): a FIN alone is a half-close, after which
        # the server still answers.
        s.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await s.aclose()

    def gave_up() -> bool:
        st = server.probe()["fs"]
        return bool(st["abandoned"] + st["cancelled_waiting"] >= n // 2)

    with trio.move_on_after(10):
        # The server notices the hang-ups while the opens are still stuck.
        while not await trio.to_thread.run_sync(gave_up):  # noqa: ASYNC110 - polls the process
            await trio.sleep(0.02)
    fs.release()
    t_rel = trio.current_time()
    answered = 0
    for s in hung[n // 2 :]:
        r = await read_reply(s, bytearray(), limit=20)
        answered += r.status == 200 and len(r.body) == 100_000
        await s.aclose()
    await settle(server, leaks, limit=20)
    drained_in = trio.current_time() - t_rel
    after = await get(server.port, "/f0.bin", limit=10)
    await settle(server, leaks, limit=5)
    snap = leaks.after
    if statuses.get(503, 0) != extra:
        problems.append(f"extra file requests got {statuses}, expected {extra} x 503")
    if max(latencies, default=0.0) > 2.0:
        problems.append(f"a 503 took {max(latencies):.2f} s")
    if nofs_ok != len(nofs):
        problems.append(f"only {nofs_ok}/{len(nofs)} requests needing no fs work answered")
    if answered != n - n // 2:
        problems.append(f"only {answered}/{n - n // 2} waiting clients got their file")
    if after.status != 200:
        problems.append(f"no recovery: {after.status}")
    if snap["fs"]["late_closed"] < 1:
        problems.append("no late close happened (scenario did not exercise it)")
    # The abandoned workers' threads, and the log pipe's writer (its own
    # one-thread pool, serverio.observe.logpipe), which the first access
    # line of a stall can start after the baseline was taken.
    problems += leaks.problems(extra_threads=workers + 1)
    return {
        "ok": not problems,
        "problems": problems,
        "fs_workers": workers,
        "fs_queue": queue,
        "blocked_in_fs": blocked,
        "extra_requests": extra,
        "extra_statuses": {str(k): v for k, v in sorted(statuses.items())},
        "extra_503_p99_ms": ms(percentile(latencies, 99)),
        "extra_503_max_ms": ms(max(latencies, default=0.0)),
        "single_503_ms": single_ms,
        "nofs_answered": f"{nofs_ok}/{len(nofs)}",
        "nofs_p99_ms": ms(percentile(nofs, 99)),
        "waiting_clients_served_after_release": answered,
        "abandoned": snap["fs"]["abandoned"],
        "late_closed": snap["fs"]["late_closed"],
        "pool_rejected": snap["fs"]["rejected"],
        "drained_after_release_s": round(drained_in, 2),
        **leaks.figures(),
    }


# ------------------------------------------------------------------ shutdown


def shutdown(
    transfers: int = 40, slow: int = 10, idle: int = 10, shutdown_timeout: float = 4.0
) -> Figures:
    """SIGTERM to ``python -m serverio`` during ``transfers`` 8 MiB transfers.

    ``transfers - slow`` clients read at full speed once the signal is sent:
    they must finish intact (sha256 of every byte).  ``slow`` clients (tiny
    receive buffer, 320 KiB/s) cannot finish in time: they must be cut at
    ``--shutdown-timeout``.  ``idle`` keep-alive connections must close at
    once.  No connection attempted after the signal may be served, and the
    process must exit 0 right after the deadline.
    """
    raise_fd_limit()
    with tempfile.TemporaryDirectory(prefix="serverio-shutdown-") as tmp:
        root = Path(tmp)
        data = make_file(root / "big.bin", 8 * MiB, 2)
        (root / "hello.txt").write_bytes(b"hello world\n")
        args = ["--shutdown-timeout", str(shutdown_timeout), "--write-timeout", "60"]
        args += ["--max-connections", str(transfers + idle + 64)]
        server = ServerProcess(root, *args, probed=False)
        try:
            return trio.run(_shutdown, server, data, transfers, slow, idle, shutdown_timeout)
        finally:
            server.stop()


async def _shutdown(
    server: ServerProcess, data: bytes, transfers: int, slow: int, idle: int, drain: float
) -> Figures:
    import hashlib

    want = hashlib.sha256(data).hexdigest()
    problems: list[str] = []
    signalled = trio.Event()
    all_started = trio.Event()
    t_sig = 0.0
    started = 0
    fast_intact = fast_bad = 0
    slow_cut: list[float] = []
    slow_finished = 0
    idle_closed: list[float] = []
    refused = served_after = 0

    async def transfer(is_slow: bool) -> None:
        nonlocal started, fast_intact, fast_bad, slow_finished
        s = trio.socket.socket()
        if is_slow:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
        await s.connect((HOST, server.port))
        stream = trio.SocketStream(s)
        await stream.send_all(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
        buf = bytearray()
        while b"\r\n\r\n" not in buf:
            chunk = await stream.receive_some(65536)
            if not chunk:
                break
            buf += chunk
        started += 1
        if started == transfers:
            all_started.set()
        await signalled.wait()
        end = buf.find(b"\r\n\r\n")
        body = hashlib.sha256(buf[end + 4 :])
        got = len(buf) - end - 4
        with trio.move_on_after(drain + 30):
            while True:
                try:
                    chunk = await stream.receive_some(16384 if is_slow else 1 << 20)
                except trio.BrokenResourceError:
                    chunk = b""
                if not chunk:
                    break
                body.update(chunk)
                got += len(chunk)
                if is_slow:
                    await trio.sleep(0.05)
        t_end = trio.current_time() - t_sig
        await stream.aclose()
        complete = got == len(data) and body.hexdigest() == want
        if is_slow:
            if complete:
                slow_finished += 1
            else:
                slow_cut.append(t_end)
        elif complete:
            fast_intact += 1
        else:
            fast_bad += 1

    async def idle_conn(ready: trio.Event) -> None:
        stream = await trio.open_tcp_stream(HOST, server.port)
        await stream.send_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
        await read_reply(stream, bytearray(), limit=10)
        ready.set()
        await signalled.wait()
        closed, _ = await wait_closed(stream, drain + 5)
        if closed:
            idle_closed.append(trio.current_time() - t_sig)
        await stream.aclose()

    async def newcomer() -> None:
        """Keep trying to connect after the signal; nothing may be served."""
        nonlocal refused, served_after
        while trio.current_time() - t_sig < drain + 0.5 and server.proc.poll() is None:
            try:
                stream = await trio.open_tcp_stream(HOST, server.port)
            except OSError:
                refused += 1
            else:
                try:
                    await stream.send_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
                    _, got = await wait_closed(stream, 2)
                except (trio.BrokenResourceError, OSError):
                    got = b""
                served_after += bool(got)
                await stream.aclose()
            await trio.sleep(0.05)

    async with trio.open_nursery() as nursery:
        readies = []
        for _ in range(idle):
            ev = trio.Event()
            readies.append(ev)
            nursery.start_soon(idle_conn, ev)
        for i in range(transfers):
            nursery.start_soon(transfer, i < slow)
        with trio.fail_after(60):
            await all_started.wait()
            for ev in readies:
                await ev.wait()
        t_sig = trio.current_time()
        server.signal(signal.SIGTERM)
        signalled.set()
        nursery.start_soon(newcomer)
        rc = await trio.to_thread.run_sync(server.wait, drain + 15)
        exited_after = trio.current_time() - t_sig
    fast = transfers - slow
    if fast_intact != fast:
        problems.append(f"{fast_bad} of {fast} fast transfers not intact")
    if slow_finished:
        problems.append(f"{slow_finished} slow transfers finished (the scenario needs them cut)")
    early = [t for t in slow_cut if t < drain - 0.2]
    late = [t for t in slow_cut if t > drain + 2.0]
    if early or late:
        problems.append(f"slow transfers cut early {len(early)} / late {len(late)}")
    if len(idle_closed) != idle or max(idle_closed, default=0.0) > 1.0:
        worst = max(idle_closed, default=0.0)
        problems.append(f"idle: {len(idle_closed)}/{idle} closed, slowest {worst:.2f} s")
    if served_after:
        problems.append(f"{served_after} connections made after the signal were served")
    # The server's own count: every accept() it made, admitted or not.
    summary = server.stderr().strip().splitlines()[-1:]
    fields = dict(kv.split("=", 1) for kv in (summary[0].split() if summary else []) if "=" in kv)
    accepted_after = int(fields.get("accepted", "-1")) - (transfers + idle)
    if accepted_after != 0:
        problems.append(f"server accepted {accepted_after} connections after the signal")
    if rc != 0:
        problems.append(f"exit status {rc}")
    if exited_after > drain + 3.0:
        problems.append(f"exited {exited_after:.2f} s after the signal")
    return {
        "ok": not problems,
        "problems": problems,
        "transfers": transfers,
        "file_mib": 8,
        "shutdown_timeout_s": drain,
        "fast_intact": f"{fast_intact}/{fast}",
        "slow_cut": f"{len(slow_cut)}/{slow}",
        "slow_cut_after_s_min_max": [
            round(min(slow_cut, default=0.0), 2),
            round(max(slow_cut, default=0.0), 2),
        ],
        "idle_closed": f"{len(idle_closed)}/{idle}",
        "idle_closed_max_ms": ms(max(idle_closed, default=0.0)),
        "connects_after_signal_refused": refused,
        "connects_after_signal_served": served_after,
        "server_accepted_after_signal": accepted_after,
        "exit_status": rc,
        "exited_after_s": round(exited_after, 2),
        "server_summary": summary,
    }


# ------------------------------------------------------------------ truncation

_BLOCK = 4096


def versioned(file: int, version: int, size: int) -> bytes:
    """File contents that say which file and version any 4 KiB block is from."""
    rng = random.Random(file * 1_000_003 + version)
    out = bytearray()
    for k in range(-(-size // _BLOCK)):
        tag = b"<f=%03d v=%06d b=%08d>" % (file, version, k)
        out += tag + rng.randbytes(_BLOCK - len(tag))
    return bytes(out[:size])


_TAG_LEN = len(versioned(0, 0, 32)[:32].split(b">")[0]) + 1


def _version_of(body: bytes, start: int) -> tuple[int, int] | None:
    k0 = -(-start // _BLOCK) * _BLOCK
    at = k0 - start
    tag = body[at : at + _TAG_LEN]
    if len(tag) < _TAG_LEN or not tag.startswith(b"<f="):
        return None
    return int(tag[3:6]), int(tag[9:15])


def truncation(transfers: int = 120, files: int = 4, size: int = 2 * MiB) -> Figures:
    """Files are truncated in place or replaced (rename) during transfers.

    Guarantee, checked by the client on every response, on both the
    sendfile and the buffered path, for whole files and ranges: either the
    full Content-Length arrives and every byte equals the file version that
    was open when the response started (the old inode keeps being served
    after a rename), or the connection is cut short.  Never different bytes,
    never fewer bytes with a clean end.
    """
    raise_fd_limit()
    out: Figures = {"ok": True, "problems": []}
    for mode in ("sendfile", "buffered"):
        with tempfile.TemporaryDirectory(prefix="serverio-trunc-") as tmp:
            root = Path(tmp)
            for f in range(files):
                (root / f"f{f}.bin").write_bytes(versioned(f, 0, size))
            (root / "hello.txt").write_bytes(b"hello world\n")
            args = ["--no-sendfile"] if mode == "buffered" else []
            with ServerProcess(root, *args) as server:
                fig = trio.run(
                    _truncation, server, root, transfers // 2, files, size, mode == "sendfile"
                )
        out[mode] = fig
        out["problems"] += [f"{mode}: {p}" for p in fig.pop("problems")]
    out["ok"] = not out["problems"]
    return out


async def _truncation(
    server: ServerProcess, root: Path, transfers: int, files: int, size: int, sendfile: bool
) -> Figures:
    leaks = Leaks(await server.aprobe())
    problems: list[str] = []
    version = [0] * files
    cur_size = [size] * files
    ops = {"truncate": 0, "replace": 0}
    outcomes = {"intact": 0, "cut": 0, "mismatch": 0, "overlong": 0, "zeroed_by_truncation": 0}

    def zeroed_tail(f: int, v: int, start: int, body: bytes) -> bool:
        """The one deviation the kernel can cause on the sendfile path.

        Pages handed to ``sendfile`` stay referenced, not copied, until the
        receiver reads them; truncating the file zeroes the page-cache folio
        that straddles the new end (on ext4 with large folios, up to 2 MiB
        of it when the folio cannot be split because it is referenced).  So
        a response can complete with zeros where the file was cut, and only
        there: every byte must match, or be zero at an offset at or past a
        size this very inode was truncated to.
        """
        cuts = trunc_log.get((f, v))
        if not cuts:
            return False
        limit = min(cuts)
        want = versioned(f, v, start + len(body))[start:]
        return all(
            b == w or (b == 0 and start + i >= limit)
            for i, (b, w) in enumerate(zip(body, want, strict=True))
        )

    statuses: dict[int, int] = {}
    mismatches: list[Figures] = []
    # (file, version) -> sizes it was truncated to, in place, in order
    trunc_log: dict[tuple[int, int], list[int]] = {}
    done = trio.Event()
    rng = random.Random(5)
    tmpname = root / ".tmp-replace"

    def mutate_once() -> None:
        f = rng.randrange(files)
        path = root / f"f{f}.bin"
        if rng.random() < 0.5 and cur_size[f] > _BLOCK:
            # In place: the open inode shrinks under the sender.  The size
            # is logged before the truncation: the server can notice it, cut
            # the response and the client judge the bytes (zeros past this
            # size allowed) before this thread runs again after the call.
            cur_size[f] = rng.randrange(0, cur_size[f])
            trunc_log.setdefault((f, version[f]), []).append(cur_size[f])
            os.truncate(path, cur_size[f])
            ops["truncate"] += 1
        else:
            version[f] += 1
            tmpname.write_bytes(versioned(f, version[f], size))
            os.replace(tmpname, path)
            cur_size[f] = size
            ops["replace"] += 1

    async def mutator() -> None:
        while not done.is_set():
            await trio.to_thread.run_sync(mutate_once)
            await trio.sleep(0.01)

    async def client(jobs: list[int]) -> None:
        for j in jobs:
            await one(j)

    async def one(j: int) -> None:
        r = random.Random(j)
        f = r.randrange(files)
        kind = r.choice(("full", "full", "range", "suffix", "small"))
        start = 0
        hdr = ""
        if kind == "range":
            start = r.randrange(size // 2)
            hdr = f"Range: bytes={start}-{start + r.randrange(size // 2)}\r\n"
        elif kind == "suffix":
            hdr = f"Range: bytes=-{r.randrange(1, size)}\r\n"
        elif kind == "small":
            start = r.randrange(size // 2)
            hdr = f"Range: bytes={start}-{start + r.randrange(_BLOCK + 100, 60_000)}\r\n"
        s = trio.socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        await s.connect((HOST, server.port))
        stream = trio.SocketStream(s)
        # A second request is pipelined behind the file: a response that
        # ended short but let the connection go on would swallow its bytes
        # into the body (a mismatch) instead of looking merely cut.
        follow = b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
        try:
            first = f"GET /f{f}.bin HTTP/1.1\r\nHost: t\r\n{hdr}\r\n".encode()
            await stream.send_all(first + follow)
            buf = bytearray()
            # Read slowly, so files change while responses are in flight.
            while b"\r\n\r\n" not in buf:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    break
                buf += chunk
            end = buf.find(b"\r\n\r\n")
            if end == -1:
                outcomes["cut"] += 1
                return
            head = bytes(buf[:end]).decode("latin-1").lower()
            status = int(head.split(" ", 2)[1])
            statuses[status] = statuses.get(status, 0) + 1
            if status not in (200, 206):
                return
            cl = int(head.split("content-length: ")[1].split("\r\n")[0])
            if status == 206:
                cr = head.split("content-range: bytes ")[1].split("\r\n")[0]
                start = int(cr.split("-")[0])
            body = bytearray(buf[end + 4 :])
            while True:
                try:
                    chunk = await stream.receive_some(65536)
                except trio.BrokenResourceError:
                    chunk = b""
                if not chunk:
                    break
                body += chunk
                await trio.sleep(0.001)
        finally:
            await stream.aclose()
        # ``body`` now holds everything after the first head: the file's
        # bytes, then (if it completed) the whole answer to the follow-up.
        rest = bytes(body[cl:])
        body = body[:cl]
        verdict, candidates = judge(f, start, bytes(body))
        if len(body) < cl:
            # Cut short: fine, provided what did arrive is the file's bytes
            # (a response that ended short but let the connection go on
            # would have the follow-up's answer here).
            outcomes["cut" if verdict != "bad" else "mismatch"] += 1
            if verdict == "bad":
                mismatches.append({"kind": kind, "cut_tail": bytes(body[-60:]).decode("latin-1")})
        elif not (rest.startswith(b"HTTP/1.1 200 ") and rest.endswith(b"\r\n\r\nhello world\n")):
            # Complete, yet the follow-up's answer is not what came next.
            outcomes["overlong" if rest else "cut"] += 1
            if rest:
                mismatches.append({"kind": kind, "desync": rest[:80].decode("latin-1")})
        elif verdict == "intact":
            outcomes["intact"] += 1
        elif verdict == "zeroed":
            # Zero-copy: bytes already handed to the kernel can be zeroed by
            # a later in-place truncation (see zeroed_tail).
            outcomes["zeroed_by_truncation"] += 1
        else:
            outcomes["mismatch"] += 1
            if candidates and len(mismatches) < 5:
                want = versioned(f, candidates[0], start + cl)[start:]
                diff = [i for i in range(cl) if want[i] != body[i]]
                mismatches.append(
                    {
                        "kind": kind,
                        "status": status,
                        "start": start,
                        "length": cl,
                        "version": candidates[0],
                        "first_diff_at": start + diff[0] if diff else None,
                        "last_diff_at": start + diff[-1] if diff else None,
                        "diff_bytes": len(diff),
                        "diff_all_zero": all(body[i] == 0 for i in diff),
                        "size_now": cur_size[f],
                        "truncations": trunc_log.get((f, candidates[0]), []),
                    }
                )

    def judge(f: int, start: int, body: bytes) -> tuple[str, list[int]]:
        """ "intact", "zeroed" (sendfile only) or "bad", and the versions tried."""
        fv = _version_of(body, start)
        if fv is not None:
            candidates = [fv[1]] if fv[0] == f else []
        else:
            # Too short to hold a block tag: any version of this file that
            # has exactly these bytes there will do.
            candidates = list(range(version[f] + 1))
        if any(versioned(f, v, start + len(body))[start:] == body for v in candidates):
            return "intact", candidates
        if sendfile and any(zeroed_tail(f, v, start, body) for v in candidates):
            return "zeroed", candidates
        return "bad", candidates

    per_client = 4
    jobs = list(range(transfers))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(mutator)
        with trio.fail_after(300):
            async with trio.open_nursery() as clients:
                for c in range(0, transfers, per_client):
                    clients.start_soon(client, jobs[c : c + per_client])
        done.set()
    await settle(server, leaks)
    stats = leaks.after["stats"]
    if outcomes["mismatch"] or outcomes["overlong"]:
        problems.append(f"{outcomes['mismatch']} mismatched, {outcomes['overlong']} overlong")
    if not stats["truncated"]:
        problems.append("no transfer met a truncation (scenario did not exercise it)")
    if set(statuses) - {200, 206, 416, 503}:
        problems.append(f"unexpected statuses {statuses}")
    problems += leaks.problems()
    return {
        "problems": problems,
        "transfers": transfers,
        "ops": ops,
        "outcomes": outcomes,
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "server_truncated_aborts": stats["truncated"],
        "mismatch_details": mismatches,
        **leaks.figures(),
    }


# ------------------------------------------------------------------ slowhttptest


def slowhttptest(conns: int = 1000, head_timeout: float = 2.0, length: int = 15) -> Figures:
    """An independent slowloris check with slowhttptest (Debian), if installed.

    slowhttptest opens ``conns`` slow-header connections at 500/s and
    probes the service every second; the server must stay available every
    second and leave slowhttptest no connection to hold.
    """
    import shutil

    exe = shutil.which("slowhttptest")
    if exe is None:
        return {"ok": True, "skipped": "slowhttptest not installed", "problems": []}
    raise_fd_limit()
    with tempfile.TemporaryDirectory(prefix="serverio-sht-") as tmp:
        root = Path(tmp)
        (root / "hello.txt").write_bytes(b"hello world\n")
        args = ["--head-timeout", str(head_timeout), "--max-connections", str(conns + 64)]
        with ServerProcess(root, *args) as server:
            before = server.probe()
            prefix = str(root / "report")
            cmd = [exe, "-H", "-c", str(conns), "-i", "1", "-r", "500", "-l", str(length)]
            cmd += ["-p", "2", "-g", "-o", prefix, "-u", f"http://{HOST}:{server.port}/hello.txt"]
            done = subprocess.run(
                cmd, capture_output=True, text=True, timeout=length + 60, check=False
            )
            after = server.probe()
            rows = Path(prefix + ".csv").read_text().splitlines()[1:]
    # CSV: seconds, closed, pending, connected, service available (0 = down)
    table = [[int(x) for x in row.split(",")] for row in rows if row]
    unavailable = [r[0] for r in table if r[4] == 0]
    exit_line = next(
        (ln for ln in done.stdout.splitlines() if "Exit status" in ln), "Exit status: ?"
    )
    exit_text = "".join(ch for ch in exit_line if ch.isprintable()).split(":", 1)[1]
    exit_text = exit_text.replace("[1;36m", "").replace("[0m", "").strip()
    problems = []
    if unavailable:
        problems.append(f"service unavailable at seconds {unavailable}")
    if after["connections"]:
        problems.append(f"{after['connections']} connections left")
    return {
        "ok": not problems,
        "problems": problems,
        "conns": conns,
        "head_timeout_s": head_timeout,
        "seconds": len(table),
        "max_connected": max((r[3] for r in table), default=0),
        "seconds_unavailable": len(unavailable),
        "slowhttptest_exit": exit_text,
        "server_timeouts_head": after["stats"]["timeouts_head"] - before["stats"]["timeouts_head"],
    }
