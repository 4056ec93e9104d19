"""Plans for the decisions of the site rules (pure).

The rules (:mod:`serverio.site.rules`) decide *what* happens — a redirect's
status and Location, the fields of a CORS preflight, the page an error
status gets — and these functions make the response, starting from
:func:`serverio.http.core.common_fields` / :func:`~serverio.http.core.error_plan`
like every other plan.  (Access refusals: :mod:`serverio.http.access`.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from .core import Plan, common_fields, error_plan

__all__ = ["no_content_plan", "page_plan", "redirect_plan"]


def redirect_plan(status: int, location: bytes, now: float, *, head: bool) -> Plan:
    """A 3xx with its Location (RFC 9110 §10.2.2, §15.4) and the error body."""
    return error_plan(status, now, headers=[(b"location", location)], head_only=head)


def no_content_plan(now: float, fields: Sequence[tuple[bytes, bytes]]) -> Plan:
    """A 204 with ``fields`` after the common ones: no body and no
    Content-Length (RFC 9110 §8.6, §15.3.5)."""
    return Plan(204, (*common_fields(now), *fields), (), send_body=False)


def page_plan(plan: Plan, body: bytes, content_type: bytes) -> Plan:
    """``plan`` (an error) with ``body`` as its content: the status and the
    other fields (Location, WWW-Authenticate, Retry-After...) stay, the
    Content-Type and Content-Length become the page's."""
    hs = [(n, v) for n, v in plan.headers if n not in (b"content-type", b"content-length")]
    hs.append((b"content-type", content_type))
    hs.append((b"content-length", b"%d" % len(body)))
    return replace(plan, headers=tuple(hs), body=(body,) if body else ())
