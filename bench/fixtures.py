"""Deterministic fixture tree that every server serves during a run."""

from __future__ import annotations

import errno
import gzip
import importlib
import os
import random
import shutil
import tempfile
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
# The HTTP/1.1 many-assets workloads: 20 text assets of 200 B to 180 KiB
# (log-spaced), each with .br and .gz sidecars, as a built front end ships.
MANY_DIR = "many"
MANY_COUNT = 20
MANY_MIN, MANY_MAX = 200, 180 * KIB
SIDECARS = (".br", ".gz")
# The same 20 files without sidecars: what a server does with
# Accept-Encoding when there is nothing precompressed (issue 31).
MANY_PLAIN_DIR = "many-plain"

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
    1-48 KiB (``asset_paths``); many/ with 20 text files of 200 B to 180 KiB
    and their .br and .gz sidecars (``many_asset_paths``); many-plain/ with
    the same 20 files and no sidecars (``many_plain_paths``); index.html.
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
    many = root / MANY_DIR
    many.mkdir()
    for name, size in zip(many_asset_names(), many_asset_sizes(), strict=True):
        data = _text(rng, size)
        (many / name).write_bytes(data)
        # Sidecars after the file: a sidecar older than its file is ignored.
        for suffix, coded in sidecar_bytes(data).items():
            (many / f"{name}{suffix}").write_bytes(coded)
        sizes[f"{MANY_DIR}/{name}"] = len(data)
    plain = root / MANY_PLAIN_DIR
    plain.mkdir()
    for name in many_asset_names():  # the same bytes (no random draw: later files unchanged)
        data = (many / name).read_bytes()
        (plain / name).write_bytes(data)
        sizes[f"{MANY_PLAIN_DIR}/{name}"] = len(data)
    index = b"<!doctype html>\n<title>serverio bench</title>\n<p>fixture index</p>\n"
    (root / "index.html").write_bytes(index)
    sizes["index.html"] = len(index)
    return Fixture(root=root, sizes=sizes)


def asset_names() -> list[str]:
    """The many-assets files: ``m000.js`` ... and every tenth one a ``.css``."""
    return [f"m{i:03d}.{'css' if i % 10 == 9 else 'js'}" for i in range(ASSET_COUNT)]


def asset_paths() -> list[str]:
    return [f"/{ASSETS_DIR}/{name}" for name in asset_names()]


def many_asset_sizes() -> list[int]:
    """MANY_COUNT sizes from MANY_MIN to MANY_MAX bytes, evenly spaced on a log scale."""
    ratio = MANY_MAX / MANY_MIN
    return [round(MANY_MIN * ratio ** (i / (MANY_COUNT - 1))) for i in range(MANY_COUNT)]


def many_asset_names() -> list[str]:
    """``a00.js`` ... ``a19.css``: scripts, with every fourth one a stylesheet."""
    return [f"a{i:02d}.{'css' if i % 4 == 3 else 'js'}" for i in range(MANY_COUNT)]


def many_asset_paths() -> list[str]:
    return [f"/{MANY_DIR}/{name}" for name in many_asset_names()]


def many_plain_paths() -> list[str]:
    return [f"/{MANY_PLAIN_DIR}/{name}" for name in many_asset_names()]


def sidecar_bytes(data: bytes) -> dict[str, bytes]:
    """The precompressed sidecars of ``data``: ``.gz`` always, ``.br`` if brotli is importable.

    Without the ``brotli`` module (serverio's optional extra) there is no
    ``.br``; servers then fall back to the ``.gz`` (the workload accepts both).
    """
    out: dict[str, bytes] = {}
    try:
        brotli = importlib.import_module("brotli")
    except ImportError:
        pass
    else:
        # Quality 9, not 11: within 7% of 11's size here at a tenth of
        # the time, so building the fixture stays quick for the smoke run.
        out[".br"] = brotli.compress(data, quality=9)
    out[".gz"] = gzip.compress(data, compresslevel=9, mtime=0)
    return out


# The many-files workloads (issue 47): a site of TREE_FILES distinct 1 KiB
# files in TREE_DIRS directories, requested at random.  Writing 100,000
# files takes a while, so a tree is made once under the system's temporary
# directory and reused by later runs (``tree_root``).
TREE_DIRS = 100
TREE_FILE_SIZE = KIB
TREE_VERSION = 1  # bump when the layout or the bytes change


def tree_name(index: int, count: int) -> str:
    """The relative path of file ``index`` of a tree of ``count`` files:
    ``dDD/fNNNNNN.bin``, the files spread evenly over TREE_DIRS directories."""
    if not 0 <= index < count:
        raise ValueError(f"file {index} is not in a tree of {count}")
    return f"d{index % TREE_DIRS:02d}/f{index:06d}.bin"


def tree_bytes(index: int, size: int = TREE_FILE_SIZE) -> bytes:
    """File ``index``'s bytes: deterministic, distinct per file."""
    return random.Random(index * 7919 + 20261206).randbytes(size)


def tree_root(count: int, base: Path | None = None) -> Path:
    """A tree of ``count`` files (``tree_name``, ``tree_bytes``), made once
    under ``base`` (default: the temporary directory, ``serverio-bench-trees``)
    and reused: it is built in a scratch directory and renamed into place
    when complete, so an interrupted build is never reused."""
    base = base or Path(tempfile.gettempdir()) / "serverio-bench-trees"
    done = base / f"files-{count}-{TREE_FILE_SIZE}-v{TREE_VERSION}"
    if done.is_dir():
        return done
    base.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{done.name}-", dir=base))
    try:
        for d in range(min(TREE_DIRS, count)):
            (scratch / f"d{d:02d}").mkdir()
        for i in range(count):
            (scratch / tree_name(i, count)).write_bytes(tree_bytes(i))
        os.rename(scratch, done)  # atomic: the tree is whole or absent
    except FileExistsError:
        shutil.rmtree(scratch, ignore_errors=True)  # another run finished first
    except OSError as exc:
        shutil.rmtree(scratch, ignore_errors=True)
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):  # another run renamed first
            raise
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return done
