"""The one reason -> status table: how the filesystem's answers are told to a client.

The filesystem layer says why it cannot hand over what a request names
(:class:`serverio.model.Reason`, from :func:`serverio.model.errno_reason`);
this table says which status that is.  Every filesystem error that reaches a
response goes through it: the resolution (:mod:`serverio.model.decide`) and
the listing scan (:mod:`serverio.pipeline.content`).  Callers that only ask
"is it there?" (index files, sidecars, listing entries) treat a missing or
refused name as absent instead, and never get here.
"""

from __future__ import annotations

from typing import Final

from . import Reason

__all__ = ["REASON_STATUS", "reason_status"]

REASON_STATUS: Final[dict[Reason, int]] = {
    # The name does not lead to a file we may serve (RFC 9110 §15.5.5).
    Reason.NOT_FOUND: 404,
    # Containment refused it: answered as missing, so that a client cannot
    # tell a link out of the root (or a hidden name) from no file at all.
    Reason.FORBIDDEN_NAME: 404,
    # A FIFO, a socket, a device: not a file we serve (and not worth saying so).
    Reason.NOT_REGULAR: 404,
    # It exists, and the operating system says we may not read it (§15.5.4).
    Reason.DENIED: 403,
    # Out of descriptors or memory: trying again later can succeed (§15.6.4).
    Reason.EXHAUSTED: 503,
    # EIO and friends: the server's fault (§15.6.1), logged where it happened.
    Reason.FAILED: 500,
}


def reason_status(reason: Reason) -> int:
    """The status a filesystem reason is answered with."""
    return REASON_STATUS[reason]
