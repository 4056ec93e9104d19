"""A scripted client of resumable uploads for the tests: h11 over TCP
(HTTP/1.1, interim responses kept) and h2 over TCP (HTTP/2 prior
knowledge), each request on a fresh connection."""

from __future__ import annotations

from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.events
import h11
import trio

__all__ = ["Answer", "h1_request", "h2_request"]


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    interim: list[tuple[int, dict[str, str]]] = field(default_factory=list)


def _hs(pairs: object) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in pairs:  # type: ignore[attr-defined]
        k = k.decode() if isinstance(k, bytes) else k
        v = v.decode("latin-1") if isinstance(v, bytes) else v
        out[k.lower()] = v
    return out


async def h1_request(
    port: int,
    method: str,
    path: str,
    headers: dict[str, str] | None = None,
    body: bytes = b"",
    *,
    cut_after: int | None = None,
) -> Answer | None:
    """One request; ``cut_after``: send that many body bytes, then drop
    the connection (None returned)."""
    hs = {"host": "127.0.0.1", "content-length": str(len(body))}
    hs.update(headers or {})
    if "transfer-encoding" in hs:
        del hs["content-length"]
    conn = h11.Connection(h11.CLIENT)
    with trio.fail_after(30):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            req = h11.Request(method=method, target=path, headers=list(hs.items()))
            await stream.send_all(conn.send(req))
            if cut_after is not None:
                await stream.send_all(conn.send(h11.Data(data=body[:cut_after])))
                await trio.sleep(0.3)  # let the server write what arrived
                return None
            if body:
                for i in range(0, len(body), 1 << 16):
                    await stream.send_all(conn.send(h11.Data(data=body[i : i + (1 << 16)])))
            await stream.send_all(conn.send(h11.EndOfMessage()))
            interim: list[tuple[int, dict[str, str]]] = []
            answer: Answer | None = None
            chunks: list[bytes] = []
            while True:
                ev = conn.next_event()
                if ev is h11.NEED_DATA:
                    data = await stream.receive_some(1 << 16)
                    conn.receive_data(data)
                    continue
                if isinstance(ev, h11.InformationalResponse):
                    interim.append((ev.status_code, _hs(ev.headers)))
                elif isinstance(ev, h11.Response):
                    answer = Answer(ev.status_code, _hs(ev.headers), b"", interim)
                elif isinstance(ev, h11.Data):
                    chunks.append(bytes(ev.data))
                elif isinstance(ev, (h11.EndOfMessage, h11.ConnectionClosed)):
                    break
            assert answer is not None
            answer.body = b"".join(chunks)
            return answer


async def h2_request(
    port: int,
    method: str,
    path: str,
    headers: dict[str, str] | None = None,
    body: bytes = b"",
) -> Answer:
    """One request over HTTP/2 (prior knowledge, cleartext)."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    with trio.fail_after(30):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(conn.data_to_send())
            fields = [
                (":method", method),
                (":path", path),
                (":scheme", "http"),
                (":authority", "127.0.0.1"),
                ("content-length", str(len(body))),
                *((k.lower(), v) for k, v in (headers or {}).items()),
            ]
            sid = conn.get_next_available_stream_id()
            conn.send_headers(sid, fields, end_stream=not body)
            sent = 0
            interim: list[tuple[int, dict[str, str]]] = []
            answer: Answer | None = None
            chunks: list[bytes] = []
            done = False
            while not done:
                while body and sent < len(body):
                    window = min(conn.local_flow_control_window(sid), conn.max_outbound_frame_size)
                    if window <= 0:
                        break
                    piece = body[sent : sent + window]
                    sent += len(piece)
                    conn.send_data(sid, piece, end_stream=sent == len(body))
                await stream.send_all(conn.data_to_send())
                data = await stream.receive_some(1 << 16)
                if not data:
                    break
                for ev in conn.receive_data(data):
                    if isinstance(ev, h2.events.InformationalResponseReceived):
                        interim.append((int(_hs(ev.headers)[":status"]), _hs(ev.headers)))
                    elif isinstance(ev, h2.events.ResponseReceived):
                        hs = _hs(ev.headers)
                        answer = Answer(int(hs[":status"]), hs, b"", interim)
                    elif isinstance(ev, h2.events.DataReceived):
                        chunks.append(ev.data)
                        conn.acknowledge_received_data(ev.flow_controlled_length, sid)
                    elif isinstance(ev, (h2.events.StreamEnded, h2.events.StreamReset)):
                        done = True
                await stream.send_all(conn.data_to_send())
            assert answer is not None
            answer.body = b"".join(chunks)
            return answer
