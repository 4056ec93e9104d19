"""What every connection of one server shares, whatever its protocol.

:class:`ConnectionEnv` is handed to each HTTP/1.1 connection
(:class:`~serverio.net.connection.ConnectionTask`) and, through it, to an
HTTP/2 connection (:class:`~serverio.net.h2conn.H2Connection`): the policy,
the request handler (with the pipeline's hooks: an event stream's source
is ``handler.hooks.events``), the site rules, and where counts and log
lines go.
A connection gets this, never the server itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import trio

from ..config import Config
from ..observe.accesslog import AccessLog
from ..observe.histogram import Histogram
from ..observe.stats import Stats
from ..pipeline.handler import Handler
from .order import ServeOrder

if TYPE_CHECKING:  # the site rules, named by the pipeline (net/ imports no feature)
    from ..pipeline.exchange import SiteRules

__all__ = ["ConnectionEnv", "SwitchFactory", "Switched"]


class Switched(Protocol):
    """A connection served by another protocol (HTTP/2) from now on."""

    async def run(self) -> None: ...

    def drain(self) -> None: ...


# (env, stream, peer address lookup, bytes already read) -> the switched
# connection; the server supplies serverio.net.h2conn.H2Connection.
SwitchFactory = Callable[["ConnectionEnv", trio.abc.Stream, Callable[[], str], bytes], Switched]


@dataclass(slots=True, eq=False)
class ConnectionEnv:
    """What every connection of one server shares.  ``draining`` is set by
    the server when graceful shutdown begins.  ``http2`` serves a connection
    that negotiated HTTP/2 (None: HTTP/1.1 only)."""

    config: Config
    handler: Handler
    stats: Stats
    access_log: AccessLog
    response_times: Histogram
    draining: bool = False
    # Set once nothing is accepted any more without a lame-duck period
    # (--shutdown-delay): then a drain also closes connections still
    # waiting for their first request; before, they are served.
    cut_fresh: bool = False
    http2: SwitchFactory | None = None
    site: SiteRules | None = None  # the site rules; None when none are configured
    # The order ready keep-alive connections are served in (serverio.net.order);
    # None: trio's batch order.
    order: ServeOrder | None = None
