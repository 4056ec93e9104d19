"""Live-reload event streams (``--watch``) on an HTTP/2 connection.

HEADERS without END_STREAM, then the broadcaster's messages as DATA
frames, queued into the connection's output for the writer, within the
stream's and the connection's flow-control windows; the subscriber's
bounded queue absorbs what waits meanwhile (a slow client drops to
"reload").  While it is open the stream is in flight: the connection has
no idle deadline, and the stream counts toward ``h2_max_streams``.  It
ends cleanly (empty DATA with END_STREAM) when the connection drains, just
before the GOAWAY, at once in lame duck, and when the client's side
reaches EOF (:meth:`EventStreams.end_all`); it is cancelled by the
client's RST_STREAM or the connection's end; a window that stays closed
for ``write_timeout`` resets it (CANCEL), as for a body.  However it ends,
it is logged then, with the DATA bytes it sent (as HTTP/1.1 logs its
event streams, ``ConnectionTask._stream``).
"""

from __future__ import annotations

from collections.abc import Callable

import h2.exceptions
import trio
from h2.errors import ErrorCodes

from ..fs.body import NO_BODY
from ..http.core import Plan
from ..pipeline.hooks import EventSource
from .env import ConnectionEnv
from .h2state import COMPLETE, DONE, EVENTS, STOPPED, Stream
from .h2write import Writer, response_fields

__all__ = ["EventStreams"]


class EventStreams:
    """One connection's event streams, with the scope that ends each.

    Cancellation handling: :meth:`serve` runs in its stream's scope (an
    RST_STREAM cancels it) and in a scope of its own that :meth:`end_all`
    cancels; the ``--watch-max-streams`` slot is given back, and the
    stream logged, in a ``finally``.
    """

    __slots__ = ("_env", "_events", "_writer")

    def __init__(self, env: ConnectionEnv, writer: Writer) -> None:
        self._env = env
        self._writer = writer
        self._events: dict[int, tuple[Stream, trio.CancelScope]] = {}

    async def serve(
        self, st: Stream, plan: Plan, draining: bool, ended: Callable[[int, bool], None]
    ) -> bool:
        """The event stream on ``st``; False, with nothing sent, past
        ``--watch-max-streams`` (the caller answers 503).  Each event
        stream holds a slot of that budget while it runs; while it holds
        one, the connection is out of ``--max-connections`` (as for
        HTTP/1.1, :meth:`ConnectionTask._stream`).  A HEAD gets the head
        alone.  ``draining``: the connection sent its GOAWAY (the stream
        ends at once).  ``ended(sent, counted)`` logs the stream when it
        ends, however: ``sent`` its DATA bytes; ``counted`` False for an
        event stream, which counts itself as completed only when it ended
        cleanly (a HEAD is an ordinary response: counted)."""
        live = self._env.handler.hooks.events
        if live is None or not plan.send_body:
            await self._writer.respond(st, plan, NO_BODY)  # HEAD: the head alone
            ended(0, True)
            return True
        if not live.slots.take(self):
            return False
        sent = [-1]  # -1 until the head went out: nothing to log before
        try:
            await self._run(st, plan, live, draining, sent)
        finally:
            live.slots.give(self)
            if sent[0] >= 0:
                ended(sent[0], False)
        return True

    async def _run(
        self, st: Stream, plan: Plan, live: EventSource, draining: bool, sent: list[int]
    ) -> None:
        writer = self._writer
        if st.state in STOPPED or writer.closed:
            return
        try:
            writer.frames.headers(st.sid, response_fields(plan.status, plan.headers), False)
        except h2.exceptions.ProtocolError:
            return  # the stream was closed meanwhile
        st.to(EVENTS)
        st.status = plan.status
        sent[0] = 0
        writer.pull()
        env = self._env
        timeout = env.config.conn.write_timeout
        conn = writer.frames.conn

        async def send(data: bytes) -> None:
            await trio.lowlevel.checkpoint_if_cancelled()  # ended or reset: no more DATA
            deadline = trio.current_time() + timeout
            while data:
                window = min(conn.local_flow_control_window(st.sid), conn.max_outbound_frame_size)
                if window > 0:
                    conn.send_data(st.sid, data[:window])
                    writer.allowance.earn(min(window, len(data)))
                    sent[0] += min(window, len(data))
                    data = data[window:]
                    writer.pull()
                    deadline = trio.current_time() + timeout
                    continue
                if trio.current_time() >= deadline:
                    env.stats.timeouts.write += 1
                    writer.reset(st, ErrorCodes.CANCEL)
                    scope.cancel()
                    return
                # A WINDOW_UPDATE or SETTINGS frame wakes the writer: wait
                # for that wake-up; while the writer is busy (its event
                # already set), look again shortly.
                wake = writer.wake
                with trio.move_on_at(min(deadline, trio.current_time() + 0.05)):
                    if wake.is_set():
                        await trio.sleep_forever()
                    await wake.wait()

        with trio.CancelScope() as scope:
            self._events[st.sid] = (st, scope)
            try:
                if draining or env.draining:
                    self.end_all()
                await live.serve_client(send, b"")
            finally:
                del self._events[st.sid]
        if st.state in DONE:
            env.stats.responses.completed += 1

    def end_all(self) -> None:
        """End every event stream now (empty DATA with END_STREAM), so that
        each is complete before a GOAWAY queued after this; their tasks
        stop at their next checkpoint."""
        writer = self._writer
        for st, scope in self._events.values():
            scope.cancel()
            if st.state != EVENTS or writer.closed:
                continue
            try:
                writer.frames.conn.end_stream(st.sid)
            except h2.exceptions.ProtocolError:
                continue  # closed on h2's side meanwhile
            st.to(COMPLETE)
        writer.pull()
