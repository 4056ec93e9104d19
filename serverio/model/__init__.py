r"""The value types of a response in the making: what fs finds, decide consumes.

The blocking edge (:func:`serverio.fs.prepare.resolve`) gathers facts and
descriptors into a :class:`Resolution`; the pure decision
(:mod:`serverio.model.decide`, beside the core) turns it into a
:class:`Prepared`; the transports send its :class:`Body`.  The warm-file
cache keeps :class:`CachedFile` entries, and a :class:`CacheCandidate` names
the one that may answer a request.  Every one of these is defined here, on
top of :mod:`serverio.http.core` alone, so that the decision never imports
the filesystem layer (nothing here imports ``fs/``, ``pipeline/`` or
``net/``; ``tests/test_import_cycles.py`` keeps it so).

The filesystem says *why* something cannot be served, never which HTTP
status that is: a :class:`Reason` (and the errno, when one was raised),
classified by :func:`errno_reason`.  The one reason -> status table is the
HTTP layer's (:data:`serverio.model.reasons.REASON_STATUS`).

Descriptors: a ``Rep``, a ``Resolution``, a ``Prepared``'s :class:`Opened`
and a ``Body`` each own the descriptors they hold until they hand them on,
and close them with :func:`close_fd` (one place, so a test can count every
close).  A ``Prepared`` itself is an immutable value: what it holds open is
its ``Opened``, which a new value made from it shares.
"""

from __future__ import annotations

import enum
import errno
import os
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from ..http.core import FileFacts, FileSpan, Plan

__all__ = [
    "CACHED",
    "CHOICES_KEPT",
    "DIRECTORY",
    "ERROR",
    "FILE",
    "LIST",
    "LISTING",
    "NO_BODY",
    "UNAVAILABLE",
    "Body",
    "BodyCut",
    "CacheCandidate",
    "CacheEntries",
    "CachedFile",
    "ChunkSource",
    "Direct",
    "FollowUps",
    "Identity",
    "Opened",
    "Prepared",
    "Reason",
    "Rep",
    "Resolution",
    "Sidecar",
    "StreamBody",
    "close_fd",
    "errno_reason",
]


def close_fd(fd: int) -> None:
    """Close a descriptor a body source or a preparation owned (one place,
    so a test can count every close)."""
    os.close(fd)


# ------------------------------------------------------------------ reasons


class Reason(enum.IntEnum):
    """Why the filesystem could not hand over what a request names.

    Facts, not statuses: :data:`serverio.model.reasons.REASON_STATUS` maps
    each to the status it is answered with."""

    NOT_FOUND = 1  # no such name (ENOENT, ENOTDIR, ENAMETOOLONG, EINVAL; "/file/")
    FORBIDDEN_NAME = 2  # containment refused the name (EXDEV, ELOOP, EMLINK, EFTYPE)
    NOT_REGULAR = 3  # a FIFO, a socket, a device: never served
    DENIED = 4  # it exists and the operating system refuses it (EACCES, EPERM)
    EXHAUSTED = 5  # out of descriptors or memory (EMFILE, ENFILE, ENOMEM)
    FAILED = 6  # any other errno (EIO and friends): logged where it happened


# The one errno -> reason table (like Go's net/http toHTTPError, without the
# HTTP).  ELOOP is a symlink loop or an O_NOFOLLOW refusal on Linux and
# macOS; FreeBSD reports the latter as EMLINK and NetBSD as EFTYPE.  EXDEV is
# the opener's containment refusal (RESOLVE_BENEATH, or the component walk
# leaving the root, a hidden name, a name Windows would reinterpret).  A
# too-long or invalid name cannot exist.
_ERRNO_REASON: dict[int, Reason] = {
    code: reason
    for codes, reason in (
        ((errno.ENOENT, errno.ENOTDIR, errno.ENAMETOOLONG, errno.EINVAL), Reason.NOT_FOUND),
        (
            (errno.EXDEV, errno.ELOOP, errno.EMLINK, getattr(errno, "EFTYPE", None)),
            Reason.FORBIDDEN_NAME,
        ),
        ((errno.EACCES, errno.EPERM), Reason.DENIED),
        ((errno.EMFILE, errno.ENFILE, errno.ENOMEM), Reason.EXHAUSTED),
    )
    for code in codes
    if code is not None
}


def errno_reason(code: int | None) -> Reason:
    """Why a filesystem call that raised ``OSError(code)`` failed
    (:attr:`Reason.FAILED` when the number says nothing we can act on)."""
    if code is None:
        return Reason.FAILED
    return _ERRNO_REASON.get(code, Reason.FAILED)


# ------------------------------------------------------------------ body


class BodyCut(Exception):
    """A streamed body cannot be completed (its source failed, passed a
    bound or timed out after the head went out): the transport cuts the
    response — the HTTP/1.1 connection closes without the last-chunk or
    short of its Content-Length (RFC 9112 §8), the HTTP/2 stream is reset
    (RFC 9113 §8.1) — and never ends it as if complete.

    ``failed``: the server itself could not make the rest (an archive
    member that changed, a bound passed): HTTP/2 resets with
    INTERNAL_ERROR and the response counts as ``truncated``, as for any
    other exception of a source.  Otherwise (the default: the upstream
    went away or timed out) the reset is CANCEL."""

    failed: bool = False


class ChunkSource(Protocol):
    """The source of a body produced while it is sent (a folder archive,
    a proxied response): the one streamed-body seam (docs/architecture.md
    "The streamed-body seam").

    Cancellation handling: :meth:`next_chunk` may be cancelled at any
    await (the client left, a write deadline, shutdown); :meth:`close`
    (synchronous, called once by the body's owner in every case, before
    the stream's task ends) then releases whatever it holds — the archive
    walker's descriptor, the upstream connection — and a blocking read
    still running in a pool thread disposes of its own descriptor when it
    ends.  Closing before the end abandons the rest.
    """

    async def next_chunk(self) -> bytes:
        """The next bytes of the body (never empty), or ``b""`` at its end.
        Raises :class:`BodyCut` when the body cannot be completed; any
        other exception cuts the response too, as a failed one."""
        ...

    def close(self) -> None:
        """Release what the source holds (idempotent)."""
        ...


class Body:
    """The pieces to send, in order, and the descriptor their spans read from
    (``fd == -1``: literal only).

    A literal body owns nothing, so closing it does nothing and one instance
    may be shared (:data:`NO_BODY`); a file-backed one closes its descriptor
    on the first :meth:`close` and never again.  The transport that emits it
    owns it and closes it exactly once (docs/architecture.md).  A body
    produced while it is sent is a :class:`StreamBody`."""

    __slots__ = ("fd", "pieces")

    def __init__(self, pieces: tuple[bytes | FileSpan, ...], fd: int = -1) -> None:
        self.pieces = pieces
        self.fd = fd

    @classmethod
    def of(cls, plan: Plan, fd: int = -1, chunks: ChunkSource | None = None) -> Body:
        """The body source of ``plan`` (nothing for HEAD or a bodiless
        status), reading its spans from ``fd``, which it then owns.  A plan
        that sends no span does not need the descriptor: it is closed now.
        ``chunks`` (owned from now on) is the body of a 200 or 207 that
        sends one, of unknown length (a :class:`StreamBody`); any other plan
        (a HEAD, an error page the site put instead) closes it now."""
        if chunks is not None:
            # A 200 (an archive) or a 207 (a WebDAV PROPFIND listing).
            if plan.send_body and plan.status in (200, 207) and not plan.body:
                if fd >= 0:
                    close_fd(fd)
                # A source that bounds its own pulls says so (a search, by
                # --search-time); else the transport bounds each pull.
                return StreamBody(chunks, None, bounded=getattr(chunks, "bounds_pulls", False))
            chunks.close()
        if not plan.send_body or not plan.body:
            if fd >= 0:
                close_fd(fd)
            return NO_BODY
        if fd >= 0 and not plan.needs_file:
            close_fd(fd)
            fd = -1
        return cls(plan.body, fd)

    @property
    def size(self) -> int:
        return sum(map(len, self.pieces))

    def close(self) -> None:
        """Release the descriptor; the second and later calls do nothing."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            close_fd(fd)


class StreamBody(Body):
    """A body that is not known in advance (a folder archive, a proxied
    response), pulled from ``source`` one chunk at a time as the transport
    can send it: the next chunk is asked for only once the last one is
    written (HTTP/1.1) or framed within the flow-control windows (HTTP/2),
    so a slow client slows the source and at most one chunk is held.

    ``length``: the declared size (the plan then carries its
    Content-Length), or None: HTTP/1.1 frames it with the chunked coding
    (RFC 9112 §7.1), or, for an HTTP/1.0 client, ends it by closing the
    connection; HTTP/2 frames it as DATA either way.  A source that gives
    more or fewer bytes than a declared length is cut (never sent past it:
    the excess would be read as the next response).

    ``bounded``: the source bounds each pull itself (the proxy's
    ``--proxy-idle-timeout``, a :class:`BodyCut` when passed); otherwise
    the transport does, with ``--write-timeout`` (a stalled filesystem is
    no progress: the response is cut and counted as a write timeout).

    ``sent``: body bytes handed to the transport's writes so far."""

    __slots__ = ("bounded", "length", "sent", "source")

    def __init__(self, source: ChunkSource, length: int | None, *, bounded: bool = False) -> None:
        super().__init__(())
        self.source = source
        self.length = length
        self.bounded = bounded
        self.sent = 0

    @property
    def size(self) -> int:
        return self.sent

    def close(self) -> None:
        """Close the source (it is idempotent)."""
        self.source.close()


# The empty body, shared: a literal body owns nothing to close.
NO_BODY = Body(())


# ------------------------------------------------------------------ resolution

# Resolution kinds.
FILE = "file"  # a regular file (``file``), with its usable sidecars
CACHED = "cached"  # the candidate handed in is still valid: answer from memory
ERROR = "error"  # ``reason`` (and ``errno``): missing, refused, not regular, an errno
DIRECTORY = "directory"  # a directory without index (or without its slash)
LISTING = "listing"  # a directory to list: ``fd`` is open on it
UNAVAILABLE = "unavailable"  # the file shrank while it was read: try again


@dataclass(slots=True)
class Rep:
    """One representation found on disk: the file itself, or a sidecar.

    ``fd`` is open on it (-1 once closed); ``data`` its whole content when
    the hop read it (a small body, the warm-file cache, its ETag's hash);
    ``hash_settled``: its identity may carry a stored content hash;
    ``shrank``: it was shorter than its ``fstat`` (serving it is a 503)."""

    fd: int
    facts: FileFacts
    data: bytes | None = None
    hash_settled: bool = False
    shrank: bool = False

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            close_fd(fd)


@dataclass(slots=True)
class Resolution:
    """What :func:`serverio.fs.prepare.resolve` found (facts and descriptors,
    no plan, no status).

    For a FILE, the selection facts the hop needed to know which sidecars
    to open and whether to keep a descriptor (``extra`` and ``vary`` from
    :func:`serverio.http.select.file_headers`, ``digest`` from
    :func:`~serverio.http.select.digest_algorithm`) travel with it, so the
    decision does not compute them again."""

    kind: str
    reason: Reason = Reason.NOT_FOUND  # ERROR
    errno: int | None = None  # ERROR: the errno it came from, if any
    fd: int = -1  # LISTING: the directory
    relpath: str = ""  # FILE: the path served (an index file, the SPA file)
    # FILE, LISTING, DIRECTORY: where the open led when it followed a
    # symlink inside the root (RootOpener.open_resolved: "a/b", "" for the
    # root); ERROR: how far such a resolution got (Unreached.path), or
    # where the unservable name led.  Looked for only when the site has
    # auth rules; None: no link was followed.
    real: str | None = None
    ctype: str = ""  # FILE: its media type
    file: Rep | None = None  # FILE
    # FILE: the sidecars present and not older than the file, by coding.
    sidecars: dict[str, Rep] = field(default_factory=dict)
    extra: tuple[tuple[bytes, bytes], ...] = ()  # FILE: Content-Disposition
    vary: bool = False  # FILE: the response varies on Accept-Encoding
    digest: str = ""  # FILE: the Repr-Digest algorithm asked for, or ""

    def close(self) -> None:
        """Close every descriptor still held (idempotent)."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            close_fd(fd)
        if self.file is not None:
            self.file.close()
        for rep in self.sidecars.values():
            rep.close()


class Direct(NamedTuple):
    """A small regular file read by the direct resolution
    (:func:`serverio.fs.prepare.resolve_direct`, for a plain GET or HEAD
    answered with identity): what :func:`serverio.model.decide.decide_direct`
    needs, no descriptor (it is closed before this is made)."""

    relpath: str  # the path served, as the target named it
    facts: FileFacts
    data: bytes | None  # the whole file: a GET's, or read for its ETag's hash; else None
    extra: tuple[tuple[bytes, bytes], ...]  # as Resolution.extra
    vary: bool  # as Resolution.vary


# ------------------------------------------------------------------ warm-file cache

# Identity = (dev, ino, size, mtime_ns, ctime_ns): what must be unchanged for
# cached bytes (or a cached hash, a compressed body) to still be the file's;
# ctime too, because a same-size rewrite that restores the mtime
# (reproducible builds) changes only the ctime.
Identity = tuple[int, int, int, int, int]

# A plain GET/HEAD's response for one wall-clock second: (second, plan, body).
PlainMemo = tuple[int, Plan, Body]


@dataclass(slots=True, frozen=True)
class Sidecar:
    """What a precompressed sidecar path held when its file was cached.

    ``ident`` None: no such file.  ``cached`` None: it exists but is not
    used (older than the file it compresses).  Otherwise its bytes.

    ``directory``: for a sidecar with no directory entry at all, the
    settled identity of the directory it would be in, as
    ``(relative path, identity)``, stated before the sidecar was looked
    for: while the directory keeps that identity no entry was created in
    it, so the sidecar is still absent (one ``stat`` of the directory
    vouches for every absent sidecar of the file; see
    :mod:`serverio.fs.filecache`, "Absent sidecars").  None: the sidecar's
    own path is stat'ed.
    """

    path: str
    ident: Identity | None
    cached: CachedFile | None
    directory: tuple[str, Identity] | None = None


@dataclass(slots=True)
class CachedFile:
    """One small regular file: its identity, facts and whole content."""

    ident: Identity
    facts: FileFacts
    data: bytes
    # Trio clock time of the last successful revalidation (pooled mode's
    # window); a plain float store, safe from any thread.
    checked: float
    # Memos of the edge, not shared state of the cache: the response to a
    # plain GET/HEAD for the wall-clock second of its Date header, per
    # (method, coding served from a sidecar or ""), stored by the handler
    # from what serverio.model.decide.serve_cached returns; and the (extra
    # headers, vary) of a request without a query, set by the resolution
    # that made the entry.
    plain: dict[tuple[bytes, str], PlainMemo] = field(default_factory=dict)
    headers: tuple[tuple[tuple[bytes, bytes], ...], bool] | None = None
    # Per content coding: the sidecar state seen with this file (filled by
    # the preparation that negotiated it; revalidated with the file).
    sidecars: dict[str, Sidecar] = field(default_factory=dict)
    # False: the file is too large to keep (``data`` is empty) and the entry
    # exists for its sidecars' bytes; only a sidecar is served from it.
    whole: bool = True
    # Memo of the edge too: per Accept-Encoding value, the negotiated
    # (coding, representation, the sidecar states the choice depends on)
    # that serverio.model.decide.cache_candidate made (``learned``), stored
    # by the handler, at most CHOICES_KEPT of them.
    choices: dict[str, tuple[str, CachedFile, tuple[Sidecar, ...]]] = field(default_factory=dict)
    # The Date second of the last answer made from this entry and how many
    # it made in that second (set by the handler after each): a plain plan
    # is memoised as shared only once the entry is popular in its second
    # (serverio.model.decide.popular, serve_cached).
    asked: int = -1
    answers: int = 0


# Distinct Accept-Encoding values memoised per entry: browsers send a
# handful; beyond this many the choice is made afresh (bounded memory).
CHOICES_KEPT = 16


class CacheEntries(Protocol):
    """What the decision reads of the warm-file cache
    (:class:`serverio.fs.filecache.FileCache`): an entry by path."""

    def get(self, key: str) -> CachedFile | None: ...


class CacheCandidate(NamedTuple):
    """A warm-file cache entry that may answer this request, if still valid.

    ``coding`` is the negotiated content coding ("" for identity); ``rep``
    holds the bytes to serve: the file's own entry, or a sidecar's.  A
    coding to produce on the fly has ``rep is entry``.
    """

    key: str
    entry: CachedFile
    extra: tuple[tuple[bytes, bytes], ...]
    vary: bool
    coding: str = ""
    rep: CachedFile | None = None
    # The sidecar states this answer depends on (None: all the entry's).
    sidecars: tuple[Sidecar, ...] | None = None
    # The coding choice was made afresh (not from ``entry.choices``): the
    # caller may remember it there (serverio.pipeline.handler).
    learned: bool = False


# ------------------------------------------------------------------ prepared


class Opened:
    """What a :class:`Prepared` holds open: the descriptor its body or a
    follow-up reads (-1: none) and a body produced while it is sent
    (a folder archive, :mod:`serverio.archive`; None: none).

    The one mutable part of an answer in the making, like a :class:`Body`:
    a resource, not a value.  Its holder hands it on whole (a new
    ``Prepared`` made from an old one keeps the same ``Opened``), takes its
    parts out (:meth:`take_fd`, :meth:`take_chunks`: the taker owns them),
    or closes it; :meth:`close` is idempotent, so every owner along the
    way may close it on its failure path without closing a descriptor
    number twice."""

    __slots__ = ("chunks", "fd")

    def __init__(self, fd: int = -1, chunks: ChunkSource | None = None) -> None:
        self.fd = fd
        self.chunks = chunks

    def take_fd(self) -> int:
        """The descriptor, which the caller then owns (-1: none)."""
        fd, self.fd = self.fd, -1
        return fd

    def take_chunks(self) -> ChunkSource | None:
        """The chunk source, which the caller then owns (None: none)."""
        chunks, self.chunks = self.chunks, None
        return chunks

    def close(self) -> None:
        """Close what is still held; the second and later calls do nothing."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            close_fd(fd)
        chunks, self.chunks = self.chunks, None
        if chunks is not None:
            chunks.close()


class FollowUps(NamedTuple):
    """What a :class:`Prepared` still needs before it is sent (immutable:
    finishing one makes a new value, :meth:`ContentService.finish
    <serverio.pipeline.content.ContentService.finish>`); the exchange turns
    what cannot be had from the caches into its ``Listing`` or ``Coding``
    need (:mod:`serverio.pipeline.exchange`).

    * ``listing``: the descriptor is a directory to list; the plan is a
      placeholder;
    * ``compress``: a content coding to produce on the fly; the plan is a
      placeholder, ``extra`` the headers the file response carries
      (Content-Disposition), ``source`` the identity bytes when they are in
      memory (the warm-file cache, or the read that just filled it: no
      re-read), ``memo_key`` the key a plain request's finished answer is
      memoised under (answered from the warm-file cache);
    * ``digest``: the algorithm of a Repr-Digest for the representation
      the plan serves: the descriptor (kept open for it even when the body
      was read in the hop) holds its bytes, the facts their identity and
      ``coding`` their content coding (a sidecar's, or ``""``; after
      compression the coding produced, with its bytes in ``data``);
    * ``hash_job``: start the ETag hash job of a large file (from the
      descriptor; nothing waits for it).
    """

    listing: bool = False
    compress: str = ""
    extra: tuple[tuple[bytes, bytes], ...] = ()
    source: bytes | None = None
    memo_key: tuple[bytes, str] | None = None
    digest: str = ""
    coding: str = ""
    data: bytes | None = None
    hash_job: bool = False


# The follow-up of a directory to list.
LIST: FollowUps = FollowUps(listing=True)


class Prepared(NamedTuple):
    """A plan, what it still needs (``todo``) and what it holds open
    (``opened``: the descriptor it streams from, a chunk source; None:
    nothing).  Immutable: a follow-up makes a new value
    (``_replace``), handing ``opened`` on."""

    plan: Plan
    opened: Opened | None = None
    facts: FileFacts | None = None
    # The follow-ups still to do (None: none, the plan is final).
    todo: FollowUps | None = None
    # A ready literal body source for ``plan`` (the warm memo's, shared:
    # a literal body owns nothing); used only while ``plan.body`` is still
    # the tuple it was made from.
    body: Body | None = None
    # What the answer's bytes come from, as the path a site rule's glob sees
    # ("/a/index.html"; a listed directory ends with "/", the root's listing
    # is "/"); None when nothing was resolved (an error, a redirect).  The
    # site's access rules are decided on it (serverio.site.service, "the
    # resolved target").
    served: str | None = None
    # Where ``served`` led through a symlink inside the root ("a/b", "" for
    # the root; serverio.http.access.resolved_path makes its match path):
    # its rules apply too.  With ``served`` None (an error, a directory's
    # redirect): where the request's resolution led or stopped through a
    # link (serverio.fs.opener.Unreached), whose rules decide that answer
    # too.  None: no link (or no auth rule to look for one).
    real: str | None = None
    # A plain memo the decision made and the caller is to store in the
    # cache entry's ``plain`` (the decision itself mutates no cache):
    # ((method, coding), (second, plan, body)).
    memo: tuple[tuple[bytes, str], PlainMemo] | None = None

    @property
    def fd(self) -> int:
        """The open descriptor (-1: none)."""
        opened = self.opened
        return -1 if opened is None else opened.fd

    @property
    def holds(self) -> bool:
        """Does it hold something open (a descriptor, a chunk source)?"""
        opened = self.opened
        return opened is not None and (opened.fd >= 0 or opened.chunks is not None)

    def take_fd(self) -> int:
        """The descriptor, which the caller then owns (-1: none)."""
        opened = self.opened
        return -1 if opened is None else opened.take_fd()

    def close(self) -> None:
        """Close what it holds open; safe to call again (a no-op then)."""
        opened = self.opened
        if opened is not None:
            opened.close()

    def take_body(self) -> Body:
        """The finished response's body source; what it held open moves to
        it (this then holds nothing to close)."""
        body = self.body
        plan = self.plan
        opened = self.opened
        if opened is None:
            if body is not None and body.pieces is plan.body:
                return body
            return Body.of(plan)
        return Body.of(plan, opened.take_fd(), opened.take_chunks())
