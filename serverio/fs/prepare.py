r"""Resolution: the filesystem work of answering a GET or HEAD of a file.

:func:`resolve` opens what a :class:`~serverio.http.select.Lookup` names
(the request as facts, made on the trio side by
:func:`~serverio.http.select.lookup`: fs never sees a request) under
containment: the file, an index file, the ``--spa`` fallback, the
precompressed sidecars the request could be answered with.  It ``fstat``\ s
each, checks it is a regular file, computes its facts (with the content
hash a small file's ETag is made of) and, for a GET that probably sends
it (:attr:`~serverio.http.select.Lookup.wants_bytes`), reads a small body
whole.  Which sidecars to open and which descriptors to keep it asks
:mod:`serverio.http.select` (the file's headers, Vary, the codings worth
a sidecar, whether an on-the-fly coding makes a cache entry worth
keeping); those selection facts travel on the
:class:`~serverio.model.Resolution` it returns, with the open descriptors.
It makes no plan and no status: the decision
(:mod:`serverio.model.decide`, over :mod:`serverio.http.select` and
:func:`serverio.http.core.decide_file`) runs on the trio side after it.
It is one call so that it costs one thread hop when it runs in the ``fs``
pool (:mod:`serverio.concurrency.blocking`); it is synchronous and never
touches trio.  It also fills the warm-file cache
(:mod:`serverio.fs.filecache`) with a small settled file it read, and
revalidates a candidate entry handed to it (one ``stat``) so that the
pooled path stays at one hop.

:func:`resolve_direct` is the same work for the request asked most on a
site of many files, a plain GET or HEAD of a small file the byte cache
does not hold, in one function (inline mode): equal to :func:`resolve`
followed by the decision, answer for answer and store for store
(tests/test_direct.py), without its layers.

What it cannot serve it says *why*: a :class:`~serverio.model.Reason` (not
found, a name containment refused, not a regular file, an errno's), never
an HTTP status; :data:`serverio.model.reasons.REASON_STATUS` maps reasons
to statuses, once.

Whoever receives a ``Resolution`` owns its descriptors and must call
:meth:`~serverio.model.Resolution.close` (or hand them on, as the decision
does) exactly once; the late-close path of ``run_blocking`` does if the
waiter was cancelled.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import stat
from collections.abc import Callable
from typing import NamedTuple

from ..config import Config
from ..http.core import (
    EtagPolicy,
    FileFacts,
    content_digest,
    mtime_is_synthetic,
    wants_content_hash,
)
from ..http.mime import guess_type
from ..http.negotiate import SIDECAR_SUFFIX
from ..http.select import Lookup, choose_coding_for, file_fields, sidecars_wanted_for
from ..http.target import Target
from ..model import (
    CACHED,
    DIRECTORY,
    ERROR,
    FILE,
    LISTING,
    UNAVAILABLE,
    CacheCandidate,
    CachedFile,
    Direct,
    Identity,
    Reason,
    Rep,
    Resolution,
    Sidecar,
    close_fd,
    errno_reason,
)
from . import winstat
from .filecache import (
    RACY_SECONDS,
    UNTIMED,
    FileCache,
    FileMeta,
    HashStore,
    MetaCache,
    identity,
    settled,
)
from .opener import ContainedRoot, Unreached
from .reads import read_all

__all__ = ["follows_links", "resolve", "resolve_direct", "stat_facts"]

log = logging.getLogger("serverio")

# The reasons an index file, the SPA file or a sidecar is simply absent: it
# is not there, or we may not have it.  Anything else (EIO, EMFILE) fails
# the whole resolution.
_ABSENT = frozenset({Reason.NOT_FOUND, Reason.FORBIDDEN_NAME, Reason.DENIED})


def _open(opener: ContainedRoot, rel: str, resolving: bool) -> tuple[int, str | None]:
    """Open ``rel`` under containment; with ``resolving`` (the site has auth
    rules), also where a symlink on the way led (``open_resolved``), whose
    rules the access hook then decides on as well."""
    if resolving:
        return opener.open_resolved(rel)
    return opener.open(rel), None


def _open_file(
    opener: ContainedRoot, rel: str, resolving: bool = False
) -> tuple[int, os.stat_result, str | None] | None:
    """Open ``rel`` if it is a regular file (its descriptor, ``fstat`` and
    resolved path, see :func:`_open`); None if it is missing or not one."""
    try:
        fd, real = _open(opener, rel, resolving)
    except OSError as exc:
        if errno_reason(exc.errno) in _ABSENT:
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
    return fd, st, real


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


# The content hash of a file of at most this many bytes is made again on
# each miss rather than kept in the hash store: BLAKE2b of 1 KiB costs
# about 1.7 µs here, as much as the store's lookup and store (1.3-1.6 µs),
# and each hash kept holds about 350 bytes (its identity, the digest, the
# LRU's node): 23 MiB for the 65,536 a site of many small files fills it
# with.  Their facts, hash included, are still kept by the metadata cache.
_REHASH_MAX = 1024


def _facts(
    st: os.stat_result,
    content_type: str,
    cfg: Config,
    hashes: HashStore | None,
    now: float,
    fd: int = -1,
    data: bytes | None = None,
    ident: Identity | None = None,
) -> tuple[FileFacts, bytes | None]:
    """The file's facts with what its ETag needs (serverio.http.core), and its
    whole content: ``data`` as given, or what this had to read for the hash
    (else ``None``).

    The rule (:func:`~serverio.http.core.wants_content_hash`) decides;
    this gathers: a stored hash of the same settled identity, the hash of
    ``data`` (or of the bytes read from ``fd``) for a small file, or, for a
    large one, ``hash_pending`` (the trio side computes it in the work
    pool).  ``ident``: ``st``'s identity when the caller has it (one tuple
    shared by the caches that key on it).  Raises :class:`_Shrank` if the
    file is shorter than ``st``.
    """
    policy = _policy(cfg.files.etag, cfg.files.small_file_size, cfg.source_date_epoch)
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
        # Settled, and worth keeping (a tiny file's hash is made again).
        keep = _hash_settled(st, now) and size > _REHASH_MAX
        if ident is None:
            ident = identity(st)
        if hashes is not None and keep:
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
                if keep and hashes is not None:
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


def stat_facts(st: os.stat_result, cfg: Config, content_hash: bytes | None) -> FileFacts:
    """The facts (and so the ETag) a GET of this file would show, from its
    ``stat`` and, when known, the content hash of all its bytes (an
    upload hashes what it writes; the current file of a small-enough
    write is read for it).  Where the ETag rule wants a hash that is not
    given, there is no ETag (``hash_pending``), as for a GET before the
    hash is made."""
    policy = _policy(cfg.files.etag, cfg.files.small_file_size, cfg.source_date_epoch)
    synthetic = mtime_is_synthetic(st.st_mtime_ns, policy)
    wants = wants_content_hash(st.st_size, synthetic, policy)
    return FileFacts(
        size=st.st_size,
        mtime_ns=st.st_mtime_ns,
        dev=st.st_dev,
        ino=st.st_ino,
        content_type="",
        content_hash=content_hash if wants else None,
        hash_pending=wants and content_hash is None,
        synthetic_mtime=synthetic,
        ctime_ns=st.st_ctime_ns,
    )


def _failed(exc: OSError) -> Resolution:
    """The ERROR resolution of a filesystem call that raised ``exc``: its
    reason and errno (an errno that says nothing we can act on is logged
    here, where it happened)."""
    reason = errno_reason(exc.errno)
    if reason is Reason.FAILED:
        log.error(
            "filesystem error %s while preparing a response", errno.errorcode.get(exc.errno or 0)
        )
    # Failed past a symlink (auth rules only): where it got, whose rules
    # decide the error answer too (a missing name below a protected
    # directory tells nothing).
    real = exc.path if isinstance(exc, Unreached) else None
    return Resolution(ERROR, reason, exc.errno, real=real)


def follows_links(cfg: Config) -> bool:
    """Are rules decided on where a symlink leads (auth rules, or
    ``[[access]]`` / ``--allow``: :attr:`~serverio.config.UsersPolicy.rights`,
    read here as its two fields: a property of the configuration is one
    more layer entered per resolution)?"""
    users = cfg.users
    return bool(cfg.site.auth) or bool(users.access or users.allow)


def resolve(
    look: Lookup,
    cfg: Config,
    opener: ContainedRoot,
    now: float,
    cache: FileCache | None = None,
    mono: float = UNTIMED,
    hashes: HashStore | None = None,
    hit: CacheCandidate | None = None,
) -> Resolution:
    """Open, validate and gather facts.  Blocking; never raises for
    filesystem trouble (it becomes an ERROR resolution).

    ``look``: what the request asks, as facts
    (:func:`serverio.http.select.lookup`): the path, whether the ``--spa``
    file may stand in for it, whether a small body is read whole (a hint:
    a body needed after all is streamed from the descriptor), the codings
    negotiable and the digest asked for.

    ``hit``: a warm-file cache candidate (found without a syscall by the
    caller); it is revalidated here with one ``stat`` and answered as
    CACHED if still valid.  With ``cache``, a settled small file read here
    is stored there; ``mono`` (trio clock) stamps the revalidation for
    pooled mode's trust window (:data:`~serverio.fs.filecache.UNTIMED`:
    none).  ``hashes`` keeps the content hashes ETags are made of.

    With auth rules, each open also says where a symlink inside the root
    led (:attr:`~serverio.model.Resolution.real`), so that the rules of
    the resolved target are decided too; such a file is not put in the
    warm-file cache (whose hits are decided on their path alone).
    """
    target = look.target
    resolving = follows_links(cfg)
    if cache is not None:
        if hit is not None and cache.revalidate(hit.key, hit.entry, opener.stat, mono):
            return Resolution(CACHED)
        if target.segments and not target.slash:
            cache.miss()  # a path that names a file: looked up, answered from disk
    return _resolve_path(look, cfg, opener, now, resolving, cache, mono, hashes)


def _resolve_path(
    look: Lookup,
    cfg: Config,
    opener: ContainedRoot,
    now: float,
    resolving: bool,
    cache: FileCache | None,
    mono: float,
    hashes: HashStore | None,
    opened: tuple[int, os.stat_result] | None = None,
) -> Resolution:
    """:func:`resolve` past the warm-file cache: open the target under
    containment (or the ``--spa`` file standing in for a missing one) and
    answer for what it is: a file, a directory's index file, a listing, or
    why not.  ``resolving``: the site has auth rules (:func:`_open`).
    ``opened``: the target already opened (no auth rules) and its
    ``fstat``, handed over by :func:`resolve_direct` (the descriptor is
    this call's)."""
    target = look.target
    fd = -1 if opened is None else opened[0]
    real: str | None = None
    try:
        if opened is None:
            try:
                fd, real = _open(opener, target.relpath, resolving)
            except OSError as exc:
                # SPA fallback: only for a path that is really missing (not
                # one refused by containment: EXDEV, ELOOP), and only if the
                # SPA file itself opens under the same containment.  The
                # opener never looks outside the root, so ENOENT/ENOTDIR
                # from it means missing inside: no further open is needed.
                if exc.errno not in (errno.ENOENT, errno.ENOTDIR) or not look.spa:
                    raise
                assert cfg.content.spa is not None
                # Under mounts, the SPA file of the mount that matched.
                spa = opener.spa_path(target.relpath, cfg.content.spa)
                spa_opened = None if spa is None else _open_file(opener, spa, resolving)
                if spa_opened is None or spa is None:
                    raise
                spa_fd, spa_st, spa_real = spa_opened  # ownership moves to _resolve_file
                return _resolve_file(
                    look, cfg, opener, now, spa_fd, spa_st, (spa, spa_real), hashes=hashes
                )
        st = winstat.fstat(fd) if opened is None else opened[1]
        relpath = target.relpath
        if stat.S_ISDIR(st.st_mode):
            if not target.slash and target.segments:
                return Resolution(DIRECTORY, real=real)
            index = _index_file(opener, cfg, target.relpath if target.segments else "", resolving)
            if index is None:
                if not cfg.content.listing:
                    return Resolution(DIRECTORY, real=real)
                # The scan runs in the work pool (serverio.pipeline.content); the
                # directory descriptor goes with it.
                listing = Resolution(LISTING, fd=fd, real=real)
                fd = -1
                return listing
            close_fd(fd)
            fd, st, relpath, real = index
        elif not stat.S_ISREG(st.st_mode):
            # FIFO, socket, device: never served (opened O_NONBLOCK, so the
            # open itself could not hang).
            return Resolution(ERROR, Reason.NOT_REGULAR, real=real)
        elif target.slash:
            # "/file.txt/" names a directory that does not exist (POSIX
            # resolution would have said ENOTDIR for "file.txt/.").
            return Resolution(ERROR, Reason.NOT_FOUND, real=real)
        file_fd, fd = fd, -1  # ownership moves to _resolve_file
        return _resolve_file(
            look, cfg, opener, now, file_fd, st, (relpath, real), cache, mono, hashes
        )
    except OSError as exc:
        return _failed(exc)
    finally:
        if fd >= 0:
            close_fd(fd)


def resolve_direct(
    target: Target,
    wants_bytes: bool,
    negotiable: bool,
    cfg: Config,
    opener: ContainedRoot,
    now: float,
    cache: FileCache | None = None,
    hashes: HashStore | None = None,
    general: Callable[[], Lookup] | None = None,
) -> Direct | Resolution | None:
    """:func:`resolve` in one function, for the request it is asked most: a
    plain GET or HEAD (no precondition, Range, query or digest:
    :func:`~serverio.http.select.direct_applies`) of a small regular file
    the target names, answered with identity.  Blocking; inline mode only
    (the caller's check).

    The same steps as :func:`resolve` past the warm-file cache, without
    its layers (the lookup, the hop's record, the representation, the
    resolution and their closes: a sixth of the handler's time on a miss,
    docs/history/perf-round3.md): the miss counted, the contained open,
    the ``fstat``, the facts (from the metadata cache when its identity
    matches), admission and the stores into both caches, the read.  It
    returns the :class:`~serverio.model.Direct` read (the descriptor
    closed), or a :class:`~serverio.model.Resolution` for the decision
    to answer as :func:`resolve`'s: an ERROR or UNAVAILABLE one, or, for
    what is more than a small file's read (a directory, a file over the
    small-file size), :func:`resolve`'s own from the descriptor already
    open (``general`` makes the request's
    :class:`~serverio.http.select.Lookup` then; without it, None).  None
    before anything is opened for a coding to negotiate: the caller
    resolves the request the general way.  ``target``: the request's
    (segments, no slash, no query); ``wants_bytes``: a GET (a HEAD reads
    only what its ETag needs); ``negotiable``: the request sends
    Accept-Encoding.  Never with auth rules (the caller's check:
    the general way says where a symlink led).  A test holds every answer,
    cache store and count equal to :func:`resolve`'s
    (tests/test_direct.py).
    """
    relpath = target.relpath
    ctype = guess_type(relpath.rsplit("/", 1)[-1])
    extra, vary = file_fields(False, cfg, relpath, ctype)
    if vary and negotiable:
        return None  # the sidecars and codings: the general way
    found = _direct(
        relpath, ctype, extra, vary, wants_bytes, cfg, opener, now, cache, hashes, general
    )
    if found is not None and cache is not None:
        cache.miss()  # as resolve() counts a path that names a file (not when declined)
    return found


def _direct(
    relpath: str,
    ctype: str,
    extra: tuple[tuple[bytes, bytes], ...],
    vary: bool,
    wants_bytes: bool,
    cfg: Config,
    opener: ContainedRoot,
    now: float,
    cache: FileCache | None,
    hashes: HashStore | None,
    general: Callable[[], Lookup] | None,
) -> Direct | Resolution | None:
    """:func:`resolve_direct` past the request's checks."""
    try:
        fd = opener.open(relpath)
    except OSError as exc:
        return _failed(exc)  # (no --spa fallback for it: direct_applies)
    try:
        st = winstat.fstat(fd)
        size = st.st_size
        if stat.S_ISDIR(st.st_mode) or (
            stat.S_ISREG(st.st_mode) and size > cfg.files.small_file_size
        ):
            # A redirect, an index file or a listing; a file streamed from
            # its descriptor: the general way, from this descriptor.
            if general is None:
                return None
            handed, fd = fd, -1
            return _resolve_path(
                general(), cfg, opener, now, False, cache, UNTIMED, hashes, (handed, st)
            )
        if not stat.S_ISREG(st.st_mode):
            return Resolution(ERROR, Reason.NOT_REGULAR)
        # _meta_for, _admits and _main_rep, for this case.
        metas = cache.meta if cache is not None else None
        ident = identity(st)
        meta = metas.valid(relpath, ident) if metas is not None else None
        admit = cache is not None and cache.takes(relpath, size)
        data: bytes | None = None
        if meta is not None:  # the same file as last time: its facts as they were
            facts, extra, vary = meta.facts, meta.extra, meta.vary
        else:
            facts, data = _facts(st, ctype, cfg, hashes, now, fd, ident=ident)
        entry: CachedFile | None = None
        if cache is not None and admit and settled(st, now):
            entry, data = _cache_entry(cache, fd, st, facts, data, UNTIMED, False, ident)
        if data is None and wants_bytes:
            data = read_all(fd, size)
            if data is None:
                return Resolution(UNAVAILABLE)
        if (keeper := _meta_keeper(metas, meta, relpath, admit, facts, st, now)) is not None:
            keeper.put(relpath, FileMeta(ident, facts, extra, vary))
        if entry is not None:
            assert cache is not None
            entry.headers = (extra, vary)
            cache.put(relpath, entry)
        return Direct(relpath, facts, data, extra, vary)
    except _Shrank:
        return Resolution(UNAVAILABLE)
    except OSError as exc:
        return _failed(exc)
    finally:
        if fd >= 0:
            close_fd(fd)


def _index_file(
    opener: ContainedRoot, cfg: Config, directory: str, resolving: bool
) -> tuple[int, os.stat_result, str, str | None] | None:
    """The first of ``--index`` present as a regular file in ``directory``
    ("" for the root): its descriptor (the caller's), facts, path and
    resolved path (:func:`_open`)."""
    for index in cfg.files.index:
        rel = f"{directory}/{index}" if directory else index
        opened = _open_file(opener, rel, resolving)
        if opened is not None:
            return opened[0], opened[1], rel, opened[2]
    return None


def _resolve_file(
    look: Lookup,
    cfg: Config,
    opener: ContainedRoot,
    now: float,
    fd: int,
    st: os.stat_result,
    path: tuple[str, str | None],
    cache: FileCache | None = None,
    mono: float = UNTIMED,
    hashes: HashStore | None = None,
) -> Resolution:
    """The facts of the regular file open on ``fd`` (which this owns) and of
    the sidecars this request could be answered with.  ``path``: the
    file's path and where a symlink led (:func:`_open`).

    With ``cache``, a small settled file named directly by the target is
    read whole and stored (serverio.fs.filecache) with the state of every
    sidecar this request negotiated, so the next request can make the
    same choice from memory.  The selection facts computed here (which
    headers the file carries, whether it negotiates, the digest asked for)
    travel on the resolution: the decision does not compute them again.
    """
    reps: list[Rep] = []  # owned here until the resolution is returned
    relpath, real = path
    try:
        metas, ident, meta = _meta_for(look, cfg, cache, st, relpath, real)
        if meta is not None:  # the same file as last time: its facts as they were
            ctype, (extra, vary) = meta.facts.content_type, (meta.extra, meta.vary)
        else:
            ctype = guess_type(relpath.rsplit("/", 1)[-1])
            extra, vary = file_fields(look.download, cfg, relpath, ctype)
        digest = look.digest
        negotiated = look.negotiates(vary)
        known = meta.facts if meta is not None else None
        admit = _admits(cache, look, relpath, st)
        hop = _Hop(look, cfg, now, cache, mono, hashes, ctype, ident, admit, known)
        made = _main_rep(hop, fd, st, path, negotiated)
        if made is None:
            return Resolution(UNAVAILABLE)
        main, entry = made
        reps.append(main)
        fd = -1
        if (keeper := _meta_keeper(metas, meta, relpath, admit, main.facts, st, now)) is not None:
            keeper.put(relpath, FileMeta(ident, main.facts, extra, vary))
        if entry is not None and not look.target.query:
            entry.headers = (extra, vary)  # computed once, here
        sidecars: dict[str, Rep] = {}
        if negotiated:
            sidecars = _sidecars(hop, opener, path, st, main.facts, entry)
            reps.extend(sidecars.values())
        if entry is not None and (
            entry.whole
            or any(s.cached is not None for s in entry.sidecars.values())
            or (negotiated and _flies(entry, look, cfg, sidecars))
        ):
            assert cache is not None
            cache.put(relpath, entry)
        if not digest:
            _close_read_whole(main, sidecars)
        resolution = Resolution(
            FILE,
            relpath=relpath,
            real=real,
            ctype=ctype,
            file=main,
            sidecars=sidecars,
            extra=extra,
            vary=vary,
            digest=digest,
        )
        reps.clear()  # ownership moves to the caller
        return resolution
    except OSError as exc:
        return _failed(exc)
    finally:
        if fd >= 0:
            close_fd(fd)
        for rep in reps:
            rep.close()


def _main_rep(
    hop: _Hop, fd: int, st: os.stat_result, path: tuple[str, str | None], negotiated: bool
) -> tuple[Rep, CachedFile | None] | None:
    """The file's own representation on ``fd`` (its facts, its bytes when
    read whole) and the warm-file cache entry it may be kept in; None when
    the file is shorter than ``st`` says (it is being rewritten).  ``fd``
    stays the caller's until the returned Rep holds it."""
    look, cfg, cache = hop.look, hop.cfg, hop.cache
    relpath, real = path
    entry: CachedFile | None = None
    try:
        if hop.known is not None:
            facts, data = hop.known, None  # from the metadata cache, same identity
        else:
            facts, data = _facts(st, hop.ctype, cfg, hop.hashes, hop.now, fd, ident=hop.ident)
        if (
            cache is not None
            and not look.digest
            and real is None
            and _cacheable(look, relpath, st, hop.now)
            and hop.admit
        ):
            # (A digest job reads from a descriptor: not from the cache.)
            entry, data = _cache_entry(cache, fd, st, facts, data, hop.mono, negotiated, hop.ident)
    except _Shrank:
        return None
    if data is None and look.wants_bytes and st.st_size <= cfg.files.small_file_size:
        # Small body: read it now, in this same hop, and send it with the
        # head in one write.
        data = read_all(fd, st.st_size)
        if data is None:
            return None
    return Rep(fd, facts, data, _hash_settled(st, hop.now)), entry


def _flies(entry: CachedFile, look: Lookup, cfg: Config, sidecars: dict[str, Rep]) -> bool:
    """Is an entry without the file's bytes worth keeping for this request's
    choice, a coding made on the fly?  Its answers come from the compression
    cache (the handler uses it only while that holds them), so the entry
    keeps the identity, the facts and the sidecar states: only once the
    facts carry their ETag's hash (a large file's is computed in the
    background), or a cached ETag would stay without one.  (Not for
    identity: that needs the bytes, so the entry would never answer.)"""
    if entry.facts.hash_pending:
        return False
    coding, from_sidecar = choose_coding_for(look, cfg, entry.facts.size, sidecars)
    return bool(coding) and not from_sidecar


def _cacheable(look: Lookup, relpath: str, st: os.stat_result, now: float) -> bool:
    """May the warm-file cache keep this file?  Named directly by the target
    (not an index file or the SPA file), and settled (serverio.fs.filecache)."""
    return relpath == look.target.relpath and not look.target.slash and settled(st, now)


def _cache_entry(
    cache: FileCache,
    fd: int,
    st: os.stat_result,
    facts: FileFacts,
    data: bytes | None,
    mono: float,
    negotiated: bool,
    ident: Identity,
) -> tuple[CachedFile | None, bytes | None]:
    """The warm-file cache entry for a settled file, and its bytes (read here
    when the cache admits it whole): None when there is nothing to keep.
    Raises :class:`_Shrank` if the file is shorter than its ``fstat``."""
    if cache.admits(st.st_size):
        if data is None:
            data = read_all(fd, st.st_size)
        if data is None:
            raise _Shrank
        return CachedFile(ident, facts, data, mono), data
    if negotiated:
        # Too large to keep, but a built site's sidecars of it are often
        # small: keep those and the file's identity, so the next negotiated
        # request for it is answered from memory after the same stats as a
        # small file's.
        return CachedFile(ident, facts, b"", mono, whole=False), data
    return None, data


class _Hop(NamedTuple):
    """What every step of one file's resolution reads."""

    look: Lookup
    cfg: Config
    now: float
    cache: FileCache | None
    mono: float
    hashes: HashStore | None
    ctype: str
    # The file's identity (its fstat's), made once for every cache keyed
    # on it.
    ident: Identity
    # Admission when full (serverio.fs.filecache): this miss may store the
    # file in a full cache (FileCache.takes, asked once for both caches).
    admit: bool
    # The file's facts from the metadata cache (its identity checked), or
    # None: made from the fstat.
    known: FileFacts | None = None


def _meta_for(
    look: Lookup,
    cfg: Config,
    cache: FileCache | None,
    st: os.stat_result,
    relpath: str,
    real: str | None,
) -> tuple[MetaCache | None, Identity, FileMeta | None]:
    """The metadata cache that may keep this file's facts (None: not for
    this request: no cache, a query, a symlink followed under auth rules,
    a file larger than the small-file size), the file's identity and its
    entry when it was made from that same identity (serverio.fs.filecache,
    "File metadata apart from the bytes")."""
    metas = cache.meta if cache is not None else None
    ident = identity(st)
    if (
        metas is None
        or look.target.query
        or real is not None
        or st.st_size > cfg.files.small_file_size
        or relpath != look.target.relpath
    ):
        return None, ident, None
    return metas, ident, metas.valid(relpath, ident)


def _admits(cache: FileCache | None, look: Lookup, relpath: str, st: os.stat_result) -> bool:
    """Admission when full (serverio.fs.filecache): may this miss store the
    file in a full cache?  Decided once for both caches, and only for a
    file the target names directly (nothing else is kept)."""
    return cache is not None and relpath == look.target.relpath and cache.takes(relpath, st.st_size)


def _meta_keeper(
    metas: MetaCache | None,
    meta: FileMeta | None,
    key: str,
    admit: bool,
    facts: FileFacts,
    st: os.stat_result,
    now: float,
) -> MetaCache | None:
    """``metas`` if these facts are to be stored there (under ``key``),
    which did not have them (``meta`` None: :func:`_meta_for`, whose
    ``metas`` is None but for the file the target names); else None.
    Settled (a same-tick
    rewrite could keep the identity: the racy rule of
    serverio.fs.filecache), complete (no content hash still to come), and
    room in the cache or this miss admitted (``admit``: admission when
    full)."""
    if metas is None or meta is not None or facts.hash_pending or not settled(st, now):
        return None
    return metas if admit or metas.has_room(key) else None


def _sidecars(
    hop: _Hop,
    opener: ContainedRoot,
    file_path: tuple[str, str | None],
    st: os.stat_result,
    facts: FileFacts,
    entry: CachedFile | None,
) -> dict[str, Rep]:
    """The sidecars present and not older than the file, by coding, each
    with its facts (and its bytes when small); their states go to
    ``entry`` (a state not recorded makes a later request that wants it
    resolve the file again).  The caller owns what is returned; on an
    error, what this opened is closed before it propagates.

    With auth rules a sidecar must resolve beside the file (the file's
    resolved path plus its suffix): one a symlink leads elsewhere is
    ignored, as its bytes are decided on the file's rules."""
    relpath, real = file_path
    resolving = follows_links(hop.cfg)
    sidecars: dict[str, Rep] = {}
    wanted = sidecars_wanted_for(hop.look, hop.cfg)
    # Stated before the sidecars are looked for (serverio.fs.filecache,
    # "Absent sidecars"): a sidecar created after this changes it.
    stamp = _directory_stamp(opener, relpath, hop.now) if entry is not None and wanted else None
    try:
        for c in wanted:
            path = relpath + SIDECAR_SUFFIX[c]
            opened = _open_file(opener, path, resolving)
            if opened is not None and resolving and not _beside(opened[2], real, relpath, c):
                close_fd(opened[0])  # a link to elsewhere: not this file's coding
                opened = None
            if opened is None:
                if entry is not None:
                    entry.sidecars[c] = Sidecar(
                        path, None, None, stamp if _no_entry(opener, path) else None
                    )
                continue
            side_fd, side_st, _ = opened
            if side_st.st_mtime_ns < st.st_mtime_ns:
                close_fd(side_fd)  # stale: older than the file
                if entry is not None:
                    entry.sidecars[c] = Sidecar(path, identity(side_st), None)
                continue
            # The file's facts until the sidecar's own are known (a sidecar
            # that shrank keeps them: it is a 503 if chosen).
            rep = sidecars[c] = Rep(side_fd, facts, None, _hash_settled(side_st, hop.now))
            _sidecar_facts(hop, rep, c, path, side_st, entry)
    except BaseException:
        for rep in sidecars.values():
            rep.close()
        raise
    return sidecars


def _beside(side_real: str | None, real: str | None, relpath: str, coding: str) -> bool:
    """Does a sidecar that resolved to ``side_real`` lie where the file
    (``relpath``, resolved to ``real``) has its ``coding`` sidecar?"""
    if side_real is None and real is None:
        return True  # no link on either path
    expected = (relpath if real is None else real) + SIDECAR_SUFFIX[coding]
    return (relpath + SIDECAR_SUFFIX[coding] if side_real is None else side_real) == expected


def _directory_stamp(
    opener: ContainedRoot, relpath: str, now: float
) -> tuple[str, Identity] | None:
    """The directory of ``relpath`` and its identity, if it is settled
    (changed more than RACY_SECONDS before ``now``: the same-tick rule of
    serverio.fs.filecache); None otherwise, or if it cannot be stated."""
    directory = relpath.rpartition("/")[0] or "."
    try:
        st = opener.stat(directory)
    except OSError:
        return None
    return (directory, identity(st)) if settled(st, now) else None


def _no_entry(opener: ContainedRoot, path: str) -> bool:
    """Is there no directory entry at all named ``path``?  (Not a dangling
    symlink, a denied file or a directory: those can become usable without
    a change to the directory, so their own path is stat'ed.)"""
    try:
        opener.lstat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return False


def _sidecar_facts(
    hop: _Hop, rep: Rep, coding: str, path: str, side_st: os.stat_result, entry: CachedFile | None
) -> None:
    """Fill one open sidecar's facts and bytes (``rep.shrank`` if it turned
    out shorter than its ``fstat``), and record it with ``entry`` when the
    cache admits it."""
    side_fd = rep.fd
    side_data: bytes | None = None
    cache, now = hop.cache, hop.now
    if (
        entry is not None
        and cache is not None
        and cache.admits(side_st.st_size)
        and settled(side_st, now)
    ):
        side_data = read_all(side_fd, side_st.st_size)
        if side_data is not None:
            side_facts, _ = _facts(side_st, hop.ctype, hop.cfg, hop.hashes, now, data=side_data)
            side = CachedFile(identity(side_st), side_facts, side_data, hop.mono)
            entry.sidecars[coding] = Sidecar(path, side.ident, side)
    small = hop.cfg.files.small_file_size
    if side_data is None and hop.look.wants_bytes and side_st.st_size <= small:
        side_data = read_all(side_fd, side_st.st_size)
        if side_data is None:
            rep.shrank = True
            return
    try:
        rep.facts, rep.data = _facts(
            side_st, hop.ctype, hop.cfg, hop.hashes, now, side_fd, side_data
        )
    except _Shrank:
        rep.shrank = True
        return
    if rep.data is None:
        rep.data = side_data


def _close_read_whole(main: Rep, sidecars: dict[str, Rep]) -> None:
    """A representation read whole needs no descriptor any more (only a
    digest or hash job reads one): close it here, in the blocking hop.
    close(2) is filesystem work too (a FUSE FLUSH, an NFS CLOSE), and the
    event loop would otherwise make it."""
    for rep in (main, *sidecars.values()):
        if rep.data is not None and not (rep.facts.hash_pending and rep.hash_settled):
            rep.close()
