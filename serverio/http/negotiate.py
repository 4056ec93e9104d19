"""Content negotiation and request options (pure).

Accept-Encoding (RFC 9110 §12.5.3), Accept for listings (§12.5.1),
Want-Repr-Digest (RFC 9530 §4) and the query options serverio understands
(``?download``, ``?format=json``, ``?sort=``, ``?order=``).  Nothing here does
I/O: every function maps header text to a decision, so the rules are tested
table-driven (tests/test_negotiate.py).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import Final
from urllib.parse import parse_qsl

__all__ = [
    "CODING_RANK",
    "COMPRESS_MIN_SIZE",
    "DIGEST_ALGORITHMS",
    "SIDECAR_SUFFIX",
    "AcceptEncoding",
    "parse_accept_encoding",
    "parse_query",
    "prefers_html",
    "prefers_json",
    "prefers_problem",
    "prefers_text",
    "repr_digest_field",
    "select_coding",
    "want_digest",
    "wanted_codings",
]

# Codings we can produce, best first.  "Prefer the smallest the client
# accepts": for text, brotli and zstd usually beat gzip; among codings the
# client weights equally we take them in this order.
CODING_RANK: Final = ("br", "zstd", "gzip")

# Precompressed sidecar file name suffix per coding (FILE.br, FILE.zst, FILE.gz).
SIDECAR_SUFFIX: Final = {"br": ".br", "zstd": ".zst", "gzip": ".gz"}

# Below this, a compressed body (headers + coding overhead: gzip alone adds 18
# bytes of framing) saves less than it costs; nginx uses 20, Caddy 512.
COMPRESS_MIN_SIZE: Final = 256

# qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )   (§12.4.2)
_QVALUE = re.compile(r"(?:0(?:\.[0-9]{0,3})?|1(?:\.0{0,3})?)\Z")
# token = 1*tchar  (§5.6.2)
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")


@dataclass(frozen=True, slots=True)
class AcceptEncoding:
    """A parsed Accept-Encoding field: coding -> qvalue, lower-cased.

    ``present`` is False when the request had no such field; then (as every
    deployed server does, although §12.5.3 would allow any coding) only
    identity is sent.
    """

    weights: Mapping[str, float]
    present: bool = True

    def q(self, coding: str) -> float:
        """The qvalue for a content coding other than identity (§12.5.3:
        ``*`` matches any coding not listed explicitly)."""
        w = self.weights
        if coding in w:
            return w[coding]
        return w.get("*", 0.0)

    def identity_q(self) -> float | None:
        """The explicit weight of identity, or None when the client said
        nothing about it (then it is acceptable, as the last resort)."""
        w = self.weights
        if "identity" in w:
            return w["identity"]
        return w.get("*")


_NO_FIELD = AcceptEncoding(MappingProxyType({}), present=False)


def _parse_weighted(value: str, *, media: bool) -> dict[str, float]:
    """``#( item *( OWS ";" OWS parameter ) )`` with a q parameter.

    A member with an invalid qvalue is ignored (not the whole field); the
    first occurrence of a repeated item wins.  For media ranges, parameters
    before ``q`` are kept in the key only if ``media`` is False (we match on
    type/subtype only).
    """
    out: dict[str, float] = {}
    for member in value.split(","):
        item, *params = member.split(";")
        item = item.strip(" \t").lower()
        if not item:
            continue
        if media:
            typ, slash, sub = item.partition("/")
            if not slash or not _TOKEN.match(typ) or not _TOKEN.match(sub):
                continue
        elif not _TOKEN.match(item):
            continue
        q = 1.0
        valid = True
        for param in params:
            name, _, v = param.partition("=")
            if name.strip(" \t").lower() == "q":
                v = v.strip(" \t")
                if not _QVALUE.match(v):
                    valid = False
                else:
                    q = float(v)
                break  # §12.4.2: q separates media-type parameters from accept-ext
        if not valid:
            continue
        if item == "x-gzip":
            item = "gzip"  # §8.4.1.3: x-gzip is gzip
        out.setdefault(item, q)
    return out


# The only members of Accept-Encoding a decision reads (AcceptEncoding.q is
# asked about our codings, identity_q about identity and "*"); the others
# are dropped, so a parsed field is small whatever the client sent.
_RELEVANT_CODINGS: Final = frozenset((*CODING_RANK, "identity", "*"))
_MEMO_MAX_VALUE: Final = 256  # longer values are parsed every time


def parse_accept_encoding(value: str | None) -> AcceptEncoding:
    """Parse Accept-Encoding (RFC 9110 §12.5.3); ``None``: no such field."""
    if value is None:
        return _NO_FIELD
    if len(value) <= _MEMO_MAX_VALUE:
        return _parse_accept_encoding_memo(value)
    return _parse_accept_encoding(value)


def _parse_accept_encoding(value: str) -> AcceptEncoding:
    weights = _parse_weighted(value, media=False)
    return AcceptEncoding(
        MappingProxyType({c: q for c, q in weights.items() if c in _RELEVANT_CODINGS})
    )


# Browsers send a handful of distinct values ("gzip, deflate, br, zstd"), so
# a bounded memo makes the parse free on the hot path: at most 256 entries,
# each keyed by at most 256 characters and holding at most five weights.
# The function is pure and its result immutable (a read-only mapping), so
# sharing is safe, across worker threads too (lru_cache is thread-safe).
@lru_cache(maxsize=256)
def _parse_accept_encoding_memo(value: str) -> AcceptEncoding:
    return _parse_accept_encoding(value)


def select_coding(
    accept: AcceptEncoding,
    sidecars: Collection[str] = (),
    on_the_fly: Collection[str] = (),
) -> tuple[str, bool]:
    """Choose the content coding to send: ``(coding, from_sidecar)``.

    ``coding`` is ``""`` for identity.  Rules, RFC 9110 §12.5.3:

    * a coding with q=0 is refused; ``*`` gives its weight to codings not
      listed; identity is the fallback (never a 406/415);
    * the highest qvalue wins; identity beats a coding only when the client
      weighted identity explicitly higher;
    * among equal qvalues a precompressed sidecar (no CPU, the operator's
      choice) beats on-the-fly compression, then :data:`CODING_RANK` order.
    """
    if not accept.present or not (sidecars or on_the_fly):
        return "", False
    ident = accept.identity_q()
    tiers: dict[float, list[str]] = {}
    for coding in CODING_RANK:
        if coding in sidecars or coding in on_the_fly:
            q = accept.q(coding)
            if q > 0:
                tiers.setdefault(q, []).append(coding)
    for q in sorted(tiers, reverse=True):
        if ident is not None and ident > q:
            return "", False
        codings = tiers[q]
        for coding in codings:
            if coding in sidecars:
                return coding, True
        for coding in codings:
            if coding in on_the_fly:
                return coding, False
    return "", False


def wanted_codings(accept: AcceptEncoding) -> list[str]:
    """Codings the client accepts (q > 0), in :data:`CODING_RANK` order:
    the sidecars worth looking for."""
    if not accept.present:
        return []
    return [c for c in CODING_RANK if accept.q(c) > 0]


# ------------------------------------------------------------------- Accept


def _media_q(ranges: Mapping[str, float], media: str) -> float:
    # §12.5.1: the most specific matching range supplies the weight.
    typ = media.split("/", 1)[0]
    for key in (media, f"{typ}/*", "*/*"):
        if key in ranges:
            return ranges[key]
    return 0.0


def prefers_json(accept: str | None) -> bool:
    """True when Accept weights application/json above text/html.

    Ties go to HTML: browsers send ``text/html`` explicitly, curl sends
    ``*/*``; only a client that asks for JSON gets JSON.
    """
    if accept is None:
        return False
    ranges = _parse_weighted(accept, media=True)
    q_json = _media_q(ranges, "application/json")
    return q_json > 0 and q_json > _media_q(ranges, "text/html")


def prefers_text(accept: str | None) -> bool:
    """True when Accept names ``text/plain`` itself with a weight above
    ``text/html``'s and ``application/json``'s (a listing's plain-text form,
    as Caddy's ``browse`` answers it).  ``*/*`` alone (curl) is no
    preference: it keeps the HTML page."""
    if accept is None or "text/plain" not in accept.lower():
        return False
    ranges = _parse_weighted(accept, media=True)
    q_text = ranges.get("text/plain", 0.0)
    return (
        q_text > 0
        and q_text > _media_q(ranges, "text/html")
        and q_text > _media_q(ranges, "application/json")
    )


def prefers_problem(accept: str | None) -> bool:
    """True when Accept names ``application/problem+json`` or
    ``application/json`` itself (q > 0) at least as high as ``text/html``:
    an error is then answered as a problem document (RFC 9457 §3; the
    page's own fetch() calls send ``application/problem+json``)."""
    if accept is None or "json" not in accept.lower():
        return False
    ranges = _parse_weighted(accept, media=True)
    q_json = max(ranges.get("application/problem+json", 0.0), ranges.get("application/json", 0.0))
    return q_json > 0 and q_json >= ranges.get("text/html", 0.0)


def prefers_html(accept: str | None) -> bool:
    """True when Accept names ``text/html`` itself, with q > 0 and at least
    the weight of ``text/plain`` (the built-in error pages' choice,
    :mod:`serverio.http.errorpage`).

    ``*/*`` and ``text/*`` alone are no preference: curl, wget and scripts
    send them and keep the plain-text errors they parse today; a browser's
    navigation names ``text/html`` (q=1 above ``*/*;q=0.8``).
    """
    if accept is None or "html" not in accept.lower():
        return False
    got = _HTML_MEMO.get(accept)
    if got is None:
        ranges = _parse_weighted(accept, media=True)
        q_html = ranges.get("text/html", 0.0)
        got = q_html > 0 and q_html >= _media_q(ranges, "text/plain")
        if len(accept) <= _MEMO_MAX_VALUE:  # browsers send a few values: memoised, bounded
            if len(_HTML_MEMO) >= _HTML_MEMO_MAX:
                _HTML_MEMO.clear()
            _HTML_MEMO[accept] = got
    return got


_HTML_MEMO: dict[str, bool] = {}
_HTML_MEMO_MAX: Final = 256


# --------------------------------------------------------- Want-Repr-Digest

DIGEST_ALGORITHMS: Final = ("sha-256", "sha-512")
_DIGEST_MEMBER = re.compile(r"([a-z*][a-z0-9_.*-]*)=([0-9]{1,3})\Z")


def want_digest(value: str | None) -> str | None:
    """The algorithm for Repr-Digest given Want-Repr-Digest (RFC 9530 §4).

    No field: sha-256.  The field is a Structured Fields dictionary of
    algorithm -> preference 0-10 (0 = not acceptable); an unparsable field is
    ignored as a whole (RFC 8941 §4.2).  We pick the supported algorithm with
    the highest preference (ties: sha-256, the cheaper); if every supported
    one has preference 0 or is absent, we send none (the client said which
    ones it can check, and ours are not among them).
    """
    if value is None:
        return "sha-256"
    prefs: dict[str, int] = {}
    for member in value.split(","):
        m = _DIGEST_MEMBER.match(member.strip(" \t"))
        if m is None or int(m.group(2)) > 10:
            return "sha-256"
        prefs[m.group(1)] = int(m.group(2))
    best = max(DIGEST_ALGORITHMS, key=lambda a: (prefs.get(a, 0), a == "sha-256"))
    return best if prefs.get(best, 0) > 0 else None


def repr_digest_field(algorithm: str, digest: bytes) -> bytes:
    """``sha-256=:BASE64:`` (RFC 9530 §3, a Structured Fields byte sequence)."""
    return algorithm.encode("ascii") + b"=:" + base64.b64encode(digest) + b":"


# -------------------------------------------------------------------- query


def parse_query(query: str | None) -> dict[str, str]:
    """The request's query parameters, first occurrence wins.

    ``?download`` (no value) maps to ``""``.  The raw query is latin-1 text
    as received; percent-escapes decode as UTF-8 with replacement (a bad
    escape can only make an option unrecognised, never an error).
    """
    if not query:
        return {}
    out: dict[str, str] = {}
    for k, v in parse_qsl(query, keep_blank_values=True, errors="replace"):
        if k:
            out.setdefault(k, v)
    return out
