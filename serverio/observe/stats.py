"""Counters: a plain object for tests, one line at shutdown (with the caches' numbers)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

__all__ = ["Stats"]


@dataclass(slots=True)
class Stats:
    """Engine counters.  Only the trio thread mutates them (no locks needed)."""

    accepted: int = 0  # sockets accepted (admitted or not)
    rejected: int = 0  # turned away by --max-connections (503)
    completed: int = 0  # responses written in full
    client_errors: int = 0  # 4xx responses
    server_errors: int = 0  # 5xx responses
    timeouts_head: int = 0  # request head not complete within --head-timeout
    timeouts_keepalive: int = 0  # idle keep-alive connection closed
    timeouts_write: int = 0  # no send progress within --write-timeout
    cancelled: int = 0  # connections cut by shutdown or abort
    resets: int = 0  # peer reset / broken pipe while we were writing
    truncated: int = 0  # file shrank while being sent: connection aborted
    sendfile_responses: int = 0  # bodies sent with os.sendfile
    buffered_responses: int = 0  # file bodies sent through user space
    read_errors: int = 0  # the file failed (EIO) mid-body: connection aborted
    internal_errors: int = 0  # a bug escaped a connection task (logged, survived)
    bytes_sent: int = 0
    # Content features (serverio.pipeline.content).
    listings: int = 0  # directory listings rendered
    compressed_responses: int = 0  # bodies compressed on the fly (cache hit or fresh)
    compress_fallbacks: int = 0  # identity served: work pool saturated or file changed
    digest_omitted: int = 0  # Repr-Digest left out: work pool saturated or file changed
    # Operations.
    tls_handshake_failures: int = 0  # TLS hello never completed (plain HTTP, bad client)
    # HTTP/2 (serverio.net.h2conn).
    h2_connections: int = 0  # connections served as HTTP/2 (h2c or ALPN h2)
    h2_streams: int = 0  # requests received on HTTP/2 streams
    h2_refused_streams: int = 0  # RST_STREAM REFUSED_STREAM: past the stream limit, or draining
    h2_stream_errors: int = 0  # RST_STREAM PROTOCOL_ERROR: malformed request
    h2_client_resets: int = 0  # RST_STREAM received from the client
    h2_calm: int = 0  # connections ended with GOAWAY ENHANCE_YOUR_CALM (floods, rapid reset)
    h2_protocol_errors: int = 0  # connections ended with GOAWAY for a protocol error

    auth_failures: int = 0  # basic-auth credentials refused (wrong user or password)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

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
