"""The least a trio reverse proxy on h11 does per request: a second floor.

``python bench/baselines/h11_proxy_floor.py HOST:PORT [PORT]`` listens on
127.0.0.1 and, for each client connection, opens one keep-alive
connection to the upstream ``HOST:PORT``.  For each request it does what
issue 30 asks of any proxy and nothing else, each step the cheapest way:

* the client's head parsed by one strict regex (request line, fields;
  requests with content, or anything the regex does not take, get a 400
  and the connection closes);
* the upstream request's fields: the hop-by-hop ones removed (Connection
  and what it names, Keep-Alive, TE, Trailer, Transfer-Encoding, Upgrade,
  Proxy-*), ``Forwarded``, ``X-Forwarded-For/-Proto/-Host`` and ``Via``
  added; the request re-serialised by h11 (``h11.Request`` with
  ``_parsed=True``, as serverio does for fields it parsed under h11's
  grammar, then ``Connection.send``; a fresh ``h11.Connection`` per
  exchange, as serverio's fast reader needs);
* the response head within a deadline (one cancel scope), parsed by one
  strict regex (a Content-Length body only: anything else closes);
  its hop-by-hop fields removed, ``Via`` added, the head re-serialised
  and sent with the body in one write.

No pool, no admission, no site rules, no stats, no access log, no
watching of the client, no chunked bodies, no HTTP/2: not a proxy to
use, a measurement of the mandatory work on this stack (the
``h11-proxy-floor`` entry of the ``proxy-1k-c64`` workload;
docs/performance.md "Reverse proxy").  ``relay_floor.py`` is the floor
without any HTTP.
"""

from __future__ import annotations

import functools
import re
import sys

import h11
import trio

_TOKEN = rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]+"
_FIELD = rb"(" + _TOKEN + rb"):[ \t]*+((?:[!-~]++(?:[ \t]++[!-~]++)*+)?)[ \t]*+\r\n"
_FIELD_RE = re.compile(_FIELD)
_REQUEST_RE = re.compile(rb"(GET|HEAD) ([!-~]+) HTTP/1\.1\r\n((?:" + _FIELD + rb")*)\r\n")
_RESPONSE_RE = re.compile(
    rb"HTTP/1\.1 ([2-5][0-9][0-9])(?: [ !-~]*+)?\r\n((?:" + _FIELD + rb")*)\r\n"
)
_HOP = frozenset(
    {b"connection", b"keep-alive", b"te", b"trailer", b"transfer-encoding", b"upgrade"}
)
_VIA = b"1.1 floor"
_HEAD_TIMEOUT = 60.0


def _named(fields: list[tuple[bytes, bytes]]) -> set[bytes]:
    return {
        t.strip().lower()
        for n, v in fields
        if n == b"connection"
        for t in v.split(b",")
        if t.strip()
    }


def _end_to_end(fields: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    named = _named(fields)
    return [
        (n, v)
        for n, v in fields
        if n not in _HOP and n not in named and not n.startswith(b"proxy-")
    ]


def _fields(block: bytes) -> list[tuple[bytes, bytes]]:
    return [(n.lower(), v) for n, v in _FIELD_RE.findall(block)]


async def _read(stream: trio.SocketStream, buf: bytes, end: bytes) -> tuple[bytes, int] | None:
    while (at := buf.find(end)) < 0:
        data = await stream.receive_some(65536)
        if not data:
            return None
        buf += data
    return buf, at


async def proxy(upstream: tuple[str, int], client: trio.SocketStream) -> None:
    up = await trio.open_tcp_stream(*upstream)
    name = client.socket.getpeername()
    # A socketpair (bench/pair.py's callgrind driver) has no address.
    peer = (name[0] if isinstance(name, tuple) else "127.0.0.1").encode("ascii")
    buf = b""
    back = b""
    try:
        while True:
            got = await _read(client, buf, b"\r\n\r\n")
            if got is None:
                return
            buf, _ = got
            m = _REQUEST_RE.match(buf)
            if m is None:
                await client.send_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                return
            method, target, block = m.group(1, 2, 3)
            buf = buf[m.end() :]
            fields = _fields(block)
            if any(n in (b"content-length", b"transfer-encoding") for n, _ in fields):
                await client.send_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                return
            host = next((v for n, v in fields if n == b"host"), b"")
            out = _end_to_end(fields)
            out += [
                (b"forwarded", b"for=" + peer + b';host="' + host + b'";proto=http'),
                (b"x-forwarded-for", peer),
                (b"x-forwarded-proto", b"http"),
                (b"x-forwarded-host", host),
                (b"via", _VIA),
            ]
            conn = h11.Connection(h11.CLIENT)
            request = h11.Request(method=method, target=target, headers=out, _parsed=True)
            await up.send_all(conn.send(request) + conn.send(h11.EndOfMessage()))
            with trio.move_on_after(_HEAD_TIMEOUT):
                got = await _read(up, back, b"\r\n\r\n")
            if got is None:
                return  # the upstream closed, or no head in time
            back, _ = got
            r = _RESPONSE_RE.match(back)
            if r is None:
                return
            status, rblock = r.group(1, 2)
            rfields = _fields(rblock)
            lengths = [v for n, v in rfields if n == b"content-length"]
            if len(lengths) != 1 or not lengths[0].isdigit():
                return  # only a Content-Length body here
            end = r.end() + int(lengths[0])
            while len(back) < end:
                data = await up.receive_some(65536)
                if not data:
                    return
                back += data
            body, back = back[r.end() : end], back[end:]
            kept = [*_end_to_end(rfields), (b"via", _VIA)]
            head = b"HTTP/1.1 %s \r\n" % status
            head += b"".join(n + b": " + v + b"\r\n" for n, v in kept)
            await client.send_all(head + b"\r\n" + body)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        # Both closed without a checkpoint: a cancelled task closes both.
        up.socket.close()
        client.socket.close()


async def main(upstream: str, port: int) -> None:
    host, _, up_port = upstream.rpartition(":")
    handler = functools.partial(proxy, (host, int(up_port)))
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, handler, port, host="127.0.0.1")
        )
        bound = listeners[0].socket.getsockname()[1]
        print(f"Proxying at http://127.0.0.1:{bound}/ to {upstream}", flush=True)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0)
