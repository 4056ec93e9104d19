"""The access hook's one matcher: which auth rule applies to a target (pure).

Every feature that serves, names or changes something under the root
describes it as an :class:`~serverio.http.access.AccessTarget` (the paths
whose rules apply and the :class:`~serverio.http.access.Kind` of thing it
is; the vocabulary is :mod:`serverio.http.access`'s, below the pipeline
and the site) and hands it to the one hook,
:meth:`serverio.site.service.Site.access` (reached from the pipeline
through :func:`serverio.pipeline.request.access`).  Nothing else matches
a path against the auth rules: :func:`rule_for` is the one matcher.

Paths are match paths (``/a/b``, ``/d/`` for a directory; see
:func:`serverio.site.rules.match_path`), as served: the index file, the
clean-URL or SPA file, a sidecar's own name.  The matcher folds them
(:meth:`~serverio.site.rules.SiteRules.canonical`) on a case-insensitive
root, and maps a precompressed sidecar to its file
(:func:`~serverio.http.access.access_paths`).  Below the prefix of a
case-insensitive proxy route (``[[proxy]] case-insensitive = true``: an
upstream that reads ``/api/Admin`` as ``/api/admin``) a rule also matches
the canonical path: a rule protects every spelling the upstream serves.

A target reached through a symlink inside the root is decided on its
resolved path too (:func:`~serverio.http.access.resolved_path`): the request path's rules and
the resolved path's must both pass, so ``pub/link -> ../private`` needs
the credentials ``/private/**`` asks for.

Every target names the :class:`~serverio.http.access.Right` it needs;
the ``[[access]]`` rules (:mod:`serverio.site.rights`) are decided on it
by the gate (:class:`serverio.site.gate.Gate`), this matcher's rules and
the ``[[writable]]`` tables besides.
"""

from __future__ import annotations

from ..http.access import AccessTarget, access_paths
from .rules import AuthRule, SiteRules, canonical, glob_below

__all__ = ["rule_for", "rules_below", "write_allowed"]


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
