"""One serving process: listeners, signals, the admin endpoint, the log file.

Used by the CLI for a single process and by each ``--workers`` process
(:mod:`serverio.ops.workers`), which adds its own tasks (a metrics socket for
the supervisor, a watch on the supervisor's pipe).

Start and stop (docs/features.md "Starting and stopping"): once listening,
the ``Serving`` lines, sd_notify ``READY=1`` (:mod:`serverio.ops.notify`)
and ``--open``; on the first stop request one line on stderr (``draining N
responses (Ctrl-C again to stop now)``, when N is not 0) and ``STOPPING=1``; at exit one
:func:`summary_line` (every counter too with ``-v``).  A ``--workers``
process runs with ``announce`` off and hands its counters over instead
(``on_exit``): the supervisor says all of that once for all workers.

Signals: the first SIGINT/SIGTERM starts the graceful drain, a second one
aborts; SIGHUP reopens ``--access-log-file`` (logrotate's ``postrotate``).
Only the signals the platform has are watched: Windows has no SIGHUP, and
its Ctrl+Break arrives as SIGBREAK, which drains like Ctrl+C (SIGINT).

Windows cannot send SIGTERM from outside (``taskkill /F``, ``TerminateProcess``
and Python's ``send_signal(SIGTERM)`` end the process at once, exit status
1), and Ctrl+C / Ctrl+Break reach only processes sharing a console.  So an
admin listener bound to a loopback address also takes ``POST /shutdown``:
202, and the same as a stop signal (the first drains, honouring
``--shutdown-delay``; a second aborts), on every platform.  Not on a
non-loopback admin address: whoever reaches it could stop the server.
"""

from __future__ import annotations

import errno
import functools
import ipaddress
import signal
import ssl
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence

import trio

from ..app.admin import PROMETHEUS_TYPE, AdminHandler, open_admin_listener, serve_admin, text
from ..app.server import Server, public_addresses
from ..concurrency.blocking import Pool, run_blocking
from ..config import Config
from ..errors import ConfigError
from ..observe.collector import COLLECTOR, YOUNG_IDLE, Collector
from ..observe.logpipe import route_logging
from .lan import network_urls
from .metrics import SUMMARY_CACHE_KEYS, caches_of, render, snapshot
from .notify import notify
from .qr import qr_text

__all__ = [
    "EXIT_ADDRESS_IN_USE",
    "EXIT_FAILURE",
    "EXIT_USAGE",
    "ExtraTask",
    "bind_exit_status",
    "browse",
    "browser_url",
    "counters_line",
    "draining_line",
    "in_flight",
    "make_admin_handler",
    "run_server",
    "summary_line",
    "url_host",
    "watch_collector",
]

# Exit statuses (docs/cli.md "Exit status"): 0 stopped on request, 1 a
# runtime failure, 2 a usage or configuration error, 3 an address in use
# at bind, kept apart from 2 so that a script or a unit's
# RestartPreventExitStatus= can tell "another server has the port" (retry
# later, pick another port) from "the command line is wrong" (never retry).
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_ADDRESS_IN_USE = 3
# EADDRINUSE, and Windows' WSAEADDRINUSE (10048), which its sockets report.
_IN_USE = frozenset(
    code for code in (errno.EADDRINUSE, getattr(errno, "WSAEADDRINUSE", None)) if code
)

# A task started next to the server: gets the server and a "started" hook.
ExtraTask = Callable[[Server], Awaitable[None]]


def _signal_number(name: str) -> int | None:
    value: int | None = getattr(signal, name, None)
    return value


# -1 where the platform has no SIGHUP: never equal to a delivered signal.
SIGHUP: int = _signal_number("SIGHUP") or -1
SIGNALS: tuple[int, ...] = tuple(
    s for s in (signal.SIGINT, signal.SIGTERM, SIGHUP, _signal_number("SIGBREAK") or -1) if s > 0
)


def url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def bind_exit_status(exc: OSError) -> int:
    """3 for an address in use (EADDRINUSE), else 2 (a bind refused for
    another reason: a bad address, no permission for a low port)."""
    return EXIT_ADDRESS_IN_USE if exc.errno in _IN_USE else EXIT_USAGE


def _listen_error(cfg: Config, exc: OSError) -> str:
    reason = exc.strerror or str(exc)
    where = " and ".join(f"{h} port {p}" for h, p in public_addresses(cfg))
    return f"serverio: error: cannot listen on {where}: {reason}"


async def run_server(
    cfg: Config,
    *,
    ssl_context: ssl.SSLContext | None = None,
    listeners: Sequence[trio.SocketListener] | None = None,
    announce: bool = True,
    admin: bool = True,
    extra: Sequence[ExtraTask] = (),
    on_ready: Callable[[Server], None] | None = None,
    on_exit: Callable[[Server], None] | None = None,
) -> int:
    """Serve until SIGINT/SIGTERM (or an extra task's shutdown); exit status.

    ``announce``: the Serving lines, sd_notify and the draining line (the
    module's "Start and stop"); ``on_exit`` replaces the summary line.

    Cancellation handling: this is a process's main task; on a second signal
    the server aborts (connections cut, stuck pool threads abandoned) and the
    function still returns normally after printing the summary.
    """
    try:
        server = Server(cfg, listeners=listeners, ssl_context=ssl_context)
    except OSError as exc:  # the access log file cannot be opened
        reason = exc.strerror or str(exc)
        print(
            f"serverio: error: cannot open --access-log-file {cfg.log.access_log_file}: {reason}",
            file=sys.stderr,
        )
        return 2
    admin_listener = await _open(server, admin)
    if isinstance(admin_listener, int):
        return admin_listener  # the exit status of a failed bind
    stop = _Stop(server, announce)
    admin_handler = make_admin_handler(server, lambda: stop.count > 0)
    on_post = (
        stop.admin_request
        if admin_listener is not None and _is_loopback(admin_listener.socket.getsockname()[0])
        else None
    )

    # Warnings logged while serving take the server's stderr pipe: never
    # a blocking write on the event loop (serverio.observe.logpipe).
    with route_logging(server.services.messages), trio.open_signal_receiver(*SIGNALS) as signals:
        async with trio.open_nursery() as nursery:

            async def run(task_status: trio.TaskStatus[Server] = trio.TASK_STATUS_IGNORED) -> None:
                await server.serve(task_status=task_status)
                nursery.cancel_scope.cancel()

            await nursery.start(run)
            started = trio.current_time()
            # Start-up is done: take what it made out of the collector's
            # reach, then measure every collection from here on
            # (serverio.observe.collector).
            COLLECTOR.after_start()
            COLLECTOR.install()
            nursery.start_soon(watch_collector, server)
            if admin_listener is not None:
                await nursery.start(
                    functools.partial(serve_admin, on_post=on_post), admin_listener, admin_handler
                )
            for task in extra:
                nursery.start_soon(task, server)
            if announce:
                _ready(server, admin_listener, nursery)
            if on_ready is not None:
                on_ready(server)
            async for signum in signals:
                if signum == SIGHUP:
                    server.access_log.reopen()
                    continue
                stop.request()
        server.access_log.close()
        if on_exit is not None:
            on_exit(server)
        else:
            _summary(server, trio.current_time() - started)
    return 0


# How often the warm-file cache's growth, the promotions into the oldest
# generation and the young generations' size are looked at (Collector.tick),
# and how often while idle.
_COLLECTOR_PERIOD = 0.1
_COLLECTOR_IDLE_PERIOD = 1.0


async def watch_collector(
    server: Server,
    collector: Collector = COLLECTOR,
    period: float = _COLLECTOR_PERIOD,
    idle_period: float = _COLLECTOR_IDLE_PERIOD,
) -> None:
    """Every ``period`` seconds, let the collector freeze what the warm-file
    cache grew by or what reached the oldest generation, and collect the
    young generations grown past their bound
    (:meth:`~serverio.observe.collector.Collector.tick`; the cache's
    entries counted with the files' metadata kept apart from their bytes).
    After a look that found the process idle (no collection since the one
    before, fewer than :data:`~serverio.observe.collector.YOUNG_IDLE`
    young objects), the next comes after ``idle_period``: an idle server
    wakes once a second for this, a busy one ten times.

    Cancellation handling: cancelled with the process's nursery; nothing
    is held between two looks (a freeze is synchronous).
    """
    files = server.files
    wait = period
    seen = sum(collector.collections)
    while True:
        await trio.sleep(wait)
        meta = files.meta
        collector.tick(len(files) + (len(meta) if meta is not None else 0))
        now_seen = sum(collector.collections)
        idle = now_seen == seen and collector.young < YOUNG_IDLE
        wait, seen = (idle_period if idle else period), now_seen


async def _open(server: Server, admin: bool) -> trio.SocketListener | int | None:
    """Bind the listeners and the admin listener; a failure is its one
    error line on stderr and the exit status (2, or 3 for an address in use)."""
    cfg = server.config
    try:
        await server.open_listeners()
        return (
            await open_admin_listener(cfg.listeners.admin_bind)
            if admin and cfg.listeners.admin_bind
            else None
        )
    except ConfigError as exc:
        print(f"serverio: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        if server.listeners:
            print(
                f"serverio: error: cannot listen on --admin-bind {cfg.listeners.admin_bind}: "
                f"{exc.strerror or exc}",
                file=sys.stderr,
            )
        else:
            print(_listen_error(cfg, exc), file=sys.stderr)
        return bind_exit_status(exc)


def _ready(server: Server, admin: trio.SocketListener | None, nursery: trio.Nursery) -> None:
    """Listening: the Serving lines, sd_notify READY=1, ``--open``."""
    cfg = server.config
    _announce(server, admin, cfg.root)
    if cfg.live.qr and server.listeners:
        print(qr_text(_qr_url(server)), flush=True)
    notify("READY=1")  # Type=notify units (sd_notify(3))
    if cfg.live.open_browser and server.listeners:
        nursery.start_soon(browse, _first_url(server))


def _summary(server: Server, uptime: float) -> None:
    """The exit line; every counter too with ``-v``.

    Through the stderr pipe: written at once if its last flush finished,
    dropped if a write to stderr is stuck (the process must still exit).
    """
    stats = server.stats.as_dict()
    say = server.services.messages.put
    say(summary_line(stats, uptime), True)
    if server.config.log.verbose:
        say(counters_line(stats, caches_of(server)), True)


def in_flight(server: Server) -> int:
    """Connections with a request being answered (what a drain waits for)."""
    return sum(1 for c in server.connections if c.in_flight)


def draining_line(responses: int, unit: str = "response") -> str:
    """The one line printed when a graceful stop begins."""
    plural = "" if responses == 1 else "s"
    return f"serverio: draining {responses} {unit}{plural} (Ctrl-C again to stop now)"


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024 or unit == "GiB":
            break
    return f"{value:.1f} {unit}"


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, sec = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{sec:02d}s" if hours else f"{minutes}m{sec:02d}s"


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def summary_line(stats: Mapping[str, int], uptime: float) -> str:
    """The exit line: requests answered, client errors (4xx: a 404 is the
    client's, not the server's) and server errors (5xx) apart, bytes, uptime,
    and the log lines dropped (a stalled log reader) if any.

    The ~30 counters behind it are in ``/metrics`` and, with ``-v``, in
    :func:`counters_line`.
    """
    line = (
        f"serverio: stopped: {_count(stats.get('completed', 0), 'request')}, "
        f"{_count(stats.get('client_errors', 0), 'client error')} (4xx), "
        f"{_count(stats.get('server_errors', 0), 'server error')} (5xx), "
        f"{_size(stats.get('bytes_sent', 0))} sent, up {_duration(uptime)}"
    )
    # Log lines a stalled reader cost (serverio.observe.logpipe); said only
    # when there were some.
    dropped = stats.get("log_lines_dropped", 0) + stats.get("log_messages_dropped", 0)
    if dropped:
        line += f", {dropped} log line{'' if dropped == 1 else 's'} dropped"
    return line


def counters_line(stats: Mapping[str, int], caches: Mapping[str, Mapping[str, int]]) -> str:
    """Every counter as ``key=value`` on one line, then each cache's
    :data:`SUMMARY_CACHE_KEYS` (``-v``)."""
    parts = [f"{k}={v}" for k, v in stats.items()]
    for name, numbers in caches.items():
        parts += [f"cache_{name}_{k}={numbers[k]}" for k in SUMMARY_CACHE_KEYS if k in numbers]
    return "serverio: counters: " + " ".join(parts)


def _announce(server: Server, admin: trio.SocketListener | None, root: str) -> None:
    """The "Serving ROOT at URL" lines (and the admin URL) on standard output;
    for a wildcard listener the "Network: URL" lines on standard error."""
    for listener in server.listeners:
        name = listener.socket.getsockname()
        scheme = "https" if server.tls_of(listener) is not None else "http"
        print(f"Serving {root} at {scheme}://{url_host(str(name[0]))}:{name[1]}/", flush=True)
        for url in network_urls(scheme, str(name[0]), name[1]):  # 0.0.0.0, :: (ops/lan.py)
            print(f"Network: {url}", file=sys.stderr, flush=True)
    if admin is not None:
        name = admin.socket.getsockname()
        print(f"Admin at http://{url_host(name[0])}:{name[1]}/metrics", flush=True)
    proxy = server.config.proxy
    for route in proxy.routes + ((proxy.fallback,) if proxy.fallback is not None else ()):
        if not route.loopback:  # allowed, but said once (the upstream is another host)
            print(
                f"serverio: --proxy {route.prefix}: upstream {route.upstream} "
                "is not on this machine",
                file=sys.stderr,
                flush=True,
            )


def _qr_url(server: Server) -> str:
    """--qr's URL: the first network URL of a wildcard listener, else the first URL."""
    for listener in server.listeners:
        host, port = listener.socket.getsockname()[:2]
        scheme = "https" if server.tls_of(listener) is not None else "http"
        urls = network_urls(scheme, str(host), int(port))
        if urls:
            return urls[0]
    return _first_url(server)


def _first_url(server: Server) -> str:
    listener = server.listeners[0]
    host, port = listener.socket.getsockname()[:2]
    scheme = "https" if server.tls_of(listener) is not None else "http"
    return browser_url(scheme, str(host), int(port))


def browser_url(scheme: str, host: str, port: int) -> str:
    """The URL ``--open`` opens: a wildcard bind (0.0.0.0, ::) is reached
    as localhost, which every browser resolves."""
    host = "localhost" if host in ("0.0.0.0", "::", "") else host
    return f"{scheme}://{url_host(host)}:{port}/"


async def browse(url: str) -> None:
    """``--open``: show ``url`` in the user's web browser (webbrowser.open).

    Cancellation handling: webbrowser.open may wait for the browser it
    starts (a text-mode one runs in the foreground), so it runs through
    :func:`~serverio.concurrency.blocking.run_blocking` in a pool of its own
    (one thread, named ``serverio-browser``; never trio's default limiter),
    abandoned on cancellation: stopping the server never waits for it.
    """
    import webbrowser  # only --open needs it

    opened = await run_blocking(Pool("browser", 1, 0), webbrowser.open, url)
    if not opened:
        print(f"serverio: --open: no web browser found for {url}", file=sys.stderr, flush=True)


class _Stop:
    """Stop requests, from a signal or ``POST /shutdown``: the first drains,
    the next abort."""

    def __init__(self, server: Server, announce: bool) -> None:
        self.server = server
        self.announce = announce  # a --workers process: the supervisor says it
        self.count = 0

    def request(self) -> None:
        self.count += 1
        # Said through the stderr pipe: a stalled stderr must not stop the
        # stop itself.
        say = self.server.services.messages.put
        if self.count == 1:
            if self.announce:
                waiting = in_flight(self.server)
                if waiting:  # nothing in flight: the stop is immediate, nothing to say
                    say(draining_line(waiting), True)
                notify("STOPPING=1")
            self.server.shutdown()
        else:
            if self.announce:
                say("serverio: stopping now", True)
            self.server.abort()

    def admin_request(self, path: str) -> tuple[int, str, bytes]:
        if path != "/shutdown":
            return text(404, "not found\n")
        self.request()
        return text(202, "draining\n" if self.count == 1 else "aborting\n")


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def make_admin_handler(server: Server, stopping: Callable[[], bool]) -> AdminHandler:
    """``/metrics`` and ``/healthz`` of one serving process.

    Health is 503 from the first stop signal on (``stopping``) and while the
    server drains, so a load balancer stops sending before the listener
    closes.
    """

    async def handler(path: str) -> tuple[int, str, bytes]:
        if path == "/metrics":
            return 200, PROMETHEUS_TYPE, render(snapshot(server)).encode()
        if path == "/healthz":
            if stopping() or server.draining:
                return text(503, "draining\n")
            return text(200, "ok\n")
        return text(404, "not found\n")

    return handler
