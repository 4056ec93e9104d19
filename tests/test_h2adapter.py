"""serverio.net.h2adapter: the h2 versions it supports, and each private
name of h2 it uses still there and still behaving as it relies on.

When h2 is upgraded, this file is the check: ``test_installed_h2_is_tested``
fails on a version not in ``TESTED`` until the rest of this file (and the
HTTP/2 tests) pass with it and it is added.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import h2
import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.stream
import hpack
import pytest
import trio
from h2.connection import ConnectionInputs, ConnectionState
from h2.errors import ErrorCodes

from serverio.net import h2adapter
from serverio.net.h2adapter import (
    FRAME_HEAD,
    SUPPORTED,
    TESTED,
    DirectFrames,
    LengthUncheckedStream,
    PublicFrames,
    QuietConnection,
    ServerConnection,
    StreamLengthConnection,
    direct_ok,
    h2_version,
    pending_header_bytes,
    server_connection,
)
from serverio.wire.hpackfast import FieldEncoder

from .conftest import make_config
from .h2client import h2_memory

REQUEST = [(":method", "GET"), (":path", "/"), (":scheme", "http"), (":authority", "a")]


def test_installed_h2_is_tested() -> None:
    assert h2.__version__ in TESTED, (
        f"h2 {h2.__version__} has not been tested with serverio.net.h2adapter: run "
        f"tests/test_h2adapter.py and the HTTP/2 tests with it, then add it to TESTED"
    )
    assert SUPPORTED[0] <= h2_version()[:2] < SUPPORTED[1]


def test_version_parsing() -> None:
    assert h2_version("4.4.1") == (4, 4, 1)
    assert h2_version("4.1.0rc1") == (4, 1, 0)
    assert h2_version("5.0") == (5, 0)


@pytest.mark.parametrize("version", ["4.0.0", "3.2.0", "5.0.0", "6.1"])
def test_import_refuses_an_unsupported_h2(version: str) -> None:
    """Outside pyproject's range the adapter does not load (loudly, naming
    the version), rather than misdriving an h2 it was never checked with."""
    code = (
        f"import h2; h2.__version__ = {version!r}\n"
        "try:\n"
        "    import serverio.net.h2adapter\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
        "else:\n"
        "    print('imported')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert "imported" not in out
    assert f"this is h2 {version}" in out


def test_the_private_names_exist() -> None:
    """Every private name the adapter touches."""
    assert callable(h2.connection.H2Connection._begin_new_stream)
    assert callable(h2.connection.H2Connection._get_stream_by_id)
    assert callable(h2.stream.H2Stream._initialize_content_length)
    assert callable(h2.stream.H2Stream._track_content_length)
    for name in (
        "_receive_frame",
        "_prepare_for_sending",
        "_stream_is_closed_by_reset",
        "_stream_is_closed_by_end",
    ):
        assert callable(getattr(h2.connection.H2Connection, name))
    conn = server_connection(100, 8192, FieldEncoder())
    assert isinstance(conn._frame_dispatch_table, dict)
    # The direct frame path skips the connection's no-op transitions.
    table = conn.state_machine._transitions
    for sent in (ConnectionInputs.SEND_HEADERS, ConnectionInputs.SEND_DATA):
        assert table[(ConnectionState.SERVER_OPEN, sent)] == (None, ConnectionState.SERVER_OPEN)
    assert isinstance(conn._data_to_send, bytearray)
    assert hasattr(conn.incoming_buffer, "_headers_buffer")
    assert direct_ok(conn)
    conn.initiate_connection()
    assert isinstance(getattr(conn, "encoder", None), FieldEncoder)


def _pair(
    server_cls: type[h2.connection.H2Connection] = ServerConnection,
) -> tuple[h2.connection.H2Connection, h2.connection.H2Connection]:
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    if server_cls is ServerConnection:
        server: h2.connection.H2Connection = server_connection(100, 8192, FieldEncoder())
    else:
        server = server_cls(h2.config.H2Configuration(client_side=False))
    client.initiate_connection()
    server.initiate_connection()
    for _ in range(2):
        server.receive_data(client.data_to_send())
        client.receive_data(server.data_to_send())
    return client, server


@pytest.mark.parametrize(
    ("value", "data", "end"),
    [
        ("5", b"123456", False),  # past content-length
        ("5", b"123", True),  # END_STREAM short of it
        ("nope", b"", True),  # not a number
    ],
)
def test_content_length_is_left_to_serverio(value: str, data: bytes, end: bool) -> None:
    """Stock h2 makes each of these a connection error (ProtocolError);
    the adapter's streams only count, so serverio makes it a stream error."""
    for server_cls in (h2.connection.H2Connection, ServerConnection):
        client, server = _pair(server_cls)
        client.send_headers(1, [*REQUEST, ("content-length", value)])
        client.send_data(1, data, end_stream=end)
        if server_cls is ServerConnection:
            events = server.receive_data(client.data_to_send())
            assert any(isinstance(e, h2.events.RequestReceived) for e in events)
            assert type(server._get_stream_by_id(1)) is LengthUncheckedStream
        else:
            with pytest.raises(h2.exceptions.ProtocolError):
                server.receive_data(client.data_to_send())


def test_concurrent_stream_limit_is_left_to_serverio() -> None:
    conn = server_connection(1, 8192, FieldEncoder())
    conn.initiate_connection()
    assert conn.local_settings.max_concurrent_streams == 1
    assert conn.open_inbound_streams == 0


def _late_frame_outcome(
    server: h2.connection.H2Connection, frame: bytes
) -> tuple[str, object, bytes]:
    """What h2 makes of ``frame``: its error code, or its events and output."""
    try:
        events = server.receive_data(frame)
    except h2.exceptions.ProtocolError as exc:
        return ("error", exc.error_code, server.data_to_send())
    return ("events", [type(e) for e in events], server.data_to_send())


@pytest.mark.parametrize("how", ["reset", "ended"])
def test_closed_streams_are_forgotten_in_sweeps_and_late_frames_meet_the_same_answer(
    how: str,
) -> None:
    """h2 forgets closed streams only when asked how many are open; the
    adapter asks it once SWEEP_AT streams are kept, so 200 streams answered
    one after another never leave more than SWEEP_AT kept, and a late frame
    on a closed stream is answered the same whether h2 still keeps it or
    has forgotten it (h2: RST_STREAM STREAM_CLOSED, after a reset and
    after both sides ended the stream)."""
    outcomes: list[tuple[str, object, bytes]] = []
    for streams in (1, 200):
        client, server = _pair()
        for i in range(streams):
            sid = 1 + 2 * i
            client.send_headers(sid, REQUEST, end_stream=True)
            server.receive_data(client.data_to_send())
            if how == "reset" and sid == 1:
                server.reset_stream(sid)
            else:
                server.send_headers(sid, [(":status", "200")], end_stream=True)
            client.receive_data(server.data_to_send())
            assert len(server.streams) <= h2adapter.SWEEP_AT
        assert (1 in server.streams) is (streams == 1)
        late = FRAME_HEAD.pack(1 << 8 | 0x0, 0, 1) + b"x"  # one byte of DATA on stream 1
        outcomes.append(_late_frame_outcome(server, late))
    assert outcomes[0] == outcomes[1]
    kind, _, out = outcomes[0]
    assert kind == "events" and out[3] == 0x3  # RST_STREAM
    assert out[9:] == ErrorCodes.STREAM_CLOSED.to_bytes(4, "big")


def _frames(*frames: tuple[int, int, int, bytes]) -> bytes:
    return b"".join(FRAME_HEAD.pack(len(p) << 8 | t, f, sid) + p for t, f, sid, p in frames)


_BLOCK = hpack.Encoder().encode(REQUEST)
_LATE = {
    # (after, the frames then sent): stream 1 reset by the server, or
    # ended both ways, or stream 3 answered and stream 1 never opened.
    "data on a reset stream": ("reset", _frames((0x0, 0, 1, b"x"))),
    "headers on a reset stream": ("reset", _frames((0x1, 0x5, 1, _BLOCK))),
    "window update on a reset stream": ("reset", _frames((0x8, 0, 1, b"\0\0\0\1"))),
    "data on an ended stream": ("ended", _frames((0x0, 0, 1, b"x"))),
    "headers on an ended stream": ("ended", _frames((0x1, 0x5, 1, _BLOCK))),
    "rst on an ended stream": ("ended", _frames((0x3, 0, 1, b"\0\0\0\x08"))),
    "headers on a skipped stream id": ("skipped", _frames((0x1, 0x5, 1, _BLOCK))),
    "data on a skipped stream id": ("skipped", _frames((0x0, 0, 1, b"x"))),
    "a new stream": ("ended", _frames((0x1, 0x5, 5, _BLOCK))),
}


@pytest.mark.parametrize("case", sorted(_LATE))
@pytest.mark.parametrize("forgotten", [False, True])
def test_the_quiet_frame_dispatch_answers_as_h2s_own(case: str, forgotten: bool) -> None:
    """QuietConnection's _receive_frame (h2's without the trace line)
    gives h2's own events, errors and output for each frame that takes
    one of its branches: on a stream closed by a reset, by END_STREAM, or
    implicitly (a skipped id), whether h2 still keeps the stream or has
    forgotten it."""
    outcomes = []
    for server_cls in (StreamLengthConnection, QuietConnection):
        client, server = _pair(server_cls)
        after, late = _LATE[case]
        first = 3 if after == "skipped" else 1
        client.send_headers(first, REQUEST, end_stream=True)
        server.receive_data(client.data_to_send())
        if after == "reset":
            server.reset_stream(first)
        else:
            server.send_headers(first, [(":status", "200")], end_stream=True)
        server.data_to_send()
        if forgotten:
            _ = server.open_inbound_streams  # h2 forgets its closed streams
            assert first not in server.streams
        try:
            got: object = [type(e) for e in server.receive_data(late)]
        except h2.exceptions.ProtocolError as exc:
            got = (type(exc), exc.error_code)
        outcomes.append((got, server.data_to_send(), server.state_machine.state))
    assert outcomes[0] == outcomes[1]


def test_direct_frames_match_h2s_own() -> None:
    """The direct frame path puts the same bytes on the wire as h2's
    send_headers/send_data, leaves h2's windows and state machines where
    they leave them, and refuses a closed stream the same way."""
    wires = []
    windows = []
    for direct in (True, False):
        client, server = _pair()
        client.send_headers(1, REQUEST, end_stream=True)
        client.send_headers(3, REQUEST, end_stream=True)
        server.receive_data(client.data_to_send())
        encoder = server.encoder
        assert isinstance(encoder, FieldEncoder)
        frames = DirectFrames(server, encoder) if direct else PublicFrames(server)
        assert frames.direct is direct
        big = [(b":status", b"200"), (b"x-large", b"v" * 20000)]  # HEADERS + CONTINUATION
        frames.headers(1, [(b":status", b"200"), (b"content-type", b"text/plain")], False)
        frames.data(1, b"x" * 40000, True)
        frames.headers(3, big, True)
        windows.append(server.outbound_flow_control_window)
        wires.append(server.data_to_send())
        for sid in (1, 3):
            with pytest.raises(h2.exceptions.ProtocolError):
                frames.headers(sid, [(b":status", b"200")], True)
        events = client.receive_data(wires[-1])
        ended = [e.stream_id for e in events if isinstance(e, h2.events.StreamEnded)]
        assert ended == [1, 3]
    assert wires[0] == wires[1]
    assert windows[0] == windows[1] == 65535 - 40000


def test_direct_account_drives_the_windows() -> None:
    client, server = _pair()
    client.send_headers(1, REQUEST, end_stream=True)
    server.receive_data(client.data_to_send())
    frames = DirectFrames(server, FieldEncoder())
    frames.headers(1, [(b":status", b"200")], False)
    assert frames.window(1) == 65535
    frames.account(1, 1000, False)
    assert frames.window(1) == server.local_flow_control_window(1) == 64535
    frames.account(1, 10, True)
    with pytest.raises(h2.exceptions.ProtocolError):
        frames.account(1, 1, True)  # closed: as send_data refuses it
    assert frames.pending()
    with pytest.raises(h2.exceptions.StreamClosedError):
        frames.window(99)


def test_pending_header_bytes_sees_a_block_in_progress() -> None:
    client, server = _pair()
    client.send_headers(1, [*REQUEST, ("x", "y" * 3000)], end_stream=True)
    data = client.data_to_send()
    # Rewrite the HEADERS frame without END_HEADERS, as if CONTINUATION followed.
    head = bytearray(data[:9])
    head[4] &= ~0x4
    server.receive_data(bytes(head) + data[9:])
    assert pending_header_bytes(server) == len(data) - 9
    assert pending_header_bytes(_pair()[1]) == 0


def test_the_private_api_is_used_only_in_the_adapter() -> None:
    """No other serverio module names h2's private API."""
    names = (
        "_get_stream_by_id",
        "_data_to_send",
        "_begin_new_stream",
        "_initialize_content_length",
        "_track_content_length",
        "_headers_buffer",
    )
    net = Path(h2adapter.__file__).parent.parent
    for path in net.rglob("*.py"):
        if path.name == "h2adapter.py":
            continue
        text = path.read_text(encoding="utf-8")
        for name in names:
            assert name not in text, f"{path}: {name}"


async def test_a_non_numeric_content_length_is_a_stream_error(root: Path) -> None:
    """RFC 9113 §8.1.1: a malformed request is a stream error.  h2's own
    content-length check made ``content-length: nope`` a connection error
    (GOAWAY PROTOCOL_ERROR, every other stream lost); now it is
    RST_STREAM PROTOCOL_ERROR and the connection serves the next request."""
    cfg = make_config(root)
    async with h2_memory(cfg) as (client, srv, _):
        bad = client.request("/hello.txt", "POST", [("content-length", "nope")], end_stream=False)
        client.conn.send_data(bad, b"abc", end_stream=True)
        await client.flush()
        with trio.fail_after(5):
            (rb,) = await client.wait(bad)
            good = await client.get("/hello.txt")
    assert client.goaway is None
    assert rb.reset == ErrorCodes.PROTOCOL_ERROR
    assert good.status == 200
    assert srv.stats.h2.stream_errors == 1 and srv.stats.h2.protocol_errors == 0
