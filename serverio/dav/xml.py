"""WebDAV request bodies and the 207 Multi-Status response (RFC 4918), pure.

Parsing (:func:`parse_xml`, and on top of it :func:`parse_propfind`,
:func:`parse_proppatch`, :func:`parse_lockinfo`) uses the standard
library's expat (``xml.parsers.expat``), configured so that no entity can
be declared and nothing outside the body is ever read:

* a document type declaration is refused as soon as expat reports its
  start (``StartDoctypeDeclHandler``), before any of its internal subset is
  read: no entity is ever declared, so the billion laughs, the quadratic
  blowup, external entities and an external DTD never get a definition to
  expand or fetch (RFC 4918 §20.6 allows a server to refuse DTDs; no DAV
  client sends one).  ``EntityDeclHandler`` and
  ``ExternalEntityRefHandler`` refuse too, in case a future expat reported
  a declaration without its DOCTYPE, and parameter entity parsing is
  ``XML_PARAM_ENTITY_PARSING_NEVER``;
* without a DTD, a reference to any entity but the five predefined ones
  is a well-formedness error ("undefined entity");
* the body is bounded (``max_bytes``, 413), and so are element depth and
  the number of nodes (400).

``defusedxml`` does the same with a dependency; the configuration here is
what it amounts to for expat, and ``tests/test_dav_xml.py`` checks every
attack in bounded time.  Namespaces are resolved by expat: a name is a
:class:`QName` (namespace URI, local name), so ``DAV:`` elements are
recognised whatever their prefix, and foreign ones are kept as such.
Unknown elements inside DAV structures are ignored (RFC 4918 §17).

Serialising (:func:`multistatus`, :func:`multistatus_chunks`,
:func:`serialize`): every text and attribute is XML-escaped, characters
XML 1.0 cannot carry (controls, lone surrogates from undecodable names)
become U+FFFD, every href is percent-encoded per RFC 3986 (:func:`href_of`
from decoded segments), and a dead property's value is written from its
parsed :class:`Element` tree, declaring the namespaces it uses, never
pasted as stored bytes.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Final, NoReturn
from urllib.parse import quote
from xml.parsers import expat

from ..errors import HTTPError
from ..http.target import quote_segment

__all__ = [
    "DAV",
    "MAX_XML_BYTES",
    "MAX_XML_DEPTH",
    "MAX_XML_NODES",
    "MULTISTATUS_HEAD",
    "MULTISTATUS_TAIL",
    "XML_NS",
    "Element",
    "LockInfo",
    "LockScope",
    "PropRemove",
    "PropSet",
    "PropStat",
    "Propfind",
    "PropfindKind",
    "QName",
    "Response",
    "href_of",
    "multistatus",
    "multistatus_chunks",
    "parse_lockinfo",
    "parse_propfind",
    "parse_proppatch",
    "parse_xml",
    "response_xml",
    "serialize",
]

DAV: Final = "DAV:"
XML_NS: Final = "http://www.w3.org/XML/1998/namespace"
MAX_XML_BYTES: Final = 1 << 20
MAX_XML_DEPTH: Final = 64
MAX_XML_NODES: Final = 20000
_MAX_OWNER_BYTES: Final = 1024  # a LOCK's DAV:owner, serialised
# Between a namespace URI and a local name in expat's names: a character
# XML 1.0 forbids in any name or URI, so the split is never ambiguous.
_SEP: Final = "\x01"


@dataclass(frozen=True, slots=True, order=True)
class QName:
    """An expanded name: namespace URI ("" for none) and local name."""

    ns: str
    name: str


@dataclass(frozen=True, slots=True)
class Element:
    """A parsed (or built) XML element; ``children`` are elements and text."""

    tag: QName
    attrs: tuple[tuple[QName, str], ...] = ()
    children: tuple[Element | str, ...] = ()

    def elements(self) -> Iterator[Element]:
        """The child elements, in order."""
        return (c for c in self.children if isinstance(c, Element))

    def find(self, tag: QName) -> Element | None:
        """The first child element named ``tag``."""
        return next((c for c in self.elements() if c.tag == tag), None)

    @property
    def text(self) -> str:
        """The element's own text (child elements' text excluded)."""
        return "".join(c for c in self.children if isinstance(c, str))

    def attr(self, name: QName) -> str | None:
        return next((v for k, v in self.attrs if k == name), None)


def _qname(expat_name: str) -> QName:
    ns, sep, local = expat_name.rpartition(_SEP)
    return QName(ns, local) if sep else QName("", expat_name)


class _Refused(Exception):
    pass


class _Builder:
    """expat handlers building an :class:`Element` tree, bounded."""

    def __init__(self, max_depth: int, max_nodes: int) -> None:
        self.stack: list[tuple[QName, tuple[tuple[QName, str], ...], list[Element | str]]] = []
        self.root: Element | None = None
        self.nodes = 0
        self.max_depth = max_depth
        self.max_nodes = max_nodes

    def _count(self) -> None:
        self.nodes += 1
        if self.nodes > self.max_nodes:
            raise _Refused("too many XML nodes")

    def start(self, name: str, attrs: dict[str, str]) -> None:
        self._count()
        if len(self.stack) >= self.max_depth:
            raise _Refused("XML nested too deep")
        pairs = tuple(sorted((_qname(k), v) for k, v in attrs.items()))
        self.stack.append((_qname(name), pairs, []))

    def end(self, name: str) -> None:
        tag, attrs, children = self.stack.pop()
        element = Element(tag, attrs, tuple(children))
        if self.stack:
            self.stack[-1][2].append(element)
        else:
            self.root = element

    def text(self, data: str) -> None:
        if not self.stack:
            return
        children = self.stack[-1][2]
        if children and isinstance(children[-1], str):
            children[-1] += data
        else:
            self._count()
            children.append(data)


def _refuse(what: str) -> Callable[..., NoReturn]:
    def handler(*_args: object) -> NoReturn:
        raise _Refused(what)

    return handler


def parse_xml(
    body: bytes,
    *,
    max_bytes: int = MAX_XML_BYTES,
    max_depth: int = MAX_XML_DEPTH,
    max_nodes: int = MAX_XML_NODES,
) -> Element | None:
    """The root element of ``body``, None when the body is empty (only
    whitespace).  Raises :class:`HTTPError` 413 over ``max_bytes``, 400 for
    anything not well-formed, any DTD or entity declaration, and depth or
    node counts over their bounds."""
    if len(body) > max_bytes:
        raise HTTPError(413, "XML body too large")
    if not body.strip():
        return None
    builder = _Builder(max_depth, max_nodes)
    parser = expat.ParserCreate(namespace_separator=_SEP)
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    parser.buffer_text = True
    parser.ordered_attributes = False
    parser.StartDoctypeDeclHandler = _refuse("DTD")
    parser.EntityDeclHandler = _refuse("entity declaration")
    parser.UnparsedEntityDeclHandler = _refuse("entity declaration")
    parser.ExternalEntityRefHandler = _refuse("external entity")
    parser.StartElementHandler = builder.start
    parser.EndElementHandler = builder.end
    parser.CharacterDataHandler = builder.text
    try:
        parser.Parse(body, True)
    except _Refused as exc:
        raise HTTPError(400, f"XML refused: {exc}") from None
    except expat.ExpatError as exc:
        raise HTTPError(400, f"XML not well-formed: {exc}") from None
    except LookupError as exc:  # an encoding Python does not know
        raise HTTPError(400, f"XML encoding: {exc}") from None
    return builder.root


def _dav(name: str) -> QName:
    return QName(DAV, name)


def _root(body: bytes, name: str) -> Element | None:
    root = parse_xml(body)
    if root is not None and root.tag != _dav(name):
        raise HTTPError(400, f"XML body is not DAV:{name}")
    return root


class PropfindKind(enum.Enum):
    """What a PROPFIND asks for (RFC 4918 §9.1, §14.20)."""

    ALLPROP = "allprop"
    PROPNAME = "propname"
    PROP = "prop"


@dataclass(frozen=True, slots=True)
class Propfind:
    """A parsed PROPFIND body: the kind, the names of ``DAV:prop`` (PROP) or
    of ``DAV:include`` (ALLPROP, §14.8)."""

    kind: PropfindKind
    names: tuple[QName, ...] = ()


def parse_propfind(body: bytes) -> Propfind:
    """A PROPFIND body; an empty one is allprop (§9.1).  400 unless its
    root is ``DAV:propfind`` with exactly one of allprop, propname, prop."""
    root = _root(body, "propfind")
    if root is None:
        return Propfind(PropfindKind.ALLPROP)
    kinds = {_dav(k.value): k for k in PropfindKind}
    chosen = [e for e in root.elements() if e.tag in kinds]
    if len(chosen) != 1:
        raise HTTPError(400, "PROPFIND needs exactly one of allprop, propname, prop")
    element = chosen[0]
    kind = kinds[element.tag]
    if kind is PropfindKind.PROP:
        return Propfind(kind, tuple(e.tag for e in element.elements()))
    if kind is PropfindKind.ALLPROP:
        include = root.find(_dav("include"))
        names = tuple(e.tag for e in include.elements()) if include is not None else ()
        return Propfind(kind, names)
    return Propfind(kind)


@dataclass(frozen=True, slots=True)
class PropSet:
    """Set a dead property: ``value`` is the property element itself (its
    name is ``value.tag``, its content the stored value)."""

    value: Element


@dataclass(frozen=True, slots=True)
class PropRemove:
    """Remove a property."""

    name: QName


def _with_lang(element: Element, lang: str | None) -> Element:
    # RFC 4918 §4.3: xml:lang in scope on a property is part of its value.
    if lang is None or element.attr(QName(XML_NS, "lang")) is not None:
        return element
    attrs = tuple(sorted((*element.attrs, (QName(XML_NS, "lang"), lang))))
    return Element(element.tag, attrs, element.children)


def parse_proppatch(body: bytes) -> tuple[PropSet | PropRemove, ...]:
    """A PROPPATCH body (§9.2, §14.19): the set and remove instructions in
    document order (they are applied in that order, atomically).  400 for
    an empty body, another root, or no instruction."""
    root = _root(body, "propertyupdate")
    if root is None:
        raise HTTPError(400, "PROPPATCH without a body")
    ops: list[PropSet | PropRemove] = []
    lang_key = QName(XML_NS, "lang")
    for instruction in root.elements():
        if instruction.tag not in (_dav("set"), _dav("remove")):
            continue  # §17: unknown elements are ignored
        lang = instruction.attr(lang_key) or root.attr(lang_key)
        for prop in instruction.elements():
            if prop.tag != _dav("prop"):
                continue
            inner = prop.attr(lang_key) or lang
            for p in prop.elements():
                if instruction.tag.name == "set":
                    ops.append(PropSet(_with_lang(p, inner)))
                else:
                    ops.append(PropRemove(p.tag))
    if not ops:
        raise HTTPError(400, "PROPPATCH with no property to set or remove")
    return tuple(ops)


class LockScope(enum.Enum):
    """RFC 4918 §14.13."""

    EXCLUSIVE = "exclusive"
    SHARED = "shared"


@dataclass(frozen=True, slots=True)
class LockInfo:
    """A LOCK request's ``DAV:lockinfo`` (§14.11): the scope (the type is
    always write, the only one RFC 4918 defines) and the owner, kept as
    the client sent it (re-serialised in lockdiscovery)."""

    scope: LockScope
    owner: Element | None = None


def parse_lockinfo(body: bytes) -> LockInfo | None:
    """A LOCK body; None for an empty one (a refresh, §9.10.2).  400 for
    another root, a missing or unknown scope, or a type other than
    ``DAV:write``."""
    root = _root(body, "lockinfo")
    if root is None:
        return None
    scope_el = root.find(_dav("lockscope"))
    type_el = root.find(_dav("locktype"))
    scopes = [s for s in LockScope if scope_el is not None and scope_el.find(_dav(s.value))]
    if len(scopes) != 1:
        raise HTTPError(400, "LOCK needs one lockscope: exclusive or shared")
    if type_el is None or type_el.find(_dav("write")) is None:
        raise HTTPError(400, "LOCK needs locktype write")
    owner = root.find(_dav("owner"))
    if owner is not None and len(serialize(owner).encode("utf-8")) > _MAX_OWNER_BYTES:
        # Kept as long as the lock and sent in every lockdiscovery of what
        # it covers (§14.17 leaves its size to the server): a name, a URL.
        raise HTTPError(400, "DAV:owner too large")
    return LockInfo(scopes[0], owner)


# ------------------------------------------------------------ serialising

# XML 1.0 §2.2 Char: everything else (C0 controls but TAB/LF/CR, lone
# surrogates, U+FFFE/U+FFFF) cannot appear, not even as a reference.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_TEXT_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "\r": "&#13;"})
_ATTR_ESCAPES = str.maketrans(
    {
        "&": "&amp;",
        "<": "&lt;",
        ">": "&gt;",
        '"': "&quot;",
        "\r": "&#13;",
        "\n": "&#10;",
        "\t": "&#9;",
    }
)


_TEXT_PLAIN = re.compile("[^&<>\r\ud800-\udfff\ufffe\uffff\x00-\x08\x0b\x0c\x0e-\x1f]*")


def _text(value: str) -> str:
    if _TEXT_PLAIN.fullmatch(value):
        return value  # nothing to escape or replace (most names and values)
    return _NOT_XML.sub("\ufffd", value).translate(_TEXT_ESCAPES)


def _attr(value: str) -> str:
    return _NOT_XML.sub("\ufffd", value).translate(_ATTR_ESCAPES)


# RFC 3986 §2.2, §2.3: what may stay as it is in an href's path; anything
# else (spaces, non-ASCII, quotes, "<>") is percent-encoded.
_HREF_SAFE: Final = "/:@!$&'()*+,;=-._~%"
_BAD_PERCENT = re.compile("%(?![0-9A-Fa-f]{2})")


def href_of(segments: Sequence[str], *, collection: bool = False, prefix: str = "") -> str:
    """The href of a resource from its decoded path segments: each
    :func:`~serverio.http.target.quote_segment`-encoded, a trailing ``/``
    for a collection (RFC 4918 §5.2), under ``prefix`` (already encoded,
    no trailing slash)."""
    path = prefix + "/" + "/".join(quote_segment(s) for s in segments)
    if collection and segments:
        path += "/"
    return path


def _href(href: str) -> str:
    encoded = quote(_BAD_PERCENT.sub("%25", href), safe=_HREF_SAFE)
    return _text(encoded)


class _Writer:
    """Writes elements with prefixes: ``D`` for DAV:, ``nsN`` for others,
    each declared on the outermost element that needs it (no default
    namespace is ever declared, so an unprefixed name has no namespace)."""

    def __init__(self, out: list[str]) -> None:
        self.out = out

    def element(self, el: Element, scope: dict[str, str]) -> None:
        prefix = scope.get(el.tag.ns)
        if prefix is not None and not el.attrs:
            # The common case (live properties): a DAV: element, no attribute.
            tag = f"{prefix}:{el.tag.name}"
            children = el.children
            if not children:
                self.out.append(f"<{tag}/>")
            elif len(children) == 1 and isinstance(children[0], str):
                self.out.append(f"<{tag}>{_text(children[0])}</{tag}>")
            else:
                self.out.append(f"<{tag}>")
                self._children(children, scope)
                self.out.append(f"</{tag}>")
            return
        self._general(el, scope)

    def _children(self, children: tuple[Element | str, ...], scope: dict[str, str]) -> None:
        for child in children:
            if isinstance(child, str):
                self.out.append(_text(child))
            else:
                self.element(child, scope)

    def _general(self, el: Element, scope: dict[str, str]) -> None:
        local = scope
        decls: list[str] = []

        def prefix(ns: str) -> str | None:
            nonlocal local
            if not ns:
                return None
            if ns == XML_NS:
                return "xml"
            if ns not in local:
                if local is scope:
                    local = dict(scope)
                local[ns] = "D" if ns == DAV else f"ns{len(local)}"
                decls.append(f' xmlns:{local[ns]}="{_attr(ns)}"')
            return local[ns]

        def name(q: QName) -> str:
            p = prefix(q.ns)
            return f"{p}:{q.name}" if p else q.name

        tag = name(el.tag)
        attrs = "".join(f' {name(k)}="{_attr(v)}"' for k, v in el.attrs)
        head = f"<{tag}{''.join(decls)}{attrs}"
        if not el.children:
            self.out.append(head + "/>")
            return
        self.out.append(head + ">")
        self._children(el.children, local)
        self.out.append(f"</{tag}>")


def serialize(element: Element) -> str:
    """``element`` as an XML fragment that declares every namespace it uses
    (so a stored dead property parses back on its own)."""
    out: list[str] = []
    _Writer(out).element(element, {})
    return "".join(out)


@dataclass(frozen=True, slots=True)
class PropStat:
    """One ``DAV:propstat`` (§14.22): properties sharing a status.  For a
    404 or a PROPPATCH result, the properties are empty elements named as
    asked."""

    status: int
    props: tuple[Element, ...]
    error: Element | None = None
    description: str | None = None


@dataclass(frozen=True, slots=True)
class Response:
    """One ``DAV:response`` (§14.24): either ``propstats`` (PROPFIND,
    PROPPATCH) or a ``status`` (DELETE, COPY, MOVE failures)."""

    href: str
    propstats: tuple[PropStat, ...] = ()
    status: int | None = None
    error: Element | None = None
    description: str | None = None
    location: str | None = None


def _status(status: int) -> str:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    return f"<D:status>HTTP/1.1 {status} {phrase}</D:status>"


_SCOPE: Final = {DAV: "D"}


def _response(r: Response) -> str:
    if (r.status is None) == (not r.propstats):
        raise ValueError("a DAV:response has either propstats or a status")
    out = ["<D:response><D:href>", _href(r.href), "</D:href>"]
    writer = _Writer(out)
    if r.status is not None:
        out.append(_status(r.status))
    for ps in r.propstats:
        out.append("<D:propstat><D:prop>")
        for p in ps.props:
            writer.element(p, _SCOPE)
        out.append("</D:prop>" + _status(ps.status))
        if ps.error is not None:
            writer.element(ps.error, _SCOPE)
        if ps.description is not None:
            out.append(f"<D:responsedescription>{_text(ps.description)}</D:responsedescription>")
        out.append("</D:propstat>")
    if r.error is not None:
        writer.element(r.error, _SCOPE)
    if r.description is not None:
        out.append(f"<D:responsedescription>{_text(r.description)}</D:responsedescription>")
    if r.location is not None:
        out.append(f"<D:location><D:href>{_href(r.location)}</D:href></D:location>")
    out.append("</D:response>")
    return "".join(out)


# The start and the end of a 207 body, around its responses.
MULTISTATUS_HEAD: Final = b'<?xml version="1.0" encoding="utf-8"?>\n<D:multistatus xmlns:D="DAV:">'
MULTISTATUS_TAIL: Final = b"</D:multistatus>\n"


def response_xml(r: Response) -> bytes:
    """One ``DAV:response`` of a 207 body (between :data:`MULTISTATUS_HEAD`
    and :data:`MULTISTATUS_TAIL`), for a body produced while it is sent."""
    return _response(r).encode("utf-8")


def multistatus_chunks(responses: Iterable[Response]) -> Iterator[bytes]:
    """A 207 Multi-Status body (§13, §14.16) in pieces, one per response,
    so a PROPFIND of a large directory is never held whole."""
    yield MULTISTATUS_HEAD
    for r in responses:
        yield response_xml(r)
    yield MULTISTATUS_TAIL


def multistatus(responses: Iterable[Response]) -> bytes:
    """The whole 207 body (see :func:`multistatus_chunks`)."""
    return b"".join(multistatus_chunks(responses))
