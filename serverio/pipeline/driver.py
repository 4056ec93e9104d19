"""The one driver of an exchange: fulfils its needs, feeds the step.

:func:`drive` is the only pipeline code that awaits for a request (with the
fulfillers it names below): it takes the state and need
:func:`~serverio.pipeline.exchange.begin` returned, awaits what the need
names under the server's pools and limiters, hands the result to
:func:`~serverio.pipeline.exchange.step`, and goes on until the step
returns the :class:`~serverio.pipeline.exchange.Final` answer.  Both
transports call it (HTTP/1.1's connection, HTTP/2's stream answer), with
an :class:`Io`: what of the transport a need may use.

Cancellation handling: a cancellation (the client gone on HTTP/2, a
shutdown's cut) propagates out of the need's await; the state's held
answer or pending need, and the need under way, are closed before it
does (closing a resolved answer is idempotent: its fulfiller may have
closed it already).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Awaitable, Callable
from typing import NamedTuple, Protocol, TypeVar, cast

from ..errors import HTTPError
from ..fs.body import Body
from ..http.access import AccessTarget, Ticket, access_plan
from ..http.core import Plan
from ..model import ChunkSource
from .exchange import (
    Admit,
    Admitted,
    Authenticate,
    Coding,
    Exchange,
    Failed,
    FileSlot,
    Final,
    Listing,
    Machine,
    Need,
    Receive,
    Resolve,
    Turn,
    Upstream,
    Write,
    Wrote,
    step,
)
from .handler import Closable, Content, Handler
from .hooks import NO_HEAD, NO_RULES, Proxy, RawHead, Upload, WriteContent
from .hooks import Admit as HookAdmit

__all__ = ["NO_CONTENT", "Forwarded", "Io", "Wait", "access", "drive"]

_R = TypeVar("_R", bound=Closable)


class Wait(Protocol):
    """How a transport waits for a step of the pipeline: ``await
    wait(run, watch_late)`` calls ``run()`` at once and returns its result,
    or None when the client went away meanwhile (the step was cancelled,
    or a result that arrived anyway was closed).  HTTP/1.1 watches its
    socket for a disconnect meanwhile; with ``watch_late`` the step says
    itself when (:func:`~serverio.pipeline.handler.watching_client`, around
    each long wait: the proxy's exchange, whose pooled answer arrives at
    once and should not pay for a watcher task).  HTTP/2 just awaits:
    RST_STREAM cancels the stream."""

    def __call__(
        self, run: Callable[[], Awaitable[_R]], watch_late: bool, /
    ) -> Awaitable[_R | None]:
        """``run()``'s result, or None: the client went away."""
        ...


class Forwarded(NamedTuple):
    """The proxy's answer as the transport's wait hands it back: closed
    whole (its body) if the client left as it arrived."""

    plan: Plan
    body: Body

    def close(self) -> None:
        self.body.close()


class Io(NamedTuple):
    """What a need may use of the transport: who the client is, how it
    waits for a handler step (HTTP/1.1 watches its socket for a disconnect
    meanwhile; HTTP/2 relies on RST_STREAM cancelling the stream), the
    request's content (None: none, or left unread) and head as received
    (for the proxy), and how it takes a descriptor slot (HTTP/2's
    ``--h2-max-open-files``; None: no cap)."""

    client: Callable[[], str]
    wait: Wait
    content: Content | None = None
    head: RawHead = NO_HEAD
    slot: Callable[[], Awaitable[None]] | None = None


class _NoContent:
    """The content of a write without a body (a DELETE, an empty PUT)."""

    declared: int | None = 0
    received = 0

    async def next_chunk(self) -> bytes | None:
        return None


NO_CONTENT: WriteContent = _NoContent()

# The client went away while a need was awaited: no answer.
_GONE = object()


async def drive(state: Exchange, need: Need, io: Io) -> Final | None:
    """Fulfil ``need`` and the ones after it; the final answer, or None
    when the client went away while a need was awaited.

    Cancellation handling: see the module docstring.
    """
    try:
        while True:
            try:
                event = await _fulfil(state, need, io)
            except HTTPError as exc:
                event = Failed(exc)
            if event is _GONE:
                return None
            state, out = step(state, event)
            if type(out) is Final:
                return out
            assert isinstance(out, Need)
            need = out
    except BaseException:
        state.close()
        raise


async def _fulfil(state: Exchange, need: Need, io: Io) -> object:
    """The event that meets ``need`` (the fulfillers: each awaits in one
    place, under the pool or limiter of what it asks)."""
    machine = state.machine
    kind = type(need)
    if kind is Upstream:
        assert isinstance(need, Upstream)
        return await _upstream(need, state.now, io)
    if kind is Resolve or kind is Coding or kind is Listing:
        # The handler's part (its pool hop, a listing, a coding), awaited
        # the transport's way (HTTP/1.1 watches its socket).  The need owns
        # what it holds until the handler takes it over; on any failure it
        # is closed here too (idempotent).
        assert isinstance(need, Resolve | Coding | Listing)
        handler = cast(Handler, machine.handler)
        got = None
        try:
            got = await io.wait(functools.partial(handler.fulfil, need, state.now), False)
        finally:
            if got is None:
                need.close()
        return _GONE if got is None else got
    if kind is Authenticate:
        assert isinstance(need, Authenticate) and machine.site is not None
        return await machine.site.route(need.req, state.now, io.client)
    if kind is Admit:
        assert isinstance(need, Admit)
        return Admitted(*await access(machine, need.target, need.ticket, state.now, io.client))
    if kind is Write:
        assert isinstance(need, Write)
        return await _write(machine, need, state.now, io)
    if kind is Turn:
        # A feature stage's own turn (the login feature's), its awaits in
        # the feature (a password check in the site's auth pool).
        assert isinstance(need, Turn)
        return await need.run(need.req, io.content, state.now, io.client)
    if kind is Receive:
        assert isinstance(need, Receive)
        assert io.content is not None
        return await need.run(need.req, io.content, state.now)
    assert kind is FileSlot and io.slot is not None
    await io.slot()
    return None


async def access(
    machine: Machine,
    target: AccessTarget,
    ticket: Ticket | None,
    now: float,
    client: Callable[[], str],
) -> tuple[Plan | None, Ticket | None]:
    """THE access hook: may ``ticket``'s client have ``target``?  None when
    it may (always, without site rules), else the refusal to send instead
    (401 with its challenge, 403, 429 with Retry-After, 503), made by the
    pure layer (:func:`serverio.http.access.access_plan`); and the ticket
    with the decision recorded (a new one: tickets are immutable).

    Every feature with a resolved target calls this instead of matching
    URLs itself: the pipeline for what the handler resolved (a file, a
    listing, a sidecar), a write, a proxy route, a mount or an archive
    member, with an :class:`~serverio.site.access.AccessTarget` of its own
    kind.  The decision is :meth:`serverio.site.service.Site.admit`; a rule
    passed here is recorded in the ticket returned (its responses are then
    private, its error pages shown).

    Cancellation handling: the password check is the only wait (in the
    site's ``auth`` pool, abandoned like any pooled call); the caller
    closes whatever it resolved if this is cancelled.
    """
    site = machine.site
    if site is None or ticket is None:
        return None, ticket
    got, ticket = await site.admit(target, ticket, client)
    if got.allowed:
        return None, ticket
    return access_plan(got, now, head=ticket.req.method == b"HEAD"), ticket


async def _write(machine: Machine, need: Write, now: float, io: Io) -> object:
    """The write stage (``--upload``, ``--webdav``), handed the access hook
    to ask on the target it resolves before it reads a byte of the content
    (:data:`~serverio.pipeline.hooks.NO_RULES` without site rules).

    Cancellation handling: the stage removes what it created before the
    cancellation propagates (:mod:`serverio.upload.service`); nothing is
    owned here.
    """
    req = dataclasses.replace(need.req, client=io.client())  # per-client budgets
    ticket = need.ticket
    admit: HookAdmit = NO_RULES  # no site rules: nothing to decide
    if machine.site is not None and ticket is not None:
        client = io.client

        async def admit(target: AccessTarget) -> Plan | None:
            nonlocal ticket  # each decision recorded, for the answer's ticket
            refusal, ticket = await access(machine, target, ticket, now, client)
            return refusal

    content: WriteContent = NO_CONTENT if io.content is None else io.content
    got: Plan | tuple[Plan, ChunkSource] = await need.run(req, content, now, admit)
    return Wrote(got, ticket)


async def _upstream(need: Upstream, now: float, io: Io) -> object:
    """A proxied request's answer (:meth:`serverio.pipeline.hooks.Proxy.forward`):
    ``(Plan, Body)``, or gone.  The exchange runs through the transport's
    ``wait``, so that a client that goes away cancels it as it
    cancels any handler step (HTTP/1.1's disconnect watcher, HTTP/2's
    RST_STREAM); the proxy asks for the client to be watched itself, before
    a wait that may be long (``watch_late``: a pooled exchange answered at
    once costs no watcher task).

    Cancellation handling: the proxy closes what it holds if cancelled; an
    answer that arrived for a client already gone is closed here.
    """
    proxy = cast("Proxy", need.proxy)
    content: Upload | None = io.content

    async def forward() -> Forwarded:
        plan, body = await proxy.forward(
            need.route, need.req, io.head, content, now, io.client, need.authed
        )
        return Forwarded(plan, body)

    got = await io.wait(forward, True)
    return _GONE if got is None else tuple(got)
