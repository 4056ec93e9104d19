"""An HTTP/2 stream's answer: request head -> RequestFacts -> the request
steps -> (Plan, Body).

The request steps are :mod:`serverio.pipeline.request`'s, shared with
HTTP/1.1 (:class:`~serverio.net.connection.ConnectionTask`); what is HTTP/2's
own is here: the facts from a :class:`~serverio.wire.h2head.RequestHead`
(431, 405 for CONNECT, ``:authority`` and ``:path`` checks), the cap on body
descriptors (``--h2-max-open-files``), and :func:`response_fields`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import NamedTuple

import trio

from ..config import Config
from ..errors import HTTPError
from ..http.core import RequestFacts
from ..http.target import parse_target
from ..pipeline.driver import Io, drive
from ..pipeline.exchange import Exchange, Final, Need
from ..pipeline.handler import R
from ..pipeline.hooks import RawHead
from ..pipeline.request import client_for, failed
from ..pipeline.stages import begin
from ..wire.fields import Fields, check_host, scan_fields
from ..wire.h2head import RequestHead, path_bytes_ok
from .env import ConnectionEnv
from .h2body import H2Body
from .h2state import Stream


def _raw(st: Stream) -> RawHead:
    """The stream's head as received, for the proxy hook (off the warm path)."""
    head = st.head
    return RawHead(head.fields, b"2", head.authority)


__all__ = ["Started", "StreamAnswer", "run_at_once"]


class Started(NamedTuple):
    """A stream's exchange after its first step (:meth:`StreamAnswer.start`):
    ``final`` when it needs no wait, else ``state`` and ``need`` to drive;
    the request content a stage may read (None: none, or left unread), the
    fields the access log reads and who the client is."""

    final: Final | None
    state: Exchange | None
    need: Need | None
    content: H2Body | None
    fields: Fields | None
    client: Callable[[], str]


async def run_at_once(run: Callable[[], Awaitable[R]], watch_late: bool) -> R:
    """How a stream waits for a step: just await it.  A reset
    (RST_STREAM) cancels the stream's scope, which cancels this wait."""
    return await run()


class StreamAnswer:
    """The answers of one connection's streams, under its cap on body
    descriptors (``--h2-max-open-files``)."""

    __slots__ = ("_client", "_env", "_files", "_last", "_tls")

    def __init__(self, env: ConnectionEnv, client: Callable[[], str], tls: bool) -> None:
        self._env = env
        self._client = client
        self._tls = tls  # --hsts: on TLS only
        # Body descriptors this connection holds at most (ops/fdlimit.py
        # counts 1 + this per connection); see answer.
        self._files = trio.Semaphore(env.config.h2.h2_max_open_files)
        # The last facts made, with what they were made from (see facts).
        self._last: tuple[RequestHead, bool, Config, RequestFacts, Fields] | None = None

    def facts(self, st: Stream) -> tuple[RequestFacts, Fields]:
        """The same RequestFacts an HTTP/1.1 request head gives, and the
        fields the access log reads."""
        head = st.head
        cfg = self._env.config
        last = self._last
        # The facts are a pure function of the head, whether content may
        # follow, the configuration and the connection (TLS or not), all
        # immutable, and so are the facts: a stream with the same head (the same object:
        # serverio.wire.h2head.RequestHeads gives a repeated block's head
        # again) gets the same ones.  A refused head is never remembered.
        if last is not None and last[0] is head and last[1] is st.open_body and last[2] is cfg:
            return last[3], last[4]
        if head.size > cfg.conn.max_head_size:
            raise HTTPError(431, "request header list too large")
        if head.method == b"CONNECT" or head.path is None:
            raise HTTPError(405, "CONNECT is not supported")  # not a proxy
        if head.authority is not None:
            check_host(head.authority)
        if not path_bytes_ok(head.path):
            raise HTTPError(400, "invalid byte in :path")  # as h11 refuses it in HTTP/1.1
        f = scan_fields(head.fields, head.authority, cfg.site.check_hosts)
        target = parse_target(head.method, head.path, max_size=cfg.conn.max_target_size)
        facts = RequestFacts(
            method=head.method,
            target=target,
            keep_alive=True,
            has_body=st.open_body,
            tls=self._tls,
            extra=f.extra,
            **f.values,
        )
        self._last = (head, st.open_body, cfg, facts, f)
        return facts, f

    def start(self, st: Stream, now: float) -> Started:
        """The exchange's first step (:func:`~serverio.pipeline.stages.begin`),
        which awaits nothing: the answer when it needs no wait (a warm file,
        an error, a 304), else the state and need :meth:`answer` drives.
        A free descriptor slot is taken up front and given back at once
        when the answer holds no descriptor (see :meth:`answer`)."""
        env = self._env
        cfg = env.config
        fields: Fields | None = None
        client = self._client
        try:
            req, fields = self.facts(st)
            if cfg.site.proxy_networks:  # --trusted-proxies; else no call at all
                client = client_for(cfg, self._client, req)
            handler = env.handler
            body = st.body
            if body is not None and (
                handler.receive is None
                and handler.write is None
                and handler.proxy is None
                and not handler.hooks.stages  # a feature's stage may read it (a form)
                and not handler.hooks.first
            ):
                body = None  # no stage reads it
            slotless = not self._take_file_now(st)
            state, out = begin(env, req, now, body is not None, slotless)
        except HTTPError as exc:
            state, out = None, failed(env, exc, now, st.head.method == b"HEAD")
            body = None
        if type(out) is Final:
            if out.body.fd < 0:
                self.give_file(st)
            return Started(out, None, None, body, fields, client)
        assert state is not None and isinstance(out, Need)
        return Started(None, state, out, body, fields, client)

    async def answer(
        self, st: Stream, first: Started
    ) -> tuple[Final, Fields | None, Callable[[], str]]:
        """The exchange (:meth:`start`, then
        :func:`~serverio.pipeline.driver.drive`) under the connection's cap
        on body descriptors.

        A body streamed from a file keeps its descriptor until it is sent,
        however long the client keeps its window closed, so a stream may
        hold one only with one of ``h2_max_open_files`` slots: what
        ``ops/fdlimit.py`` budgets, whatever the client does.  A free slot
        is taken up front and given back at once when the answer holds no
        descriptor.  At the cap the exchange runs ``slotless``: what needs
        no descriptor (a warm file, a small file, an error, a 304, the
        site's routing, a proxied or written answer) is answered without a
        slot; before the handler's need is awaited, or when an inline
        answer would hold a descriptor (dropped: the step is synchronous,
        so at most one such descriptor exists in the process), it raises
        the :class:`~serverio.pipeline.exchange.FileSlot` need, which waits
        for one.  A stream's content is read only where a stage may read
        it (a receive step, a write, the proxy); otherwise it is left
        unread (the stream is reset NO_ERROR after the answer).

        Cancellation handling: a reset while waiting for a slot cancels the
        wait with nothing held; the slot a stream holds is given back with
        :meth:`give_file` after its body is closed (the stream task's
        ``finally``).
        """
        answer, state, need, body, fields, client = first
        if answer is None:
            assert state is not None and need is not None

            async def slot() -> None:
                await self._files.acquire()
                st.file_slot = True

            try:
                io = Io(client, run_at_once, body, _raw(st), slot)
                done = await drive(state, need, io)
                assert done is not None  # run_at_once never gives None
                answer = done
            except HTTPError as exc:
                answer = failed(self._env, exc, state.now, st.head.method == b"HEAD")
            if answer.body.fd < 0:
                self.give_file(st)
        return answer, fields, client

    def _take_file_now(self, st: Stream) -> bool:
        try:
            self._files.acquire_nowait()
        except trio.WouldBlock:
            return False
        st.file_slot = True
        return True

    def give_file(self, st: Stream) -> None:
        """Give back the descriptor slot ``st`` holds, if any."""
        if st.file_slot:
            st.file_slot = False
            self._files.release()
