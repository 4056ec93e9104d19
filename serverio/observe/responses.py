"""A response that was sent: counted, its duration observed, its access-log line.

What both transports do once a response is out (the HTTP/1.1 connection
after its emit, an HTTP/2 stream when its last frame is queued): one call
into this layer, which owns the counters (:mod:`serverio.observe.stats`),
the response-time histogram (:mod:`serverio.observe.histogram`) and the
access log (:mod:`serverio.observe.accesslog`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import trio

from .accesslog import AccessLog, AccessRecord
from .histogram import Histogram
from .stats import Stats

__all__ = ["Recorded", "UserCounts", "record"]


class UserCounts(Protocol):
    """The per-user counters of the site rules (``Site.count``)."""

    def count(self, user: str, size: int) -> None: ...


class Recorded(Protocol):
    """Where a sent response is recorded; a connection's shared environment
    (:class:`serverio.net.env.ConnectionEnv`) is one."""

    stats: Stats
    access_log: AccessLog
    response_times: Histogram

    @property
    def site(self) -> UserCounts | None: ...


def record(
    deps: Recorded,
    client: Callable[[], str],
    method: bytes,
    target: bytes,
    version: bytes,
    status: int,
    size: int,
    started: float,
    now: float,
    user_agent: str | None,
    referer: str | None,
    request_id: str | None,
    *,
    counted: bool = True,
    cut: bool = False,
    user: str = "",
) -> None:
    """Count a response that was sent, observe its duration, log it.

    ``cut``: the response was cut off after its head (``size`` is the body
    bytes sent); it is logged with the marker but not counted as
    completed.  ``counted=False``: log only (an event stream, counted as
    it ended).  ``user``: the signed-in user the access hook named for it
    (the log's user field; its per-user counters, for a user of the users
    files).
    """
    elapsed = trio.current_time() - started
    if counted and not cut:
        stats = deps.stats.responses
        stats.completed += 1
        deps.response_times.observe(elapsed)
        if status >= 500:
            stats.server_errors += 1
        elif status >= 400:
            stats.client_errors += 1
    if user:
        site = deps.site
        if site is not None:
            site.count(user, size)
    log = deps.access_log
    if log.enabled:
        log.write(
            AccessRecord(
                client=client(),
                method=method.decode("latin-1"),
                target=target.decode("latin-1"),
                version=version.decode("latin-1"),
                status=status,
                size=size,
                duration=elapsed,
                user_agent=user_agent,
                referer=referer,
                request_id=request_id,
                cut=cut,
                user=user or None,
            ),
            now,
        )
