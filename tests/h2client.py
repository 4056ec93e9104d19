"""A small HTTP/2 client for tests: h2's client-side state machine over any
trio stream (memory streams or real sockets)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.events
import h2.settings
import trio
import trio.testing

from serverio import Config, Server
from serverio.net.connection import ConnectionTask

Headers = list[tuple[bytes, bytes]]


@dataclass
class H2Response:
    stream_id: int
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    header_list: Headers = field(default_factory=list)
    body: bytearray = field(default_factory=bytearray)
    data_frames: int = 0
    ended: bool = False
    reset: int | None = None  # RST_STREAM error code from the server

    @property
    def done(self) -> bool:
        return self.ended or self.reset is not None


class H2Client:
    """Drive a server over ``stream``; events are processed as they arrive."""

    def __init__(self, stream: trio.abc.Stream, *, ack: bool = True) -> None:
        self.stream = stream
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding=None)
        )
        self.ack = ack  # give flow-control credit back as data arrives
        self.responses: dict[int, H2Response] = {}
        self.goaway: h2.events.ConnectionTerminated | None = None
        self.remote_settings_seen = False
        self.eof = False
        self.ended_order: list[int] = []

    async def start(
        self, settings: dict[h2.settings.SettingCodes, int] | None = None, *, preface: bool = True
    ) -> None:
        if settings:
            self.conn.local_settings = h2.settings.Settings(client=True, initial_values=settings)
        self.conn.initiate_connection()
        data = self.conn.data_to_send()
        await self.stream.send_all(data if preface else data[24:])

    async def flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            await self.stream.send_all(data)

    async def send_raw(self, data: bytes) -> None:
        await self.stream.send_all(data)

    def request(
        self,
        path: str = "/",
        method: str = "GET",
        headers: Sequence[tuple[str, str]] = (),
        *,
        end_stream: bool = True,
        raw: Headers | None = None,
    ) -> int:
        sid = self.conn.get_next_available_stream_id()
        hs: Headers = (
            raw
            if raw is not None
            else [
                (b":method", method.encode()),
                (b":path", path.encode()),
                (b":scheme", b"http"),
                (b":authority", b"localhost"),
                *((k.lower().encode(), v.encode()) for k, v in headers),
            ]
        )
        self.conn.send_headers(sid, hs, end_stream=end_stream)
        self.responses[sid] = H2Response(sid)
        return sid

    async def pump(self) -> bool:
        """Read once and process; False at EOF (or a reset connection)."""
        if self.eof:
            return False
        try:
            data = await self.stream.receive_some(65536)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            data = b""
        if not data:
            self.eof = True
            return False
        for ev in self.conn.receive_data(data):
            self._event(ev)
        await self.flush()
        return True

    def _event(self, ev: h2.events.Event) -> None:
        if isinstance(ev, h2.events.ResponseReceived):
            r = self.responses[ev.stream_id or 0]
            r.header_list = list(ev.headers or [])
            for k, v in r.header_list:
                if k == b":status":
                    r.status = int(v)
                else:
                    r.headers[k.decode()] = v.decode("latin-1")
        elif isinstance(ev, h2.events.DataReceived):
            r = self.responses[ev.stream_id or 0]
            r.body += ev.data or b""
            r.data_frames += 1
            if self.ack and ev.flow_controlled_length:
                self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id or 0)
        elif isinstance(ev, h2.events.StreamEnded):
            self.responses[ev.stream_id or 0].ended = True
            self.ended_order.append(ev.stream_id or 0)
        elif isinstance(ev, h2.events.StreamReset):
            rr = self.responses.get(ev.stream_id or 0)
            if rr is not None and not rr.ended:
                rr.reset = int(ev.error_code or 0)
        elif isinstance(ev, h2.events.ConnectionTerminated):
            self.goaway = ev
        elif isinstance(ev, h2.events.RemoteSettingsChanged):
            self.remote_settings_seen = True

    async def wait(self, *sids: int) -> list[H2Response]:
        while not all(self.responses[s].done for s in sids):
            if not await self.pump():
                break
        return [self.responses[s] for s in sids]

    async def get(
        self, path: str, headers: Sequence[tuple[str, str]] = (), method: str = "GET"
    ) -> H2Response:
        sid = self.request(path, method, headers)
        await self.flush()
        (r,) = await self.wait(sid)
        return r

    async def until_closed(self) -> None:
        while await self.pump():
            pass


@asynccontextmanager
async def h2_memory(
    cfg: Config,
    *,
    server: Server | None = None,
    settings: dict[h2.settings.SettingCodes, int] | None = None,
    ack: bool = True,
) -> AsyncIterator[tuple[H2Client, Server, ConnectionTask]]:
    """An HTTP/2 (h2c prior knowledge) client on one ConnectionTask over
    an in-memory stream pair; the preface goes through the HTTP/1.1 sniff."""
    srv = server or Server(cfg)
    ours, theirs = trio.testing.memory_stream_pair()
    conn = ConnectionTask(srv.env, theirs, "memory")
    async with srv.handler.running(), trio.open_nursery() as nursery:
        nursery.start_soon(conn.run)
        client = H2Client(ours, ack=ack)
        await client.start(settings)
        try:
            yield client, srv, conn
        finally:
            nursery.cancel_scope.cancel()
    if server is None:
        srv.opener.close()
