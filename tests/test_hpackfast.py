"""serverio.wire.hpackfast against the hpack package's decoder (RFC 7541)."""

from __future__ import annotations

import random

import hpack
import pytest

from serverio.wire.hpackfast import CachingDecoder, FieldEncoder, encode_integer

Fields = list[tuple[bytes, bytes]]


def _decoder(table_size: int = 4096) -> hpack.Decoder:
    dec = hpack.Decoder()
    dec.max_allowed_table_size = table_size  # what the client announced
    return dec


def _decode(dec: hpack.Decoder, block: bytes) -> Fields:
    return [(bytes(n), bytes(v)) for n, v in dec.decode(block, raw=True)]


@pytest.mark.parametrize(
    ("value", "bits", "expected"),
    [
        (10, 5, b"\x0a"),  # RFC 7541 C.1.1
        (1337, 5, b"\x1f\x9a\x0a"),  # C.1.2
        (42, 8, b"\x2a"),  # C.1.3
        (31, 5, b"\x1f\x00"),  # exactly the prefix limit
    ],
)
def test_integer_encoding_matches_the_rfc_examples(value: int, bits: int, expected: bytes) -> None:
    assert encode_integer(value, bits) == expected


def test_a_repeated_header_list_is_all_indexed_and_decodes_the_same() -> None:
    enc, dec = FieldEncoder(), _decoder()
    fields = [
        (b":status", b"200"),
        (b"content-type", b"application/octet-stream"),
        (b"content-length", b"1024"),
        (b"etag", b'"abc-123"'),
        (b"date", b"Tue, 01 Dec 2026 12:00:00 GMT"),
    ]
    first = enc.encode(fields)
    second = enc.encode(fields)
    assert _decode(dec, first) == fields
    assert _decode(dec, second) == fields
    # :status 200 is static index 8; the other four are the dynamic
    # entries 62..65, newest first.
    assert second == bytes([0x88, 0x80 | 65, 0x80 | 64, 0x80 | 63, 0x80 | 62])
    assert enc.encode(fields) is second  # remembered while the table is unchanged


def test_a_large_value_is_not_indexed_so_it_does_not_evict_the_table() -> None:
    enc, dec = FieldEncoder(), _decoder()
    small = [(b"etag", b'"x"')]
    big = [(b"x-big", b"v" * 2000)]
    assert _decode(dec, enc.encode(small)) == small
    assert _decode(dec, enc.encode(big)) == big
    again = enc.encode(small)
    assert again == bytes([0x80 | 62])  # still in the table
    assert _decode(dec, again) == small
    assert len(dec.header_table.dynamic_entries) == 1


def test_the_table_size_is_capped_and_changes_are_signalled_smallest_first() -> None:
    enc = FieldEncoder(cap=4096)
    dec = _decoder(1 << 20)
    fields = [(b"etag", b'"abc"'), (b"content-length", b"5")]
    assert _decode(dec, enc.encode(fields)) == fields
    enc.header_table_size = 1 << 20  # a client announcing 1 MiB: still 4096
    assert enc.header_table_size == 4096
    block = enc.encode(fields)
    assert block[0] & 0xE0 != 0x20  # no size update: nothing changed
    assert _decode(dec, block) == fields
    enc.header_table_size = 0
    enc.header_table_size = 100
    block = enc.encode(fields)
    assert block.startswith(b"\x20\x3f\x45")  # size 0, then size 100 (§4.2, §5.1)
    assert _decode(dec, block) == fields
    assert dec.header_table.maxsize == 100
    assert _decode(dec, enc.encode(fields)) == fields  # the update is sent once


@pytest.mark.parametrize("seed", range(6))
def test_random_header_lists_and_table_sizes_round_trip(seed: int) -> None:
    """Many responses from a small pool of fields (repetition, eviction,
    names indexed from the dynamic table, table size changes) decode to
    what was encoded, in order, with the decoder's table in step."""
    rng = random.Random(seed)
    names = [b"content-type", b"etag", b"date", b"x-custom", b"x-other", b"cache-control", b"vary"]
    values = [b"a", b"text/html", b'"0123456789abcdef"', b"v" * 300, b"w" * 1500, b"", b"no-cache"]
    enc = FieldEncoder(cap=4096)
    announced = 4096
    dec = _decoder(announced)
    for _ in range(400):
        if rng.random() < 0.03:
            announced = rng.choice([0, 64, 256, 1024, 4096, 65536])
            dec.max_allowed_table_size = announced
            enc.header_table_size = announced
        fields = [(b":status", rng.choice([b"200", b"304", b"206", b"404", b"299"]))]
        fields += [(rng.choice(names), rng.choice(values)) for _ in range(rng.randint(0, 8))]
        assert _decode(dec, enc.encode(fields)) == fields
        assert dec.header_table.maxsize == enc.header_table_size == min(announced, 4096)


def test_the_caching_decoder_agrees_with_hpack_while_the_table_changes() -> None:
    """Repeated all-indexed blocks are answered from memory, and a changed
    table (insertion, eviction, size update) is never answered with a
    stale list: every block decodes as a fresh hpack decoder decodes it."""
    rng = random.Random(7)
    enc = hpack.Encoder()
    plain, caching = hpack.Decoder(), CachingDecoder()
    pool = [
        [(b":method", b"GET"), (b":path", b"/a"), (b"user-agent", b"x" * n)] for n in (1, 50, 900)
    ] + [[(b":method", b"GET"), (b":path", b"/b"), (b"cookie", b"c=%d" % i)] for i in range(3)]
    all_indexed = 0
    for i in range(600):
        if rng.random() < 0.02:
            size = rng.choice([256, 1024, 4096])
            enc.header_table_size = size
        block = enc.encode(rng.choice(pool), huffman=False)
        if not block.translate(None, bytes(range(0x81, 0xFF))):
            all_indexed += 1
        expected = plain.decode(block, raw=True)
        got = caching.decode(block, raw=True)
        assert got == expected, i
    assert all_indexed > 100  # the remembered path was taken


def test_the_caching_decoder_still_refuses_an_oversized_list() -> None:
    enc = hpack.Encoder()
    fields = [(b":method", b"GET"), (b"x-a", b"v" * 100)]
    dec = CachingDecoder(max_header_list_size=1000)
    dec.decode(enc.encode(fields), raw=True)
    block = enc.encode(fields)  # all indexed now
    assert dec.decode(block, raw=True) == dec.decode(block, raw=True)
    dec.max_header_list_size = 100
    with pytest.raises(hpack.OversizedHeaderListError):
        dec.decode(block, raw=True)


@pytest.mark.parametrize(
    ("first", "remembered"),
    [
        (b"\x04", True),  # literal without indexing (§6.2.2): nghttp2's :path
        (b"\x14", True),  # literal never indexed (§6.2.3)
        (b"\x44", False),  # literal with incremental indexing (§6.2.1): the table changes
    ],
)
def test_a_block_that_leaves_the_table_as_it_was_is_remembered(
    monkeypatch: pytest.MonkeyPatch, first: bytes, remembered: bool
) -> None:
    """h2load's and curl's request block: ``:path`` as a literal (name
    index 4, a raw 7-byte value), then indexed fields.  Decoded again only
    when its decoding changed the table."""
    calls = 0
    real = hpack.Decoder.decode

    def counted(self: hpack.Decoder, data: bytes, raw: bool = False) -> object:
        nonlocal calls
        calls += 1
        return real(self, data, raw)

    monkeypatch.setattr(hpack.Decoder, "decode", counted)
    block = first + b"\x07/1k.bin" + b"\x86\x82"
    dec = CachingDecoder()
    expected = [(b":path", b"/1k.bin"), (b":scheme", b"http"), (b":method", b"GET")]
    for _ in range(3):
        assert [tuple(h) for h in dec.decode(block, raw=True)] == expected
    assert calls == (1 if remembered else 3)


def test_the_caching_decoder_agrees_with_hpack_on_unindexed_literals() -> None:
    """Blocks mixing indexed fields, literals never indexed and literals
    that index: every one decodes as a fresh hpack decoder decodes it."""
    rng = random.Random(11)
    enc = hpack.Encoder()
    plain, caching = hpack.Decoder(), CachingDecoder()
    paths = [b"/a", b"/b", b"/c" * 20]
    for i in range(600):
        if rng.random() < 0.02:
            enc.header_table_size = rng.choice([256, 1024, 4096])
        fields: list[tuple[bytes, bytes]] = [(b":method", b"GET")]
        path = rng.choice(paths)
        # A never-indexed :path (what the encoder sends for a sensitive field).
        fields.append(hpack.NeverIndexedHeaderTuple(b":path", path))
        if rng.random() < 0.3:
            fields.append((b"x-n", b"%d" % rng.randrange(5)))  # indexed once, then looked up
        block = enc.encode(fields, huffman=rng.random() < 0.5)
        assert caching.decode(block, raw=True) == plain.decode(block, raw=True), i
