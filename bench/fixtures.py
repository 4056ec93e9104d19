"""Deterministic fixture tree that every server serves during a run."""

from __future__ import annotations

import gzip
import random
from dataclasses import dataclass
from pathlib import Path

KIB = 1024
MIB = 1024 * KIB

BINARY_FILES = {
    "1k.bin": KIB,
    "16k.bin": 16 * KIB,
    "64k.bin": 64 * KIB,
    "256k.bin": 256 * KIB,
    "8m.bin": 8 * MIB,
}
TEXT_FILE = "64k.txt"
TEXT_SIZE = 64 * KIB
LISTING_DIR = "dir"
LISTING_ENTRIES = 20
# The many-assets profile: a front end's modules and styles, one origin.
ASSETS_DIR = "assets"
ASSET_COUNT = 100

_WORDS = (
    "static file server trio h11 request response header body range etag gzip "
    "cache keep alive connection socket buffer kernel page sendfile listing index "
    "benchmark latency throughput percentile median worker queue filesystem"
).split()


@dataclass(frozen=True)
class Fixture:
    root: Path
    sizes: dict[str, int]

    def path(self, name: str) -> Path:
        return self.root / name


def _text(rng: random.Random, size: int) -> bytes:
    words: list[str] = []
    length = 0
    while length < size:  # bounded by size
        word = rng.choice(_WORDS)
        words.append(word)
        length += len(word) + 1
        if rng.random() < 0.08:
            words.append("\n")
            length += 1
    return " ".join(words).encode("ascii")[:size]


def create(root: Path, seed: int = 20260710) -> Fixture:
    """Write the fixture tree under ``root`` (which must exist) and return it.

    Files: 1k.bin, 16k.bin, 64k.bin, 256k.bin, 8m.bin (random bytes); 64k.txt
    (compressible text) and its precompressed sidecar 64k.txt.gz for servers
    that serve sidecars; dir/ with 20 small files; assets/ with 100 files of
    1-48 KiB (``asset_paths``); index.html.
    """
    rng = random.Random(seed)
    sizes: dict[str, int] = {}
    for name, size in BINARY_FILES.items():
        (root / name).write_bytes(rng.randbytes(size))
        sizes[name] = size
    text = _text(rng, TEXT_SIZE)
    (root / TEXT_FILE).write_bytes(text)
    (root / f"{TEXT_FILE}.gz").write_bytes(gzip.compress(text, compresslevel=9, mtime=0))
    sizes[TEXT_FILE] = len(text)
    listing = root / LISTING_DIR
    listing.mkdir()
    for i in range(1, LISTING_ENTRIES + 1):
        (listing / f"file{i:02d}.txt").write_text(f"entry {i}\n" * i)
    assets = root / ASSETS_DIR
    assets.mkdir()
    for name in asset_names():
        data = rng.randbytes(rng.randint(1, 48) * KIB)
        (assets / name).write_bytes(data)
        sizes[f"{ASSETS_DIR}/{name}"] = len(data)
    index = b"<!doctype html>\n<title>serverio bench</title>\n<p>fixture index</p>\n"
    (root / "index.html").write_bytes(index)
    sizes["index.html"] = len(index)
    return Fixture(root=root, sizes=sizes)


def asset_names() -> list[str]:
    """The many-assets files: ``m000.js`` ... and every tenth one a ``.css``."""
    return [f"m{i:03d}.{'css' if i % 10 == 9 else 'js'}" for i in range(ASSET_COUNT)]


def asset_paths() -> list[str]:
    return [f"/{ASSETS_DIR}/{name}" for name in asset_names()]
