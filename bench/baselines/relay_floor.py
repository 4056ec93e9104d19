"""A reverse "proxy" with no HTTP in it: the floor of a trio relay.

``python bench/baselines/relay_floor.py HOST:PORT PATH [PORT]`` listens on
127.0.0.1 and, for each client connection, opens one keep-alive
connection to the upstream ``HOST:PORT``; for every request head the
client sends (bytes up to a blank line; no content, no parsing) it writes
one fixed ``GET PATH`` request upstream, reads the response until its
Content-Length is complete (the one field it looks at) and writes those
bytes back unchanged.  Plain trio: ``receive_some`` and ``send_all`` on
``SocketStream``s, one task per connection.  No validation, no header
rewriting, no deadlines, no pool, no chunked responses: not a proxy, a
measurement of what the event loop, the sockets and four awaits per
request cost on this machine (the ``relay-floor`` entry of the
``proxy-1k-c64`` workload; docs/performance.md "Reverse proxy").
"""

from __future__ import annotations

import functools
import re
import sys

import trio

_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*(\d+)", re.IGNORECASE)


async def relay(upstream: tuple[str, int], request: bytes, client: trio.SocketStream) -> None:
    up = await trio.open_tcp_stream(*upstream)
    buf = b""
    try:
        while True:
            while (end := buf.find(b"\r\n\r\n")) < 0:
                data = await client.receive_some(65536)
                if not data:
                    return
                buf += data
            buf = buf[end + 4 :]
            await up.send_all(request)
            answer = b""
            while True:
                data = await up.receive_some(65536)
                if not data:
                    return
                answer += data
                head = answer.find(b"\r\n\r\n")
                if head >= 0:
                    m = _LENGTH.search(answer, 0, head + 2)
                    if m is None or len(answer) >= head + 4 + int(m.group(1)):
                        break
            await client.send_all(answer)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        await up.aclose()


async def main(upstream: str, path: str, port: int) -> None:
    host, _, up_port = upstream.rpartition(":")
    request = f"GET {path} HTTP/1.1\r\nHost: {upstream}\r\n\r\n".encode("ascii")
    handler = functools.partial(relay, (host, int(up_port)), request)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, handler, port, host="127.0.0.1")
        )
        bound = listeners[0].socket.getsockname()[1]
        print(f"Relaying at http://127.0.0.1:{bound}/ to {upstream}", flush=True)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 0)
