"""Errors that carry their HTTP status, and the fixed texts they map to.

Like h11's ``error_status_hint``: the code that detects a problem says which
status it deserves; the connection task maps it to a response in one place
(:func:`serverio.http.core.error_plan`) without knowing why it happened.  Bodies
are fixed per status so nothing about the filesystem or the exception leaks.
"""

from __future__ import annotations

from dataclasses import dataclass
from http import HTTPStatus

__all__ = ["ConfigError", "HTTPError", "Problem", "reason_phrase"]


@dataclass(frozen=True, slots=True)
class Problem:
    """What a client is told about why its request failed: RFC 9457's
    ``detail`` (one sentence for a person) and extension members
    (``members``: machine-readable facts, such as the name that is taken,
    the limit that was passed, the option that would help, the right that
    is missing).  Only facts the client may know: never a path outside the
    request, an exception's text or a rule's contents.  The text may hold a
    name the client sent: every page that shows it encodes it
    (:mod:`serverio.http.errorpage`)."""

    detail: str
    members: tuple[tuple[str, str | int], ...] = ()


class HTTPError(Exception):
    """A request that must be answered with ``status``.

    ``detail`` is for the error log only; it never reaches the client;
    ``problem`` is what the client is told (:class:`Problem`).
    ``close`` says whether the connection must be closed after the answer
    (protocol errors: the byte stream can no longer be trusted).
    """

    def __init__(
        self, status: int, detail: str = "", *, close: bool = False, problem: Problem | None = None
    ) -> None:
        super().__init__(detail or str(status))
        self.status = status
        self.detail = detail
        self.close = close
        self.problem = problem


class ConfigError(ValueError):
    """An invalid policy value; the CLI prints it as one line and exits 2."""


_REASONS: dict[int, bytes] = {s.value: s.phrase.encode("ascii") for s in HTTPStatus}
# Codes newer than Python's table: 104 (draft-ietf-httpbis-resumable-upload
# §"Status Code 104"), 460 (tus 1.0 checksum extension).
_REASONS.setdefault(104, b"Upload Resumption Supported")
_REASONS.setdefault(460, b"Checksum Mismatch")


def reason_phrase(status: int) -> bytes:
    return _REASONS.get(status, b"Unknown")
