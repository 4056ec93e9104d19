"""What the site rules decided for one request (:class:`Ticket`).

Apart from :mod:`serverio.site.service` so that the request pipeline
(serverio.pipeline.request) can name it without importing the site rules:
a plain static start never compiles nor imports them (docs/performance.md
"Start-up").
"""

from __future__ import annotations

from dataclasses import dataclass

from ..http.core import Plan, RequestFacts

__all__ = ["Ticket"]


@dataclass(slots=True)
class Ticket:
    """What :meth:`serverio.site.service.Site.route` decided: an answer
    (``plan``), or the request to serve (possibly rewritten);
    ``protected``/``authed``: an auth rule applied / the client passed it."""

    plan: Plan | None
    req: RequestFacts
    protected: bool = False
    authed: bool = False
    # The auth rules (their indices) this request's credentials passed.
    granted: frozenset[int] = frozenset()
    # The signed-in user the access hook knows for this request ("" for
    # none): the access log's user field, the per-user counters.
    user: str = ""
