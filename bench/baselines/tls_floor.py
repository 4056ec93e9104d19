"""The floor of HTTP/1.1 over TLS on trio: a canned response per request head.

``python bench/baselines/tls_floor.py CERT KEY FILE [PORT]`` listens on
127.0.0.1 with TLS (``trio.SSLStream`` over ``trio.serve_tcp``, the
certificate and key given, TLS 1.2 or later, serverio's own
``ssl.create_default_context`` server defaults) and, on each connection,
answers every request head (bytes up to a blank line; no parsing, no
content) with one fixed ``200`` response whose body is FILE's bytes, read
once at start (keep-alive, ``Content-Length``, no ``Date``).  One task per
connection, one ``receive_some`` and one ``send_all`` per request: not a
server, a measurement of what trio, the ``ssl`` module's record layer and
the sockets cost per request on this machine (the ``tls-floor`` entry of
the ``1k-tls`` workload; docs/performance.md).  ``bare_trio_h11.py`` is
the plaintext ceiling with h11; ``relay_floor.py`` the proxy's floor.
"""

from __future__ import annotations

import functools
import ssl
import sys
from pathlib import Path

import trio


def context(cert: str, key: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    return ctx


def canned(body: bytes) -> bytes:
    """The one response: a 200 with ``body``, kept alive."""
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body)
    )
    return head + body


async def answer(response: bytes, stream: trio.SSLStream[trio.SocketStream]) -> None:
    """Every request head on ``stream`` gets ``response``, in order."""
    buf = b""
    try:
        while True:
            while (end := buf.find(b"\r\n\r\n")) < 0:
                data = await stream.receive_some(65536)
                if not data:
                    return
                buf += data
            buf = buf[end + 4 :]
            await stream.send_all(response)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        await trio.aclose_forcefully(stream)


async def serve(ctx: ssl.SSLContext, response: bytes, tcp: trio.SocketStream) -> None:
    await answer(response, trio.SSLStream(tcp, ctx, server_side=True))


async def main(ctx: ssl.SSLContext, response: bytes, file: str, port: int) -> None:
    handler = functools.partial(serve, ctx, response)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, handler, port, host="127.0.0.1")
        )
        bound = listeners[0].socket.getsockname()[1]
        print(f"Serving {file} at https://127.0.0.1:{bound}/", flush=True)


if __name__ == "__main__":
    cert, key, file = sys.argv[1:4]
    response = canned(Path(file).read_bytes())  # read once, before the loop
    trio.run(main, context(cert, key), response, file, int(sys.argv[4]) if len(sys.argv) > 4 else 0)
