"""A streaming tar.gz writer (pure: bytes in, bytes out).

Each member is a POSIX.1-2001 (pax) header made by the standard library
(:meth:`tarfile.TarInfo.tobuf`: a ustar header, preceded by a pax
extended header when the name is long or not ASCII; a name that is not
UTF-8, undecodable bytes arriving as ``surrogateescape`` surrogates, is
written as its own bytes with ``hdrcharset=BINARY``), then its data padded
to 512 bytes; the archive ends with two zero blocks, padded to a record
(10,240 bytes, what tar itself writes).  The whole stream goes through one
``zlib.compressobj(wbits=31)`` (a gzip member, RFC 1952, with no name and
mtime 0).  A file's size is in its header, so the data must be exactly
that long: :meth:`TarEncoder.end` refuses anything else (the caller cuts
the stream).
"""

from __future__ import annotations

import tarfile
import zlib
from typing import Final

from .zipenc import check_segments

__all__ = ["TarEncoder"]

_BLOCK: Final = tarfile.BLOCKSIZE
_RECORD: Final = tarfile.RECORDSIZE


class TarEncoder:
    """Members in, ``.tar.gz`` bytes out: :meth:`directory`, :meth:`start`
    / :meth:`data` / :meth:`end` per file, :meth:`finish` once."""

    def __init__(self, level: int = 6) -> None:
        self._z = zlib.compressobj(level, zlib.DEFLATED, 31)
        self._raw = 0  # uncompressed tar bytes so far
        self._left = -1  # data bytes the current member still needs; -1: none open
        self._size = 0

    def _out(self, data: bytes) -> bytes:
        self._raw += len(data)
        return self._z.compress(data)

    @staticmethod
    def _header(
        segments: tuple[str, ...], kind: bytes, size: int, mtime: float, mode: int
    ) -> bytes:
        check_segments(segments)
        info = tarfile.TarInfo("/".join(segments))
        info.type = kind
        info.size = size
        info.mtime = int(max(0.0, mtime))
        info.mode = mode & 0o7777
        return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")

    def directory(self, segments: tuple[str, ...], mtime: float, mode: int = 0o755) -> bytes:
        """A directory's entry."""
        assert self._left < 0
        return self._out(self._header(segments, tarfile.DIRTYPE, 0, mtime, mode))

    def start(self, segments: tuple[str, ...], mtime: float, size: int, mode: int = 0o644) -> bytes:
        """A file's header; exactly ``size`` bytes of data must follow."""
        assert self._left < 0
        head = self._header(segments, tarfile.REGTYPE, size, mtime, mode)
        self._left = self._size = size
        return self._out(head)

    def data(self, chunk: bytes) -> bytes:
        if len(chunk) > self._left:
            raise ValueError("member data longer than its header says")
        self._left -= len(chunk)
        return self._out(chunk)

    def end(self) -> bytes:
        """The current file's padding; ValueError when its data was short."""
        if self._left != 0:
            raise ValueError("member data shorter than its header says")
        self._left = -1
        pad = -self._size % _BLOCK
        return self._out(b"\0" * pad) if pad else b""

    def finish(self) -> bytes:
        """The end-of-archive blocks, the record padding and the gzip trailer."""
        assert self._left < 0
        end = b"\0" * (2 * _BLOCK)
        total = self._raw + len(end)
        end += b"\0" * (-total % _RECORD)
        return self._out(end) + self._z.flush()
