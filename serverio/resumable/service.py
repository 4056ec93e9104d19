"""Resumable uploads: a write stage ahead of the uploads' (``Hooks.write_ahead``).

:class:`Resumable` answers the requests
:func:`~serverio.resumable.protocol.classify` names as resumable ones; its
stage (:meth:`Resumable.route`) comes before the uploads' (or WebDAV's)
write step, which answers every other write.  Every resumable request
carries :data:`MARKS` (an ``Upload-Complete`` or ``Tus-Resumable`` field,
or a path under the upload resources' prefix): the stage list tests them
as data, so a plain PUT, DELETE or form POST never calls in here.
The decisions are :mod:`serverio.resumable.protocol`'s (pure); what is
here is the order of the waits: the access hook on the *target* path
(``Kind.WRITE``, ``"put"``, as a PUT asks it: creating, appending,
completing and cancelling are writes of that file), the write slots
(``--max-uploads`` counts active appends), the upload's files and lock
(:mod:`serverio.resumable.store`, in the ``write`` pool), the content
(:mod:`serverio.resumable.transfer`), the commit.

Concurrency (the draft's §"Concurrency"): an upload is held by one
request at a time (the lock on its data file, which every replica on the
same storage sees).  A new request for an upload that a request of this
process still holds (a client that gave up on a stalled connection)
cancels the old one first, as the draft recommends; one held by another
replica is waited for up to :data:`TAKEOVER_SECONDS`, then 503.

Cancellation handling: a request cancelled at any await (client gone,
``RST_STREAM``, shutdown) keeps every byte that reached the file, fsyncs
it and closes its descriptors before it ends
(:meth:`~serverio.resumable.transfer.Holding.settle`); its write slot and
client share are given back in ``finally``; the sweeper is a task of the
server's nursery (:meth:`Resumable.running`) and holds nothing between
passes.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Final

import trio

from ..concurrency.blocking import PoolSaturated, run_blocking
from ..config import Config
from ..fs.mounts import mount_table
from ..fs.opener import ContainedRoot
from ..fs.writer import WriteRefused
from ..http.access import AccessTarget, Kind, Right
from ..http.core import Plan, RequestFacts, error_plan
from ..http.target import Target, is_write_temp
from ..model import ChunkSource
from ..pipeline.hooks import Admit, Marks, WriteContent, WriteRoute
from ..signing import Signer, TokenError
from ..site.rules import match_path
from ..upload.decide import REFUSAL_STATUS, errno_status
from ..upload.resolved import Resolving
from ..upload.service import Uploads
from ..upload.slots import PacedContent
from .flows import Flows
from .protocol import (
    PURPOSE,
    RESOURCE_PREFIX,
    TUS_RESUMABLE,
    TUS_VERSION,
    Ask,
    Op,
    Policy,
    Refuse,
    classify,
    options_plan,
    refusal_plan,
)
from .store import Busy, Held, Missing, open_upload, sweep_uploads

__all__ = ["MARKS", "METHODS", "TAKEOVER_SECONDS", "Resumable"]

log = logging.getLogger("serverio")

# What every resumable request carries (classify answers None without):
# the draft's Upload-Complete, tus's Tus-Resumable, or an upload
# resource's path.  The registered names of the fields (protocol.py).
MARKS: Final = Marks(frozenset(("upload-complete", "tus-resumable")), RESOURCE_PREFIX)
# The methods of resumable requests (creation, append, offset, cancel,
# discovery): a GET of an upload resource is not one of them (the read
# path answers it).
METHODS: Final = frozenset((b"PATCH", b"HEAD", b"OPTIONS", b"PUT", b"POST", b"DELETE"))

# A flow run under a write slot.
_Run = Callable[[RequestFacts, Ask, WriteContent, float, Admit], Awaitable[Plan]]

# How long a request waits for an upload another request holds (after
# cancelling it when it is this process's), then 503.
TAKEOVER_SECONDS: Final = 3.0
_RETRY_EVERY: Final = 0.05
# The sweeper's pace: at most this long between passes (and a quarter of
# --upload-expiry when that is shorter).
SWEEP_EVERY: Final = 600.0


class Resumable(Flows):
    """The resumable-upload write stage (one per server)."""

    def __init__(self, config: Config, uploads: Uploads, signer: Signer) -> None:
        pol = config.uploads
        res = config.resumable
        policy = Policy(pol.max_upload_size, res.upload_expiry, res.upload_chunk_size)
        super().__init__(config, uploads, signer, policy)

    # ------------------------------------------------------------ routing

    def route(self) -> WriteRoute:
        """Its write stage, ahead of the uploads' (:data:`METHODS`, for a
        request with :data:`MARKS` that :meth:`takes`)."""
        return WriteRoute(self.write, METHODS, self.takes, MARKS, "resumable")

    def takes(self, req: RequestFacts) -> bool:
        """Is ``req`` a resumable request (asked only for one of
        :data:`METHODS` that carries :data:`MARKS`)?"""
        return classify(req) is not None

    async def write(
        self, req: RequestFacts, content: WriteContent, now: float, admit: Admit
    ) -> Plan | tuple[Plan, ChunkSource]:
        """The answer to a resumable request (one :meth:`takes` took)."""
        ask = classify(req)
        if ask is None:
            return error_plan(404, now)  # not one (the stage takes none such)
        if ask.tus and ask.op is not Op.OPTIONS and TUS_RESUMABLE.of(req) != TUS_VERSION:
            # tus 1.0 core: an unsupported Tus-Resumable is 412 with Tus-Version.
            return refusal_plan(Refuse(412, "tus version"), True, self.policy, now)
        if ask.op is Op.OPTIONS:
            return options_plan(self.policy, now)
        plan = await self._answer(req, ask, content, now, admit)
        if req.method == b"HEAD" and plan.send_body:
            plan = dataclasses.replace(plan, send_body=False)  # RFC 9110 §9.3.2
        return plan

    async def _answer(
        self, req: RequestFacts, ask: Ask, content: WriteContent, now: float, admit: Admit
    ) -> Plan:
        admit = Resolving.wrap(admit, self.uploads.pool, self.opener, now, self.uploads.resolving)
        try:
            if ask.op is Op.CREATE:
                return await self._slotted(req, ask, content, now, admit, self.create)
            return await self._resource(req, ask, content, now, admit)
        except WriteRefused as exc:
            status = REFUSAL_STATUS[exc.refusal.value]
            return refusal_plan(Refuse(status, exc.refusal.value), ask.tus, self.policy, now)
        except PoolSaturated:
            return error_plan(503, now, close=True)
        except OSError as exc:
            status = errno_status(exc.errno)
            if status == 500:
                log.error("resumable upload failed: %s", exc)
            return refusal_plan(Refuse(status, "filesystem"), ask.tus, self.policy, now)

    def opener(self) -> ContainedRoot:
        return self.uploads.opener()

    async def _resource(
        self, req: RequestFacts, ask: Ask, content: WriteContent, now: float, admit: Admit
    ) -> Plan:
        """HEAD, PATCH or DELETE of an upload resource: its token opened,
        the access hook asked on its target, the upload held."""
        try:
            relpath, upload_id = self.signer.open(PURPOSE, ask.token, now).fields
        except (TokenError, ValueError) as exc:
            expired = isinstance(exc, TokenError) and exc.kind == "expired"
            status = 410 if expired and ask.tus else 404
            return refusal_plan(Refuse(status, "upload token"), ask.tus, self.policy, now)
        target = Target(tuple(relpath.split("/")), False, None)
        refusal = await admit(
            AccessTarget((match_path(target),), Kind.WRITE, Right.UPLOAD, also=Right.OVERWRITE)
        )
        if refusal is not None:
            return refusal
        if ask.op is Op.APPEND:
            run = self._holding_append(target, upload_id)
            return await self._slotted(req, ask, content, now, admit, run)
        try:
            held = await self.hold(target, upload_id)
        except Missing:
            return refusal_plan(Refuse(404, "no such upload"), ask.tus, self.policy, now)
        except Busy:
            return error_plan(503, now, close=True)
        return await self.offset_or_cancel(ask, held, now)

    def _holding_append(self, target: Target, upload_id: str) -> _Run:
        async def run(
            req: RequestFacts, ask: Ask, content: WriteContent, now: float, admit: Admit
        ) -> Plan:
            try:
                held = await self.hold(target, upload_id)
            except Missing:
                return refusal_plan(Refuse(404, "no such upload"), ask.tus, self.policy, now)
            except Busy:
                return error_plan(503, now, close=True)
            return await self.append(req, ask, content, now, held)

        return run

    async def _slotted(
        self,
        req: RequestFacts,
        ask: Ask,
        content: WriteContent,
        now: float,
        admit: Admit,
        run: _Run,
    ) -> Plan:
        """``run`` under a write slot (``--max-uploads``) and the client's
        share of them (``--max-uploads-per-client``): 503 past either."""
        target = req.target
        if ask.op is Op.CREATE and req.method == b"PUT":
            if not target.segments or target.slash:
                return error_plan(409, now)  # a collection: not a file to write
            if (target.hidden and not self.config.files.hidden) or is_write_temp(target.segments):
                return error_plan(403, now)
        uploads = self.uploads
        if uploads.in_flight >= self.config.uploads.max_uploads:
            return error_plan(503, now, close=True)
        key = uploads.clients.take(req.client)
        if key is None:
            return error_plan(503, now, close=True)
        rate = self.config.uploads.min_upload_rate
        if rate and content.declared != 0:
            content = PacedContent(content, rate)  # 408 when slower (--min-upload-rate)
        uploads.in_flight += 1
        try:
            return await run(req, ask, content, now, admit)
        finally:
            uploads.in_flight -= 1
            uploads.clients.give(key)

    async def hold(self, target: Target, upload_id: str) -> Held:
        """The upload, locked for this request: a request of this process
        holding it is cancelled first; another replica's is waited for
        (:data:`TAKEOVER_SECONDS`), then :class:`Busy`."""
        old = self.holders.get(upload_id)
        if old is not None:
            old.cancel()
        deadline = trio.current_time() + TAKEOVER_SECONDS
        hidden = self.config.files.hidden
        sync = not self.config.uploads.no_fsync
        while True:
            try:
                held: Held = await run_blocking(
                    self.uploads.pool,
                    open_upload,
                    self.opener(),
                    target.segments,
                    upload_id,
                    hidden,
                    sync,
                    late_close=Held.close,
                )
                return held
            except Busy:
                if trio.current_time() >= deadline:
                    raise
            await trio.sleep(_RETRY_EVERY)

    # ------------------------------------------------------------ sweeper

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The sweeper of expired uploads, a task of the server's nursery:
        a first pass at start-up (it also counts what each client holds,
        for ``--max-incomplete-per-client``), then one every
        min(:data:`SWEEP_EVERY`, ``--upload-expiry`` / 4) seconds."""
        await self.sweep(first=True)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._sweeping)
            try:
                yield
            finally:
                nursery.cancel_scope.cancel()

    async def _sweeping(self) -> None:
        every = min(SWEEP_EVERY, max(self.policy.expiry / 4, 0.25))
        while True:
            await trio.sleep(every)
            await self.sweep()

    async def sweep(self, first: bool = False) -> int:
        """One pass over every root (the root and each ``--mount``)."""
        roots = [d for _, d in mount_table(self.config)] or [self.config.root]
        orphan_after = 2 * max(self.config.conn.body_timeout, 1.0) + 60.0
        removed = 0
        for root in roots:
            try:
                if first:
                    self.quota.rebuild(await run_blocking(self.uploads.pool, _scan, root))
                gone = await run_blocking(
                    self.uploads.pool, sweep_uploads, root, time.time(), orphan_after
                )
            except (OSError, PoolSaturated) as exc:
                log.warning("resumable uploads not swept in %s: %s", root, exc)
                continue
            for client, size in gone:
                self.quota.release(client, size)
            removed += len(gone)
        if removed:
            log.info("removed %d expired resumable upload%s", removed, "" if removed == 1 else "s")
            self.uploads.stats.writes.temps_removed += removed
        return removed


def _scan(root: str) -> list[tuple[str, int]]:
    from .store import scan_uploads

    now = time.time()
    return [
        (info.client, info.length if info.length is not None else size)
        for _, _, info, size in scan_uploads(root)
        if info.expires > now
    ]
