"""Rights per user and path: ``[[access]]`` rules and ``--allow`` (pure).

A rule is a path glob and, per principal, a set of rights from the fixed
vocabulary (:class:`~serverio.http.access.Right`).  A principal is
``anonymous`` (every client, signed in or not), ``authenticated`` (every
user who signed in), a group (``[[group]]``) or a user of the users file
(``--auth-file`` / ``--auth``).  What a client may do on a path:

* the most specific rule whose glob matches the path decides, alone (one
  precedence rule, docs/reference/access.md): the longest literal start
  (the characters before the glob's first ``*`` or ``?``) wins; then the
  most literal characters; then a glob without ``**``; then the rule
  declared last (the command line's ``--allow`` after the file's
  ``[[access]]``);
* rules with the same glob are one rule (their grants add up);
* in it, a client's rights are those of ``anonymous``, plus, once it
  signed in as a user, those of ``authenticated``, of the user and of each
  group the user is in;
* a path no rule matches: nobody may do anything there.

Everything is compiled at start-up (:func:`compile_access`): per rule the
rights of an anonymous client, of any signed-in user and of each user the
users file names; nothing is computed from names per request.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Final

from ..errors import ConfigError
from ..http.access import WRITES, Right
from .rules import AccessRule, canonical, compile_glob

__all__ = [
    "ANONYMOUS",
    "AUTHENTICATED",
    "AccessRule",
    "AccessSpec",
    "allow_spec",
    "anonymous_writes",
    "compile_access",
    "parse_rights",
    "rule_at",
]

ANONYMOUS: Final = "anonymous"
AUTHENTICATED: Final = "authenticated"

# One rule as given: (path glob, ((principal, (right, ...)), ...), where).
AccessSpec = tuple[str, Sequence[tuple[str, Sequence[str]]], str]

_WORDS: Final = {r.value: r for r in Right}
_WILD = re.compile(r"[*?]")


def parse_rights(words: Sequence[str], where: str) -> frozenset[Right]:
    """Right names -> rights (ConfigError naming ``where`` for an unknown one)."""
    out: set[Right] = set()
    for word in words:
        right = _WORDS.get(word.strip().lower())
        if right is None:
            names = ", ".join(r.value for r in Right)
            raise ConfigError(f"{where}: unknown right {word!r} (one of {names})")
        out.add(right)
    return frozenset(out)


def allow_spec(text: str) -> AccessSpec:
    """``--allow PRINCIPAL[,PRINCIPAL...]:RIGHT[,RIGHT...]@PATH`` as a rule.

    ``PATH`` is a directory (``/incoming``: it and everything below,
    ``/incoming/**``) or, with a ``*`` or ``?``, a glob as written.  The
    syntax is checked here; the principals and rights by
    :func:`compile_access` (the users are read by then).
    """
    where = f"--allow {text!r}"
    principals, colon, rest = text.partition(":")
    rights, at, path = rest.partition("@")
    names = [p.strip() for p in principals.split(",")]
    words = [r.strip() for r in rights.split(",")]
    if not colon or not at or not all(names) or not all(words) or not path.startswith("/"):
        raise ConfigError(f"{where}: must be PRINCIPAL[,PRINCIPAL...]:RIGHT[,RIGHT...]@/PATH")
    if _WILD.search(path) is None:
        path = path.rstrip("/") + "/**"
    return path, tuple((n, tuple(words)) for n in names), where


def _rank(pattern: str) -> tuple[int, int, int]:
    """How specific a glob is: its literal start, then its literal
    characters, then whether it stays within its segments (no ``**``)."""
    wild = _WILD.search(pattern)
    start = len(pattern) if wild is None else wild.start()
    return start, len(_WILD.sub("", pattern)), int("**" not in pattern)


def compile_access(
    specs: Sequence[AccessSpec],
    users: Sequence[str],
    groups: Sequence[tuple[str, Sequence[str]]],
    source: str,
    fold: bool = False,
    folded: bool = False,
) -> tuple[AccessRule, ...]:
    """The rules, most specific first (:func:`rule_at` takes the first that
    matches).  ``users``: the names of the users file; ``groups``: (name,
    members) per ``[[group]]``; ``fold``: globs over canonical paths (a
    case-insensitive root); ``folded``: each glob also over canonical
    paths (``AccessRule.folded``).  Raises ConfigError naming the rule."""
    known = set(users)
    members = _groups(groups, known, source)
    merged: dict[str, tuple[dict[str, set[Right]], list[str], int]] = {}
    for order, (pattern, grants, where) in enumerate(specs):
        try:
            compile_glob(canonical(pattern) if fold else pattern)
        except ValueError as exc:
            raise ConfigError(f"{where} key 'path': bad glob {pattern!r}: {exc}") from None
        if not grants:
            raise ConfigError(f"{where} key 'allow': names no principal")
        given, wheres, _ = merged.get(pattern, ({}, [], 0))
        key = where if where.startswith("--allow") else f"{where} key 'allow'"
        for name, words in grants:
            _principal(name, known, members, where)
            given.setdefault(name, set()).update(parse_rights(words, key))
        wheres.append(where)
        merged[pattern] = (given, wheres, order)  # the last declaration's place
    out: list[tuple[tuple[int, int, int, int], AccessRule]] = []
    for pattern, (given, wheres, order) in merged.items():
        anon = frozenset(given.get(ANONYMOUS, ()))
        authed = anon | given.get(AUTHENTICATED, set())
        per_user: dict[str, frozenset[Right]] = {}
        for user in known:
            mine = set(given.get(user, ()))
            for group, names in members.items():
                if user in names:
                    mine |= given.get(group, set())
            if mine:
                per_user[user] = frozenset(authed | mine)
        every = pattern in ("/**", "**")
        match = None if every else compile_glob(canonical(pattern) if fold else pattern)
        loose = compile_glob(canonical(pattern)) if folded and not every else None
        rule = AccessRule(
            pattern,
            match,
            anon,
            frozenset(authed),
            per_user,
            " / ".join(wheres),
            loose,
            anonymous_reads=Right.READ in anon,
            anonymous_lists=Right.LIST in anon,
        )
        out.append(((*_rank(pattern), order), rule))
    out.sort(key=lambda pair: pair[0], reverse=True)
    return tuple(rule for _, rule in out)


def _groups(
    groups: Sequence[tuple[str, Sequence[str]]], known: set[str], source: str
) -> dict[str, frozenset[str]]:
    out: dict[str, frozenset[str]] = {}
    for i, (name, names) in enumerate(groups):
        where = f"{source}: [[group]] #{i + 1}"
        if not name or name in (ANONYMOUS, AUTHENTICATED) or name in known:
            raise ConfigError(
                f"{where} key 'name': {name!r} is taken (anonymous, authenticated or a user)"
            )
        if name in out:
            raise ConfigError(f"{where} key 'name': group {name!r} is declared twice")
        for member in names:
            if member not in known:
                raise ConfigError(
                    f"{where} key 'members': {member!r} is no user of --auth-file / --auth"
                )
        out[name] = frozenset(names)
    return out


def _principal(
    name: str, known: set[str], groups: Mapping[str, frozenset[str]], where: str
) -> None:
    if name in (ANONYMOUS, AUTHENTICATED) or name in groups or name in known:
        return
    if not known:
        raise ConfigError(
            f"{where}: principal {name!r}: no users (name them with --auth-file or --auth)"
        )
    raise ConfigError(
        f"{where}: principal {name!r} is no user of --auth-file / --auth, no [[group]], "
        "nor anonymous or authenticated"
    )


def rule_at(rules: Sequence[AccessRule], path: str, loose: str | None = None) -> AccessRule | None:
    """The rule that decides ``path`` (a canonical match path): the first,
    most specific, that matches; None: no rule does (nobody may anything).
    ``loose``: the path's canonical form under a case-insensitive proxy
    route (matched against the rules' ``folded`` globs)."""
    for rule in rules:
        if rule.matches(path, loose):
            return rule
    return None


def anonymous_writes(rules: Sequence[AccessRule]) -> AccessRule | None:
    """The first rule that lets an anonymous client write (for the
    start-up guard off loopback), or None."""
    for rule in rules:
        if rule.anonymous & WRITES:
            return rule
    return None
