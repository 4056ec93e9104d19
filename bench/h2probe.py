"""An HTTP/2 probe: GET some paths on one connection, h2c prior knowledge or TLS with ALPN h2.

Before an h2 workload the harness checks that the server answers every path
of it over HTTP/2 with 200 and the file's exact bytes, as ``bench.workloads``
does for HTTP/1.1. Uses the ``h2`` library (a serverio dependency), blocking
sockets, a bounded timeout, loopback only. TLS does not verify the
certificate: the harness generated it a moment ago.
"""

from __future__ import annotations

import socket
import ssl
import time
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.events


class H2ProbeError(RuntimeError):
    """The server did not speak HTTP/2 as expected."""


@dataclass
class H2Answer:
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytearray = field(default_factory=bytearray)
    ended: bool = False


def h2_get(
    host: str, port: int, authority: str, paths: list[str], *, tls: bool, timeout_s: float = 10.0
) -> tuple[str, list[H2Answer]]:
    """GET ``paths`` concurrently on one connection; returns (protocol, answers in order)."""
    deadline = time.monotonic() + timeout_s
    raw = socket.create_connection((host, port), timeout=timeout_s)
    sock: socket.socket = raw
    protocol = "h2c"
    try:
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            ctx.set_alpn_protocols(["h2"])
            sock = ctx.wrap_socket(raw, server_hostname=host)
            protocol = sock.selected_alpn_protocol() or "none"
            if protocol != "h2":
                raise H2ProbeError(f"ALPN selected {protocol!r}, not h2")
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        # Large windows so the probe never waits on its own flow control.
        conn.increment_flow_control_window(1 << 30)
        scheme = "https" if tls else "http"
        answers: dict[int, H2Answer] = {}
        order: list[int] = []
        for path in paths:
            sid = conn.get_next_available_stream_id()
            headers = [
                (":method", "GET"),
                (":scheme", scheme),
                (":authority", authority),
                (":path", path),
            ]
            conn.send_headers(sid, headers, end_stream=True)
            answers[sid] = H2Answer()
            order.append(sid)
        sock.sendall(conn.data_to_send())
        while not all(a.ended for a in answers.values()):  # bounded by the deadline
            left = deadline - time.monotonic()
            if left <= 0:
                raise H2ProbeError("timed out")
            sock.settimeout(left)
            data = sock.recv(1 << 16)
            if not data:
                raise H2ProbeError("connection closed before every response ended")
            for ev in conn.receive_data(data):
                _apply(conn, ev, answers)
            if out := conn.data_to_send():
                sock.sendall(out)
        return protocol, [answers[sid] for sid in order]
    finally:
        sock.close()


def _apply(
    conn: h2.connection.H2Connection, ev: h2.events.Event, answers: dict[int, H2Answer]
) -> None:
    if isinstance(ev, h2.events.ResponseReceived) and ev.stream_id in answers:
        hdrs = {
            (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in ev.headers or ()
        }
        answers[ev.stream_id].status = int(hdrs.get(":status", "0"))
        answers[ev.stream_id].headers = hdrs
    elif isinstance(ev, h2.events.DataReceived) and ev.stream_id in answers:
        answers[ev.stream_id].body += ev.data or b""
        conn.acknowledge_received_data(ev.flow_controlled_length or 0, ev.stream_id)
    elif isinstance(ev, h2.events.StreamEnded) and ev.stream_id in answers:
        answers[ev.stream_id].ended = True
    elif isinstance(ev, h2.events.StreamReset) and ev.stream_id in answers:
        raise H2ProbeError(f"stream {ev.stream_id} reset with error {ev.error_code!r}")
    elif isinstance(ev, h2.events.ConnectionTerminated):
        raise H2ProbeError(f"GOAWAY with error {ev.error_code!r}")
