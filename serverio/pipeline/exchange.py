"""One request's exchange as data: an immutable state and a synchronous step.

Answering a request is a small state machine.  :func:`begin` takes the
request facts and returns either the :class:`Final` answer (the warm path:
a warm-file cache hit, a route's redirect, an error; no state object, no
await) or the first :class:`Need` with the :class:`Exchange` state it was
raised in.  Everything after that is :func:`step`::

    step(state, event) -> (state, Need | Final)

where ``event`` is what the last need produced.  Every need is plain data
naming what must be awaited; the one driver (:func:`serverio.pipeline.driver.drive`)
fulfils it under the server's pools and limiters and feeds the result
back.  Nothing here awaits, and nothing here imports trio (a test holds
both, tests/test_exchange.py).

The needs, and what their event is:

=================  ====================================================
:class:`Authenticate` the site's routing (CORS preflight, access rules on
                   the request path, redirects, rewrites; it may wait for
                   a password check): a :class:`~serverio.site.ticket.Ticket`
:class:`Receive`   the handler's step for a request with content: a Plan,
                   or None (answer it as any other request)
:class:`Write`     the write stage (uploads, WebDAV): a Plan, or a Plan
                   and a :class:`~serverio.model.ChunkSource`
:class:`Upstream`  the reverse proxy's exchange: ``(Plan, Body)``
:class:`FileSlot`  an HTTP/2 connection's descriptor slot
                   (``--h2-max-open-files``): None
:class:`Resolve`   the handler's deferred part (a pool hop, a listing scan,
                   a coding or digest to produce, a transform): the
                   finished :class:`~serverio.model.Prepared`
:class:`Admit`     the one access hook on a resolved target: None (allowed)
                   or the refusal's Plan
=================  ====================================================

A need a fulfiller could not meet with an answer (an
:class:`~serverio.errors.HTTPError`: a 502 from the upstream, a saturated
pool) comes back as the event :class:`Failed`, which the step turns into
its error answer; a client that went away ends the exchange in the driver
(the step never sees it).

The order in which the stages take a request (the routing precedence) is
the order of :func:`begin` and :func:`_after_site`, documented once in
docs/architecture.md ("The request machine").

Ownership: a state holds at most one open thing (``held``, a resolved
answer waiting for the access hook, or ``deferred``, a handler step
waiting for a descriptor slot); :meth:`Exchange.close` releases it.  A
:class:`Final`'s body belongs to the transport, which closes it exactly
once after emitting it (or failing to).
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, NamedTuple, Protocol

from ..config import Config
from ..errors import HTTPError
from ..fs.body import NO_BODY, Body
from ..http.core import Plan, RequestFacts, http_error_plan, route
from ..http.errorpage import negotiated_error
from ..http.hosts import misdirected_plan
from ..model import ChunkSource, Prepared
from ..site.access import AccessTarget, Kind, resolved_path, served_target
from ..site.ticket import Ticket

if TYPE_CHECKING:  # the site rules are imported only when configured
    from ..site.service import Site
    from .handler import Deferred, Handler

    # The site rules as the layers above the pipeline name them (the
    # transports' shared environment holds them, and imports no feature).
    SiteRules = Site

__all__ = [
    "Admit",
    "Authenticate",
    "Exchange",
    "Failed",
    "FileSlot",
    "Final",
    "Machine",
    "Need",
    "Phase",
    "Receive",
    "Resolve",
    "Upstream",
    "Write",
    "begin",
    "finished",
    "misdirected",
    "step",
]


class Machine(Protocol):
    """What the step reads of the server (a connection's shared
    environment, :class:`serverio.net.env.ConnectionEnv`, is one)."""

    config: Config
    handler: Handler
    site: Site | None


class Final(NamedTuple):
    """The answer to send: its final plan, its body source (owned by whoever
    emits it) and the site's ticket (None without site rules)."""

    plan: Plan
    body: Body
    ticket: Ticket | None


# ------------------------------------------------------------------ needs


class Need:
    """What the exchange waits for; plain data, fulfilled by the driver."""

    __slots__ = ()


class Authenticate(Need):
    """The site's routing of ``req`` (event: a Ticket)."""

    __slots__ = ("req",)

    def __init__(self, req: RequestFacts) -> None:
        self.req = req


class Receive(Need):
    """The handler's step for a request with content (event: Plan | None)."""

    __slots__ = ("req",)

    def __init__(self, req: RequestFacts) -> None:
        self.req = req


class Write(Need):
    """The write stage's answer to ``req`` (event: a Plan, or a Plan and a
    ChunkSource); it asks the access hook with ``ticket`` on the target it
    resolves."""

    __slots__ = ("req", "ticket")

    def __init__(self, req: RequestFacts, ticket: Ticket | None) -> None:
        self.req = req
        self.ticket = ticket


class Upstream(Need):
    """The proxy's exchange for ``req`` on ``route`` (event: Plan, Body);
    ``authed``: an auth rule applied to the request path and passed."""

    __slots__ = ("authed", "req", "route")

    def __init__(self, route: object, req: RequestFacts, authed: bool) -> None:
        self.route = route
        self.req = req
        self.authed = authed


class FileSlot(Need):
    """One of the connection's descriptor slots (event: None)."""

    __slots__ = ()


class Resolve(Need):
    """The handler's deferred part (event: the finished Prepared)."""

    __slots__ = ("deferred",)

    def __init__(self, deferred: Deferred) -> None:
        self.deferred = deferred


class Admit(Need):
    """The access hook on ``target`` (event: None, or the refusal's Plan)."""

    __slots__ = ("target", "ticket")

    def __init__(self, target: AccessTarget, ticket: Ticket) -> None:
        self.target = target
        self.ticket = ticket


class Failed:
    """The event of a need that ended in an :class:`HTTPError`."""

    __slots__ = ("error",)

    def __init__(self, error: HTTPError) -> None:
        self.error = error


# ------------------------------------------------------------------ state


class Phase(enum.Enum):
    """Which need the exchange waits for (what its next event is)."""

    ROUTED = "routed"  # Authenticate
    RECEIVED = "received"  # Receive
    WRITTEN = "written"  # Write
    FORWARDED = "forwarded"  # Upstream
    SLOT = "slot"  # FileSlot
    RESOLVED = "resolved"  # Resolve
    ADMITTED = "admitted"  # Admit


class Exchange(NamedTuple):
    """The state of one exchange between its needs (immutable: each step
    returns a new one).  ``content``: the request carries content;
    ``slotless``: the transport caps body descriptors and this exchange
    holds no slot yet (HTTP/2 at ``--h2-max-open-files``)."""

    machine: Machine
    req: RequestFacts
    now: float
    phase: Phase
    ticket: Ticket | None = None
    content: bool = False
    slotless: bool = False
    # A resolved answer waiting for the access hook (ADMITTED).
    held: Prepared | None = None
    # The access targets still to ask after the current one (ADMITTED).
    targets: tuple[AccessTarget, ...] = ()
    # A handler step waiting for a descriptor slot (SLOT).
    deferred: Deferred | None = None

    def close(self) -> None:
        """Release what the state holds (idempotent)."""
        if self.held is not None:
            self.held.close()
        if self.deferred is not None:
            self.deferred.close()


Step = tuple[Exchange, "Need | Final"]
# The first step: no state when the answer is had at once.
First = tuple["Exchange | None", "Need | Final"]


# ------------------------------------------------------------------ begin


def begin(
    machine: Machine, req: RequestFacts, now: float, content: bool = False, slotless: bool = False
) -> First:
    """The first step: ``(None, Final)`` when the answer can be had without
    awaiting (the warm GET: no state object, no coroutine), else the state
    and its first need.

    The stages take a request in this order (the precedence rule):

    1. the Host stage (:func:`misdirected`, 421);
    2. the write stage (:attr:`~serverio.pipeline.hooks.Hooks.write`: its
       methods where it answers, but a CORS preflight and a request a proxy
       route takes), which decides access itself on what it resolves;
    3. with site rules, the site (:class:`Authenticate`: CORS preflight,
       reserved paths, the core's routing, access rules on the request
       path, redirects and rewrites), then :func:`_after_site`;
    4. without them: the handler's receive step for content, the reserved
       paths (:attr:`~serverio.pipeline.hooks.Hooks.route`), the proxy
       routes, the core's routing, the files (:func:`_plain`).
    """
    handler = machine.handler
    if handler.hosts is not None and (refused := misdirected(machine, req, now)) is not None:
        return None, refused
    if handler.write is not None and _writes(handler, req):
        ticket = Ticket(None, req) if machine.site is not None else None
        state = Exchange(machine, req, now, Phase.WRITTEN, ticket, content, slotless)
        return state, Write(req, ticket)
    if machine.site is not None:
        state = Exchange(machine, req, now, Phase.ROUTED, None, content, slotless)
        return state, Authenticate(req)
    if content and handler.receive is not None:
        return Exchange(machine, req, now, Phase.RECEIVED, None, content, slotless), Receive(req)
    return _plain(machine, req, now, content, slotless)


def _plain(machine: Machine, req: RequestFacts, now: float, content: bool, slotless: bool) -> First:
    """Without site rules: the reserved paths, the proxy routes, the core's
    routing, then the files."""
    handler = machine.handler
    router = handler.router  # the hooks' router of reserved paths (None: no call)
    if router is None or (plan := router(req, now)) is None:
        proxy = handler.proxy  # the proxy hook (None: no call)
        if proxy is not None and (matched := proxy.match(req)) is not None:
            state = Exchange(machine, req, now, Phase.FORWARDED, None, content, slotless)
            return state, Upstream(matched, req, False)
        plan = route(req, machine.config, now)
    if plan is not None:
        if plan.status >= 400:
            plan = negotiated_error(plan, req.accept)
        return None, Final(plan, NO_BODY if plan.stream else Body.of(plan), None)
    try:
        got = handler.respond_now(req, now)
    except HTTPError as exc:
        plan = http_error_plan(exc, now, head_only=req.method == b"HEAD")
        plan = negotiated_error(plan, req.accept)
        return None, Final(plan, Body.of(plan), None)
    if type(got) is Prepared:
        # The warm path: a 200 pays one comparison (and a descriptor test
        # where the transport caps them).
        if got.plan.status < 400 and not (slotless and got.fd >= 0):
            return None, Final(got.plan, got.take_body(), None)
        return _resolved(Exchange(machine, req, now, Phase.RESOLVED, None, content, slotless), got)
    assert not isinstance(got, Prepared)
    return _deferred(Exchange(machine, req, now, Phase.RESOLVED, None, content, slotless), got)


# ------------------------------------------------------------------ step


def step(state: Exchange, event: object) -> Step:
    """The next state and what it needs (or the :class:`Final` answer),
    from ``event``, the result of the need ``state`` waited for.

    Synchronous and without I/O but the handler's own inline resolution
    (``--fs-workers 0``).  An :class:`HTTPError` raised here becomes its
    error answer; whatever ``state`` held is closed then.
    """
    if type(event) is Failed:
        return state, _failed(state, event.error)
    try:
        return _STEPS[state.phase](state, event)
    except HTTPError as exc:
        return state, _failed(state, exc)


def _routed(state: Exchange, ticket: object) -> Step:
    """The site's routing answered: its own answer, or on to the stages
    after it."""
    assert type(ticket) is Ticket
    state = state._replace(ticket=ticket, req=ticket.req)
    plan = ticket.plan
    if plan is not None:
        if plan.stream:
            return state, Final(plan, NO_BODY, ticket)  # the transport's own branch
        return state, finished(state.machine.site, plan, -1, ticket, ticket.req)
    if state.content and state.machine.handler.receive is not None:
        return state._replace(phase=Phase.RECEIVED), Receive(state.req)
    return _after_site(state)


def _after_site(state: Exchange) -> Step:
    """The site's rules (CORS, access on the request path, redirects,
    rewrites) have passed: a proxied path goes upstream now, else the
    files answer."""
    proxy = state.machine.handler.proxy
    if proxy is not None and (matched := proxy.match(state.req)) is not None:
        ticket = state.ticket
        authed = ticket is not None and ticket.authed
        return state._replace(phase=Phase.FORWARDED), Upstream(matched, state.req, authed)
    return _respond(state)


def _received(state: Exchange, plan: object) -> Step:
    """The handler's receive step answered, or declined (None)."""
    if plan is not None:
        assert isinstance(plan, Plan)
        return state, finished(state.machine.site, plan, -1, state.ticket, state.req)
    if state.machine.site is not None:
        return _after_site(state)
    then, out = _plain(state.machine, state.req, state.now, state.content, state.slotless)
    return (state if then is None else then), out


def _written(state: Exchange, got: object) -> Step:
    """The write stage's answer, finished by the site (its routing does not
    apply: a write names the file it writes)."""
    chunks: ChunkSource | None = None
    if type(got) is tuple:
        plan, chunks = got
    else:
        assert isinstance(got, Plan)
        plan = got
    return state, finished(state.machine.site, plan, -1, state.ticket, state.req, chunks)


def _forwarded(state: Exchange, got: object) -> Step:
    """The upstream's answer, with the site's header rules and CORS fields
    (never an error page: the upstream's body is the answer)."""
    assert type(got) is tuple
    plan, body = got
    site = state.machine.site
    if site is not None:
        try:
            plan = site.finish(plan, state.ticket, pages=False)
        except BaseException:
            body.close()
            raise
    return state, Final(plan, body, state.ticket)


def _slot(state: Exchange, _: object) -> Step:
    """A descriptor slot is held: the handler's step that waited for it,
    or the handler asked again (an inline answer dropped for the slot)."""
    state = state._replace(slotless=False)
    deferred = state.deferred
    if deferred is not None:
        return state._replace(phase=Phase.RESOLVED, deferred=None), Resolve(deferred)
    return _respond(state)


def _respond(state: Exchange) -> Step:
    """The handler's answer to the (routed) request."""
    machine = state.machine
    site = machine.site
    req = state.req
    if site is not None:
        got = site.respond_now(machine.handler, req, state.now)
    else:
        got = machine.handler.respond_now(req, state.now)
    if type(got) is Prepared:
        return _resolved(state._replace(phase=Phase.RESOLVED), got)
    assert not isinstance(got, Prepared)
    return _deferred(state._replace(phase=Phase.RESOLVED), got)


def _deferred(state: Exchange, deferred: Deferred) -> Step:
    """The handler must wait: a slot first where the transport caps
    descriptors (the step keeps what it holds meanwhile only if it holds
    nothing open), then :class:`Resolve`."""
    if state.slotless:
        if deferred.holds:
            deferred.close()  # asked again once the slot is held
            return state._replace(phase=Phase.SLOT), FileSlot()
        return state._replace(phase=Phase.SLOT, deferred=deferred), FileSlot()
    return state._replace(phase=Phase.RESOLVED), Resolve(deferred)


def _resolved(state: Exchange, prepared: object) -> Step:
    """What the handler resolved: ``--proxy-fallback`` for a 404, else the
    access hook on it (with site rules), else the answer."""
    assert type(prepared) is Prepared
    if state.slotless and (prepared.fd >= 0 or prepared.chunks is not None):
        # An inline answer that holds a descriptor, with no slot: dropped,
        # and asked again once a slot is free (at most one such descriptor
        # exists meanwhile: this step is synchronous).
        prepared.close()
        return state._replace(phase=Phase.SLOT), FileSlot()
    machine = state.machine
    req = state.req
    if prepared.plan.status >= 400:
        fallback = _fallback(machine.handler, prepared, req)
        if fallback is not None:  # the files answered 404: --proxy-fallback
            ticket = state.ticket
            authed = ticket is not None and ticket.authed
            return state._replace(phase=Phase.FORWARDED), Upstream(fallback, req, authed)
    ticket = state.ticket
    if machine.site is None or ticket is None:
        if prepared.plan.status >= 400:
            prepared.plan = negotiated_error(prepared.plan, req.accept)
        return state, Final(prepared.plan, prepared.take_body(), None)
    targets = _targets(prepared)
    if not targets:
        return state, _admitted(state, prepared)
    state = state._replace(phase=Phase.ADMITTED, held=prepared, targets=targets[1:])
    return state, Admit(targets[0], ticket)


def _admit(state: Exchange, refusal: object) -> Step:
    """The access hook's decision on one target of what was resolved."""
    prepared = state.held
    ticket = state.ticket
    assert prepared is not None and ticket is not None
    if refusal is not None:
        assert isinstance(refusal, Plan)
        prepared.close()
        state = state._replace(held=None)
        return state, finished(state.machine.site, refusal, -1, state.ticket)
    if state.targets:
        target, rest = state.targets[0], state.targets[1:]
        return state._replace(targets=rest), Admit(target, ticket)
    return state._replace(held=None), _admitted(state, prepared)


def _admitted(state: Exchange, prepared: Prepared) -> Final:
    fd, prepared.fd = prepared.fd, -1
    chunks = prepared.take_chunks()
    return finished(state.machine.site, prepared.plan, fd, state.ticket, None, chunks)


def _targets(prepared: Prepared) -> tuple[AccessTarget, ...]:
    """What the access hook decides for a resolved answer: what it serves
    and, when that was reached through a symlink inside the root, its
    resolved target (both must pass).  An answer that resolved nothing (an
    error, a directory's redirect) whose resolution went through a link is
    decided on where it led or stopped (``prepared.real``, e.g.
    ``/private/missing`` for ``/pub/link/missing``): the answer a direct
    request for that path gets, so a missing name tells no more than an
    existing one (no link, or no auth rules: no check, no cost)."""
    served = prepared.served
    if served is not None:
        if prepared.real is None:
            return (served_target(served),)
        real = resolved_path(prepared.real, served.endswith("/"))
        return (served_target(served), served_target(real))
    if prepared.real is not None:
        return (AccessTarget((resolved_path(prepared.real),), Kind.REQUEST),)
    return ()


def _failed(state: Exchange, exc: HTTPError) -> Final:
    state.close()
    req = state.req
    plan = http_error_plan(exc, state.now, head_only=req.method == b"HEAD")
    return finished(state.machine.site, plan, -1, state.ticket, req)


_STEPS = {
    Phase.ROUTED: _routed,
    Phase.RECEIVED: _received,
    Phase.WRITTEN: _written,
    Phase.FORWARDED: _forwarded,
    Phase.SLOT: _slot,
    Phase.RESOLVED: _resolved,
    Phase.ADMITTED: _admit,
}


# ------------------------------------------------------------------ stages


def misdirected(machine: Machine, req: RequestFacts, now: float) -> Final | None:
    """The Host stage, before anything else looks at ``req`` (routing,
    access, a write, a proxy route): None when its ``Host`` (HTTP/2:
    ``:authority``) is one this server answers for, else the 421 to send
    (the pure decision: :func:`serverio.http.hosts.misdirected_plan`; the
    rule is the handler's, None when Host is not checked).  The site's
    header rules apply to the refusal, not its error pages: its one line
    names the option that admits the host."""
    rule = machine.handler.hosts
    if rule is None:
        return None
    plan = misdirected_plan(rule, req, now)
    if plan is None:
        return None
    site = machine.site
    if site is not None:
        plan = site.finish(plan, Ticket(None, req), pages=False)
    return Final(plan, Body.of(plan), None)


def _writes(handler: Handler, req: RequestFacts) -> bool:
    """Does the write stage answer ``req`` (asked only when one is
    installed)?  Its methods (:attr:`~serverio.pipeline.hooks.Hooks.write_methods`)
    where its :attr:`~serverio.pipeline.hooks.Hooks.write_takes` says so,
    but a CORS preflight (the site's) and a request a proxy route takes
    (a write under a proxy prefix goes upstream)."""
    if req.method not in handler.write_methods:
        return False
    if req.method == b"OPTIONS" and req.extra.cors_method is not None:
        return False
    takes = handler.write_takes
    if takes is not None and not takes(req):
        return False
    proxy = handler.proxy
    return proxy is None or proxy.match(req) is None


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


def finished(
    site: Site | None,
    plan: Plan,
    fd: int,
    ticket: Ticket | None,
    req: RequestFacts | None = None,
    chunks: ChunkSource | None = None,
) -> Final:
    """The site's finishing rules (its error pages first, then the built-in
    HTML page for a client that prefers it, then header rules), or without
    site rules the built-in page alone (:func:`serverio.http.errorpage.negotiated_error`,
    for ``req``'s Accept; no request, no choice: plain text); then the body
    source of the final plan (an error page replaces a body: the descriptor
    and a chunk source, ``chunks``, are then closed)."""
    if site is None and req is not None and plan.status >= 400:
        plan = negotiated_error(plan, req.accept)
    if site is not None:
        try:
            plan = site.finish(plan, ticket)
        except BaseException:
            Body((), fd).close()
            if chunks is not None:
                chunks.close()
            raise
    return Final(plan, Body.of(plan, fd, chunks), ticket)
