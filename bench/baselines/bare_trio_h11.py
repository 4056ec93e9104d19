"""Ceiling control: a bare trio + h11 loop that serves one file's bytes.

Usage: ``python bare_trio_h11.py FILE [PORT]``

Any GET (or HEAD) gets the file's bytes with ``Content-Length`` and keep-alive;
there are no path, method, precondition or range checks. It prints
``Serving FILE at http://127.0.0.1:PORT/`` once it listens.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import h11
import trio

MAX_RECV = 65536


async def handle(stream: trio.SocketStream, body: bytes) -> None:
    conn = h11.Connection(h11.SERVER)
    headers = [
        (b"content-type", b"application/octet-stream"),
        (b"content-length", str(len(body)).encode("ascii")),
    ]
    try:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await stream.receive_some(MAX_RECV))
            elif isinstance(event, h11.Request):
                out = conn.send(h11.Response(status_code=200, headers=headers)) or b""
                if event.method != b"HEAD":
                    out += conn.send(h11.Data(data=body)) or b""
                out += conn.send(h11.EndOfMessage()) or b""
                await stream.send_all(out)
            elif isinstance(event, h11.EndOfMessage) or event is h11.PAUSED:
                if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
                    conn.start_next_cycle()
                else:
                    return
            else:  # ConnectionClosed, or a request body chunk we ignore
                if not isinstance(event, h11.Data):
                    return
    except (h11.ProtocolError, trio.BrokenResourceError, trio.ClosedResourceError):
        return


async def main(path: Path, body: bytes, port: int) -> None:
    async def handler(stream: trio.SocketStream) -> None:
        await handle(stream, body)

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, handler, port, host="127.0.0.1")
        )
        bound = listeners[0].socket.getsockname()[1]
        print(f"Serving {path} at http://127.0.0.1:{bound}/", flush=True)


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: bare_trio_h11.py FILE [PORT]")
    file = Path(sys.argv[1])
    trio.run(main, file, file.read_bytes(), int(sys.argv[2]) if len(sys.argv) == 3 else 0)
