"""The login feature's place in the request machine (a stage).

:class:`LoginStage` comes first in the stage list (after the Host check,
ahead of the write stage and the site rules: :attr:`serverio.pipeline.hooks.Hooks.first`):

* with ``--trusted-user-header``, a request from a trusted peer that
  names its user gets the user attached (:meth:`Login.attach
  <serverio.login.service.Login>`) and is handed on: the site rules then
  judge it as that user's;
* ``/.serverio/{login,logout,whoami,share,s}`` are its own: the sign-in
  form, sessions, share links.  Its turn awaits (a form's content, a
  password check in the site's ``auth`` pool), so it is a
  :class:`~serverio.pipeline.exchange.Turn` need: the driver awaits the
  feature's step with the request's content (none for a GET) and the
  client; the stage's own functions stay synchronous.  A request that
  carries the trusted header takes one turn too (whether its peer is a
  trusted proxy is the connection's to say).
  A share link's step hands back the request to serve instead (the real
  path with the link's grant), which the stages after this one take as
  any other request (a drop box's POST is the upload form's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..fs.body import Body
from ..http.access import Ticket
from ..http.core import Plan, RequestFacts
from ..pipeline.exchange import Exchange, Final, Stage, Step, Turn, TurnRun
from ..pipeline.hooks import Reserved, WriteContent
from ..pipeline.stages import onward

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["LoginStage"]

# The first segment of the reserved paths (/.serverio/...): a request
# elsewhere costs this one comparison.
_RESERVED = (".serverio",)
_READS = frozenset((b"GET", b"HEAD"))


class LoginStage(Stage):
    """The login feature's reserved paths and the trusted header's user."""

    __slots__ = ("login", "reads", "turn", "vouch")
    name = "login"

    def __init__(self, login: Reserved, reads: bool = True) -> None:
        self.login = login
        # Can a read (GET, HEAD) be given a user here (a trusted header is
        # configured)?  False: only a write's session is attached, and a
        # signed-in GET costs a method test.
        self.reads = reads
        # The two turns, bound once (takes hands one as its claim).
        self.turn: TurnRun = self._step
        self.vouch: TurnRun = self._attach

    def takes(self, req: RequestFacts, now: float) -> object | None:
        login = self.login
        if req.target.segments[:1] == _RESERVED and login.takes(req):
            return self.turn
        if (
            req.extra
            and login.attaches
            and (self.reads or req.method not in _READS)
            and login.names(req)
        ):
            return self.vouch  # the peer decides: the driver's client
        return None

    def enter(self, state: Exchange, claim: object) -> Step:
        assert claim is self.turn or claim is self.vouch
        return state, Turn(state.req, claim)

    async def _step(
        self, req: RequestFacts, content: WriteContent | None, now: float, client: Callable[[], str]
    ) -> Plan | RequestFacts:
        """The reserved path's turn (:meth:`Reserved.step`), the user a
        trusted header names attached first.

        Cancellation handling: as :meth:`Reserved.step` (nothing is held).
        """
        login = self.login
        if req.extra and login.attaches:
            req = login.attach(req, client)
        return await login.step(req, content, now, client)

    async def _attach(
        self, req: RequestFacts, content: WriteContent | None, now: float, client: Callable[[], str]
    ) -> RequestFacts:
        """A request that carries the trusted header: the user it names
        when the connection's peer is a trusted proxy, handed on.

        Cancellation handling: nothing awaits.
        """
        return self.login.attach(req, client)

    def step(self, state: Exchange, event: object) -> Step:
        """Its answer, with the site's header rules but not its error pages
        (a refusal's Failed event is the step's usual error answer), or the
        request to hand on (a share link's real path, a trusted user's)."""
        req = state.req
        if type(event) is RequestFacts:
            return onward(state._replace(req=event))
        assert isinstance(event, Plan)
        plan = event
        site = state.machine.site
        ticket = Ticket(None, req)
        if site is not None:
            plan = site.finish(plan, ticket, pages=False)
        return state, Final(plan, Body.of(plan), ticket)
