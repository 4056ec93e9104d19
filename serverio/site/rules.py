"""Site rules: custom headers, CORS, redirects, rewrites, clean URLs, error
pages and basic authentication, compiled once into immutable data (pure).

Everything here is a function of its arguments: no I/O, no clock, no trio.
The start-up code (:mod:`serverio.site.service`) reads the files the rules
name (htpasswd files, error pages) and hands their contents to
:func:`compile_rules`; the connection asks :class:`serverio.site.service.Site`
to evaluate them per request.  Every glob is translated to a regular
expression here, at start-up; nothing is compiled per request.

Evaluation order (docs/features.md "Site rules"), fixed:
auth -> redirects -> rewrites / clean URLs / trailing slash -> file or
directory -> error pages -> headers.

Globs (one definition for every rule type) are matched against the decoded,
normalised request path (``/`` + the segments joined by ``/``, plus a
trailing ``/`` when the request had one): ``*`` matches within one segment,
``?`` one character of a segment, ``**`` (a whole segment) any number of
segments, including none.  A pattern starts with ``/`` or ``**``.
"""

from __future__ import annotations

import base64
import binascii
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Final

from ..config import ACTIVE_MODES
from ..errors import ConfigError
from ..fs.globs import compile_glob
from ..http.access import Right
from ..http.core import RequestFacts
from ..http.extra import request_field
from ..http.plans import NO_OPS, HeaderOps
from ..http.target import Target, quote_query, quote_segment

__all__ = [
    "CORS_HEADERS",
    "CORS_METHOD",
    "FORBIDDEN_HEADERS",
    "ORIGIN",
    "WRITE_ACTIONS",
    "AccessRule",
    "AuthRule",
    "Cors",
    "HeaderRule",
    "Redirect",
    "Rewrite",
    "SiteRules",
    "WritableRule",
    "canonical",
    "compile_glob",
    "compile_rules",
    "compile_writable",
    "cors_headers",
    "decide_route",
    "error_page_key",
    "glob_below",
    "header_ops",
    "map_header_values",
    "match_path",
    "merge_header_lines",
    "parse_basic",
    "parse_header_line",
    "preflight_fields",
    "redirect_for",
    "rewrite_for",
    "slash_redirect",
]

# Framing and connection-specific fields (RFC 9110 §7.6.1, RFC 9112 §6, §9)
# and the ones the server computes per response (Date, Content-Range): a
# rule that names one would break the message, so it is a start-up error.
FORBIDDEN_HEADERS: Final = frozenset(
    {
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "upgrade",
        "te",
        "trailer",
        "proxy-connection",
        "content-range",
        "date",
    }
)

# RFC 9110 §5.6.2 token characters.
_TCHAR = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")

# Fields a rule adds to the server's own instead of replacing them: a
# listing's Content-Security-Policy is its protection against a file name
# that slips past escaping; a browser enforces every CSP field it gets
# (CSP3 §8.1, "multiple policies"), so a rule's policy is sent beside it
# and the response stays at least as strict as either.
_ADDED_TO: Final = frozenset({b"content-security-policy"})

_STS: Final = b"strict-transport-security"

_CORS_EXPOSE: Final = b"Content-Range, ETag, Content-Length, Repr-Digest"
_CORS_METHODS: Final = b"GET, HEAD, OPTIONS"
_CORS_MAX_AGE: Final = b"7200"  # Chromium's cap; Firefox allows a day
_MAX_ALLOW_HEADERS_LEN = 1024  # preflight Allow-Headers echo bound (bytes)
_MAX_ALLOW_HEADERS = 32  # ... and number of names

REDIRECT_STATUSES: Final = frozenset({301, 302, 303, 307, 308})


def _is_token(s: str) -> bool:
    return bool(s) and all(c in _TCHAR for c in s)


def _is_field_value(v: str) -> bool:
    # Printable ASCII and spaces/tabs inside (RFC 9110 §5.5); no CR, LF, NUL.
    return v == v.strip(" \t") and all(c == "\t" or 0x20 <= ord(c) < 0x7F for c in v)


# ------------------------------------------------------------------ globs


def glob_below(pattern: str, collection: str) -> bool:
    """Can the glob ``pattern`` match a path strictly below ``collection``
    (a match path, ``/`` or ``/a/b/``): a member at any depth, existing or
    not, whose names are anyone's to choose?  Decided on the glob's
    segments (a regular expression cannot be asked whether some
    continuation of a prefix matches): the collection's names must match
    the glob's first segments until a ``**``, which reaches below
    whatever follows it; a glob that goes on past the collection's names
    reaches a member, unless all that is left is its trailing slash (the
    collection itself).  A glob of a case-insensitive root is compared
    folded, with ``collection`` folded too (the caller's, as for matching)."""
    if pattern.startswith("**"):
        pattern = "/" + pattern
    globs = pattern[1:].split("/")
    names = [s for s in collection.split("/") if s]
    for i, glob in enumerate(globs):
        if glob == "**":
            return True  # any number of segments: the rest can follow a member
        if i == len(names):
            return globs[i:] != [""]  # more segments: a member; "" alone: the collection
        if not compile_glob("/" + glob).fullmatch("/" + names[i]):
            return False
    return False  # the glob ends at or above the collection


def match_path(target: Target) -> str:
    """The string globs are matched against: ``/a/b`` (``/a/b/`` with a slash)."""
    if not target.segments:
        return "/"
    path = "/" + "/".join(target.segments)
    return path + "/" if target.slash else path


# ------------------------------------------------------------------ data


@dataclass(frozen=True, slots=True)
class HeaderRule:
    """Set and remove fields on responses whose path matches (None: all)."""

    pattern: str
    match: re.Pattern[str] | None
    set: tuple[tuple[bytes, bytes], ...] = ()
    remove: frozenset[bytes] = frozenset()


@dataclass(frozen=True, slots=True)
class Cors:
    """``any_origin``: ``Access-Control-Allow-Origin: *``; else echo an Origin
    listed in ``origins`` (with ``Vary: Origin``).  ``credentials`` (only
    with a list, never with ``*``, Fetch §3.2.5) adds
    ``Access-Control-Allow-Credentials: true``."""

    any_origin: bool
    origins: frozenset[str] = frozenset()
    credentials: bool = False
    # --cors-writes: preflights on writable paths also allow the write
    # methods (only with a list of origins, never with "*").
    writes: bool = False


@dataclass(frozen=True, slots=True)
class Redirect:
    """``from`` is an exact path, or a prefix when it ends with ``*``
    (the rest of the path, ``:splat``)."""

    source: str
    prefix: str
    splat: bool
    to: str
    status: int

    @property
    def to_is_path(self) -> bool:
        return self.to.startswith("/")


@dataclass(frozen=True, slots=True)
class Rewrite:
    source: str
    prefix: str
    splat: bool
    to: str


@dataclass(frozen=True, slots=True)
class WritableRule:
    """``[[writable]]``: paths matching ``match`` (None: every path) may be
    written by the methods in ``allow`` (``"put"``, ``"delete"``);
    ``prefix`` is the glob's literal directory (``/uploads`` for
    ``/uploads/**``, ``""`` for ``/**``)."""

    pattern: str
    match: re.Pattern[str] | None
    allow: frozenset[str]
    prefix: str
    # How active files under it are served ("" : --upload-active;
    # serverio.http.active, which reads the tables from the Config).
    active: str = ""


@dataclass(frozen=True, slots=True)
class AuthRule:
    """Paths matching ``match`` (None: every path) need one of ``users``
    (name -> hash in one of :mod:`serverio.site.passwords`' schemes)."""

    pattern: str
    match: re.Pattern[str] | None
    users: Mapping[str, str]
    realm: str
    # The users file's cost profile (serverio.site.passwords.cost_profile):
    # the work every check does, known user or not.
    dummy: str
    index: int = 0
    # The glob over canonical (case-folded) paths, for the paths under a
    # case-insensitive proxy route ([[proxy]] case-insensitive); None when
    # there is none, or when ``match`` already folds (a case-insensitive root).
    folded: re.Pattern[str] | None = None


@dataclass(frozen=True, slots=True)
class AccessRule:
    """One compiled ``[[access]]`` rule (or several with the same glob)."""

    pattern: str
    match: re.Pattern[str] | None  # None: every path ("/**")
    anonymous: frozenset[Right]
    # Any signed-in user the rule does not name (``authenticated`` and
    # ``anonymous``'s rights).
    authenticated: frozenset[Right]
    # Each user the rule names, directly or through a group: all the
    # rights that user has here.
    users: Mapping[str, frozenset[Right]]
    # Where it was declared, for the log line of a refusal.
    where: str
    # The glob over canonical paths (a case-insensitive proxy route's).
    folded: re.Pattern[str] | None = None
    # The warm path's questions, answered at start-up: may an anonymous
    # client read here, list here (a request path: either)?
    anonymous_reads: bool = False
    anonymous_lists: bool = False

    def rights_of(self, user: str | None) -> frozenset[Right]:
        """The rights of ``user`` (None: an anonymous client) here."""
        if user is None:
            return self.anonymous
        return self.users.get(user, self.authenticated)

    def someone(self, rights: Sequence[Right]) -> bool:
        """Can a signed-in user have one of ``rights`` here?"""
        if any(r in self.authenticated for r in rights):
            return True
        return any(r in mine for mine in self.users.values() for r in rights)

    def matches(self, path: str, loose: str | None = None) -> bool:
        if self.match is None or self.match.fullmatch(path) is not None:
            return True
        return loose is not None and self.folded is not None and bool(self.folded.fullmatch(loose))


@dataclass(frozen=True, slots=True)
class SiteRules:
    """Every site rule of one server, compiled."""

    header_rules: tuple[HeaderRule, ...] = ()
    cors: Cors | None = None
    redirects: tuple[Redirect, ...] = ()
    rewrites: tuple[Rewrite, ...] = ()
    clean_urls: bool = False
    trailing_slash: str = "keep"
    # "404" / "5xx" -> page relpath
    error_pages: Mapping[str, str] = field(default_factory=dict)
    auth: tuple[AuthRule, ...] = ()
    hidden: bool = False
    # The root is case-insensitive: auth and header globs match the
    # canonical (NFC, case-folded) path, as the filesystem does.
    fold: bool = False
    # --hsts: the Strict-Transport-Security value of every TLS response
    # (RFC 6797 §6.1), None when off.
    hsts: bytes | None = None
    # [[writable]] (with --upload): the paths a write may change and how;
    # empty: the whole root, for every write.
    writable: tuple[WritableRule, ...] = ()
    # The canonical prefixes ("/api") of the case-insensitive proxy routes:
    # the auth rules match the paths under them case-insensitively too
    # (serverio.site.access.rule_for), as their upstream reads them.
    fold_under: tuple[str, ...] = ()
    # [[access]] / --allow (serverio.site.rights.AccessRule), most specific
    # first; empty: the [[auth]] and [[writable]] rules alone decide.
    access: tuple[AccessRule, ...] = ()
    # With [[access]] rules: the users file (--auth-file, --auth) whose
    # credentials name the user; its index follows the [[auth]] rules'.
    users: AuthRule | None = None

    def canonical(self, path: str) -> str:
        return canonical(path) if self.fold else path

    @property
    def empty(self) -> bool:
        return not (
            self.header_rules
            or self.cors
            or self.redirects
            or self.rewrites
            or self.clean_urls
            or self.trailing_slash != "keep"
            or self.error_pages
            or self.auth
            or self.hsts is not None
            or bool(self.writable)
            or bool(self.access)
        )


# ------------------------------------------------------------------ compile


def parse_header_line(text: str, where: str) -> tuple[str, str]:
    """``"Name: value"`` -> (name, value); ConfigError naming ``where``."""
    name, colon, value = text.partition(":")
    if not colon:
        raise ConfigError(f"{where}: {text!r} must be 'Name: value'")
    return name.strip(), value.strip(" \t")


def merge_header_lines(lines: Sequence[str]) -> tuple[str, ...]:
    """The ``--header`` list after its removals, in order.

    The list is the file's ``header`` key, then ``SERVERIO_HEADER``, then
    the command line (serverio.ops.tomlconfig.parse_with_config adds them
    up).  A line ``"Name:"`` with no value removes every earlier line of
    that name (field names compare case-insensitively, RFC 9110 §5.1) and
    is itself dropped: an empty value cannot be set with ``--header``
    (``[[headers]] set`` can).  A line without ':' is kept, so that
    compiling it still names it in the error.
    """
    out: list[str] = []
    for line in lines:
        name, colon, value = line.partition(":")
        if colon and not value.strip(" \t"):
            drop = name.strip().lower()
            out = [kept for kept in out if kept.partition(":")[0].strip().lower() != drop]
            continue
        out.append(line)
    return tuple(out)


def _header(name: str, value: str, where: str) -> tuple[bytes, bytes]:
    if not _is_token(name):
        raise ConfigError(f"{where}: {name!r} is not a valid header name")
    if name.lower() in FORBIDDEN_HEADERS:
        raise ConfigError(f"{where}: {name!r} is set by the server and cannot be changed")
    if not _is_field_value(value):
        raise ConfigError(
            f"{where}: the value of {name!r} must be printable ASCII (no CR, LF or NUL)"
        )
    return name.lower().encode("ascii"), value.encode("ascii")


def canonical(path: str) -> str:
    """The form a case-insensitive filesystem compares names in: NFC
    (macOS and Windows normalise names) and Unicode case folding."""
    return unicodedata.normalize("NFC", path).casefold()


def _glob(pattern: str, where: str, fold: bool = False) -> re.Pattern[str]:
    try:
        return compile_glob(canonical(pattern) if fold else pattern)
    except ValueError as exc:
        raise ConfigError(f"{where}: bad glob {pattern!r}: {exc}") from None


def _from_pattern(source: str, where: str) -> tuple[str, bool]:
    if (
        not source.startswith("/")
        or source.startswith("//")
        or any(c in source for c in "\x00\r\n\\?#")
    ):
        raise ConfigError(f"{where}: 'from' {source!r} must be a path starting with one '/'")
    if "*" in source[:-1]:
        raise ConfigError(f"{where}: 'from' {source!r} may have '*' only at its end")
    splat = source.endswith("*")
    return (source[:-1] if splat else source), splat


def _check_location(to: str) -> bool:
    """A redirect target is a path with one leading '/', or an absolute
    http(s) URL; never scheme-relative, never with controls."""
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in to) or "\\" in to:
        return False
    if to.startswith("/"):
        return not to.startswith("//")
    low = to.lower()
    return (low.startswith("http://") or low.startswith("https://")) and len(to) > 8


def compile_rules(
    *,
    headers: Sequence[str] = (),
    header_rules: Sequence[tuple[str, Sequence[tuple[str, str]], Sequence[str]]] = (),
    cors: bool = False,
    cors_origins: Sequence[str] = (),
    cors_writes: bool = False,
    redirects: Sequence[tuple[str, str, int]] = (),
    rewrites: Sequence[tuple[str, str]] = (),
    clean_urls: bool = False,
    trailing_slash: str = "keep",
    error_pages: Sequence[tuple[str, str]] = (),
    auth: Sequence[tuple[str, Mapping[str, str], str]] = (),
    hidden: bool = False,
    fold: bool = False,
    source: str = "--config",
    hsts: int | None = None,
    hsts_subdomains: bool = False,
    writable: Sequence[WritableSpec] = (),
    fold_under: Sequence[str] = (),
) -> SiteRules:
    """Validate and compile, one table at a time.  ``auth`` is (glob, users,
    cost profile) per rule (the users already read and checked by the
    caller); ``fold_under``: the prefixes of the case-insensitive proxy
    routes.  Raises ConfigError (one line naming ``source`` and the key)."""
    # In this order, so that the first error reported stays the same.
    hrules = _compile_header_rules(headers, header_rules, source, fold)
    cors_policy = _compile_cors(cors, cors_origins, credentials=bool(auth), writes=cors_writes)
    reds = _compile_redirects(redirects, source)
    rws = _compile_rewrites(rewrites, source)
    if trailing_slash not in ("add", "remove", "keep"):
        raise ConfigError(f"--trailing-slash must be add, remove or keep, got {trailing_slash!r}")
    pages = _compile_error_pages(error_pages, source)
    under = () if fold else tuple(canonical(p) for p in fold_under)  # fold: all paths fold
    arules = _compile_auth(auth, source, fold, bool(under))
    sts = _hsts_value(hsts, hsts_subdomains)
    wrules = compile_writable(writable, source, fold)
    return SiteRules(
        hrules,
        cors_policy,
        reds,
        rws,
        clean_urls,
        trailing_slash,
        pages,
        arules,
        hidden,
        fold,
        sts,
        wrules,
        under,
    )


def _compile_header_rules(
    headers: Sequence[str],
    header_rules: Sequence[tuple[str, Sequence[tuple[str, str]], Sequence[str]]],
    source: str,
    fold: bool,
) -> tuple[HeaderRule, ...]:
    """``--header`` (one rule for every path, first), then ``[[headers]]``."""
    hrules: list[HeaderRule] = []
    headers = merge_header_lines(headers)  # idempotent: a Config made in code too
    if headers:
        sets = tuple(_header(*parse_header_line(h, "--header"), "--header") for h in headers)
        hrules.append(HeaderRule("/**", None, sets))
    for i, (pattern, sets_spec, removes) in enumerate(header_rules):
        where = f"{source}: [[headers]] #{i + 1}"
        match = _glob(pattern, f"{where} key 'path'", fold)
        sets = tuple(_header(n, v, f"{where} key 'set'") for n, v in sets_spec)
        rm = frozenset(_removable(name, f"{where} key 'remove'") for name in removes)
        hrules.append(HeaderRule(pattern, None if pattern in ("/**", "**") else match, sets, rm))
    return tuple(hrules)


def _removable(name: str, where: str) -> bytes:
    if not _is_token(name):
        raise ConfigError(f"{where}: {name!r} is not a valid header name")
    if name.lower() in FORBIDDEN_HEADERS:
        raise ConfigError(f"{where}: {name!r} cannot be removed")
    if name.lower() == "vary":
        # Vary is semantic (RFC 9110 §12.5.5): without "Accept-Encoding"
        # on a negotiated response a cache hands one coding to all.
        raise ConfigError(
            f"{where}: {name!r} cannot be removed "
            "(it names what the response varies on; 'set' adds to it)"
        )
    return name.lower().encode("ascii")


def _compile_cors(
    any_origin: bool, origins: Sequence[str], *, credentials: bool, writes: bool = False
) -> Cors | None:
    """``--cors`` (any origin) or ``--cors-origin`` (a list; with auth rules,
    credentials are allowed too: Fetch §3.2.5 never allows them with ``*``).
    ``--cors-writes`` needs the list: a write from any site is exactly the
    cross-site request the upload form's CSRF rule refuses."""
    if any_origin and origins:
        raise ConfigError("--cors (any origin) and --cors-origin (a list) exclude each other")
    if writes and not origins:
        raise ConfigError("--cors-writes needs --cors-origin (never any origin: --cors)")
    for origin in origins:
        if not re.fullmatch(r"https?://[A-Za-z0-9.\-\[\]:]+", origin):
            raise ConfigError(f"--cors-origin {origin!r} must be scheme://host[:port]")
    if any_origin:
        return Cors(any_origin=True)
    if origins:
        return Cors(False, frozenset(origins), credentials=credentials, writes=writes)
    return None


def _compile_redirects(
    redirects: Sequence[tuple[str, str, int]], source: str
) -> tuple[Redirect, ...]:
    """``[[redirects]]``: from, to (a path or an http(s) URL), status."""
    reds: list[Redirect] = []
    for i, (src, to, status) in enumerate(redirects):
        where = f"{source}: [[redirects]] #{i + 1}"
        prefix, splat = _from_pattern(src, f"{where} key 'from'")
        if status not in REDIRECT_STATUSES:
            raise ConfigError(f"{where} key 'status': {status!r} must be 301, 302, 303, 307 or 308")
        if not _check_location(to.replace(":splat", "x")):
            raise ConfigError(
                f"{where} key 'to': {to!r} must be a path starting with one '/' or an http(s) URL"
            )
        if not splat and to.split("?", 1)[0] == src:
            raise ConfigError(f"{where}: redirects {src!r} to itself")
        reds.append(Redirect(src, prefix, splat, to, status))
    return tuple(reds)


def _compile_rewrites(rewrites: Sequence[tuple[str, str]], source: str) -> tuple[Rewrite, ...]:
    """``[[rewrites]]``: from, to (a path below the root)."""
    rws: list[Rewrite] = []
    for i, (src, to) in enumerate(rewrites):
        where = f"{source}: [[rewrites]] #{i + 1}"
        prefix, splat = _from_pattern(src, f"{where} key 'from'")
        if not to.startswith("/") or to.startswith("//") or any(c in to for c in "\x00\r\n\\?#"):
            raise ConfigError(f"{where} key 'to': {to!r} must be a path starting with one '/'")
        rws.append(Rewrite(src, prefix, splat, to))
    return tuple(rws)


def _compile_error_pages(error_pages: Sequence[tuple[str, str]], source: str) -> dict[str, str]:
    """``[errors]``: status ("404") or class ("4xx") -> page relpath."""
    pages: dict[str, str] = {}
    for key, page in error_pages:
        where = f"{source}: [errors] key {key!r}"
        if not re.fullmatch(r"[45](?:\d\d|xx)", key):
            raise ConfigError(f"{where}: must be a 4xx or 5xx status, or '4xx' / '5xx'")
        pages[key] = page
    return pages


def _compile_auth(
    auth: Sequence[tuple[str, Mapping[str, str], str]],
    source: str,
    fold: bool,
    folded: bool = False,
) -> tuple[AuthRule, ...]:
    """``--auth-file`` / ``[[auth]]``: (glob, users, cost profile) per rule;
    ``folded``: each glob also over canonical paths (``AuthRule.folded``)."""
    out: list[AuthRule] = []
    for i, (pattern, users, dummy) in enumerate(auth):
        where = f"{source}: [[auth]] #{i + 1} key 'path'"
        every = pattern in ("/**", "**")
        match = None if every else _glob(pattern, where, fold)
        loose = _glob(pattern, where, True) if folded and not every else None
        out.append(AuthRule(pattern, match, users, "serverio", dummy, i, loose))
    return tuple(out)


WRITE_ACTIONS: Final = frozenset(("put", "delete"))
# A [[writable]] table as given: (glob, allowed methods) or (..., active).
WritableSpec = tuple[str, Sequence[str]] | tuple[str, Sequence[str], str]


def compile_writable(
    writable: Sequence[WritableSpec], source: str, fold: bool = False
) -> tuple[WritableRule, ...]:
    """``[[writable]]``: (glob, allowed methods[, active]) per table.  The
    glob is a directory prefix and everything below it, ``PREFIX/**`` (or
    ``/**``), so a writable area is a subtree an ``[[auth]]`` rule can
    cover; ``active`` is one of ``ACTIVE_MODES`` or "" (``--upload-active``)."""
    out = []
    for i, (pattern, allow, *rest) in enumerate(writable):
        where = f"{source}: [[writable]] #{i + 1}"
        if not (pattern.startswith("/") and pattern.endswith("/**")):
            raise ConfigError(f"{where} key 'path' must be PREFIX/** or /**, got {pattern!r}")
        prefix = pattern[:-3]
        if any(c in prefix for c in "*?[]{}") or "//" in pattern:
            raise ConfigError(f"{where} key 'path': the prefix must be literal, got {pattern!r}")
        bad = [a for a in allow if a not in WRITE_ACTIONS]
        if bad or not allow:
            raise ConfigError(
                f'{where} key \'allow\' must list "put" and/or "delete", got {list(allow)!r}'
            )
        active = rest[0] if rest else ""
        if active and active not in ACTIVE_MODES:
            raise ConfigError(
                f"{where} key 'active' must be one of {', '.join(ACTIVE_MODES)}, got {active!r}"
            )
        match = None if pattern == "/**" else _glob(pattern, f"{where} key 'path'", fold)
        out.append(WritableRule(pattern, match, frozenset(allow), prefix, active))
    return tuple(out)


def _hsts_value(max_age: int | None, subdomains: bool) -> bytes | None:
    """``--hsts``: the Strict-Transport-Security value (RFC 6797 §6.1:
    max-age required, includeSubDomains optional), None when off."""
    if max_age is None:
        return None
    return b"max-age=%d" % max_age + (b"; includeSubDomains" if subdomains else b"")


# ------------------------------------------------------------------ headers

# The request fields of CORS (the Fetch standard): Origin, and a preflight's
# Access-Control-Request-Method and -Headers (serverio.http.extra).
ORIGIN: Final = request_field("origin")
CORS_METHOD: Final = request_field("access-control-request-method")
CORS_HEADERS: Final = request_field("access-control-request-headers")


def header_ops(
    rules: SiteRules, path: str, *, protected: bool = False, tls: bool = False
) -> HeaderOps:
    """Merge the header rules matching ``path``, in order.

    Precedence: rules apply in the order given (``--header`` first, then
    ``[[headers]]`` in file order); a later ``set`` of a name replaces an
    earlier one, a later ``remove`` removes what earlier rules set.  Any
    rule's field replaces the server's own field of that name (so a
    ``Cache-Control`` rule overrides ``--cache-control``), except ``Vary``,
    whose tokens are merged with the server's (union, no duplicates), and
    ``Content-Security-Policy``, sent beside the server's own (a ``remove``
    of it removes only what rules set).
    ``protected``: the response needed authentication, so it gets
    ``Cache-Control: private`` unless a rule sets Cache-Control.  ``tls``:
    the request came over TLS, so ``--hsts`` adds Strict-Transport-Security
    (first, as if it were the first rule: a rule may replace it); never
    over plain HTTP (RFC 6797 §7.2).
    """
    final: dict[bytes, list[bytes]] = {}
    drop: set[bytes] = set()
    vary: list[bytes] = []
    if tls and rules.hsts is not None:
        drop.add(_STS)
        final[_STS] = [rules.hsts]
    for rule in rules.header_rules:
        if rule.match is not None and rule.match.fullmatch(path) is None:
            continue
        for name in rule.remove:  # never Vary (compile_rules refuses it)
            if name not in _ADDED_TO:
                drop.add(name)
            final.pop(name, None)
        for name, value in rule.set:
            if name == b"vary":
                for tok in value.split(b","):
                    t = tok.strip()
                    if t and t.lower() not in (v.lower() for v in vary):
                        vary.append(t)
                continue
            if name not in _ADDED_TO:
                drop.add(name)
            final[name] = [value]
    if protected and b"cache-control" not in final and b"cache-control" not in drop:
        drop.add(b"cache-control")
        final[b"cache-control"] = [b"private"]
    sets = tuple((n, v) for n, vs in final.items() for v in vs)
    if not (drop or sets or vary):
        return NO_OPS
    return HeaderOps(frozenset(drop), sets, tuple(vary))


def map_header_values(rules: SiteRules, name: bytes, fn: Callable[[bytes], bytes]) -> SiteRules:
    """``rules`` with every value a header rule sets for ``name`` passed
    through ``fn`` (at start-up: ``--watch`` lets the page script through
    the rules' CSPs, :func:`serverio.live.protocol.watch_csp`)."""
    hrules = tuple(
        replace(r, set=tuple((n, fn(v) if n == name else v) for n, v in r.set))
        for r in rules.header_rules
    )
    return replace(rules, header_rules=hrules)


def cors_headers(cors: Cors | None, origin: str | None) -> tuple[tuple[bytes, bytes], ...]:
    """The CORS fields of an actual (non-preflight) response."""
    if cors is None:
        return ()
    if cors.any_origin:
        return (
            (b"access-control-allow-origin", b"*"),
            (b"access-control-expose-headers", _CORS_EXPOSE),
        )
    if origin is not None and origin in cors.origins:
        hs: tuple[tuple[bytes, bytes], ...] = (
            (b"access-control-allow-origin", origin.encode("latin-1")),
            (b"access-control-expose-headers", _CORS_EXPOSE),
        )
        if cors.credentials:
            hs += ((b"access-control-allow-credentials", b"true"),)
        return hs
    return ()


def preflight_fields(
    cors: Cors, req: RequestFacts, writes: bytes = b""
) -> tuple[tuple[bytes, bytes], ...] | None:
    """The fields of the answer to a CORS preflight (an OPTIONS with Origin
    and Access-Control-Request-Method), or None for any other request; the
    answer is a 204 with them (:func:`serverio.http.plans.no_content_plan`).
    ``writes``: the write methods the path allows (``b", PUT, POST"``...;
    the caller decides them from ``--cors-writes`` and the writable
    paths, :meth:`serverio.site.service.Site.route`), added to ``Allow``
    and ``Access-Control-Allow-Methods``.

    A preflight carries no credentials (Fetch §4.8), so it is answered
    before authentication.  From an origin not allowed, the answer is a
    plain 204 without CORS fields: the browser then refuses the request.
    """
    origin = ORIGIN.of(req)
    if req.method != b"OPTIONS" or origin is None or CORS_METHOD.of(req) is None:
        return None
    methods = _CORS_METHODS + writes
    hs: list[tuple[bytes, bytes]] = [(b"allow", methods)]
    allowed = cors.any_origin or origin in cors.origins
    if allowed:
        hs.append(
            (
                b"access-control-allow-origin",
                b"*" if cors.any_origin else origin.encode("latin-1"),
            )
        )
        if cors.credentials and not cors.any_origin:
            hs.append((b"access-control-allow-credentials", b"true"))
        hs.append((b"access-control-allow-methods", methods))
        asked = CORS_HEADERS.of(req)
        if asked:
            names = [n.strip() for n in asked.split(",") if n.strip()]
            if (
                len(asked) <= _MAX_ALLOW_HEADERS_LEN
                and len(names) <= _MAX_ALLOW_HEADERS
                and all(_is_token(n) for n in names)
            ):
                hs.append((b"access-control-allow-headers", ", ".join(names).encode("ascii")))
        hs.append((b"access-control-max-age", _CORS_MAX_AGE))
    if not cors.any_origin:
        hs.append((b"vary", b"Origin"))
    return tuple(hs)


# ------------------------------------------------------------------ redirects


def _splat_of(prefix: str, splat: bool, path: str) -> str | None:
    if not splat:
        return "" if path == prefix else None
    if not path.startswith(prefix):
        # "/old/*" also matches "/old" itself (an empty splat).
        if prefix.endswith("/") and path == prefix[:-1]:
            return ""
        return None
    return path[len(prefix) :]


def redirect_for(rules: SiteRules, target: Target) -> tuple[int, bytes] | None:
    """(status, Location) of the first redirect rule that applies, if any.

    ``:splat`` is the rest of the decoded path, re-encoded segment by
    segment, so it can never add a scheme, an authority or a control.
    The result is validated again on every request: a Location that is
    scheme-relative (``//evil``, ``/\\evil``), has a control, or is not a
    path when ``to`` was a path is refused (the rule does not apply).
    The query is kept unless ``to`` has one.
    """
    if not rules.redirects:
        return None
    path = match_path(target)
    for rule in rules.redirects:
        rest = _splat_of(rule.prefix, rule.splat, path)
        if rest is None:
            continue
        encoded = "/".join(quote_segment(s) for s in rest.split("/")) if rest else ""
        loc = rule.to.replace(":splat", encoded)
        if not _check_location(loc) or (rule.to_is_path and not loc.startswith("/")):
            continue
        if "?" not in rule.to and target.query is not None:
            loc += "?" + quote_query(target.query)
        if any(ord(c) < 0x21 or ord(c) > 0x7E for c in loc):
            continue
        return rule.status, loc.encode("ascii")
    return None


def slash_redirect(rules: SiteRules, target: Target) -> bytes | None:
    """``--trailing-slash`` and clean URLs as redirects (Location), if any.

    * clean URLs: ``/about.html`` -> ``/about``, ``/d/index.html`` -> ``/d/``;
    * ``add``: ``/about`` -> ``/about/`` when the last segment has no
      extension; ``remove``: ``/about/`` -> ``/about``.
    """
    segs = target.segments
    if not segs:
        return None
    new: Target | None = None
    last = segs[-1]
    if rules.clean_urls and not target.slash and last.endswith(".html") and len(last) > 5:
        if last == "index.html":
            new = Target(segs[:-1], True, target.query)
        else:
            new = Target((*segs[:-1], last[:-5]), rules.trailing_slash == "add", target.query)
    elif rules.trailing_slash == "add" and not target.slash and "." not in last:
        new = Target(segs, True, target.query)
    elif rules.trailing_slash == "remove" and target.slash:
        new = Target(segs, False, target.query)
    if new is None:
        return None
    loc = new.url_path() if new.segments else "/"
    if new.query is not None:
        loc += "?" + quote_query(new.query)
    return loc.encode("ascii")


def rewrite_for(rules: SiteRules, target: Target) -> Target | None:
    """The target of the first rewrite rule that applies, if any.

    The rewritten path goes through the same containment as a request path
    (its segments are opened beneath the root); its hidden flag is
    recomputed so ``--hidden`` applies to it too.
    """
    if not rules.rewrites:
        return None
    path = match_path(target)
    for rule in rules.rewrites:
        rest = _splat_of(rule.prefix, rule.splat, path)
        if rest is None:
            continue
        dest = rule.to.replace(":splat", rest)
        segs = tuple(s for s in dest.split("/") if s)
        if any(s in (".", "..") or "\x00" in s for s in segs):
            continue
        hidden = any(
            s.startswith(".") and not (i == 0 and s == ".well-known") for i, s in enumerate(segs)
        )
        return Target(segs, dest.endswith("/"), target.query, hidden=hidden)
    return None


def clean_url_alternative(target: Target) -> Target | None:
    """With clean URLs, ``/about`` (missing) is served from ``about.html``."""
    segs = target.segments
    if not segs or "." in segs[-1]:
        return None
    return Target((*segs[:-1], segs[-1] + ".html"), False, target.query, hidden=target.hidden)


@dataclass(frozen=True, slots=True)
class RouteDecision:
    """What the rules decide from the path alone (memoisable per target).

    ``paths``: the paths whose access rules apply (the request path, and
    the paths a rewrite or clean URL would serve: the access hook's
    target, :class:`serverio.http.access.AccessTarget`); ``redirect``:
    (status, Location); ``rewritten``: the target to serve instead;
    ``not_found``: the rewrite names a hidden path that ``--hidden`` does
    not serve (a 404, as that path itself would get).
    """

    paths: tuple[str, ...]
    redirect: tuple[int, bytes] | None
    rewritten: Target | None
    path: str
    not_found: bool = False


def decide_route(rules: SiteRules, target: Target) -> RouteDecision:
    """Access paths, redirect (rules, clean URLs, trailing slash) and
    rewrite for ``target``, in the documented order."""
    rewritten = rewrite_for(rules, target)
    path = match_path(target)
    paths = [path]
    if rules.auth or rules.access:
        served = rewritten or target
        if rewritten is not None:
            paths.append(match_path(rewritten))
        if rules.clean_urls:
            alt = clean_url_alternative(served)
            if alt is not None:
                paths.append(match_path(alt))
    found = redirect_for(rules, target)
    if found is None and (rules.clean_urls or rules.trailing_slash != "keep"):
        loc = slash_redirect(rules, target)
        if loc is not None:
            found = (301, loc)
    if found is not None:
        return RouteDecision(tuple(paths), found, None, path)
    hidden = rewritten is not None and rewritten.hidden and not rules.hidden
    return RouteDecision(tuple(paths), None, rewritten, path, hidden)


# ------------------------------------------------------------------ errors


def error_page_key(rules: SiteRules, status: int) -> str | None:
    """The error page configured for ``status`` ("404" before "4xx")."""
    pages = rules.error_pages
    if not pages or status < 400:
        return None
    exact = str(status)
    if exact in pages:
        return exact
    cls = f"{status // 100}xx"
    return cls if cls in pages else None


# ------------------------------------------------------------------ auth


def parse_basic(value: str | None) -> tuple[str, str] | None:
    """``Authorization: Basic base64(user:password)`` -> (user, password)
    (RFC 7617 §2; UTF-8, as the challenge's charset says), or None."""
    if value is None:
        return None
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "basic" or not token or len(token) > 4096:
        return None
    try:
        raw = base64.b64decode(token.strip().encode("ascii"), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeError, ValueError):
        return None
    user, colon, password = raw.partition(":")
    if not colon:
        return None
    return user, password
