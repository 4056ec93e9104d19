"""The plans of WebDAV answers (RFC 4918), pure: 207, OPTIONS, DAV errors.

The fields every response carries come from
:func:`serverio.http.core.common_fields`, as for every other answer; the
bodies from :mod:`serverio.dav.xml`.
"""

from __future__ import annotations

from typing import Final

from ..http.core import Plan, common_fields
from .xml import DAV, Element, QName, Response, multistatus, serialize

__all__ = [
    "ALLOW_DAV",
    "XML_TYPE",
    "condition_plan",
    "multistatus_plan",
    "options_plan",
    "status_plan",
    "stream_plan",
]

# With --webdav: its methods too (RFC 4918 §9; class 2 adds LOCK and UNLOCK
# in the DAV service's own OPTIONS, :func:`options_plan`).
ALLOW_DAV: Final = b"OPTIONS, GET, HEAD, PUT, DELETE, PROPFIND, PROPPATCH, MKCOL, COPY, MOVE"

XML_TYPE: Final = b"application/xml; charset=utf-8"


def options_plan(classes: bytes, now: float) -> Plan:
    """OPTIONS (§10.1, RFC 9110 §9.3.7): the compliance classes in
    ``DAV``, the methods in ``Allow`` (LOCK and UNLOCK with class 2);
    ``MS-Author-Via`` for Windows' client.  200 with an empty body (some
    clients refuse a 204 here)."""
    allow = ALLOW_DAV + (b", LOCK, UNLOCK" if b"2" in classes else b"")
    hs = common_fields(now)
    hs += [
        (b"dav", classes),
        (b"allow", allow),
        (b"ms-author-via", b"DAV"),
        (b"content-length", b"0"),
    ]
    return Plan(200, tuple(hs), (), send_body=False)


def multistatus_plan(responses: list[Response], now: float) -> Plan:
    """A 207 Multi-Status (§13) held whole (a few responses)."""
    body = multistatus(responses)
    hs = common_fields(now)
    hs += [(b"content-type", XML_TYPE), (b"content-length", b"%d" % len(body))]
    return Plan(207, tuple(hs), (body,))


def stream_plan(now: float) -> Plan:
    """A 207 whose body is produced while it is sent (a PROPFIND of a
    collection: :func:`serverio.dav.xml.multistatus_chunks`), no length."""
    hs = common_fields(now)
    hs.append((b"content-type", XML_TYPE))
    return Plan(207, tuple(hs), ())


def status_plan(status: int, now: float, location: str | None = None) -> Plan:
    """A 201 (with ``Location``, RFC 9110 §15.3.2) or 204 with no body."""
    hs = common_fields(now)
    if location is not None:
        hs.append((b"location", location.encode("ascii")))
    if status == 204:
        return Plan(204, tuple(hs), (), send_body=False)
    body = b"%d Created\n" % status if status == 201 else b""
    hs += [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", b"%d" % len(body)),
    ]
    return Plan(status, tuple(hs), (body,) if body else ())


def condition_plan(status: int, condition: str, now: float, href: str | None = None) -> Plan:
    """An error with a ``DAV:error`` body naming a precondition (§16):
    ``propfind-finite-depth`` (403), ``lock-token-submitted`` with the
    locked resource's href (423), ..."""
    inner: tuple[Element | str, ...] = ()
    if href is not None:
        inner = (Element(QName(DAV, "href"), children=(href,)),)
    err = Element(QName(DAV, "error"), children=(Element(QName(DAV, condition), children=inner),))
    body = ('<?xml version="1.0" encoding="utf-8"?>\n' + serialize(err) + "\n").encode("utf-8")
    hs = common_fields(now)
    hs += [(b"content-type", XML_TYPE), (b"content-length", b"%d" % len(body))]
    return Plan(status, tuple(hs), (body,))
