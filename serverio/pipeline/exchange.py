"""One request's exchange as data: an immutable state and a synchronous step.

Answering a request is a small state machine.
:func:`serverio.pipeline.stages.begin` takes the request facts and
returns either the :class:`Final` answer (the warm path: a warm-file
cache hit, a route's redirect, an error; no state object, no await) or
the first :class:`Need` with the :class:`Exchange` state it was raised
in.  Everything after that is :func:`step`::

    step(state, event) -> (state, Need | Final)

where ``event`` is what the last need produced.  Every need is plain data
naming what must be awaited; the one driver (:func:`serverio.pipeline.driver.drive`)
fulfils it under the server's pools and limiters and feeds the result
back.  Nothing here awaits, and nothing here imports trio (a test holds
both, tests/test_exchange_sync.py).

The needs, and what their event is:

=================  ====================================================
:class:`Authenticate` the site's routing (CORS preflight, access rules on
                   the request path, redirects, rewrites; it may wait for
                   a password check): a :class:`~serverio.http.access.Ticket`
:class:`Receive`   the handler's step for a request with content: a Plan,
                   or None (answer it as any other request)
:class:`Write`     the write stage (uploads, WebDAV): a Plan, or a Plan
                   and a :class:`~serverio.model.ChunkSource`
:class:`Upstream`  the reverse proxy's exchange: ``(Plan, Body)``
:class:`FileSlot`  an HTTP/2 connection's descriptor slot
                   (``--h2-max-open-files``): None
:class:`Resolve`   the handler's resolution that must wait (a pool hop,
                   a shared revalidation, live reload's transform): the
                   :class:`~serverio.model.Prepared` (its follow-ups,
                   ``todo``, asked of the handler next)
:class:`Listing`   a resolved directory's listing to scan and render (or
                   its archive form): the finished Prepared
:class:`Coding`    a content coding to produce and/or a Repr-Digest for a
                   resolved file: the finished Prepared
:class:`Admit`     the one access hook on a resolved target: None (allowed)
                   or the refusal's Plan
:class:`Turn`      a feature stage's own await (the login feature's
                   sign-in, share and trusted-header turns): what its
                   ``run`` returns
=================  ====================================================

A need a fulfiller could not meet with an answer (an
:class:`~serverio.errors.HTTPError`: a 502 from the upstream, a saturated
pool) comes back as the event :class:`Failed`, which the step turns into
its error answer; a client that went away ends the exchange in the driver
(the step never sees it).

The order in which the stages take a request (the routing precedence) is
the order of the stage list (:mod:`serverio.pipeline.stages`), documented
once there and in docs/architecture.md ("The request machine").

The handler's needs are data too: what to resolve (the request, the cache
candidate), or the resolved :class:`~serverio.model.Prepared` a follow-up
finishes; the driver fulfils them through the handler
(:meth:`serverio.pipeline.handler.Handler.fulfil`).  A ``Prepared`` is an
immutable value: a follow-up makes a new one.

Ownership: a state holds at most one open thing (``held``, a resolved
answer waiting for the access hook, or ``pending``, a handler need
waiting for a descriptor slot); :meth:`Exchange.close` releases it.
A need that holds a resolved answer (:class:`Listing`, :class:`Coding`)
owns it until its fulfiller takes it over; closing is idempotent (the
answer's :class:`~serverio.model.Opened`), so the driver closes the need
on every failure path.  A
:class:`Final`'s body belongs to the transport, which closes it exactly
once after emitting it (or failing to).
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple, Protocol

from ..config import Config
from ..errors import HTTPError
from ..fs.body import NO_BODY, Body
from ..http.access import (
    Access,
    AccessTarget,
    Kind,
    Ticket,
    resolved_path,
    served_target,
)
from ..http.core import Allow, Plan, RequestFacts, http_error_plan, route
from ..http.errorpage import error_for
from ..http.hosts import HostRule, misdirected_plan
from ..model import CacheCandidate, ChunkSource, Prepared

__all__ = [
    "Admit",
    "Admitted",
    "Authenticate",
    "Coding",
    "Exchange",
    "Failed",
    "FileSlot",
    "Final",
    "FollowUp",
    "HandlerNeed",
    "Listing",
    "Machine",
    "Need",
    "Phase",
    "Receive",
    "Resolve",
    "SiteRules",
    "SiteSteps",
    "Stage",
    "Step",
    "Turn",
    "TurnRun",
    "Upstream",
    "Write",
    "Wrote",
    "access_targets",
    "files",
    "finished",
    "forwarded",
    "misdirected",
    "step",
]


class Fallback(Protocol):
    """What the step asks of the proxy (:class:`serverio.pipeline.hooks.Proxy`)."""

    def fallback(self, req: RequestFacts) -> object | None: ...


# A write stage's step (serverio.pipeline.hooks.WriteStep), as data here.
WriteRun = Callable[..., Awaitable[Any]]


class Warm(Protocol):
    """The precomputed answers of warm files
    (:class:`serverio.pipeline.warm.WarmAnswers`)."""

    def answer(self, req: RequestFacts, now: float) -> Final | None: ...

    def resolved(
        self, req: RequestFacts, now: float
    ) -> tuple[Final, tuple[AccessTarget, ...]] | None: ...


class Files(Protocol):
    """What the step reads of the request handler
    (:class:`serverio.pipeline.handler.Handler`)."""

    # The Host names answered (None: any, no check).
    hosts: HostRule | None
    # The server's stage list, built from ``hooks`` on first use (None).
    stages: tuple[Stage, ...] | None
    # The methods a path allows, for the core's OPTIONS and 405 (the write
    # feature's: serverio.pipeline.hooks.Hooks.allow).
    allow: Allow

    @property
    def hooks(self) -> Any: ...  # serverio.pipeline.hooks.Hooks

    @property
    def receive(self) -> Callable[[RequestFacts, Any, float], Awaitable[Plan | None]] | None: ...

    @property
    def proxy(self) -> Fallback | None: ...

    def respond_now(self, req: RequestFacts, now: float) -> Prepared | Resolve | Listing | Coding:
        """The answer at once, or the need it waits for."""
        ...

    def followups(
        self, prepared: Prepared, req: RequestFacts, now: float
    ) -> Prepared | Listing | Coding:
        """A resolved answer finished from the caches, or the need that
        finishes it."""
        ...

    @property
    def warm(self) -> Warm: ...  # serverio.pipeline.warm.WarmAnswers


class SiteSteps(Protocol):
    """What the exchange asks of the site rules
    (:class:`serverio.site.service.Site` is one): named here, not imported,
    so that the pipeline stays below the features that plug into it (and a
    plain static start never imports the site rules)."""

    async def route(self, req: RequestFacts, now: float, client: Callable[[], str]) -> Ticket: ...

    def route_now(self, req: RequestFacts, now: float) -> Ticket | None:
        """:meth:`route`'s ticket when it needs no wait (None: the
        :class:`Authenticate` need asks :meth:`route`)."""
        ...

    async def admit(
        self, target: AccessTarget, ticket: Ticket, client: Callable[[], str]
    ) -> tuple[Access, Ticket]:
        """The decision on a resolved target, and ``ticket`` with it
        recorded (a new ticket: tickets are immutable)."""
        ...

    def admit_now(self, target: AccessTarget, ticket: Ticket) -> Ticket | None:
        """:meth:`admit` when it needs no wait: the ticket with the allow
        recorded; None: the :class:`Admit` need asks :meth:`admit`."""
        ...

    def alternative(self, req: RequestFacts, plan: Plan) -> RequestFacts | None:
        """The request to answer instead of ``req`` when the handler's
        ``plan`` for it calls for one (clean URLs, ``--trailing-slash
        remove``), or None."""
        ...

    def finish(self, plan: Plan, ticket: Ticket | None, pages: bool = True) -> Plan: ...

    def count(self, user: str, size: int) -> None: ...

    def user_counts(self) -> dict[str, tuple[int, int, int]]:
        """What :meth:`count` and the access hook's refusals added up, per
        user of the users files (the label set of /metrics stays bounded):
        ``(requests, bytes, denied)``; a copy, read by the metrics."""
        ...


# The site rules as the layers above the pipeline name them (the
# transports' shared environment holds them, and imports no feature).
SiteRules = SiteSteps


class Machine(Protocol):
    """What the step reads of the server (a connection's shared
    environment, :class:`serverio.net.env.ConnectionEnv`, is one)."""

    @property
    def config(self) -> Config: ...

    @property
    def handler(self) -> Files: ...

    @property
    def site(self) -> SiteSteps | None: ...


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

    __slots__ = ("req", "run")

    def __init__(
        self, req: RequestFacts, run: Callable[[RequestFacts, Any, float], Awaitable[Plan | None]]
    ) -> None:
        self.req = req
        self.run = run


class Write(Need):
    """A write stage's answer to ``req`` (event: a Plan, or a Plan and a
    ChunkSource): ``run``, the stage's
    :data:`~serverio.pipeline.hooks.WriteStep`, asks the access hook with
    ``ticket`` on the target it resolves."""

    __slots__ = ("req", "run", "ticket")

    def __init__(self, req: RequestFacts, ticket: Ticket | None, run: WriteRun) -> None:
        self.req = req
        self.ticket = ticket
        self.run = run


class Upstream(Need):
    """``proxy``'s exchange (a :class:`serverio.pipeline.hooks.Proxy`) for
    ``req`` on ``route`` (event: Plan, Body); ``authed``: an auth rule
    applied to the request path and passed."""

    __slots__ = ("authed", "proxy", "req", "route")

    def __init__(self, proxy: object, route: object, req: RequestFacts, authed: bool) -> None:
        self.proxy = proxy
        self.route = route
        self.req = req
        self.authed = authed


class FileSlot(Need):
    """One of the connection's descriptor slots (event: None)."""

    __slots__ = ()


class Resolve(Need):
    """The handler's resolution that must wait (event: the resolved
    Prepared): a pool hop for ``req`` (``hit``: the warm-file cache
    candidate to revalidate, ``mono`` the trio clock it was found at,
    ``boundary`` a range answer's multipart boundary), or, ``base`` not
    None, the hooks' transform of ``base``'s answer (live reload)."""

    __slots__ = ("base", "boundary", "hit", "mono", "req")

    def __init__(
        self,
        req: RequestFacts,
        boundary: str = "",
        mono: float = 0.0,
        hit: CacheCandidate | None = None,
        *,
        base: RequestFacts | None = None,
    ) -> None:
        self.req = req
        self.boundary = boundary
        self.mono = mono
        self.hit = hit
        self.base = base

    holds = False  # nothing open yet

    def close(self) -> None:
        """Nothing to release."""


class FollowUp(Need):
    """A follow-up on ``prepared``, the answer resolved for ``req``, which
    the need owns until its fulfiller takes it over (event: the finished
    Prepared)."""

    __slots__ = ("prepared", "req")

    def __init__(self, prepared: Prepared, req: RequestFacts) -> None:
        self.prepared = prepared
        self.req = req

    @property
    def holds(self) -> bool:
        """Does it hold something open (a descriptor)?"""
        return self.prepared.holds

    def close(self) -> None:
        """Release the answer (idempotent)."""
        self.prepared.close()


class Listing(FollowUp):
    """A resolved directory's listing to scan and render, or its other form
    (a folder archive)."""

    __slots__ = ()


class Coding(FollowUp):
    """A content coding to produce on the fly and/or a representation
    digest for a resolved file."""

    __slots__ = ()


# What the handler answers a need for.
HandlerNeed = Resolve | Listing | Coding


class Admit(Need):
    """The access hook on ``target`` (event: :class:`Admitted`)."""

    __slots__ = ("target", "ticket")

    def __init__(self, target: AccessTarget, ticket: Ticket) -> None:
        self.target = target
        self.ticket = ticket


class Admitted(NamedTuple):
    """The access hook's answer on a target: the refusal to send (None:
    allowed) and the ticket with the decision recorded."""

    refusal: Plan | None
    ticket: Ticket | None


class Wrote(NamedTuple):
    """A write stage's answer (a plan, or a plan and its streamed body)
    and the ticket with the access hook's decisions on what it wrote
    recorded (None without site rules)."""

    answer: Plan | tuple[Plan, ChunkSource]
    ticket: Ticket | None


# A feature stage's own turn: (req, content or None, now, client) -> its event.
TurnRun = Callable[[RequestFacts, Any, float, Callable[[], str]], Awaitable[object]]


class Turn(Need):
    """A feature stage's own await (event: what ``run`` returns): the
    driver calls ``run(req, content, now, client)`` with the request's
    content (None: none, or left unread) and the connection's client (a
    :class:`~serverio.pipeline.request.ForwardedClient` under
    ``--trusted-proxies`` tells its own peer apart)."""

    __slots__ = ("req", "run")

    def __init__(self, req: RequestFacts, run: TurnRun) -> None:
        self.req = req
        self.run = run


class Failed:
    """The event of a need that ended in an :class:`HTTPError`."""

    __slots__ = ("error",)

    def __init__(self, error: HTTPError) -> None:
        self.error = error


# ------------------------------------------------------------------ state


class Phase(enum.Enum):
    """Which need the exchange waits for (what its next event is)."""

    STAGE = "stage"  # the need of ``state.stage`` (its ``step`` takes the event)
    FORWARDED = "forwarded"  # Upstream
    SLOT = "slot"  # FileSlot
    RESOLVED = "resolved"  # Resolve
    ADMITTED = "admitted"  # Admit


class Stage:
    """One feature's place in the request machine: :mod:`serverio.pipeline.stages`
    holds the list, its order and the built-in stages; subclass and
    override.  All three are synchronous, with no I/O."""

    __slots__ = ()

    name = "stage"

    def takes(self, req: RequestFacts, now: float) -> object | None:
        """The stage's claim on ``req`` (handed to :meth:`enter`), or None:
        the next stage is asked.  Pure: asked of every request that
        reaches the stage."""
        raise NotImplementedError

    def enter(self, state: Exchange, claim: object) -> Step:
        """The stage's first step on a request it claimed: a need (the
        state's phase is :attr:`Phase.STAGE`, its ``stage`` this one), or
        the :class:`Final` answer."""
        raise NotImplementedError

    def step(self, state: Exchange, event: object) -> Step:
        """The stage's next step, from the event that met its need."""
        raise NotImplementedError


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
    # A handler need waiting for a descriptor slot (SLOT).
    pending: HandlerNeed | None = None
    # The stage that took the request, and its place in the list (the
    # stages after it are asked when it hands the request on).
    stage: Stage | None = None
    at: int = -1
    # The request the handler answers instead of ``req`` (the site's clean
    # URL or slashless directory: SiteSteps.alternative); None: ``req``.
    asked: RequestFacts | None = None

    def close(self) -> None:
        """Release what the state holds (idempotent)."""
        if self.held is not None:
            self.held.close()
        if self.pending is not None:
            self.pending.close()


Step = tuple[Exchange, "Need | Final"]
# The first step: no state when the answer is had at once.
First = tuple["Exchange | None", "Need | Final"]


# ------------------------------------------------------------------ the files


def files(
    machine: Machine,
    req: RequestFacts,
    now: float,
    content: bool,
    slotless: bool,
    state: Exchange | None = None,
) -> First:
    """The end of the stage list: what no stage took is the files'.
    Without site rules the core's routing first (methods, hidden paths:
    with them the site ran it), then the handler.  ``state``: the
    exchange so far (None from :func:`~serverio.pipeline.stages.begin`:
    the warm path makes none unless it must wait)."""
    handler = machine.handler
    site = machine.site
    if site is not None:
        assert state is not None  # the site stage took the request first
        ticket = state.ticket
        if not content and ticket is not None and _warm_ticket(ticket, req):
            # A warm file's precomputed answer stands in for the handler's;
            # the access hook still decides what it serves, and the site
            # finishes it (header rules, CORS) for this request.
            kept = handler.warm.resolved(req, now)
            if kept is not None and kept[0].plan.status == 200:  # a plain file's
                final, targets = kept
                for target in targets:
                    admitted = site.admit_now(target, ticket)
                    if admitted is None:
                        break  # the long way: the Admit need decides it
                    ticket = admitted
                else:
                    if ticket is not state.ticket:  # a decision recorded
                        state = state._replace(ticket=ticket)
                    return state, finished(site, final.plan, -1, ticket)
        return _respond(state._replace(phase=Phase.RESOLVED, stage=None, at=-1))
    if not content:
        # A warm file's precomputed answer (routing, the decision and the
        # cache's memo done once per second): the warm path, one call.
        warm = handler.warm.answer(req, now)
        if warm is not None:
            return state, warm
    plan = route(req, machine.config, now, handler.allow)
    if plan is not None:
        if plan.status >= 400:
            plan = error_for(plan, req)
        return state, Final(plan, NO_BODY if plan.stream else Body.of(plan), None)
    try:
        got = handler.respond_now(req, now)
    except HTTPError as exc:
        plan = http_error_plan(exc, now, head_only=req.method == b"HEAD")
        plan = error_for(plan, req)
        return state, Final(plan, Body.of(plan), None)
    if type(got) is Prepared:
        # The warm path: a 200 pays one comparison (and a descriptor test
        # where the transport caps them).
        if got.plan.status < 400 and not (slotless and got.opened is not None):
            return state, Final(got.plan, got.take_body(), None)
        if state is None:
            state = Exchange(machine, req, now, Phase.RESOLVED, None, content, slotless)
        return _resolved(state._replace(phase=Phase.RESOLVED, stage=None), got)
    assert not isinstance(got, Prepared)
    if state is None:
        state = Exchange(machine, req, now, Phase.RESOLVED, None, content, slotless)
    return _waits(state._replace(stage=None), got)


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


def forwarded(state: Exchange, got: object) -> Step:
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
    """A descriptor slot is held: the handler's need that waited for it,
    or the handler asked again (an answer dropped for the slot)."""
    state = state._replace(slotless=False)
    pending = state.pending
    if pending is not None:
        return state._replace(phase=Phase.RESOLVED, pending=None), pending
    return _respond(state)


def _warm_ticket(ticket: Ticket, req: RequestFacts) -> bool:
    """May a warm answer stand in for the handler's under site rules?  For a
    request the rules routed to the files (no rule's own answer) that sends
    no credentials of its own: an anonymous one, or a signed-in browser's
    (its session cookie names the ticket's user).  The handler's answer to
    a GET does not depend on who asks (the key, serverio.pipeline.warm,
    ignores ``authorization`` and ``extra``): what does is decided per
    request around it, as on the long way -- the site stage admitted the
    request path with the session as it is now (expired, altered or
    revoked: refused there), :func:`files` asks the access hook on each
    target the answer serves (an allow without a wait, else the long way),
    and the site's finish marks it private for a rule it passed.  Basic
    credentials (a password check may be due) and a share link's grant
    (its ``authorization``; its answer is finished by the sign-in feature)
    go the long way."""
    return ticket.plan is None and req.authorization is None


def _respond(state: Exchange) -> Step:
    """The handler's answer to the (routed) request."""
    if state.phase is not Phase.RESOLVED:
        state = state._replace(phase=Phase.RESOLVED)
    asked = state.asked
    got = state.machine.handler.respond_now(state.req if asked is None else asked, state.now)
    if isinstance(got, Prepared):
        return _resolved(state, got)
    return _waits(state, got)


def _waits(state: Exchange, need: HandlerNeed) -> Step:
    """The handler must wait: a slot first where the transport caps
    descriptors (the state keeps the need meanwhile only if it holds
    nothing open: else it is asked again once the slot is held), then
    the need itself."""
    if state.slotless:
        if need.holds:
            need.close()  # asked again once the slot is held
            return state._replace(phase=Phase.SLOT), FileSlot()
        return state._replace(phase=Phase.SLOT, pending=need), FileSlot()
    return state._replace(phase=Phase.RESOLVED), need


def _resolved(state: Exchange, prepared: object) -> Step:
    """What the handler resolved: its follow-ups first (from the caches,
    or the need that finishes them); the site's alternative request when
    the answer calls for one; ``--proxy-fallback`` for a 404; else the
    access hook on it (with site rules), else the answer."""
    assert type(prepared) is Prepared
    machine = state.machine
    req = state.req
    if prepared.todo is not None:
        asked = state.asked
        got = machine.handler.followups(prepared, req if asked is None else asked, state.now)
        if type(got) is not Prepared:
            assert isinstance(got, Listing | Coding)
            return _waits(state, got)
        prepared = got
    site = machine.site
    if site is not None and state.asked is None:
        alt = site.alternative(req, prepared.plan)
        if alt is not None:  # asked once: the alternative's answer is the answer
            prepared.close()
            return _respond(state._replace(asked=alt))
    if state.slotless and prepared.holds:
        # An inline answer that holds a descriptor, with no slot: dropped,
        # and asked again once a slot is free (at most one such descriptor
        # exists meanwhile: this step is synchronous).
        prepared.close()
        return state._replace(phase=Phase.SLOT), FileSlot()
    plan = prepared.plan
    if plan.status >= 400:
        proxy = machine.handler.proxy
        fallback = _fallback(proxy, prepared, req)
        if fallback is not None:  # the files answered 404: --proxy-fallback
            assert proxy is not None
            ticket = state.ticket
            authed = ticket is not None and ticket.authed
            need = Upstream(proxy, fallback, req, authed)
            return state._replace(phase=Phase.FORWARDED), need
    ticket = state.ticket
    if site is None or ticket is None:
        if plan.status >= 400:
            plan = error_for(plan, req)
            return state, Final(plan, prepared._replace(plan=plan).take_body(), None)
        return state, Final(plan, prepared.take_body(), None)
    return _admitting(state, prepared, access_targets(prepared), ticket)


def _admitting(
    state: Exchange, prepared: Prepared, targets: tuple[AccessTarget, ...], ticket: Ticket
) -> Step:
    """The access hook on each of ``targets`` in turn: decided here while
    the site allows without a wait (the warm read under rules: no need),
    else the :class:`Admit` need of the first one it cannot."""
    site = state.machine.site
    assert site is not None
    for at, target in enumerate(targets):
        admitted = site.admit_now(target, ticket)
        if admitted is None:
            state = state._replace(
                phase=Phase.ADMITTED, held=prepared, targets=targets[at + 1 :], ticket=ticket
            )
            return state, Admit(target, ticket)
        ticket = admitted
    if ticket is not state.ticket:  # a decision recorded
        state = state._replace(ticket=ticket)
    return state, _admitted(state, prepared)


def _admit(state: Exchange, event: object) -> Step:
    """The access hook's decision on one target of what was resolved: the
    refusal (None: allowed) and the ticket with the decision recorded."""
    prepared = state.held
    assert prepared is not None and type(event) is Admitted
    refusal, ticket = event
    assert ticket is not None  # an Admit need is raised only with site rules
    if ticket is not state.ticket:  # a decision recorded
        state = state._replace(ticket=ticket)
    if refusal is not None:
        assert isinstance(refusal, Plan)
        prepared.close()
        state = state._replace(held=None)
        return state, finished(state.machine.site, refusal, -1, state.ticket)
    if state.targets:
        return _admitting(state._replace(held=None), prepared, state.targets, ticket)
    return state._replace(held=None), _admitted(state, prepared)


def _admitted(state: Exchange, prepared: Prepared) -> Final:
    opened = prepared.opened
    if opened is None:
        return finished(state.machine.site, prepared.plan, -1, state.ticket)
    fd, chunks = opened.take_fd(), opened.take_chunks()
    return finished(state.machine.site, prepared.plan, fd, state.ticket, None, chunks)


def access_targets(prepared: Prepared) -> tuple[AccessTarget, ...]:
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


def _staged(state: Exchange, event: object) -> Step:
    stage = state.stage
    assert stage is not None
    return stage.step(state, event)


_STEPS = {
    Phase.STAGE: _staged,
    Phase.FORWARDED: forwarded,
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


def _fallback(proxy: Fallback | None, prepared: Prepared, req: RequestFacts) -> object | None:
    """The ``--proxy-fallback`` route for a 404 the files gave ``req``
    (``prepared`` is then closed), or None."""
    if proxy is None or prepared.plan.status != 404:
        return None
    route = proxy.fallback(req)
    if route is not None:
        prepared.close()
    return route


def finished(
    site: SiteSteps | None,
    plan: Plan,
    fd: int,
    ticket: Ticket | None,
    req: RequestFacts | None = None,
    chunks: ChunkSource | None = None,
) -> Final:
    """The site's finishing rules (its error pages first, then the built-in
    HTML page for a client that prefers it, then header rules), or without
    site rules the built-in page alone (:func:`serverio.http.errorpage.error_for`,
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
    return Final(plan, Body.of(plan, fd, chunks), ticket)
