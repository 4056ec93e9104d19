"""The pipeline's hooks: where a vertical feature plugs into a request.

A feature package (live reload, :mod:`serverio.live`) offers what it
needs as one of these hooks, and the composition root
(:mod:`serverio.app.services`) hands the :class:`Hooks` to the
:class:`~serverio.pipeline.handler.Handler`.  The request-routing hooks
(``route``, ``write``, ``proxy``) and the features' own :attr:`Hooks.stages`
become the stage list (:func:`serverio.pipeline.stages.stages_of`: its
order is the precedence rule); ``transform`` and ``listing`` are seams of
the files stage, ``events`` of the transports.  Nobody subclasses the
handler and ``http/`` knows nothing of the feature.  Every hook is
optional, and an absent one costs an attribute test and no call: the warm
GET of a server without hooks makes exactly the calls it made before.

* :attr:`Hooks.route`, a :data:`Router`: answers reserved paths before the
  core's routing and the file pipeline (the core would 404 a hidden path,
  and no file may shadow a reserved one).  Called for every request that
  reaches routing, after the site's CORS preflight, before its access
  rules decide (their refusal then replaces the router's answer); it must
  answer only GET and HEAD (other methods get the core's 405 or 204).
* :attr:`Hooks.transform`, a :class:`Transform`: makes the answer to a
  request from the handler's answer to a *base* request (live reload
  resolves the page as a plain GET and injects its script; the
  transformed representation's validators and conditionals are its own).
* :attr:`Hooks.events`, an :class:`EventSource`: the long-lived stream an
  answer with ``plan.stream`` set hands its connection to; the only thing
  a transport knows of the feature behind it.
* :attr:`Hooks.listing`, a :class:`ListingView`: answers some requests for
  a directory listing in another form (folder archives,
  :mod:`serverio.archive`) from the handler's resolved listing: after the
  hidden-path route, the containment open of the directory and the site's
  request check, instead of the listing page.
* :attr:`Hooks.proxy`, a :class:`Proxy`: the reverse proxy
  (:mod:`serverio.proxy`).  Its :meth:`~Proxy.match` is asked after the
  reserved paths and before the core's routing (a proxied path is no file:
  no 405 for a POST, no 404 for a hidden name); with site rules, after the
  site's CORS preflight and access rules on the request path, and after its
  redirects and rewrites.  A matched request is answered by
  :meth:`~Proxy.forward` (its content, if any, streamed upstream; the
  answer's body streamed down, a :class:`~serverio.model.StreamBody`;
  or, for an HTTP/1.1 request that asked to switch protocols and got the
  upstream's 101, a :class:`TunnelBody`: the HTTP/1.1 connection sends
  the head and then hands its stream to :meth:`Tunnel.run` instead of
  reading the next request).
* :attr:`Hooks.running`: the feature's own tasks (a watcher) for as long as
  the handler runs (:meth:`Handler.running`), stopped before its jobs.
* :attr:`Hooks.write`: the answer to every request whose method is one
  of :attr:`Hooks.write_methods` (uploads, ``--upload``: PUT, DELETE and
  the upload form's POST, :data:`WRITE_METHODS`; WebDAV, ``--webdav``: its methods too,
  :mod:`serverio.dav.service`), with or without content, called by
  :mod:`serverio.pipeline.driver` (the write stage's ``Write`` need)
  with the access hook (:data:`Admit`) to ask on the target it
  resolves.  A CORS preflight (an OPTIONS with
  ``Access-Control-Request-Method``) is the site's, never the step's.
* :attr:`Hooks.write_ahead`: writes answered ahead of :attr:`Hooks.write`
  (resumable uploads, :mod:`serverio.resumable`), each a
  :class:`WriteRoute` whose :class:`Marks` (request fields, a path
  prefix) say which requests it may take at all: the stage list tests
  them as data, so a plain PUT never calls into that feature.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import trio

from ..concurrency.broadcast import StreamSlots
from ..http.access import AccessTarget
from ..http.core import Allow, Plan, RequestFacts
from ..model import Body, ChunkSource, Prepared

__all__ = [
    "NO_HEAD",
    "NO_HOOKS",
    "NO_RULES",
    "WRITE_METHODS",
    "Admit",
    "EventSource",
    "Hooks",
    "Interim",
    "ListingView",
    "Marks",
    "Proxy",
    "RawHead",
    "Reserved",
    "Router",
    "Transform",
    "Tunnel",
    "TunnelBody",
    "Upload",
    "WriteContent",
    "WriteRoute",
    "WriteStep",
    "interim_of",
]


# The answer to a reserved path (a GET or HEAD), or None: not one of its
# paths, the request goes on to the core's routing.
Router = Callable[[RequestFacts, float], "Plan | None"]


class Transform(Protocol):
    """Changes what the handler prepares for some requests."""

    def base(self, req: RequestFacts) -> RequestFacts | None:
        """The request to resolve instead of ``req`` (the representation
        the transform is made from), or None: ``req`` is not transformed
        and takes the handler's path untouched.  Synchronous, no I/O: it
        runs on every request the handler gets."""
        ...

    async def apply(
        self, req: RequestFacts, base: RequestFacts, prepared: Prepared, now: float
    ) -> Prepared | None:
        """The answer to ``req`` made from ``prepared``, the handler's
        answer to ``base``; None: answer ``req`` as sent (the handler
        resolves it again, untransformed).  ``prepared`` is the
        transform's: it closes it unless it returns it.

        Cancellation handling: cancelled at any await, it closes
        ``prepared`` (and what it made from it) before it propagates.
        """
        ...


class EventSource(Protocol):
    """A long-lived event stream (an answer whose ``plan.stream`` is set).

    The transport takes a slot of :attr:`slots` (the stream budget) before
    it streams and gives it back after; past the budget the stage that
    answers the stream sends :meth:`busy_plan` instead
    (``serverio.pipeline.stages.streamed``; the transports keep the test,
    ``serverio.pipeline.request.busy``, as a safety net).
    """

    @property
    def slots(self) -> StreamSlots: ...

    def busy_plan(self, now: float) -> Plan:
        """The answer to a stream past the budget (a 503)."""
        ...

    async def serve_client(self, send: Callable[[bytes], Awaitable[None]], head: bytes) -> None:
        """Send ``head`` and then events through ``send`` until cancelled or
        until ``send`` fails.

        Cancellation handling: returns nothing owned; the subscription is
        dropped in every case.
        """
        ...


class Reserved(Protocol):
    """A feature's reserved paths that take any method and content, and the
    principal it vouches for (the login feature, :mod:`serverio.login`).
    Its stage (:class:`serverio.login.stage.LoginStage`) comes first in
    the stage list (:attr:`Hooks.first`); the site rules read the
    principal a session cookie names (``authorization``) and finish its
    answers (``finish``)."""

    # Does :meth:`attach` ever change a request (a trusted user header is
    # configured, or users may sign in)?  False: the pipeline does not call it.
    attaches: bool

    def attach(self, req: RequestFacts, client: Callable[[], str]) -> RequestFacts:
        """``req`` with the principal its trusted header names, or (a
        request that changes something) its session cookie (``req`` itself
        when none).  Synchronous, no I/O."""
        ...

    def names(self, req: RequestFacts) -> bool:
        """Does ``req`` carry what :meth:`attach` may make a principal of
        (the trusted user header; a write's session cookie)?  Synchronous,
        pure."""
        ...

    def authorization(self, req: RequestFacts) -> str | None:
        """The principal the access hook reads for ``req``: its own
        ``authorization``, or what a cookie names.  Synchronous, no I/O."""
        ...

    def takes(self, req: RequestFacts) -> bool:
        """Is ``req`` for one of the reserved paths?  Synchronous, pure."""
        ...

    async def step(
        self,
        req: RequestFacts,
        content: WriteContent | None,
        now: float,
        client: Callable[[], str],
    ) -> Plan | RequestFacts:
        """The answer to a reserved path, or the request to serve instead
        (a share link's real path, with its grant).  Raises HTTPError.

        Cancellation handling: nothing is held across its waits.
        """
        ...

    def finish(self, plan: Plan, req: RequestFacts) -> Plan:
        """The answer to a request it rewrote, as its client should see it."""
        ...


class WriteContent(Protocol):
    """A write's content as the write step pulls it (a request body, or
    none: ``declared`` 0): :class:`serverio.pipeline.handler.Content` is one."""

    declared: int | None
    received: int

    async def next_chunk(self) -> bytes | None: ...


# The transport's "send an interim response now" (RFC 9110 §15.2): status
# (1xx) and fields, before the final answer.  A request body offers it as
# its ``interim`` attribute (serverio.net.reqbody.RequestBody) when its
# transport can send one (HTTP/1.1 to a 1.1 client; HTTP/2); a write step
# finds it with interim_of.  Generic: the transports know no feature that
# uses it (104 Upload Resumption Supported, serverio.resumable).
Interim = Callable[[int, Sequence[tuple[bytes, bytes]]], Awaitable[None]]


def interim_of(content: object) -> Interim | None:
    """The interim-response sender behind ``content`` (through wrappers
    that keep theirs in ``content``: the paced content of --min-upload-rate),
    or None when its transport has none."""
    for _ in range(4):
        got = getattr(content, "interim", None)
        if got is not None:
            return got  # type: ignore[no-any-return]
        content = getattr(content, "content", None)
        if content is None:
            return None
    return None


# The access hook as a write step sees it: None (allowed) or the refusal to
# send (serverio.pipeline.driver.access, on the step's resolved target).
Admit = Callable[[AccessTarget], Awaitable["Plan | None"]]


async def _no_rules(target: AccessTarget) -> Plan | None:
    return None


# The access hook of a server without site rules: there is nothing to
# decide, every target is allowed.  The driver hands a write step this
# very object then, so that the step may skip describing its targets
# (``admit is NO_RULES``); calling it is right too (it allows).
NO_RULES: Admit = _no_rules

# The answer to a write (PUT, DELETE; WebDAV's methods): the step resolves
# its target, asks ``Admit``, then writes; it always answers: a plan, or a
# 200 / 207 plan with a body produced while it is sent (a ChunkSource the
# transport owns from then on: a PROPFIND of a large collection).
WriteStep = Callable[
    [RequestFacts, WriteContent, float, Admit], Awaitable["Plan | tuple[Plan, ChunkSource]"]
]


# The methods the uploads' write step answers (every other goes the read
# path); a step declares its own in Hooks.write_methods.  POST: the upload
# form (a multipart/form-data POST to a directory).
WRITE_METHODS: frozenset[bytes] = frozenset((b"PUT", b"DELETE", b"POST"))


class Marks(NamedTuple):
    """What a request must carry for a stage to be asked about it at all:
    one of ``fields`` (request field names a feature registered,
    :func:`serverio.http.extra.request_field`: the scan keeps them in
    :attr:`~serverio.http.core.RequestFacts.extra`), or a path under
    ``prefix`` (segments).  Plain data, tested by the stage list
    (:mod:`serverio.pipeline.stages`) before the stage's own ``takes``:
    a request that carries none of them costs no call into the feature."""

    fields: frozenset[str]
    prefix: tuple[str, ...] = ()

    def on(self, req: RequestFacts) -> bool:
        """Does ``req`` carry one of the marks?"""
        prefix = self.prefix
        if prefix and req.target.segments[: len(prefix)] == prefix:
            return True
        fields = self.fields
        for name, _ in req.extra:
            if name in fields:
                return True
        return False


class WriteRoute(NamedTuple):
    """A write answered ahead of :attr:`Hooks.write` (resumable uploads):
    its step, the methods it answers, its test (asked only for those
    methods, and only when ``marks`` are carried), its marks and its
    stage's name."""

    run: WriteStep
    methods: frozenset[bytes]
    takes: Callable[[RequestFacts], bool]
    marks: Marks | None = None
    name: str = "write"


class ListingView(Protocol):
    """Answers a listing request in another form (a folder archive)."""

    def takes(self, req: RequestFacts) -> bool:
        """Does this view answer ``req``, a request the handler resolved to
        a directory listing?  Synchronous, no I/O (a query test)."""
        ...

    async def answer(self, req: RequestFacts, prepared: Prepared, now: float) -> Prepared:
        """The answer to ``req`` made from ``prepared`` (a listing:
        ``prepared.fd`` is the directory, ``prepared.served`` its path for
        the access hook); it owns ``prepared``.  Raises HTTPError for an
        error answer.

        Cancellation handling: cancelled at any await, it closes
        ``prepared`` and what it opened before it propagates.
        """
        ...


class RawHead(NamedTuple):
    """A request head as received, for a feature that re-serialises it
    (the proxy): every field (lower-case names; the transport's own list,
    not copied), the protocol version (``b"1.1"``, ``b"1.0"``, ``b"2"``)
    and HTTP/2's ``:authority``.  Not part of
    :class:`~serverio.http.core.RequestFacts`: only the slow path (a
    request that waits) builds one, the warm GET never does."""

    fields: Sequence[tuple[bytes, bytes]]
    version: bytes
    authority: bytes | None


NO_HEAD = RawHead((), b"1.1", None)


class Upload(Protocol):
    """A request's content as the proxy streams it upstream (the shape of
    :class:`serverio.net.reqbody.RequestBody`: ``declared`` is its
    Content-Length or None, ``async for`` pulls it)."""

    @property
    def declared(self) -> int | None: ...

    def __aiter__(self) -> AsyncIterator[bytes]: ...


class Proxy(Protocol):
    """Requests answered by an upstream server instead of the files."""

    def match(self, req: RequestFacts) -> object | None:
        """The route ``req``'s path falls under (longest prefix, segment
        boundaries), or None.  Synchronous and pure: asked of every request
        that reaches routing while the hook is installed."""
        ...

    def fallback(self, req: RequestFacts) -> object | None:
        """The route for a request the files answered 404 (``--proxy-fallback``),
        or None."""
        ...

    async def forward(
        self,
        route: object,
        req: RequestFacts,
        head: RawHead,
        content: Upload | None,
        now: float,
        client: Callable[[], str],
        authed: bool = False,
    ) -> tuple[Plan, Body]:
        """The upstream's answer (``head``: the request as received): its
        plan (status and fields, already filtered) and a body the transport
        owns and closes.  ``authed``: the access hook checked the request's
        credentials on its path (an auth rule applied and passed).  Raises an
        :class:`~serverio.errors.HTTPError` (502, 503, 504) when there is
        no upstream answer to pass on.

        Cancellation handling: cancelled before it returns, it closes the
        upstream connection (never pooled mid-exchange); after it returns,
        closing the body does.
        """
        ...


class Tunnel(Protocol):
    """The two byte streams of a protocol switch (RFC 9110 §7.8: a
    WebSocket through the proxy) once its ``101`` is decided: the seam
    between a feature that accepted a switch and the HTTP/1.1 transport,
    which sends the 101's head and then runs the tunnel on its stream
    instead of reading another request."""

    async def run(self, client: trio.abc.Stream, initial: bytes) -> int:
        """Join ``client`` (the connection's stream, the 101 sent) with the
        other side until either closes, fails or goes idle; ``initial``:
        the client's bytes already read past its request head.  Returns
        the bytes sent to the client (the access log's size).

        Cancellation handling: cancelled (shutdown's cut after
        ``--shutdown-timeout``, abort), it closes its own side at once and
        propagates; the transport closes ``client``.
        """
        ...

    def close(self) -> None:
        """Close what the tunnel holds (idempotent; synchronous, for a
        ``finally``)."""
        ...


class TunnelBody(Body):
    """The "body" of a ``101 Switching Protocols`` answer: no content, a
    :class:`Tunnel` to run once the head is sent.  Only an HTTP/1.1
    connection gets one (over HTTP/2 a request that asks to switch is
    malformed, RFC 9113 §8.2.2, and never reaches a hook)."""

    __slots__ = ("tunnel",)

    def __init__(self, tunnel: Tunnel) -> None:
        super().__init__(())
        self.tunnel = tunnel

    def close(self) -> None:
        self.tunnel.close()


@dataclass(frozen=True, slots=True)
class Hooks:
    """The hooks of one server's pipeline; each None when unused."""

    route: Router | None = None
    transform: Transform | None = None
    events: EventSource | None = None
    listing: ListingView | None = None
    proxy: Proxy | None = None
    running: Callable[[], AbstractAsyncContextManager[None]] | None = None
    write: WriteStep | None = None
    # The methods ``write`` answers (asked only when ``write`` is set).
    write_methods: frozenset[bytes] = WRITE_METHODS
    # Does ``write`` answer this request, one of ``write_methods``?  None:
    # every one (asked only for those methods: a GET pays nothing).  WebDAV
    # under a prefix answers its methods there only (--webdav-prefix).
    write_takes: Callable[[RequestFacts], bool] | None = None
    # Writes answered ahead of ``write`` (resumable uploads), in order.
    write_ahead: tuple[WriteRoute, ...] = ()
    # The methods a path allows, for the core's OPTIONS and 405 (RFC 9110
    # §10.2.1): the write feature's (None: read-only, GET, HEAD, OPTIONS).
    allow: Allow | None = None
    # The features' own stages (serverio.pipeline.exchange.Stage subclasses;
    # typed loosely: the exchange imports this module's names), in order:
    # after the reserved paths, before the proxy routes.
    stages: tuple[Any, ...] = ()
    # The features' stages ahead of every other (after the Host check):
    # the login feature's (a sign-in form's POST and a share link's
    # request are its own before a write or the site rules judge them;
    # a trusted header's user is attached before the site rules ask).
    first: tuple[Any, ...] = ()


NO_HOOKS = Hooks()
