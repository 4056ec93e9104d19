"""A streaming ZIP writer (pure: bytes in, bytes out; APPNOTE.TXT 6.3.10).

Written for a sink that cannot seek (an HTTP response): every member's
local header says "sizes and CRC follow" (general purpose bit 3) and a
data descriptor after its data carries them; the central directory at the
end repeats them with each member's offset.  Nothing but the central
directory's records (about 100 bytes a member) is kept between members.

ZIP64 (APPNOTE 4.3.9, 4.4.1.4, 4.5.3): a member whose size may reach
4 GiB gets a ZIP64 local header and an 8-byte data descriptor (decided
from its size before its data is written: the deflated size of
incompressible data is larger than the input, so with a margin); the
central directory's fields that overflow (sizes, offset) move to a ZIP64
extra field; and past 65,535 members or a directory or offset past
4 GiB the ZIP64 end records precede the classic one.  The thresholds are
parameters so a test can reach every ZIP64 record with small inputs.

Names: the bytes of the path below the archive's top folder, ``/``
separated.  A name that is valid UTF-8 sets the language encoding flag
(bit 11); a POSIX name that is not (its undecodable bytes arrive as
``surrogateescape`` surrogates) is written as its own bytes without the
flag, so an extractor recreates the same bytes.  :func:`check_segments`
refuses what no extractor must see: empty, ``.`` and ``..`` segments, NUL,
``/`` or ``\\`` inside a segment (Windows extractors split on a
backslash), a name over 65,535 bytes.
"""

from __future__ import annotations

import struct
import time
import zlib
from typing import Final

__all__ = [
    "METHOD_DEFLATED",
    "METHOD_STORED",
    "ZIP64_LIMIT",
    "ZipEncoder",
    "check_segments",
    "encode_name",
]

METHOD_STORED: Final = 0
METHOD_DEFLATED: Final = 8
ZIP64_LIMIT: Final = 0xFFFFFFFF  # a 4-byte size or offset field's largest value
ENTRIES_LIMIT: Final = 0xFFFF  # a 2-byte entry count's largest value
NAME_MAX: Final = 0xFFFF  # the name length field (2 bytes)

_LOCAL: Final = struct.Struct("<IHHHHHIIIHH")
_DESCRIPTOR: Final = struct.Struct("<IIII")
_DESCRIPTOR64: Final = struct.Struct("<IIQQ")
_CENTRAL: Final = struct.Struct("<IHHHHHHIIIHHHHHII")
_END: Final = struct.Struct("<IHHHHIIH")
_END64: Final = struct.Struct("<IQHHIIQQQQ")
_LOCATOR64: Final = struct.Struct("<IIQI")

_FLAG_DESCRIPTOR: Final = 0x0008
_FLAG_UTF8: Final = 0x0800
_VERSION: Final = 20  # 2.0: deflate, directories
_VERSION64: Final = 45  # 4.5: ZIP64
_MADE_BY_UNIX: Final = 3 << 8
_S_IFDIR: Final = 0o040000
_S_IFREG: Final = 0o100000


def check_segments(segments: tuple[str, ...]) -> None:
    """Raise ValueError for a member path no archive may carry."""
    if not segments:
        raise ValueError("empty member name")
    for seg in segments:
        # A backslash is a separator to Windows extractors ("..\\x").
        if seg in ("", ".", "..") or "/" in seg or "\\" in seg or "\x00" in seg:
            raise ValueError(f"unsafe member name segment {seg!r}")


def encode_name(segments: tuple[str, ...], is_dir: bool) -> tuple[bytes, bool]:
    """The member name's bytes and whether they are UTF-8 (bit 11).

    Raises ValueError for an unsafe or too long name."""
    check_segments(segments)
    text = "/".join(segments) + ("/" if is_dir else "")
    try:
        raw, utf8 = text.encode("utf-8"), True
    except UnicodeEncodeError:
        raw, utf8 = text.encode("utf-8", "surrogateescape"), False
    if len(raw) > NAME_MAX:
        raise ValueError("member name too long for ZIP")
    return raw, utf8


def _dos_time(mtime: float) -> tuple[int, int]:
    """(time, date) in MS-DOS format, UTC; clamped to 1980..2107."""
    t = time.gmtime(max(0.0, mtime))
    year = min(max(t.tm_year, 1980), 2107)
    if t.tm_year < 1980:
        return 0, (0 << 9) | (1 << 5) | 1  # 1980-01-01 00:00
    return (
        (t.tm_hour << 11) | (t.tm_min << 5) | (t.tm_sec // 2),
        ((year - 1980) << 9) | (t.tm_mon << 5) | t.tm_mday,
    )


class _Record:
    """What the central directory needs of one member."""

    __slots__ = (
        "crc",
        "csize",
        "date",
        "dostime",
        "flags",
        "method",
        "mode",
        "name",
        "offset",
        "size",
        "version",
    )

    def __init__(
        self,
        name: bytes,
        flags: int,
        method: int,
        dostime: int,
        date: int,
        mode: int,
        offset: int,
        version: int,
    ) -> None:
        self.name = name
        self.flags = flags
        self.method = method
        self.dostime = dostime
        self.date = date
        self.mode = mode
        self.offset = offset
        self.version = version
        self.crc = 0
        self.csize = 0
        self.size = 0


class ZipEncoder:
    """Members in, archive bytes out: :meth:`directory`, :meth:`start` /
    :meth:`data` / :meth:`end` per file, :meth:`finish` once.  Every call
    returns the bytes to send next (possibly empty).

    ``zip64_at`` and ``entries_zip64_at`` are the thresholds at which the
    ZIP64 forms are used (the format's own limits by default)."""

    def __init__(
        self, *, level: int = 6, zip64_at: int = ZIP64_LIMIT, entries_zip64_at: int = ENTRIES_LIMIT
    ) -> None:
        self._level = level
        self._zip64_at = zip64_at
        self._entries_at = entries_zip64_at
        self._records: list[_Record] = []
        self._offset = 0
        self._current: _Record | None = None
        self._zip64 = False
        self._compress: zlib._Compress | None = None
        self._crc = 0
        self._size = 0
        self._csize = 0

    @property
    def offset(self) -> int:
        """Bytes produced so far."""
        return self._offset

    def _out(self, data: bytes) -> bytes:
        self._offset += len(data)
        return data

    def directory(self, segments: tuple[str, ...], mtime: float, mode: int = 0o755) -> bytes:
        """An empty directory's entry (``name/``, stored, no data)."""
        assert self._current is None
        name, utf8 = encode_name(segments, True)
        dostime, date = _dos_time(mtime)
        flags = _FLAG_UTF8 if utf8 else 0
        rec = _Record(
            name,
            flags,
            METHOD_STORED,
            dostime,
            date,
            _S_IFDIR | (mode & 0o7777),
            self._offset,
            _VERSION,
        )
        self._records.append(rec)
        head = _LOCAL.pack(
            0x04034B50, _VERSION, flags, METHOD_STORED, dostime, date, 0, 0, 0, len(name), 0
        )
        return self._out(head + name)

    def start(
        self,
        segments: tuple[str, ...],
        mtime: float,
        size: int,
        mode: int = 0o644,
        *,
        deflate: bool = True,
    ) -> bytes:
        """A file's local header; ``size`` is what its data is expected to
        be (it decides ZIP64; the data descriptor carries the truth)."""
        assert self._current is None
        name, utf8 = encode_name(segments, False)
        dostime, date = _dos_time(mtime)
        method = METHOD_DEFLATED if deflate else METHOD_STORED
        # Deflate may grow incompressible data (5 bytes per 16 KiB block
        # and a little): the margin keeps a member just under 4 GiB honest.
        self._zip64 = size + (size >> 12) + 1024 >= self._zip64_at
        version = _VERSION64 if self._zip64 else _VERSION
        flags = _FLAG_DESCRIPTOR | (_FLAG_UTF8 if utf8 else 0)
        rec = _Record(
            name, flags, method, dostime, date, _S_IFREG | (mode & 0o7777), self._offset, version
        )
        self._current = rec
        self._crc = self._size = self._csize = 0
        self._compress = zlib.compressobj(self._level, zlib.DEFLATED, -15) if deflate else None
        if self._zip64:
            extra = struct.pack("<HHQQ", 0x0001, 16, 0, 0)
            head = _LOCAL.pack(
                0x04034B50,
                version,
                flags,
                method,
                dostime,
                date,
                0,
                ZIP64_LIMIT,
                ZIP64_LIMIT,
                len(name),
                len(extra),
            )
            return self._out(head + name + extra)
        head = _LOCAL.pack(0x04034B50, version, flags, method, dostime, date, 0, 0, 0, len(name), 0)
        return self._out(head + name)

    def data(self, chunk: bytes) -> bytes:
        """The archive bytes of ``chunk`` of the current file's data."""
        assert self._current is not None
        self._crc = zlib.crc32(chunk, self._crc)
        self._size += len(chunk)
        out = self._compress.compress(chunk) if self._compress is not None else chunk
        self._csize += len(out)
        return self._out(out)

    def end(self) -> bytes:
        """The rest of the current file's data and its data descriptor."""
        rec = self._current
        assert rec is not None
        tail = self._compress.flush() if self._compress is not None else b""
        self._csize += len(tail)
        self._current = None
        self._compress = None
        rec.crc, rec.size, rec.csize = self._crc, self._size, self._csize
        if self._zip64:
            desc = _DESCRIPTOR64.pack(0x08074B50, rec.crc, rec.csize, rec.size)
        elif rec.size >= ZIP64_LIMIT or rec.csize >= ZIP64_LIMIT:
            raise ValueError("member grew past 4 GiB without ZIP64")
        else:
            desc = _DESCRIPTOR.pack(0x08074B50, rec.crc, rec.csize, rec.size)
        self._records.append(rec)
        return self._out(tail + desc)

    def _central(self, rec: _Record) -> bytes:
        """One central directory header; the fields past the threshold go
        to a ZIP64 extra field in the order APPNOTE 4.5.3 gives."""
        limit = self._zip64_at
        fields: list[int] = []
        size, csize, offset = rec.size, rec.csize, rec.offset
        if size >= limit:
            fields.append(size)
            size = ZIP64_LIMIT
        if csize >= limit:
            fields.append(csize)
            csize = ZIP64_LIMIT
        if offset >= limit:
            fields.append(offset)
            offset = ZIP64_LIMIT
        version = rec.version
        extra = b""
        if fields:
            extra = struct.pack(f"<HH{len(fields)}Q", 0x0001, 8 * len(fields), *fields)
            version = _VERSION64
        external = (rec.mode << 16) | (0x10 if rec.mode & _S_IFDIR else 0)
        head = _CENTRAL.pack(
            0x02014B50, _MADE_BY_UNIX | version, version, rec.flags, rec.method,
            rec.dostime, rec.date, rec.crc, csize, size, len(rec.name), len(extra),
            0, 0, 0, external, offset,
        )  # fmt: skip
        return head + rec.name + extra

    def finish(self) -> bytes:
        """The central directory and the end records."""
        assert self._current is None
        start = self._offset
        limit = self._zip64_at
        directory = b"".join(self._central(rec) for rec in self._records)
        count = len(self._records)
        cd_size = len(directory)
        if count >= self._entries_at or cd_size >= limit or start >= limit:
            # ZIP64 end record and locator (APPNOTE 4.3.14, 4.3.15), then
            # the classic record with its overflowing fields at their maximum.
            end = _END64.pack(
                0x06064B50, 44, _MADE_BY_UNIX | _VERSION64, _VERSION64, 0, 0,
                count, count, cd_size, start,
            )  # fmt: skip
            end += _LOCATOR64.pack(0x07064B50, 0, start + cd_size, 1)
            count16 = ENTRIES_LIMIT if count >= self._entries_at else count
            size32 = ZIP64_LIMIT if cd_size >= limit else cd_size
            start32 = ZIP64_LIMIT if start >= limit else start
            end += _END.pack(0x06054B50, 0, 0, count16, count16, size32, start32, 0)
        else:
            end = _END.pack(0x06054B50, 0, 0, count, count, cd_size, start, 0)
        self._records = []
        return self._out(directory + end)
