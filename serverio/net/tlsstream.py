"""A server-side TLS stream: OpenSSL's record layer over a non-blocking socket.

:class:`TLSStream` is what :class:`trio.SSLStream` is for serverio's
connections (an :class:`ssl.SSLObject` between two memory BIOs, the socket
read and written by this class), with one difference that matters per
request: a write that the socket takes at once, and a read whose bytes are
already there, cost no wait and no trio machinery.  :meth:`send_nowait`
encrypts and writes in one call, so the HTTP/1.1 emitter answers a warm
request over TLS the way it answers one on a plain socket (one ``send``,
no cancel scope); :class:`trio.SSLStream` takes a lock, two checkpoints
and a transport ``send_all`` per write (measured: 2.7x the floor of
bench/baselines/tls_floor.py with it, docs/history/perf-round3.md).

What it keeps from :class:`trio.SSLStream` (``server_side=True,
https_compatible=True``):

* The handshake is explicit (:meth:`do_handshake`) and bounded by the
  caller's scope (the connection's head deadline).
* A transport EOF without ``close_notify`` is an EOF, not an error (what
  browsers do; RFC 8446 §6.1 allows the truncation check to be the
  application's, and HTTP frames its messages itself).
* :meth:`aclose` sends ``close_notify`` when the socket takes it at once and
  never waits for the peer's.
* OpenSSL errors, a reset and a write on a closed peer are
  :class:`trio.BrokenResourceError`; use after :meth:`aclose` is
  :class:`trio.ClosedResourceError`.
* One task receives at a time; sending may happen in another task while one
  receives (the HTTP/1.1 client watcher): OpenSSL's calls are synchronous,
  and the bytes they produce go to the socket in order through one pending
  buffer that one task at a time drains.

Renegotiation is off in the context (serverio.net.tls), so a write never
needs a read; TLS 1.3 post-handshake messages (session tickets, key
updates) are written as they are produced.

Cancellation handling: a cancelled :meth:`receive_some` or
:meth:`do_handshake` loses nothing (bytes read from the socket are in the
incoming BIO before any wait); a cancelled send leaves the rest of the
encrypted bytes pending, written before anything later, so a later send
continues the stream in order (the HTTP layers close the connection after
a cut response anyway).
"""

from __future__ import annotations

import socket as _stdsocket
import ssl
from collections.abc import Callable

import trio

__all__ = ["TLSStream"]

_RECV = 65536  # bytes of TLS records read from the socket at a time
# Socket reads one receive_nowait makes at most before it reports nothing
# yet: a peer sending records that carry no application data (key
# updates, empty records) as fast as they are read gets a scheduling
# round between every _READS of them, not the event loop.
_READS = 8


class TLSStream(trio.abc.Stream):
    """A TLS server connection over an accepted socket (see the module)."""

    __slots__ = ("_closed", "_in", "_lock", "_obj", "_out", "_pending", "_sock")

    def __init__(self, stream: trio.SocketStream, context: ssl.SSLContext) -> None:
        # The socket leaves trio's wrapper (its TCP options are set) for a
        # standard one, read and written with non-blocking calls; trio's
        # wait_readable / wait_writable take it as it is, on every platform.
        sock = _stdsocket.socket(fileno=stream.socket.detach())
        sock.setblocking(False)
        self._sock = sock
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._obj = context.wrap_bio(self._in, self._out, server_side=True)
        self._pending: bytes = b""  # encrypted bytes the socket has not taken yet
        self._lock = trio.StrictFIFOLock()  # held by the one task waiting to write
        self._closed = False

    # ------------------------------------------------------------ facts

    def selected_alpn_protocol(self) -> str | None:
        """The protocol ALPN chose (RFC 7301), once the handshake is done."""
        return self._obj.selected_alpn_protocol()

    # ------------------------------------------------------------ writing

    def send_nowait(self, data: bytes | bytearray | memoryview) -> bool:
        """Encrypt ``data`` and write what the socket takes now, without
        waiting; True when every byte (earlier pending ones too) is out.
        False: the rest is pending and :meth:`flush` writes it."""
        if self._closed:
            raise trio.ClosedResourceError("the TLS stream is closed")
        try:
            self._obj.write(data)
        except ssl.SSLError as exc:
            raise trio.BrokenResourceError(exc) from exc
        return self._write_out()

    def _write_out(self) -> bool:
        """Move what OpenSSL produced to the socket, as far as it takes it
        now; True when nothing is left pending.  While another task waits
        to write (it holds the lock), only append: it writes in order."""
        out = self._out.read()
        pending = self._pending + out if self._pending else out
        if not pending:
            return True
        if self._lock.locked():
            self._pending = pending
            return False
        try:
            n = self._sock.send(pending)
        except BlockingIOError:
            n = 0
        except OSError as exc:
            self._pending = pending
            raise trio.BrokenResourceError(exc) from exc
        self._pending = pending[n:] if n < len(pending) else b""
        return not self._pending

    @property
    def pending(self) -> int:
        """Encrypted bytes not written yet."""
        return len(self._pending) + self._out.pending

    async def flush(self, progress: Callable[[], None] | None = None) -> None:
        """Write what is pending, waiting for the socket as needed;
        ``progress()`` after each write that took bytes (the HTTP/1.1
        emitter moves its write deadline there).

        Cancellation handling: what is not written stays pending, first in
        line for the next write.
        """
        async with self._lock:
            while self._pending or self._out.pending:
                if self._out.pending:
                    self._pending += self._out.read()
                try:
                    n = self._sock.send(self._pending)
                except BlockingIOError:
                    await trio.lowlevel.wait_writable(self._sock)
                    continue
                except OSError as exc:
                    raise trio.BrokenResourceError(exc) from exc
                self._pending = self._pending[n:]
                if progress is not None:
                    progress()

    async def flush_within(self, stall: float) -> bool:
        """:meth:`flush` under a deadline of ``stall`` seconds without
        progress (each write that takes bytes moves it); False when it
        passed (what is left stays pending: the caller closes)."""
        with trio.CancelScope(deadline=trio.current_time() + stall) as scope:

            def progress() -> None:
                scope.deadline = trio.current_time() + stall

            await self.flush(progress)
        return not scope.cancelled_caught

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Encrypt and write ``data`` (a checkpoint, as trio's streams are).

        Cancellation handling: see :meth:`flush`.
        """
        if self.send_nowait(data):
            await trio.lowlevel.checkpoint()
        else:
            await self.flush()

    async def wait_send_all_might_not_block(self) -> None:
        if self._pending:
            await self.flush()
        else:
            await trio.lowlevel.wait_writable(self._sock)

    # ------------------------------------------------------------ reading

    async def _feed(self) -> bool:
        """Read TLS records from the socket into OpenSSL (waiting for them
        when none is there); False at the transport's EOF."""
        while True:
            try:
                data = self._sock.recv(_RECV)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(self._sock)
                continue
            except OSError as exc:
                raise trio.BrokenResourceError(exc) from exc
            if not data:
                return False
            self._in.write(data)
            return True

    def receive_nowait(self, max_bytes: int) -> bytes | None:
        """Decrypted bytes that are here now (at most ``max_bytes``); ``b""``
        at the end of the stream; None when none are here yet (then
        :meth:`receive_some` waits for them), or when :data:`_READS`
        socket reads brought none (then the wait returns at once, after
        the other tasks ran)."""
        if self._closed:
            raise trio.ClosedResourceError("the TLS stream is closed")
        obj = self._obj
        incoming = self._in
        # Decrypt first only when OpenSSL has something to decrypt (bytes
        # in the incoming BIO, or decrypted ones not read yet): otherwise
        # the read would only raise SSLWantReadError (an exception per
        # request, for nothing) and the socket is read first.
        decrypt = incoming.pending or obj.pending()
        for _ in range(_READS):
            if decrypt:
                try:
                    data = obj.read(max_bytes)
                except ssl.SSLWantReadError:
                    pass
                except ssl.SSLZeroReturnError:
                    return b""  # the peer's close_notify
                except ssl.SSLError as exc:
                    raise trio.BrokenResourceError(exc) from exc
                else:
                    if self._out.pending:
                        self._write_out()  # a post-handshake message
                    return data
                if self._out.pending:
                    self._write_out()
            decrypt = True
            try:
                raw = self._sock.recv(_RECV)
            except BlockingIOError:
                return None
            except OSError as exc:
                raise trio.BrokenResourceError(exc) from exc
            if not raw:
                return b""  # EOF without close_notify (https_compatible)
            incoming.write(raw)
        return None  # _READS reads made no application data: the caller waits (one round)

    async def wait_readable(self) -> None:
        """Wait until there is something to read: records already read
        from the socket but not decrypted (a read takes up to 64 KiB of
        them, a decryption gives at most what was asked) make it return at
        once, since the socket would not wake us for them; otherwise it
        waits for the socket.  It never waits to write: what a read made
        OpenSSL produce (a post-handshake message) and the socket did not
        take stays pending for the next write, so a reader never waits on
        a peer that is not reading."""
        if self._in.pending or self._obj.pending():
            await trio.lowlevel.checkpoint()
            return
        await trio.lowlevel.wait_readable(self._sock)

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """Decrypted bytes, at most ``max_bytes``; ``b""`` at the end.

        Cancellation handling: bytes read from the socket stay in OpenSSL's
        buffer; a cancelled call loses none.
        """
        size = max_bytes or _RECV
        data = self.receive_nowait(size)
        if data is not None:
            await trio.lowlevel.checkpoint()
            return data
        while True:
            await self.wait_readable()
            data = self.receive_nowait(size)
            if data is not None:
                return data

    # ------------------------------------------------------------ life

    async def do_handshake(self) -> None:
        """The TLS handshake; :class:`trio.BrokenResourceError` when it
        fails (not TLS, no common version or suite, the peer left), with
        OpenSSL's error as its cause.

        Cancellation handling: the caller's scope bounds it; a cancelled
        handshake leaves a stream only :meth:`aclose` is good for.
        """
        obj = self._obj
        while True:
            try:
                obj.do_handshake()
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLError as exc:
                # Our alert, if OpenSSL made one, goes out best-effort.
                try:
                    self._write_out()
                except trio.BrokenResourceError:
                    pass
                raise trio.BrokenResourceError(exc) from exc
            else:
                break
            if not self._write_out():
                await self.flush()
            if not await self._feed():
                eof = ssl.SSLEOFError(ssl.SSL_ERROR_EOF, "EOF during the TLS handshake")
                raise trio.BrokenResourceError(eof) from eof
        if not self._write_out():
            await self.flush()

    async def aclose(self) -> None:
        """Send ``close_notify`` if the socket takes it at once, then close
        the socket (the peer's ``close_notify`` is not awaited)."""
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        try:
            if not self._lock.locked():
                try:
                    self._obj.unwrap()
                except ssl.SSLError:
                    pass  # SSLWantReadError: the peer's close_notify, not waited for
                try:
                    self._write_out()
                except trio.BrokenResourceError:
                    pass
        finally:
            trio.lowlevel.notify_closing(self._sock)
            self._sock.close()
        await trio.lowlevel.checkpoint()
