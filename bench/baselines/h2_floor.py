"""The floor of HTTP/2 on trio with the h2 library: a canned response per stream.

``python bench/baselines/h2_floor.py FILE [PORT]`` listens on 127.0.0.1
for h2c with prior knowledge (the client preface first, as h2load sends
it; anything else gets a canned HTTP/1.1 answer per request head, for the
harness's probe) and, on each HTTP/2 connection, feeds every read to one ``h2`` connection
(``h2.connection.H2Connection``, its header validation and normalisation
off, ``header_encoding=None``: the least work h2's public API does) and
answers every request (``RequestReceived``) at once with one fixed ``200``
whose body is FILE's bytes, read once at start: ``send_headers`` with
``:status`` alone, ``send_data`` with END_STREAM (the body fits the windows
h2load opens), then one ``send_all`` of what h2 queued per read.  One task
per connection, none per stream; no request parsing beyond h2's, no
validators, no log.  Not a server: a measurement of what trio, h2 (its
frame parsing, state machines and HPACK) and the sockets cost per stream
on this machine (the ``h2-floor`` entry of the ``1k-h2`` workload;
docs/performance.md), as ``tls_floor.py`` is for HTTP/1.1 over TLS.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import trio


def fields(size: int) -> list[tuple[bytes, bytes]]:
    """The one response's fields: ``:status`` alone (HPACK static index 8,
    one byte), the least a response carries."""
    return [(b":status", b"200")]


def connection() -> h2.connection.H2Connection:
    config = h2.config.H2Configuration(
        client_side=False,
        header_encoding=None,
        validate_inbound_headers=False,
        validate_outbound_headers=False,
        normalize_outbound_headers=False,
    )
    return h2.connection.H2Connection(config)


PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"  # RFC 9113 §3.4


async def serve(body: bytes, stream: trio.SocketStream) -> None:
    """Every request on ``stream`` gets ``body``: HTTP/2 after the client
    preface, else HTTP/1.1 (the harness's readiness probe and check)."""
    try:
        first = b""
        while len(first) < len(PREFACE) and PREFACE.startswith(first):
            data = await stream.receive_some(65536)
            if not data:
                return
            first += data
        if first.startswith(PREFACE):
            await _h2(body, stream, first)
        else:
            await _h1(body, stream, first)
    except (trio.BrokenResourceError, trio.ClosedResourceError, h2.exceptions.ProtocolError):
        pass
    finally:
        await trio.aclose_forcefully(stream)


async def _h2(body: bytes, stream: trio.SocketStream, data: bytes) -> None:
    conn = connection()
    head = fields(len(body))
    conn.initiate_connection()
    await stream.send_all(conn.data_to_send())
    while data:
        for ev in conn.receive_data(data):
            if isinstance(ev, h2.events.RequestReceived):
                sid = ev.stream_id
                assert sid is not None
                conn.send_headers(sid, head)
                conn.send_data(sid, body, end_stream=True)
            elif isinstance(ev, h2.events.ConnectionTerminated):
                return
        out = conn.data_to_send()
        if out:
            await stream.send_all(out)
        data = await stream.receive_some(65536)


async def _h1(body: bytes, stream: trio.SocketStream, buf: bytes) -> None:
    """A canned HTTP/1.1 200 per request head (no parsing), kept alive."""
    response = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    while True:
        while (end := buf.find(b"\r\n\r\n")) < 0:
            data = await stream.receive_some(65536)
            if not data:
                return
            buf += data
        buf = buf[end + 4 :]
        await stream.send_all(response)


async def main(body: bytes, file: str, port: int) -> None:
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(
                trio.serve_tcp, functools.partial(serve, body), port, host="127.0.0.1"
            )
        )
        bound = listeners[0].socket.getsockname()[1]
        print(f"Serving {file} at http://127.0.0.1:{bound}/", flush=True)


if __name__ == "__main__":
    file = sys.argv[1]
    body = Path(file).read_bytes()  # read once, before the loop
    trio.run(main, body, file, int(sys.argv[2]) if len(sys.argv) > 2 else 0)
