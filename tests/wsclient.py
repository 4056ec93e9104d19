"""A WebSocket client for the tests: wsproto (RFC 6455) over any trio stream."""

from __future__ import annotations

import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)


class Rejected(Exception):
    """The handshake got another answer than 101 (``status``)."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class WSClient:
    """One WebSocket; :meth:`handshake` first, then :meth:`send` / :meth:`receive`."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.pending: list[Event] = []
        self.accepted: AcceptConnection | None = None
        self.closed: CloseConnection | None = None

    async def _events(self) -> list[Event]:
        """Events from one read (an empty list at EOF)."""
        try:
            data = await self.stream.receive_some(65536)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            data = b""
        self.ws.receive_data(bytes(data) if data else None)
        return list(self.ws.events())

    async def handshake(
        self, target: str, host: str = "t", extra: str = "", early: bytes = b""
    ) -> None:
        """Send the opening handshake (and ``early`` bytes in the same
        write); raises :class:`Rejected` on a non-101."""
        headers = [(k.strip().encode(), v.strip().encode()) for k, v in _pairs(extra)]
        request = self.ws.send(Request(host=host, target=target, extra_headers=headers))
        await self.stream.send_all(request + early)
        while True:
            events = await self._events()
            if not events and self.ws.state.name in ("CLOSED", "REJECTING"):
                raise EOFError("closed during the handshake")
            for i, ev in enumerate(events):
                if isinstance(ev, AcceptConnection):
                    self.accepted = ev
                    self.pending = events[i + 1 :]
                    return
                if isinstance(ev, RejectConnection):
                    raise Rejected(ev.status_code)
                if isinstance(ev, RejectData):
                    continue

    async def send(self, message: str | bytes) -> None:
        event = TextMessage(data=message) if isinstance(message, str) else BytesMessage(message)
        await self.stream.send_all(self.ws.send(event))

    async def receive(self) -> str | bytes | None:
        """The next whole message, or None once the peer closed (or EOF)."""
        text: list[str] = []
        blob = bytearray()
        while True:
            while self.pending:
                ev = self.pending.pop(0)
                if isinstance(ev, TextMessage):
                    text.append(ev.data)
                    if ev.message_finished:
                        return "".join(text)
                elif isinstance(ev, BytesMessage):
                    blob += ev.data
                    if ev.message_finished:
                        return bytes(blob)
                elif isinstance(ev, CloseConnection):
                    self.closed = ev
                    if self.ws.state.name == "REMOTE_CLOSING":
                        # The peer closed first: answer its Close (RFC 6455 §5.5.1).
                        await self.stream.send_all(self.ws.send(ev.response()))
                    return None
            events = await self._events()
            if not events:
                return None
            self.pending = events

    async def close(self, code: int = 1000) -> None:
        """Send a Close frame (the peer answers with its own)."""
        await self.stream.send_all(self.ws.send(CloseConnection(code=code)))


def _pairs(extra: str) -> list[tuple[str, str]]:
    out = []
    for line in extra.split("\r\n"):
        if ":" in line:
            k, v = line.split(":", 1)
            out.append((k, v))
    return out


async def at_eof(stream: trio.abc.Stream) -> bool:
    """Reads until EOF or a reset (what comes first is discarded)."""
    try:
        while await stream.receive_some(65536):
            pass
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    return True


def masked_text_frame(text: str, mask: bytes = b"\x01\x02\x03\x04") -> bytes:
    """One client text frame, FIN set, masked (RFC 6455 §5.2, §5.3); short
    payloads only (under 126 bytes)."""
    payload = text.encode()
    assert len(payload) < 126
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return bytes([0x81, 0x80 | len(payload)]) + mask + masked
