"""Micro-benchmarks of the pure core and the response-head writer.

``python -m bench.micro`` prints microseconds per operation for:

* h11-cycle-send: parse a request with h11 and send a 6-header response,
  1 KiB body and EndOfMessage through ``h11.Connection.send``;
* h11-cycle-parse: parse the same request with a fresh h11 parser only;
* wire-head: serialise the same head with ``serverio.wire.h1.head_bytes``;
* decide-file: ``serverio.http.core.decide_file`` for a plain 200;
* parse-target: ``serverio.http.target.parse_target`` for a short path.

It times the pure pieces separately from the whole-server load test
(``python -m bench run``).
"""

from __future__ import annotations

import timeit

import h11

from serverio import Config, FileFacts, RequestFacts, decide_file, parse_target
from serverio.wire.h1 import head_bytes

REQ = b"GET /1k.bin HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nUser-Agent: wrk\r\nAccept: */*\r\n\r\n"
HEADERS = [
    (b"date", b"Sun, 29 Nov 2026 09:00:00 GMT"),
    (b"last-modified", b"Sun, 29 Nov 2026 09:00:00 GMT"),
    (b"etag", b'"fe00-20c0cb-400-18ec7a41f468e187"'),
    (b"accept-ranges", b"bytes"),
    (b"content-type", b"application/octet-stream"),
    (b"content-length", b"1024"),
]
BODY = b"x" * 1024


def h11_cycle_send() -> None:
    c = h11.Connection(h11.SERVER)
    c.receive_data(REQ)
    c.next_event()
    c.next_event()
    c.send(h11.Response(status_code=200, headers=HEADERS))
    c.send(h11.Data(data=BODY))
    c.send(h11.EndOfMessage())


def h11_cycle_parse() -> None:
    c = h11.Connection(h11.SERVER)
    c.receive_data(REQ)
    c.next_event()
    c.next_event()


def wire_head() -> None:
    head_bytes(200, HEADERS, close=False, keep_alive_10=False)


CFG = Config()
FACTS = FileFacts(size=1024, mtime_ns=1_700_000_000_000_000_000, dev=1, ino=2, content_type="a/b")
REQF = RequestFacts(method=b"GET", target=parse_target(b"GET", b"/1k.bin"))


def decide() -> None:
    decide_file(REQF, FACTS, CFG, 1_800_000_000.0)


def target() -> None:
    parse_target(b"GET", b"/static/css/site.css?v=3")


def main() -> None:
    n = 20000
    for name, fn in (
        ("h11-cycle-send", h11_cycle_send),
        ("h11-cycle-parse", h11_cycle_parse),
        ("wire-head", wire_head),
        ("decide-file", decide),
        ("parse-target", target),
    ):
        best = min(timeit.repeat(fn, number=n, repeat=3)) / n * 1e6
        print(f"{name:16} {best:8.2f} us")


if __name__ == "__main__":
    main()
