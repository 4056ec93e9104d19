"""A streamed body's next chunk, under the response's progress deadline.

One step both transports take for a body produced while it is sent (an
archive, a proxied response: :class:`~serverio.model.ChunkSource`):
HTTP/1.1's :meth:`~serverio.net.emit.Emitter.emit_stream` and HTTP/2's
:func:`~serverio.net.h2stream.send_stream`.  How the pull ended is
counted here, once for both; what it means on the wire is each
transport's (HTTP/1.1 aborts the connection, HTTP/2 resets the stream).
"""

from __future__ import annotations

import enum

import trio

from ..model import BodyCut, ChunkSource
from ..observe.stats import ResponseStats, TimeoutStats

__all__ = ["Ended", "pull_chunk"]


class Ended(enum.Enum):
    """Why a pull gave no chunk."""

    CUT = "cut"  # the source stopped (BodyCut, not failed)
    FAILED = "failed"  # BodyCut.failed or any other exception: counted as truncated
    STALLED = "stalled"  # no chunk within the deadline: counted as a write timeout


async def pull_chunk(
    source: ChunkSource,
    within: float | None,
    responses: ResponseStats,
    timeouts: TimeoutStats,
) -> bytes | Ended:
    """The source's next chunk (``b""`` at its end), or why there is none.

    ``within``: seconds the source may take (None: it bounds its own
    pulls); making a chunk is the response's progress, so one that makes
    none in time counts as a write timeout, and its pooled read is
    abandoned.

    Cancellation handling: a cancelled pull propagates (the caller's scope
    decides); the source is closed by the body's owner, as always.
    """
    try:
        if within is None:
            return await source.next_chunk()
        with trio.move_on_after(within):
            return await source.next_chunk()
    except Exception as exc:
        if isinstance(exc, BodyCut) and not exc.failed:
            return Ended.CUT
        responses.truncated += 1
        return Ended.FAILED
    timeouts.write += 1
    return Ended.STALLED
