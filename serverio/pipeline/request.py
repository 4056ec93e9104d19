"""One request, whatever the transport: what the transports share around
the exchange.

An HTTP/1.1 connection and an HTTP/2 stream both turn their request head
into :class:`~serverio.http.core.RequestFacts` (with the shared field scan,
:mod:`serverio.wire.fields`) and then answer it the same way:

1. :func:`serverio.pipeline.exchange.begin` (synchronous): the
   :class:`~serverio.pipeline.exchange.Final` answer when it can be had
   without awaiting (a warm-file cache hit: no await, no coroutine, no
   state object), else the exchange's state and its first need;
2. :func:`serverio.pipeline.driver.drive` fulfils the needs (the site's
   routing, the handler's waits, the access hook, the proxy, a
   write) until the step (:func:`serverio.pipeline.exchange.step`) returns
   the Final answer;
3. an :class:`~serverio.errors.HTTPError` raised while the transport built
   the facts becomes its answer through :func:`failed`; :func:`busy` and
   :func:`finish` finish a plan the transport chose itself;
4. :func:`record` (:mod:`serverio.observe.responses`'s, named here too)
   counts the response, observes its duration and writes the access-log
   line once the transport has sent it.

What stays with the transport: parsing and facts, how it waits for a
handler step, how it emits the :class:`~serverio.model.Body`, keep-alive
and close, and the long-lived event stream (an answer whose ``plan.stream``
is set is handed back unfinished, for the transport's own branch: it
streams from the hooks' :class:`~serverio.pipeline.hooks.EventSource`, or
answers :func:`busy` past its budget).

Ownership: an answer's body belongs to the transport, which
closes it exactly once after emitting it (or failing to).  Before an answer
exists the exchange owns what it holds (see docs/cancellation.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final as Constant
from typing import Protocol

from ..config import Config, IPNetwork
from ..errors import HTTPError
from ..http.access import Ticket
from ..http.core import Plan, RequestFacts, http_error_plan
from ..http.extra import request_field
from ..http.forwarded import client_address
from ..observe.accesslog import AccessLog
from ..observe.histogram import Histogram
from ..observe.responses import record
from ..observe.stats import Stats
from .driver import NO_CONTENT, access
from .exchange import Final, SiteSteps, finished, misdirected
from .handler import Handler

__all__ = [
    "NO_CONTENT",
    "Deps",
    "ForwardedClient",
    "SiteSteps",
    "access",
    "busy",
    "client_for",
    "failed",
    "finish",
    "misdirected",
    "record",
]


# The fields read here: the client a trusted proxy names (--trusted-proxies,
# RFC 7239 §4; the de-facto X-Forwarded-For).
FORWARDED: Constant = request_field("forwarded")
X_FORWARDED_FOR: Constant = request_field("x-forwarded-for")


class Deps(Protocol):
    """What the request steps use; a connection's shared environment
    (:class:`serverio.net.env.ConnectionEnv`) is one."""

    config: Config
    handler: Handler

    @property
    def site(self) -> SiteSteps | None: ...

    stats: Stats
    access_log: AccessLog
    response_times: Histogram


def client_for(config: Config, peer: Callable[[], str], req: RequestFacts) -> Callable[[], str]:
    """Who sent ``req``, for the access log and the auth limiter: ``peer``
    itself without ``--trusted-proxies`` (no work at all), else the client a
    trusted proxy names (:func:`serverio.http.forwarded.client_address`),
    looked up once and only when asked (a :class:`ForwardedClient`)."""
    networks = config.site.proxy_networks
    if not networks or (FORWARDED.of(req) is None and X_FORWARDED_FOR.of(req) is None):
        return peer
    return ForwardedClient(peer, req, networks)


class ForwardedClient:
    """The client a trusted proxy names, looked up once when called;
    :attr:`peer` is the connection's own peer (the reverse proxy reads it
    to decide whether to append to the forwarding fields it got)."""

    __slots__ = ("_got", "_networks", "_req", "peer")

    def __init__(
        self, peer: Callable[[], str], req: RequestFacts, networks: tuple[IPNetwork, ...]
    ) -> None:
        self.peer = peer
        self._req = req
        self._networks = networks
        self._got: str | None = None

    def __call__(self) -> str:
        if self._got is None:
            req = self._req
            self._got = client_address(
                self.peer(), FORWARDED.of(req), X_FORWARDED_FOR.of(req), self._networks
            )
        return self._got


def failed(deps: Deps, exc: HTTPError, now: float, head_only: bool) -> Final:
    """The answer to a request whose facts could not be built."""
    return finished(deps.site, http_error_plan(exc, now, head_only=head_only), -1, None)


def busy(deps: Deps, ticket: Ticket | None, now: float) -> Final:
    """The answer to an event stream past its budget (the hooks'
    :meth:`EventSource.busy_plan`, a 503), finished like any other."""
    events = deps.handler.hooks.events
    assert events is not None  # only a streaming plan gets here
    return finished(deps.site, events.busy_plan(now), -1, ticket)


def finish(deps: Deps, plan: Plan, ticket: Ticket | None) -> Final:
    """The answer for a plan the transport chose itself (the site's
    finishing rules apply to it as to any other)."""
    return finished(deps.site, plan, -1, ticket)
