"""The access hook's vocabulary, and its decisions as HTTP responses (pure).

Every feature that serves, names or changes something under the root
describes it as an :class:`AccessTarget` (the paths whose rules apply and
the :class:`Kind` of thing it is) and hands it to the one hook,
:meth:`serverio.site.service.Site.access` (reached from the pipeline
through :func:`serverio.pipeline.request.access`); the matcher is the
site's (:mod:`serverio.site.access`).  These values live here, below the
pipeline and the site, so that both name them without importing each
other.  Paths are match paths (``/a/b``, ``/d/`` for a directory):
see :func:`resolved_path` and :func:`access_paths`.

An :class:`Access` is what the site's one access hook
(:meth:`serverio.site.service.Site.access`) decides about a resolved
target: allow it, or refuse it with a reason.  It carries the facts its
response needs (the realm of a challenge, the seconds of a Retry-After)
and nothing else; :func:`access_plan` makes the response from it, through
:func:`serverio.http.core.error_plan` like every other error, so the site
code never builds a status or a field itself.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from ..errors import Problem
from .core import Plan, RequestFacts, error_plan
from .negotiate import SIDECAR_SUFFIX

__all__ = [
    "ALLOWED",
    "READS",
    "RIGHTS",
    "WRITES",
    "Access",
    "AccessTarget",
    "Kind",
    "Right",
    "Ticket",
    "Verdict",
    "access_paths",
    "access_plan",
    "resolved_path",
    "served_target",
]


class Verdict(enum.Enum):
    """What an access decision says."""

    ALLOW = "allow"
    # 401 with a Basic challenge (RFC 9110 §11.6.1, §15.5.2; RFC 7617 §2):
    # no usable credentials, or credentials that did not verify.
    CHALLENGE = "challenge"
    # 403 (RFC 9110 §15.5.4): understood, and refused: whoever asks (a
    # path no [[writable]] table allows), or to the user who asks (a right
    # no [[access]] rule gives them).
    FORBID = "forbid"
    # 429 with Retry-After (RFC 6585 §4): the client's failure budget is spent.
    THROTTLE = "throttle"
    # 503 (RFC 9110 §15.6.4): the password check could not even be queued.
    UNAVAILABLE = "unavailable"
    # Only from Site.access_now: a password check is needed to decide.
    PENDING = "pending"


@dataclass(frozen=True, slots=True)
class Access:
    """One access decision.

    ``rule``: the index of the auth rule that protects the target (-1:
    none); an allowed target with a rule is *protected* (its responses get
    ``Cache-Control: private``, the request may see protected error pages).
    ``realm``: the challenge's realm; ``retry_after``: whole seconds (429).
    A 403 (``FORBID``) is also what a signed-in user gets for a right the
    ``[[access]]`` rules do not give them (RFC 9110 §15.5.4: credentials
    would not help).
    """

    verdict: Verdict
    rule: int = -1
    realm: str = ""
    retry_after: int = 0
    # The signed-in user the decision knows (verified credentials), "" for
    # an anonymous client: the access log's user field, per-user counters.
    user: str = ""
    # The right the request lacked ("upload", "delete", "list" ...), named
    # in the refusal's problem (never the rule that refused it): "" when
    # the hook does not say.
    right: str = ""

    @property
    def allowed(self) -> bool:
        return self.verdict is Verdict.ALLOW


# An unprotected target: what the hook says when no rule applies.
ALLOWED: Final = Access(Verdict.ALLOW)


def _needs(access: Access, status: int) -> Problem:
    """What a 401 or 403 tells the client: the right it lacks, never the
    rule's contents (who else has it, which paths it covers)."""
    right = access.right
    members: tuple[tuple[str, str | int], ...] = (("right", right),) if right else ()
    what = f"the {right} right" if right else "permission"
    if status == 401:
        return Problem(f"Sign in as a user with {what} here.", members)
    return Problem(f"Your user does not have {what} here.", members)


def access_plan(access: Access, now: float, *, head: bool) -> Plan:
    """The response for a refusal (every verdict but ALLOW and PENDING)."""
    verdict = access.verdict
    if verdict is Verdict.CHALLENGE:
        # RFC 7617 §2 (charset per §2.1); no-store: a shared cache must not
        # answer another client's retry with this challenge.
        value = f'Basic realm="{access.realm}", charset="UTF-8"'.encode("ascii")
        headers = [(b"www-authenticate", value), (b"cache-control", b"no-store")]
        return error_plan(401, now, headers=headers, head_only=head, problem=_needs(access, 401))
    if verdict is Verdict.THROTTLE:
        headers = [(b"retry-after", b"%d" % access.retry_after)]
        return error_plan(429, now, headers=headers, head_only=head)
    if verdict is Verdict.FORBID:
        return error_plan(403, now, head_only=head, problem=_needs(access, 403))
    if verdict is Verdict.UNAVAILABLE:
        return error_plan(503, now, head_only=head)
    raise ValueError(f"{verdict.name} is not a refusal")


class Kind(enum.Enum):
    """What an access target is; the kind says how it may be decided.

    Served kinds may wait for a password check (the hook's only wait);
    *named* kinds (:attr:`ENTRY`, :attr:`EVENT`) are only ever shown or
    left out, decided without waiting and without counting an attempt.
    """

    REQUEST = "request"  # the request path, and what a rewrite / clean URL would serve
    FILE = "file"  # a file's bytes: named, an index file, the clean-URL or SPA file
    LISTING = "listing"  # a directory listing
    SIDECAR = "sidecar"  # a precompressed coding of a file: its file's rule applies
    RESERVED = "reserved"  # the live-reload paths (--watch)
    ENTRY = "entry"  # a name shown in a listing: only to verified credentials
    EVENT = "event"  # a path named in an event every client receives: only if unprotected
    WRITE = "write"  # a file a PUT or DELETE changes (--upload): writable paths, then auth

    @property
    def named(self) -> bool:
        return self is Kind.ENTRY or self is Kind.EVENT


class Right(enum.Enum):
    """The rights an ``[[access]]`` rule grants (docs/reference/access.md),
    and the one each request needs; the value is the word rules use."""

    READ = "read"  # a file's bytes: GET, HEAD, an archive's members, a COPY's source
    LIST = "list"  # a directory's names: a listing, PROPFIND's members, search
    UPLOAD = "upload"  # create a name that does not exist: PUT, form upload, COPY/MOVE target
    OVERWRITE = "overwrite"  # replace an existing file (or its properties: PROPPATCH)
    DELETE = "delete"  # remove a name: DELETE, a MOVE's source, what a COPY/MOVE replaces
    MKDIR = "mkdir"  # create a directory: MKCOL, the form's new folder
    LOCK = "lock"  # take a WebDAV lock
    SHARE = "share"  # make a share link (the login feature's)

    @property
    def writes(self) -> bool:
        """Does this right change the tree (what ``--upload`` and the
        ``[[writable]]`` tables allow)?"""
        return self in WRITES

    @property
    def action(self) -> str:
        """The ``[[writable]]`` method a write right is ("delete" or "put")."""
        return "delete" if self is Right.DELETE else "put"


RIGHTS: frozenset[Right] = frozenset(Right)
READS: frozenset[Right] = frozenset((Right.READ, Right.LIST))
WRITES: frozenset[Right] = frozenset(
    (Right.UPLOAD, Right.OVERWRITE, Right.DELETE, Right.MKDIR, Right.LOCK)
)


_EITHER = (Right.READ, Right.LIST)
_READ = (Right.READ,)
_LIST = (Right.LIST,)


@dataclass(frozen=True, slots=True)
class AccessTarget:
    """The paths (match paths, see the module doc), kind and right of one target.

    Several paths when one request may reach several (the request path and
    the path its rewrite or clean URL serves): each must allow it (an
    ``[[auth]]`` rule: the first that matches any of them applies).

    Every target names the :class:`Right` it needs (the fixed vocabulary
    of ``[[access]]`` rules, docs/reference/access.md): a read of a file,
    the list of a directory, an upload (a name that does not exist yet),
    an overwrite, a delete (also the source of a move), a mkdir, a lock, a
    share.  A caller that does not know yet which of two it needs (a PUT
    before its target is looked up) names both (``also``) and asks again
    once it knows.
    """

    paths: tuple[str, ...]
    kind: Kind
    # The right asked for; None: the kind's (READ, LIST for a LISTING; a
    # request path READ or LIST: what it serves decides which, after).
    right: Right | None = None
    # Kind.WRITE only: the write also reaches every path below the
    # collection ``paths`` names, existing or not (a depth-infinity LOCK,
    # RFC 4918 §7.4): every rule that can match below applies too.
    tree: bool = False
    # Either right will do for now (a PUT before it knows whether its file
    # exists: UPLOAD also OVERWRITE); the caller asks again with the one.
    also: Right | None = None
    # A question, not a request: the caller asks what the client may do
    # (a resumable creation asking whether it may also replace, to know
    # whether the upload is create-only) and acts on either answer.  Its
    # refusal is an answer, not a denial: not counted in the per-user
    # "denied" counter nor logged at -v.  The decision is the same.
    probe: bool = False

    @property
    def needs(self) -> Right:
        """The right this target needs (its own or its kind's)."""
        right = self.right
        if right is not None:
            return right
        return Right.LIST if self.kind is Kind.LISTING else Right.READ

    @property
    def action(self) -> str:
        """Kind.WRITE: the ``[[writable]]`` method ("put", "delete")."""
        return self.needs.action

    def rights(self) -> tuple[Right, ...]:
        """The rights any one of which allows this target."""
        needs = self.needs
        if self.also is not None:
            return (needs, self.also)
        kind = self.kind
        if kind is Kind.REQUEST or kind is Kind.RESERVED:
            # What a path serves is a file or a listing: either right lets
            # the request through to the decision on what it resolves to.
            return _EITHER
        if kind is Kind.ENTRY and self.right is None:
            # A listed name: a file to who may read it, a directory to who
            # may list it (an archive takes a listed file's bytes).
            return _LIST if self.paths and self.paths[0].endswith("/") else _READ
        return (needs,)


def served_target(path: str) -> AccessTarget:
    """The target for what the handler resolved (``Prepared.served``): a
    listing (``/d/``), a sidecar asked for by its own name, or a file."""
    if path.endswith("/"):
        return AccessTarget((path,), Kind.LISTING)
    if len(access_paths(path)) > 1:
        return AccessTarget((path,), Kind.SIDECAR)
    return AccessTarget((path,), Kind.FILE)


def resolved_path(resolved: str, is_dir: bool = False) -> str:
    """The match path of a path the contained opener resolved below the
    root (:meth:`~serverio.fs.opener.RootOpener.open_resolved`: ``"a/b"``,
    ``""`` for the root): ``/a/b``, ``/a/b/`` for a directory, ``/`` for
    the root.  The rules that match it apply besides the requested path's
    (a symlink never reaches what its target's rules protect).  Folding for
    a case-insensitive root is the matcher's (:func:`rule_for`), as for a
    requested path: a link target spelled ``../PRIVATE`` is ``/private``
    there."""
    if not resolved:
        return "/"
    return "/" + resolved + ("/" if is_dir else "")


_SIDECAR_SUFFIXES: Final = tuple(SIDECAR_SUFFIX.values())


def access_paths(path: str) -> tuple[str, ...]:
    """Every path whose auth rule protects the bytes at ``path``.

    A precompressed sidecar (``/r/q3.html.gz``) holds the same content as
    the file it is a coding of (``/r/q3.html``): a rule that protects the
    file protects its sidecars, whether they are negotiated or requested
    (or listed) by their own names.
    """
    for suffix in _SIDECAR_SUFFIXES:
        if path.endswith(suffix) and len(path) > len(suffix) + 1 and path[-len(suffix) - 1] != "/":
            return (path, path[: -len(suffix)])
    return (path,)


@dataclass(slots=True, frozen=True)
class Ticket:
    """What :meth:`serverio.site.service.Site.route` decided: an answer
    (``plan``), or the request to serve (possibly rewritten);
    ``protected``/``authed``: an auth rule applied / the client passed it.

    Immutable: the access hook's decision on a resolved target makes a new
    ticket (:meth:`serverio.site.service.Site.admit`), which the exchange
    keeps in its state."""

    plan: Plan | None
    req: RequestFacts
    protected: bool = False
    authed: bool = False
    # The auth rules (their indices) this request's credentials passed.
    granted: frozenset[int] = frozenset()
    # The signed-in user the access hook knows for this request ("" for
    # none): the access log's user field, the per-user counters.
    user: str = ""
