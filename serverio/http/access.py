"""Access decisions as HTTP responses (pure).

An :class:`Access` is what the site's one access hook
(:meth:`serverio.site.service.Site.access`) decides about a resolved
target: allow it, or refuse it with a reason.  It carries the facts its
response needs (the realm of a challenge, the seconds of a Retry-After)
and nothing else; :func:`access_plan` makes the response from it, through
:func:`serverio.http.core.error_plan` like every other error, so the site
code never builds a status or a field itself.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from .core import Plan, error_plan

__all__ = ["ALLOWED", "Access", "Verdict", "access_plan"]


class Verdict(enum.Enum):
    """What an access decision says."""

    ALLOW = "allow"
    # 401 with a Basic challenge (RFC 9110 §11.6.1, §15.5.2; RFC 7617 §2):
    # no usable credentials, or credentials that did not verify.
    CHALLENGE = "challenge"
    # 403 (RFC 9110 §15.5.4): understood, and refused: whoever asks (a
    # path no [[writable]] table allows), or to the user who asks (a right
    # no [[access]] rule gives them).
    FORBID = "forbid"
    # 429 with Retry-After (RFC 6585 §4): the client's failure budget is spent.
    THROTTLE = "throttle"
    # 503 (RFC 9110 §15.6.4): the password check could not even be queued.
    UNAVAILABLE = "unavailable"
    # Only from Site.access_now: a password check is needed to decide.
    PENDING = "pending"


@dataclass(frozen=True, slots=True)
class Access:
    """One access decision.

    ``rule``: the index of the auth rule that protects the target (-1:
    none); an allowed target with a rule is *protected* (its responses get
    ``Cache-Control: private``, the request may see protected error pages).
    ``realm``: the challenge's realm; ``retry_after``: whole seconds (429).
    A 403 (``FORBID``) is also what a signed-in user gets for a right the
    ``[[access]]`` rules do not give them (RFC 9110 §15.5.4: credentials
    would not help).
    """

    verdict: Verdict
    rule: int = -1
    realm: str = ""
    retry_after: int = 0
    # The signed-in user the decision knows (verified credentials), "" for
    # an anonymous client: the access log's user field, per-user counters.
    user: str = ""

    @property
    def allowed(self) -> bool:
        return self.verdict is Verdict.ALLOW


# An unprotected target: what the hook says when no rule applies.
ALLOWED: Final = Access(Verdict.ALLOW)


def access_plan(access: Access, now: float, *, head: bool) -> Plan:
    """The response for a refusal (every verdict but ALLOW and PENDING)."""
    verdict = access.verdict
    if verdict is Verdict.CHALLENGE:
        # RFC 7617 §2 (charset per §2.1); no-store: a shared cache must not
        # answer another client's retry with this challenge.
        value = f'Basic realm="{access.realm}", charset="UTF-8"'.encode("ascii")
        headers = [(b"www-authenticate", value), (b"cache-control", b"no-store")]
        return error_plan(401, now, headers=headers, head_only=head)
    if verdict is Verdict.THROTTLE:
        headers = [(b"retry-after", b"%d" % access.retry_after)]
        return error_plan(429, now, headers=headers, head_only=head)
    if verdict is Verdict.FORBID:
        return error_plan(403, now, head_only=head)
    if verdict is Verdict.UNAVAILABLE:
        return error_plan(503, now, head_only=head)
    raise ValueError(f"{verdict.name} is not a refusal")
