"""Golden transcript: serverio's observable behaviour as a diffable file.

``python -m bench golden record OUT.jsonl`` builds a fixed tree in a
temporary directory (fixed bytes, fixed names, fixed mtimes), starts
``python -m serverio`` on 127.0.0.1 port 0 once per flag set, sends a fixed
list of requests over raw loopback sockets and writes one JSON line per
request: the flag set, a stable human-readable request id, the request as
sent (with placeholders for server-chosen validators) and every response
received on that connection (status, headers, body length and SHA-256).
``python -m bench golden diff A.jsonl B.jsonl`` prints the requests whose
responses differ, field by field, and exits 1 if any do.

The transcript is identical across two runs of the same commit.  What
differs between two runs of the same code is masked deterministically:

* ``Date``: the value becomes ``<date>``.
* ``ETag``: the device and inode numbers in the file validators of
  serverio before ETag format 2 (``"dev-ino-size-mtime"``) become ``<dev>``
  and ``<ino:PATH>`` (the tree is rebuilt per run, so inodes change; size
  and mtime are fixed and kept).  Format 2 (docs/features.md "Validators")
  has no device or inode: its tags (``"hash"``, ``"size-mtime"``) are the
  same on every run and are recorded as they are, so a transcript of an
  older commit differs from a newer one in every file ETag (expected).
* multipart/byteranges: the boundary (random per server process) becomes
  ``<boundary>`` in ``Content-Type`` and in the body before hashing; the
  body length is recorded after that substitution and ``Content-Length``
  becomes ``masked:<that length>`` when it matched the bytes received.
* request headers that carry a validator taken from an earlier response
  (``If-None-Match: {etag}`` ...) are recorded as the template.

Only serverio's command line is used (``--serverio-python``,
``--serverio-cwd``, ``--serverio-cmd`` or ``--serverio-commit``), so the same
recorder runs against another commit's serverio.  See bench/README.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import email.utils
import gzip
import hashlib
import json
import os
import random
import re
import shlex
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import commits
from bench.servers import LaunchPlan, ServerSpec, ServerStartError, running

SCHEMA = 1
HOST = "127.0.0.1"
HOST_HEADER = "golden"
MTIME = 1_700_000_000  # 2023-11-14T22:13:20Z; file i gets MTIME + i hours
READ_TIMEOUT_S = 3.0
SENTINEL_PATH = "/__end__.txt"

# Flags present on the baseline commit and kept by the redesign: the
# transcript of an old commit must be recordable with the same sets.
FLAG_SETS: dict[str, tuple[str, ...]] = {
    "default": (),
    "fs-workers-2": ("--fs-workers", "2"),
    "spa": ("--spa",),
    "no-precompressed": ("--no-precompressed",),
    "digest": ("--digest",),
}
SMOKE_FLAG_SETS = ("default", "fs-workers-2")
COMMON_ARGS = ("-q", "--access-log", "off")


class GoldenError(RuntimeError):
    """The transcript cannot be recorded; the message says why (one line)."""


# ------------------------------------------------------------------ the tree

_WORDS = (
    "static file server request response header body range etag gzip cache "
    "keep alive connection socket buffer listing index directory validator"
).split()


def _text(rng: random.Random, size: int) -> bytes:
    out: list[str] = []
    length = 0
    while length < size:  # bounded by size
        word = rng.choice(_WORDS)
        out.append(word)
        length += len(word) + 1
    return " ".join(out).encode("ascii")[:size]


def _brotli(data: bytes) -> bytes:
    try:
        import brotli
    except ImportError as exc:  # the tree must be the same everywhere: no fallback
        raise GoldenError("the brotli module is needed (pip install brotli)") from exc
    out: bytes = brotli.compress(data, quality=11)
    return out


def build_tree(base: Path, seed: int = 20260711) -> Path:
    """Write the served tree under ``base/www`` (and ``base/outside``); return the root.

    Same bytes, names, layout and mtimes on every call.
    """
    rng = random.Random(seed)
    root = base / "www"
    outside = base / "outside"
    root.mkdir()
    outside.mkdir()
    text64 = _text(rng, 64 * 1024)
    css = _text(rng, 3000)
    js = _text(rng, 5000)
    files: list[tuple[str, bytes]] = [
        ("index.html", b"<!doctype html>\n<title>golden</title>\n<p>root index</p>\n"),
        ("empty.txt", b""),
        ("1k.bin", rng.randbytes(1024)),
        ("64k.bin", rng.randbytes(64 * 1024)),
        ("300k.bin", rng.randbytes(300 * 1024)),
        ("1k.txt", _text(rng, 1024)),
        ("64k.txt", text64),
        ("64k.txt.gz", gzip.compress(text64, compresslevel=9, mtime=0)),
        ("64k.txt.br", _brotli(text64)),
        ("300k.txt", _text(rng, 300 * 1024)),
        ("style.css", css),
        ("style.css.gz", gzip.compress(css, compresslevel=9, mtime=0)),
        ("app.js", js),
        ("app.js.br", _brotli(js)),
        ("data.json", b'{"golden": true, "items": [1, 2, 3]}\n'),
        (".hidden.txt", b"dotfile\n"),
        (".config/settings.txt", b"dot-directory file\n"),
        ("with space.txt", b"space in the name\n"),
        ("caf\u00e9.txt", b"unicode name\n"),
        ("100%.txt", b"percent in the name\n"),
        ("what?.txt", b"question mark in the name\n"),
        ("hash#.txt", b"hash in the name\n"),
        ("semi;colon.txt", b"semicolon in the name\n"),
        ("docs/index.html", b"<!doctype html>\n<p>docs index</p>\n"),
        ("docs/page.html", b"<!doctype html>\n<p>docs page</p>\n"),
        ("noindex/a.txt", b"a" * 10),
        ("noindex/b.bin", rng.randbytes(5000)),
        ("noindex/c.txt", b"c" * 300),
        ("noindex/sub/d.txt", b"d\n"),
        ("odd dir #1/file.txt", b"inside an odd directory name\n"),
        ("app/index.html", b"<!doctype html>\n<p>spa shell</p>\n"),
    ]
    for i, (name, data) in enumerate(files):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.utime(path, (MTIME + i * 3600, MTIME + i * 3600))
    (root / "empty-dir").mkdir()
    (outside / "secret.txt").write_bytes(b"OUTSIDE-SECRET\n")
    links = {
        "link-in.txt": "1k.txt",
        "link-dir": "docs",
        "link-out.txt": "../outside/secret.txt",
        "link-out-dir": "../outside",
        "link-broken": "missing.txt",
    }
    for name, target in links.items():
        (root / name).symlink_to(target)
        os.utime(root / name, (MTIME, MTIME), follow_symlinks=False)
    # Directories last, deepest first: creating entries above changed their mtimes.
    dirs = sorted((p for p in root.rglob("*") if p.is_dir() and not p.is_symlink()), reverse=True)
    for i, d in enumerate([*dirs, root, outside]):
        os.utime(d, (MTIME + 100 * 3600 + i, MTIME + 100 * 3600 + i))
    return root


def inode_names(root: Path) -> dict[int, str]:
    """inode -> the tree-relative name of the file or directory that owns it.

    Symlinks are skipped (an ETag names its target's inode, which the
    target's own entry maps) and names are visited in sorted order, so the
    map does not depend on the order the filesystem lists entries in.
    """
    names = {root.stat().st_ino: "/"}
    for path in sorted(root.rglob("*")):
        if not path.is_symlink():
            names.setdefault(path.stat().st_ino, "/" + path.relative_to(root).as_posix())
    return names


# ------------------------------------------------------------------ requests


@dataclass(frozen=True)
class Request:
    """One request: ``raw`` bytes as they are, or a method/target/headers template.

    Header values may name validators of ``subject`` ({etag}, {etag_gz},
    {lm}, {lm_minus}, {lm_plus}); they are filled in from the prime
    responses of the same flag set.
    """

    id: str
    method: str = "GET"
    target: str = "/"
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    subject: str = ""
    raw: bytes | None = None
    prime: bool = False

    def describe(self) -> str:
        if self.raw is not None:
            return self.raw[:300].decode("latin-1").encode("unicode_escape").decode("ascii")
        hs = "".join(f"; {k}: {v}" for k, v in self.headers)
        return f"{self.method} {self.target}{hs}" + (f" +{len(self.body)}B" if self.body else "")

    def render(self, validators: dict[str, str]) -> bytes:
        if self.raw is not None:
            return self.raw
        lines = [f"{self.method} {self.target} HTTP/1.1", f"Host: {HOST_HEADER}"]
        lines += [f"{k}: {v.format_map(validators)}" for k, v in self.headers]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8") + self.body


PATHS: tuple[str, ...] = (
    "/",
    "/index.html",
    "/empty.txt",
    "/1k.bin",
    "/64k.bin",
    "/300k.bin",
    "/1k.txt",
    "/64k.txt",
    "/64k.txt.gz",
    "/300k.txt",
    "/style.css",
    "/app.js",
    "/data.json",
    "/.hidden.txt",
    "/.config/settings.txt",
    "/with%20space.txt",
    "/caf%C3%A9.txt",
    "/caf\u00e9.txt",
    "/100%25.txt",
    "/100%.txt",
    "/what%3F.txt",
    "/what?.txt",
    "/hash%23.txt",
    "/semi%3Bcolon.txt",
    "/semi;colon.txt",
    "/docs",
    "/docs/",
    "/docs/page.html",
    "/docs/index.html",
    "/noindex",
    "/noindex/",
    "/noindex/sub",
    "/empty-dir/",
    "/odd%20dir%20%231",
    "/odd%20dir%20%231/",
    "/odd%20dir%20%231/file.txt",
    "/app/",
    "/app/deep/route",
    "/link-in.txt",
    "/link-dir/",
    "/link-dir/page.html",
    "/link-out.txt",
    "/link-out-dir/secret.txt",
    "/link-broken",
    "/missing.txt",
    "/missing",
    "/missing/deeper/route",
    "/docs/missing-route",
    "/../outside/secret.txt",
    "/%2e%2e/outside/secret.txt",
    "/docs/..%2f..%2foutside/secret.txt",
    "/docs/%2e%2e/%2e%2e/outside/secret.txt",
    "/..%5c..%5coutside%5csecret.txt",
    "/docs/../1k.txt",
    "/./1k.txt",
    "//1k.txt",
    "/1k.txt%00",
    "/%zz",
    "/%ff%fe",
    "http://golden/1k.txt",
    "*",
    "/1k.txt?x=1",
    "/1k.txt?download",
    "/64k.bin?download=1",
    "/noindex/?sort=size&order=desc",
    "/noindex/?sort=mtime&order=asc",
    "/noindex/?sort=mtime&order=desc",
    "/noindex/?sort=name&order=desc",
    "/noindex/?sort=bogus&order=sideways",
    "/noindex/?format=json",
    "/noindex/?format=json&sort=size&order=desc",
    "/noindex/?format=html",
    "/noindex/?download",
    "/?json",
)
METHODS = ("GET", "HEAD", "POST", "OPTIONS", "BREW")

ENCODINGS: tuple[str, ...] = (
    "gzip",
    "br",
    "zstd",
    "gzip, br, zstd",
    "gzip;q=0.5, br;q=0.8",
    "br;q=0, gzip",
    "gzip;q=0.001, identity;q=0.002",
    "*",
    "*;q=0",
    "identity;q=0",
    "gzip;q=0, identity;q=0",
    "GZIP",
    "gzip;q=1.5",
    "gzip;q=abc",
    "deflate",
    "",
)
RANGES: tuple[str, ...] = (
    "bytes=0-0",
    "bytes=0-99",
    "bytes=-100",
    "bytes=100-",
    "bytes=0-",
    "bytes=0-0,10-19,-5",
    "bytes=0-9,5-14",
    "bytes=0-99, 200-299",
    "bytes=5-1",
    "bytes=999999999-",
    "bytes=-0",
    "items=0-1",
    "bytes=abc",
    "bytes=" + ",".join(f"{i}-{i}" for i in range(0, 400, 2)),
)
CONDITIONALS: tuple[tuple[tuple[str, str], ...], ...] = (
    (("If-None-Match", "{etag}"),),
    (("If-None-Match", "W/{etag}"),),
    (("If-None-Match", '"other", {etag}'),),
    (("If-None-Match", '"other"'),),
    (("If-None-Match", "*"),),
    (("If-None-Match", "{etag_gz}"), ("Accept-Encoding", "gzip")),
    (("If-None-Match", "{etag}"), ("Accept-Encoding", "gzip")),
    (("If-Match", "{etag}"),),
    (("If-Match", "W/{etag}"),),
    (("If-Match", '"other"'),),
    (("If-Match", "*"),),
    (("If-Modified-Since", "{lm}"),),
    (("If-Modified-Since", "{lm_minus}"),),
    (("If-Modified-Since", "{lm_plus}"),),
    (("If-Modified-Since", "garbage"),),
    (("If-Unmodified-Since", "{lm}"),),
    (("If-Unmodified-Since", "{lm_minus}"),),
    (("If-None-Match", "{etag}"), ("If-Modified-Since", "{lm_minus}")),
    (("If-Match", '"other"'), ("If-Unmodified-Since", "{lm_plus}")),
    (("If-Range", "{etag}"), ("Range", "bytes=0-9")),
    (("If-Range", '"other"'), ("Range", "bytes=0-9")),
    (("If-Range", "W/{etag}"), ("Range", "bytes=0-9")),
    (("If-Range", "{lm}"), ("Range", "bytes=0-9")),
    (("If-Range", "{lm_minus}"), ("Range", "bytes=0-9")),
    (("If-None-Match", '"other"'), ("Range", "bytes=0-9")),
)
DIGESTS: tuple[str, ...] = ("sha-256=1", "sha-512=3, sha-256=10", "unknown=5", "sha-256=0")

ENCODING_TARGETS = (
    "/64k.txt",
    "/300k.txt",
    "/1k.txt",
    "/style.css",
    "/app.js",
    "/1k.bin",
    "/empty.txt",
    "/noindex/",
)
RANGE_TARGETS = ("/64k.txt", "/300k.bin", "/1k.bin", "/empty.txt", "/noindex/")
CONDITIONAL_TARGETS = ("/1k.bin", "/64k.txt", "/300k.bin", "/noindex/")
DIGEST_TARGETS = ("/1k.bin", "/64k.txt", "/noindex/")


def matrix() -> list[Request]:
    """The fixed request list of one flag set, prime requests first."""
    reqs: list[Request] = []
    subjects = sorted(set(CONDITIONAL_TARGETS) | set(DIGEST_TARGETS) | set(RANGE_TARGETS))
    for path in subjects:
        reqs.append(Request(f"prime HEAD {path}", "HEAD", path, subject=path, prime=True))
        reqs.append(
            Request(
                f"prime HEAD {path} [ae=gzip]",
                "HEAD",
                path,
                (("Accept-Encoding", "gzip"),),
                subject=path,
                prime=True,
            )
        )
    for path in PATHS:
        for method in METHODS:
            reqs.append(Request(f"{method} {path}", method, path))
    reqs.append(
        Request("POST /1k.txt +body", "POST", "/1k.txt", (("Content-Length", "5"),), b"hello")
    )
    reqs.append(
        Request("GET /1k.txt +body", "GET", "/1k.txt", (("Content-Length", "5"),), b"hello")
    )
    for path in ENCODING_TARGETS:
        for enc in ENCODINGS:
            for method in ("GET", "HEAD") if enc in ("gzip", "br", "*;q=0") else ("GET",):
                reqs.append(
                    Request(
                        f"{method} {path} [ae={enc}]", method, path, (("Accept-Encoding", enc),)
                    )
                )
    for path in RANGE_TARGETS:
        for rng in RANGES:
            label = rng if len(rng) < 40 else f"{rng[:20]}...({len(rng)} chars)"
            reqs.append(Request(f"GET {path} [range={label}]", "GET", path, (("Range", rng),)))
        reqs.append(
            Request(
                f"GET {path} [range=bytes=0-99 ae=gzip]",
                "GET",
                path,
                (("Range", "bytes=0-99"), ("Accept-Encoding", "gzip")),
            )
        )
        reqs.append(
            Request(f"HEAD {path} [range=bytes=0-99]", "HEAD", path, (("Range", "bytes=0-99"),))
        )
    for path in CONDITIONAL_TARGETS:
        for hs in CONDITIONALS:
            label = " ".join(f"{k.lower()}={v}" for k, v in hs)
            for method in ("GET", "HEAD") if hs[0][0] == "If-None-Match" else ("GET",):
                reqs.append(Request(f"{method} {path} [{label}]", method, path, hs, subject=path))
    for path in DIGEST_TARGETS:
        for want in DIGESTS:
            reqs.append(
                Request(
                    f"GET {path} [want-repr-digest={want}]",
                    "GET",
                    path,
                    (("Want-Repr-Digest", want),),
                )
            )
        reqs.append(
            Request(
                f"GET {path} [want-repr-digest=sha-256=1 range=bytes=0-9]",
                "GET",
                path,
                (("Want-Repr-Digest", "sha-256=1"), ("Range", "bytes=0-9")),
            )
        )
    for accept in ("application/json", "text/html", "application/json;q=0.5, text/html"):
        reqs.append(
            Request(f"GET /noindex/ [accept={accept}]", "GET", "/noindex/", (("Accept", accept),))
        )
    reqs += [
        Request("GET /1k.txt [connection=close]", "GET", "/1k.txt", (("Connection", "close"),)),
        Request(
            "GET /1k.txt [expect=100-continue]", "GET", "/1k.txt", (("Expect", "100-continue"),)
        ),
        Request("GET /1k.txt HTTP/1.0", raw=b"GET /1k.txt HTTP/1.0\r\n\r\n"),
        Request("GET /1k.txt no Host", raw=b"GET /1k.txt HTTP/1.1\r\n\r\n"),
        Request("GET /1k.txt two Hosts", raw=b"GET /1k.txt HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
    ]
    return reqs


# The fuzz grammar: each part of a request is clean, or hostile with a small
# probability, so most requests get past the first check and reach ranges,
# conditionals and keep-alive with one hostile part; then byte mutations.
_F_METHODS = (b"POST", b"OPTIONS", b"PUT", b"get", b"G\x00T", b"", b"X" * 300)
_F_TARGETS = (
    b"/",
    b"/1k.txt",
    b"/64k.txt",
    b"/300k.bin",
    b"/docs",
    b"/noindex/",
    b"/caf%C3%A9.txt",
    b"/caf\xc3\xa9.txt",
    b"/../outside/secret.txt",
    b"/%2e%2e%2foutside%2fsecret.txt",
    b"/link-out.txt",
    b"/%",
    b"/%zz",
    b"/a b",
    b"/\xff",
    b"http://golden/1k.txt",
    b"*",
    b"/" + b"a" * 9000,
)
_F_VERSIONS = (b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.10", b"http/1.1", b"")
_F_HOSTS = (b"Host: ", b"Host: a b", b"Host: golden\r\nHost: other", b"host:golden", b"")
_F_HEADERS = (
    b"Range: bytes=0-4",
    b"Range: bytes=-5",
    b"Range: bytes=0-0,2-2",
    b"Range: bytes=5-1",
    b"If-None-Match: *",
    b'If-Match: "nope"',
    b"If-Modified-Since: garbage",
    b"If-Unmodified-Since: Sat, 01 Jan 2000 00:00:00 GMT",
    b"Accept-Encoding: gzip, br",
    b"Content-Length: 0",
    b"Content-Length: -1",
    b"Content-Length: 1, 2",
    b"Transfer-Encoding: gzip",
    b"Connection: close",
    b"Connection: keep-alive",
    b"X-Folded: a\r\n b",
    b" X-Leading-Space: x",
    b"X-Nul: a\x00b",
    b"X-Bad Name: x",
    b":no-name",
    b"X-Long: " + b"v" * 9000,
    b"X-Huge: " + b"v" * 20000,
)
_F_BYTES = b"\x00\r\n \t:%/\\.\x7f\xff\x80,;\"'?#"


def _pick(rng: random.Random, hostile: Sequence[bytes], clean: bytes, p: float) -> bytes:
    return rng.choice(hostile) if rng.random() < p else clean


def fuzz_case(seed: int, index: int) -> bytes:
    """Case ``index`` of corpus ``seed``: one to three pipelined heads, maybe mutated."""
    rng = random.Random(seed * 1_000_003 + index)
    parts = []
    for _ in range(rng.choice((1, 1, 2, 3))):
        method = _pick(rng, _F_METHODS, rng.choice((b"GET", b"GET", b"HEAD")), 0.15)
        target = _pick(rng, _F_TARGETS, rng.choice(_F_TARGETS[:6]), 0.3)
        version = _pick(rng, _F_VERSIONS, b"HTTP/1.1", 0.1)
        line = b" ".join((method, target, version))
        host = _pick(rng, _F_HOSTS, b"Host: golden", 0.1)
        hs = [rng.choice(_F_HEADERS) for _ in range(rng.choice((0, 0, 1, 2)))]
        parts.append(b"\r\n".join(h for h in (line, host, *hs) if h) + b"\r\n\r\n")
    buf = bytearray(b"".join(parts))
    if rng.random() < 0.3:
        i = rng.randrange(len(buf))
        op = rng.randrange(4)
        if op == 0:
            buf[i] = rng.randrange(256)
        elif op == 1:
            buf.insert(i, rng.choice(_F_BYTES))
        elif op == 2:
            del buf[i : i + rng.randrange(1, 8)]
        else:
            k = buf.find(b"\r\n", i)
            if k != -1:
                buf[k : k + 2] = rng.choice((b"\n", b"\r", b"\n\r"))
    return bytes(buf)


def fuzz_corpus(seed: int, count: int) -> list[Request]:
    return [Request(f"fuzz {seed}/{i:03d}", raw=fuzz_case(seed, i)) for i in range(count)]


# ------------------------------------------------------------------ the wire


@dataclass
class Response:
    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes
    framed: bool  # the body length matched Content-Length (or there was none)


@dataclass
class Exchange:
    responses: list[Response] = field(default_factory=list)
    end: str = "closed"  # closed | open | timeout
    trailing: bytes = b""


_STATUS_LINE = re.compile(rb"HTTP/1\.[01] \d{3}[ \r]")


def _parse_head(head: bytes) -> tuple[int, str, list[tuple[str, str]]]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    headers = []
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers.append((name.strip().lower(), value.strip()))
    return status, parts[2] if len(parts) > 2 else "", headers


def parse_responses(data: bytes, methods: Sequence[str] = ()) -> tuple[list[Response], bytes]:
    """Split a byte stream into responses; ``methods[i]`` is the method of response i if known.

    A response to an unknown method has no body when the next bytes are a
    status line (HEAD); the tree holds no file starting with one.
    """
    out: list[Response] = []
    pos = 0
    while pos < len(data):
        end = data.find(b"\r\n\r\n", pos)
        if end == -1:
            break
        status, reason, headers = _parse_head(data[pos:end])
        pos = end + 4
        hmap = dict(headers)
        method = methods[len(out)] if len(out) < len(methods) else ""
        if status == 0:
            break
        if method == "HEAD" or status < 200 or status in (204, 304):
            length = 0
        elif "content-length" in hmap and hmap["content-length"].isdigit():
            length = int(hmap["content-length"])
            if not method and _STATUS_LINE.match(data, pos):
                length = 0
        else:
            length = len(data) - pos
        body = data[pos : pos + length]
        pos += len(body)
        out.append(Response(status, reason, headers, body, len(body) == length))
    return out, data[pos:]


def _recv_until(
    sock: socket.socket, buf: bytearray, done: Callable[[], bool], deadline: float
) -> str:
    while not done():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return "timeout"
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            return "timeout"
        except ConnectionError:
            return "closed"
        if not chunk:
            return "closed"
        buf += chunk
    return "open"


def _first_complete(buf: bytearray, method: str) -> bool:
    """The first response is complete (a body without Content-Length only ends at EOF)."""
    resps, _ = parse_responses(bytes(buf), (method,))
    if not resps or not resps[0].framed:
        return False
    r = resps[0]
    bodiless = method == "HEAD" or r.status < 200 or r.status in (204, 304)
    return bodiless or "content-length" in dict(r.headers)


def exchange(port: int, req: Request, data: bytes) -> Exchange:
    """Send one request on a fresh connection; then, if it stays open, the sentinel.

    The sentinel (``GET /__end__.txt`` with ``Connection: close``) is sent
    only after the first response is complete, so the server never closes
    with unread input (which would reset the connection); its answer shows
    that the connection was left in a clean state.  Fuzz cases are sent
    with the sentinel pipelined behind them and read until the server closes.
    """
    sentinel = f"GET {SENTINEL_PATH} HTTP/1.1\r\nHost: {HOST_HEADER}\r\nConnection: close\r\n\r\n"
    deadline = time.monotonic() + 2 * READ_TIMEOUT_S
    buf = bytearray()
    with socket.create_connection((HOST, port), timeout=READ_TIMEOUT_S) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if req.raw is not None:
            sock.sendall(data + sentinel.encode())
            end = _recv_until(sock, buf, lambda: False, deadline)
            resps, trailing = parse_responses(bytes(buf))
            return Exchange(resps, end, trailing)
        sock.sendall(data)
        method = req.method
        end = _recv_until(sock, buf, lambda: _first_complete(buf, method), deadline)
        first, _ = parse_responses(bytes(buf), (method,))
        if end == "open" and first:
            if dict(first[0].headers).get("connection", "").lower() == "close":
                end = _recv_until(sock, buf, lambda: False, deadline)
            else:
                try:
                    sock.sendall(sentinel.encode())
                except OSError:
                    end = "closed"
                else:
                    end = _recv_until(sock, buf, lambda: False, deadline)
        resps, trailing = parse_responses(bytes(buf), (method, "GET"))
        return Exchange(resps, end, trailing)


# ------------------------------------------------------------------ masking

_ETAG_IDS = re.compile(r'^(W/)?"([0-9a-f]+)-([0-9a-f]+)-')
_BOUNDARY = re.compile(r"boundary=([^\s;]+)")


@dataclass(frozen=True)
class Masker:
    dev: int
    inodes: dict[int, str]

    def etag(self, value: str) -> str:
        m = _ETAG_IDS.match(value)
        if not m or int(m[2], 16) != self.dev or int(m[3], 16) not in self.inodes:
            return value
        name = self.inodes[int(m[3], 16)]
        return f'{m[1] or ""}"<dev>-<ino:{name}>-' + value[m.end() :]

    def response(self, r: Response) -> dict[str, Any]:
        headers = []
        body = r.body
        boundary = ""
        for name, value in r.headers:
            if name == "content-type" and value.startswith("multipart/byteranges"):
                if m := _BOUNDARY.search(value):
                    boundary = m[1].strip('"')
        if boundary:
            body = body.replace(boundary.encode("latin-1"), b"<boundary>")
        for name, value in r.headers:
            if name == "date":
                value = "<date>"
            elif name == "etag":
                value = self.etag(value)
            elif boundary and name == "content-type":
                value = value.replace(boundary, "<boundary>")
            elif boundary and name == "content-length" and r.framed:
                value = f"masked:{len(body)}"
            headers.append([name, value])
        headers.sort()
        return {
            "status": r.status,
            "reason": r.reason,
            "headers": headers,
            "body_len": len(body),
            "body_sha256": hashlib.sha256(body).hexdigest(),
            "framed": r.framed,
        }


def _http_date(value: str, shift_s: int) -> str:
    try:
        when = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return "Sat, 01 Jan 2000 00:00:00 GMT"
    return email.utils.formatdate(when + shift_s, usegmt=True)


def validators_from(resps: list[Response], gz: bool, into: dict[str, str]) -> None:
    if not resps:
        return
    h = dict(resps[0].headers)
    if gz:
        into["etag_gz"] = h.get("etag", '"missing"')
        return
    into["etag"] = h.get("etag", '"missing"')
    lm = h.get("last-modified", "Sat, 01 Jan 2000 00:00:00 GMT")
    into["lm"] = lm
    into["lm_minus"] = _http_date(lm, -86400)
    into["lm_plus"] = _http_date(lm, 86400)


# ------------------------------------------------------------------ recording


@dataclass(frozen=True)
class Target:
    """Which serverio to run: the argv prefix up to (not including) its arguments."""

    prefix: tuple[str, ...]
    cwd: Path
    env: dict[str, str]
    label: str


def target_from_args(
    python: str | None, cwd: Path | None, cmd: str | None, commit: str | None
) -> Target:
    if commit:
        tree = commits.checkout(commit)
        launch = commits.serverio_launch(python or sys.executable, tree)
        label = f"serverio@{commits.short(commits.resolve(commit))}"
    elif cwd is not None:
        launch = commits.serverio_launch(python or sys.executable, cwd.resolve())
        label = f"serverio in {cwd}"
    else:
        launch = commits.serverio_launch(python or sys.executable, None)
        label = "serverio (this checkout)"
    prefix = tuple(shlex.split(cmd)) if cmd else tuple(launch.argv())
    return Target(prefix, launch.cwd, {**launch.env, "PYTHONHASHSEED": "0"}, label)


@contextmanager
def _server(target: Target, root: Path, flags: tuple[str, ...], workdir: Path) -> Iterator[int]:
    argv = [*target.prefix, "0", "-b", HOST, "-d", str(root), *COMMON_ARGS, *flags]
    spec = ServerSpec(name="golden", kind="serverio")
    plan = LaunchPlan(argv=argv, cwd=target.cwd, env=target.env)
    with running(spec, plan, workdir / "server.log", cpu=None) as rs:
        yield rs.port


@dataclass(frozen=True)
class Selection:
    flag_sets: tuple[str, ...] = tuple(FLAG_SETS)
    every: int = 1  # keep every n-th non-prime matrix request
    fuzz_seed: int = 1
    fuzz_cases: int = 80
    keep: frozenset[str] = frozenset()  # ids kept whatever ``every`` says


# A reduced list for the reproducibility test: it keeps one request of each
# masked kind (multipart boundary, validators from the prime responses).
SMOKE = Selection(
    flag_sets=SMOKE_FLAG_SETS,
    every=12,
    fuzz_cases=8,
    keep=frozenset(
        {
            "GET /64k.txt [range=bytes=0-0,10-19,-5]",
            "GET /300k.bin [range=bytes=0-99, 200-299]",
            "GET /64k.txt [if-range={etag} range=bytes=0-9]",
        }
    ),
)


def record(target: Target, selection: Selection, progress: bool = False) -> list[dict[str, Any]]:
    """The transcript as a list of JSON-ready lines (first: metadata)."""
    lines: list[dict[str, Any]] = [
        {"kind": "meta", "schema": SCHEMA, "flag_sets": list(selection.flag_sets)}
    ]
    reqs = matrix()
    kept = [
        r
        for i, r in enumerate(reqs)
        if r.prime or i % selection.every == 0 or r.id in selection.keep
    ]
    fuzz = fuzz_corpus(selection.fuzz_seed, selection.fuzz_cases)
    with tempfile.TemporaryDirectory(prefix="serverio-golden-") as tmp:
        base = Path(tmp)
        root = build_tree(base)
        masker = Masker(root.stat().st_dev, inode_names(root))
        for name in selection.flag_sets:
            if progress:
                print(f"golden: {name}", file=sys.stderr, flush=True)
            workdir = base / f"server-{name}"
            workdir.mkdir()
            try:
                server = _server(target, root, FLAG_SETS[name], workdir)
                port = server.__enter__()
            except ServerStartError as exc:
                # The server's last log line says why (e.g. a flag this commit lacks).
                last = str(exc).strip().splitlines()[-1:] or ["no output"]
                raise GoldenError(
                    f"{target.label} did not start with flag set {name!r}: {last[0][:200]}"
                ) from exc
            try:
                validators: dict[str, dict[str, str]] = {}
                todo = kept + (fuzz if name == "default" else [])
                for req in todo:
                    vals = validators.setdefault(req.subject, {})
                    ex = exchange(port, req, req.render(vals))
                    if req.prime:
                        validators_from(ex.responses, "Accept-Encoding" in dict(req.headers), vals)
                    lines.append(
                        {
                            "flags": name,
                            "id": req.id,
                            "request": req.describe(),
                            "responses": [masker.response(r) for r in ex.responses],
                            "end": ex.end,
                            "trailing_len": len(ex.trailing),
                            "trailing_sha256": hashlib.sha256(ex.trailing).hexdigest(),
                        }
                    )
            finally:
                server.__exit__(None, None, None)
    return lines


def write(path: Path, lines: list[dict[str, Any]]) -> None:
    text = "".join(json.dumps(line, sort_keys=True, ensure_ascii=True) + "\n" for line in lines)
    path.write_text(text)


# ------------------------------------------------------------------ diff


def load(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        if rec.get("kind") == "meta":
            continue
        out[(rec["flags"], rec["id"])] = rec
    return out


def _diff_response(i: int, a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    out = []
    for key in ("status", "reason", "body_len", "body_sha256", "framed"):
        if a.get(key) != b.get(key):
            out.append(f"response[{i}].{key}: {a.get(key)!r} -> {b.get(key)!r}")
    ha = {k: [v for kk, v in a["headers"] if kk == k] for k, _ in a["headers"]}
    hb = {k: [v for kk, v in b["headers"] if kk == k] for k, _ in b["headers"]}
    for k in sorted(set(ha) | set(hb)):
        if ha.get(k) != hb.get(k):
            out.append(f"response[{i}].header {k}: {ha.get(k)} -> {hb.get(k)}")
    return out


def diff_records(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Field-level differences between two lines for the same request."""
    out = []
    for key in ("request", "end", "trailing_len", "trailing_sha256"):
        if a.get(key) != b.get(key):
            out.append(f"{key}: {a.get(key)!r} -> {b.get(key)!r}")
    ra, rb = a["responses"], b["responses"]
    if len(ra) != len(rb):
        out.append(f"responses: {len(ra)} -> {len(rb)}")
    for i, (x, y) in enumerate(zip(ra, rb, strict=False)):
        out += _diff_response(i, x, y)
    return out


def diff(a_path: Path, b_path: Path, out: Callable[[str], None] = print) -> int:
    a, b = load(a_path), load(b_path)
    differing = 0
    for key in [*a, *(k for k in b if k not in a)]:
        flags, rid = key
        if key not in b:
            out(f"[{flags}] {rid}: only in {a_path.name}")
        elif key not in a:
            out(f"[{flags}] {rid}: only in {b_path.name}")
        else:
            changes = diff_records(a[key], b[key])
            if not changes:
                continue
            out(f"[{flags}] {rid}:")
            for change in changes:
                out(f"    {change}")
        differing += 1
    out(f"{differing} of {len(set(a) | set(b))} requests differ")
    return 1 if differing else 0


# ------------------------------------------------------------------ CLI


def add_parser(sub: Any) -> None:
    """Register ``golden record`` and ``golden diff`` under ``python -m bench``."""
    golden = sub.add_parser("golden", help="record or diff a golden transcript of serverio")
    gsub = golden.add_subparsers(dest="golden_command", required=True)
    rec = gsub.add_parser("record", help="record the transcript of one serverio")
    rec.add_argument("out", type=Path)
    which = rec.add_mutually_exclusive_group()
    which.add_argument(
        "--serverio-cwd",
        type=Path,
        help="run `python -m serverio` from DIR with PYTHONPATH=DIR (e.g. an old commit's tree)",
    )
    which.add_argument(
        "--serverio-commit",
        metavar="REV",
        help="export REV to the bench cache (see bench/commits.py) and run its serverio",
    )
    rec.add_argument(
        "--serverio-python", help="interpreter for `python -m serverio` (default: this one)"
    )
    rec.add_argument(
        "--serverio-cmd",
        help="command to run instead of `PYTHON -m serverio` (shell words; args are appended)",
    )
    rec.add_argument("--flag-sets", help=f"comma list; default all of: {', '.join(FLAG_SETS)}")
    rec.add_argument("--fuzz-seed", type=int, default=1)
    rec.add_argument("--fuzz-cases", type=int, default=80)
    rec.add_argument(
        "--smoke", action="store_true", help="2 flag sets, every 12th request, 8 fuzz cases"
    )
    dif = gsub.add_parser("diff", help="compare two transcripts; exit 1 if any request differs")
    dif.add_argument("a", type=Path)
    dif.add_argument("b", type=Path)


def run(args: argparse.Namespace) -> int:
    if args.golden_command == "diff":
        for p in (args.a, args.b):
            if not p.is_file():
                print(f"golden: no such transcript: {p}", file=sys.stderr)
                return 2
        return diff(args.a, args.b)
    selection = (
        SMOKE if args.smoke else Selection(fuzz_seed=args.fuzz_seed, fuzz_cases=args.fuzz_cases)
    )
    if args.flag_sets:
        names = tuple(n.strip() for n in args.flag_sets.split(",") if n.strip())
        unknown = [n for n in names if n not in FLAG_SETS]
        if unknown:
            print(f"golden: unknown flag set: {', '.join(unknown)}", file=sys.stderr)
            return 2
        selection = dataclasses.replace(selection, flag_sets=names)
    try:
        target = target_from_args(
            args.serverio_python, args.serverio_cwd, args.serverio_cmd, args.serverio_commit
        )
    except commits.CommitError as exc:
        print(f"golden: {exc}", file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        lines = record(target, selection, progress=True)
    except GoldenError as exc:
        print(f"golden: {exc}", file=sys.stderr)
        return 2
    write(args.out, lines)
    print(
        f"golden: {len(lines) - 1} requests from {target.label} -> {args.out} "
        f"({time.monotonic() - started:.1f} s)",
        file=sys.stderr,
    )
    return 0
