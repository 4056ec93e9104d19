"""What the access hook makes of a principal the login feature verified (pure, memoised).

The login feature (:mod:`serverio.login.identity`) hands the hook a
session's or a trusted header's user, or a share link's grant, in the
request's ``authorization`` slot (:mod:`serverio.site.principal`).
:meth:`Vouchers.of` says what that principal is worth under this
server's users files, once per distinct value:

* a share link's grant: itself (the hook decides on its path and rights
  alone);
* a trusted header's user: that user wherever a users file names them
  (the proxy in front checked the password); nobody when no file does;
* a session's user: that user under each users file that still holds the
  very hash the session was opened with (its password tag): the rules of
  such a file accept the session as they would the password; a file
  that names the user with another hash (another password, the same one
  hashed again, or the same name for someone else) does not, and asks
  for its own credentials.  With no such file left (a changed password,
  a removed user) the session is nobody: the client is anonymous.

The answer depends on the value and on the users files, which are read
at start-up and fixed for the server's life; so it is memoised per value
(bounded: cleared past :data:`MEMO_MAX` distinct values; only values the
login feature built reach here, and clients cannot spell its scheme).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from ..http.access import Access, AccessTarget, Verdict
from .principal import SHARE_PREFIX, Principal, password_tag, principal_of
from .rules import SiteRules

__all__ = ["MEMO_MAX", "Marked", "Vouchers"]

MEMO_MAX = 4096


class Marked(NamedTuple):
    """What a verified principal is worth: a share link's grant
    (``share``), or a signed-in ``user`` (None: nobody, anonymous) and the
    auth rules (their indices) whose users files accept them
    (``accepted``; None: every rule whose file names the user)."""

    share: Principal | None
    user: str | None
    accepted: frozenset[int] | None


_NOBODY = Marked(None, None, None)


class Vouchers:
    """:meth:`of` for one server's users files."""

    __slots__ = ("_files", "_memo", "decided")

    def __init__(self, rules: SiteRules) -> None:
        # (rule index, users file) per [[auth]] rule, and the users the
        # [[access]] rules name (checked by their own index).
        files: list[tuple[int, Mapping[str, str]]] = [(r.index, r.users) for r in rules.auth]
        if rules.users is not None:
            files.append((rules.users.index, rules.users.users))
        self._files = tuple(files)
        self._memo: dict[str, Marked] = {}
        # The access hook's allows for such principals (:meth:`keep`).
        self.decided: dict[tuple[AccessTarget, str, frozenset[int]], Access] = {}

    def of(self, authorization: str) -> Marked:
        """What ``authorization`` (a value in the login feature's scheme)
        is worth (the module doc)."""
        got = self._memo.get(authorization)
        if got is None:
            got = self._judge(authorization)
            memo = self._memo
            if len(memo) >= MEMO_MAX:
                memo.clear()
            memo[authorization] = got
        return got

    def keep(self, key: tuple[AccessTarget, str, frozenset[int]], access: Access) -> Access:
        """``access``, the access hook's decision for ``key`` (a target, a
        principal's value, the rules its ticket passed), kept in
        :attr:`decided` when it allows: a function of the key alone, the
        rules and users files being fixed for the process (a session's
        expiry is the login feature's, which names no principal for an
        expired one), so a signed-in browser's next request for the path
        is decided with one lookup.  Bounded: targets are client input."""
        if access.verdict is Verdict.ALLOW:
            decided = self.decided
            if len(decided) >= MEMO_MAX:
                decided.clear()
            decided[key] = access
        return access

    def _judge(self, authorization: str) -> Marked:
        who = principal_of(authorization)
        if who is None:
            return _NOBODY
        if authorization.startswith(SHARE_PREFIX):
            return Marked(who, None, None)
        user = who.user
        naming = [(index, users[user]) for index, users in self._files if user in users]
        if not naming:
            return _NOBODY
        if who.via == "header":
            return Marked(None, user, None)
        tag = who.tag
        accepted = frozenset(index for index, stored in naming if password_tag(stored) == tag)
        return Marked(None, user, accepted) if accepted else _NOBODY
