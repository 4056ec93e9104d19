"""A folder archive as a chunk source: the walk, then members read one at a
time and encoded as the transport asks for the next chunk.

:func:`walk` (before the response starts) lists the members, directory by
directory, each scan one hop into the ``fs`` pool, the access hook's
:meth:`~serverio.site.service.Site.visible_entries` applied to every
directory's entries (``visible``); its bounds are checked as it goes
(a 413 before anything is sent).  :class:`ArchiveStream` then produces the
body: for each member one contained open and reads of :data:`READ_SIZE`
bytes, each a hop into the same pool that also encodes them (the
compression runs in the pool thread, not on the event loop), by
:class:`~serverio.archive.zipenc.ZipEncoder` or
:class:`~serverio.archive.tarenc.TarEncoder`; one chunk is handed out
once at least :data:`CHUNK_MIN` bytes are ready.  Memory is one read,
one chunk and the zip's central-directory records.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from ..concurrency.blocking import Pool, run_blocking
from ..errors import HTTPError
from ..fs.hide import NO_HIDE, HideRules
from ..fs.jobs import OwnedFd, scan_listing
from ..fs.opener import ContainedRoot
from ..http.core import RequestFacts
from ..http.listing import Entry
from ..model import BodyCut, errno_reason
from ..model.reasons import reason_status
from .plan import Bounds, Member, check_bounds, missing_name
from .tarenc import TarEncoder
from .walk import close_opened, close_read, open_member, read_span, scan_at
from .zipenc import ZipEncoder, encode_name

__all__ = ["CHUNK_MIN", "READ_SIZE", "ArchiveCut", "ArchiveStream", "Visible", "walk"]

READ_SIZE: Final = 65536  # one pread per hop
CHUNK_MIN: Final = 65536  # a chunk is handed out once this much is ready

# Names already compressed gain nothing from deflate: stored in a zip.
_STORED_SUFFIXES: Final = frozenset(
    ".zip .gz .tgz .bz2 .xz .zst .br .7z .rar .jpg .jpeg .png .gif .webp .avif "
    ".mp3 .mp4 .m4a .mkv .webm .mov .ogg .opus .woff .woff2 .jar .apk".split()
)

# The access hook on listed names (serverio.site.service.Site.visible_entries).
Visible = Callable[[RequestFacts, tuple[str, ...], list[Entry]], list[Entry]]


class ArchiveCut(BodyCut):
    """The archive cannot be completed (a bound passed while streaming, a
    member that shrank): the transport cuts the response as a failed one
    (a :class:`~serverio.model.BodyCut`; HTTP/2 INTERNAL_ERROR)."""

    failed = True


def _selected(entries: list[Entry], only: frozenset[str]) -> list[Entry]:
    """The entries ``only`` names; a 404 for the first name (in sorted
    order, so the answer is the same whatever the scan order) not among
    them."""
    kept = [e for e in entries if e.name in only]
    if len(kept) != len(only):
        missing = sorted(only - {e.name for e in kept})
        raise missing_name(missing[0])
    return kept


def _add_members(
    members: list[Member], rel: tuple[str, ...], entries: list[Entry], resolving: bool
) -> tuple[list[tuple[str, ...]], int]:
    """Append one directory's entries (names sorted) to ``members``; its
    subdirectories and the bytes of its files.  ``resolving`` (auth
    rules): each member keeps where it leads, checked again when opened."""
    subdirs: list[tuple[str, ...]] = []
    size = 0
    for entry in sorted(entries, key=lambda e: e.name):
        path = (*rel, entry.name)
        mtime = float(entry.mtime or 0)
        led = entry.real if resolving else False
        if entry.is_dir:
            members.append(Member(path, True, 0, mtime, led))
            subdirs.append(path)
        else:
            members.append(Member(path, False, entry.size, mtime, led))
            size += entry.size
    return subdirs, size


async def walk(
    fs: Pool,
    opener: ContainedRoot,
    req: RequestFacts,
    top: OwnedFd,
    hidden: bool,
    bounds: Bounds,
    visible: Visible | None,
    top_real: str | None = None,
    hide: HideRules = NO_HIDE,
    only: frozenset[str] | None = None,
    top_limit: int = 0,
) -> list[Member]:
    """The members under the requested directory (``top``: its descriptor,
    released here): each directory's entries (names sorted, directories
    included), then its subdirectories' in turn, so a directory always
    comes before what it holds.  A directory reached twice (a symlink loop) is
    walked once; a subdirectory that cannot be scanned (gone, refused) is
    left out.  Raises HTTPError: 413 past the bounds, the scan's status
    when the top directory cannot be scanned.

    With auth rules (``visible``) every member's rules are decided on
    where it leads too, a symlink inside the root followed (``top_real``:
    where the top directory's own resolution led, None: no link), and
    that target is checked again when the member is opened.

    ``only`` (a selection, :func:`~serverio.archive.plan.selected_names`):
    the top members are these names, each an entry the listing shows this
    client (else a 404), a folder with what it holds; the top scan reads
    up to ``top_limit`` entries (the listing's bound) for them.

    Cancellation handling: each scan is a pooled call (abandoned threads close
    their own directory descriptors); ``top`` is released in every case.
    """
    base = req.target.segments
    top_led: str | bool | None = False if visible is None else top_real
    members: list[Member] = []
    total = 0
    seen: set[tuple[int, int]] = set()
    pending: list[tuple[str, ...]] = [()]
    first = True
    while pending:
        rel = pending.pop()
        segs = base + rel
        relpath = "/".join(segs) or "."
        left = bounds.entries - len(members) + 1
        try:
            if first:
                first = False
                left = left if only is None else max(left, top_limit)
                try:
                    scan = await run_blocking(
                        fs, scan_listing, top, opener, relpath, hidden, left, top_led
                    )
                finally:
                    top.release()
            else:
                resolving = visible is not None
                scan = await run_blocking(fs, scan_at, opener, relpath, hidden, left, resolving)
        except OSError as exc:
            if not rel:
                raise HTTPError(
                    reason_status(errno_reason(exc.errno)), "archive scan failed"
                ) from None
            continue
        if (scan.dev, scan.ino) in seen:
            continue
        seen.add((scan.dev, scan.ino))
        entries = scan.entries
        if visible is not None:
            entries = visible(req, segs, entries)
        if hide.active:  # --hide: left out of archives (still served by URL)
            entries = [e for e in entries if not hide.hides(relpath, e.name)]
        if only is not None and not rel:
            entries = _selected(entries, only)
        subdirs, size = _add_members(members, rel, entries, visible is not None)
        total += size
        check_bounds(len(members), total, bounds)
        pending.extend(reversed(subdirs))
    return members


def _deflate(name: str) -> bool:
    dot = name.rfind(".")
    return dot < 0 or name[dot:].lower() not in _STORED_SUFFIXES


class ArchiveStream:
    """The body of one archive (:class:`serverio.model.ChunkSource`).

    ``top`` is the archive's top folder name, ``base`` the directory's
    relative path below the root; ``max_bytes`` bounds the file bytes read
    (members that grew since the walk can pass it: the stream is then cut,
    and a zip has no central directory).

    Cancellation handling: :meth:`next_chunk` may be cancelled at any hop;
    :meth:`close` releases the open member's descriptor if this side holds
    it, and a read or open still running in an abandoned thread hands its
    descriptor to its ``late_close`` (closed when the thread ends).  The
    thread keeps its pool token until then, as every pooled call does.
    """

    __slots__ = (
        "_base",
        "_enc",
        "_fs",
        "_left",
        "_max_bytes",
        "_members",
        "_next",
        "_offset",
        "_opener",
        "_owned",
        "_produced",
        "_top",
        "finished",
    )

    def __init__(
        self,
        fs: Pool,
        opener: ContainedRoot,
        members: list[Member],
        fmt: str,
        top: str,
        base: str,
        max_bytes: int,
    ) -> None:
        self._fs = fs
        self._opener = opener
        self._members = members
        self._next = 0
        self._enc: ZipEncoder | TarEncoder = ZipEncoder() if fmt == "zip" else TarEncoder()
        self._top = top
        self._base = base
        self._max_bytes = max_bytes
        self._owned: OwnedFd | None = None  # the member being read
        self._left = 0  # its bytes still to read
        self._offset = 0
        self._produced = 0
        self.finished = False

    def close(self) -> None:
        owned, self._owned = self._owned, None
        if owned is not None:
            owned.release()  # a no-op when a running thread claimed it

    async def next_chunk(self) -> bytes:
        out: list[bytes] = []
        size = 0
        while size < CHUNK_MIN and not self.finished:
            piece = await self._step()
            if piece:
                out.append(piece)
                size += len(piece)
        return b"".join(out)

    async def _step(self) -> bytes:
        """One hop's worth: a member's header, a read, or the end."""
        enc = self._enc
        if self._owned is not None:
            if self._left == 0:
                self.close()
                try:
                    return enc.end()
                except ValueError:
                    raise ArchiveCut("a member changed while it was archived") from None
            got = await run_blocking(
                self._fs,
                read_span,
                self._owned,
                self._offset,
                min(READ_SIZE, self._left),
                enc.data,
                late_close=close_read,
            )
            self._owned = OwnedFd(got.fd) if got.fd >= 0 else None
            if not got.length:
                self.close()
                raise ArchiveCut("a member shrank while it was archived")
            self._left -= got.length
            self._offset += got.length
            self._produced += got.length
            if self._produced > self._max_bytes:
                self.close()
                raise ArchiveCut("archive over --archive-max-bytes")
            return got.encoded
        if self._next >= len(self._members):
            self.finished = True
            return enc.finish()
        member = self._members[self._next]
        self._next += 1
        segs = (self._top, *member.segments)
        try:
            encode_name(segs, member.is_dir)
        except ValueError:
            return b""  # a name no archive may carry (see zipenc): left out
        if member.is_dir:
            return enc.directory(segs, member.mtime)
        relpath = "/".join(filter(None, (self._base, *member.segments)))
        try:
            opened = await run_blocking(
                self._fs, open_member, self._opener, relpath, member.led, late_close=close_opened
            )
        except OSError:
            return b""  # gone, or no longer a regular file, since the walk: left out
        self._owned = OwnedFd(opened.fd)
        self._left, self._offset = opened.size, 0
        if isinstance(enc, ZipEncoder):
            return enc.start(
                segs, opened.mtime, opened.size, opened.mode, deflate=_deflate(member.segments[-1])
            )
        return enc.start(segs, opened.mtime, opened.size, opened.mode)
