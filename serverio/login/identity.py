"""Who a request speaks for, besides Basic credentials (trio thread only).

:meth:`Identities.attach` runs on every request of a server with users,
before the access hook: it turns a genuine session cookie (the login
page's) or the ``--trusted-user-header`` of a ``--trusted-proxies`` peer
into the verified principal the hook reads
(:func:`serverio.site.principal.user_authorization`).  Everything it reads
is attacker input:

* a request with ``Authorization`` keeps it (Basic is checked by the hook;
  an explicit credential wins over an ambient cookie);
* the trusted header counts only when the connection's own peer (not an
  address a forwarding field names) is inside ``--trusted-proxies``; from
  any other peer it is ignored (and the reverse proxy drops it, so an
  upstream never sees it as if vouched for).  A value that is empty,
  longer than :data:`MAX_USER`, holds a control character or a comma (two
  fields joined: which one is meant?) is ignored too;
* a session cookie is a signed token (serverio.signing, purpose
  ``session``): altered, expired, oversized, of another secret, or
  naming a user whose password hash changed since: anonymous, never an
  error.  Opened tokens are remembered (bounded, until they expire), so a
  signed-in warm GET costs a dictionary lookup, not an HMAC.  A read
  (GET, HEAD) leaves the cookie where it is and the hook reads it
  (:meth:`Identities.authorization`, no copy of the request); a request
  that changes something gets the session's principal attached as the
  trusted header's is (:meth:`Identities.attach`), when the access hook
  accepts it (``accepts``: some users file still holds its hash), so
  the write features see who it is (WebDAV names a lock's owner by it).

A request without a cookie or the header pays one attribute test.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import fields as dataclass_fields

from ..config import IPNetwork
from ..http.core import RequestFacts
from ..http.extra import request_field
from ..http.forwarded import trusts
from ..signing import Signer, TokenError
from ..site.principal import MARK, user_authorization
from .cookies import cookie_name, cookie_value
from .fields import COOKIE

__all__ = ["MAX_USER", "SESSION", "Identities", "peer_address", "session_digest"]

SESSION = "serverio-session"
MAX_USER = 256
_OPENED_MAX = 4096
_NEVER = float("inf")  # a field without a genuine session never gains one
# The methods that read: their session is read where the hook asks.
_READS = frozenset((b"GET", b"HEAD"))


def session_digest(token: str) -> str:
    """What a signed-in page's CSRF token is bound to: a digest of the
    session token (never the token itself in a page)."""
    return hashlib.sha256(token.encode("ascii")).hexdigest()[:32]


def peer_address(peer: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address of a connection's peer text (``host:port``,
    ``[v6]:port`` or a bare address), or None (a Unix socket, ``-``)."""
    host = peer
    if host.startswith("["):
        host = host[1:].split("]", 1)[0]
    elif host.count(":") == 1:
        host = host.partition(":")[0]
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


def _usable_user(value: str) -> str | None:
    user = value.strip()
    if not user or len(user) > MAX_USER or "," in user or user.startswith(MARK):
        return None
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in user):
        return None
    return user


_FIELDS = tuple(f.name for f in dataclass_fields(RequestFacts))


def _with_authorization(req: RequestFacts, auth: str) -> RequestFacts:
    """``req`` with another ``authorization``: a copy made field by field
    (``dataclasses.replace`` runs ``__init__`` through keyword checks, the
    costliest part of a signed-in warm GET otherwise)."""
    new = object.__new__(RequestFacts)
    for name in _FIELDS:
        object.__setattr__(new, name, getattr(req, name))
    object.__setattr__(new, "authorization", auth)
    return new


class Identities:
    """The session cookie and the trusted header of one server."""

    def __init__(
        self,
        signer: Signer,
        networks: tuple[IPNetwork, ...],
        header: str | None,
        now: Callable[[], float],
    ) -> None:
        self.signer = signer
        self.networks = networks
        self.header = header
        # The trusted header's field, registered for the scan to keep.
        self.field = request_field(header) if header is not None else None
        self._now = now
        # Does the access hook accept a session's principal (some users
        # file holds its hash)?  The login feature sets the site's test.
        self.accepts: Callable[[str], bool] = lambda authorization: True
        # token -> (user, tag, authorization, expires): opened sessions, bounded.
        self._opened: OrderedDict[str, tuple[str, str, str, int]] = OrderedDict()
        # A Cookie field as sent -> (its session's principal, expiry), or
        # (None, _NEVER) for a field with no genuine session (a browser's
        # other cookies, an expired or altered token: it stays so); one
        # map per scheme, since the cookie's name differs over TLS.
        self._by_field: tuple[dict[str, tuple[str | None, float]], ...] = ({}, {})
        # The last request asked about and its answer: the hook asks twice
        # per request (its path, then what it resolved), listings once per
        # name; the request is held (so never another one at its address).
        self._last: tuple[RequestFacts | None, str | None] = (None, None)

    def attach(self, req: RequestFacts, client: Callable[[], str]) -> RequestFacts:
        """``req`` with the principal its trusted header names in its
        ``authorization`` slot, else, for a request that changes something,
        its accepted session's; ``req`` itself when none does (a read's
        session cookie is read by :meth:`authorization`, when the hook asks)."""
        if not req.extra or req.authorization is not None:
            # No field a feature reads (every plain GET): one test; or
            # Basic (the hook checks it), or already attached.
            return req
        field = self.field
        if field is not None:
            value = field.of(req)
            user = self.trusted_user(value, client) if value is not None else None
            if user is not None:
                return _with_authorization(req, user_authorization(user, "header"))
        if req.method not in _READS:
            auth = self._from_cookie(req)
            if auth is not None and self.accepts(auth):
                return _with_authorization(req, auth)
        return req

    def names(self, req: RequestFacts) -> bool:
        """Does ``req`` carry what :meth:`attach` may make a user of: the
        trusted header, or (a request that changes something) a session
        cookie, and no credentials of its own?  Pure."""
        if req.authorization is not None:
            return False
        field = self.field
        if field is not None and field.of(req) is not None:
            return True
        return req.method not in _READS and COOKIE.of(req) is not None

    def authorization(self, req: RequestFacts) -> str | None:
        """What the access hook reads of ``req``: its ``authorization`` (Basic,
        or a principal :meth:`attach` put there), else the principal its
        session cookie names.  The cookie is resolved here, on each ask,
        not copied into the request: a signed-in warm GET then costs two
        dictionary lookups (the ``Cookie`` field as sent -> the principal,
        memoised while the session lasts), no copy of the request."""
        auth = req.authorization
        if auth is not None or not req.extra:
            return auth
        last = self._last
        if last[0] is req:
            return last[1]  # the same request, asked again (its time is this one's)
        auth = self._from_cookie(req)
        self._last = (req, auth)
        return auth

    def _from_cookie(self, req: RequestFacts) -> str | None:
        field = COOKIE.of(req)
        if field is None:
            return None
        by_field = self._by_field[req.tls]
        cached = by_field.get(field)
        if cached is not None and self._now() < cached[1]:
            return cached[0]
        token = cookie_value(field, cookie_name(SESSION, req.tls))
        got = self.open_session(token) if token is not None else None
        if len(by_field) >= _OPENED_MAX:
            by_field.clear()  # bounded: fields are client input
        if got is None:
            by_field[field] = (None, _NEVER)
            return None
        by_field[field] = (got[2], got[3])
        return got[2]

    def trusted_user(self, value: str, client: Callable[[], str]) -> str | None:
        """The user the trusted header names, if the connection's peer is a
        trusted proxy (a :class:`~serverio.pipeline.request.ForwardedClient`
        tells its own peer apart from the client it names)."""
        if not self.networks:
            return None
        peer = getattr(client, "peer", client)
        addr = peer_address(peer())
        if addr is None or not trusts(self.networks, addr):
            return None
        return _usable_user(value)

    def open_session(self, token: str) -> tuple[str, str, str, int] | None:
        """(user, password tag, the principal's ``authorization``, expiry)
        of a genuine, unexpired session token."""
        now = self._now()
        opened = self._opened
        got = opened.get(token)
        if got is not None:
            if now < got[3]:
                return got
            del opened[token]
            return None
        try:
            fields = self.signer.open("session", token, now)
        except TokenError:
            return None
        if len(fields.fields) != 2 or _usable_user(fields.fields[0]) is None:
            return None
        user, tag = fields.fields
        entry = (user, tag, user_authorization(user, "session", tag), fields.expires)
        opened[token] = entry
        if len(opened) > _OPENED_MAX:
            opened.popitem(last=False)
        return entry

    def new_session(self, user: str, tag: str, max_age: int) -> str:
        """A session token for ``user`` (verified, its hash's ``tag``)."""
        return self.signer.sign("session", (user, tag), int(self._now()) + max_age)
