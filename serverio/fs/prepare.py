r"""Resolution: the only code that touches the filesystem per request.

:func:`resolve` opens what the request names under containment (the file,
an index file, the ``--spa`` fallback, the precompressed sidecars the
request could be answered with), ``fstat``\ s it, checks it is a regular
file, computes its facts (with the content hash a small file's ETag is
made of) and, for a small body, reads the whole file.  It decides nothing
about the response: it returns a :class:`Resolution` of facts and open
descriptors, and the pure decision (:mod:`serverio.pipeline.decide`, over
:mod:`serverio.http.select` and :func:`serverio.http.core.decide_file`)
runs on the trio side after it.  It is one call so that it costs one
thread hop when it runs in the ``fs`` pool
(:mod:`serverio.concurrency.blocking`); it is synchronous and never touches
trio.  It also fills the warm-file cache (:mod:`serverio.fs.filecache`) with
a small settled file it read, and revalidates a candidate entry handed to it
(one ``stat``) so that the pooled path stays at one hop.

Whoever receives a ``Resolution`` owns its descriptors and must call
:meth:`Resolution.close` (or hand them on, as the decision does) exactly
once; the late-close path of ``run_blocking`` does if the waiter was
cancelled.  :class:`Prepared` is the handler's working object after the
decision: the plan, the descriptor it streams from, the follow-ups still to
do.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import stat
from dataclasses import dataclass, field
from typing import NamedTuple

from ..config import Config
from ..errors import errno_status
from ..http.core import (
    EtagPolicy,
    FileFacts,
    Plan,
    RequestFacts,
    content_digest,
    mtime_is_synthetic,
    spa_fallback_applies,
    wants_content_hash,
)
from ..http.mime import guess_type
from ..http.negotiate import SIDECAR_SUFFIX
from ..http.select import digest_algorithm, file_headers, negotiates, sidecars_wanted
from . import winstat
from .body import Body, close_fd
from .filecache import (
    RACY_SECONDS,
    UNTIMED,
    CachedFile,
    FileCache,
    HashStore,
    Sidecar,
    identity,
    settled,
)
from .opener import RootOpener
from .reads import read_all

__all__ = [
    "CacheCandidate",
    "Prepared",
    "Rep",
    "Resolution",
    "resolve",
]

log = logging.getLogger("serverio")

@dataclass(slots=True)
class Prepared:
    """A plan, and the open file it streams from (``fd == -1``: none).

    Follow-ups (finished by :class:`serverio.pipeline.content.ContentService` on the
    trio side before the plan is carried out; ``needs_followup``):

    * ``listing``: ``fd`` is a directory to list; ``plan`` is a placeholder;
    * ``compress``: a content coding to produce on the fly; ``plan`` is a
      placeholder, ``extra`` the headers the file response carries
      (Content-Disposition);
    * ``digest``: the algorithm of a Repr-Digest for the representation
      ``plan`` serves: ``fd`` (kept open for it even when the body was read
      in the hop) holds its bytes, ``facts`` their identity and ``coding``
      their content coding (a sidecar's, or ``""``; after compression the
      coding produced, with its bytes in ``data``).

    Each flag is cleared when its follow-up is done.
    """

    plan: Plan
    fd: int = -1
    facts: FileFacts | None = field(default=None)
    listing: bool = False
    compress: str = ""
    extra: tuple[tuple[bytes, bytes], ...] = ()
    digest: str = ""
    coding: str = ""
    data: bytes | None = None  # compressed body, once a follow-up produced it
    # The identity bytes, when they are in memory (the warm-file cache, or
    # the read that just filled it): a compression follow-up uses them
    # instead of reading the file again.
    source: bytes | None = None
    hash_job: bool = False
    # A ready literal body source for ``plan`` (the warm memo's, shared:
    # a literal body owns nothing); used only while ``plan.body`` is still
    # the tuple it was made from.
    body: Body | None = None
    # What the answer's bytes come from, as the path a site rule's glob sees
    # ("/a/index.html"; a listed directory ends with "/", the root's listing
    # is "/"); None when nothing was resolved (an error, a redirect).  The site's access rules
    # are decided on it (serverio.site.service, "the resolved target").
    served: str | None = None

    @property
    def needs_followup(self) -> bool:
        return self.listing or bool(self.compress) or bool(self.digest) or self.hash_job

    def close(self) -> None:
        """Close the descriptor; safe to call again (the second call is a no-op)."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            close_fd(fd)

    def take_body(self) -> Body:
        """The finished response's body source; the descriptor moves to it
        (this then holds nothing to close)."""
        body = self.body
        plan = self.plan
        if body is not None and self.fd < 0 and body.pieces is plan.body:
            return body
        fd, self.fd = self.fd, -1
        return Body.of(plan, fd)



def _open_file(opener: RootOpener, rel: str) -> tuple[int, os.stat_result] | None:
    """Open ``rel`` if it is a regular file; None if it is missing or not one."""
    try:
        fd = opener.open(rel)
    except OSError as exc:
        if errno_status(exc.errno) in (403, 404):
            return None
        raise
    try:
        st = winstat.fstat(fd)
    except BaseException:
        os.close(fd)
        raise
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return None
    return fd, st


class _Shrank(Exception):
    """The file is shorter than its fstat said: it is being rewritten."""


@functools.lru_cache(maxsize=8)
def _policy(mode: str, hash_max: int, epoch: int | None) -> EtagPolicy:
    return EtagPolicy(mode, hash_max, None if epoch is None else epoch * 10**9)


def _hash_settled(st: os.stat_result, now: float) -> bool:
    """May a content hash of this file be stored under its identity?

    Its ctime is more than RACY_SECONDS old: any write (and any utime)
    sets the ctime to the current time, so a later change is a new
    identity.  (Not the mtime: tools set it anywhere, the future included,
    and a file with a future mtime would otherwise never be hashed.)
    """
    return st.st_ctime_ns < int((now - RACY_SECONDS) * 1e9)


def _facts(
    st: os.stat_result,
    content_type: str,
    cfg: Config,
    hashes: HashStore | None,
    now: float,
    fd: int = -1,
    data: bytes | None = None,
) -> tuple[FileFacts, bytes | None]:
    """The file's facts with what its ETag needs (serverio.http.core), and its
    whole content: ``data`` as given, or what this had to read for the hash
    (else ``None``).

    The rule (:func:`~serverio.http.core.wants_content_hash`) decides;
    this gathers: a stored hash of the same settled identity, the hash of
    ``data`` (or of the bytes read from ``fd``) for a small file, or, for a
    large one, ``hash_pending`` (the trio side computes it in the work
    pool).  Raises :class:`_Shrank` if the file is shorter than ``st``.
    """
    policy = _policy(cfg.etag, cfg.small_file_size, cfg.source_date_epoch)
    size = st.st_size
    shared = (
        hashes is not None
        and policy.mode == "auto"
        and size > policy.hash_max
        and hashes.shared_mtime(st)
    )
    synthetic = mtime_is_synthetic(st.st_mtime_ns, policy, shared)
    digest: bytes | None = None
    pending = False
    if wants_content_hash(size, synthetic, policy):
        ok = _hash_settled(st, now)
        ident = identity(st)
        if hashes is not None and ok:
            # Also when the bytes are in hand (a small body read in the hop):
            # a stored hash of the same settled identity saves hashing them.
            digest = hashes.get(ident)
        if digest is None:
            if data is None and size <= policy.hash_max and fd >= 0:
                data = read_all(fd, size)
                if data is None:
                    raise _Shrank
            if data is not None:
                digest = content_digest(data)
                if ok and hashes is not None:
                    hashes.put(ident, digest)
            else:
                pending = True
    facts = FileFacts(
        size=size,
        mtime_ns=st.st_mtime_ns,
        dev=st.st_dev,
        ino=st.st_ino,
        content_type=content_type,
        content_hash=digest,
        hash_pending=pending,
        synthetic_mtime=synthetic,
        ctime_ns=st.st_ctime_ns,
    )
    return facts, data




# Resolution kinds.
FILE = "file"  # a regular file (``file``), with its usable sidecars
CACHED = "cached"  # the candidate handed in is still valid: answer from memory
ERROR = "error"  # ``status``: missing, refused, not a regular file, an errno
DIRECTORY = "directory"  # a directory without index (or without its slash)
LISTING = "listing"  # a directory to list: ``fd`` is open on it
UNAVAILABLE = "unavailable"  # the file shrank while it was read: try again


@dataclass(slots=True)
class Rep:
    """One representation found on disk: the file itself, or a sidecar.

    ``fd`` is open on it (-1 once closed); ``data`` its whole content when
    the hop read it (a small body, the warm-file cache, its ETag's hash);
    ``hash_settled``: its identity may carry a stored content hash
    (:func:`_hash_settled`); ``shrank``: it was shorter than its ``fstat``
    (serving it is a 503)."""

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
    """What :func:`resolve` found (facts and descriptors, no plan)."""

    kind: str
    status: int = 0  # ERROR
    fd: int = -1  # LISTING: the directory
    relpath: str = ""  # FILE: the path served (an index file, the SPA file)
    ctype: str = ""  # FILE: its media type
    file: Rep | None = None  # FILE
    # FILE: the sidecars present and not older than the file, by coding.
    sidecars: dict[str, Rep] = field(default_factory=dict)

    def close(self) -> None:
        """Close every descriptor still held (idempotent)."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            close_fd(fd)
        if self.file is not None:
            self.file.close()
        for rep in self.sidecars.values():
            rep.close()


def _status(exc: OSError) -> int:
    status = errno_status(exc.errno)
    if status == 500:
        log.error(
            "filesystem error %s while preparing a response", errno.errorcode.get(exc.errno or 0)
        )
    return status


def _wants_bytes(req: RequestFacts) -> bool:
    """Read a small body whole in the hop?  For a GET that probably sends
    it: not for HEAD, nor for a revalidation (If-None-Match,
    If-Modified-Since: usually a 304).  A hint only: a body that turns out
    to be needed after all is streamed from the descriptor."""
    return (
        req.method == b"GET" and req.if_none_match is None and req.if_modified_since is None
    )


def resolve(
    req: RequestFacts,
    cfg: Config,
    opener: RootOpener,
    now: float,
    cache: FileCache | None = None,
    mono: float = UNTIMED,
    hashes: HashStore | None = None,
    hit: CacheCandidate | None = None,
) -> Resolution:
    """Open, validate and gather facts.  Blocking; never raises for
    filesystem trouble (it becomes an ERROR resolution).

    ``hit``: a warm-file cache candidate (found without a syscall by the
    caller); it is revalidated here with one ``stat`` and answered as
    CACHED if still valid.  With ``cache``, a settled small file read here
    is stored there; ``mono`` (trio clock) stamps the revalidation for
    pooled mode's trust window (:data:`~serverio.fs.filecache.UNTIMED`:
    none).  ``hashes`` keeps the content hashes ETags are made of.
    """
    target = req.target
    if cache is not None:
        if hit is not None and cache.revalidate(hit.key, hit.entry, opener.stat, mono):
            return Resolution(CACHED)
        if target.segments and not target.slash:
            cache.miss()  # a path that names a file: looked up, answered from disk
    fd = -1
    try:
        try:
            fd = opener.open(target.relpath)
        except OSError as exc:
            # SPA fallback: only for a path that is really missing (not one
            # refused by containment: EXDEV, ELOOP), and only if the SPA
            # file itself opens under the same containment.  The opener
            # never looks outside the root, so ENOENT/ENOTDIR from it means
            # missing inside: no further open is needed to tell.
            if exc.errno not in (errno.ENOENT, errno.ENOTDIR) or not spa_fallback_applies(req, cfg):
                raise
            assert cfg.spa is not None
            opened = _open_file(opener, cfg.spa)
            if opened is None:
                raise
            spa_fd, spa_st = opened  # ownership moves to _resolve_file
            return _resolve_file(req, cfg, opener, now, spa_fd, spa_st, cfg.spa, hashes=hashes)
        st = winstat.fstat(fd)
        relpath = target.relpath
        if stat.S_ISDIR(st.st_mode):
            if not target.slash and target.segments:
                return Resolution(DIRECTORY)
            for index in cfg.index:
                rel = f"{target.relpath}/{index}" if target.segments else index
                opened = _open_file(opener, rel)
                if opened is not None:
                    close_fd(fd)
                    fd, st = opened
                    relpath = rel
                    break
            else:
                if not cfg.listing:
                    return Resolution(DIRECTORY)
                # The scan runs in the work pool (serverio.pipeline.content); the
                # directory descriptor goes with it.
                listing = Resolution(LISTING, fd=fd)
                fd = -1
                return listing
        elif not stat.S_ISREG(st.st_mode):
            # FIFO, socket, device: never served (opened O_NONBLOCK, so the
            # open itself could not hang).
            return Resolution(ERROR, 404)
        elif target.slash:
            # "/file.txt/" names a directory that does not exist (POSIX
            # resolution would have said ENOTDIR for "file.txt/.").
            return Resolution(ERROR, 404)
        file_fd, fd = fd, -1  # ownership moves to _resolve_file
        return _resolve_file(req, cfg, opener, now, file_fd, st, relpath, cache, mono, hashes)
    except OSError as exc:
        return Resolution(ERROR, _status(exc))
    finally:
        if fd >= 0:
            close_fd(fd)


def _resolve_file(
    req: RequestFacts,
    cfg: Config,
    opener: RootOpener,
    now: float,
    fd: int,
    st: os.stat_result,
    relpath: str,
    cache: FileCache | None = None,
    mono: float = UNTIMED,
    hashes: HashStore | None = None,
) -> Resolution:
    """The facts of the regular file open on ``fd`` (which this owns) and of
    the sidecars this request could be answered with.

    With ``cache``, a small settled file named directly by the target is
    read whole and stored (serverio.fs.filecache) with the state of every
    sidecar this request negotiated, so the next request can make the
    same choice from memory.
    """
    reps: list[Rep] = []  # owned here until the resolution is returned
    try:
        ctype = guess_type(relpath.rsplit("/", 1)[-1])
        try:
            facts, data = _facts(st, ctype, cfg, hashes, now, fd)
        except _Shrank:
            return Resolution(UNAVAILABLE)
        _, vary = file_headers(req, cfg, relpath, ctype)
        wants = _wants_bytes(req)
        small = cfg.small_file_size
        entry: CachedFile | None = None
        if (
            cache is not None
            and not digest_algorithm(req, cfg)  # a digest job reads from a descriptor
            and relpath == req.target.relpath
            and not req.target.slash
            and settled(st, now)
        ):
            if cache.admits(st.st_size):
                if data is None:
                    data = read_all(fd, st.st_size)
                if data is None:
                    return Resolution(UNAVAILABLE)
                entry = CachedFile(identity(st), facts, data, mono)
            elif negotiates(req, vary):
                # Too large to keep, but a built site's sidecars of it are
                # often small: keep those and the file's identity, so the
                # next negotiated request for it is answered from memory
                # after the same stats as a small file's.
                entry = CachedFile(identity(st), facts, b"", mono, whole=False)
        if data is None and wants and st.st_size <= small:
            # Small body: read it now, in this same hop, and send it with the
            # head in one write.
            data = read_all(fd, st.st_size)
            if data is None:
                return Resolution(UNAVAILABLE)
        main = Rep(fd, facts, data, _hash_settled(st, now))
        reps.append(main)
        fd = -1
        sidecars: dict[str, Rep] = {}
        if negotiates(req, vary):
            for c in sidecars_wanted(req, cfg):
                path = relpath + SIDECAR_SUFFIX[c]
                opened = _open_file(opener, path)
                if opened is None:
                    if entry is not None:
                        entry.sidecars[c] = Sidecar(path, None, None)
                    continue
                side_fd, side_st = opened
                if side_st.st_mtime_ns < st.st_mtime_ns:
                    close_fd(side_fd)  # stale: older than the file
                    if entry is not None:
                        entry.sidecars[c] = Sidecar(path, identity(side_st), None)
                    continue
                rep = Rep(side_fd, facts, None, _hash_settled(side_st, now))
                reps.append(rep)
                sidecars[c] = rep
                side_data: bytes | None = None
                if (
                    entry is not None
                    and cache is not None
                    and cache.admits(side_st.st_size)
                    and settled(side_st, now)
                ):
                    side_data = read_all(side_fd, side_st.st_size)
                    if side_data is not None:
                        side_facts, _ = _facts(side_st, ctype, cfg, hashes, now, data=side_data)
                        side = CachedFile(identity(side_st), side_facts, side_data, mono)
                        entry.sidecars[c] = Sidecar(path, side.ident, side)
                # Otherwise no state is recorded for c: a later request
                # that wants it resolves the file again.
                if side_data is None and wants and side_st.st_size <= small:
                    side_data = read_all(side_fd, side_st.st_size)
                    if side_data is None:
                        rep.shrank = True
                        continue
                try:
                    rep.facts, rep.data = _facts(
                        side_st, ctype, cfg, hashes, now, side_fd, side_data
                    )
                except _Shrank:
                    rep.shrank = True
                    continue
                if rep.data is None:
                    rep.data = side_data
        if entry is not None and (
            entry.whole or any(s.cached is not None for s in entry.sidecars.values())
        ):
            assert cache is not None
            cache.put(relpath, entry)
        if not digest_algorithm(req, cfg):
            # A representation read whole needs no descriptor any more
            # (only a digest or hash job reads one): close it here, in the
            # blocking hop.  close(2) is filesystem work too (a FUSE FLUSH,
            # an NFS CLOSE), and the event loop would otherwise make it.
            for rep in (main, *sidecars.values()):
                if rep.data is not None and not (rep.facts.hash_pending and rep.hash_settled):
                    rep.close()
        resolution = Resolution(FILE, relpath=relpath, ctype=ctype, file=main, sidecars=sidecars)
        reps.clear()  # ownership moves to the caller
        return resolution
    except OSError as exc:
        return Resolution(ERROR, _status(exc))
    finally:
        if fd >= 0:
            close_fd(fd)
        for rep in reps:
            rep.close()


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
