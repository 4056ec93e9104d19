"""Counters: a plain object for tests, one line at shutdown (with the caches' numbers).

The counters are kept in groups, one small slotted dataclass each, by what
they count: ``stats.conns`` (sockets and connections), ``stats.responses``
(what was sent), ``stats.timeouts`` (which deadline fired),
``stats.content`` (listings, codings, digests), ``stats.h2`` (HTTP/2
connections and streams), ``stats.site`` (site rules),
``stats.writes`` (uploads), ``stats.proxy`` (the reverse proxy) and
``stats.log`` (log lines dropped).  A hot path binds
the group it counts in once (``responses = stats.responses`` where a
connection or a request starts), so grouping costs no attribute hop per
increment.

Outside the process the counters stay one flat table: :meth:`Stats.as_dict`
gives every counter under its flat name (``timeouts_head``,
``h2_streams``, ...) in one fixed order (:data:`FLAT`), which the
``/metrics`` text, the snapshots merged across ``--workers`` and the exit
summary line are made from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

__all__ = [
    "FLAT",
    "ConnectionStats",
    "ContentStats",
    "H2Stats",
    "LogStats",
    "ProxyStats",
    "ResponseStats",
    "SiteStats",
    "Stats",
    "TimeoutStats",
    "WriteStats",
]


@dataclass(slots=True)
class ConnectionStats:
    """Sockets and connections (serverio.app.server, serverio.net.connection)."""

    accepted: int = 0  # sockets accepted (admitted or not)
    rejected: int = 0  # turned away by --max-connections (503)
    cancelled: int = 0  # connections cut by shutdown or abort
    resets: int = 0  # peer reset / broken pipe while we were writing
    internal_errors: int = 0  # a bug escaped a connection task (logged, survived)
    tls_handshake_failures: int = 0  # TLS hello never completed (plain HTTP, bad client)


@dataclass(slots=True)
class ResponseStats:
    """What was sent (serverio.pipeline.request.record, the emitters)."""

    completed: int = 0  # responses written in full
    client_errors: int = 0  # 4xx responses
    server_errors: int = 0  # 5xx responses
    truncated: int = 0  # file shrank while being sent: connection aborted
    sendfile_responses: int = 0  # bodies sent with os.sendfile
    buffered_responses: int = 0  # file bodies sent through user space
    read_errors: int = 0  # the file failed (EIO) mid-body: connection aborted
    bytes_sent: int = 0


@dataclass(slots=True)
class TimeoutStats:
    """Which deadline fired; flat names ``timeouts_<field>``."""

    head: int = 0  # request head not complete within --head-timeout
    keepalive: int = 0  # idle keep-alive connection closed
    write: int = 0  # no send progress within --write-timeout


@dataclass(slots=True)
class ContentStats:
    """Content features (serverio.pipeline.content)."""

    listings: int = 0  # directory listings rendered
    compressed_responses: int = 0  # bodies compressed on the fly (cache hit or fresh)
    compress_fallbacks: int = 0  # identity served: work pool saturated or file changed
    digest_omitted: int = 0  # Repr-Digest left out: work pool saturated or file changed


@dataclass(slots=True)
class H2Stats:
    """HTTP/2 (serverio.net.h2conn and its parts); flat names ``h2_<field>``."""

    connections: int = 0  # connections served as HTTP/2 (h2c or ALPN h2)
    streams: int = 0  # requests received on HTTP/2 streams
    refused_streams: int = 0  # RST_STREAM REFUSED_STREAM: past the stream limit, or draining
    stream_errors: int = 0  # RST_STREAM PROTOCOL_ERROR: malformed request
    client_resets: int = 0  # RST_STREAM received from the client
    calm: int = 0  # connections ended with GOAWAY ENHANCE_YOUR_CALM (floods, rapid reset)
    protocol_errors: int = 0  # connections ended with GOAWAY for a protocol error


@dataclass(slots=True)
class WriteStats:
    """Writes (serverio.upload); flat names ``writes_<field>``."""

    files: int = 0  # files created or replaced (a PUT, each file of a form POST)
    deletes: int = 0  # DELETEs that removed a file
    bytes: int = 0  # bytes of the committed files
    # PUTs and form POSTs that ended before their last commit (client gone,
    # 413, 400, cancelled, failed).
    aborted: int = 0
    temps_removed: int = 0  # temporary files removed (aborted uploads, start-up sweep)
    directories: int = 0  # directories made (the upload form's new folder)


@dataclass(slots=True)
class SiteStats:
    """Site rules (serverio.site.service)."""

    auth_failures: int = 0  # basic-auth credentials refused (wrong user or password)


@dataclass(slots=True)
class ProxyStats:
    """The reverse proxy (serverio.proxy); flat names ``proxy_<field>``."""

    requests: int = 0  # requests forwarded upstream (a head sent)
    connects: int = 0  # upstream connections opened
    reuses: int = 0  # requests sent on a pooled keep-alive connection
    busy: int = 0  # 503: no slot (--proxy-queue full, or --proxy-queue-timeout)
    errors_connect: int = 0  # refused / unreachable: 502
    errors_reset: int = 0  # the upstream closed or reset the connection mid-exchange
    errors_framing: int = 0  # a response h11 refuses (bad framing, bad head): 502 or cut
    timeouts_connect: int = 0  # --proxy-connect-timeout: 504
    timeouts_head: int = 0  # --proxy-head-timeout: 504
    timeouts_idle: int = 0  # --proxy-idle-timeout between body chunks: cut
    timeouts_total: int = 0  # --proxy-total-timeout: 504, or cut after the head
    cancelled: int = 0  # the client went away: the upstream connection closed
    bytes_up: int = 0  # request body bytes sent upstream
    bytes_down: int = 0  # response body bytes received from upstreams
    tunnels: int = 0  # WebSocket/Upgrade tunnels opened (an upstream 101 passed on)
    timeouts_tunnel: int = 0  # --proxy-tunnel-idle: a tunnel closed for carrying nothing
    queued: int = 0  # waited for a slot (--proxy-max-inflight in flight; --proxy-queue)


@dataclass(slots=True)
class LogStats:
    """Log lines dropped, never written (serverio.observe.logpipe): the log's
    reader stalled and the buffer was full, or the log stream failed; flat
    names ``log_<field>``."""

    lines_dropped: int = 0  # access-log lines
    messages_dropped: int = 0  # stderr messages: warnings, the draining line


# Every counter's flat name, group and field, in the order /metrics and the
# summary line have always listed them (tests/test_metrics.py pins the text).
FLAT: Final[tuple[tuple[str, str, str], ...]] = (
    ("accepted", "conns", "accepted"),
    ("rejected", "conns", "rejected"),
    ("completed", "responses", "completed"),
    ("client_errors", "responses", "client_errors"),
    ("server_errors", "responses", "server_errors"),
    ("timeouts_head", "timeouts", "head"),
    ("timeouts_keepalive", "timeouts", "keepalive"),
    ("timeouts_write", "timeouts", "write"),
    ("cancelled", "conns", "cancelled"),
    ("resets", "conns", "resets"),
    ("truncated", "responses", "truncated"),
    ("sendfile_responses", "responses", "sendfile_responses"),
    ("buffered_responses", "responses", "buffered_responses"),
    ("read_errors", "responses", "read_errors"),
    ("internal_errors", "conns", "internal_errors"),
    ("bytes_sent", "responses", "bytes_sent"),
    ("listings", "content", "listings"),
    ("compressed_responses", "content", "compressed_responses"),
    ("compress_fallbacks", "content", "compress_fallbacks"),
    ("digest_omitted", "content", "digest_omitted"),
    ("tls_handshake_failures", "conns", "tls_handshake_failures"),
    ("h2_connections", "h2", "connections"),
    ("h2_streams", "h2", "streams"),
    ("h2_refused_streams", "h2", "refused_streams"),
    ("h2_stream_errors", "h2", "stream_errors"),
    ("h2_client_resets", "h2", "client_resets"),
    ("h2_calm", "h2", "calm"),
    ("h2_protocol_errors", "h2", "protocol_errors"),
    ("auth_failures", "site", "auth_failures"),
    ("writes_files", "writes", "files"),
    ("writes_deletes", "writes", "deletes"),
    ("writes_bytes", "writes", "bytes"),
    ("writes_aborted", "writes", "aborted"),
    ("writes_temps_removed", "writes", "temps_removed"),
    ("writes_directories", "writes", "directories"),
    *((f"proxy_{f}", "proxy", f) for f in ProxyStats.__dataclass_fields__),
    ("log_lines_dropped", "log", "lines_dropped"),
    ("log_messages_dropped", "log", "messages_dropped"),
)


@dataclass(slots=True)
class Stats:
    """Engine counters, by group.  Only the trio thread mutates them (no
    locks needed)."""

    conns: ConnectionStats = field(default_factory=ConnectionStats)
    responses: ResponseStats = field(default_factory=ResponseStats)
    timeouts: TimeoutStats = field(default_factory=TimeoutStats)
    content: ContentStats = field(default_factory=ContentStats)
    h2: H2Stats = field(default_factory=H2Stats)
    site: SiteStats = field(default_factory=SiteStats)
    writes: WriteStats = field(default_factory=WriteStats)
    proxy: ProxyStats = field(default_factory=ProxyStats)
    log: LogStats = field(default_factory=LogStats)

    def as_dict(self) -> dict[str, int]:
        """Every counter under its flat name, in :data:`FLAT` order."""
        return {flat: getattr(getattr(self, group), name) for flat, group, name in FLAT}

    def summary(
        self,
        caches: Mapping[str, Mapping[str, int]] | None = None,
        cache_keys: tuple[str, ...] = (),
    ) -> str:
        """``key=value`` pairs on one line: every counter, then for each cache
        (name -> numbers, as :func:`serverio.ops.metrics.caches_of` gives) the
        ``cache_keys`` it has, as ``cache_<name>_<key>=value``."""
        parts = [f"{k}={v}" for k, v in self.as_dict().items()]
        for name, numbers in (caches or {}).items():
            parts += [f"cache_{name}_{k}={numbers[k]}" for k in cache_keys if k in numbers]
        return " ".join(parts)
