"""Differential testing of the request-head fast path against h11.

:func:`check` feeds one byte string to :func:`serverio.wire.fasthead.parse_head`
and to a fresh ``h11.Connection``; the fast path must either defer (None)
or give exactly h11's result: method, target, version, the (name, value)
list as h11 normalises it, h11's keep-alive decision, no body (h11's next
event is ``EndOfMessage`` and the client's state is DONE, so no
100-continue wait and no protocol switch), and the same bytes left over.
An input the fast path accepts and h11 rejects is a failure.

:func:`check_split` does the same through :class:`~serverio.wire.fasthead.HeadParser`
with the bytes arriving in several pieces, against an h11 parser fed the
same pieces, comparing every step (NEED_DATA, error, head, leftover bytes).

:func:`near_valid` generates heads near the subset's border (whitespace,
case, control bytes, obs-fold, duplicate and framing fields, long lines,
other versions and methods, pipelined tails), mutated byte-wise; the raw-
request fuzzer's cases (:func:`testkit.fuzzing.make_case`) are a second
source.  :func:`run` counts outcomes over many cases (bench/stress.py's
``fasthead`` mode runs a million).
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import h11

from serverio.wire.fasthead import FastRequest, HeadParser, parse_head

HEAD_LIMITS = (64, 256, 1024, 8192, 16384)


class Mismatch(AssertionError):
    """The fast path's answer differs from h11's (the message says how)."""


@dataclass(frozen=True, slots=True)
class Reference:
    """What h11 made of the bytes."""

    kind: str  # "request", "need" (NEED_DATA), "error", "other"
    request: h11.Request | None = None
    keep_alive: bool = False
    next_event: object = None
    client_state: object = None
    waiting_100: bool = False
    trailing: bytes = b""
    error: str = ""


def reference(data: bytes, max_head: int) -> Reference:
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=max_head)
    conn.receive_data(data)
    try:
        event = conn.next_event()
    except h11.RemoteProtocolError as exc:
        return Reference("error", error=f"{exc.error_status_hint} {exc}")
    if event is h11.NEED_DATA:
        return Reference("need")
    if type(event) is not h11.Request:
        return Reference("other")
    # h11's own keep-alive decision lives in its connection state (RFC 9112 §9.3).
    keep_alive = bool(conn._cstate.keep_alive)
    waiting = conn.they_are_waiting_for_100_continue
    trailing = conn.trailing_data[0]
    try:
        nxt: object = conn.next_event()
    except h11.RemoteProtocolError as exc:
        nxt = f"error {exc}"
    return Reference("request", event, keep_alive, nxt, conn.their_state, waiting, trailing)


def check(data: bytes, max_head: int) -> str:
    """Return "defer" or "accept"; raise :class:`Mismatch` when the fast path
    accepted something h11 does not read exactly the same way."""
    fast = parse_head(data, max_head)
    if fast is None:
        return "defer"
    ref = reference(data, max_head)
    _compare(data, fast, ref, bytes(data[fast.size :]))
    return "accept"


def _compare(data: bytes, fast: FastRequest, ref: Reference, fast_trailing: bytes) -> None:
    def fail(why: str) -> None:
        raise Mismatch(f"{why}: {data[:300]!r} (fast: {repr(fast)[:300]})")

    if ref.kind != "request" or ref.request is None:
        fail(f"accepted by the fast path, h11 says {ref.kind} {ref.error}")
        return
    req = ref.request
    if (fast.method, fast.target, fast.http_version) != (
        req.method,
        req.target,
        req.http_version,
    ):
        fail(f"request line differs from h11's {req!r}")
    if fast.headers != list(req.headers):
        fail(f"fields differ from h11's {list(req.headers)!r}")
    if not all(type(n) is bytes and type(v) is bytes for n, v in fast.headers):
        fail("field names and values must be bytes")
    if fast.keep_alive != ref.keep_alive:
        fail(f"keep-alive differs from h11's {ref.keep_alive}")
    # No body: the next event is the end of the message; the client is then
    # DONE (keep-alive) or MUST_CLOSE, never switching protocols.
    end_state = h11.DONE if ref.keep_alive else h11.MUST_CLOSE
    if type(ref.next_event) is not h11.EndOfMessage or ref.client_state is not end_state:
        fail(f"h11 frames a body or a switch: {ref.next_event!r} {ref.client_state!r}")
    if ref.waiting_100:
        fail("h11 waits for 100-continue")
    if fast_trailing != ref.trailing:
        fail(f"leftover differs: {fast_trailing[:80]!r} vs h11's {ref.trailing[:80]!r}")


def _step(parser: Any) -> tuple[str, object]:
    try:
        event = parser.next_event()
    except h11.RemoteProtocolError as exc:
        return "error", f"{exc.error_status_hint} {exc}"
    if event is h11.NEED_DATA:
        return "need", None
    if type(event) is FastRequest or type(event) is h11.Request:
        return "request", event
    return "other", repr(event)


def check_split(chunks: Sequence[bytes], max_head: int) -> str:
    """Feed the pieces to a HeadParser and to h11, a step per piece.

    Returns "fast" when the head came from the fast path, "h11" otherwise.
    """
    ours = HeadParser(max_head)
    ref = h11.Connection(h11.SERVER, max_incomplete_event_size=max_head)
    data = b""
    for chunk in chunks:
        data += chunk
        ours.receive_data(chunk)
        ref.receive_data(chunk)
        a, b = _step(ours), _step(ref)
        if a[0] != b[0]:
            raise Mismatch(f"step differs: {a!r} vs h11's {b!r} after {data[:300]!r}")
        if a[0] == "error" and a[1] != b[1]:
            raise Mismatch(f"error differs: {a[1]!r} vs h11's {b[1]!r}")
        if a[0] == "request":
            event = a[1]
            if type(event) is FastRequest:
                _compare(data, event, reference(data, max_head), ours.trailing_data[0])
                if ours.trailing_data[0] != ref.trailing_data[0]:
                    raise Mismatch("leftover differs")
                return "fast"
            if ours.trailing_data != ref.trailing_data:
                raise Mismatch("leftover differs after h11 parsed the head")
            return "h11"
        if a[0] != "need":
            return "h11"
    return "fast" if ours.fast else "h11"


# ------------------------------------------------------------ generators

_METHODS = [b"GET"] * 6 + [b"HEAD"] * 2 + [b"get", b"POST", b"OPTIONS", b"GET\x00", b"G ET", b""]
_SP = [b" "] * 12 + [b"  ", b"\t", b"", b" \t"]
_TARGETS = [
    b"/",
    b"/index.html",
    b"/a/b/c.txt?x=1&y=%20",
    b"/%2e%2e/etc",
    b"/caf\xc3\xa9",
    b"/a\x00b",
    b"/a\x7fb",
    b"*",
    b"http://h/x",
    b"h:80",
    b"//x",
    b"/#frag",
    b"/" + b"a" * 300,
    b"",
]
_VERSIONS = (
    [b"HTTP/1.1"] * 8
    + [b"HTTP/1.0"] * 3
    + [
        b"HTTP/1.2",
        b"HTTP/2.0",
        b"HTTP/0.9",
        b"http/1.1",
        b"HTTP/1.1 ",
        b"HTTP/11",
        b"HTTP/1.1\x00",
        b"",
    ]
)
_NAMES = [
    b"Host",
    b"host",
    b"HOST",
    b"User-Agent",
    b"Accept",
    b"Accept-Encoding",
    b"Connection",
    b"connection",
    b"If-None-Match",
    b"Range",
    b"X-Request-Id",
    b"Content-Length",
    b"content-length",
    b"Transfer-Encoding",
    b"Upgrade",
    b"Expect",
    b"HTTP2-Settings",
    b"X_Under",
    b"Bad Name",
    b"Na\x00me",
    b"",
    b"~!#$%&'*+.^_`|",
]
_VALUES = [
    b"t",
    b"127.0.0.1:8000",
    b"wrk",
    b"close",
    b"keep-alive",
    b"Keep-Alive, Close",
    b"upgrade",
    b"0",
    b"5",
    b"chunked",
    b"100-continue",
    b"h2c",
    b"bytes=0-4",
    b'"etag"',
    b"gzip, br;q=1",
    b"a  b\tc",
    b" padded\t",
    b"",
    b"\x01ctl",
    b"obs\x80text",
    b"nul\x00",
    b"cr\rinside",
    b"v" * 2000,
]
_EOL = [b"\r\n"] * 14 + [b"\n", b"\r", b"\r\r\n", b"\n\r"]
_SEP = [b": "] * 8 + [b":", b":\t", b" :", b":  ", b"::"]
_INTERESTING = b"\x00\r\n \t:%/\\.\x7f\xff\x80,;\"'?#Hh"


def near_valid(rng: random.Random) -> tuple[bytes, int]:
    """A request head near the fast path's border and a head limit."""

    def pick(options: list[bytes], p: float) -> bytes:
        return rng.choice(options) if rng.random() < p else options[0]

    eol = pick(_EOL, 0.08)
    target = pick(_TARGETS[:3], 0.3) if rng.random() < 0.7 else rng.choice(_TARGETS)
    line = pick(_METHODS, 0.15) + pick(_SP, 0.05) + target + pick(_SP, 0.05) + pick(_VERSIONS, 0.15)
    lines = [line]
    fields: list[bytes] = []
    if rng.random() < 0.9:
        fields.append(pick([b"Host", *_NAMES], 0.1) + pick(_SEP, 0.1) + pick(_VALUES[:2], 0.2))
    for _ in range(rng.choice((0, 1, 1, 2, 3, 5, 8))):
        name = rng.choice(_NAMES[:11] if rng.random() < 0.7 else _NAMES)
        value = rng.choice(_VALUES[:16] if rng.random() < 0.7 else _VALUES)
        fields.append(name + pick(_SEP, 0.1) + value)
    if rng.random() < 0.05:
        fields.extend(b"X-Many-%d: v" % i for i in range(rng.choice((30, 32, 33, 40))))
    if fields and rng.random() < 0.08:
        fields.insert(rng.randrange(1, len(fields) + 1), rng.choice((b" folded", b"\tfold")))
    if fields and rng.random() < 0.1:
        fields.append(rng.choice(fields))  # a duplicate field
    lines.extend(fields)
    data = eol.join(lines) + eol + pick(_EOL, 0.05)
    if rng.random() < 0.2:
        buf = bytearray(data)
        for _ in range(rng.choice((1, 1, 2, 3))):
            i = rng.randrange(len(buf) + 1)
            op = rng.randrange(4)
            if op == 0 and i < len(buf):
                buf[i] = rng.choice(_INTERESTING)
            elif op == 1:
                buf.insert(i, rng.choice(_INTERESTING))
            elif op == 2:
                del buf[i : i + rng.randrange(1, 4)]
            else:
                buf[i:i] = bytes([rng.randrange(256)])
        data = bytes(buf)
    tail = rng.random()
    if tail < 0.15:
        data += b"GET /next HTTP/1.1\r\nHost: t\r\n\r\n"
    elif tail < 0.25:
        data += b"GET /par"
    elif tail < 0.3:
        data += b"\r\n"
    elif tail < 0.35:
        data = data[: rng.randrange(len(data) + 1)]  # not complete yet
    return data, rng.choice(HEAD_LIMITS)


def split(rng: random.Random, data: bytes) -> list[bytes]:
    if len(data) < 2 or rng.random() < 0.3:
        return [data]
    cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randrange(1, 5))))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


def fuzzer_inputs(seed: int, start: int, count: int) -> Iterable[bytes]:
    """The raw-request fuzzer's case bytes (testkit/fuzzing.py)."""
    from testkit.fuzzing import make_case

    for i in range(start, start + count):
        yield make_case(seed, i).data


@dataclass(slots=True)
class Counts:
    cases: int = 0
    accepted: int = 0
    deferred: int = 0
    split_cases: int = 0
    split_fast: int = 0
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "cases": self.cases,
            "accepted": self.accepted,
            "deferred": self.deferred,
            "split_cases": self.split_cases,
            "split_fast": self.split_fast,
            "failures": self.failures[:20],
            "seconds": round(self.seconds, 1),
            "ok": not self.failures,
        }


def run(seed: int, start: int, count: int) -> Counts:
    """``count`` cases of run ``seed`` from index ``start``: two in three
    near-valid heads, one in three the raw-request fuzzer's inputs; every
    fourth case is also fed in pieces through a HeadParser."""
    out = Counts()
    t0 = time.perf_counter()
    fuzz = iter(fuzzer_inputs(seed, start, count // 3 + 1))
    for i in range(start, start + count):
        rng = random.Random(seed * 1_000_003 + i)
        if i % 3 == 2:
            data, limit = next(fuzz), rng.choice(HEAD_LIMITS)
        else:
            data, limit = near_valid(rng)
        try:
            if check(data, limit) == "accept":
                out.accepted += 1
            else:
                out.deferred += 1
            if i % 4 == 0:
                out.split_cases += 1
                if check_split(split(rng, data), limit) == "fast":
                    out.split_fast += 1
        except Mismatch as exc:
            out.failures.append(f"seed {seed} case {i}: {exc}")
        out.cases += 1
    out.seconds = time.perf_counter() - t0
    return out
