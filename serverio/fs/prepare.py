"""The preparation step: the only code that touches the filesystem per request.

One call does containment, open, fstat, regular-file validation, MIME
selection, the decision (pure core) and, for small bodies, the read.  It is
one call so that it costs one thread hop when it runs in the ``fs`` pool
(:mod:`serverio.concurrency.blocking`); it is synchronous and never touches trio.

It returns a :class:`Prepared`: the plan plus, when the body must be streamed
from the file, the opened descriptor.  Whoever receives a ``Prepared`` owns
that descriptor and must call :meth:`Prepared.close` exactly once (the
response emitter does, or the late-close path if the waiter was cancelled).
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import stat
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from ..config import Config
from ..errors import errno_status
from ..http.core import (
    EtagPolicy,
    FileFacts,
    FileSpan,
    Plan,
    RequestFacts,
    content_digest,
    decide_directory,
    decide_file,
    depends_on_method_only,
    error_plan,
    mtime_is_synthetic,
    precondition_plan,
    spa_fallback_applies,
    wants_content_hash,
)
from ..http.mime import guess_type
from ..http.negotiate import (
    SIDECAR_SUFFIX,
)
from ..http.select import (
    choose_coding,
    digest_algorithm,
    digest_applies,
    file_headers,
    negotiates,
    sidecars_wanted,
)
from ..http.wire import head_bytes
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
from .reads import pread

__all__ = [
    "CacheCandidate",
    "Prepared",
    "cache_candidate",
    "prepare",
    "prepare_cached",
    "serve_cached",
]

log = logging.getLogger("serverio")

_PLAIN_METHODS = frozenset({b"GET", b"HEAD"})


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
        fd, self.fd = self.fd, -1
        return Body.of(self.plan, fd)


def _errno_plan(exc: OSError, now: float, head: bool) -> Plan:
    status = errno_status(exc.errno)
    if status == 500:
        log.error(
            "filesystem error %s while preparing a response", errno.errorcode.get(exc.errno or 0)
        )
    return error_plan(status, now, head_only=head)


def _read_all(fd: int, size: int) -> bytes | None:
    """The first ``size`` bytes of the file; None if it is shorter now."""
    data = pread(fd, size, 0)
    while len(data) < size:
        more = pread(fd, size - len(data), len(data))
        if not more:
            return None
        data += more
    return data


def _read_spans(fd: int, plan: Plan) -> Plan | None:
    """The plan with its file spans replaced by their bytes; None if the file shrank."""
    body: list[bytes | FileSpan] = []
    for piece in plan.body:
        if isinstance(piece, FileSpan):
            data = pread(fd, piece.length, piece.offset)
            while len(data) < piece.length:
                more = pread(fd, piece.length - len(data), piece.offset + len(data))
                if not more:
                    return None
                data += more
            body.append(data)
        else:
            body.append(piece)
    return replace(plan, body=tuple(body))


def _slice_spans(data: bytes, plan: Plan) -> Plan:
    """The plan with its file spans replaced by slices of the whole file's ``data``."""
    return replace(
        plan,
        body=tuple(
            data[p.offset : p.offset + p.length] if isinstance(p, FileSpan) else p
            for p in plan.body
        ),
    )


def _open_file(opener: RootOpener, rel: str) -> tuple[int, os.stat_result] | None:
    """Open ``rel`` if it is a regular file; None if it is missing or not one."""
    try:
        fd = opener.open(rel)
    except OSError as exc:
        if errno_status(exc.errno) in (403, 404):
            return None
        raise
    try:
        st = os.fstat(fd)
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
    whole content when this had to read it for that (else ``None``).

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
        if data is None and hashes is not None and ok:
            digest = hashes.get(ident)
        if digest is None:
            if data is None and size <= policy.hash_max and fd >= 0:
                data = _read_all(fd, size)
                if data is None:
                    raise _Shrank
            if data is not None:
                digest = content_digest(data)
                if ok and hashes is not None:
                    hashes.put(ident, digest)
            else:
                pending = True
        else:
            data = None
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


def cache_candidate(cache: FileCache, req: RequestFacts, cfg: Config) -> CacheCandidate | None:
    """The cache entry for the file ``req`` names directly, or None.

    Coding negotiation is answered from the sidecar states recorded with
    the entry (each revalidated with it); a coding never looked at for
    this file, or a Repr-Digest, needs the file itself: None.  No syscall;
    any thread.
    """
    target = req.target
    if target.slash or not target.segments:
        return None
    entry = cache.get(target.relpath)
    if entry is None:
        return None
    if target.query:
        extra, vary = file_headers(req, cfg, target.relpath, entry.facts.content_type)
    else:
        # Without a query they depend on the file alone: memoised.
        if entry.headers is None:
            entry.headers = file_headers(req, cfg, target.relpath, entry.facts.content_type)
        extra, vary = entry.headers
    if digest_algorithm(req, cfg):
        return None  # the digest job reads from a descriptor
    if not negotiates(req, vary):
        return CacheCandidate(target.relpath, entry, extra, vary, "", entry)
    # The sidecar facts recorded with the entry stand in for the open files.
    sidecars: dict[str, CachedFile] = {}
    for c in sidecars_wanted(req, cfg):
        known = entry.sidecars.get(c)
        if known is None:
            return None  # never looked at with this file
        if known.cached is not None:
            sidecars[c] = known.cached
    coding, from_sidecar = choose_coding(req, cfg, entry.facts.size, sidecars)
    rep = sidecars[coding] if from_sidecar else entry
    return CacheCandidate(target.relpath, entry, extra, vary, coding, rep)


def serve_cached(
    cache: FileCache,
    hit: CacheCandidate,
    req: RequestFacts,
    cfg: Config,
    now: float,
    boundary: str,
) -> Prepared:
    """The response from a candidate the caller has found valid.

    A plain request (no precondition, no range, no query: what browsers
    and benchmarks send most) gets the same response for the whole
    second of its Date header, so the plan and its serialised head are
    memoised per method and second.  Shared plans are never mutated: the
    connection only reads them.
    """
    cache.hit()
    rep = hit.rep
    assert rep is not None
    if hit.coding and rep is hit.entry:
        return _serve_on_the_fly(hit, req, cfg, now)
    # Keyed by method: only the two methods served here (any other is a
    # 405 before preparation), so the memo has at most 2 x 4 entries.
    plain = req.method in _PLAIN_METHODS and depends_on_method_only(req)
    second = int(now)
    memo_key = (req.method, hit.coding)
    plain_memo = hit.entry.plain
    if plain:
        memo = plain_memo.get(memo_key)
        if memo is not None and memo[0] == second:
            return Prepared(memo[1], facts=rep.facts, coding=hit.coding)
    # Identity, or a precompressed sidecar (its own length, ETag).
    plan = decide_file(
        req, rep.facts, cfg, now, boundary, coding=hit.coding, vary=hit.vary, extra=hit.extra
    )
    if plan.needs_file:
        plan = _slice_spans(rep.data, plan)
    if plain:
        plan = replace(
            plan, head=head_bytes(plan.status, plan.headers, close=False, keep_alive_10=False)
        )
        plain_memo[memo_key] = (second, plan)
    return Prepared(plan, facts=rep.facts, coding=hit.coding)


def _serve_on_the_fly(hit: CacheCandidate, req: RequestFacts, cfg: Config, now: float) -> Prepared:
    # From the compression cache (a follow-up on the trio side).  No
    # descriptor: on a miss there, the job compresses the cached bytes.
    facts = hit.entry.facts
    pre = precondition_plan(req, facts, cfg, now, coding=hit.coding, vary=True)
    if pre is not None:
        return Prepared(pre)
    return Prepared(
        _placeholder(now), -1, facts, compress=hit.coding, extra=hit.extra, source=hit.entry.data
    )


def prepare_cached(
    cache: FileCache,
    req: RequestFacts,
    cfg: Config,
    now: float,
    boundary: str,
    mono: float,
    opener: RootOpener,
) -> Prepared | None:
    """The response from the warm-file cache after one ``stat``, or None.

    Blocking: the inline path, or inside the pool's hop.  (Pooled mode's
    no-syscall window is applied by the server on the event loop.)
    """
    hit = cache_candidate(cache, req, cfg)
    if hit is None or not cache.revalidate(hit.key, hit.entry, opener.stat, mono):
        return None
    return serve_cached(cache, hit, req, cfg, now, boundary)


def prepare(
    req: RequestFacts,
    cfg: Config,
    opener: RootOpener,
    now: float,
    boundary: str = "",
    cache: FileCache | None = None,
    mono: float = UNTIMED,
    hashes: HashStore | None = None,
) -> Prepared:
    """Resolve, open, validate and decide.  Blocking; never raises for
    filesystem trouble (it becomes a plan).

    With ``cache``, a warm small file is answered from memory after one
    ``stat`` (:func:`prepare_cached`), and a settled small file read here
    is stored there; ``mono`` (trio clock) stamps the revalidation for pooled
    mode's trust window (:data:`~serverio.fs.filecache.UNTIMED`: none).
    ``hashes`` keeps the content hashes ETags are made of.
    """
    if cache is not None:
        hit = prepare_cached(cache, req, cfg, now, boundary, mono, opener)
        if hit is not None:
            return hit
        if req.target.segments and not req.target.slash:
            cache.miss()  # a path that names a file: looked up, answered from disk
    head = req.method == b"HEAD"
    target = req.target
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
            spa_fd, spa_st = opened  # ownership moves to _prepare_file
            return _prepare_file(
                req, cfg, opener, now, boundary, spa_fd, spa_st, cfg.spa, hashes=hashes
            )
        st = os.fstat(fd)
        relpath = target.relpath
        if stat.S_ISDIR(st.st_mode):
            if not target.slash and target.segments:
                return Prepared(decide_directory(req, cfg, now))
            for index in cfg.index:
                rel = f"{target.relpath}/{index}" if target.segments else index
                opened = _open_file(opener, rel)
                if opened is not None:
                    os.close(fd)
                    fd, st = opened
                    relpath = rel
                    break
            else:
                if not cfg.listing:
                    return Prepared(decide_directory(req, cfg, now))
                # The scan runs in the work pool (serverio.pipeline.content); the
                # directory descriptor goes with it.
                prepared = Prepared(_placeholder(now), fd, listing=True)
                fd = -1
                return prepared
        elif not stat.S_ISREG(st.st_mode):
            # FIFO, socket, device: never served (opened O_NONBLOCK, so the
            # open itself could not hang).
            return Prepared(error_plan(404, now, head_only=head))
        elif target.slash:
            # "/file.txt/" names a directory that does not exist (POSIX
            # resolution would have said ENOTDIR for "file.txt/.").
            return Prepared(error_plan(404, now, head_only=head))
        file_fd, fd = fd, -1  # ownership moves to _prepare_file
        return _prepare_file(
            req, cfg, opener, now, boundary, file_fd, st, relpath, cache, mono, hashes
        )
    except OSError as exc:
        return Prepared(_errno_plan(exc, now, head))
    finally:
        if fd >= 0:
            os.close(fd)


def _unavailable(now: float) -> Plan:
    # The file shrank while we read it: try again (never a short body).
    return error_plan(503, now)


def _placeholder(now: float) -> Plan:
    # Replaced by the follow-up; if a bug ever skipped it, a 500 goes out
    # (dated now), never a wrong 200.
    return error_plan(500, now)


def _prepare_file(
    req: RequestFacts,
    cfg: Config,
    opener: RootOpener,
    now: float,
    boundary: str,
    fd: int,
    st: os.stat_result,
    relpath: str,
    cache: FileCache | None = None,
    mono: float = UNTIMED,
    hashes: HashStore | None = None,
) -> Prepared:
    """The response for the regular file open on ``fd`` (which this owns).

    With ``cache``, a small settled file named directly by the target is
    read whole and stored (serverio.fs.filecache) with the state of every
    sidecar this request negotiated, so the next request can make the
    same choice from memory.
    """
    try:
        ctype = guess_type(relpath.rsplit("/", 1)[-1])
        try:
            facts, data = _facts(st, ctype, cfg, hashes, now, fd)
        except _Shrank:
            return Prepared(_unavailable(now))
        extra, vary = file_headers(req, cfg, relpath, ctype)
        digest = digest_algorithm(req, cfg)
        entry: CachedFile | None = None
        if (
            cache is not None
            and not digest
            and relpath == req.target.relpath
            and not req.target.slash
            and cache.admits(st.st_size)
            and settled(st, now)
        ):
            if data is None:
                data = _read_all(fd, st.st_size)
            if data is None:
                return Prepared(_unavailable(now), facts=facts)
            entry = CachedFile(identity(st), facts, data, mono)
        served = entry  # the cached bytes of the representation served, if any
        coding, sidecar = "", False
        if negotiates(req, vary):
            sidecars: dict[str, tuple[int, os.stat_result]] = {}
            cached_sidecars: dict[str, CachedFile] = {}
            try:
                for c in sidecars_wanted(req, cfg):
                    path = relpath + SIDECAR_SUFFIX[c]
                    opened = _open_file(opener, path)
                    if opened is None:
                        if entry is not None:
                            entry.sidecars[c] = Sidecar(path, None, None)
                        continue
                    side_st = opened[1]
                    if side_st.st_mtime_ns < st.st_mtime_ns:
                        os.close(opened[0])  # stale: older than the file
                        if entry is not None:
                            entry.sidecars[c] = Sidecar(path, identity(side_st), None)
                        continue
                    sidecars[c] = opened
                    if (
                        entry is not None
                        and cache is not None
                        and cache.admits(side_st.st_size)
                        and settled(side_st, now)
                    ):
                        side_data = _read_all(opened[0], side_st.st_size)
                        if side_data is not None:
                            side_facts, _ = _facts(side_st, ctype, cfg, hashes, now, data=side_data)
                            side = CachedFile(identity(side_st), side_facts, side_data, mono)
                            entry.sidecars[c] = Sidecar(path, side.ident, side)
                            cached_sidecars[c] = side
                    # Otherwise no state is recorded for c: a later
                    # request that wants it prepares the file again.
                coding, sidecar = choose_coding(req, cfg, st.st_size, sidecars)
                if sidecar:
                    # Serve the sidecar: its own length, identity, ETag.
                    os.close(fd)
                    fd, st = sidecars.pop(coding)
                    served = cached_sidecars.get(coding)
                    try:
                        facts, data = _facts(
                            st, ctype, cfg, hashes, now, fd, served.data if served else None
                        )
                    except _Shrank:
                        return Prepared(_unavailable(now))
            finally:
                for sfd, _ in sidecars.values():
                    os.close(sfd)
        if entry is not None:
            assert cache is not None
            cache.put(relpath, entry)
        if coding and not sidecar:
            pre = precondition_plan(req, facts, cfg, now, coding=coding, vary=True)
            if pre is not None:
                return Prepared(pre)  # 304/412 without compressing anything
            source = entry.data if entry is not None else None
            prepared = Prepared(
                _placeholder(now), fd, facts, compress=coding, extra=extra, source=source
            )
            fd = -1
            prepared.digest = digest
            prepared.hash_job = facts.hash_pending and _hash_settled(st, now)
            return prepared
        plan = decide_file(req, facts, cfg, now, boundary, coding=coding, vary=vary, extra=extra)
        if not digest_applies(plan):
            digest = ""
        # The ETag's hash job (large settled files) reads this descriptor too.
        hash_job = facts.hash_pending and _hash_settled(st, now)
        keep = bool(digest) or hash_job  # the hash jobs read from this descriptor
        if served is not None:
            if plan.needs_file:
                plan = _slice_spans(served.data, plan)
        elif data is not None:
            if plan.needs_file:
                plan = _slice_spans(data, plan)  # read whole for its ETag already
        elif plan.needs_file and plan.file_bytes <= cfg.small_file_size:
            # Small body: read it now, in this same hop, and send it with the
            # head in one write.
            read = _read_spans(fd, plan)
            if read is None:
                return Prepared(_unavailable(now), facts=facts)
            plan = read
        elif plan.needs_file:
            keep = True
        prepared = Prepared(plan, facts=facts, coding=coding, digest=digest, hash_job=hash_job)
        if keep:
            prepared.fd, fd = fd, -1  # ownership moves to the caller
        return prepared
    except OSError as exc:
        return Prepared(_errno_plan(exc, now, req.method == b"HEAD"))
    finally:
        if fd >= 0:
            os.close(fd)
