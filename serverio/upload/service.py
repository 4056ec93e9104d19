"""Uploads: PUT and DELETE under the root (``--upload``; issue 29).

:class:`Uploads` is the write step the server installs as the pipeline's
``write`` hook (:attr:`serverio.pipeline.hooks.Hooks.write`) when
``--upload`` is given; without it the handler has no write step and the
read path makes no call for it (an attribute test).

One write, in order: the target is resolved from the request path; the
access hook is asked on it (``Kind.WRITE``: the writable paths, then the
auth rules) before a byte of content is read (so a refused upload sends
no ``100 Continue``); a PUT with ``Content-Range`` is 400 (RFC 9110
§9.3.4: no partial PUT); the ``--max-uploads`` budget and the client's
share of it (503; :mod:`serverio.upload.slots`, which also holds the
content to ``--min-upload-rate``: 408); the declared size (413); the
target's directory is opened under containment and its current file
looked at (409, 403, 507 for too little free space); the
preconditions are decided on that file (412); then the content streams
into a temporary file, chunk by chunk, hashed as it goes (413 past
``--max-upload-size``, 400 for a ``Content-Digest`` / ``Repr-Digest``
mismatch), and the commit renames it into place.  Every blocking step
runs in the ``write`` pool (its own limiter and bounded queue: 503 when
saturated).  A committed write forgets the file's warm-cache entry; the
other caches key on the file's identity, which a write changes.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Final

import trio

from ..concurrency.blocking import Pool, PoolSaturated, run_blocking
from ..config import Config
from ..fs.filecache import FileCache
from ..fs.mounts import mount_table
from ..fs.opener import ContainedRoot
from ..fs.prepare import stat_facts
from ..fs.writer import (
    WriteJob,
    WriteRefused,
    current_bytes,
    delete_file,
    make_parents,
    place_write,
    sweep,
)
from ..http.access import AccessTarget, Kind, Right
from ..http.core import ALLOW, FileFacts, Plan, RequestFacts, content_digest, error_plan
from ..http.extra import fields_of
from ..http.negotiate import SIDECAR_SUFFIX
from ..http.target import Target, is_write_temp
from ..observe.stats import Stats
from ..pipeline.hooks import NO_RULES, Admit, WriteContent
from ..site.rules import match_path
from ..writes.digest import DigestVerifier, parse_digests
from .decide import (
    REFUSAL_STATUS,
    created_plan,
    cross_site,
    deleted_plan,
    errno_status,
    has_preconditions,
    is_create_only,
    precondition_status,
    refusal_problem,
    replaced_plan,
    too_large_problem,
)
from .fields import CONTENT_DIGEST, CONTENT_RANGE, REPR_DIGEST
from .form import post_form
from .resolved import Resolving
from .slots import ClientSlots, PacedContent, client_share

__all__ = ["ALLOW_WRITES", "CLEANUP_SECONDS", "CommitGate", "Uploads", "allow_writes"]

log = logging.getLogger("serverio")

# With --upload: PUT, DELETE and the form's POST too (RFC 9110 §10.2.1).
ALLOW_WRITES: Final = ALLOW + b", PUT, DELETE, POST"


def allow_writes(target: Target) -> bytes:
    """The uploads' :data:`~serverio.http.core.Allow`: every path takes
    PUT, DELETE and the form's POST (the step answers a wrong one)."""
    return ALLOW_WRITES


# How long a request's task waits, shielded, for its temporary file to be
# removed (an unlink and two closes; a stuck disk makes the pool's thread
# finish the removal on its own).
CLEANUP_SECONDS: Final = 5.0
# Write threads at most (the pool has min(this, --max-uploads)): each
# upload holds one per step, and a step may wait in fsync, so concurrent
# uploads each need their own for their fsyncs to overlap.
_WORKERS: Final = 16
# A PUT's received chunks go to the pool this many bytes at a time: one
# hop per MiB instead of one per chunk (at most 64 KiB each), so a large
# upload costs the event loop little; memory per upload stays about this.
_WRITE_BATCH: Final = 1 << 20

# A check a write makes right before its commit (WebDAV's locks,
# serverio.dav.service): synchronous, so nothing runs between it and the
# commit's start; a refusal (the temporary is then removed, nothing is
# committed), or the call that ends the commit's mark, made once the
# commit is over (committed or not).
CommitGate = Callable[[], "Plan | Callable[[], None]"]


class Uploads:
    """The write step and its pool; one per server.

    Cancellation handling: every temporary file is removed before the
    request's task ends (``finally``, shielded, bounded by
    :data:`CLEANUP_SECONDS`); if the pool thread writing it was abandoned
    by a cancellation, that thread removes it as its step ends
    (:class:`serverio.fs.writer.WriteJob`).  The ``write`` pool's threads
    are waited for, then abandoned, by the server's lifecycle like every
    other pool's.
    """

    def __init__(
        self,
        config: Config,
        stats: Stats,
        opener: Callable[[], ContainedRoot],
        files: FileCache,
    ) -> None:
        self.config = config
        self.stats = stats
        self.opener = opener
        self.files = files
        pol = config.uploads
        self.pool = Pool("write", min(_WORKERS, pol.max_uploads), pol.max_uploads)
        self.in_flight = 0
        # The per-client share of --max-uploads (serverio.upload.slots).
        self.clients = ClientSlots(client_share(pol.max_uploads, pol.max_uploads_per_client))
        site = config.site
        # Origins the CSRF rule accepts besides this server's (--cors-writes).
        self.write_origins = frozenset(site.cors_origins if site.cors_writes else ())
        # Rules a symlink's resolved target is decided on too (serverio.upload.resolved).
        self.resolving = bool(site.auth or site.writable) or config.users.rights

    # ------------------------------------------------------------ start-up

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Remove the temporaries a killed process left (bounded; in the
        pool, at start-up), then run."""
        older = 2 * max(self.config.conn.body_timeout, 1.0)
        # Every directory a write can land in: the root and each --mount.
        roots = [d for _, d in mount_table(self.config)] or [self.config.root]
        for root in roots:
            try:
                removed = await run_blocking(self.pool, sweep, root, older)
            except (OSError, PoolSaturated) as exc:
                log.warning("upload temporaries not swept in %s: %s", root, exc)
                continue
            if removed:
                log.info("removed %d upload temporar%s", removed, "y" if removed == 1 else "ies")
            self.stats.writes.temps_removed += removed
        yield

    # ------------------------------------------------------------ the step

    async def write(
        self,
        req: RequestFacts,
        content: WriteContent,
        now: float,
        admit: Admit,
        gate: CommitGate | None = None,
    ) -> Plan:
        """The answer to a PUT, DELETE or form POST (the pipeline's
        ``write`` hook).  The request's own shape first (:meth:`_refused`:
        nothing resolved, nothing asked); then the access hook on the
        target (``Kind.WRITE``; none described without site rules, when
        ``admit`` is :data:`~serverio.pipeline.hooks.NO_RULES`).  A form
        POST is written by :func:`serverio.upload.form.post_form` (which
        asks the hook again on each file's own path).  ``gate``: asked
        right before a PUT's or DELETE's commit (WebDAV's locks).

        Cancellation handling: see the class; a cancelled write leaves
        neither a temporary file nor a descriptor, and commits nothing
        it had not committed already.
        """
        form = req.method == b"POST"
        # The fields a write reads, in one pass (a PUT's Content-Range and
        # digests), right after the shape's own look at the target.
        refused = self._refused(req, form, now)
        ranged, sent, represented = fields_of(req, CONTENT_RANGE, CONTENT_DIGEST, REPR_DIGEST)
        if refused is not None:
            return refused
        if admit is not NO_RULES:
            # The rules of where a symlink inside the root leads apply too.
            admit = Resolving.wrap(admit, self.pool, self.opener, now, self.resolving)
            refusal = await admit(_asked(req, form))
            if refusal is not None:
                if req.method != b"DELETE":
                    self.stats.writes.aborted += 1
                return refusal
        if ranged is not None and req.method == b"PUT":
            # RFC 9110 §9.3.4: a server that allows PUT but not partial
            # PUT MUST answer 400 to one with Content-Range (``curl -C``):
            # else the part would replace the whole file.  Nothing read.
            log.info("PUT %s refused: Content-Range (no partial PUT)", req.target.relpath)
            self.stats.writes.aborted += 1
            return error_plan(400, now)
        pol = self.config.uploads
        if self.in_flight >= pol.max_uploads:
            return error_plan(503, now, close=True)
        key = self.clients.take(req.client)
        if key is None:  # this client holds its share of the slots already
            log.info("write to %s refused: --max-uploads-per-client", req.target.relpath)
            return error_plan(503, now, close=True)
        if pol.min_upload_rate and content.declared != 0:
            content = PacedContent(content, pol.min_upload_rate)  # 408 when slower
        self.in_flight += 1
        try:
            if form:
                return await post_form(self, req, content, now, admit)
            if req.method == b"DELETE":
                return await self._delete(req, now, gate)
            return await self._put(req, content, now, gate, admit, _digests(sent, represented))
        except WriteRefused as exc:
            value = exc.refusal.value
            return error_plan(REFUSAL_STATUS[value], now, problem=refusal_problem(value))
        except OSError as exc:
            status = errno_status(exc.errno)
            if status == 500:
                log.error("write of %s failed: %s", req.target.relpath, exc)
            return error_plan(status, now)
        finally:
            self.in_flight -= 1
            self.clients.give(key)

    def _refused(self, req: RequestFacts, form: bool, now: float) -> Plan | None:
        """The refusal a write gets for its own shape, before anything is
        resolved or asked: a collection (409) or a form not posted to one
        (405), a hidden name or an upload's temporary (403), a cross-site
        form (403); else None."""
        target = req.target
        if (not target.segments or target.slash) and not form:
            return error_plan(409, now)  # a collection: not a file to write
        if (target.hidden and not self.config.files.hidden) or is_write_temp(target.segments):
            # A dot name anywhere in the path (RFC 8615's .well-known aside),
            # or an upload's temporary: never written, even with --hidden.
            return error_plan(403, now)
        if form:
            if target.segments and not target.slash:
                return error_plan(405, now, allow=ALLOW_WRITES)  # a form posts to a directory
            if cross_site(req, self.write_origins):
                return error_plan(403, now)  # the CSRF rule (docs/reference/uploads.md)
        return None

    async def _start(self, req: RequestFacts, need: int, create: bool) -> WriteJob:
        """The write's job, placed (and with ``create`` its temporary made)
        in one pool hop (:func:`serverio.fs.writer.place_write`)."""
        pol = self.config.uploads
        min_free = pol.min_free_space + need if pol.min_free_space else 0
        segments = req.target.segments
        if pol.upload_mkdirs and len(segments) > 1:
            # --upload-mkdirs: the missing folders first (as dufs does);
            # without it a missing parent is 409 (RFC 4918 §9.7.1).
            made = await run_blocking(
                self.pool, make_parents, self.opener(), segments[:-1], self.config.files.hidden
            )
            if made:
                self.changed("/".join(segments[:-1]))
        files = self.config.files
        job = functools.partial(
            WriteJob,
            sync=not pol.no_fsync,
            # Past this size the ETag carries no content hash (EtagPolicy).
            hash_max=None if files.etag == "content" else files.small_file_size,
            # --min-free-space as the body grows (a chunked one declares nothing).
            min_free=pol.min_free_space,
        )
        placed: WriteJob = await run_blocking(
            self.pool,
            place_write,
            self.opener(),
            segments,
            files.hidden,
            min_free,
            job,
            create,
            late_close=WriteJob.discard,
        )
        return placed

    async def step(self, job: WriteJob, fn: Callable[..., Any], *args: Any) -> Any:
        return await run_blocking(self.pool, job.run, fn, *args)

    async def _current(self, req: RequestFacts, job: WriteJob) -> FileFacts | None:
        """The current file's facts when a precondition needs them."""
        cur = job.place.current
        if cur is None or not has_preconditions(req):
            return None
        limit = self.config.files.small_file_size
        data = await self.step(job, current_bytes, job.place, limit)
        return stat_facts(cur, self.config, None if data is None else content_digest(data))

    async def _checked(self, req: RequestFacts, job: WriteJob, now: float) -> Plan | None:
        """409 for a directory or special file, 412 for a failed
        precondition, else None."""
        refusal = job.refusal
        if refusal is not None:
            value = refusal.value
            return error_plan(REFUSAL_STATUS[value], now, problem=refusal_problem(value))
        if job.place.current is not None and is_create_only(req):
            return error_plan(412, now)
        current = await self._current(req, job)
        status = precondition_status(req, current, now)
        return None if status is None else error_plan(status, now)

    async def _put(
        self,
        req: RequestFacts,
        content: WriteContent,
        now: float,
        gate: CommitGate | None,
        admit: Admit,
        digests: str | None,
    ) -> Plan:
        limit = self.config.uploads.max_upload_size
        declared = content.declared
        if declared is not None and declared > limit:
            self.stats.writes.aborted += 1
            return error_plan(413, now, close=True, problem=too_large_problem(limit))
        expected = {} if digests is None else parse_digests([digests.encode("latin-1")])
        # Placed, and its temporary made, before a byte of content is read.
        try:
            job = await self._start(req, declared or 0, create=True)
        except BaseException:
            self.stats.writes.aborted += 1
            raise
        committed = False
        try:
            if admit is not NO_RULES:
                # The one right this PUT needs, now that its file is placed:
                # a new name is an upload, an existing file an overwrite.
                right = Right.UPLOAD if job.place.current is None else Right.OVERWRITE
                denied = await admit(AccessTarget((match_path(req.target),), Kind.WRITE, right))
                if denied is not None:
                    return denied
            plan = await self._checked(req, job, now)
            if plan is not None:
                return plan
            verifier = DigestVerifier(expected) if expected else None
            job.check = None if verifier is None else verifier.update
            # Chunks go to the pool in batches (_WRITE_BATCH); the last
            # batch and the commit share one hop.
            batch: list[bytes] = []
            pending = 0
            while (chunk := await content.next_chunk()) is not None:
                if job.written + pending + len(chunk) > limit:
                    return error_plan(413, now, close=True, problem=too_large_problem(limit))
                batch.append(chunk)
                pending += len(chunk)
                if pending >= _WRITE_BATCH:
                    await self.step(job, job.write_all, batch)
                    batch, pending = [], 0
            existed = job.place.current is not None
            verify = None if verifier is None else verifier.verify
            cur = job.place.current
            with _Gated(gate) as refused:
                if refused is not None:
                    return refused  # the temporary is removed below
                # The last batch, the digest check and the commit: one step.
                st: os.stat_result | None = await self.step(
                    job, job.finish, batch, verify, is_create_only(req), has_preconditions(req), cur
                )
            if st is None:
                return error_plan(400, now)  # the content is not what its digest says
            committed = True
        finally:
            if not committed:  # a committed job holds nothing any more
                self.stats.writes.aborted += 1
                await self.settle(job)
        self.changed(req.target.relpath)
        writes = self.stats.writes
        writes.files += 1
        writes.bytes += job.written
        digest = None if job.hasher is None else job.hasher.digest()
        facts = stat_facts(st, self.config, digest)
        if existed:
            return replaced_plan(facts, now)
        return created_plan(facts, req.target.url_path(), now)

    async def _delete(self, req: RequestFacts, now: float, gate: CommitGate | None) -> Plan:
        job = await self._start(req, 0, create=False)
        try:
            if job.place.current is None:
                return error_plan(404, now)
            plan = await self._checked(req, job, now)
            if plan is not None:
                return plan
            with _Gated(gate) as refused:
                if refused is not None:
                    return refused
                cur = job.place.current
                await self.step(job, delete_file, job.place, has_preconditions(req), cur)
            job.done = True
        finally:
            await self.settle(job)
        self.changed(req.target.relpath)
        self.stats.writes.deletes += 1
        return deleted_plan(now)

    async def settle(self, job: WriteJob) -> None:
        """Remove the job's temporary and close what it holds, shielded
        and bounded; the request's task does not end before (unless a
        stuck disk holds the removal past :data:`CLEANUP_SECONDS`: then
        the pool's thread completes it)."""
        writes = self.stats.writes
        token = trio.lowlevel.current_trio_token()

        def removed() -> None:
            def count() -> None:
                writes.temps_removed += 1

            try:
                token.run_sync_soon(count)
            except trio.RunFinishedError:
                pass

        job.removed = removed
        if not job.release():
            return  # nothing held, or the abandoned thread removes it
        if job.temp is None and job.fd < 0:
            job.discard()  # only the directory descriptor: a close, no hop
            return
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + CLEANUP_SECONDS
            try:
                await run_blocking(self.pool, job.discard)
            except PoolSaturated:
                job.discard()  # an unlink and two closes, on the loop: rare
            except OSError as exc:
                log.warning("could not remove an upload temporary: %s", exc)

    def changed(self, relpath: str) -> None:
        """Every cache sees the write at once: the warm-file entry of the
        target (and of the file it is a sidecar of) is forgotten; the
        compression, digest and ETag-hash caches key on the file's
        identity (a write makes a new one) and listings on a fresh scan."""
        self.files.forget(relpath)
        for suffix in SIDECAR_SUFFIX.values():
            if relpath.endswith(suffix):
                self.files.forget(relpath[: -len(suffix)])


def _asked(req: RequestFacts, form: bool) -> AccessTarget:
    """The target a write asks the access hook about first, before its
    file is placed."""
    path = match_path(req.target)
    if req.method == b"DELETE":
        return AccessTarget((path,), Kind.WRITE, Right.DELETE)
    if form:
        # The folder a form posts to: each file and new folder is asked
        # again on its own path (serverio.upload.form).
        return AccessTarget((path,), Kind.WRITE, Right.UPLOAD, also=Right.MKDIR)
    # Whether the file exists is known once it is placed (_put asks again
    # with the one right it needs); either will do until then.
    return AccessTarget((path,), Kind.WRITE, Right.UPLOAD, also=Right.OVERWRITE)


def _digests(sent: str | None, represented: str | None) -> str | None:
    """Content-Digest and Repr-Digest as one list (RFC 9530 §2, §3: both
    name the same bytes, a PUT's content has no content coding)."""
    if sent is None:
        return represented
    return sent if represented is None else sent + ", " + represented


class _Gated:
    """A :data:`CommitGate` around a commit: ``with _Gated(gate) as
    refused`` asks the gate on entry (``refused``: its refusal, or None:
    go on) and ends the commit's mark on exit, whatever happened."""

    __slots__ = ("done", "gate")

    def __init__(self, gate: CommitGate | None) -> None:
        self.gate = gate
        self.done: Callable[[], None] | None = None

    def __enter__(self) -> Plan | None:
        if self.gate is None:
            return None
        got = self.gate()
        if isinstance(got, Plan):
            return got
        self.done = got
        return None

    def __exit__(self, *exc: object) -> None:
        if self.done is not None:
            self.done()
