"""Plans for the decisions of the site rules (pure).

The rules (:mod:`serverio.site.rules`) decide *what* happens — a redirect's
status and Location, the fields of a CORS preflight, the header edits for
a path (:class:`HeaderOps`, merged by :func:`serverio.site.rules.header_ops`),
the page an error status gets — and these functions make the response, from
:func:`serverio.http.core.common_fields` / :func:`~serverio.http.core.error_plan`
like every other plan.  (Access refusals: :mod:`serverio.http.access`.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final

from .core import Plan, common_fields, error_plan

__all__ = ["NO_OPS", "HeaderOps", "apply_headers", "no_content_plan", "page_plan", "redirect_plan"]

# A 304 repeats the 200's cache metadata (RFC 9110 §15.4.5); the
# representation's own metadata (Content-*) stays off it.
_NOT_ON_304: Final = frozenset(
    {b"content-type", b"content-encoding", b"content-language", b"content-disposition"}
)


@dataclass(frozen=True, slots=True)
class HeaderOps:
    """The merged effect of every header rule that matches one path.

    ``drop``: names removed from the server's own fields (set or removed by
    a rule; ``vary`` merges instead); ``set``: fields appended, in rule
    order; ``vary``: tokens added to the server's Vary (union).
    """

    drop: frozenset[bytes] = frozenset()
    set: tuple[tuple[bytes, bytes], ...] = ()
    vary: tuple[bytes, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.drop or self.set or self.vary)


NO_OPS: Final = HeaderOps()


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


def apply_headers(
    plan: Plan,
    ops: HeaderOps,
    extra: Sequence[tuple[bytes, bytes]] = (),
    *,
    vary_origin: bool = False,
) -> Plan:
    """``plan`` with the rules' fields (and ``extra``, the CORS fields) applied.

    The result is not shared (``Plan.shared``): the caller marks it when it
    memoises it, so a head cached for ``plan`` is never sent for it.
    """
    vary_add = list(ops.vary)
    if vary_origin:
        vary_add.append(b"Origin")
    drop = ops.drop
    on_304 = plan.status == 304
    out: list[tuple[bytes, bytes]] = []
    own_vary: bytes | None = None
    for name, value in plan.headers:
        if name == b"vary" and vary_add:
            own_vary = value
            continue
        if name in drop:
            continue
        out.append((name, value))
    for name, value in ops.set:
        if on_304 and name in _NOT_ON_304:
            continue
        out.append((name, value))
    out.extend(extra)
    if vary_add:
        tokens = [t.strip() for t in own_vary.split(b",")] if own_vary else []
        seen = {t.lower() for t in tokens}
        for t in vary_add:
            if t.lower() not in seen:
                tokens.append(t)
                seen.add(t.lower())
        out.append((b"vary", b", ".join(tokens)))
    return replace(plan, headers=tuple(out), shared=False)
