"""The floor of serving many small files on trio: open, fstat, read, close per request.

``python bench/baselines/files_floor.py ROOT [PORT]`` listens on 127.0.0.1
(``trio.serve_tcp``, plain TCP) and, on each connection, answers every
request head (bytes up to a blank line; no content) in order: the path
between the method and `` HTTP/`` (not decoded: the many-files trees'
names are plain ASCII), opened relative to ROOT's directory descriptor
(``os.open`` with ``dir_fd``; a path with an empty, ``.`` or ``..``
segment is a 404), ``os.fstat``, one ``os.read`` of its size, ``os.close``,
then one ``send_all`` of a fixed head with its ``Content-Length`` and the
bytes; a name that is not a regular file, or that cannot be opened, is a
404.  One task per connection; the file work runs on the event loop, as
serverio's ``--fs-workers 0`` does.  Not a server: no containment beyond
the segment check, no validators, ``Date``, media type, ranges, caches or
error pages.  It measures what trio, the sockets and the four filesystem
calls of an uncached file cost per request on this machine (the
``files-floor`` entry of the ``many-files`` and ``few-files`` workloads;
docs/performance.md), which serverio's defaults pay on every request
that misses its byte cache.  ``tls_floor.py`` is the floor of HTTP/1.1
over TLS; ``relay_floor.py`` the proxy's.
"""

from __future__ import annotations

import functools
import os
import stat
import sys
from pathlib import Path

import trio

_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n"
_NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"


def read_file(root_fd: int, target: bytes) -> bytes | None:
    """The bytes of ``target`` (``/a/b``) under the directory ``root_fd``,
    or None: a bad segment, a missing name, not a regular file."""
    relative = target.split(b"?", 1)[0].lstrip(b"/")
    if not relative or any(seg in (b"", b".", b"..") for seg in relative.split(b"/")):
        return None
    try:
        fd = os.open(relative, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0), dir_fd=root_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        return os.read(fd, st.st_size)
    finally:
        os.close(fd)


def response(root_fd: int, head: bytes) -> bytes:
    """The response to one request head (its request line is enough)."""
    line = head.split(b"\r\n", 1)[0]
    parts = line.split(b" ")
    body = read_file(root_fd, parts[1]) if len(parts) == 3 else None
    if body is None:
        return _NOT_FOUND
    return _HEAD % len(body) + body


async def answer(root_fd: int, stream: trio.SocketStream) -> None:
    """Every request head on ``stream`` gets its file, in order."""
    buf = b""
    try:
        while True:
            while (end := buf.find(b"\r\n\r\n")) < 0:
                data = await stream.receive_some(65536)
                if not data:
                    return
                buf += data
            head, buf = buf[:end], buf[end + 4 :]
            await stream.send_all(response(root_fd, head))
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        await trio.aclose_forcefully(stream)


async def main(root: Path, port: int) -> None:
    root_fd = os.open(root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(
                functools.partial(
                    trio.serve_tcp, functools.partial(answer, root_fd), port, host="127.0.0.1"
                )
            )
            bound = listeners[0].socket.getsockname()[1]
            print(f"Serving {root} at http://127.0.0.1:{bound}/", flush=True)
    finally:
        os.close(root_fd)


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: files_floor.py ROOT [PORT]")
    trio.run(main, Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) == 3 else 0)
