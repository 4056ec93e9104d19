"""The listeners: the bound sockets, their TLS contexts and protocols.

:class:`Listeners` is the server's first part (docs/architecture.md, "The
server"): the listening sockets (bound here, inherited with ``--fd``, or
handed in), which of them speak TLS (``--certfile``, ``--listen-tls``) and
which HTTP/2 (the ``/h1`` and ``/h2`` suffixes, else ``--http2``), and the
TLS context of each: a listener whose protocol differs from ``--http2``
has a context of its own, because ALPN offers ``h2`` there or not.

Cancellation handling: :meth:`Listeners.open` and :func:`bind_public` bind
one socket after another; cancelled (or failing) part-way, they close what
they bound and re-raise.  Closing the listeners is the lifecycle's job
(:class:`~serverio.app.lifecycle.Lifecycle`, step 1).
"""

from __future__ import annotations

import errno
import socket as _stdsocket
import ssl
from collections.abc import Sequence

import trio

from ..config import Config, listener_http2, parse_listen
from .activation import listeners_from_fds
from .tls import make_ssl_context

__all__ = ["Listeners", "bind_public", "listen_options", "listen_specs", "public_addresses"]


class Listeners:
    """The server's listening sockets and, per socket, its TLS context and
    whether it speaks HTTP/2."""

    def __init__(
        self,
        config: Config,
        sockets: Sequence[trio.SocketListener] | None,
        ssl_context: ssl.SSLContext | None,
    ) -> None:
        self.config = config
        self.sockets: list[trio.SocketListener] = list(sockets or [])
        # TLS when --certfile is set (the CLI builds the context first, so
        # a bad certificate is a one-line start-up error, not a traceback).
        self.ssl_context = ssl_context or make_ssl_context(config)
        self._specs = listen_specs(config)
        protocols = {listener_http2(proto, config.h2.http2) for *_, proto in self._specs}
        # A TLS listener that differs from --http2 gets its own context (ALPN).
        self._h1_ssl_context = (
            make_ssl_context(config.evolve(http2=False))
            if self.ssl_context is not None and config.h2.http2 and False in protocols
            else None
        )
        self._h2_ssl_context = (
            make_ssl_context(config.evolve(http2=True))
            if self.ssl_context is not None and not config.h2.http2 and True in protocols
            else None
        )
        # Whether any listener speaks HTTP/2 (the connections then get the
        # switch to it).
        self.any_http2 = config.h2.http2 or True in protocols

    def addresses(self) -> list[tuple[str, int]]:
        out = []
        for listener in self.sockets:
            name = listener.socket.getsockname()
            out.append((str(name[0]), int(name[1])))
        return out

    async def open(self) -> None:
        """Bind the configured addresses (unless listeners were given).

        With ``--fd`` the inherited sockets are used instead of binding.
        """
        if self.sockets:
            return
        if self.config.listeners.fds:
            self.sockets = listeners_from_fds(self.config.listeners.fds)
            return
        self.sockets = await bind_public(self.config)

    def tls_of(self, listener: trio.SocketListener) -> ssl.SSLContext | None:
        """The TLS context of ``listener``'s connections (None: plaintext).

        Without ``--listen``/``--listen-tls`` every listener is TLS when
        ``--certfile`` is set.  With them, listeners are in the order of
        :func:`bind_public` (the ``--listen`` ones, then ``--listen-tls``)
        and only the latter are TLS.
        """
        cfg = self.config
        if not (cfg.listeners.listen or cfg.listeners.listen_tls):
            return self.ssl_context
        try:
            index = self.sockets.index(listener)
        except ValueError:
            return None
        if index < len(cfg.listeners.listen):
            return None
        # A listener whose protocol differs from --http2 has a context of
        # its own: ALPN offers h2 there or not.
        http2 = self.http2_of(listener)
        if http2 != cfg.h2.http2:
            return self._h2_ssl_context if http2 else self._h1_ssl_context
        return self.ssl_context

    def http2_of(self, listener: trio.SocketListener) -> bool:
        """Whether ``listener`` speaks HTTP/2 (its ``/h1`` or ``/h2`` suffix,
        else ``--http2``); inherited or default listeners follow ``--http2``."""
        cfg = self.config
        specs = self._specs
        try:
            index = self.sockets.index(listener)
        except ValueError:
            return cfg.h2.http2
        if index >= len(specs):
            return cfg.h2.http2
        return listener_http2(specs[index][2], cfg.h2.http2)


def listen_options(*, reuse_port: bool = False) -> list[tuple[int, int]]:
    """The SOL_SOCKET options a listening socket gets, looked up now (not at
    import: Windows lacks SO_REUSEPORT).

    POSIX: SO_REUSEADDR, so a restart can bind while old connections sit in
    TIME_WAIT.  Windows: SO_EXCLUSIVEADDRUSE instead, because SO_REUSEADDR
    there lets another process bind the very port we listen on (and
    Windows never blocks a rebind on TIME_WAIT).
    """
    exclusive: int | None = getattr(_stdsocket, "SO_EXCLUSIVEADDRUSE", None)
    if exclusive is not None:
        options = [(exclusive, 1)]
    else:
        options = [(_stdsocket.SO_REUSEADDR, 1)]
    if reuse_port:
        reuseport: int | None = getattr(_stdsocket, "SO_REUSEPORT", None)
        if reuseport is None:
            raise OSError(errno.ENOPROTOOPT, "SO_REUSEPORT is not available")
        options.append((reuseport, 1))
    return options


async def bind_public(cfg: Config, *, reuse_port: bool = False) -> list[trio.SocketListener]:
    """The public listeners of ``cfg``: ``--listen`` addresses, then
    ``--listen-tls`` ones (the order :meth:`Listeners.tls_of` relies on), or
    the one ``-b``/port address.  Raises OSError naming nothing: the caller
    reports which address (:func:`public_addresses`)."""
    out: list[trio.SocketListener] = []
    try:
        for host, port in public_addresses(cfg):
            out.append(await _bind(host, port, reuse_port=reuse_port))
    except BaseException:
        for listener in out:
            listener.socket.close()
        raise
    return out


def listen_specs(cfg: Config) -> list[tuple[str, int, str | None]]:
    """(host, port, protocol suffix) of every ``--listen``/``--listen-tls``
    address, in :func:`bind_public` order."""
    specs = [parse_listen(a, "--listen") for a in cfg.listeners.listen]
    return specs + [parse_listen(a, "--listen-tls") for a in cfg.listeners.listen_tls]


def public_addresses(cfg: Config) -> list[tuple[str, int]]:
    """(host, port) of every public listener, in :func:`bind_public` order."""
    if cfg.listeners.listen or cfg.listeners.listen_tls:
        return [spec[:2] for spec in listen_specs(cfg)]
    return [(cfg.listeners.host, cfg.listeners.port)]


async def _bind(host: str, port: int, *, reuse_port: bool = False) -> trio.SocketListener:
    """Bind one listening socket (IPv4 or IPv6 literal, or a host name).

    ``reuse_port``: SO_REUSEPORT, so that each ``--workers`` process has its
    own listening socket on the same port and the kernel balances between
    them.
    """
    # An ASCII host (an address literal, a plain name) as bytes: a str
    # is encoded with the "idna" codec first, whose import (with
    # stringprep) was a measurable part of start-up; for ASCII the
    # encoding is the same bytes.
    name: str | bytes = host.encode("ascii") if host.isascii() else host
    infos = await trio.socket.getaddrinfo(
        name, port, type=_stdsocket.SOCK_STREAM, flags=_stdsocket.AI_PASSIVE
    )
    if not infos:  # pragma: no cover - getaddrinfo raises instead
        raise OSError(f"cannot resolve {host!r}")
    family, type_, proto, _, sockaddr = infos[0]
    sock = trio.socket.socket(family, type_, proto)
    try:
        for option, value in listen_options(reuse_port=reuse_port):
            sock.setsockopt(_stdsocket.SOL_SOCKET, option, value)
        if family == _stdsocket.AF_INET6:
            # Like http.server: "::" also accepts IPv4 (dual stack).
            sock.setsockopt(_stdsocket.IPPROTO_IPV6, _stdsocket.IPV6_V6ONLY, 0)
        await sock.bind(sockaddr)
        sock.listen(4096)  # the kernel caps this at net.core.somaxconn
    except BaseException:
        sock.close()
        raise
    return trio.SocketListener(sock)
