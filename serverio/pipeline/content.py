"""Content follow-ups: listings, on-the-fly compression, representation digests.

The decision after the resolution hop (:mod:`serverio.model.decide`, over
the facts :mod:`serverio.fs.prepare` gathered in one round of syscalls)
decides everything it can; what needs CPU or a directory scan it leaves as
a follow-up on the :class:`~serverio.model.Prepared`.  This module
orchestrates those on the trio thread and does no file I/O itself:

* the cheap part inline: cache lookups, the pure decisions
  (:func:`serverio.http.core.decide_file`, :mod:`serverio.http.listing`);
* the expensive part in the ``work`` pool through
  :func:`~serverio.run_blocking`, never on the event loop: directory scans,
  compression and hashing, the blocking functions of :mod:`serverio.fs.jobs`.

A full work pool degrades rather than fails where it can: a listing is a
503 (like the fs pool), a compression miss is served as identity, a digest
miss omits the header; each is counted in :class:`~serverio.Stats`.

Every blocking function it runs receives an :class:`~serverio.fs.jobs.OwnedFd`
and closes its descriptor itself, exactly once, even when its caller has
been cancelled and the thread abandoned.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Final

from ..concurrency.blocking import Pool, run_blocking
from ..concurrency.flight import SingleFlightCache
from ..config import Config
from ..errors import HTTPError
from ..fs.filecache import HashStore
from ..fs.hide import hide_rules
from ..fs.jobs import (
    OwnedFd,
    Scan,
    compress_file,
    hash_bytes,
    hash_file,
    hash_for_etag,
    scan_listing,
)
from ..fs.opener import ContainedRoot
from ..fs.readme import read_readme
from ..http.codecs import compress_bytes
from ..http.core import RequestFacts, decide_file, decide_generated
from ..http.listing import (
    NO_RIGHTS,
    Entry,
    Listing,
    ListingQuery,
    PageRights,
    entries_digest,
    listing_csp,
    parse_listing_query,
    render_listing,
)
from ..http.negotiate import parse_query, prefers_json, prefers_text, repr_digest_field
from ..http.readme import README_MAX, README_NAMES, Readme, with_readme
from ..http.select import digest_applies
from ..model import Body, FollowUps, Identity, Opened, Reason, errno_reason
from ..model.decide import identity_fallback
from ..model.reasons import reason_status
from ..observe.stats import Stats
from .search import SearchStream, search_plan

if TYPE_CHECKING:
    from ..model import Prepared

# OwnedFd stays importable from here: serverio.live.service hands one to
# its blocking reads.
__all__ = ["ContentService", "OwnedFd"]

# Identity of the bytes a cached value describes: (dev, ino, size, mtime_ns,
# ctime_ns) of the file (or sidecar) + content coding (+ digest algorithm).
log = logging.getLogger("serverio")

# Identity (serverio.model) = (dev, ino, size, mtime_ns, ctime_ns).
CompressKey = tuple[Identity, str]
DigestKey = tuple[Identity, str, str]
# A rendered listing: (dev, ino) of the directory, the path it was reached
# by (title, breadcrumbs), the query (format, sort, order) and the digest of
# the scanned entries (serverio.http.listing.entries_digest).  The hidden
# policy and the entry limit are the server's, the same for every key.
ListingKey = tuple[int, int, tuple[str, ...], ListingQuery, bytes]
_LISTING_OVERHEAD: Final = 512

# Digests are tiny; their cache is bounded at this many bytes of values
# (each weighs its digest plus a fixed overhead): ~20,000 entries.
DIGEST_CACHE_BYTES: Final = 4 * 1024 * 1024
_DIGEST_OVERHEAD: Final = 160


# ------------------------------------------------------------------ service


def _dup(fd: int) -> OwnedFd | None:
    try:
        return OwnedFd(os.dup(fd))
    except OSError:
        # EMFILE/ENFILE: the job cannot run; its waiters fall back (identity,
        # or no digest) instead of failing the request.
        return None


async def _nothing() -> bytes | None:
    return None


JobMaker = Callable[[], Callable[[], Awaitable[bytes | None]]]


def _job_maker(
    work: Pool,
    fd: int,
    data: bytes | None,
    on_bytes: Callable[[bytes], bytes | None],
    on_file: Callable[[OwnedFd], bytes | None],
) -> JobMaker:
    """The single-flight job of a follow-up that reads a representation:
    ``on_bytes`` over ``data`` when it is in memory, else ``on_file`` over a
    duplicate of the requester's descriptor, taken when the job starts
    (while the requester's is still open: the requester may give up and
    close its own while the job runs for everyone else).

    Cancellation handling: the job's blocking call is abandoned like any
    pooled call; a duplicate the thread never claimed is closed here.
    """

    def make_job() -> Callable[[], Awaitable[bytes | None]]:
        if data is not None:
            body = data

            async def bytes_job() -> bytes | None:
                return await run_blocking(work, on_bytes, body)

            return bytes_job
        owned = _dup(fd)
        if owned is None:
            return _nothing

        async def file_job() -> bytes | None:
            try:
                return await run_blocking(work, on_file, owned)
            finally:
                owned.release()  # a no-op if the thread claimed it

        return file_job

    return make_job


def _directory(prepared: Prepared) -> OwnedFd:
    """The listed directory's descriptor, moved out of what ``prepared``
    holds open (its ``Opened``) with no await: the caller owns it now."""
    opened = prepared.opened
    assert opened is not None
    fd, opened.fd = opened.fd, -1
    return OwnedFd(fd)


def _errno_status(exc: OSError) -> int:
    """The status of a failed scan: the filesystem's reason, mapped by the
    one table (serverio.model.reasons); an unexpected errno is logged."""
    reason = errno_reason(exc.errno)
    if reason is Reason.FAILED:
        log.error("directory scan failed: %s", errno.errorcode.get(exc.errno or 0, "?"))
    return reason_status(reason)


class ContentService:
    """The follow-up caches (compression, digests, listings) and the logic that fills
    and reads them; one per server, which hands in the ``work`` pool and
    the root opener (called when a scan needs it)."""

    def __init__(
        self, config: Config, stats: Stats, work: Pool, opener: Callable[[], ContainedRoot]
    ) -> None:
        self.config = config
        self.stats = stats
        self.work = work
        self.opener = opener
        cfg = config
        self.compressed: SingleFlightCache[CompressKey, bytes] = SingleFlightCache(
            "compression", cfg.content.compress_cache_size, len
        )
        self.digests: SingleFlightCache[DigestKey, bytes] = SingleFlightCache(
            "digest", DIGEST_CACHE_BYTES, lambda d: len(d) + _DIGEST_OVERHEAD
        )
        # Content hashes for ETags, read by the preparation step from any
        # thread (serverio.fs.prepare); filled there for small files and by
        # the jobs below for large ones.
        self.hashes = HashStore()
        # ETag hashes of large files: the flights only (one job per
        # identity at a time); the results go to self.hashes, which the
        # preparation step reads from any thread.
        # (Capacity 0: nothing stored here, so an evicted hash is recomputed.)
        self.etag_jobs: SingleFlightCache[Identity, bytes] = SingleFlightCache("etag_hash", 0, len)
        # Rendered listings, shared: every reader of one listing (a slow one
        # holds its body for --write-timeout) points at the same bytes.
        self.listings: SingleFlightCache[ListingKey, Listing] = SingleFlightCache(
            "listing", cfg.content.listing_cache_size, lambda v: len(v[0]) + _LISTING_OVERHEAD
        )
        # The site's access rules on listed names (serverio.site.service:
        # Site.visible_entries), when it has auth rules: the entries this
        # request may see, from the request, the directory's segments and
        # what the scan found.
        self.visible: Callable[[RequestFacts, tuple[str, ...], list[Entry]], list[Entry]] | None = (
            None
        )
        # With --upload (or --webdav): what this request may do on the
        # page: upload, new folder, delete / rename / move each entry (the
        # access hook's answers, serverio.site.pagerights; without site
        # rules what the write features offer).  None: read-only, never asked.
        self.rights: Callable[[RequestFacts, list[Entry]], PageRights] | None = None
        # The server has users (the login feature): listings show the
        # account corner (http.listing.render_html's ``account``).
        self.account = False
        # --hide: names left out of listings and searches (serverio.fs.hide).
        self.hide = hide_rules(config.files.hide, config.files.hide_tables)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The job nurseries of the caches, for the server's lifetime.

        Cancellation handling: leaving the block cancels every job still
        running; their threads are abandoned and close their own
        descriptors when they end.
        """
        async with (
            self.compressed.running(),
            self.digests.running(),
            self.listings.running(),
            self.etag_jobs.running(),
        ):
            yield

    # Finishing a follow-up makes a new Prepared (the value is immutable; its
    # Opened, what it holds open, is handed on): finish_cached() does what
    # the caches can answer without waiting, finish() the rest, from where
    # the other stopped.

    def finish_cached(self, prepared: Prepared, req: RequestFacts, now: float) -> Prepared:
        """The follow-ups the caches alone can finish, done (no await, no
        thread): the hot path, a compressed or digest cache hit costs a
        dict lookup.  ``todo`` None in what it returns: finished; else
        what must wait (a listing scan, a cache miss), for :meth:`finish`.
        """
        todo = prepared.todo
        assert todo is not None
        if todo.hash_job:
            self._start_etag_hash(prepared)
            todo = todo._replace(hash_job=False)
        if todo.listing:
            return prepared._replace(todo=todo)
        if todo.compress:
            data = self.compressed.get(self._compress_key(prepared, todo))
            if data is None:
                return prepared._replace(todo=todo)
            prepared, todo = self._use_compressed(prepared, todo, req, now, data)
        if todo.digest and digest_applies(prepared.plan):
            digest = self.digests.get(self._digest_key(prepared, todo))
            if digest is None:
                return prepared._replace(todo=todo)
            prepared = self._use_digest(prepared, todo, digest)
        return self._done(prepared)

    async def finish(self, prepared: Prepared, req: RequestFacts, now: float) -> Prepared:
        """``prepared`` with its remaining follow-ups carried out (``todo``
        None): a new value, holding what ``prepared`` held open.

        Cancellation handling: the caller owns ``prepared`` and closes it
        if this raises (including Cancelled).  A cancelled wait on a cache
        job leaves the job running for others; a cancelled listing scan
        abandons its thread, which closes the directory descriptor.
        """
        todo = prepared.todo
        assert todo is not None
        if todo.hash_job:
            self._start_etag_hash(prepared)
            todo = todo._replace(hash_job=False)
        if todo.listing:
            return await self._listing(prepared, req, now)
        if todo.compress:
            data = await self._compressed(prepared, todo)
            if data is not None:
                prepared, todo = self._use_compressed(prepared, todo, req, now, data)
            else:
                # Saturated work pool (or the file changed): identity, which
                # is always acceptable (RFC 9110 §12.5.3), rather than a 503.
                self.stats.content.compress_fallbacks += 1
                plan = identity_fallback(prepared._replace(todo=todo), req, self.config, now)
                prepared, todo = prepared._replace(plan=plan), todo._replace(compress="")
        if todo.digest and digest_applies(prepared.plan):
            digest = await self._digest(prepared, todo)
            if digest is None:
                self.stats.content.digest_omitted += 1
            else:
                prepared = self._use_digest(prepared, todo, digest)
        return self._done(prepared)

    def _use_compressed(
        self, prepared: Prepared, todo: FollowUps, req: RequestFacts, now: float, data: bytes
    ) -> tuple[Prepared, FollowUps]:
        """The answer in the coding produced (``data``), and what is left
        to do: a digest of those bytes."""
        facts = prepared.facts
        assert facts is not None
        coding = todo.compress
        self.stats.content.compressed_responses += 1
        plan = decide_file(
            req,
            facts,
            self.config,
            now,
            coding=coding,
            data=data,
            vary=True,
            extra=todo.extra,
        )
        # The representation a digest must describe.
        todo = todo._replace(compress="", coding=coding, data=data)
        memo_key = todo.memo_key
        if memo_key is None:
            return prepared._replace(plan=plan), todo
        # A plain request answered from the warm-file cache: the same
        # answer serves the rest of this second (serverio.model.decide,
        # serve_cached); the handler stores the memo in the entry.
        plan = replace(plan, shared=True)
        body = Body.of(plan)
        memo = (memo_key, (int(now), plan, body))
        return prepared._replace(plan=plan, body=body, memo=memo), todo

    def _start_etag_hash(self, prepared: Prepared) -> None:
        """Start hashing a large file for its ETag, without waiting (one job
        per identity; the work pool bounds how many run).  Until it is done
        its responses carry no ETag (docs/features.md "Validators")."""
        facts = prepared.facts
        assert facts is not None
        fd = prepared.fd
        work = self.work
        hashes = self.hashes
        ident = facts.key

        def make_job() -> Callable[[], Awaitable[bytes | None]]:
            owned = _dup(fd)
            if owned is None:
                return _nothing

            async def job() -> bytes | None:
                try:
                    digest = await run_blocking(work, hash_for_etag, owned, ident)
                finally:
                    owned.release()
                if digest is not None:
                    hashes.put(ident, digest)
                return digest

            return job

        self.etag_jobs.start(ident, make_job)

    @staticmethod
    def _use_digest(prepared: Prepared, todo: FollowUps, digest: bytes) -> Prepared:
        plan = prepared.plan
        field = (b"repr-digest", repr_digest_field(todo.digest, digest))
        return prepared._replace(plan=replace(plan, headers=(*plan.headers, field)))

    @staticmethod
    def _done(prepared: Prepared) -> Prepared:
        """Finished: no follow-up left; what was kept open only for the
        follow-ups is closed."""
        if prepared.opened is not None and not prepared.plan.needs_file:
            prepared.close()
            return prepared._replace(opened=None, todo=None)
        return prepared._replace(todo=None)

    @staticmethod
    def _compress_key(prepared: Prepared, todo: FollowUps) -> CompressKey:
        facts = prepared.facts
        assert facts is not None
        return (facts.key, todo.compress)

    @staticmethod
    def _digest_key(prepared: Prepared, todo: FollowUps) -> DigestKey:
        facts = prepared.facts
        assert facts is not None
        return (facts.key, todo.coding, todo.digest)

    async def _compressed(self, prepared: Prepared, todo: FollowUps) -> bytes | None:
        facts = prepared.facts
        assert facts is not None
        coding = todo.compress
        key = self._compress_key(prepared, todo)
        hit = self.compressed.get(key)
        if hit is not None:
            return hit  # the hot path: no thread hop, no syscall
        size, mtime_ns = facts.size, facts.mtime_ns
        # From the file's bytes when they are in memory (the warm-file
        # cache, or the read that just filled it): no re-read.
        make_job = _job_maker(
            self.work,
            prepared.fd,
            todo.source,
            functools.partial(compress_bytes, coding),
            lambda owned: compress_file(owned, coding, size, mtime_ns),
        )
        return await self.compressed.get_or_run(key, make_job)

    async def _digest(self, prepared: Prepared, todo: FollowUps) -> bytes | None:
        facts = prepared.facts
        assert facts is not None
        algorithm = todo.digest
        key = self._digest_key(prepared, todo)
        hit = self.digests.get(key)
        if hit is not None:
            return hit
        size, mtime_ns = facts.size, facts.mtime_ns
        # A compressed representation's bytes are in memory; identity is
        # hashed from the file.
        make_job = _job_maker(
            self.work,
            prepared.fd,
            todo.data,
            functools.partial(hash_bytes, algorithm),
            lambda owned: hash_file(owned, algorithm, size, mtime_ns),
        )

        return await self.digests.get_or_run(key, make_job)

    async def _readme(
        self, req: RequestFacts, entries: list[Entry], query: ListingQuery
    ) -> Readme | None:
        """The README below an HTML listing: only one the listing shows (so
        the hidden policy, the containment and the access rules have passed
        it), read in the work pool (requester-owned, like the scan)."""
        if query.json or query.text:
            return None
        names = {e.name for e in entries if not e.is_dir}
        name = next((n for n in README_NAMES if n in names), None)
        if name is None:
            return None
        return await run_blocking(
            self.work, read_readme, self.opener(), req.target.relpath, name, README_MAX
        )

    async def _search(
        self, prepared: Prepared, req: RequestFacts, query: ListingQuery, now: float
    ) -> Prepared:
        """``?q=``: the recursive search (:mod:`serverio.pipeline.search`),
        which walks from the folder by path, under the same containment;
        its body, streamed as the walk finds results, is what the answer
        holds open (its ``Opened``'s chunk source).  The folder's first scan
        happens here, so a full work pool is a 503 before anything is sent.

        Cancellation handling: a stream whose first scan did not finish is
        closed before the cancellation propagates."""
        # The folder's descriptor is not needed: closed in the work pool
        # (or here, if the close never got a thread: OwnedFd's rule).
        owned = _directory(prepared)
        try:
            await run_blocking(self.work, owned.release)
        finally:
            owned.release()
        plan = search_plan(req, query, now, private=self.visible is not None)
        if not plan.send_body:
            return prepared._replace(plan=plan, opened=None, todo=None)
        stream = SearchStream(
            self.work, self.opener(), self.config, req, query, self.visible, self.hide
        )
        try:
            await stream.prime()
        except BaseException:
            stream.close()
            raise
        return prepared._replace(plan=plan, opened=Opened(-1, stream), todo=None)

    async def _listing(self, prepared: Prepared, req: RequestFacts, now: float) -> Prepared:
        """``prepared``, a directory to list, finished: scanned in the work
        pool (requester-owned: a 503 when saturated, like the fs pool);
        then the rendered body from the listing cache, or rendered once in
        the work pool for every identical request; then decided on the
        trio thread.  ``?q=`` is a search instead.  The directory's
        descriptor goes to the scan (or the search's close): the answer
        holds nothing open but a search's stream."""
        cfg = self.config
        query = parse_listing_query(
            parse_query(req.target.query),
            accept_json=prefers_json(req.accept),
            accept_text=prefers_text(req.accept),
        )
        if query.q:
            return await self._search(prepared, req, query, now)
        scan = await self._scan(prepared, req)
        entries, digest = self._shown(req, scan)
        readme = await self._readme(req, entries, query)
        if readme is not None:
            digest = with_readme(digest, readme.digest)
        rights = NO_RIGHTS
        if self.rights is not None and not (query.json or query.text):
            # The page with write controls is a render of its own, one per
            # set of rights (the forms, the rows' actions, data-may).
            rights = self.rights(req, entries)
            if rights.any:
                digest += rights.key()
        segments = req.target.segments
        render = functools.partial(
            render_listing,
            segments,
            entries,
            query,
            scan.truncated,
            cfg.content.listing_max_entries,
            hidden=cfg.files.hidden,
            archives=cfg.content.archives,
            title=cfg.content.title,
            account=self.account,
            rights=rights,
        )
        key: ListingKey = (scan.dev, scan.ino, segments, query, digest)
        body, ctype, etag = await self._rendered(key, render, readme)
        self.stats.content.listings += 1
        csp = listing_csp(
            rights.upload,
            self.account,
            rights.rows,
            select=rights.selects or cfg.content.archives,
        )
        plan = decide_generated(req, cfg, now, body, ctype, etag, csp=csp)
        return prepared._replace(plan=plan, opened=None, todo=None)

    async def _scan(self, prepared: Prepared, req: RequestFacts) -> Scan:
        """The directory's entries, scanned in the work pool; the directory
        descriptor moves to the scan (the thread closes it).  A failed scan
        is its status, mapped in one place like every other error."""
        cfg = self.config
        owned = _directory(prepared)
        try:
            return await run_blocking(
                self.work,
                scan_listing,
                owned,
                self.opener(),
                req.target.relpath,
                cfg.files.hidden,
                cfg.content.listing_max_entries,
                # With auth rules: where each entry leads through a link
                # (the directory's own, from its resolution), decided too.
                False if self.visible is None else prepared.real,
            )
        except OSError as exc:
            # The directory went away, or we ran out of descriptors.
            raise HTTPError(_errno_status(exc), "directory scan failed") from None
        finally:
            owned.release()  # queued and cancelled, or refused: never claimed

    def _shown(self, req: RequestFacts, scan: Scan) -> tuple[list[Entry], bytes]:
        """The entries the listing shows, and their digest: ``--hide``'s
        names and those the client may not see (the site's access rules)
        left out; the digest of what is left keys the shared render (each
        visible set its own)."""
        entries, digest = scan.entries, scan.digest
        hide = self.hide
        if hide.active:
            # --hide: left out of the listing (still served by URL).
            parent = req.target.relpath
            kept = [e for e in entries if not hide.hides(parent, e.name)]
            if len(kept) != len(entries):
                entries, digest = kept, entries_digest(kept, scan.truncated)
        if self.visible is not None:
            kept = self.visible(req, req.target.segments, entries)
            if len(kept) != len(entries):
                entries, digest = kept, entries_digest(kept, scan.truncated)
        return entries, digest

    async def _rendered(
        self, key: ListingKey, render: Callable[[Readme | None], Listing], readme: Readme | None
    ) -> Listing:
        """The rendered listing from the cache, or rendered once in the
        work pool for every identical request."""
        work = self.work
        listing = self.listings.get(key)
        if listing is not None:
            return listing

        def make_job() -> Callable[[], Awaitable[Listing | None]]:
            async def job() -> Listing | None:
                return await run_blocking(work, render, readme)

            return job

        listing = await self.listings.get_or_run(key, make_job)
        if listing is None:
            # No shared render: the work pool refused it, or no job
            # nursery runs (shutting down, or a bare ConnectionTask).
            # Render for this request alone, requester-owned like the
            # scan: a full pool is a 503 (PoolSaturated).
            listing = await run_blocking(work, render, readme)
        return listing
