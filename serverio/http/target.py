"""Request-target parsing and path mapping (pure).

Turns the raw request-target bytes into a tuple of decoded path segments that
can be joined under the served root without ever leaving it.  The filesystem
is never consulted here; :mod:`serverio.fs.prepare` opens the result with a
resolver that is itself confined to the root, so a symlink cannot undo what
this module guarantees lexically.

Rules (RFC 9112 §3.2, RFC 3986 §2.1, §3.3):

* origin-form ``/path?query`` and absolute-form ``http://host/path?query``
  (§3.2.2: a server MUST accept absolute-form); asterisk-form ``*`` only for
  OPTIONS (§3.2.4); authority-form is only for CONNECT, which we do not serve.
* The path is split on raw ``/`` first, then each segment is percent-decoded
  exactly once, so ``%2F`` can never introduce a separator and ``%252e`` stays
  the literal text ``%2e``.
* The decoded bytes become text as UTF-8 with ``surrogateescape``: a name
  that is not UTF-8 (POSIX names are bytes) keeps each undecodable byte as
  a lone surrogate U+DC80..U+DCFF, which :func:`quote_segment` and the
  opener turn back into that byte.  Decoding is injective, so every name
  still has exactly one spelling, and it never manufactures ASCII: an
  overlong form such as ``%C0%AE`` (a ``.`` in broken decoders) or
  ``%C0%AF`` (``/``) is two surrogates, never a dot segment or a separator.
* Invalid percent escapes, NUL and a raw backslash are 400 (WHATWG URL
  parsers read a raw ``\\`` as ``/``, so its meaning depends on the client).
  An encoded ``%5C`` is the literal character of a POSIX file name
  (``a\\b.txt``, which listings link as ``a%5Cb.txt``); it is never a
  separator for ``openat``.
* ``.`` and ``..`` segments (raw or encoded) are 400: a conforming client
  removes dot-segments before sending (RFC 3986 §5.2.4), so their presence
  is an attack or a bug, and answering 400 is safer than guessing.
* A segment that decodes to contain ``/`` is 404 (like Apache's default
  ``AllowEncodedSlashes Off``): such a name cannot exist on a POSIX filesystem.
* Empty segments (``//``) are dropped, so a redirect built from the segments
  can never start with ``//`` (an open redirect to another host).
* More than :data:`MAX_SEGMENTS` segments is 414 (RFC 9110 §15.5.15: a
  target longer than the server is willing to interpret): opening a path
  costs up to one ``openat`` per segment where the kernel cannot resolve
  it in one call, and no served tree is that deep.
* Hidden segments (starting with ``.``) are reported, not refused: the
  decision core applies the ``--hidden`` policy.  ``.well-known`` (RFC 8615)
  is never hidden when it is the first segment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import quote

from ..doorkeeper import AdmittedMemo
from ..errors import HTTPError

# The prefix of the temporary files an upload streams into
# (serverio.fs.writer): never served, listed or written by name, even with
# --hidden (a half-written upload is nobody's representation).
WRITE_TEMP_PREFIX = ".serverio-tmp-"
# Write temporaries that outlive their request and the process (a
# resumable upload's data and state): hidden like every write temporary,
# but the start-up sweep of abandoned temporaries keeps them; their owner
# removes them when they expire.
KEPT_TEMP_PREFIX = WRITE_TEMP_PREFIX + "up-"


def is_write_temp(segments: tuple[str, ...]) -> bool:
    """Does a path with these segments name (or pass through) an upload's
    temporary file?"""
    return any(s.startswith(WRITE_TEMP_PREFIX) for s in segments)


__all__ = [
    "KEPT_TEMP_PREFIX",
    "MAX_SEGMENTS",
    "WRITE_TEMP_PREFIX",
    "Target",
    "is_write_temp",
    "parse_target",
    "quote_query",
    "quote_segment",
]

_HEX = frozenset(b"0123456789abcdefABCDEF")

# The most path segments a request-target may have (see the module docstring).
MAX_SEGMENTS = 128


def quote_segment(segment: str) -> str:
    """One path segment as it may appear in a link or a Location.

    Every byte of the name (UTF-8; an undecodable byte carried as a
    surrogate by ``surrogateescape`` is that byte again) outside RFC 3986
    §2.3 unreserved (ALPHA DIGIT ``-._~``) is percent-encoded: ``:`` so the
    segment can never read as a scheme (``javascript:``), ``/`` and ``\\``
    so it can never become a separator or an authority, ``%?#;`` and
    spaces so a browser decodes to exactly the name and nothing else.
    """
    return quote(segment.encode("utf-8", "surrogateescape"), safe="")


# RFC 3986 §3.4: query = *( pchar / "/" / "?" ), pchar = unreserved /
# pct-encoded / sub-delims / ":" / "@".  Kept as they are in a query; any
# other character is percent-encoded, and so is a "%" that does not start
# an escape.
_QUERY_SAFE = "!$&'()*+,;=:@/?"
_ESCAPE = re.compile("%(?![0-9A-Fa-f]{2})")


def quote_query(query: str) -> str:
    """A request's raw query (its bytes as latin-1 text, as
    :class:`Target` keeps it) as it may go into a Location: ASCII only,
    every byte outside RFC 3986's query characters percent-encoded
    (controls, DEL, space, quotes, ``<>\\^`{|}``, non-ASCII), existing
    escapes kept, so a redirect says the same query and a client echoing
    the header (a terminal, a log) can never be handed a control byte.
    Defence in depth: both transports refuse such bytes in a
    request-target first (400)."""
    encoded = quote(query.encode("latin-1", "replace"), safe=_QUERY_SAFE + "%")
    return _ESCAPE.sub("%25", encoded)


@dataclass(frozen=True, slots=True)
class Target:
    """A parsed request-target.

    ``segments`` are decoded path segments (never empty, never ``.``/``..``);
    ``slash`` is True when the path ended with ``/``; ``query`` is the raw
    query string without ``?`` (``None`` when there was no ``?``);
    ``asterisk`` is True for the ``*`` form; ``hidden`` is True when a
    segment other than a leading ``.well-known`` starts with a dot.
    """

    segments: tuple[str, ...]
    slash: bool
    query: str | None
    asterisk: bool = False
    hidden: bool = False
    # The path relative to the root, ``.`` for the root itself: made once
    # with the target (read by the cache lookup, the resolution and the
    # listing; an attribute, not a call on the warm path).
    relpath: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        segments = self.segments
        object.__setattr__(self, "relpath", "/".join(segments) if segments else ".")

    def url_path(self, *, slash: bool | None = None) -> str:
        """The canonical, percent-encoded absolute path (for Location).

        It starts with exactly one ``/`` (segments are never empty and
        each is :func:`quote_segment`-encoded), so it is a path, never a
        scheme or a network-path reference (``//host``).
        """
        path = "/" + "/".join(quote_segment(s) for s in self.segments)
        want_slash = self.slash if slash is None else slash
        if want_slash and self.segments:
            path += "/"
        return path


def _unquote_segment(raw: bytes) -> str:
    if b"\\" in raw:
        raise HTTPError(400, "backslash in path")
    if b"%" not in raw:
        out = raw
    else:
        buf = bytearray()
        i = 0
        n = len(raw)
        while i < n:
            c = raw[i]
            if c == 0x25:  # '%'
                if i + 2 >= n:
                    raise HTTPError(400, "truncated percent escape")
                h1, h2 = raw[i + 1], raw[i + 2]
                if h1 not in _HEX or h2 not in _HEX:
                    raise HTTPError(400, "invalid percent escape")
                buf.append(int(raw[i + 1 : i + 3], 16))
                i += 3
            else:
                buf.append(c)
                i += 1
        out = bytes(buf)
    # surrogateescape never fails and is a bijection between byte strings
    # and the strings it produces: the one spelling of a name that is not
    # UTF-8 is its bytes, percent-encoded.  Bytes outside UTF-8 (overlong
    # forms like %C0%AE, encoded surrogates) become U+DC80..U+DCFF, never
    # ASCII, so they cannot make a '.', '/' or NUL.
    text = out.decode("utf-8", "surrogateescape")
    if "\x00" in text:
        raise HTTPError(400, "NUL in path")
    return text


_MEMO_MAX_TARGET = 256  # longer targets are parsed every time (memo stays small)
_MEMO_ENTRIES = 4096
# Only methods we serve enter the memo: the method is client input of any
# length, and every other method is answered 405 without a lookup.  One
# memo per method, keyed by the target's bytes.  A target enters it on its
# second parse within about _MEMO_ENTRIES others (serverio.doorkeeper): a
# site of many files asked for at random would otherwise build an entry
# and drop another per request, each a few objects more for the cyclic
# collector to traverse.
_MEMOS: Final[dict[bytes, AdmittedMemo[bytes, Target]]] = {
    b"GET": AdmittedMemo(_MEMO_ENTRIES),
    b"HEAD": AdmittedMemo(_MEMO_ENTRIES),
}


def parse_target(method: bytes, raw: bytes, *, max_size: int = 8192) -> Target:
    """Parse ``raw`` (the request-target as received) for ``method``.

    Raises :class:`HTTPError` (400, 404 or 414); never touches the filesystem.
    Results for short targets of GET and HEAD are memoised (a pure function
    of its inputs, and :class:`Target` is immutable): a busy server sees the
    same few paths over and over.  Errors are never memoised; the memo holds
    at most 4096 entries per method, each keyed by at most 256 bytes of
    target, so a client cannot grow it; a target enters it on its second
    parse within about as many others.
    """
    memo = _MEMOS.get(method)
    if memo is None or len(raw) > _MEMO_MAX_TARGET or len(raw) > max_size:
        return _parse_target(method, raw, max_size)
    raw = bytes(raw)
    target = memo.entries.get(raw)
    if target is None:
        target = _parse_target(method, raw, max_size)
        memo.offer(raw, target)
    return target


# The origin-form most requests use: non-empty segments of unreserved
# characters (RFC 3986 §2.3), none starting with a dot (so no dot-segment
# and nothing hidden), no escape, query or fragment.  Such a target parses
# to its segments as written: :func:`_parse_target` answers it without the
# general walk (a site with many files misses the memo on most requests),
# and tests/test_target.py checks both ways agree on every target this
# matches.
_PLAIN_PATH: Final = re.compile(rb"(?:/[A-Za-z0-9_~-][A-Za-z0-9_.~-]*)+/?")


def _parse_target(method: bytes, raw: bytes, max_size: int) -> Target:
    if len(raw) > max_size:
        raise HTTPError(414, "request-target too long", close=True)
    if _PLAIN_PATH.fullmatch(raw) is not None:
        slash = raw[-1] == 0x2F  # "/"
        segments = tuple((raw[1:-1] if slash else raw[1:]).decode("ascii").split("/"))
        if len(segments) <= MAX_SEGMENTS:
            return Target(segments, slash, None)
    return _parse_target_walk(method, raw)


def _parse_target_walk(method: bytes, raw: bytes) -> Target:
    """:func:`_parse_target` for any target (the general walk)."""
    if raw == b"*":
        if method != b"OPTIONS":
            raise HTTPError(400, "asterisk-form is only for OPTIONS", close=True)
        return Target((), False, None, asterisk=True)
    if raw[:1] != b"/":
        # absolute-form: scheme "://" authority path-abempty [ "?" query ]
        lower = raw[:8].lower()
        if lower.startswith(b"http://"):
            rest = raw[7:]
        elif lower.startswith(b"https://"):
            rest = raw[8:]
        else:
            raise HTTPError(400, "unsupported request-target form", close=True)
        cut = len(rest)
        for sep in (b"/", b"?"):
            j = rest.find(sep)
            if j != -1 and j < cut:
                cut = j
        if cut == 0:
            raise HTTPError(400, "absolute-form without authority", close=True)
        raw = rest[cut:]
        if raw[:1] != b"/":
            raw = b"/" + raw  # "http://host?x" means path "/" (RFC 9112 §3.2.2)
    q = raw.find(b"?")
    if q == -1:
        path, query = raw, None
    else:
        path, query = raw[:q], raw[q + 1 :].decode("latin-1")
    if b"#" in path:
        raise HTTPError(400, "fragment in request-target", close=True)
    segments: list[str] = []
    hidden = False
    for rawseg in path.split(b"/"):
        if not rawseg:
            continue
        seg = _unquote_segment(rawseg)
        if seg in (".", ".."):
            raise HTTPError(400, "dot-segment in path")
        if "/" in seg:
            raise HTTPError(404, "encoded slash in path")
        if seg[0] == "." and not (seg == ".well-known" and not segments):
            hidden = True
        if len(segments) == MAX_SEGMENTS:
            raise HTTPError(414, "too many path segments")
        segments.append(seg)
    slash = path.endswith(b"/")
    return Target(tuple(segments), slash, query, hidden=hidden)
