"""A streamed body (:class:`~serverio.model.StreamBody`: a folder archive,
a proxied response) on an HTTP/2 stream: the one HTTP/2 path of the
streamed-body seam (docs/architecture.md "The streamed-body seam").

HEADERS without END_STREAM, then each chunk as the source gives it,
queued with the :class:`~serverio.net.h2write.Writer` and framed there as
any body is: round-robin with the connection's other bodies, within the
stream's and the connection's flow-control windows.  The stream's task
waits on events only (:meth:`Writer.await_body`: the chunk framed, the
stream reset, its write deadline); the writer frames again when a
WINDOW_UPDATE or a SETTINGS change wakes it (``Writer.kick``, from
:mod:`serverio.net.h2read`), so a shut window costs no wake-up at all.
The next chunk is asked for only once this one is framed (backpressure
reaches the source: an upstream's unread chunk stays in its socket, an
archive's next read waits), so one chunk at most is held per stream.
END_STREAM goes on an empty DATA frame at the end.

A cut resets the stream, never ends it as if complete (RFC 9113 §8.1):
CANCEL for a :class:`~serverio.model.BodyCut`, for more or fewer bytes
than a declared length, and for a chunk not made within
``--write-timeout`` (when the source does not bound its own pulls,
counted as a write timeout); INTERNAL_ERROR (the stream FAILED, counted
as ``truncated``) for a failed one (``BodyCut.failed``: an archive that
cannot be completed) and any other exception of the source.  A window
that stays shut for ``--write-timeout`` resets it too (CANCEL), as for a
file body.

The stream's progress is kept where the access log reads it:
``Stream.streamed`` (the chunks framed) plus the cursor into the current
chunk (``Stream.pieces``/``index``/``offset``), so a cut response is logged
with its size and the ``cut`` marker as a file's is.
"""

from __future__ import annotations

import h2.exceptions
from h2.errors import ErrorCodes

from ..http.core import Plan
from ..model import StreamBody
from ..observe.stats import Stats
from .h2state import COMPLETE, SENDING, STOPPED, Stream
from .h2write import Writer, response_fields
from .pull import Ended, pull_chunk

__all__ = ["send_stream"]


async def send_stream(
    writer: Writer, st: Stream, plan: Plan, body: StreamBody, stats: Stats, write_timeout: float
) -> bool:
    """Send ``plan``'s head and ``body`` on ``st`` (see the module
    docstring).  True when the connection's bodies stalled as a whole
    (:meth:`Writer.await_body`: the caller ends the connection).

    Cancellation handling: cancelled (RST_STREAM, the connection's end) at
    any await, it sends nothing more; the source is not closed here (the
    stream task's ``finally`` closes the body: the archive's descriptor,
    the upstream connection).
    """
    if st.state in STOPPED or writer.closed:
        return False
    st.status = plan.status
    try:
        writer.frames.headers(st.sid, response_fields(plan.status, plan.headers), False)
    except h2.exceptions.ProtocolError:
        return False  # the stream was closed meanwhile
    st.to(SENDING)
    st.streaming = True
    writer.pull()
    source = body.source
    length = body.length
    within = None if body.bounded else write_timeout
    while True:
        got = await pull_chunk(source, within, stats.responses, stats.timeouts)
        if st.state in STOPPED:
            return False  # reset while the chunk was made
        if isinstance(got, Ended):
            # A failed source is INTERNAL_ERROR; a cut, or no chunk in
            # time (a stalled filesystem is no progress either), CANCEL.
            failed = got is Ended.FAILED
            writer.reset(st, ErrorCodes.INTERNAL_ERROR if failed else ErrorCodes.CANCEL, failed)
            return False
        if length is not None and (
            st.streamed + len(got) > length or (not got and st.streamed != length)
        ):
            # More than the declared content-length, or its end short of
            # it: a cut (RFC 9113 §8.1.1 makes the mismatch malformed).
            writer.reset(st, ErrorCodes.CANCEL)
            return False
        if not got:
            break
        writer.queue(st, [got], len(got))
        if await writer.await_body(st):
            return True
        if st.state != SENDING:
            return False  # reset: the write deadline, the client
        # The chunk is framed: it joins the bytes streamed (the access
        # log's size), and the next one is asked for.
        st.streamed += len(got)
        st.pieces = []
        body.sent = st.streamed
    st.streaming = False
    try:
        writer.frames.data(st.sid, b"", True)
    except h2.exceptions.ProtocolError:
        return False  # closed on h2's side meanwhile
    st.to(COMPLETE)
    writer.pull()
    if not st.ended:
        writer.reset(st, ErrorCodes.NO_ERROR)  # RFC 9113 §8.1: answered in full
    return False
