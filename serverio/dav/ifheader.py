"""WebDAV request fields (RFC 4918 §10), parsed, pure.

* :func:`parse_if` - the ``If`` field (§10.4): untagged lists or tagged
  lists (never both), each list a conjunction of conditions, each
  condition a state token (a Coded-URL: ``<urn:uuid:...>``,
  ``<opaquelocktoken:...>``, ``<DAV:no-lock>``) or an entity tag in
  brackets (``[W/"x"]``), either under ``Not``.  :meth:`IfField.holds`
  evaluates it (§10.4.3 and §10.4.4) from the state a caller looks up.
* :func:`parse_depth` (§10.2), :func:`parse_overwrite` (§10.6),
  :func:`parse_timeout` (§10.7), :func:`parse_destination` (§10.3: an
  absolute URI or an absolute path, reduced to a
  :class:`~serverio.http.target.Target`; another scheme or authority is
  flagged so the caller answers 502, §9.8.5, §9.9.4).

Everything is bounded (:data:`MAX_IF_FIELD`, :data:`MAX_IF_CONDITIONS`);
every malformed value raises :class:`HTTPError` 400.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from ..errors import HTTPError
from ..http.target import Target, parse_target

__all__ = [
    "MAX_IF_CONDITIONS",
    "MAX_IF_FIELD",
    "MAX_TIMEOUT",
    "Condition",
    "Depth",
    "Destination",
    "IfField",
    "IfList",
    "ResourceState",
    "parse_depth",
    "parse_destination",
    "parse_if",
    "parse_overwrite",
    "parse_timeout",
]

# The longest If field read (several lines joined) and the most conditions
# in it, over all lists: a client holding many locks sends one list each.
MAX_IF_FIELD: Final = 16384
MAX_IF_CONDITIONS: Final = 256
# RFC 4918 §10.7: DAVTimeOutVal = 1*DIGIT, "greater than 2^32-1" is not
# to be sent; longer values are clamped to it.
MAX_TIMEOUT: Final = 2**32 - 1


def _bad(detail: str) -> HTTPError:
    return HTTPError(400, detail)


@dataclass(frozen=True, slots=True)
class Condition:
    """One condition of an If list: a state token or an entity tag (exactly
    one is set), negated by ``Not``."""

    negated: bool
    token: str | None = None  # the Coded-URL without "<" ">"
    etag: str | None = None  # the entity-tag as sent: 'W/"x"' or '"x"'


@dataclass(frozen=True, slots=True)
class IfList:
    """A parenthesised list; ``resource`` is the tag (None: untagged,
    meaning the request URI)."""

    resource: str | None
    conditions: tuple[Condition, ...]


@dataclass(frozen=True, slots=True)
class ResourceState:
    """What the caller knows of a resource: its current strong entity tag
    (None: the resource does not exist) and the state tokens of the locks
    that cover it."""

    etag: str | None
    tokens: frozenset[str]


@dataclass(frozen=True, slots=True)
class IfField:
    """A parsed If field."""

    lists: tuple[IfList, ...]

    @property
    def tokens(self) -> frozenset[str]:
        """Every state token the field names: the lock tokens the client
        "submits" (§6.4, §10.4.1), negated or not."""
        return frozenset(c.token for lst in self.lists for c in lst.conditions if c.token)

    @property
    def tagged(self) -> bool:
        return bool(self.lists) and self.lists[0].resource is not None

    def holds(self, request_uri: str, state: Callable[[str], ResourceState]) -> bool:
        """True when the field is satisfied (§10.4.3, §10.4.4): some list
        that applies matches, every condition of it true.  ``request_uri``
        is the resource the untagged lists apply to; ``state`` looks a
        resource up (tags are passed as sent: the caller maps an absolute
        URI or path to its resource, and answers for one it does not
        serve with ``ResourceState(None, frozenset())``).  A tagged list
        is evaluated against its own resource; the field holds when any
        list holds.  Entity tags compare strongly (a weak tag never
        matches, RFC 9110 §8.8.3.2, as If-Match)."""
        for lst in self.lists:
            current = state(lst.resource if lst.resource is not None else request_uri)
            if all(_condition(c, current) for c in lst.conditions):
                return True
        return False


def _condition(c: Condition, current: ResourceState) -> bool:
    if c.token is not None:
        value = c.token in current.tokens
    else:
        value = (
            current.etag is not None
            and c.etag is not None
            and not c.etag.startswith("W/")
            and c.etag == current.etag
        )
    return value != c.negated


# RFC 3986 §3.1 scheme, then anything but whitespace and angle brackets
# (the absolute-URI is not validated further: it is compared, never used).
_CODED_URL = re.compile(r"<([A-Za-z][A-Za-z0-9+.\-]*:[^\s<>]*)>")
# A Resource-Tag is a Simple-ref: an absolute URI or a path.
_RESOURCE_TAG = re.compile(r"<([^\s<>]+)>")
# RFC 9110 §8.8.3: entity-tag = [ "W/" ] DQUOTE *etagc DQUOTE; SP is
# accepted too, as RFC 4918's own examples (§10.4.6) put one in a tag.
_ETAG = re.compile(r'\[((?:W/)?"[\x20\x21\x23-\x7e\x80-\xff]*")\]')
_NOT = re.compile(r"not(?=[\s<\[])", re.IGNORECASE)
_LWS = re.compile(r"[ \t]*")


class _IfParser:
    __slots__ = ("conditions", "pos", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.conditions = 0

    def _skip(self) -> None:
        match = _LWS.match(self.text, self.pos)
        assert match is not None  # "*" always matches
        self.pos = match.end()

    def _at(self, c: str) -> bool:
        return self.text.startswith(c, self.pos)

    def field(self) -> IfField:
        lists: list[IfList] = []
        tagged: bool | None = None
        resource: str | None = None
        self._skip()
        while self.pos < len(self.text):
            if self._at("<"):
                match = _RESOURCE_TAG.match(self.text, self.pos)
                if match is None:
                    raise _bad("If: invalid resource tag")
                if tagged is False:
                    raise _bad("If: tagged list after untagged ones")
                tagged, resource = True, match.group(1)
                self.pos = match.end()
                self._skip()
                if not self._at("("):
                    raise _bad("If: resource tag without a list")
            elif self._at("("):
                if tagged is None:
                    tagged = False
                lists.append(IfList(resource, self._list()))
            else:
                raise _bad("If: expected '(' or '<'")
            self._skip()
        if not lists:
            raise _bad("If: no list")
        return IfField(tuple(lists))

    def _list(self) -> tuple[Condition, ...]:
        self.pos += 1
        out: list[Condition] = []
        while True:
            self._skip()
            if self._at(")"):
                self.pos += 1
                if not out:
                    raise _bad("If: empty list")
                return tuple(out)
            out.append(self._condition())
            self.conditions += 1
            if self.conditions > MAX_IF_CONDITIONS:
                raise _bad("If: too many conditions")

    def _condition(self) -> Condition:
        negated = False
        match = _NOT.match(self.text, self.pos)
        if match is not None:
            negated = True
            self.pos = match.end()
            self._skip()
        match = _CODED_URL.match(self.text, self.pos)
        if match is not None:
            self.pos = match.end()
            return Condition(negated, token=match.group(1))
        match = _ETAG.match(self.text, self.pos)
        if match is not None:
            self.pos = match.end()
            return Condition(negated, etag=match.group(1))
        raise _bad("If: invalid condition")


def parse_if(values: Sequence[bytes]) -> IfField | None:
    """The If field from its lines (None when absent).  Raises 400 for a
    malformed field, one over :data:`MAX_IF_FIELD` bytes or with more than
    :data:`MAX_IF_CONDITIONS` conditions."""
    if not values:
        return None
    joined = b" ".join(values)
    if len(joined) > MAX_IF_FIELD:
        raise _bad("If: too long")
    return _IfParser(joined.decode("latin-1")).field()


class Depth(enum.Enum):
    """RFC 4918 §10.2."""

    ZERO = "0"
    ONE = "1"
    INFINITY = "infinity"


def parse_depth(value: bytes | None, default: Depth) -> Depth:
    """The Depth field (``default`` when absent: it depends on the method,
    §9.1, §9.8.3, §9.9.3, §9.10.3).  Raises 400 for another value."""
    if value is None:
        return default
    # RFC 5234 §2.3: ABNF string literals are case-insensitive.
    text = value.strip(b" \t").lower()
    for depth in Depth:
        if text == depth.value.encode("ascii"):
            return depth
    raise _bad("invalid Depth")


def parse_overwrite(value: bytes | None) -> bool:
    """The Overwrite field (§10.6): T or F; True when absent (§10.6: "If
    the Overwrite header is not included ... treat as T")."""
    if value is None:
        return True
    text = value.strip(b" \t").upper()
    if text == b"T":
        return True
    if text == b"F":
        return False
    raise _bad("invalid Overwrite")


_SECOND = re.compile(rb"second-([0-9]{1,20})")


def parse_timeout(value: bytes | None) -> tuple[int | None, ...]:
    """The Timeout field (§10.7): the client's preferences in order, each
    seconds or None for ``Infinite``; empty when absent.  The server picks
    (§6.6: it need not honour any).  Raises 400 for a malformed element;
    values past :data:`MAX_TIMEOUT` are clamped to it.  At most 16
    elements are read."""
    if value is None:
        return ()
    out: list[int | None] = []
    for element in value.split(b","):
        text = element.strip(b" \t").lower()
        if text == b"infinite":
            out.append(None)
            continue
        match = _SECOND.fullmatch(text)
        if match is None:
            raise _bad("invalid Timeout")
        out.append(min(int(match.group(1)), MAX_TIMEOUT))
        if len(out) > 16:
            raise _bad("Timeout: too many elements")
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Destination:
    """A COPY/MOVE Destination: its path as a :class:`Target`, or
    ``foreign`` (and no target) when it names another scheme or authority
    than the request's: the caller answers 502 Bad Gateway (RFC 4918
    §9.8.5, §9.9.4)."""

    target: Target | None
    foreign: bool


_DEFAULT_PORT: Final = {"http": 80, "https": 443}


def _authority(scheme: str, host: str) -> tuple[str, str, int | None]:
    parts = urlsplit(f"{scheme}://{host}")
    try:
        port = parts.port
    except ValueError:
        raise _bad("Destination: invalid port") from None
    return scheme, (parts.hostname or ""), port or _DEFAULT_PORT.get(scheme)


def parse_destination(
    value: bytes | None, *, scheme: str, host: str, max_size: int = 8192
) -> Destination:
    """The Destination field of a COPY or MOVE (§10.3, required there: 400
    when absent).  ``scheme`` (``http``/``https``) and ``host`` (the request's
    Host or ``:authority``) say what "this server" is; an absolute URI
    elsewhere is ``foreign``.  The path goes through
    :func:`~serverio.http.target.parse_target`, the reads' own parser, so a
    destination obeys exactly the request-target rules (no dot-segments,
    no encoded slash, no backslash); a fragment is a 400."""
    if value is None:
        raise _bad("Destination missing")
    text = value.strip(b" \t")
    if not text or len(text) > max_size:
        raise _bad("Destination empty or too long")
    try:
        decoded = text.decode("ascii")
    except UnicodeDecodeError:
        raise _bad("Destination is not a URI") from None
    parts = urlsplit(decoded)
    if parts.fragment or "#" in decoded:
        raise _bad("Destination with a fragment")
    if parts.scheme:
        if parts.scheme.lower() not in _DEFAULT_PORT or not parts.netloc:
            return Destination(None, foreign=True)
        theirs = _authority(parts.scheme.lower(), parts.netloc)
        if theirs != _authority(scheme.lower(), host):
            return Destination(None, foreign=True)
        path = parts.path or "/"
    elif decoded.startswith("/") and not decoded.startswith("//"):
        path = parts.path
    else:
        raise _bad("Destination is neither an absolute URI nor an absolute path")
    raw = path + ("?" + parts.query if parts.query else "")
    try:
        target = parse_target(b"COPY", raw.encode("ascii"), max_size=max_size)
    except HTTPError as exc:
        # The destination is a field, not the request line: the framing is
        # intact, so the connection stays open.
        raise _bad(f"Destination: {exc.detail}") from None
    return Destination(target, foreign=False)
