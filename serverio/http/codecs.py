"""Content codings serverio can produce on the fly (RFC 9110 §8.4.1).

Pure functions from bytes to bytes; gzip is always there, br and zstd when
their optional extras are installed.  The names are what the decision core
negotiates with (:func:`serverio.http.negotiate.select_coding`); the work
itself runs in the ``work`` pool (:mod:`serverio.pipeline.content`).
"""

from __future__ import annotations

import gzip
from collections.abc import Callable
from typing import Final

__all__ = ["CODECS", "compress_bytes"]


def _gzip(data: bytes) -> bytes:
    # mtime=0: the same input always compresses to the same bytes, so the
    # digest of a gzip representation is stable across restarts.
    return gzip.compress(data, compresslevel=6, mtime=0)


def _load_codecs() -> dict[str, Callable[[bytes], bytes]]:
    codecs: dict[str, Callable[[bytes], bytes]] = {"gzip": _gzip}
    try:
        import brotli

        def _br(data: bytes) -> bytes:
            # Quality 5: within a few percent of 11 on text at a fraction of
            # the CPU (a miss blocks its requesters until it is done).
            return bytes(brotli.compress(data, quality=5))

        codecs["br"] = _br
    except ImportError:  # optional extra "brotli"
        pass
    try:
        import zstandard

        def _zstd(data: bytes) -> bytes:
            # A compressor object is not thread-safe: one per call.
            return bytes(zstandard.ZstdCompressor(level=9).compress(data))

        codecs["zstd"] = _zstd
    except ImportError:  # optional extra "zstd"
        pass
    return codecs


CODECS: Final = _load_codecs()


def compress_bytes(coding: str, data: bytes) -> bytes:
    return CODECS[coding](data)
