"""The warm-file cache: small files' bytes and facts, revalidated by identity.

Without it every request for a small file costs four filesystem syscalls
(``openat2``, ``fstat``, ``pread``, ``close``) and, in pooled mode, a thread
hop (docs/history/performance-journal.md measured both).  With it:

* **inline** (``--fs-workers 0``, the default): a hit costs one ``stat`` of
  the path, compared with the identity the bytes were read under — device,
  inode, size, mtime and ctime in nanoseconds.  Any write, truncation,
  rename-over, chmod or delete changes at least one of them, so a hit is
  never staler than the ``stat``: no time window, nothing to tune.
* **pooled** (``--fs-workers N``, the slow-storage profile): the ``stat``
  itself can block for seconds on NFS or FUSE, so it must not run on the
  event loop.  An entry revalidated less than ``--fs-cache-valid`` seconds
  ago (default 1 s) is served without any syscall or hop; an older one is
  revalidated in the pool.  A change is seen at most that long after it
  happens — the bound nginx's ``open_file_cache_valid`` sets (60 s by
  default there), and shorter than NFS's own attribute cache (3 to 60 s).

Containment: an entry only exists for bytes read from a descriptor that
:class:`~serverio.fs.opener.RootOpener` opened under the root.  The
revalidating ``stat`` follows symlinks without that check, but a hit needs
the *same inode* (and the same size and times) as those bytes, so whatever
the path now resolves to, a hit serves exactly what was already served.
Anything else is a miss and goes through the full, contained open.

Racy entries (the "racy git" problem): a timestamp is only as fine as the
filesystem's clock tick (a jiffy on ext4, 2 s on FAT), so a same-size
rewrite within one tick of our read could leave every identity field but
ctime equal — and ctime has the same tick.  Bytes are therefore cached
only from files last changed more than :data:`RACY_SECONDS` before the
read; a file being written now is simply read every time until it settles.

Absent sidecars: a negotiated answer also depends on the precompressed
sidecars (``.br``, ``.gz``) the file does *not* have; one appearing must
change the next answer.  Rather than a failing ``stat`` per absent
sidecar per request, the entry records the identity of the file's
directory, stated *before* the sidecars were looked for, and the
revalidation stats the directory once instead.  Creating, renaming or
linking a name into a directory changes the directory's mtime and ctime:

* POSIX (Linux, the BSDs, macOS): ``link``, ``open(O_CREAT)``,
  ``rename``, ``symlink``, ``mkdir`` and ``mknod`` mark the parent
  directory's ``st_mtime`` and ``st_ctime`` for update;
* Windows (NTFS, ReFS): creating or renaming an entry updates the
  directory's LastWriteTime and ChangeTime, which
  :mod:`serverio.fs.winstat` reports as ``st_mtime_ns`` and
  ``st_ctime_ns``.

The same-tick rule applies to the directory as to a file: a directory
changed less than :data:`RACY_SECONDS` before the request is not trusted
(a creation within the same tick could leave its times unchanged), and
each absent sidecar is then stat'ed itself, as is any sidecar name that
exists but could not be used (a dangling symlink, a denied file: its
target or its mode can change without the directory).  A filesystem whose
directories keep their times (FAT on some drivers, some FUSE and network
filesystems) is not served right by this rule in inline mode only as far
as a *new* sidecar goes; ``--watch`` (which clears this cache on every
event) or ``--fs-cache-valid`` with the pooled profile are the remedies
there, as for any attribute cache.

Thread-safety: preparation runs in worker threads in pooled mode, so the
LRU is guarded by a lock (uncontended in inline mode).

File metadata apart from the bytes (:class:`MetaCache`): on a site with
more small files than the byte cache holds, most requests miss it, and a
miss used to work out the file's facts again (media type, the headers
the file carries, the content hash its ETag is made of, a new
:class:`~serverio.http.core.FileFacts`).  The metadata cache keeps those,
keyed by path, bounded by *entries* (``--file-meta-entries``; an entry is
about 750 bytes, a byte entry a whole file plus 512): a miss on bytes is then
an open, an ``fstat`` and a read (or ``sendfile``) of the file, whose
facts are taken from the entry when the ``fstat`` shows the same identity
(device, inode, size, mtime and ctime in nanoseconds) the facts were made
from.  Any other identity is a miss and the entry is replaced, so a change
to the file can never be answered with old validators; the bytes always
come from the descriptor just opened.  Only settled files (the racy rule
above) of at most the small-file size (whose ETag is their content hash)
are kept, and only for requests without a query (``?download`` changes
the headers).

Admission when full (both caches): while a cache has room, every file
it may keep is stored.  Once storing would evict, a file is stored only
on its second miss within about the span the byte cache holds (the
:class:`~serverio.doorkeeper.Doorkeeper`, TinyLFU's doorkeeper), and then
only if it was asked for at least as often lately as the entry it would
evict, the least recently used (a
:class:`~serverio.doorkeeper.FrequencySketch` of the misses that passed
the doorkeeper: TinyLFU's admission).  On a site with more files than
fit, requested at random, most files are asked for once in that span,
and storing each would cost an entry built, an older one evicted and its
memory given back, for no hit; the doorkeeper alone still stored on
about one request in five of a uniform walk over ten times the cache,
the sketch on two to six in a hundred, with the same hits (and the
collector's work of those entries: the CPU per request of the harness's
many-files run stayed within its noise, docs/history/perf-round3.md).  A file asked for more
often than what it would replace is kept as before, one miss later.
The byte cache decides once per miss for both caches, so that a file
admitted to both is admitted at the same miss and its two entries share
one identity and one set of facts (so a full metadata cache still stores
at once while the byte cache has room).  Hits are not counted: the
victim's count is its misses before it was stored, halved with every
count's as the sketch ages.
"""

from __future__ import annotations

import math
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple

from ..doorkeeper import Doorkeeper, FrequencySketch
from ..http.core import FileFacts
from ..http.negotiate import SIDECAR_SUFFIX
from ..model import CachedFile, Identity, Sidecar

__all__ = [
    "RACY_SECONDS",
    "SHARED_MTIME_FILES",
    "UNTIMED",
    "FileCache",
    "FileCacheStats",
    "FileMeta",
    "HashStore",
    "MetaCache",
    "identity",
    "window_state",
]

# Files changed less than this long before the read are not cached (see
# "Racy entries" above).  2 s covers FAT's timestamp granularity.
RACY_SECONDS = 2.0

_SIDECAR_SUFFIXES = tuple(SIDECAR_SUFFIX.values())

# Accounted per entry on top of its bytes (dict slot, entry object, facts).
_ENTRY_OVERHEAD = 512


def identity(st: os.stat_result) -> Identity:
    """What must be unchanged for cached bytes to still be the file's."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


# The ``checked`` stamp of an entry that has no trust window: inline mode
# revalidates every hit with a stat, so no clock reading is needed (and
# none is paid for per request).  Such an entry is "expired" for the pooled
# window rule, which is the truth: nothing vouches for it without a stat.
UNTIMED: float = -math.inf

StatAt = Callable[[str], os.stat_result]


def window_state(checked: float, mono: float, valid: float) -> str:
    """Pooled mode's rule for an entry last revalidated at ``checked``.

    ``"fresh"``: served without a syscall.  ``"refresh"`` (past half the
    window): still served without waiting, while one background stat
    revalidates it.  ``"expired"``: every request for it waits for that one
    shared stat instead of each hopping into the pool itself (64 hops at
    once would be a stampede).  Times are trio's clock; ``valid`` is
    ``--fs-cache-valid`` (0: every request waits for a fresh stat).
    """
    age = mono - checked
    if age > valid:
        return "expired"
    if age > valid / 2:
        return "refresh"
    return "fresh"


def _same(path: str, ident: Identity | None, stat_at: StatAt) -> bool:
    """Does ``path`` still have ``ident`` (None: still not exist)?
    ``stat_at`` stats a path relative to the root
    (:attr:`~serverio.fs.opener.RootOpener.stat`)."""
    try:
        st = stat_at(path)
    except FileNotFoundError:
        return ident is None
    except OSError:
        return False
    return ident is not None and identity(st) == ident


def _states_same(states: Iterable[Sidecar], stat_at: StatAt) -> bool:
    """Do the sidecar ``states`` still hold?  An absent sidecar with a
    directory stamp is vouched for by that stamp: one ``stat`` of the
    directory per distinct stamp (the stamps of one entry are one object),
    whatever the number of absent sidecars."""
    checked: tuple[str, Identity] | None = None
    for s in states:
        stamp = s.directory
        if stamp is not None:
            if stamp is checked:
                continue
            if not _same(stamp[0], stamp[1], stat_at):
                return False
            checked = stamp
        elif not _same(s.path, s.ident, stat_at):
            return False
    return True


def _cost(entry: CachedFile) -> int:
    cost = len(entry.data) + _ENTRY_OVERHEAD
    for sidecar in entry.sidecars.values():
        cost += _ENTRY_OVERHEAD + (len(sidecar.cached.data) if sidecar.cached else 0)
    return cost


def settled(st: os.stat_result, now: float) -> bool:
    """Was the file last changed more than RACY_SECONDS before ``now`` (wall clock)?"""
    limit = int((now - RACY_SECONDS) * 1e9)
    return st.st_mtime_ns < limit and st.st_ctime_ns < limit


@dataclass(slots=True)
class FileCacheStats:
    hits: int = 0  # served from memory (after a stat, or inside the window)
    misses: int = 0  # consulted for a file named by the target, answered from disk
    stale: int = 0  # revalidation found the file changed or gone: dropped
    stored: int = 0
    evicted: int = 0


# The least generation of a doorkeeper (a cache of few entries still
# remembers this many keys asked for).
_DOOR_MIN = 1024


class FileCache:
    """A byte-bounded LRU of :class:`CachedFile`, keyed by relative path.

    ``capacity`` counts content bytes plus a fixed overhead per entry;
    ``max_entry`` is the largest file kept (the small-file size: larger
    bodies are streamed with sendfile and never read into memory).
    ``capacity == 0`` disables the cache.
    """

    def __init__(self, capacity: int, max_entry: int, meta_entries: int = 0) -> None:
        self.capacity = capacity
        self.max_entry = max_entry
        self.size = 0
        self.stats = FileCacheStats()
        # The files' metadata apart from their bytes ("File metadata apart
        # from the bytes" above); None: off.
        self.meta = MetaCache(meta_entries) if meta_entries > 0 and capacity > 0 else None
        self._entries: OrderedDict[str, CachedFile] = OrderedDict()
        self._lock = threading.Lock()
        self._door = Doorkeeper(_DOOR_MIN)
        self._sketch = FrequencySketch(_DOOR_MIN)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def enabled(self) -> bool:
        return self.capacity > 0

    def admits(self, size: int) -> bool:
        """Would a file of ``size`` bytes be kept?"""
        return size <= self.max_entry and size + _ENTRY_OVERHEAD <= self.capacity

    def takes(self, key: str, size: int) -> bool:
        """Is an entry for ``key``, a file of ``size`` bytes, worth making
        now ("Admission when full" above)?  Yes while storing it would not
        evict, for a key already held, or for one asked for again soon and
        at least as often as the least recently used entry (the first of
        those a large file would evict); otherwise the key is remembered
        (or counted) and the answer is no.  Asked once per miss that could
        store, before the entry is built."""
        with self._lock:
            if self.size + size + _ENTRY_OVERHEAD <= self.capacity:
                return True
            if key in self._entries:
                return True
            span = max(_DOOR_MIN, len(self._entries))
            door = self._door
            door.resize(span)
            h = hash(key)
            if not door.again(h):
                return False
            # Asked for again: stored if asked for at least as often as
            # the entry it would evict, the least recently used (TinyLFU).
            sketch = self._sketch
            sketch.resize(span)
            ours = sketch.add(h)
            victim = next(iter(self._entries), None)
            return victim is None or ours >= sketch.estimate(hash(victim))

    def get(self, key: str) -> CachedFile | None:
        """The entry for ``key`` (marked recently used), or None.  Not yet a hit:
        the caller revalidates it and then calls :meth:`hit` or :meth:`drop`."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            return entry

    def hit(self) -> None:
        self.stats.hits += 1  # a racy += across threads only blurs a counter

    def miss(self) -> None:
        """Count a request the cache was consulted for and could not answer
        (no entry, stale, or not usable for it): called once per request by
        the preparation that then goes to the filesystem."""
        self.stats.misses += 1

    def drop(self, key: str, entry: CachedFile) -> None:
        """Forget ``entry`` (found stale), unless ``key`` was refilled since."""
        with self._lock:
            if self._entries.get(key) is entry:
                del self._entries[key]
                self.size -= _cost(entry)
                self.stats.stale += 1

    def forget(self, key: str) -> None:
        """Forget the entry for ``key`` whatever it is (a write replaced or
        removed the file: no validity window may serve the old bytes), and
        that of the file ``key`` is a sidecar of (``a.js`` for ``a.js.br``:
        its answer depends on the sidecar's state)."""
        with self._lock:
            self._pop(key)
            for suffix in _SIDECAR_SUFFIXES:
                if key.endswith(suffix):
                    self._pop(key[: -len(suffix)])
        if self.meta is not None:
            self.meta.forget(key)

    def _pop(self, key: str) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.size -= _cost(entry)

    def clear(self) -> None:
        """Forget every entry (a change was seen: ``--watch``)."""
        with self._lock:
            self._entries.clear()
            self.size = 0
        if self.meta is not None:
            self.meta.clear()

    def revalidate(
        self,
        key: str,
        entry: CachedFile,
        stat_at: StatAt,
        mono: float,
        sidecars: tuple[Sidecar, ...] | None = None,
    ) -> bool:
        """Is ``entry`` still the file at ``key``?  One ``stat`` (plus one per
        sidecar state it recorded, or per state in ``sidecars``: those one
        request's answer depends on; absent sidecars under a directory stamp
        share one ``stat`` of the directory); blocking.

        Yes: stamp it checked at ``mono`` (pass ``sidecars`` only with
        :data:`UNTIMED`: a stamp vouches for every state).  No (changed,
        gone, unreadable): drop it.
        """
        states = entry.sidecars.values() if sidecars is None else sidecars
        if not _same(key, entry.ident, stat_at) or (states and not _states_same(states, stat_at)):
            self.drop(key, entry)
            return False
        entry.checked = mono
        return True

    def put(self, key: str, entry: CachedFile) -> None:
        """Store ``entry`` (complete: its sidecar states are not added later)."""
        cost = _cost(entry)
        if len(entry.data) > self.max_entry or cost > self.capacity:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.size -= _cost(old)
            self._entries[key] = entry
            self.size += cost
            self.stats.stored += 1
            while self.size > self.capacity:
                _, dropped = self._entries.popitem(last=False)
                self.size -= _cost(dropped)
                self.stats.evicted += 1


class FileMeta(NamedTuple):
    """What a file's answer needs besides its bytes (see the module's
    "File metadata apart from the bytes"): valid while the file has ``ident``."""

    ident: Identity
    facts: FileFacts
    # The headers the file carries and whether it negotiates a coding
    # (serverio.http.select.file_fields, for a request without a query).
    extra: tuple[tuple[bytes, bytes], ...]
    vary: bool


class MetaCache:
    """An LRU of :class:`FileMeta` by relative path, at most ``capacity``
    entries (0: off).  Thread-safe (pooled mode resolves in threads)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.stats = FileCacheStats()
        self._entries: OrderedDict[str, FileMeta] = OrderedDict()
        self._lock = threading.Lock()

    def has_room(self, key: str) -> bool:
        """Would storing ``key`` evict nothing?  (When it would, the byte
        cache's :meth:`FileCache.takes` decides for both caches: "Admission
        when full" above.)"""
        with self._lock:
            return len(self._entries) < self.capacity or key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def size(self) -> int:
        """The bytes accounted (an estimate: :data:`_META_COST` per entry)."""
        return len(self._entries) * _META_COST

    @property
    def capacity_bytes(self) -> int:
        """``capacity`` in the same accounting as :attr:`size`."""
        return self.capacity * _META_COST

    def valid(self, key: str, ident: Identity) -> FileMeta | None:
        """The entry for ``key`` if it was made from a file of identity
        ``ident`` (the ``fstat`` of the descriptor just opened); a
        different one is dropped (the file changed)."""
        with self._lock:
            meta = self._entries.get(key)
            if meta is None:
                self.stats.misses += 1
                return None
            if meta.ident != ident:
                del self._entries[key]
                self.stats.stale += 1
                self.stats.misses += 1
                return None
            self._entries.move_to_end(key)
            self.stats.hits += 1
            return meta

    def put(self, key: str, meta: FileMeta) -> None:
        if self.capacity <= 0:
            return
        with self._lock:
            self._entries[key] = meta
            self._entries.move_to_end(key)
            self.stats.stored += 1
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
                self.stats.evicted += 1

    def forget(self, key: str) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


# The memory an entry of MetaCache holds: the key, the entry, the
# identity and the facts with their ETag and hash (measured with
# tracemalloc over 10,000 entries, CPython 3.11, 64-bit: about 750 bytes).
_META_COST = 768


# An mtime seen on this many distinct files is taken for a build tool's
# constant (a tarball's release time, SOURCE_DATE_EPOCH without the
# variable set here): their ETags become content hashes.
SHARED_MTIME_FILES = 8
_MTIMES_TRACKED = 4096  # distinct mtimes remembered while counting (LRU)
_HASHES_KEPT = 65536  # content hashes remembered (16 bytes each, plus the key)


class HashStore:
    """Content hashes of files (for their ETags), by full identity.

    A hash is stored only for a settled file (see "Racy entries" above), so
    a hit is the hash of the bytes the identity names.  Bounded LRU,
    thread-safe (preparation runs in worker threads in pooled mode).

    It also counts, per mtime, the distinct files seen with it: an mtime
    shared by :data:`SHARED_MTIME_FILES` files says nothing about any one
    of them (:meth:`shared_mtime`).
    """

    def __init__(self, max_entries: int = _HASHES_KEPT) -> None:
        self.max_entries = max_entries
        self._hashes: OrderedDict[Identity, bytes] = OrderedDict()
        self._seen: OrderedDict[int, set[tuple[int, int]]] = OrderedDict()
        self._shared: OrderedDict[int, None] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._hashes)

    def get(self, ident: Identity) -> bytes | None:
        with self._lock:
            digest = self._hashes.get(ident)
            if digest is not None:
                self._hashes.move_to_end(ident)
            return digest

    def put(self, ident: Identity, digest: bytes) -> None:
        with self._lock:
            self._hashes[ident] = digest
            self._hashes.move_to_end(ident)
            while len(self._hashes) > self.max_entries:
                self._hashes.popitem(last=False)

    def shared_mtime(self, st: os.stat_result) -> bool:
        """Count ``st``'s file under its mtime; is that mtime shared by
        :data:`SHARED_MTIME_FILES` distinct files (seen so far)?"""
        mtime = st.st_mtime_ns
        with self._lock:
            if mtime in self._shared:
                self._shared.move_to_end(mtime)
                return True
            files = self._seen.get(mtime)
            if files is None:
                files = self._seen[mtime] = set()
                if len(self._seen) > _MTIMES_TRACKED:
                    self._seen.popitem(last=False)
            else:
                self._seen.move_to_end(mtime)
            files.add((st.st_dev, st.st_ino))
            if len(files) < SHARED_MTIME_FILES:
                return False
            del self._seen[mtime]
            self._shared[mtime] = None
            if len(self._shared) > _MTIMES_TRACKED:
                self._shared.popitem(last=False)
            return True
