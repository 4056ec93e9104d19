"""Who a request speaks for, once the login feature has vouched for it (pure).

Basic credentials (RFC 7617) are checked by the access hook itself
(:class:`serverio.site.gate.Gate`).  The other ways a request names its
user are verified *before* the hook, by the login feature
(:mod:`serverio.login.identity`): a signed session cookie, the
``--trusted-user-header`` of a ``--trusted-proxies`` peer, a share link.
What it verified travels to the hook in the request's ``authorization``
slot, spelled with a scheme that is random per process (:data:`MARK`):
no client can send it (a field that starts with it is dropped as the
request arrives, :func:`strip_forged`), and it never leaves the process
(the reverse proxy forwards the fields as received, never this slot).

* a user: ``MARK user VIA TAG NAME``; ``VIA`` is ``session`` or
  ``header``; ``TAG`` (:func:`password_tag`) binds a session to the
  password hash it was opened with (``-`` for the trusted header: the
  proxy in front checked the password): a rule whose users file holds
  another hash for the name, or a changed password, does not accept it;
* a share link: ``MARK share RIGHTS TOKEN PATH``: the link's rights
  (comma-separated: ``read``, ``list``, ``upload``) on ``PATH`` (a match
  path; ``/d/`` a folder and what is below it, ``/f`` one file) and
  nothing else (:func:`share_allows`); ``TOKEN`` the link's own (the
  answers map the real path back to the link's URL).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

__all__ = [
    "MARK",
    "PASSWORD_TAGS",
    "SHARE_PREFIX",
    "Principal",
    "password_tag",
    "principal_of",
    "share_allows",
    "share_authorization",
    "strip_forged",
    "user_authorization",
    "user_of",
]

# The scheme only this process writes (96 random bits, hex): a client that
# does not know it cannot spell it, and one that sends a field starting
# with it anyway has it dropped (strip_forged).
MARK = "Serverio-" + secrets.token_hex(12)
_PREFIX = MARK + " "
# How a share link's grant starts (the hook tells it apart with one test).
SHARE_PREFIX = _PREFIX + "share "

SHARE_RIGHTS = ("read", "list", "upload")


@dataclass(frozen=True, slots=True)
class Principal:
    """A verified user (``share`` empty) or a share link's grant."""

    user: str  # "" for a share link
    via: str  # "session", "header" or "share"
    tag: str = "-"
    share_path: str = ""
    share_rights: frozenset[str] = frozenset()
    share_token: str = ""


# The memo of password_tag (a users file hash -> its tag).
PASSWORD_TAGS: dict[str, str] = {}


def password_tag(stored: str) -> str:
    """A short digest of a users file's hash for one user (never the hash
    itself in a cookie): a session names it, and is accepted only while the
    users file holds that same hash.  Memoised (the users files' hashes:
    bounded by what the server loaded)."""
    tag = PASSWORD_TAGS.get(stored)
    if tag is None:
        tag = hashlib.sha256(stored.encode("utf-8")).hexdigest()[:20]
        if len(PASSWORD_TAGS) < 65536:
            PASSWORD_TAGS[stored] = tag
    return tag


def user_authorization(user: str, via: str, tag: str = "-") -> str:
    """The ``authorization`` slot for a user the login feature verified."""
    return f"{_PREFIX}user {via} {tag} {user}"


def share_authorization(path: str, rights: frozenset[str], token: str) -> str:
    """The ``authorization`` slot for a share link's grant."""
    return f"{_PREFIX}share {','.join(sorted(rights))} {token} {path}"


def strip_forged(authorization: str | None) -> str | None:
    """``authorization`` as a client sent it, or None when it starts with
    this process's own scheme (never a client's to send)."""
    if authorization is not None and authorization.startswith(MARK):
        return None
    return authorization


_SEEN: dict[str, Principal] = {}
_SEEN_MAX = 4096


def principal_of(authorization: str | None) -> Principal | None:
    """What the login feature verified (None: Basic credentials, or nothing).
    Parsed once per distinct value (bounded memo: a signed-in client's
    requests all carry the same one)."""
    if authorization is None or not authorization.startswith(_PREFIX):
        return None
    got = _SEEN.get(authorization)
    if got is None:
        got = _parse(authorization)
        if len(_SEEN) >= _SEEN_MAX:
            _SEEN.clear()
        _SEEN[authorization] = got
    return got


def _parse(authorization: str) -> Principal:
    kind, _, rest = authorization[len(_PREFIX) :].partition(" ")
    if kind == "user":
        via, _, rest = rest.partition(" ")
        tag, _, user = rest.partition(" ")
        return Principal(user, via, tag)
    rights, _, rest = rest.partition(" ")
    token, _, path = rest.partition(" ")
    return Principal(
        "", "share", share_path=path, share_rights=frozenset(rights.split(",")), share_token=token
    )


def user_of(authorization: str | None) -> str | None:
    """The user a verified principal names (None for a share link and for
    anything else; Basic credentials are the gate's to verify)."""
    who = principal_of(authorization)
    return who.user if who is not None and who.user else None


def share_allows(
    who: Principal, paths: tuple[str, ...], right: str, top: str | None = None
) -> bool:
    """Does a share link's grant cover ``right`` on every one of ``paths``
    (match paths, already canonical when the root folds case)?  A folder
    link (``/d/``) covers the folder and what is below it; a file link
    exactly that file.  Nothing else: no parent, no sibling, no other right.
    ``top``: the link's path spelled as ``paths`` are (canonical on a
    case-folding root); its own by default."""
    if right not in who.share_rights or not paths:
        return False
    if top is None:
        top = who.share_path
    if top.endswith("/"):
        return all(p == top or p.startswith(top) for p in paths)
    return all(p == top for p in paths)
