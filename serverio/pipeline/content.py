"""Content follow-ups: listings, on-the-fly compression, representation digests.

The decision after the resolution hop (:mod:`serverio.pipeline.decide`,
over the facts :mod:`serverio.fs.prepare` gathered in one round of
syscalls) decides everything it can; what needs CPU or a directory scan it
leaves as a follow-up on the :class:`~serverio.fs.prepare.Prepared`.  This module
finishes those on the trio thread:

* the cheap part inline: cache lookups, the pure decisions
  (:func:`serverio.http.core.decide_file`, :mod:`serverio.http.listing`);
* the expensive part in the ``work`` pool through
  :func:`~serverio.run_blocking`, never on the event loop: directory scans,
  compression and hashing.

A full work pool degrades rather than fails where it can: a listing is a
503 (like the fs pool), a compression miss is served as identity, a digest
miss omits the header; each is counted in :class:`~serverio.Stats`.

Every blocking function here receives an :class:`OwnedFd` and closes its
descriptor itself, exactly once, even when its caller has been cancelled
and the thread abandoned.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import logging
import os
import stat
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final

from ..concurrency.blocking import Pool, run_blocking
from ..concurrency.flight import SingleFlightCache
from ..config import Config
from ..errors import HTTPError, errno_status
from ..fs import winstat
from ..fs.filecache import HashStore
from ..fs.opener import RootOpener
from ..fs.readme import Readme, read_readme
from ..fs.reads import pread
from ..http.codecs import compress_bytes
from ..http.core import Plan, RequestFacts, content_hasher, decide_file, decide_generated
from ..http.dates import http_seconds
from ..http.listing import (
    LISTING_CSP,
    Entry,
    ListingQuery,
    entries_digest,
    filter_entries,
    listing_etag,
    parse_listing_query,
    render_html,
    render_json,
    sort_entries,
)
from ..http.negotiate import parse_query, prefers_json, repr_digest_field
from ..http.readme import README_MAX, README_NAMES, render_readme
from ..http.select import digest_applies
from ..observe.stats import Stats

if TYPE_CHECKING:
    from ..fs.prepare import Prepared

__all__ = [
    "ContentService",
    "OwnedFd",
    "render_listing",
    "scan_directory",
    "scan_listing",
]

# Identity of the bytes a cached value describes: (dev, ino, size, mtime_ns,
# ctime_ns) of the file (or sidecar) + content coding (+ digest algorithm).
log = logging.getLogger("serverio")

# Identity = (dev, ino, size, mtime_ns, ctime_ns): ctime too, because a
# same-size rewrite that restores the mtime (reproducible builds) changes
# only the ctime.
Identity = tuple[int, int, int, int, int]
CompressKey = tuple[Identity, str]
DigestKey = tuple[Identity, str, str]
# A rendered listing: (dev, ino) of the directory, the path it was reached
# by (title, breadcrumbs), the query (format, sort, order) and the digest of
# the scanned entries (serverio.http.listing.entries_digest).  The hidden
# policy and the entry limit are the server's, the same for every key.
ListingKey = tuple[int, int, tuple[str, ...], ListingQuery, bytes]
# body, content type, weak ETag
Listing = tuple[bytes, bytes, str]
_LISTING_OVERHEAD: Final = 512

READ_CHUNK = 1 << 20
# Digests are tiny; their cache is bounded at this many bytes of values
# (each weighs its digest plus a fixed overhead): ~20,000 entries.
DIGEST_CACHE_BYTES: Final = 4 * 1024 * 1024
_DIGEST_OVERHEAD: Final = 160

_HASHES: Final = {"sha-256": "sha256", "sha-512": "sha512"}


# --------------------------------------------------------- owned descriptors


class OwnedFd:
    """A descriptor handed to a worker thread; whoever claims it closes it.

    The thread claims it when it starts.  If the thread never starts (its
    caller was cancelled while queued, or the pool refused it), the job
    releases it instead.  The lock makes "claim" atomic between the two, so
    the descriptor is closed exactly once and never while in use.
    """

    __slots__ = ("_fd", "_lock")

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._lock = threading.Lock()

    def claim(self) -> int:
        with self._lock:
            fd, self._fd = self._fd, -1
        return fd

    def release(self) -> None:
        fd = self.claim()
        if fd >= 0:
            os.close(fd)


def _read_exact(fd: int, size: int) -> bytes | None:
    parts = []
    offset = 0
    while offset < size:
        chunk = pread(fd, min(READ_CHUNK, size - offset), offset)
        if not chunk:
            return None  # the file shrank
        parts.append(chunk)
        offset += len(chunk)
    return b"".join(parts)


def _unchanged(fd: int, size: int, mtime_ns: int) -> bool:
    st = os.fstat(fd)
    return st.st_size == size and st.st_mtime_ns == mtime_ns


def compress_file(owned: OwnedFd, coding: str, size: int, mtime_ns: int) -> bytes | None:
    """Read exactly ``size`` bytes of the file and compress them (blocking).

    Returns None if the file changed under us (the cache key would lie).

    Cancellation handling: runs in a worker thread; if its job is cancelled
    the thread finishes anyway, closes its descriptor, and the result is
    dropped by :func:`~serverio.run_blocking`.
    """
    fd = owned.claim()
    if fd < 0:
        return None
    try:
        data = _read_exact(fd, size)
        if data is None or not _unchanged(fd, size, mtime_ns):
            return None
    finally:
        os.close(fd)
    return compress_bytes(coding, data)


def hash_file(owned: OwnedFd, algorithm: str, size: int, mtime_ns: int) -> bytes | None:
    """The digest of exactly ``size`` bytes of the opened file (blocking).

    The bytes hashed are the opened file's, the same inode the response is
    served from.  None if the file changed while we read it.

    Cancellation handling: as :func:`compress_file`.
    """
    fd = owned.claim()
    if fd < 0:
        return None
    try:
        h = hashlib.new(_HASHES[algorithm])
        if not _hash_span(h, fd, size) or not _unchanged(fd, size, mtime_ns):
            return None
        return h.digest()
    finally:
        os.close(fd)


def _hash_span(h: Any, fd: int, size: int) -> bool:
    """Feed the first ``size`` bytes of ``fd`` to ``h`` in READ_CHUNK
    positional reads; False if the file is shorter now."""
    offset = 0
    while offset < size:
        chunk = pread(fd, min(READ_CHUNK, size - offset), offset)
        if not chunk:
            return False
        h.update(chunk)
        offset += len(chunk)
    return True


def hash_for_etag(owned: OwnedFd, ident: Identity) -> bytes | None:
    """The ETag content hash of the opened file (blocking), or None if its
    identity is no longer ``ident`` after the read (it changed meanwhile).

    Cancellation handling: as :func:`compress_file`.
    """
    fd = owned.claim()
    if fd < 0:
        return None
    try:
        h = content_hasher()
        if not _hash_span(h, fd, ident[2]):
            return None
        st = winstat.fstat(fd)
        if (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) != ident:
            return None
        return h.digest()
    finally:
        os.close(fd)


def hash_bytes(algorithm: str, data: bytes) -> bytes:
    return hashlib.new(_HASHES[algorithm], data).digest()


# ------------------------------------------------------------------ listing


def _listable_name(name: str, *, hidden: bool, at_root: bool) -> bool:
    """Would a request for this name pass :func:`serverio.http.target.parse_target`
    and the hidden policy?  Names that cannot be served are not listed.
    Every other name has a URL: a backslash is linked as ``%5C``, a byte
    that is not UTF-8 (scandir gives it as a surrogate, as the target
    parser does) as its own ``%XX``."""
    if name.startswith("."):
        return hidden or (at_root and name == ".well-known")
    return True


def scan_directory(
    owned: OwnedFd, opener: RootOpener, relpath: str, hidden: bool, limit: int
) -> tuple[list[Entry], bool]:
    """Scan one directory (blocking): the entries a client could fetch.

    Applies the serving policy to every name: hidden names unless
    ``hidden``; symlinks are resolved through ``opener`` (the same
    containment as a request: a link leaving the root is not listed unless
    the opener follows symlinks; a dangling one never is); only regular
    files and directories.  Stops after ``limit`` entries; the boolean says
    whether it stopped early.

    Where directories cannot be scanned through a descriptor (the opener's
    ``windows`` strategy: no ``dir_fd``, no ``scandir(fd)``) the directory
    is listed by path: the opener resolves ``relpath`` again under the same
    containment and checks it is still the directory ``owned`` holds.

    Cancellation handling: runs in a worker thread; if the requester is
    cancelled the thread finishes the scan, closes the directory descriptor
    it owns, and the result is dropped.
    """
    fd = owned.claim()
    if fd < 0:
        return [], False
    at_root = relpath == "."
    prefix = "" if at_root else relpath + "/"
    entries: list[Entry] = []
    truncated = False
    try:
        source = fd if opener.root_fd >= 0 else opener.directory_path(relpath, fd)
        with os.scandir(source) as it:
            for de in it:
                name = de.name
                if not _listable_name(name, hidden=hidden, at_root=at_root):
                    continue
                try:
                    st = de.stat(follow_symlinks=False)
                    if stat.S_ISLNK(st.st_mode):
                        link_fd = opener.open(prefix + name)
                        try:
                            st = os.fstat(link_fd)
                        finally:
                            os.close(link_fd)
                except OSError:
                    continue  # vanished, escapes the root, dangling, forbidden
                if stat.S_ISDIR(st.st_mode):
                    is_dir = True
                elif stat.S_ISREG(st.st_mode):
                    is_dir = False
                else:
                    continue  # FIFO, socket, device: never served
                if len(entries) >= limit:
                    truncated = True
                    break
                mtime = http_seconds(st.st_mtime_ns)
                entries.append(Entry(name, is_dir, -1 if is_dir else st.st_size, mtime))
    finally:
        os.close(fd)
    return entries, truncated


@dataclass(frozen=True, slots=True)
class Scan:
    """What :func:`scan_listing` found: the entries and the directory's identity."""

    entries: list[Entry]
    truncated: bool
    dev: int
    ino: int
    digest: bytes  # serverio.http.listing.entries_digest


def scan_listing(
    owned: OwnedFd, opener: RootOpener, relpath: str, hidden: bool, limit: int
) -> Scan:
    """Scan one directory (blocking) and digest what was found.

    Cancellation handling: as :func:`scan_directory`.
    """
    fd = owned.claim()
    if fd < 0:
        return Scan([], False, 0, 0, b"")
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        raise
    entries, truncated = scan_directory(OwnedFd(fd), opener, relpath, hidden, limit)
    return Scan(entries, truncated, st.st_dev, st.st_ino, entries_digest(entries, truncated))


def render_listing(
    segments: tuple[str, ...],
    entries: list[Entry],
    query: ListingQuery,
    truncated: bool,
    limit: int,
    readme: Readme | None = None,
    hidden: bool = False,
) -> Listing:
    """Sort and render one listing (blocking: formatting ten thousand rows
    never holds the event loop): ``(body, content_type, etag)``."""
    ordered = sort_entries(filter_entries(entries, query.filter), query)
    if query.json:
        body = render_json(segments, ordered, truncated=truncated)
        return body, b"application/json", listing_etag(body)
    section = ""
    if readme is not None:
        section = render_readme(readme.name, readme.text, segments, hidden=hidden, size=readme.size)
    body = render_html(
        segments,
        ordered,
        query,
        truncated=truncated,
        limit=limit,
        scanned=len(entries),
        readme=section,
    )
    return body, b"text/html; charset=utf-8", listing_etag(body)


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


def _errno_status(exc: OSError) -> int:
    status = errno_status(exc.errno)
    if status == 500:
        log.error("directory scan failed: %s", errno.errorcode.get(exc.errno or 0, "?"))
    return status


class ContentService:
    """The follow-up caches (compression, digests, listings) and the logic that fills
    and reads them; one per server, which hands in the ``work`` pool and
    the root opener (called when a scan needs it)."""

    def __init__(
        self, config: Config, stats: Stats, work: Pool, opener: Callable[[], RootOpener]
    ) -> None:
        self.config = config
        self.stats = stats
        self.work = work
        self.opener = opener
        cfg = config
        self.compressed: SingleFlightCache[CompressKey, bytes] = SingleFlightCache(
            "compression", cfg.compress_cache_size, len
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
        self.etag_jobs: SingleFlightCache[Identity, bytes] = SingleFlightCache(
            "etag_hash", 0, len
        )
        # Rendered listings, shared: every reader of one listing (a slow one
        # holds its body for --write-timeout) points at the same bytes.
        self.listings: SingleFlightCache[ListingKey, Listing] = SingleFlightCache(
            "listing", cfg.listing_cache_size, lambda v: len(v[0]) + _LISTING_OVERHEAD
        )
        # The site's access rules on listed names (serverio.site.service:
        # Site.visible_entries), when it has auth rules: the entries this
        # request may see, from the request, the directory's segments and
        # what the scan found.
        self.visible: (
            Callable[[RequestFacts, tuple[str, ...], list[Entry]], list[Entry]] | None
        ) = None

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

    # A follow-up is done when its flag on the Prepared is cleared, so the
    # two entry points below can hand over to each other: finish_cached()
    # does what the caches can answer without waiting, finish() the rest.

    def finish_cached(self, prepared: Prepared, req: RequestFacts, now: float) -> bool:
        """Finish the follow-ups from the caches alone (no await, no thread).

        The hot path: a compressed or digest cache hit costs a dict lookup.
        Returns False, with the finished steps cleared, when something must
        wait (a listing scan, a cache miss); then call :meth:`finish`.
        """
        if prepared.hash_job:
            self._start_etag_hash(prepared)
        if prepared.listing:
            return False
        if prepared.compress:
            data = self.compressed.get(self._compress_key(prepared))
            if data is None:
                return False
            self._use_compressed(prepared, req, now, data)
        if prepared.digest:
            if digest_applies(prepared.plan):
                digest = self.digests.get(self._digest_key(prepared))
                if digest is None:
                    return False
                self._use_digest(prepared, digest)
            prepared.digest = ""
        self._done(prepared)
        return True

    async def finish(self, prepared: Prepared, req: RequestFacts, now: float) -> None:
        """Carry out the remaining follow-ups on ``prepared``, replacing its plan.

        Cancellation handling: the caller owns ``prepared`` and closes it
        if this raises (including Cancelled).  A cancelled wait on a cache
        job leaves the job running for others; a cancelled listing scan
        abandons its thread, which closes the directory descriptor.
        """
        if prepared.hash_job:
            self._start_etag_hash(prepared)
        if prepared.listing:
            prepared.plan = await self._listing(prepared, req, now)
            prepared.listing = False
            return
        if prepared.compress:
            data = await self._compressed(prepared, prepared.compress)
            if data is not None:
                self._use_compressed(prepared, req, now, data)
            else:
                # Saturated work pool (or the file changed): identity, which
                # is always acceptable (RFC 9110 §12.5.3), rather than a 503.
                self.stats.compress_fallbacks += 1
                facts = prepared.facts
                assert facts is not None
                prepared.plan = decide_file(
                    req, facts, self.config, now, vary=True, extra=prepared.extra
                )
                prepared.compress = ""
        if prepared.digest:
            if digest_applies(prepared.plan):
                digest = await self._digest(prepared)
                if digest is None:
                    self.stats.digest_omitted += 1
                else:
                    self._use_digest(prepared, digest)
            prepared.digest = ""
        self._done(prepared)

    def _use_compressed(
        self, prepared: Prepared, req: RequestFacts, now: float, data: bytes
    ) -> None:
        facts = prepared.facts
        assert facts is not None
        coding = prepared.compress
        self.stats.compressed_responses += 1
        prepared.plan = decide_file(
            req,
            facts,
            self.config,
            now,
            coding=coding,
            data=data,
            vary=True,
            extra=prepared.extra,
        )
        prepared.coding = coding
        prepared.data = data  # the representation a digest must describe
        prepared.compress = ""

    def _start_etag_hash(self, prepared: Prepared) -> None:
        """Start hashing a large file for its ETag, without waiting (one job
        per identity; the work pool bounds how many run).  Until it is done
        its responses carry no ETag (docs/features.md "Validators")."""
        prepared.hash_job = False
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
    def _use_digest(prepared: Prepared, digest: bytes) -> None:
        plan = prepared.plan
        field = (b"repr-digest", repr_digest_field(prepared.digest, digest))
        prepared.plan = replace(plan, headers=(*plan.headers, field))

    @staticmethod
    def _done(prepared: Prepared) -> None:
        if not prepared.plan.needs_file:
            prepared.close()  # kept open only for the follow-ups

    @staticmethod
    def _compress_key(prepared: Prepared) -> CompressKey:
        facts = prepared.facts
        assert facts is not None
        return (facts.key, prepared.compress)

    @staticmethod
    def _digest_key(prepared: Prepared) -> DigestKey:
        facts = prepared.facts
        assert facts is not None
        return (facts.key, prepared.coding, prepared.digest)

    async def _compressed(self, prepared: Prepared, coding: str) -> bytes | None:
        facts = prepared.facts
        assert facts is not None
        key = self._compress_key(prepared)
        hit = self.compressed.get(key)
        if hit is not None:
            return hit  # the hot path: no thread hop, no syscall
        size, mtime_ns = facts.size, facts.mtime_ns
        # From the file's bytes when they are in memory (the warm-file
        # cache, or the read that just filled it): no re-read.
        make_job = _job_maker(
            self.work,
            prepared.fd,
            prepared.source,
            functools.partial(compress_bytes, coding),
            lambda owned: compress_file(owned, coding, size, mtime_ns),
        )
        return await self.compressed.get_or_run(key, make_job)

    async def _digest(self, prepared: Prepared) -> bytes | None:
        facts = prepared.facts
        assert facts is not None
        algorithm = prepared.digest
        data = prepared.data
        key = self._digest_key(prepared)
        hit = self.digests.get(key)
        if hit is not None:
            return hit
        size, mtime_ns = facts.size, facts.mtime_ns
        # A compressed representation's bytes are in memory; identity is
        # hashed from the file.
        make_job = _job_maker(
            self.work,
            prepared.fd,
            data,
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
        if query.json:
            return None
        names = {e.name for e in entries if not e.is_dir}
        name = next((n for n in README_NAMES if n in names), None)
        if name is None:
            return None
        return await run_blocking(
            self.work, read_readme, self.opener(), req.target.relpath, name, README_MAX
        )

    async def _listing(self, prepared: Prepared, req: RequestFacts, now: float) -> Plan:
        """Scan in the work pool (requester-owned: a 503 when saturated, like
        the fs pool); then the rendered body from the listing cache, or
        rendered once in the work pool for every identical request; then
        decide on the trio thread."""
        cfg = self.config
        work = self.work
        query = parse_listing_query(
            parse_query(req.target.query), accept_json=prefers_json(req.accept)
        )
        # The directory descriptor moves to the scan: the thread closes it.
        owned = OwnedFd(prepared.fd)
        prepared.fd = -1
        try:
            scan = await run_blocking(
                work,
                scan_listing,
                owned,
                self.opener(),
                req.target.relpath,
                cfg.hidden,
                cfg.listing_max_entries,
            )
        except OSError as exc:
            # The directory went away, or we ran out of descriptors: a
            # status, mapped in one place like every other error.
            raise HTTPError(_errno_status(exc), "directory scan failed") from None
        finally:
            owned.release()  # queued and cancelled, or refused: never claimed
        segments = req.target.segments
        entries, digest = scan.entries, scan.digest
        if self.visible is not None:
            # Names the client may not see are left out; the digest of what
            # is left keys the shared render (each visible set its own).
            kept = self.visible(req, segments, entries)
            if len(kept) != len(entries):
                entries, digest = kept, entries_digest(kept, scan.truncated)
        readme = await self._readme(req, entries, query)
        if readme is not None:
            # The README's bytes are part of the page: a new README, a new key.
            digest = hashlib.blake2b(digest + readme.digest, digest_size=16).digest()
        key: ListingKey = (scan.dev, scan.ino, segments, query, digest)
        listing = self.listings.get(key)
        if listing is None:
            render = functools.partial(
                render_listing,
                segments,
                entries,
                query,
                scan.truncated,
                cfg.listing_max_entries,
                hidden=cfg.hidden,
            )

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
        self.stats.listings += 1
        body, ctype, etag = listing
        return decide_generated(req, cfg, now, body, ctype, etag, csp=LISTING_CSP)
