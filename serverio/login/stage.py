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
  :class:`~serverio.pipeline.exchange.Write` need: the driver's named
  fulfiller awaits the feature's step with the request's content (none
  for a GET) and the client; the stage's own functions stay synchronous.
  A share link's step hands back the request to serve instead (the real
  path with the link's grant), which the stages after this one take as
  any other request (a drop box's POST is the upload form's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..fs.body import Body
from ..http.access import Ticket
from ..http.core import Plan, RequestFacts
from ..pipeline.driver import NO_CONTENT
from ..pipeline.exchange import Exchange, Final, Stage, Step, Write
from ..pipeline.hooks import Reserved, WriteContent
from ..pipeline.stages import onward

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["LoginStage"]

# The first segment of the reserved paths (/.serverio/...): a request
# elsewhere costs this one comparison.
_RESERVED = (".serverio",)


class LoginStage(Stage):
    """The login feature's reserved paths and the trusted header's user."""

    __slots__ = ("login", "run")
    name = "login"

    def __init__(self, login: Reserved) -> None:
        self.login = login

        async def run(
            req: RequestFacts, content: WriteContent, now: float, admit: object
        ) -> Plan | RequestFacts:
            # The driver's Write fulfiller: the content (NO_CONTENT: none)
            # and the client's address in ``req.client``.
            client: Callable[[], str] = lambda: req.client  # noqa: E731
            body = None if content is NO_CONTENT else content
            return await login.step(req, body, now, client)

        self.run = run

    def takes(self, req: RequestFacts, now: float) -> object | None:
        login = self.login
        if req.extra and login.attaches:
            attached = login.attach(req, lambda: req.client)
            if attached is not req:
                return attached  # handed on as the user's (enter)
        if req.target.segments[:1] == _RESERVED and login.takes(req):
            return True
        return None

    def enter(self, state: Exchange, claim: object) -> Step:
        if type(claim) is RequestFacts:
            state = state._replace(req=claim)
            if not (claim.target.segments[:1] == _RESERVED and self.login.takes(claim)):
                return onward(state)
        return state, Write(state.req, None, self.run)

    def step(self, state: Exchange, event: object) -> Step:
        """Its answer, with the site's header rules but not its error pages
        (a refusal's Failed event is the step's usual error answer)."""
        req = state.req
        if type(event) is RequestFacts:
            return onward(state._replace(req=event))  # a share link's real path
        assert isinstance(event, Plan)
        plan = event
        site = state.machine.site
        ticket = Ticket(None, req)
        if site is not None:
            plan = site.finish(plan, ticket, pages=False)
        return state, Final(plan, Body.of(plan), ticket)
