"""The pure decision core.

request facts + file facts + policy + now -> a response :class:`Plan`.

Nothing in this module does I/O, reads a clock, or touches trio: every input
is an argument, so every rule is tested table-driven without an event loop
(tests/test_decisions.py and its neighbours).  The edges
(:mod:`serverio.fs.prepare` and the transports in :mod:`serverio.net`)
gather facts and carry out plans.

All validators live here, in one module, evaluated in one function in the
order of RFC 9110 §13.2.2 — splitting 304 and Range handling across modules
is how precedence bugs survive elsewhere (see docs/architecture.md).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Final

from ..config import Config
from ..doorkeeper import AdmittedMemo
from ..errors import HTTPError, Problem, reason_phrase
from .dates import format_http_date, http_seconds, parse_http_date
from .target import Target, is_write_temp, quote_query

__all__ = [
    "ALLOW",
    "CONDITIONAL_FIELDS",
    "ETAG_MODES",
    "NOSNIFF_FIELD",
    "NO_EXTRA",
    "UNSATISFIABLE",
    "VARY_ACCEPT",
    "VARY_ACCEPT_ENCODING",
    "Allow",
    "EtagPolicy",
    "Extra",
    "FileFacts",
    "FileSpan",
    "Plan",
    "RequestFacts",
    "coded_etag",
    "common_fields",
    "conditional_plan",
    "content_digest",
    "content_hasher",
    "decide_directory",
    "decide_file",
    "decide_generated",
    "depends_on_method_only",
    "error_plan",
    "error_text",
    "evaluate_preconditions",
    "make_etag",
    "mtime_is_synthetic",
    "parse_etag_list",
    "parse_range",
    "precondition_plan",
    "read_only",
    "redated",
    "route",
    "sent_mtime",
    "spa_fallback_applies",
    "wants_content_hash",
    "without_conditions",
]

# The methods a read-only server allows (RFC 9110 §10.2.1); a write
# feature adds its own (:data:`Allow`).
ALLOW: Final = b"GET, HEAD, OPTIONS"
# The fields every response carries, whatever its status or protocol (the
# one header policy: added here, in the pure layer, by :func:`common_fields`;
# the wire modules only serialise).  "Do not sniff" (WHATWG Fetch §3.5.1): a
# client must not run a text/plain or octet-stream body (an uploaded .txt
# full of HTML, an error page) as HTML or script.  First in every plan, so
# HTTP/1.1 sends it right after the status line, HTTP/2 right after :status.
NOSNIFF_FIELD: Final = (b"x-content-type-options", b"nosniff")
VARY_ACCEPT_ENCODING: Final = b"Accept-Encoding"
VARY_ACCEPT: Final = b"Accept"


# The raw values of the request fields features registered
# (serverio.http.extra: each feature names its own, none is named here),
# as (lower-case name, value) pairs in the order first seen; the shared
# empty NO_EXTRA when the request has none of them (every plain GET).
Extra = tuple[tuple[str, str], ...]
NO_EXTRA: Final[Extra] = ()


@dataclass(frozen=True, slots=True)
class RequestFacts:
    """What the connection task learned from one request head.

    Header values are ``str`` (latin-1 decoded, as received); a header that
    appeared on several lines is joined with ``", "`` (RFC 9110 §5.3), which
    makes a repeated singleton field such as If-Modified-Since invalid, as the
    RFC requires.
    """

    method: bytes
    target: Target
    keep_alive: bool = True
    if_match: str | None = None
    if_none_match: str | None = None
    if_modified_since: str | None = None
    if_unmodified_since: str | None = None
    range: str | None = None
    if_range: str | None = None
    has_body: bool = False
    accept: str | None = None
    accept_encoding: str | None = None
    want_repr_digest: str | None = None
    authorization: str | None = None  # read by the site's auth rules (RFC 7617)
    # The request came over TLS (HTTPS, or HTTP/2 over TLS): read by the
    # site rules only, for Strict-Transport-Security (RFC 6797 §7.2).
    tls: bool = False
    # The client's address (the peer, or the one --trusted-proxies names),
    # set only for a write step (serverio.pipeline.driver, the Write need):
    # the key of per-client budgets there (WebDAV locks); "" elsewhere.
    client: str = ""
    # The fields a feature reads (WebDAV's Depth, CORS's Origin, ...): read
    # with the feature's own serverio.http.extra.RequestField, never here.
    extra: Extra = NO_EXTRA


@dataclass(frozen=True, slots=True)
class FileFacts:
    """Immutable facts about one opened regular file (from fstat).

    ``content_hash`` is :func:`content_digest` of the bytes when the
    blocking layer gathered it; ``hash_pending`` says the ETag rule wants
    one that is not known yet (a large file still being hashed): then
    there is no ETag (``etag == ""``).  ``synthetic_mtime``: the mtime is a
    constant set by a build tool (:func:`mtime_is_synthetic`), so it says
    nothing about the bytes: no Last-Modified, and date conditions are
    ignored.  ``ctime_ns`` completes the identity the caches key on.
    """

    size: int
    mtime_ns: int
    dev: int
    ino: int
    content_type: str
    etag: str = field(default="")
    content_hash: bytes | None = None
    hash_pending: bool = False
    synthetic_mtime: bool = False
    ctime_ns: int = 0

    def __post_init__(self) -> None:
        if not self.etag and not self.hash_pending:
            object.__setattr__(self, "etag", make_etag(self.size, self.mtime_ns, self.content_hash))

    @property
    def mtime(self) -> int | None:
        """Modification time in whole seconds (the resolution of HTTP-date);
        None when no HTTP-date can express it, or when the mtime is a
        build tool's constant: then the response has no Last-Modified and
        the date conditions are ignored, as for any representation without
        a modification date (the ETag still works)."""
        if self.synthetic_mtime:
            return None
        return http_seconds(self.mtime_ns)

    @property
    def key(self) -> tuple[int, int, int, int, int]:
        """The full identity (dev, ino, size, mtime, ctime) caches key on."""
        return (self.dev, self.ino, self.size, self.mtime_ns, self.ctime_ns)


@dataclass(frozen=True, slots=True)
class FileSpan:
    """``length`` bytes of the opened file starting at ``offset``."""

    offset: int
    length: int

    def __len__(self) -> int:
        return self.length


@dataclass(frozen=True, slots=True)
class Plan:
    """A response to carry out (immutable: memoised plans are shared).

    ``body`` is the exact byte sequence of the message body for GET: literal
    ``bytes`` and :class:`FileSpan` pieces of the opened file, in order.  The
    Content-Length header was computed from the same sequence, so framing
    cannot drift from what is written.  ``send_body`` is False for HEAD and
    bodiless statuses.  ``close`` asks the connection to close afterwards.
    """

    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    body: tuple[bytes | FileSpan, ...] = ()
    send_body: bool = True
    close: bool = False
    # The plan is memoised and shared by the requests of one second
    # (serverio.model.decide.serve_cached, Site.finish): a transport may
    # cache what it serialises from it, keyed by the plan's identity
    # (serverio.wire.h1.shared_head).  A pure value: no wire bytes here.
    shared: bool = False
    # A long-lived streaming body (the live-reload event stream): the
    # connection writes the head, then hands the socket to the stream.
    stream: bool = False
    # An error's explanation for the client (error_plan's ``problem``): its
    # plain text carries it, and serverio.http.errorpage renders it as a
    # page or an RFC 9457 problem document.
    problem: Problem | None = None

    def with_body(self, body: tuple[bytes | FileSpan, ...]) -> Plan:
        """This plan with ``body`` in place of its own (the same bytes,
        e.g. the file's spans sliced from memory): what
        :func:`dataclasses.replace` makes, without its generic walk of the
        fields, on every request of a small file that misses the caches.
        Every field is passed on (tests/test_decisions.py checks the list)."""
        return Plan(
            self.status,
            self.headers,
            body,
            self.send_body,
            self.close,
            self.shared,
            self.stream,
            self.problem,
        )

    def with_headers(
        self, headers: tuple[tuple[bytes, bytes], ...], shared: bool | None = None
    ) -> Plan:
        """This plan with ``headers`` in place of its own (as :meth:`with_body`),
        and ``shared`` in place of its own unless None."""
        return Plan(
            self.status,
            headers,
            self.body,
            self.send_body,
            self.close,
            self.shared if shared is None else shared,
            self.stream,
            self.problem,
        )

    @property
    def file_bytes(self) -> int:
        return sum(p.length for p in self.body if isinstance(p, FileSpan))

    @property
    def needs_file(self) -> bool:
        return self.send_body and any(isinstance(p, FileSpan) for p in self.body)


# ---------------------------------------------------------------- validators


ETAG_MODES: Final = ("auto", "content")

# The mtimes build tools stamp on every file: 0 and 1 (Nix, many
# reproducible-image builders) — anything below 2 s after the epoch.
_SYNTHETIC_BELOW_NS: Final = 2 * 10**9


@dataclass(frozen=True, slots=True)
class EtagPolicy:
    """What the ETag of a file is built from (docs/features.md "Validators").

    ``mode`` ``auto``: a content hash for files up to ``hash_max`` bytes
    (their bytes are read anyway) and for files whose mtime looks
    constant; size + mtime for the rest.  ``content``: a content hash for
    every file.  ``epoch_ns``: ``SOURCE_DATE_EPOCH`` in nanoseconds, a
    constant mtime too, when set.
    """

    mode: str = "auto"
    hash_max: int = 65536
    epoch_ns: int | None = None


def mtime_is_synthetic(mtime_ns: int, policy: EtagPolicy, shared: bool = False) -> bool:
    """Does this mtime look like a build tool's constant rather than a time
    the bytes were written?  0 or 1 (before 2 s after the epoch),
    ``SOURCE_DATE_EPOCH``, or (``shared``) one the blocking layer has seen
    on many distinct files."""
    return mtime_ns < _SYNTHETIC_BELOW_NS or mtime_ns == policy.epoch_ns or shared


def wants_content_hash(size: int, synthetic: bool, policy: EtagPolicy) -> bool:
    """Must this file's ETag be a content hash?

    Size + mtime alone is wrong whenever the mtime does not move with the
    bytes: a same-size rewrite under a constant mtime would keep its ETag,
    and a revalidating client would get 304 for bytes it does not have.
    """
    return policy.mode == "content" or size <= policy.hash_max or synthetic


def content_hasher() -> hashlib.blake2b:
    """An incremental hasher for :func:`content_digest` (large files)."""
    return hashlib.blake2b(digest_size=16)


def content_digest(data: bytes) -> bytes:
    """The content hash an ETag carries: BLAKE2b-128 of the bytes."""
    return hashlib.blake2b(data, digest_size=16).digest()


def make_etag(size: int, mtime_ns: int, content_hash: bytes | None = None) -> str:
    """A strong ETag (RFC 9110 §8.8.3) from what identifies the bytes.

    Never the device or inode: byte-identical replicas (``cp -a``, an image
    on several hosts) must agree, or every revalidation behind a load
    balancer is a full download and an If-Range resume restarts.  With a
    content hash the tag is the hash (identical bytes, identical tag, on
    any replica and whatever the mtimes); otherwise size and mtime in
    nanoseconds, which change with any write that moves the mtime — the
    rule that decides when that is not enough is :func:`wants_content_hash`.
    """
    if content_hash is not None:
        return '"' + content_hash.hex() + '"'
    return f'"{size:x}-{mtime_ns:x}"'


def coded_etag(etag: str, coding: str) -> str:
    """The strong ETag of the ``coding`` representation of a file.

    RFC 9110 §8.8.3.3: a content-coded representation is a different
    representation and needs a different entity-tag, or a cache could answer
    a gzip-accepting client's revalidation with identity bytes (and 304 and
    If-Range would mix representations).  ``"tag"`` -> ``"tag-gzip"``.
    """
    if not coding or not etag:
        return etag
    return etag[:-1] + "-" + coding + '"'


def parse_etag_list(value: str) -> list[str] | None:
    """Parse ``#entity-tag`` (RFC 9110 §8.8.3); ``None`` means ``*``.

    Returns the tags with their ``W/`` prefix kept.  Parsing stops at the first
    malformed member (what is before it still counts), as Go's net/http does.
    """
    s = value.strip()
    if s == "*":
        return None
    tags: list[str] = []
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c in " \t,":
            i += 1
            continue
        start = i
        if s.startswith('W/"', i):
            i += 2
        if i >= n or s[i] != '"':
            break
        end = s.find('"', i + 1)
        if end == -1:
            break
        opaque = s[i + 1 : end]
        # etagc = %x21 / %x23-7E / obs-text: no space, no DQUOTE, no controls.
        if any(ord(ch) < 0x21 or ord(ch) == 0x7F for ch in opaque):
            break
        tags.append(s[start : end + 1])
        i = end + 1
    return tags


def _strong_match(tag: str, etag: str) -> bool:
    # §8.8.3.2: strong comparison, both must be strong and identical.
    return not tag.startswith("W/") and tag == etag


def _weak_match(tag: str, etag: str) -> bool:
    return (tag[2:] if tag.startswith("W/") else tag) == (
        etag[2:] if etag.startswith("W/") else etag
    )


@dataclass(frozen=True, slots=True)
class Precondition:
    """Outcome of §13.2.2 steps 1-4: ``None`` = proceed, else 304 or 412."""

    status: int | None


_PROCEED = Precondition(None)
_NOT_MODIFIED = Precondition(304)
_FAILED = Precondition(412)


def evaluate_preconditions(req: RequestFacts, etag: str, mtime: int | None) -> Precondition:
    """RFC 9110 §13.2.2 steps 1-4, for an existing representation.

    ``mtime`` is None for a representation without a modification date (a
    generated listing): then the date conditions are ignored (§13.1.3,
    §13.1.4: "MUST ignore ... if the resource does not have a modification
    date available").
    """
    # Step 1: If-Match (§13.1.1) - strong comparison; '*' matches any current
    # representation.
    if req.if_match is not None:
        tags = parse_etag_list(req.if_match)
        if tags is not None and not any(_strong_match(t, etag) for t in tags):
            return _FAILED
    # Step 2: If-Unmodified-Since (§13.1.4), only without If-Match; an invalid
    # date is ignored.
    elif req.if_unmodified_since is not None and mtime is not None:
        date = parse_http_date(req.if_unmodified_since)
        if date is not None and mtime > date:
            return _FAILED
    get_or_head = req.method in (b"GET", b"HEAD")
    # Step 3: If-None-Match (§13.1.2) - weak comparison.
    if req.if_none_match is not None:
        tags = parse_etag_list(req.if_none_match)
        if tags is None or any(_weak_match(t, etag) for t in tags):
            return _NOT_MODIFIED if get_or_head else _FAILED
    # Step 4: If-Modified-Since (§13.1.3), only without If-None-Match and only
    # for GET/HEAD; invalid dates ignored.
    elif req.if_modified_since is not None and get_or_head and mtime is not None:
        date = parse_http_date(req.if_modified_since)
        if date is not None and mtime <= date:
            return _NOT_MODIFIED
    return _PROCEED


def if_range_matches(value: str, etag: str, mtime: int | None) -> bool:
    """§13.1.5: an entity-tag must match strongly; a date must be exact (and
    never matches a representation without a modification date)."""
    v = value.strip()
    if v.startswith(('"', 'W/"')):
        return _strong_match(v, etag)
    if mtime is None:
        return False
    date = parse_http_date(v)
    return date is not None and date == mtime


# -------------------------------------------------------------------- ranges


class _Unsatisfiable:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNSATISFIABLE"


UNSATISFIABLE: Final = _Unsatisfiable()

# A number with more digits than this is larger than any file; the header is
# ignored rather than parsed in full (a client could burn CPU, and Python
# refuses > 4300 digits).
_MAX_DIGITS = 18


def _num(s: str) -> int | None:
    if not s or len(s) > _MAX_DIGITS or not s.isascii() or not s.isdigit():
        return None
    return int(s)


def parse_range(value: str, size: int) -> list[tuple[int, int]] | _Unsatisfiable | None:
    """Parse a Range header against a representation of ``size`` bytes.

    Returns a list of ``(start, end_exclusive)`` spans in request order, the
    :data:`UNSATISFIABLE` marker (-> 416), or ``None`` when the header must be
    ignored (-> 200): another unit, bad syntax (RFC 9110 §14.2: a server MAY
    ignore it; we always do, so a malformed header never yields a wrong 206).
    """
    unit, eq, rest = value.partition("=")
    if not eq or unit.strip().lower() != "bytes":
        return None
    spans: list[tuple[int, int]] = []
    saw_any = False
    for member in rest.split(","):
        spec = member.strip(" \t")
        if not spec:
            continue  # §5.6.1: empty list elements are allowed and ignored
        saw_any = True
        first_s, dash, last_s = spec.partition("-")
        if not dash:
            return None
        first_s, last_s = first_s.strip(" \t"), last_s.strip(" \t")
        if first_s == "":
            # suffix-range "-N": the last N bytes (§14.1.2).
            n = _num(last_s)
            if n is None:
                return None
            if n == 0 or size == 0:
                continue  # unsatisfiable member
            spans.append((max(0, size - n), size))
            continue
        first = _num(first_s)
        if first is None:
            return None
        if last_s == "":
            last = size - 1
        else:
            last_v = _num(last_s)
            if last_v is None or last_v < first:
                return None  # "a-b" with b < a makes the whole field invalid
            last = min(last_v, size - 1)  # clamp (§14.1.2)
        if first >= size:
            continue  # unsatisfiable member
        spans.append((first, last + 1))
    if not saw_any:
        return None
    if not spans:
        return UNSATISFIABLE
    return spans


def coalesce(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Merge overlapping and adjacent spans (RFC 9110 §14.3 permits it)."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


# --------------------------------------------------------------------- plans

_DATE_MEMO: list[tuple[int, bytes]] = [(-1, b"")]


def _date(now: float) -> bytes:
    # A pure memo: the same second always formats the same way.
    sec = int(now)
    memo = _DATE_MEMO[0]
    if memo[0] != sec:
        memo = (sec, format_http_date(sec).encode("ascii"))
        _DATE_MEMO[0] = memo
    return memo[1]


def redated(plan: Plan, now: float, *, shared: bool | None = None) -> Plan:
    """``plan`` with the ``Date`` of ``now`` (:func:`common_fields` put it
    second), every other field as it is: the plan made at ``now`` for a
    caller that knows no other field depends on the time (a plain answer
    of a cached file whose Last-Modified :func:`sent_mtime` leaves as it
    is: serverio.model.decide.serve_cached).  ``shared``: as
    :meth:`Plan.with_headers`."""
    headers = plan.headers
    if headers[1][0] != b"date":
        raise ValueError("a plan without common_fields")
    return plan.with_headers((headers[0], (b"date", _date(now)), *headers[2:]), shared)


def common_fields(now: float) -> list[tuple[bytes, bytes]]:
    """The fields every response starts with: :data:`NOSNIFF_FIELD`, then
    ``Date`` (RFC 9110 §6.6.1: an origin server with a clock sends it).
    Every plan this module (and every feature built on it) makes begins
    with these; nothing below the pure layer adds a field."""
    return [NOSNIFF_FIELD, (b"date", _date(now))]


def error_plan(
    status: int,
    now: float,
    *,
    close: bool = False,
    headers: Sequence[tuple[bytes, bytes]] = (),
    head_only: bool = False,
    allow: bytes = ALLOW,
    problem: Problem | None = None,
) -> Plan:
    """The one place an error status becomes a response.

    The body is a fixed text per status ("404 Not Found\\n"): no path, no
    exception text ever reaches the client; with a ``problem`` (why, in
    the client's terms: :class:`serverio.errors.Problem`) its detail is the
    second line (:func:`error_text`).  Every 503 (saturated pool, out
    of descriptors, a file that shrank while read) says when to retry and
    closes the connection (a client should back off, not pipeline more);
    a 405 lists what is allowed (RFC 9110 §15.5.6): ``allow``, the file
    server's methods unless another endpoint (the admin one) says.
    """
    body = error_text(status, problem)
    hs = common_fields(now)
    hs.append((b"content-type", b"text/plain; charset=utf-8"))
    hs.append((b"content-length", b"%d" % len(body)))
    if status == 405:
        hs.append((b"allow", allow))
    elif status == 503:
        hs.append((b"retry-after", b"1"))
        close = True
    hs.extend(headers)
    return Plan(status, tuple(hs), (body,), send_body=not head_only, close=close, problem=problem)


def error_text(status: int, problem: Problem | None = None) -> bytes:
    """The built-in plain-text body: ``"409 Conflict\\n"``, then the
    problem's detail on a line of its own (control characters, which a
    name in it could carry, shown as ``?``: one line, whatever the name)."""
    head = b"%d %s\n" % (status, reason_phrase(status))
    if problem is None:
        return head
    detail = "".join(c if c.isprintable() else "?" for c in problem.detail)
    return head + detail.encode("utf-8", "replace") + b"\n"


def http_error_plan(exc: HTTPError, now: float, *, head_only: bool = False) -> Plan:
    return error_plan(exc.status, now, close=exc.close, head_only=head_only, problem=exc.problem)


# The methods a path allows (RFC 9110 §10.2.1), for the Allow field of an
# OPTIONS answer and a 405: a write feature contributes its own (the uploads',
# WebDAV's under its prefix) through the pipeline's hooks; without one, the
# read-only ALLOW.
Allow = Callable[[Target], bytes]


def read_only(target: Target) -> bytes:
    """The :data:`Allow` of a server without writes: GET, HEAD, OPTIONS."""
    return ALLOW


def route(req: RequestFacts, cfg: Config, now: float, allow: Allow = read_only) -> Plan | None:
    """Decisions that need no filesystem: method and hidden paths.
    ``allow``: the methods the request's path allows (the write feature's).

    (The asterisk-form reaches here only with OPTIONS: parse_target refuses
    it for every other method.)

    Returns ``None`` when the request must go through preparation.
    """
    method = req.method
    if method == b"OPTIONS":
        # §9.3.7: 204 with Allow; a 204 carries no Content-Length (§8.6).
        methods = allow(req.target)
        return Plan(204, (*common_fields(now), (b"allow", methods)), (), send_body=False)
    if method not in (b"GET", b"HEAD"):
        # A request body is the transport's to drain or not (RFC 9112 §9.3:
        # the connection is kept only when the body can be read past).
        return error_plan(405, now, allow=allow(req.target))
    # Reserved paths (live reload's, which are dot paths) were answered
    # before this, by the pipeline's router (serverio.pipeline.hooks).
    if req.target.hidden and (not cfg.files.hidden or is_write_temp(req.target.segments)):
        # An upload's temporary file is hidden even with --hidden.
        return error_plan(404, now, head_only=method == b"HEAD")
    return None


def decide_directory(req: RequestFacts, cfg: Config, now: float) -> Plan:
    """A directory with no index file (or not yet slash-terminated)."""
    head = req.method == b"HEAD"
    if not req.target.slash and req.target.segments:
        # Redirect to the slash-terminated path so relative links resolve.
        # The Location is rebuilt from the decoded segments, so it always
        # starts with exactly one "/" and can never become "//host".
        loc = req.target.url_path(slash=True)
        if req.target.query is not None:
            loc += "?" + quote_query(req.target.query)
        return error_plan(301, now, headers=[(b"location", loc.encode("ascii"))], head_only=head)
    return error_plan(404, now, head_only=head)


def spa_fallback_applies(req: RequestFacts, cfg: Config) -> bool:
    """May a missing path be answered with the ``--spa`` file?

    Only GET/HEAD of a path that looks like a client-side route: its last
    segment has no extension (``/app.js`` missing is a real 404 a developer
    must see), and no segment starts with a dot (hidden files and
    ``.well-known`` never fall back: a missing ``/.well-known/x`` answered
    with HTML would confuse every protocol that probes it).
    """
    if cfg.content.spa is None or req.method not in (b"GET", b"HEAD"):
        return False
    segments = req.target.segments
    if any(s.startswith(".") for s in segments):
        return False
    return not segments or "." not in segments[-1]


def sent_mtime(mtime: int | None, now: float) -> int | None:
    """The Last-Modified value to send for a file modified at ``mtime``.

    RFC 9110 §8.8.2.1: an origin server with a clock must not send a
    Last-Modified later than its Date; a file stamped in the future gets
    the Date's own second instead (``now``, truncated as :func:`_date`
    does).  The date conditions are evaluated against this value, the one
    the client saw.  The ETag is unaffected: it comes from the file.
    """
    if mtime is None:
        return None
    sec = int(now)
    return sec if mtime > sec else mtime


@functools.lru_cache(maxsize=256)
def _ascii(text: str) -> bytes:
    return text.encode("ascii")


# Memoised per representation: formatting Last-Modified and encoding the
# validators is the same work for every request of a file that has not
# changed (its ETag changes when it does).  Pure, so the memo is too; a
# representation enters it on its second request within about 4096 others
# (serverio.doorkeeper: a site of many files asked for at random would
# turn it over on every request).
_VALIDATOR_TAILS: Final[
    AdmittedMemo[tuple[str, int | None, str | None, bytes], tuple[tuple[bytes, bytes], ...]]
] = AdmittedMemo(4096)


# Last-Modified values by second: the files of a tree share few mtimes (a
# checkout, an unpacked archive, a build write thousands in a second), so
# a representation missing from _VALIDATOR_TAILS (a site of many files)
# still finds its date formatted.  Cleared whole when full.
_LAST_MODIFIED: Final[dict[int, bytes]] = {}
_LAST_MODIFIED_MAX: Final = 4096


def _validator_tail(
    etag: str, mtime: int | None, cache_control: str | None, vary: bytes
) -> tuple[tuple[bytes, bytes], ...]:
    key = (etag, mtime, cache_control, vary)
    tail = _VALIDATOR_TAILS.entries.get(key)
    if tail is None:
        tail = _validator_fields(etag, mtime, cache_control, vary)
        _VALIDATOR_TAILS.offer(key, tail)
    return tail


def _validator_fields(
    etag: str, mtime: int | None, cache_control: str | None, vary: bytes
) -> tuple[tuple[bytes, bytes], ...]:
    hs = []
    if mtime is not None:
        value = _LAST_MODIFIED.get(mtime)
        if value is None:
            if len(_LAST_MODIFIED) >= _LAST_MODIFIED_MAX:
                _LAST_MODIFIED.clear()
            value = _LAST_MODIFIED[mtime] = format_http_date(mtime).encode("ascii")
        hs.append((b"last-modified", value))
    if etag:  # none while a large file's content hash is being computed
        hs.append((b"etag", etag.encode("ascii")))
    if cache_control is not None:
        hs.append((b"cache-control", cache_control.encode("ascii")))
    if vary:
        hs.append((b"vary", vary))
    return tuple(hs)


def conditional_plan(
    req: RequestFacts,
    etag: str,
    mtime: int | None,
    now: float,
    validators: Iterable[tuple[bytes, bytes]],
) -> Plan | None:
    """The one place a precondition result becomes a response: the 304 or
    412 for a representation whose validators are ``etag`` and ``mtime``
    (None: no modification date), or None to go on (RFC 9110 §13.2.2).

    ``validators`` are the fields a 304 repeats from the 200 it stands for
    (§15.4.5: ETag, Cache-Control, Vary, and Last-Modified), after the
    common fields; the caller knows them (a file's, a listing's, the
    live-reload script's, an injected page's).  A 412 is an error plan.
    """
    pre = evaluate_preconditions(req, etag, mtime)
    if pre.status == 304:
        hs = common_fields(now)
        hs.extend(validators)
        return Plan(304, tuple(hs), (), send_body=False)
    if pre.status == 412:
        return error_plan(412, now, head_only=req.method == b"HEAD")
    return None


def precondition_plan(
    req: RequestFacts,
    file: FileFacts,
    cfg: Config,
    now: float,
    *,
    coding: str = "",
    vary: bool = False,
) -> Plan | None:
    """The 304 or 412 for this file's representation, or None to go on.

    Lets the edge answer a revalidation of a compressed representation
    without compressing anything: the coded ETag is known from the file's
    identity alone.
    """
    etag = coded_etag(file.etag, coding)
    mtime = sent_mtime(file.mtime, now)
    vary_field = VARY_ACCEPT_ENCODING if vary else b""
    tail = _validator_tail(etag, mtime, cfg.files.cache_control, vary_field)
    return conditional_plan(req, etag, mtime, now, tail)


# The request fields that make a GET conditional or partial (RFC 9110
# §13.1, §14.2): the one list of them.  :func:`depends_on_method_only`
# tests them (spelled out there: it runs on every warm request) and
# :func:`without_conditions` clears them (spelled out for the type
# checker); tests/test_decisions.py checks both agree with this list.
CONDITIONAL_FIELDS: Final = (
    "if_match",
    "if_none_match",
    "if_modified_since",
    "if_unmodified_since",
    "range",
    "if_range",
)


def without_conditions(req: RequestFacts) -> RequestFacts:
    """``req`` with no precondition and no Range: the request for the whole
    current representation (live reload resolves the base page this way
    and evaluates the client's own conditions against the variant)."""
    return replace(
        req,
        if_match=None,
        if_none_match=None,
        if_modified_since=None,
        if_unmodified_since=None,
        range=None,
        if_range=None,
    )


def depends_on_method_only(req: RequestFacts) -> bool:
    """Does :func:`decide_file` answer ``req`` from its method alone?

    True when the request carries no precondition, no Range and no query:
    then, for one file, coding, policy and second of ``now`` (the Date
    header), every such request gets the same plan.  The edge memoises
    those (serverio.model.decide.serve_cached); keep this beside decide_file
    so that a new input to the decision cannot be missed here.
    """
    return (
        req.if_none_match is None
        and req.if_modified_since is None
        and req.if_match is None
        and req.if_unmodified_since is None
        and req.range is None
        and not req.target.query
    )


def decide_file(
    req: RequestFacts,
    file: FileFacts,
    cfg: Config,
    now: float,
    boundary: str = "",
    *,
    coding: str = "",
    data: bytes | None = None,
    vary: bool = False,
    extra: Sequence[tuple[bytes, bytes]] = (),
) -> Plan:
    """The response for a GET or HEAD of an existing regular file.

    ``boundary`` is the multipart boundary to use if several ranges are
    served; the edge supplies it (randomness is I/O).

    ``coding`` names the content coding of the representation served
    (``""``: identity).  Its bytes are ``data`` (compressed in memory) or,
    when ``data`` is None, the whole opened file (a precompressed sidecar,
    whose facts ``file`` then describes).  A coded representation is never
    ranged: the edge selects identity for any request with a Range header.
    ``vary`` adds ``Vary: Accept-Encoding`` (every response for a resource
    whose coding is negotiated, identity included, §12.5.5).  ``extra``
    headers (Content-Disposition, Repr-Digest) go on 200 and 206 only.
    """
    head = req.method == b"HEAD"
    etag = coded_etag(file.etag, coding)
    mtime = sent_mtime(file.mtime, now)
    vary_field = VARY_ACCEPT_ENCODING if vary else b""
    tail = _validator_tail(etag, mtime, cfg.files.cache_control, vary_field)
    pre = conditional_plan(req, etag, mtime, now, tail)
    if pre is not None:
        return pre
    hs = common_fields(now)
    hs.extend(tail)
    hs.append((b"accept-ranges", b"bytes"))
    ctype = _ascii(file.content_type)

    if coding:
        return _coded_plan(hs, ctype, coding, file.size, data, extra, head)
    size = file.size
    if req.range is not None and req.method == b"GET":
        ranged = _ranged_plan(req, file, cfg, now, boundary, hs, ctype, mtime, vary, extra)
        if ranged is not None:
            return ranged
    hs.append((b"content-type", ctype))
    hs.append((b"content-length", b"%d" % size))
    hs.extend(extra)
    body_parts: tuple[bytes | FileSpan, ...] = (FileSpan(0, size),) if size else ()
    return Plan(200, tuple(hs), body_parts, send_body=not head)


def _coded_plan(
    hs: list[tuple[bytes, bytes]],
    ctype: bytes,
    coding: str,
    file_size: int,
    data: bytes | None,
    extra: Sequence[tuple[bytes, bytes]],
    head: bool,
) -> Plan:
    """The 200 of a content-coded representation (never ranged): ``data``
    compressed in memory, or the whole opened sidecar (``file_size``)."""
    size = file_size if data is None else len(data)
    hs.append((b"content-type", ctype))
    hs.append((b"content-encoding", coding.encode("ascii")))
    hs.append((b"content-length", b"%d" % size))
    hs.extend(extra)
    coded: tuple[bytes | FileSpan, ...]
    if data is not None:
        coded = (data,) if size else ()
    else:
        coded = (FileSpan(0, size),) if size else ()
    return Plan(200, tuple(hs), coded, send_body=not head)


def _ranged_plan(
    req: RequestFacts,
    file: FileFacts,
    cfg: Config,
    now: float,
    boundary: str,
    hs: list[tuple[bytes, bytes]],
    ctype: bytes,
    mtime: int | None,
    vary: bool,
    extra: Sequence[tuple[bytes, bytes]],
) -> Plan | None:
    """Step 5 (RFC 9110 §13.2.2): the 206 or 416 a GET's Range asks for,
    gated by If-Range (§13.1.5); None when the whole file is sent instead
    (If-Range does not match, the guard below, several ranges without a
    boundary, or a Range that parses as none)."""
    size = file.size
    # A Last-Modified replaced by the Date (a future mtime) is no
    # modification date at all: an If-Range date never matches it
    # (§13.1.5 wants a strong validator), so the whole file is sent.
    range_mtime = mtime if mtime == file.mtime else None
    if req.if_range is not None and not if_range_matches(req.if_range, file.etag, range_mtime):
        return None
    assert req.range is not None
    spans = parse_range(req.range, size)
    if spans is UNSATISFIABLE:
        return error_plan(
            416,
            now,
            headers=[(b"content-range", b"bytes */%d" % size)]
            + ([(b"vary", VARY_ACCEPT_ENCODING)] if vary else []),
        )
    if not isinstance(spans, list):
        return None
    # Amplification guard (as Go's net/http): too many ranges, or ranges
    # that add up to more than the file, are answered with the whole file.
    if len(spans) > cfg.files.max_ranges or sum(e - s for s, e in spans) > size:
        return None
    spans = coalesce(spans)
    head = req.method == b"HEAD"
    if len(spans) == 1:
        start, end = spans[0]
        hs.append((b"content-type", ctype))
        hs.append((b"content-range", b"bytes %d-%d/%d" % (start, end - 1, size)))
        hs.append((b"content-length", b"%d" % (end - start)))
        hs.extend(extra)
        return Plan(206, tuple(hs), (FileSpan(start, end - start),), send_body=not head)
    if not boundary:
        return None
    body = multipart_body(spans, size, ctype, boundary.encode("ascii"))
    hs.append((b"content-type", b"multipart/byteranges; boundary=" + boundary.encode()))
    hs.append((b"content-length", b"%d" % sum(len(p) for p in body)))
    hs.extend(extra)
    return Plan(206, tuple(hs), body, send_body=not head)


def decide_generated(
    req: RequestFacts,
    cfg: Config,
    now: float,
    body: bytes,
    content_type: bytes,
    etag: str,
    *,
    vary: bytes = VARY_ACCEPT,
    csp: bytes = b"",
) -> Plan:
    """A response whose body the server generated (a directory listing).

    It has an ETag (weak, computed over ``body`` by the caller) and no
    modification date, so If-None-Match revalidates it and the date
    conditions are ignored (§13.1.3-4).  No Range support: a listing is not
    worth resuming, and §14.2 lets a server ignore Range.  ``vary`` names
    the request fields the body was negotiated on (Accept, for the format).
    ``csp`` is the page's Content-Security-Policy (sent with the 200).
    """
    head = req.method == b"HEAD"
    tail = _validator_tail(etag, None, cfg.files.cache_control, vary)
    pre = conditional_plan(req, etag, None, now, tail)
    if pre is not None:
        return pre
    hs = common_fields(now)
    hs.extend(tail)
    hs.append((b"content-type", content_type))
    hs.append((b"content-length", b"%d" % len(body)))
    if csp:
        hs.append((b"content-security-policy", csp))
    return Plan(200, tuple(hs), (body,) if body else (), send_body=not head)


def multipart_body(
    spans: Sequence[tuple[int, int]], size: int, ctype: bytes, boundary: bytes
) -> tuple[bytes | FileSpan, ...]:
    """The multipart/byteranges body (RFC 9110 §14.6) as literal and file pieces.

    The Content-Length is the sum of these pieces' lengths: the encoder is the
    counter, never a hand-computed formula.
    """
    parts: list[bytes | FileSpan] = []
    for i, (start, end) in enumerate(spans):
        parts.append(
            (b"--" if i == 0 else b"\r\n--")
            + boundary
            + b"\r\ncontent-type: "
            + ctype
            + b"\r\ncontent-range: bytes %d-%d/%d\r\n\r\n" % (start, end - 1, size)
        )
        parts.append(FileSpan(start, end - start))
    parts.append(b"\r\n--" + boundary + b"--\r\n")
    return tuple(parts)
