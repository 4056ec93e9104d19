"""Share links: signed, expiring grants for one path (no server state).

A link is ``/.serverio/s/TOKEN/`` (a folder) or ``/.serverio/s/TOKEN/NAME``
(a file: its own name last, for the download's name).  ``TOKEN`` is a
signed token (serverio.signing, purpose ``share``) over:

* the path, a match path (``/docs/`` a folder, ``/docs/a.pdf`` a file);
* the rights: ``read`` (a file), ``read,list`` (a folder, read-only
  listing), or ``upload`` (a folder as a drop box: files may be sent,
  nothing is shown);
* the password, sealed (:func:`seal_password`: PBKDF2 under the
  secret's MAC, so the link, which its holder can read, gives nothing to
  guess offline), or ``""``.

So a link is valid on every replica given the same ``--secret-file``,
expires by itself, and grants exactly what it names (the access hook's
share branch, :func:`serverio.site.principal.share_allows`).  Revocation:
rotate the secret (every link and session at once), or add the token (or
the whole link) to ``--share-deny-file``, one per line, which
:class:`DenyList` re-reads when its modification time changes, through the
blocking pool (never on the event loop), looking at most every
:data:`DENY_RECHECK` seconds.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from dataclasses import dataclass

import trio

from ..concurrency.blocking import Pool, PoolSaturated, run_blocking
from ..signing import Signer, TokenError

__all__ = [
    "DENY_RECHECK",
    "LINK_PREFIX",
    "DenyList",
    "Share",
    "open_share",
    "password_matches",
    "seal_password",
    "share_token",
    "token_of",
]

LINK_PREFIX = "/.serverio/s/"
DENY_RECHECK = 2.0  # seconds between two looks at the deny file's mtime
_DENY_MAX = 1 << 20  # bytes of the deny file read at most
_RIGHTS = {"read", "list,read", "upload"}


@dataclass(frozen=True, slots=True)
class Share:
    """What a genuine, unexpired share token says."""

    path: str
    rights: frozenset[str]
    password: str  # a password hash, or ""
    expires: int

    @property
    def folder(self) -> bool:
        return self.path.endswith("/")


def share_token(
    signer: Signer, path: str, rights: frozenset[str], password: str, expires: int
) -> str:
    """The token of a link to ``path`` (a match path) with ``rights``."""
    spelled = ",".join(sorted(rights))
    if spelled not in _RIGHTS:
        raise ValueError(f"no such share: {spelled}")
    return signer.sign("share", (path, spelled, password), expires)


def open_share(signer: Signer, token: str, now: float) -> Share:
    """The share a token grants; :class:`~serverio.signing.TokenError`
    ("invalid" or "expired") otherwise."""
    opened = signer.open("share", token, now)
    if len(opened.fields) != 3:
        raise TokenError("invalid")
    path, rights, password = opened.fields
    # A file link reads; a folder link lists (and reads) or takes uploads.
    folder = path.endswith("/")
    if not path.startswith("/") or rights not in _RIGHTS or folder != (rights != "read"):
        raise TokenError("invalid")
    return Share(path, frozenset(rights.split(",")), password, opened.expires)


def token_of(line: str) -> str:
    """The token a deny-file line names: the token itself, or a link
    (``https://host/.serverio/s/TOKEN/name``)."""
    line = line.strip()
    at = line.find(LINK_PREFIX)
    if at >= 0:
        line = line[at + len(LINK_PREFIX) :]
    return line.split("/", 1)[0].split("?", 1)[0]


def _read_deny(path: str, known: tuple[int, int] | None) -> tuple[tuple[int, int], set[str]] | None:
    """(identity, tokens) of the deny file when it changed since ``known``
    (its (mtime_ns, size)); None when it did not.  A missing file denies
    nothing."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return ((0, -1), set()) if known != (0, -1) else None
    ident = (st.st_mtime_ns, st.st_size)
    if ident == known:
        return None
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read(_DENY_MAX)
    tokens = {token_of(ln) for ln in text.splitlines() if ln.strip() and not ln.startswith("#")}
    return ident, tokens


class DenyList:
    """``--share-deny-file``, cached by modification time."""

    def __init__(self, path: str | None, pool: Pool) -> None:
        self.path = path
        self.pool = pool
        self._ident: tuple[int, int] | None = None
        self._tokens: set[str] = set()
        self._checked = -DENY_RECHECK

    async def denies(self, token: str) -> bool:
        """Is ``token`` revoked?  Looks at the file again when
        :data:`DENY_RECHECK` seconds have passed since the last look (in
        the pool); a saturated pool or an unreadable file keeps what was
        read last (an unreadable file at the first look denies every
        link: a deny list that cannot be read must not let a revoked one
        through).

        Cancellation handling: the look is a pooled call, abandoned like
        any other; the cache is updated only by a look that returned.
        """
        if self.path is None:
            return False
        mono = trio.current_time()
        if mono - self._checked >= DENY_RECHECK:
            self._checked = mono
            try:
                got = await run_blocking(self.pool, _read_deny, self.path, self._ident)
            except PoolSaturated:
                got = None
            except (OSError, UnicodeError):
                if self._ident is None:
                    return True
                got = None
            if got is not None:
                self._ident, self._tokens = got
        return token in self._tokens


def seal_password(signer: Signer, password: str, iterations: int) -> str:
    """What a link holds of its password: ``ITERATIONS$SALT$MAC``, the MAC
    (the secret's, purpose ``share-password``) over PBKDF2-SHA256 of the
    password (RFC 8018 §5.2).  The link is visible to whoever holds it, so
    its password must not be guessable offline from it: without the
    server's secret the field says nothing.  Pure CPU work: run it in a
    pool."""
    salt = os.urandom(12)
    derived = hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), salt, iterations)
    mac = signer.mac("share-password", derived)
    return f"{iterations}${_b64(salt)}${_b64(mac)}"


def password_matches(signer: Signer, sealed: str, password: str) -> bool:
    """Does ``password`` match a link's sealed one?  (Constant time in the
    MAC; the PBKDF2 work is the same for any guess.)"""
    parts = sealed.split("$")
    if len(parts) != 3 or not parts[0].isdigit() or not 1000 <= int(parts[0]) <= 10_000_000:
        return False
    try:
        salt, want = _unb64(parts[1]), _unb64(parts[2])
    except ValueError:
        return False
    derived = hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), salt, int(parts[0]))
    return hmac.compare_digest(signer.mac("share-password", derived), want)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
