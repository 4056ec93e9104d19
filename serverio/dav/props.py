"""WebDAV properties (RFC 4918 §4, §15), pure: live values, the dead store.

* :func:`live_props`: the live properties of one resource from its facts
  (:class:`serverio.fs.davtree.Found`) and the policy: ``resourcetype``,
  ``getcontentlength``, ``getcontenttype``, ``getetag`` (the ETag a GET
  shows: :func:`serverio.fs.prepare.stat_facts`, so a content hash for a
  small file), ``getlastmodified``, ``creationdate``, ``displayname``,
  and the lock guard's ``supportedlock`` and ``lockdiscovery``;
* :func:`propfind_response`: one ``DAV:response`` for allprop, propname
  or prop (§9.1: a property asked for and absent is 404 in its propstat);
* the dead-property store's format (:func:`load_dead`, :func:`dump_dead`):
  the properties as one ``DAV:prop`` document, parsed back with the same
  hardened parser as a request body (:func:`serverio.dav.xml.parse_xml`)
  and re-serialised from the tree, never pasted;
* :func:`apply_patch`: a PROPPATCH's instructions in order, all or
  nothing (§9.2): a protected (live) property is 403
  ``cannot-modify-protected-property`` and every other one 424.
"""

from __future__ import annotations

import stat
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from ..config import Config
from ..fs.davtree import Found
from ..fs.prepare import stat_facts
from ..http.dates import format_http_date
from ..http.mime import guess_type
from .xml import (
    DAV,
    Element,
    Propfind,
    PropfindKind,
    PropRemove,
    PropSet,
    PropStat,
    QName,
    Response,
    parse_xml,
    serialize,
)

__all__ = [
    "LIVE",
    "Locks",
    "apply_patch",
    "dump_dead",
    "live_props",
    "load_dead",
    "propfind_response",
]


def _d(name: str) -> QName:
    return QName(DAV, name)


# Every live property this server computes (protected: PROPPATCH → 403).
LIVE: Final = frozenset(
    _d(n)
    for n in (
        "resourcetype",
        "getcontentlength",
        "getcontenttype",
        "getetag",
        "getlastmodified",
        "creationdate",
        "displayname",
        "supportedlock",
        "lockdiscovery",
    )
)
_STORE: Final = _d("prop")


@dataclass(frozen=True, slots=True)
class Locks:
    """The lock guard's answers for one resource (elements to wrap)."""

    supported: Sequence[Element] = ()
    discovery: Sequence[Element] = ()


def _rfc3339(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(max(seconds, 0)))


def live_props(found: Found, cfg: Config, locks: Locks) -> list[Element]:
    """The live properties of ``found`` (collections have no length,
    type or ETag; a file whose ETag wants a hash not known has none)."""
    st = found.st
    is_dir = stat.S_ISDIR(st.st_mode)
    rtype = (_d("collection"),) if is_dir else ()
    out = [Element(_d("resourcetype"), children=tuple(Element(t) for t in rtype))]
    if not is_dir:
        facts = stat_facts(st, cfg, found.content_hash)
        out.append(Element(_d("getcontentlength"), children=(str(st.st_size),)))
        out.append(Element(_d("getcontenttype"), children=(guess_type(found.name),)))
        if facts.etag:
            out.append(Element(_d("getetag"), children=(facts.etag,)))
    try:
        out.append(Element(_d("getlastmodified"), children=(format_http_date(st.st_mtime),)))
    except ValueError:
        pass  # a date no HTTP-date can carry: no property
    out.append(Element(_d("creationdate"), children=(_rfc3339(st.st_ctime),)))
    out.append(Element(_d("displayname"), children=(found.name,) if found.name else ()))
    out.append(Element(_d("supportedlock"), children=tuple(locks.supported)))
    out.append(Element(_d("lockdiscovery"), children=tuple(locks.discovery)))
    return out


def load_dead(data: bytes | None) -> dict[QName, Element]:
    """The stored dead properties (name → the property element); a store
    that does not parse is treated as empty (it is rewritten whole by the
    next PROPPATCH)."""
    if not data:
        return {}
    try:
        root = parse_xml(data)
    except Exception:  # an HTTPError from the parser: a damaged store
        return {}
    if root is None or root.tag != _STORE:
        return {}
    return {e.tag: e for e in root.elements()}


def dump_dead(props: dict[QName, Element]) -> bytes | None:
    """The store's bytes for ``props`` (None: nothing to keep)."""
    if not props:
        return None
    text = serialize(Element(_STORE, children=tuple(props.values())))
    return ('<?xml version="1.0" encoding="utf-8"?>\n' + text).encode("utf-8")


def propfind_response(
    href: str, found: Found, cfg: Config, ask: Propfind, locks: Locks
) -> Response:
    """One resource's ``DAV:response`` to a PROPFIND (§9.1)."""
    live = live_props(found, cfg, locks)
    dead = load_dead(found.props)
    if ask.kind is PropfindKind.PROPNAME:
        names = [Element(e.tag) for e in live] + [Element(q) for q in dead]
        return Response(href, (PropStat(200, tuple(names)),))
    if ask.kind is PropfindKind.ALLPROP:
        return Response(href, (PropStat(200, (*live, *dead.values())),))
    by_name = {e.tag: e for e in live}
    good: list[Element] = []
    missing: list[Element] = []
    for name in ask.names:
        value = by_name.get(name) or dead.get(name)
        if value is None:
            missing.append(Element(name))
        else:
            good.append(value)
    stats = []
    if good:
        stats.append(PropStat(200, tuple(good)))
    if missing:
        stats.append(PropStat(404, tuple(missing)))
    if not stats:
        stats.append(PropStat(200, ()))
    return Response(href, tuple(stats))


def apply_patch(
    dead: dict[QName, Element], ops: Sequence[PropSet | PropRemove]
) -> tuple[dict[QName, Element] | None, tuple[PropStat, ...]]:
    """PROPPATCH (§9.2): the new dead properties (None when the request
    fails as a whole: nothing is to be stored) and the propstats of the
    207.  Instructions apply in document order; removing an absent
    property succeeds (§14.23)."""
    new = dict(dead)
    protected = []
    names: list[QName] = []
    for op in ops:
        name = op.value.tag if isinstance(op, PropSet) else op.name
        if name in LIVE:
            protected.append(name)
            continue
        names.append(name)
        if isinstance(op, PropSet):
            new[name] = op.value
        else:
            new.pop(name, None)
    unique = list(dict.fromkeys(names))
    if protected:
        err = Element(_d("error"), children=(Element(_d("cannot-modify-protected-property")),))
        stats = [PropStat(403, tuple(Element(n) for n in dict.fromkeys(protected)), error=err)]
        if unique:
            stats.append(PropStat(424, tuple(Element(n) for n in unique)))
        return None, tuple(stats)
    return new, (PropStat(200, tuple(Element(n) for n in unique)),)
