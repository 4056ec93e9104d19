"""HPACK (RFC 7541) for a server that sees the same header lists again and again.

A static file server answers the same few header lists over and over: the
same file gives the same ``content-type``, ``etag``, ``content-length`` and
``last-modified``, and ``date`` changes once a second.  The ``hpack``
package encodes field by field in pure Python (a table search, a log call
and a few small byte strings per field).  This encoder keeps the same
dynamic table a decoder keeps (RFC 7541 §2.3.2, §4) with two dictionaries
for its look-ups, and remembers the encoded block of a header list for as
long as the table does not change: a block made only of indexed fields
depends on nothing else, so the second and later responses of a warm file
cost one dictionary look-up.

Choices, all allowed by RFC 7541:

* no Huffman coding (§5.2: the encoder chooses; the pure-Python coder was
  the largest single cost of a small response, for ~20 % fewer bytes);
* a field is added to the dynamic table (§6.2.1) unless it would take more
  than a quarter of the table, so that one large value does not evict
  everything else (those go as a literal without indexing, §6.2.2);
* the table size is the peer's SETTINGS_HEADER_TABLE_SIZE capped at
  ``cap`` (§4.2: the setting is an upper bound for the encoder); a change
  is signalled at the start of the next block, the smallest size first
  when it went down and up again in between (§4.2).

:class:`CachingDecoder` is the ``hpack`` package's decoder with one
addition for the requests: a client that repeats a request sends a block
of indexed fields and literals without indexing (nghttp2's clients, h2load
and curl, send ``:path`` as a literal that is never indexed; browsers
index nearly everything), whose decoding changes nothing and depends only
on the dynamic table.  Such a block's header list is remembered until the
table changes.

Pure: no I/O, no trio.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

import hpack
from hpack.table import HeaderTable

__all__ = ["CachingDecoder", "FieldEncoder", "encode_integer"]

_STATIC = HeaderTable.STATIC_TABLE  # RFC 7541 Appendix A, 1-based in the protocol
_STATIC_LEN = len(_STATIC)
_STATIC_FIELDS: dict[tuple[bytes, bytes], int] = {}
_STATIC_NAMES: dict[bytes, int] = {}
for _i, (_n, _v) in enumerate(_STATIC, 1):
    _STATIC_FIELDS.setdefault((_n, _v), _i)
    _STATIC_NAMES.setdefault(_n, _i)
_ENTRY_OVERHEAD = 32  # RFC 7541 §4.1
# Remembered blocks per encoder or decoder, and the largest remembered:
# with these a connection holds at most ~16 x 1 KiB of header lists here.
_CACHE_MAX = 16
_CACHED_FIELDS_MAX = 1024  # bytes of names and values in a remembered list
_CACHED_BLOCK_MAX = 64  # bytes of a remembered request block


def encode_integer(value: int, prefix_bits: int, first: int = 0) -> bytes:
    """RFC 7541 §5.1; ``first`` carries the pattern bits above the prefix."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 128:
        out.append((value & 127) | 128)
        value >>= 7
    out.append(value)
    return bytes(out)


def _literal_value(value: bytes) -> bytes:
    return encode_integer(len(value), 7) + value  # H bit 0: no Huffman (§5.2)


class FieldEncoder:
    """An HPACK encoder for one connection (one dynamic table).

    ``encode(headers)`` takes ``(name, value)`` pairs of bytes, names
    lower-case, pseudo-fields first.  Every field may be indexed: hpack's
    ``NeverIndexedHeaderTuple`` is not honoured (h2 makes those only when
    it normalizes outbound headers, which serverio turns off, and response
    fields carry no credentials).  ``header_table_size`` is what h2 sets
    when the peer's SETTINGS_HEADER_TABLE_SIZE changes.
    """

    __slots__ = (
        "_cache",
        "_entries",
        "_fields",
        "_inserted",
        "_maxsize",
        "_names",
        "_pending",
        "_size",
        "cap",
    )

    def __init__(self, cap: int = 4096) -> None:
        self.cap = cap
        self._maxsize = min(4096, cap)  # the protocol's initial size (RFC 9113 §6.5.2)
        self._pending: list[int] = [] if self._maxsize == 4096 else [self._maxsize]
        # Dynamic entries, oldest first: (name, value, size, insertion number).
        self._entries: deque[tuple[bytes, bytes, int, int]] = deque()
        self._size = 0
        self._inserted = 0  # entries ever inserted; entry k has index 62 + (inserted - 1 - k)
        self._fields: dict[tuple[bytes, bytes], int] = {}  # -> newest insertion number
        self._names: dict[bytes, int] = {}
        self._cache: dict[tuple[tuple[bytes, bytes], ...], bytes] = {}

    # ------------------------------------------------------------ table size

    @property
    def header_table_size(self) -> int:
        return self._maxsize

    @header_table_size.setter
    def header_table_size(self, value: int) -> None:
        value = min(value, self.cap)
        if value == self._maxsize and not self._pending:
            return
        self._pending.append(value)
        self._maxsize = value
        self._evict()
        self._cache.clear()

    def _evict(self) -> None:
        entries = self._entries
        while self._size > self._maxsize:
            name, value, size, k = entries.popleft()
            self._size -= size
            if self._fields.get((name, value)) == k:
                del self._fields[(name, value)]
            if self._names.get(name) == k:
                del self._names[name]

    def _size_updates(self) -> bytes:
        """Dynamic table size updates (§6.3) owed to the decoder."""
        pending = self._pending
        final = pending[-1]
        smallest = min(pending)
        pending.clear()
        out = encode_integer(smallest, 5, 0x20)
        if smallest != final:
            out += encode_integer(final, 5, 0x20)
        return out

    # ------------------------------------------------------------ encoding

    def encode(self, headers: Iterable[tuple[bytes, bytes]], huffman: bool = False) -> bytes:
        """The header block for ``headers`` (``huffman`` is ignored: the
        signature is hpack's, which h2 calls)."""
        key = tuple(headers)
        block = self._cache.get(key)
        if block is not None:
            return block
        updated = bool(self._pending)
        out = bytearray(self._size_updates() if updated else b"")
        inserted = self._inserted
        fields = self._fields
        for field in key:
            index = _STATIC_FIELDS.get(field)
            if index is None:
                k = fields.get(field)
                if k is not None:
                    index = _STATIC_LEN + self._inserted - k
            if index is not None:
                out += encode_integer(index, 7, 0x80)  # §6.1 indexed field
                continue
            name, value = field
            size = len(name) + len(value) + _ENTRY_OVERHEAD
            name_index = _STATIC_NAMES.get(name)
            if name_index is None:
                k = self._names.get(name)
                if k is not None:
                    name_index = _STATIC_LEN + self._inserted - k
            if 4 * size > self._maxsize:
                # §6.2.2 literal without indexing: a large value would evict
                # the whole table (or not fit at all).
                if name_index is None:
                    out += b"\x00" + _literal_value(name)
                else:
                    out += encode_integer(name_index, 4)
                out += _literal_value(value)
                continue
            # §6.2.1 literal with incremental indexing, then insert (§4.4).
            if name_index is None:
                out += b"\x40" + _literal_value(name)
            else:
                out += encode_integer(name_index, 6, 0x40)
            out += _literal_value(value)
            k = self._inserted
            self._inserted = k + 1
            self._entries.append((name, value, size, k))
            self._size += size
            fields[field] = k
            self._names[name] = k
            self._evict()
        block = bytes(out)
        if self._inserted != inserted:
            self._cache.clear()  # every index into the table moved
        elif not updated and sum(len(n) + len(v) for n, v in key) <= _CACHED_FIELDS_MAX:
            # (a size update is sent once: a block carrying one is not kept)
            if len(self._cache) >= _CACHE_MAX:
                self._cache.clear()
            self._cache[key] = block
        return block


class _CountingTable(HeaderTable):
    """hpack's table, counting its changes (insertions, evictions, resizes)."""

    def __init__(self) -> None:
        super().__init__()
        self.changes = 0

    def add(self, name: bytes, value: bytes) -> None:
        self.changes += 1
        super().add(name, value)

    def _shrink(self) -> None:
        self.changes += 1
        super()._shrink()

    @property
    def maxsize(self) -> int:
        return self._maxsize

    @maxsize.setter
    def maxsize(self, newmax: int) -> None:
        self.changes += 1
        HeaderTable.maxsize.fset(self, newmax)  # type: ignore[attr-defined]


class CachingDecoder(hpack.Decoder):
    """``hpack.Decoder`` that remembers the header lists of all-indexed blocks.

    A remembered list is returned only while the dynamic table and the
    limits it was decoded under are unchanged, so the result (and any
    error) is the one a fresh decoding would give; errors are never
    remembered.
    """

    def __init__(
        self, max_header_list_size: int = hpack.hpack.DEFAULT_MAX_HEADER_LIST_SIZE
    ) -> None:
        super().__init__(max_header_list_size=max_header_list_size)
        self.header_table = _CountingTable()
        self._state: tuple[int, int, int] = (-1, 0, 0)
        self._cache: dict[bytes, list[hpack.HeaderTuple]] = {}

    def decode(self, data: bytes, raw: bool = False) -> Iterable[hpack.HeaderTuple]:
        if not raw or len(data) > _CACHED_BLOCK_MAX:
            return super().decode(data, raw)
        table = self.header_table
        assert isinstance(table, _CountingTable)
        changes = table.changes
        state = (changes, self.max_header_list_size, self.max_allowed_table_size)
        if state != self._state:
            self._cache.clear()
            self._state = state
        cached = self._cache.get(data)
        if cached is not None:
            return list(cached)
        headers = super().decode(data, raw)
        assert isinstance(headers, list)
        if table.changes == changes:
            # Its decoding left the table as it was (indexed fields and
            # literals without indexing, §6.1, §6.2.2-3): it depends on the
            # table alone, and the same table gives the same list again.
            if len(self._cache) >= _CACHE_MAX:
                self._cache.clear()
            self._cache[data] = list(headers)
        return headers
