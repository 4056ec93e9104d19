"""A streamed body (:class:`~serverio.model.StreamBody`, a proxied
response) on an HTTP/2 stream.

HEADERS without END_STREAM, then each chunk as the source gives it, as DATA
within the stream's and the connection's flow-control windows, the next
chunk asked for only once this one is handed to h2 and the connection's
output is under ``OUT_HIGH`` (backpressure reaches the upstream: an unread
chunk stays in its socket); END_STREAM with the last (empty) DATA frame.
A window that stays shut for ``--write-timeout`` resets the stream
(CANCEL), as for a file body; a source that fails after the head
(:class:`~serverio.model.BodyCut`) resets it too (CANCEL: the response is
cut, RFC 9113 §8.1), never ends it as if complete.

The stream's progress is kept where the access log reads it
(``Stream.pieces``/``offset``: one span of the bytes sent), so a cut
response is logged with its size and the ``cut`` marker as a file's is.
"""

from __future__ import annotations

import h2.exceptions
import trio
from h2.errors import ErrorCodes

from ..http.core import FileSpan, Plan
from ..model import BodyCut, StreamBody
from ..observe.stats import Stats
from .h2state import COMPLETE, EVENTS, STOPPED, Stream
from .h2write import OUT_HIGH, Writer, response_fields

__all__ = ["send_stream"]


async def send_stream(
    writer: Writer, st: Stream, plan: Plan, body: StreamBody, stats: Stats, write_timeout: float
) -> None:
    """Send ``plan``'s head and ``body`` on ``st`` (see the module docstring).

    Cancellation handling: cancelled (RST_STREAM, the connection's end) at
    any await, it sends nothing more; the caller closes the body, whose
    source closes the upstream connection.
    """
    if st.state in STOPPED or writer.closed:
        return
    st.status = plan.status
    try:
        writer.frames.headers(st.sid, response_fields(plan.status, plan.headers), False)
    except h2.exceptions.ProtocolError:
        return  # the stream was closed meanwhile
    st.to(EVENTS)  # HEADERS out, DATA as the source gives it
    st.pieces = [FileSpan(0, 0)]
    writer.pull()
    conn = writer.frames.conn
    sent = 0
    while True:
        try:
            chunk = await body.source.next()
        except BodyCut:
            writer.reset(st, ErrorCodes.CANCEL)
            return
        if st.state in STOPPED or writer.closed:
            return
        if not chunk:
            break
        if not await _send(writer, st, chunk, stats, write_timeout):
            return
        sent += len(chunk)
        body.sent = st.offset = sent
    try:
        conn.end_stream(st.sid)
    except h2.exceptions.ProtocolError:
        return  # closed on h2's side meanwhile
    st.pieces = [FileSpan(0, sent)]
    st.offset = 0
    st.to(COMPLETE)
    writer.pull()
    if not st.ended:
        writer.reset(st, ErrorCodes.NO_ERROR)  # RFC 9113 §8.1: answered in full


async def _send(
    writer: Writer, st: Stream, data: bytes, stats: Stats, write_timeout: float
) -> bool:
    """``data`` as DATA frames within the windows; False when the stream
    ended meanwhile or its window stayed shut past ``timeout`` (reset)."""
    conn = writer.frames.conn
    timeout = write_timeout
    deadline = trio.current_time() + timeout
    view = memoryview(data)
    while view:
        if st.state in STOPPED or writer.closed:
            return False
        window = min(conn.local_flow_control_window(st.sid), conn.max_outbound_frame_size)
        if window > 0 and len(writer.out) <= OUT_HIGH:
            piece = bytes(view[:window])
            conn.send_data(st.sid, piece)
            writer.allowance.earn(len(piece))
            view = view[len(piece) :]
            writer.pull()
            deadline = trio.current_time() + timeout
            continue
        if trio.current_time() >= deadline:
            stats.timeouts.write += 1
            writer.reset(st, ErrorCodes.CANCEL)
            return False
        # A WINDOW_UPDATE, SETTINGS or a write that drained the output
        # wakes the writer: wait for that, looking again shortly meanwhile.
        wake = writer.wake
        with trio.move_on_at(min(deadline, trio.current_time() + 0.05)):
            if wake.is_set():
                await trio.sleep_forever()
            await wake.wait()
    return True
