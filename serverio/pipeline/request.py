"""One request, whatever the transport: the steps between facts and bytes.

An HTTP/1.1 connection and an HTTP/2 stream both turn their request head
into :class:`~serverio.http.core.RequestFacts` (with the shared field scan,
:mod:`serverio.wire.fields`) and then call the same functions here:

0. the Host stage (:func:`misdirected`, first in :func:`start` and
   :func:`complete_body`): with writes or the proxy on, a request whose
   ``Host`` this server does not answer for gets 421 before anything else
   (:mod:`serverio.http.hosts`, the DNS-rebinding rule);
1. :func:`start` (synchronous): without site rules, the hooks' router of
   reserved paths (:attr:`serverio.pipeline.hooks.Hooks.route`), routing
   (:func:`serverio.http.core.route`) and the handler's immediate answer
   (:meth:`~serverio.pipeline.handler.Handler.respond_now`).  A warm-file
   cache hit is finished here, with no await: the warm keep-alive GET
   costs no checkpoint and no coroutine;
2. :func:`complete` (only when :func:`start` returned :class:`Waiting`): the
   site's routing (CORS preflight, authentication, redirects, rewrites;
   it may wait for a password check), the handler, and the wait for a
   :class:`~serverio.pipeline.handler.Deferred` through the transport's own
   ``wait`` (HTTP/1.1 watches its socket for a disconnect meanwhile; HTTP/2
   relies on RST_STREAM cancelling the stream's scope), then :func:`access`,
   the access hook, on what the handler resolved (a refusal replaces it);
3. an :class:`~serverio.errors.HTTPError` anywhere becomes its error plan
   (:func:`failed` for one raised while the transport built the facts), and
   the site's finishing rules (error pages, header rules, CORS fields) apply
   to every answer;
4. a request with content (a body) goes through :func:`complete_body`
   instead of 1-2: the handler's :attr:`~serverio.pipeline.handler.Handler.receive`
   step, when one is installed (after the site's routing and access
   rules), then the same steps; a write (PUT, DELETE, with or without
   content) goes to :func:`complete_write`, the hooks' write step;
5. :func:`record` counts the response, observes its duration and writes
   the access-log line once the transport has sent it.

What stays with the transport: parsing and facts, how it waits for a
Deferred, how it emits the :class:`~serverio.model.Body`, keep-alive and
close, and the long-lived event stream (an answer whose ``plan.stream`` is
set is handed back unfinished, for the transport's own branch: it streams
from the hooks' :class:`~serverio.pipeline.hooks.EventSource`, or answers
:func:`busy` past its budget).

Ownership: an answer's body belongs to the transport, which
closes it exactly once after emitting it (or failing to).  Before an answer
exists the handler owns what it holds (see docs/cancellation.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Final, Protocol

import trio

from ..config import Config, IPNetwork
from ..errors import HTTPError
from ..fs.body import NO_BODY, Body
from ..http.access import (
    Access,
    AccessTarget,
    Kind,
    Ticket,
    access_plan,
    resolved_path,
    served_target,
)
from ..http.core import Plan, RequestFacts, http_error_plan, route
from ..http.errorpage import error_for
from ..http.extra import request_field
from ..http.forwarded import client_address
from ..http.hosts import misdirected_plan
from ..model import ChunkSource, Prepared
from ..observe.accesslog import AccessLog, AccessRecord
from ..observe.histogram import Histogram
from ..observe.stats import Stats
from .handler import Content, Deferred, Handler
from .hooks import NO_HEAD, RawHead, Upload, WriteContent

__all__ = [
    "Answer",
    "Deps",
    "ForwardedClient",
    "SiteSteps",
    "Wait",
    "Waiting",
    "access",
    "busy",
    "client_for",
    "complete",
    "complete_body",
    "complete_write",
    "failed",
    "finish",
    "misdirected",
    "record",
    "start",
]

# The fields the steps read themselves: the client a trusted proxy names
# (--trusted-proxies, RFC 7239 §4; the de-facto X-Forwarded-For), and a
# CORS preflight's method (Fetch §4.8: a preflight is the site's, never
# a write).
FORWARDED: Final = request_field("forwarded")
X_FORWARDED_FOR: Final = request_field("x-forwarded-for")
PREFLIGHT: Final = request_field("access-control-request-method")


class SiteSteps(Protocol):
    """What the request steps ask of the site rules
    (:class:`serverio.site.service.Site` is one): named here, not imported,
    so that the pipeline stays below the features that plug into it (and a
    plain static start never imports the site rules)."""

    async def route(self, req: RequestFacts, now: float, client: Callable[[], str]) -> Ticket: ...

    async def admit(
        self, target: AccessTarget, ticket: Ticket, client: Callable[[], str]
    ) -> Access: ...

    def respond_now(
        self, handler: Handler, req: RequestFacts, now: float
    ) -> Prepared | Deferred: ...

    def finish(self, plan: Plan, ticket: Ticket | None, pages: bool = True) -> Plan: ...

    def count(self, user: str, size: int) -> None: ...


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


# How a transport waits for a Deferred: the finished Prepared, or None when
# its client went away meanwhile (the Deferred is closed either way).
Wait = Callable[[Deferred], Awaitable[Prepared | None]]


# The response to emit: its final plan, its body source (owned by whoever
# emits it) and the site's ticket (None without site rules).  A plain tuple:
# built on every request, and a tuple costs a fraction of an object.
Answer = tuple[Plan, Body, "Ticket | None"]


class Waiting:
    """A request :func:`start` could not answer without awaiting: the site
    rules still to run (``deferred`` None), the handler's Deferred, or
    (without site rules) a proxied request, ``proxied`` its route."""

    __slots__ = ("deferred", "proxied", "req")

    def __init__(
        self, req: RequestFacts, deferred: Deferred | None, proxied: object | None = None
    ) -> None:
        self.req = req
        self.deferred = deferred
        self.proxied = proxied


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


def start(deps: Deps, req: RequestFacts, now: float) -> Answer | Waiting:
    """As much of the answer as can be had without awaiting: first the
    Host stage (:func:`misdirected`), then :func:`_start`."""
    hosts = deps.handler.hosts
    if hosts is not None and (refused := misdirected(deps, req, now)) is not None:
        return refused
    return _start(deps, req, now)


def misdirected(deps: Deps, req: RequestFacts, now: float) -> Answer | None:
    """The Host stage, before anything else looks at ``req`` (routing,
    access, a write, a proxy route): None when its ``Host`` (HTTP/2:
    ``:authority``) is one this server answers for, else the 421 to send
    (the pure decision: :func:`serverio.http.hosts.misdirected_plan`; the
    rule is the handler's, None when Host is not checked).  The site's
    header rules apply to the refusal, not its error pages: its one line
    names the option that admits the host."""
    rule = deps.handler.hosts
    if rule is None:
        return None
    plan = misdirected_plan(rule, req, now)
    if plan is None:
        return None
    site = deps.site
    if site is not None:
        plan = site.finish(plan, Ticket(None, req), pages=False)
    return plan, Body.of(plan), None


def _start(deps: Deps, req: RequestFacts, now: float) -> Answer | Waiting:
    """:func:`start` past the Host stage."""
    if deps.site is not None:
        return Waiting(req, None)  # the site's routing may wait (authentication)
    handler = deps.handler
    if handler.write is not None and _writes(handler, req):
        return Waiting(req, None)  # a write (--upload): complete() hands it to the step
    router = handler.router  # the hooks' router of reserved paths (None: no call)
    if router is None or (plan := router(req, now)) is None:
        proxy = handler.proxy  # the proxy hook (None: no call)
        if proxy is not None and (matched := proxy.match(req)) is not None:
            return Waiting(req, None, matched)
        plan = route(req, deps.config, now, handler.allow)
    if plan is not None:
        if plan.status >= 400:
            plan = error_for(plan, req)
        return plan, NO_BODY if plan.stream else Body.of(plan), None
    try:
        got = handler.respond_now(req, now)
    except HTTPError as exc:
        plan = http_error_plan(exc, now, head_only=req.method == b"HEAD")
        plan = error_for(plan, req)
        return plan, Body.of(plan), None
    if type(got) is Prepared:
        if got.plan.status >= 400:  # errors only: the warm 200 pays one comparison
            fallback = _fallback(handler, got, req)
            if fallback is not None:
                return Waiting(req, None, fallback)  # --proxy-fallback answers it
            got.plan = error_for(got.plan, req)
        return got.plan, got.take_body(), None
    assert isinstance(got, Deferred)
    return Waiting(req, got)


async def complete(
    deps: Deps,
    waiting: Waiting,
    now: float,
    client: Callable[[], str],
    wait: Wait,
    content: Upload | None = None,
    head: RawHead = NO_HEAD,
) -> Answer | None:
    """The rest of the answer; None when the client went away while it waited.
    ``content`` and ``head``: the request's content and its head as
    received, for a proxied request (the proxy streams them upstream;
    nothing else reads them here).

    Cancellation handling: the Deferred is handed to ``wait``, which closes
    it in every case (the handler closes what it held when cancelled); a
    Prepared exists here only between ``wait`` returning and
    :meth:`Prepared.take_body`, with no await in between.
    """
    site = deps.site
    req = waiting.req
    deferred = waiting.deferred
    handler = deps.handler
    if deferred is None and handler.write is not None and _writes(handler, req):
        return await complete_write(deps, req, NO_CONTENT, now, client)
    ticket: Ticket | None = None
    try:
        if deferred is None:
            proxy = deps.handler.proxy
            if site is None:
                assert waiting.proxied is not None
                up = (req, head, content)
                return await _forward(deps, waiting.proxied, up, now, client, None, wait)
            ticket = await site.route(req, now, client)
            plan, req = ticket.plan, ticket.req
            if plan is not None:
                if plan.stream:
                    return plan, NO_BODY, ticket  # the transport's own branch
                return _finished(site, plan, -1, ticket, req)
            # The site's rules (CORS, access on the request path, redirects,
            # rewrites) have passed: a proxied path goes upstream now.
            if proxy is not None and (matched := proxy.match(req)) is not None:
                up = (req, head, content)
                return await _forward(deps, matched, up, now, client, ticket, wait)
            got = site.respond_now(deps.handler, req, now)
            if type(got) is Prepared:
                prepared = got
            else:
                assert isinstance(got, Deferred)
                deferred = got
        if deferred is not None:
            got_now = await wait(deferred)
            if got_now is None:
                return None
            prepared = got_now
        fallback = _fallback(deps.handler, prepared, req)
        if fallback is not None:  # the files answered 404: --proxy-fallback
            up = (req, head, content)
            return await _forward(deps, fallback, up, now, client, ticket, wait)
    except HTTPError as exc:
        plan = http_error_plan(exc, now, head_only=req.method == b"HEAD")
        return _finished(site, plan, -1, ticket, req)
    if site is not None:
        assert ticket is not None
        return await _admitted(deps, prepared, ticket, now, client)
    fd, prepared.fd = prepared.fd, -1
    return _finished(site, prepared.plan, fd, ticket, req, prepared.take_chunks())


async def access(
    deps: Deps,
    target: AccessTarget,
    ticket: Ticket | None,
    now: float,
    client: Callable[[], str],
) -> Plan | None:
    """THE access hook: may ``ticket``'s client have ``target``?  None when
    it may (always, without site rules), else the refusal to send instead
    (401 with its challenge, 403, 429 with Retry-After, 503), made by the
    pure layer (:func:`serverio.http.access.access_plan`).

    Every feature with a resolved target calls this instead of matching
    URLs itself: the pipeline for what the handler resolved (a file, a
    listing, a sidecar), and later a write, a proxy route, a mount or an
    archive member, with an :class:`~serverio.http.access.AccessTarget` of
    its own kind.  The decision is :meth:`serverio.site.service.Site.admit`;
    a rule passed here is recorded in ``ticket`` (its responses are then
    private, its error pages shown).

    Cancellation handling: the password check is the only wait (in the
    site's ``auth`` pool, abandoned like any pooled call); the caller
    closes whatever it resolved if this is cancelled.
    """
    site = deps.site
    if site is None or ticket is None:
        return None
    got = await site.admit(target, ticket, client)
    if got.allowed:
        return None
    return access_plan(got, now, head=ticket.req.method == b"HEAD")


async def complete_body(
    deps: Deps,
    req: RequestFacts,
    content: Content,
    now: float,
    client: Callable[[], str],
    wait: Wait,
    head: RawHead = NO_HEAD,
) -> Answer | None:
    """The answer to a request that carries content: a write (PUT,
    DELETE) to the hooks' write step when one is installed
    (:func:`complete_write`); else the handler's ``receive`` step (it may
    pull ``content``) when one is installed, after the site's routing and
    access rules (never before them); otherwise, or when it returns None,
    the handler's answer as for any request (a POST to a file: 405 with
    ``Allow``, the content left unread).  None: the client went away while
    it waited.  The transport owns ``content``: it drains what is left
    unread, or closes.

    Cancellation handling: as :func:`complete`; a step cancelled mid-pull
    leaves ``content`` unusable, and the transport then closes (HTTP/1.1)
    or resets the stream (HTTP/2).
    """
    handler = deps.handler
    if handler.hosts is not None and (refused := misdirected(deps, req, now)) is not None:
        return refused  # the content is left unread (the transport drains or closes)
    if handler.write is not None and _writes(handler, req):
        return await complete_write(deps, req, content, now, client)
    step = handler.receive
    if step is None:
        got = _start(deps, req, now)
        if type(got) is Waiting:
            return await complete(deps, got, now, client, wait, content, head)
        assert type(got) is tuple
        return got
    site = deps.site
    ticket: Ticket | None = None
    try:
        if site is not None:
            # The site's routing (its access rules on the request) first: a
            # step that accepts content never runs before them.
            ticket = await site.route(req, now, client)
            if ticket.plan is not None:
                return _finished(site, ticket.plan, -1, ticket, req)
            req = ticket.req
        plan = await step(req, content, now)
    except HTTPError as exc:
        plan = http_error_plan(exc, now, head_only=req.method == b"HEAD")
    if plan is not None:
        return _finished(site, plan, -1, ticket, req)
    if site is None:
        got = _start(deps, req, now)
        if type(got) is Waiting:
            return await complete(deps, got, now, client, wait)
        assert type(got) is tuple
        return got
    assert ticket is not None
    return await _respond_routed(deps, ticket, now, client, wait)


async def complete_write(
    deps: Deps,
    req: RequestFacts,
    content: WriteContent,
    now: float,
    client: Callable[[], str],
) -> Answer:
    """The answer to a write (PUT, DELETE; ``--upload``): the hooks'
    write step, handed :func:`access` (the one access hook) to ask on
    the target it resolves before it reads a byte of ``content``.  With
    site rules the site's finishing rules apply to the answer; its routing
    (redirects, rewrites, clean URLs) does not: a write names the file it
    writes, and its access is decided on that file (``Kind.WRITE``).

    Cancellation handling: the step removes what it created before the
    cancellation propagates (:mod:`serverio.upload.service`); nothing is
    owned here.
    """
    step = deps.handler.write
    assert step is not None
    req = dataclasses.replace(req, client=client())  # per-client budgets (RequestFacts.client)
    site = deps.site
    ticket = Ticket(None, req) if site is not None else None

    async def admit(target: AccessTarget) -> Plan | None:
        return await access(deps, target, ticket, now, client)

    chunks: ChunkSource | None = None
    try:
        got = await step(req, content, now, admit)
    except HTTPError as exc:
        got = http_error_plan(exc, now, head_only=req.method == b"HEAD")
    if type(got) is tuple:
        plan, chunks = got
    else:
        assert isinstance(got, Plan)
        plan = got
    return _finished(site, plan, -1, ticket, req, chunks)


class _NoContent:
    """The content of a write without a body (a DELETE, an empty PUT)."""

    declared: int | None = 0
    received = 0

    async def next_chunk(self) -> bytes | None:
        return None


NO_CONTENT: WriteContent = _NoContent()


async def _respond_routed(
    deps: Deps, ticket: Ticket, now: float, client: Callable[[], str], wait: Wait
) -> Answer | None:
    """The handler's answer to a request the site has routed (its
    ``ticket``), through the access hook; None: the client went away."""
    site = deps.site
    assert site is not None
    req = ticket.req
    try:
        got = site.respond_now(deps.handler, req, now)
        if type(got) is Prepared:
            return await _admitted(deps, got, ticket, now, client)
        assert isinstance(got, Deferred)
        prepared = await wait(got)
        if prepared is None:
            return None
    except HTTPError as exc:
        plan = http_error_plan(exc, now, head_only=req.method == b"HEAD")
        return _finished(site, plan, -1, ticket, req)
    return await _admitted(deps, prepared, ticket, now, client)


def _writes(handler: Handler, req: RequestFacts) -> bool:
    """Does the write step answer ``req`` (asked only when one is
    installed)?  Its methods (:attr:`~serverio.pipeline.hooks.Hooks.write_methods`)
    where its :attr:`~serverio.pipeline.hooks.Hooks.write_takes` says so,
    but a CORS preflight (the site's) and a request a proxy route takes."""
    if req.method not in handler.write_methods:
        return False
    if req.method == b"OPTIONS" and PREFLIGHT.of(req) is not None:
        return False
    takes = handler.write_takes
    if takes is not None and not takes(req):
        return False
    return not _proxied(handler, req)


def _proxied(handler: Handler, req: RequestFacts) -> bool:
    """Does a proxy route take ``req``?  A write under a proxy prefix goes
    upstream, not to the upload step (the routing precedence, docs/features.md)."""
    proxy = handler.proxy
    return proxy is not None and proxy.match(req) is not None


def _fallback(handler: Handler, prepared: Prepared, req: RequestFacts) -> object | None:
    """The ``--proxy-fallback`` route for a 404 the files gave ``req``
    (``prepared`` is then closed), or None."""
    proxy = handler.proxy
    if proxy is None or prepared.plan.status != 404:
        return None
    route = proxy.fallback(req)
    if route is not None:
        prepared.close()
    return route


async def _forward(
    deps: Deps,
    matched: object,
    up: tuple[RequestFacts, RawHead, Upload | None],
    now: float,
    client: Callable[[], str],
    ticket: Ticket | None,
    wait: Wait,
) -> Answer | None:
    """A proxied request's answer (:meth:`serverio.pipeline.hooks.Proxy.forward`),
    with the site's header rules and CORS fields (never an error page: the
    upstream's body is the answer); None when the client went away while
    the upstream worked.  An HTTPError (502, 503, 504) is raised to
    :func:`complete`, which answers it like any other.

    The exchange runs as a Deferred through the transport's ``wait``, so
    that a client that goes away cancels it as it cancels any handler step
    (HTTP/1.1's disconnect watcher, HTTP/2's RST_STREAM).

    Cancellation handling: the proxy closes what it holds if cancelled; an
    answer that arrived for a client already gone, or whose site finishing
    failed, has its body closed here.
    """
    got: list[tuple[Plan, Body]] = []
    proxy = deps.handler.proxy
    assert proxy is not None  # only a matched request gets here

    authed = ticket is not None and ticket.authed

    async def step(_: Prepared | None) -> Prepared:
        req, head, content = up
        got.append(await proxy.forward(matched, req, head, content, now, client, authed))
        return Prepared(got[0][0])  # the plan alone; the body stays in ``got``

    try:
        # The proxy asks for the client to be watched itself, before a wait
        # that may be long (serverio.proxy.service): a pooled exchange
        # answered at once costs no watcher task.
        if await wait(Deferred(step, watch_late=True)) is None:
            return None  # the client went away (the body, if any, is closed below)
        plan, body = got.pop()
    finally:
        for _, left in got:
            left.close()
    site = deps.site
    if site is not None:
        try:
            plan = site.finish(plan, ticket, pages=False)
        except BaseException:
            body.close()
            raise
    return plan, body, ticket


async def _admitted(
    deps: Deps, prepared: Prepared, ticket: Ticket, now: float, client: Callable[[], str]
) -> Answer:
    """The answer for ``prepared`` once the access hook (:func:`access`)
    allows what it resolved (and, when that was reached through a symlink
    inside the root, its resolved target); else the refusal, and
    ``prepared`` is closed unsent.  An answer that resolved nothing (an
    error, a directory's redirect) whose resolution went through a link
    is decided on where it led or stopped (``prepared.real``, e.g.
    ``/private/missing`` for ``/pub/link/missing``): the answer a direct
    request for that path gets, so a missing name tells no more than an
    existing one (no link, or no auth rules: no check, no cost).

    Cancellation handling: ``prepared`` is closed if the check is cancelled.
    """
    site = deps.site
    served = prepared.served
    targets: tuple[AccessTarget, ...] = ()
    if served is not None:
        targets = (served_target(served),)
        if prepared.real is not None:
            # Reached through a symlink inside the root: the resolved
            # target's rules apply too (both must pass).
            real = resolved_path(prepared.real, served.endswith("/"))
            targets = (*targets, served_target(real))
    elif prepared.real is not None:
        # Nothing served, past a link: the rules of where it led or
        # stopped, as the request path's were decided (the answer a direct
        # request for that path gets).
        targets = (AccessTarget((resolved_path(prepared.real),), Kind.REQUEST),)
    for target in targets:
        try:
            refusal = await access(deps, target, ticket, now, client)
        except BaseException:
            prepared.close()
            raise
        if refusal is not None:
            prepared.close()
            return _finished(site, refusal, -1, ticket)
    fd, prepared.fd = prepared.fd, -1
    return _finished(site, prepared.plan, fd, ticket, None, prepared.take_chunks())


def failed(deps: Deps, exc: HTTPError, now: float, head_only: bool) -> Answer:
    """The answer to a request whose facts could not be built."""
    return _finished(deps.site, http_error_plan(exc, now, head_only=head_only), -1, None)


def busy(deps: Deps, ticket: Ticket | None, now: float) -> Answer:
    """The answer to an event stream past its budget (the hooks'
    :meth:`EventSource.busy_plan`, a 503), finished like any other."""
    events = deps.handler.hooks.events
    assert events is not None  # only a streaming plan gets here
    return _finished(deps.site, events.busy_plan(now), -1, ticket)


def finish(deps: Deps, plan: Plan, ticket: Ticket | None) -> Answer:
    """The answer for a plan the transport chose itself (the site's
    finishing rules apply to it as to any other)."""
    return _finished(deps.site, plan, -1, ticket)


def _finished(
    site: SiteSteps | None,
    plan: Plan,
    fd: int,
    ticket: Ticket | None,
    req: RequestFacts | None = None,
    chunks: ChunkSource | None = None,
) -> Answer:
    """The site's finishing rules (its error pages first, then the built-in
    HTML page for a client that prefers it, then header rules), or without
    site rules the built-in page alone (:func:`serverio.http.errorpage.negotiated_error`,
    for ``req``'s Accept; no request, no choice: plain text); then the body
    source of the final plan (an error page replaces a body: the descriptor
    and a chunk source, ``chunks``, are then closed)."""
    if site is None and req is not None and plan.status >= 400:
        plan = error_for(plan, req)
    if site is not None:
        try:
            plan = site.finish(plan, ticket)
        except BaseException:
            Body((), fd).close()
            if chunks is not None:
                chunks.close()
            raise
    return plan, Body.of(plan, fd, chunks), ticket


def record(
    deps: Deps,
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
    if user and deps.site is not None:
        deps.site.count(user, size)
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
