"""Features as stages in one ordered list: the routing precedence, once.

A request is taken by the first stage of its server's list whose
:meth:`Stage.takes` claims it; the files (the core's routing, then the
handler: static files, listings and their archive form, live reload's
transform) answer whatever no stage took.  The list is built by the
application (:mod:`serverio.app.services`, through :func:`stages_of`);
its order *is* the precedence rule:

1. **host** (:class:`HostStage`): with writes or the proxy on, a request
   whose ``Host`` this server does not answer for gets 421 before anything
   else looks at it (:mod:`serverio.http.hosts`, the DNS-rebinding rule);
   then the features' stages ahead of all others
   (:attr:`serverio.pipeline.hooks.Hooks.first`: the login feature's
   sign-in pages and share links, its trusted header's user);
2. **write** (:class:`WriteStage`: first the writes answered ahead of the
   others, :attr:`~serverio.pipeline.hooks.Hooks.write_ahead`: resumable
   uploads, for a request that carries their marks; then uploads,
   ``--upload``; WebDAV, ``--webdav``, only under ``--webdav-prefix`` when
   one is set): its methods, but a CORS preflight (the site's) and a path
   a proxy route takes (a write under a proxy prefix goes upstream).  It decides access
   itself, on the target it resolves, through the one access hook; the
   site's routing (redirects, rewrites) does not apply to a write;
3. **site rules** (:class:`SiteStage`): CORS preflight, the reserved
   paths, the core's 405/404 (not for a proxied path), access rules on
   the request path, redirects, rewrites (clean URLs, ``--spa``); the
   stages after it see the routed request;
4. **receive** (:class:`ReceiveStage`): the handler's step for a request
   with content, when one is installed;
5. **reserved paths** (:class:`ReservedStage`: live reload's
   ``/.serverio/``): without site rules (with them, the site asks the same
   router in step 3, before its access rules); GET and HEAD only;
6. the features' own stages (:attr:`serverio.pipeline.hooks.Hooks.stages`),
   in the order they were registered;
7. **proxy** (:class:`ProxyStage`): the longest matching ``--proxy``
   prefix (segment boundaries);
8. **files** (not a stage: the end of the list): the core's routing, the
   mounts, the files, ``--spa``'s fallback file (a rewrite of step 3),
   ``--proxy-fallback`` for what the files answer 404.

A stage is three synchronous functions: :meth:`Stage.takes` (pure, no
I/O: asked of every request that reaches it), :meth:`Stage.enter` (its
first step: a :class:`~serverio.pipeline.exchange.Need` or the
:class:`~serverio.pipeline.exchange.Final` answer) and :meth:`Stage.step`
(its next step, from the event that met its need).  A stage that is done
with a request without answering it hands it on with :func:`onward`.

A feature written against the old hooks ports with an adapter:
:class:`ReservedStage` wraps a :data:`~serverio.pipeline.hooks.Router`,
:class:`WriteStage` a :data:`~serverio.pipeline.hooks.WriteStep` (its
``Admit`` is still the one access hook, asked on the resolved target).
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from typing import Final as Constant

from ..fs.body import NO_BODY, Body
from ..http.access import Ticket
from ..http.core import Plan, RequestFacts
from ..http.errorpage import error_for
from ..http.extra import request_field
from .exchange import (
    Authenticate,
    Exchange,
    Files,
    Final,
    First,
    Machine,
    Phase,
    Receive,
    Stage,
    Step,
    Upstream,
    Write,
    Wrote,
    files,
    finished,
    forwarded,
    misdirected,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from .hooks import Hooks, Marks, Proxy, Router, WriteStep

__all__ = [
    "ProxyStage",
    "ReceiveStage",
    "ReservedStage",
    "SiteStage",
    "Stage",
    "WriteStage",
    "begin",
    "onward",
    "stages_of",
    "streamed",
]


# A CORS preflight's method (Fetch §4.8): a preflight is the site's, never
# a write's.
PREFLIGHT: Constant = request_field("access-control-request-method")


def begin(
    machine: Machine, req: RequestFacts, now: float, content: bool = False, slotless: bool = False
) -> First:
    """The first step of an exchange: ``(None, Final)`` when the answer can
    be had without awaiting (the warm GET: no state object, no coroutine),
    else the state and its first need.  The Host stage, then the stage
    list (built from the handler's hooks on first use), then the files.
    ``content``: the transport holds the request's content for a stage
    to read; ``slotless``: it caps body descriptors and holds no slot."""
    handler = machine.handler
    if handler.hosts is not None and (refused := misdirected(machine, req, now)) is not None:
        return None, refused
    stages = handler.stages
    if stages is None:
        stages = handler.stages = stages_of(handler, site=machine.site is not None)
    for at, stage in enumerate(stages):
        claim = stage.takes(req, now)
        if claim is not None:
            state = Exchange(
                machine, req, now, Phase.STAGE, None, content, slotless, stage=stage, at=at
            )
            return stage.enter(state, claim)
    return files(machine, req, now, content, slotless)


def onward(state: Exchange) -> Step:
    """Hand the request on to the stages after ``state``'s, then the files."""
    machine = state.machine
    stages = machine.handler.stages
    assert stages is not None
    req = state.req
    for at in range(state.at + 1, len(stages)):
        stage = stages[at]
        claim = stage.takes(req, state.now)
        if claim is not None:
            return stage.enter(state._replace(phase=Phase.STAGE, stage=stage, at=at), claim)
    then, out = files(machine, req, state.now, state.content, state.slotless, state)
    return (state if then is None else then), out


class WriteStage(Stage):
    """A write stage: a :data:`~serverio.pipeline.hooks.WriteStep` (uploads,
    WebDAV, resumable uploads) on its ``methods``, where ``where`` says
    (None: everywhere), for a request that carries ``marks`` (None: any;
    tested here, as data, before ``where`` is called)."""

    __slots__ = ("marks", "methods", "name", "proxy", "run", "where")

    def __init__(
        self,
        run: WriteStep,
        methods: frozenset[bytes],
        where: Callable[[RequestFacts], bool] | None = None,
        proxy: Proxy | None = None,
        marks: Marks | None = None,
        name: str = "write",
    ) -> None:
        self.name = name
        self.run = run
        self.methods = methods
        self.where = where
        self.proxy = proxy
        self.marks = marks

    def takes(self, req: RequestFacts, now: float) -> object | None:
        if req.method not in self.methods:
            return None
        marks = self.marks
        if marks is not None and not marks.on(req):
            return None
        if req.method == b"OPTIONS" and PREFLIGHT.of(req) is not None:
            return None  # a CORS preflight is the site's
        where = self.where
        if where is not None and not where(req):
            return None
        proxy = self.proxy
        if proxy is not None and proxy.match(req) is not None:
            return None  # a write under a proxy prefix goes upstream
        return True

    def enter(self, state: Exchange, claim: object) -> Step:
        ticket = Ticket(None, state.req) if state.machine.site is not None else None
        return state._replace(ticket=ticket), Write(state.req, ticket, self.run)

    def step(self, state: Exchange, event: object) -> Step:
        """The write's answer, finished by the site (its routing does not
        apply: a write names the file it writes), with the ticket its
        access decisions made."""
        assert type(event) is Wrote
        answer, ticket = event
        state = state._replace(ticket=ticket)
        chunks = None
        if type(answer) is tuple:
            plan, chunks = answer
        else:
            assert isinstance(answer, Plan)
            plan = answer
        return state, finished(state.machine.site, plan, -1, ticket, state.req, chunks)


class SiteStage(Stage):
    """The site rules' routing (:meth:`serverio.site.service.Site.route`)."""

    __slots__ = ()
    name = "site"

    def takes(self, req: RequestFacts, now: float) -> object | None:
        return True

    def enter(self, state: Exchange, claim: object) -> Step:
        site = state.machine.site
        assert site is not None
        # Decided now when no password check is due (the warm read under
        # rules: no need, no driver); else the site's routing is awaited.
        ticket = site.route_now(state.req, state.now)
        if ticket is not None:
            return self.step(state, ticket)
        return state, Authenticate(state.req)

    def step(self, state: Exchange, event: object) -> Step:
        assert type(event) is Ticket
        state = state._replace(ticket=event, req=event.req)
        plan = event.plan
        if plan is None:
            return onward(state)
        if plan.stream:
            return state, streamed(state.machine, plan, event, state.now)
        return state, finished(state.machine.site, plan, -1, event, event.req)


class ReceiveStage(Stage):
    """The handler's step for a request with content
    (:data:`~serverio.pipeline.handler.BodyStep`, ``Handler.receive``)."""

    __slots__ = ("handler",)
    name = "receive"

    def __init__(self, handler: Files) -> None:
        self.handler = handler

    def takes(self, req: RequestFacts, now: float) -> object | None:
        return self.handler.receive if req.has_body else None

    def enter(self, state: Exchange, claim: object) -> Step:
        run = self.handler.receive
        if not state.content or run is None:
            return onward(state)  # the transport holds no content for it
        return state, Receive(state.req, run)

    def step(self, state: Exchange, event: object) -> Step:
        if event is None:
            return onward(state)  # declined: answered as any other request
        assert isinstance(event, Plan)
        return state, finished(state.machine.site, event, -1, state.ticket, state.req)


class ReservedStage(Stage):
    """The reserved paths of a :data:`~serverio.pipeline.hooks.Router`
    (without site rules; with them the site asks the same router)."""

    __slots__ = ("router",)
    name = "reserved"

    def __init__(self, router: Router) -> None:
        self.router = router

    def takes(self, req: RequestFacts, now: float) -> object | None:
        return self.router(req, now)

    def enter(self, state: Exchange, claim: object) -> Step:
        assert isinstance(claim, Plan)
        plan = claim
        if plan.stream:
            return state, streamed(state.machine, plan, None, state.now)
        if plan.status >= 400:
            plan = error_for(plan, state.req)
        return state, Final(plan, Body.of(plan), None)


class ProxyStage(Stage):
    """The reverse proxy's routes (:class:`~serverio.pipeline.hooks.Proxy`)."""

    __slots__ = ("proxy",)
    name = "proxy"

    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy

    def takes(self, req: RequestFacts, now: float) -> object | None:
        return self.proxy.match(req)

    def enter(self, state: Exchange, claim: object) -> Step:
        ticket = state.ticket
        authed = ticket is not None and ticket.authed
        return state, Upstream(self.proxy, claim, state.req, authed)

    def step(self, state: Exchange, event: object) -> Step:
        return forwarded(state, event)


def streamed(machine: Machine, plan: Plan, ticket: Ticket | None, now: float) -> Final:
    """The answer to an event stream (a plan with ``stream`` set, from the
    reserved paths): handed back unfinished, for the transport's own
    branch, which takes one of the event source's slots for as long as it
    streams; past the budget (``--watch-max-streams``) the busy 503 instead,
    decided here (the transports keep the same test as a safety net: no
    await lies between this answer and their taking the slot)."""
    events = machine.handler.hooks.events
    if events is not None and plan.send_body:
        slots = events.slots
        if slots.open >= slots.limit:
            slots.refused += 1
            return finished(machine.site, events.busy_plan(now), -1, ticket)
    return Final(plan, NO_BODY, ticket)


def stages_of(handler: Files, *, site: bool) -> tuple[Stage, ...]:
    """A server's stage list, from its handler's hooks (the adapter from the
    named hook slots) and whether site rules are on, in the order of the
    module docstring."""
    hooks: Hooks = handler.hooks
    stages: list[Stage] = list(hooks.first)
    for ahead in hooks.write_ahead:
        stages.append(
            WriteStage(ahead.run, ahead.methods, ahead.takes, hooks.proxy, ahead.marks, ahead.name)
        )
    if hooks.write is not None:
        stages.append(WriteStage(hooks.write, hooks.write_methods, hooks.write_takes, hooks.proxy))
    if site:
        stages.append(SiteStage())
    if handler.receive is not None:
        stages.append(ReceiveStage(handler))
    if hooks.route is not None and not site:
        stages.append(ReservedStage(hooks.route))
    stages.extend(hooks.stages)
    if hooks.proxy is not None:
        stages.append(ProxyStage(hooks.proxy))
    return tuple(stages)
