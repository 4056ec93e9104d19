"""What the access hook decides about: a target, resolved (pure).

Every feature that serves, names or (later) changes something under the
root describes it as an :class:`AccessTarget` — the paths whose rules
apply and the :class:`Kind` of thing it is — and hands it to the one hook,
:meth:`serverio.site.service.Site.access` (reached from the pipeline
through :func:`serverio.pipeline.request.access`).  Nothing else matches
a path against the auth rules: :func:`rule_for` is the one matcher.

Paths are match paths (``/a/b``, ``/d/`` for a directory; see
:func:`serverio.site.rules.match_path`), as served: the index file, the
clean-URL or SPA file, a sidecar's own name.  The matcher folds them
(:meth:`~serverio.site.rules.SiteRules.canonical`) on a case-insensitive
root, and maps a precompressed sidecar to its file
(:func:`~serverio.site.rules.access_paths`).  Below the prefix of a
case-insensitive proxy route (``[[proxy]] case-insensitive = true``: an
upstream that reads ``/api/Admin`` as ``/api/admin``) a rule also matches
the canonical path: a rule protects every spelling the upstream serves.

A target reached through a symlink inside the root is decided on its
resolved path too (:func:`resolved_path`): the request path's rules and
the resolved path's must both pass, so ``pub/link -> ../private`` needs
the credentials ``/private/**`` asks for.

Every target names the :class:`Right` it needs (the fixed vocabulary of
``[[access]]`` rules, docs/reference/access.md): a read of a file, the
list of a directory, an upload (a name that does not exist yet), an
overwrite, a delete (also the source of a move), a mkdir, a lock, a
share.  A caller that does not know yet which of two it needs (a PUT
before its target is looked up) names both (``also``) and asks again once
it knows.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .rules import AuthRule, SiteRules, access_paths, canonical, glob_below
from .vocabulary import READS, RIGHTS, WRITES, Right

__all__ = [
    "READS",
    "RIGHTS",
    "WRITES",
    "AccessTarget",
    "Kind",
    "Right",
    "resolved_path",
    "rule_for",
    "rules_below",
    "served_target",
    "write_allowed",
]


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


_EITHER = (Right.READ, Right.LIST)
_READ = (Right.READ,)
_LIST = (Right.LIST,)

# The right a target needs when it names none: its kind's.
_KIND_RIGHT = {Kind.LISTING: Right.LIST}


@dataclass(frozen=True, slots=True)
class AccessTarget:
    """The paths (match paths, see the module doc), kind and right of one target.

    Several paths when one request may reach several (the request path and
    the path its rewrite or clean URL serves): each must allow it (an
    ``[[auth]]`` rule: the first that matches any of them applies).
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

    @property
    def needs(self) -> Right:
        """The right this target needs (its own or its kind's)."""
        right = self.right
        if right is not None:
            return right
        return _KIND_RIGHT.get(self.kind, Right.READ)

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


def rule_for(rules: SiteRules, target: AccessTarget) -> AuthRule | None:
    """The first auth rule that protects any of ``target``'s paths (or the
    file any of them is a sidecar of); None: the target is unprotected."""
    if not rules.auth:
        return None
    every = [a for p in target.paths for a in access_paths(rules.canonical(p))]
    loose = _folded(rules.fold_under, target.paths) if rules.fold_under else ()
    for rule in rules.auth:
        if rule.match is None or any(rule.match.fullmatch(p) for p in every):
            return rule
        if loose and rule.folded is not None and any(rule.folded.fullmatch(p) for p in loose):
            return rule  # a spelling a case-insensitive upstream reads as a protected path
    return None


def rules_below(rules: SiteRules, collection: str) -> tuple[AuthRule, ...]:
    """The auth rules whose glob can match a path strictly below
    ``collection`` (a match path ending in ``/``; :func:`~serverio.site.rules.glob_below`),
    in order: what a client must pass to change every member of it,
    including members not made yet.  A rule that an earlier one shadows is
    named too (asking for more than the first match needs is the safe side)."""
    path = rules.canonical(collection)
    return tuple(
        rule
        for rule in rules.auth
        if rule.match is None or glob_below(rules.canonical(rule.pattern), path)
    )


def _folded(prefixes: tuple[str, ...], paths: tuple[str, ...]) -> list[str]:
    """The canonical forms of ``paths`` below one of ``prefixes`` (canonical
    too; the prefix itself compared case-insensitively: folding more paths
    only ever protects more)."""
    out: list[str] = []
    for path in paths:
        low = canonical(path)
        if any(p == "/" or low == p or low.startswith(p + "/") for p in prefixes):
            out += access_paths(low)
    return out


def write_allowed(rules: SiteRules, target: AccessTarget) -> bool:
    """May ``target`` (a :attr:`Kind.WRITE`) be written as its ``action``
    says?  Without ``[[writable]]`` tables the whole root may (``--upload``);
    with them, the first table whose glob matches decides.  For a
    :attr:`~AccessTarget.tree` target, also every table that decides some
    path below it (a ``PREFIX/**`` glob reaching below that no earlier
    table's prefix covers): a path no table matches is written by nobody,
    so a lock over it keeps nobody out."""
    if not rules.writable:
        return True
    paths = [rules.canonical(p) for p in target.paths]
    allowed = False
    for rule in rules.writable:
        if rule.match is None or any(rule.match.fullmatch(p) for p in paths):
            allowed = target.action in rule.allow
            break
    if not allowed or not target.tree:
        return allowed
    prefixes: list[str] = []  # of the tables before: what they decide is theirs
    for rule in rules.writable:
        prefix = rules.canonical(rule.prefix) + "/"
        shadowed = any(prefix.startswith(p) for p in prefixes)
        below = any(glob_below(rules.canonical(rule.pattern), p) for p in paths)
        if below and not shadowed and target.action not in rule.allow:
            return False
        prefixes.append(prefix)
    return True
