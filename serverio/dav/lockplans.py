"""The answers of WebDAV locking (RFC 4918 §9.10, §9.11, §15.8, §16), pure.

Every response field and body of LOCK, UNLOCK and of a request refused
by a lock or an If field is decided here, from a
:class:`~serverio.dav.locks.Lock` (or a
:class:`~serverio.dav.locks.Denied`) and ``now``, as
:class:`~serverio.http.core.Plan` values built like every other plan
(:func:`~serverio.http.core.common_fields` first), so HTTP/1.1 and
HTTP/2 send the same thing.  The XML goes through
:func:`serverio.dav.xml.serialize`: the owner a client sent is written
from its parsed tree, escaped, never pasted.

Also the two live properties locking adds (§15.8 ``lockdiscovery``,
§15.10 ``supportedlock``) as elements, for PROPFIND, and the Lock-Token
request field of UNLOCK (:func:`parse_lock_token`, §10.5).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from ..errors import HTTPError
from ..http.core import Plan, common_fields, error_plan
from .locks import Denied, Lock
from .xml import DAV, Element, LockScope, QName, href_of, serialize

__all__ = [
    "XML_TYPE",
    "activelock",
    "conflict_plan",
    "denied_plan",
    "full_plan",
    "lock_plan",
    "lockdiscovery",
    "locked_plan",
    "lockroot_href",
    "parse_lock_token",
    "precondition_failed_plan",
    "supportedlock",
    "unlock_mismatch_plan",
    "unlocked_plan",
]

XML_TYPE: Final = b"application/xml; charset=utf-8"  # RFC 4918 §8.2
_HEAD: Final = b'<?xml version="1.0" encoding="utf-8"?>\n'


def _el(name: str, *children: Element | str) -> Element:
    return Element(QName(DAV, name), (), tuple(children))


def lockroot_href(lock: Lock, prefix: str = "") -> str:
    """The lock-root's href (§14.12): its path, percent-encoded, with a
    trailing slash for a collection, under ``prefix`` (encoded, no
    trailing slash)."""
    return href_of(lock.root, collection=lock.collection, prefix=prefix)


def activelock(lock: Lock, now: float, prefix: str = "") -> Element:
    """``DAV:activelock`` (§14.1): type, scope, depth, owner, the time
    left (§14.29), token and root."""
    parts: list[Element | str] = [
        _el("locktype", _el("write")),
        _el("lockscope", _el(lock.scope.value)),
        _el("depth", "infinity" if lock.infinite else "0"),
    ]
    if lock.owner is not None:
        parts.append(lock.owner)
    parts += [
        _el("timeout", f"Second-{lock.remaining(now)}"),
        _el("locktoken", _el("href", lock.token)),
        _el("lockroot", _el("href", lockroot_href(lock, prefix))),
    ]
    return _el("activelock", *parts)


def lockdiscovery(locks: Sequence[Lock], now: float, prefix: str = "") -> Element:
    """``DAV:lockdiscovery`` (§15.8): the locks that cover a resource."""
    return _el("lockdiscovery", *(activelock(lk, now, prefix) for lk in locks))


def supportedlock() -> Element:
    """``DAV:supportedlock`` (§15.10): exclusive and shared write locks."""
    entries = (
        _el("lockentry", _el("lockscope", _el(s.value)), _el("locktype", _el("write")))
        for s in (LockScope.EXCLUSIVE, LockScope.SHARED)
    )
    return _el("supportedlock", *entries)


def _xml_plan(
    status: int, element: Element, now: float, extra: Sequence[tuple[bytes, bytes]] = ()
) -> Plan:
    body = _HEAD + serialize(element).encode("utf-8")
    hs = common_fields(now)
    hs.extend(extra)
    hs += [(b"content-type", XML_TYPE), (b"content-length", b"%d" % len(body))]
    return Plan(status, tuple(hs), (body,))


def lock_plan(
    locks: Sequence[Lock],
    now: float,
    *,
    new: Lock | None = None,
    created: bool = False,
    prefix: str = "",
) -> Plan:
    """The answer to a LOCK that succeeded (§9.10.1, §9.10.2): the
    resource's lockdiscovery in a ``DAV:prop``; for a new lock, its token
    in ``Lock-Token`` (§10.5); 201 when the LOCK created the resource (a
    locked empty resource, §7.3, §9.10.4), else 200."""
    extra = [(b"lock-token", f"<{new.token}>".encode("ascii"))] if new is not None else []
    body = _el("prop", lockdiscovery(locks, now, prefix))
    return _xml_plan(201 if created else 200, body, now, extra)


def _error(condition: str, lock: Lock | None, prefix: str) -> Element:
    # §16: a precondition element, with the URL of the locked resource.
    inner = (_el("href", lockroot_href(lock, prefix)),) if lock is not None else ()
    return _el("error", _el(condition, *inner))


def locked_plan(lock: Lock | None, now: float, prefix: str = "") -> Plan:
    """423 Locked (§11.3): a write to a locked resource without its token,
    ``DAV:lock-token-submitted`` naming the lock-root (§16)."""
    return _xml_plan(423, _error("lock-token-submitted", lock, prefix), now)


def conflict_plan(lock: Lock | None, now: float, prefix: str = "") -> Plan:
    """423 Locked for a LOCK that conflicts with ``lock`` (§9.10.6,
    ``DAV:no-conflicting-lock`` naming its root, §16)."""
    return _xml_plan(423, _error("no-conflicting-lock", lock, prefix), now)


def precondition_failed_plan(now: float) -> Plan:
    """412 Precondition Failed: an If field that does not hold (§10.4.1),
    or a refresh naming no lock of the resource (§9.10.2)."""
    return error_plan(412, now)


def denied_plan(denied: Denied, now: float, prefix: str = "") -> Plan:
    """The plan of a :class:`~serverio.dav.locks.Denied` verdict."""
    if denied.status == 423:
        return locked_plan(denied.lock, now, prefix)
    return precondition_failed_plan(now)


def full_plan(now: float) -> Plan:
    """507 Insufficient Storage: the lock table is full (§11.5; the limit
    is the server's ``max_locks``, docs/features.md "Locking")."""
    return error_plan(507, now)


def unlocked_plan(now: float) -> Plan:
    """204 No Content: the lock is removed (§9.11.1)."""
    return Plan(204, tuple(common_fields(now)), (), send_body=False)


def unlock_mismatch_plan(now: float) -> Plan:
    """409 Conflict with ``DAV:lock-token-matches-request-uri`` (§9.11.1,
    §16): the token names no lock that covers the request URI."""
    return _xml_plan(409, _el("error", _el("lock-token-matches-request-uri")), now)


# RFC 4918 §10.5: Lock-Token = Coded-URL = "<" absolute-URI ">".
_CODED_URL = re.compile(rb"[ \t]*<([A-Za-z][A-Za-z0-9+.\-]*:[^\s<>]*)>[ \t]*")


def parse_lock_token(value: bytes | None) -> str:
    """The token of UNLOCK's Lock-Token field (§10.5, required there, §9.11);
    400 when absent or not one Coded-URL."""
    if value is None:
        raise HTTPError(400, "Lock-Token missing")
    match = _CODED_URL.fullmatch(value)
    if match is None or len(value) > 1024:
        raise HTTPError(400, "Lock-Token is not a Coded-URL")
    return match.group(1).decode("ascii")
