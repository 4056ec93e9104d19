"""Errors that carry their HTTP status, and the fixed texts they map to.

Like h11's ``error_status_hint``: the code that detects a problem says which
status it deserves; the connection task maps it to a response in one place
(:func:`serverio.http.core.error_plan`) without knowing why it happened.  Bodies
are fixed per status so nothing about the filesystem or the exception leaks.
"""

from __future__ import annotations

import errno
from http import HTTPStatus

__all__ = ["ConfigError", "HTTPError", "errno_status", "reason_phrase"]


class HTTPError(Exception):
    """A request that must be answered with ``status``.

    ``detail`` is for the error log only; it never reaches the client.
    ``close`` says whether the connection must be closed after the answer
    (protocol errors: the byte stream can no longer be trusted).
    """

    def __init__(self, status: int, detail: str = "", *, close: bool = False) -> None:
        super().__init__(detail or str(status))
        self.status = status
        self.detail = detail
        self.close = close


class ConfigError(ValueError):
    """An invalid policy value; the CLI prints it as one line and exits 2."""


_REASONS: dict[int, bytes] = {s.value: s.phrase.encode("ascii") for s in HTTPStatus}


def reason_phrase(status: int) -> bytes:
    return _REASONS.get(status, b"Unknown")


# The one errno -> status table (like Go's net/http toHTTPError).  Every
# filesystem error that reaches a response goes through it: the opener, the
# index and SPA lookups, the listing scan.  Callers that only ask "is it
# there?" (sidecars, listing entries) treat any error as "absent" instead.
#
# 404: the name does not lead to a file we may serve.  ELOOP is a symlink
# loop or an O_NOFOLLOW refusal on Linux and macOS; FreeBSD reports the
# latter as EMLINK and NetBSD as EFTYPE.  EXDEV is the containment refusal
# (RESOLVE_BENEATH, or the component walk leaving the root).  A too-long or
# invalid name cannot exist.
_NOT_FOUND: frozenset[int] = frozenset(
    code
    for code in (
        errno.ENOENT,
        errno.ENOTDIR,
        errno.ELOOP,
        errno.EXDEV,
        errno.ENAMETOOLONG,
        errno.EINVAL,
        errno.EMLINK,
        getattr(errno, "EFTYPE", None),
    )
    if code is not None
)
# 403: it exists, and the operating system says we may not read it.
_FORBIDDEN: frozenset[int] = frozenset({errno.EACCES, errno.EPERM})
# 503: the process is out of a resource; trying again later can succeed.
_OVERLOADED: frozenset[int] = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM})


def errno_status(code: int | None) -> int:
    """The HTTP status for a filesystem error number (500 when unknown:
    EIO and friends are the server's fault, and are logged by the caller)."""
    if code in _NOT_FOUND:
        return 404
    if code in _FORBIDDEN:
        return 403
    if code in _OVERLOADED:
        return 503
    return 500
