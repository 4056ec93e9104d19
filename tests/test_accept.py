"""serverio.net.accept: the accepted socket is the one ``accept()`` gives."""

from __future__ import annotations

import socket
import sys
from typing import Any

import pytest

from serverio.net.accept import raw_acceptor

FAMILIES = [(socket.AF_INET, "127.0.0.1")]
if socket.has_ipv6:
    FAMILIES.append((socket.AF_INET6, "::1"))


def _listener(family: socket.AddressFamily, host: str) -> socket.socket:
    lsock = socket.socket(family, socket.SOCK_STREAM)
    try:
        lsock.bind((host, 0))
    except OSError:
        lsock.close()
        pytest.skip(f"no {host} loopback here")
    lsock.listen(4)
    lsock.setblocking(False)
    return lsock


@pytest.mark.parametrize(("family", "host"), FAMILIES)
def test_same_socket_as_accept(family: socket.AddressFamily, host: str) -> None:
    with _listener(family, host) as lsock:
        accept = raw_acceptor(lsock)
        with pytest.raises(BlockingIOError):
            accept()  # nothing pending on a non-blocking listener
        with socket.create_connection(lsock.getsockname()[:2]) as client:
            client.sendall(b"x")
            for _ in range(100):
                try:
                    sock = accept()
                    break
                except BlockingIOError:
                    continue
            with sock:
                assert sock.family == family and isinstance(sock.family, socket.AddressFamily)
                assert sock.type == socket.SOCK_STREAM
                assert sock.proto == lsock.proto
                assert sock.getpeername() == client.getsockname()
                assert sock.gettimeout() is None  # blocking, as accept() leaves it
                assert sock.recv(1) == b"x"


class _NoPrivate:
    """A listener without CPython's ``_accept``: only the public method."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def accept(self) -> tuple[socket.socket, Any]:
        return self._sock.accept()


@pytest.mark.skipif(sys.implementation.name != "cpython", reason="the fallback is the default")
def test_falls_back_to_accept_without_the_private_method() -> None:
    with _listener(socket.AF_INET, "127.0.0.1") as lsock:
        accept = raw_acceptor(_NoPrivate(lsock))  # type: ignore[arg-type]
        with socket.create_connection(lsock.getsockname()) as client:
            lsock.setblocking(True)
            with accept() as sock:
                assert sock.getpeername() == client.getsockname()
