"""The bench's HTTP/2 floor baseline (issue 47): bench/baselines/h2_floor.py,
its server entry, the harness probe and an h2c exchange against it."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import h2.config
import h2.connection
import h2.events

from bench import fixtures
from bench.servers import KINDS, SERVERS, HarnessEnv, running
from bench.workloads import WORKLOADS, probe


def _env() -> HarnessEnv:
    return HarnessEnv(repo=Path.cwd(), python=sys.executable, peers_python=Path("/x"), nginx=None)


def _h2c_get(port: int, paths: int) -> list[tuple[int, bytes]]:
    """``paths`` GETs on one h2c connection, all in flight: (status, body) each."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(header_encoding=None))
    conn.initiate_connection()
    sids = []
    for i in range(paths):
        sid = conn.get_next_available_stream_id()
        fields = [(":method", "GET"), (":scheme", "http"), (":authority", "a"), (":path", f"/{i}")]
        conn.send_headers(sid, fields, end_stream=True)
        sids.append(sid)
    status = dict.fromkeys(sids, 0)
    body = {sid: bytearray() for sid in sids}
    ended: set[int] = set()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(conn.data_to_send())
        while len(ended) < paths:
            data = sock.recv(65536)
            assert data, "the floor closed the connection"
            for ev in conn.receive_data(data):
                if isinstance(ev, h2.events.ResponseReceived):
                    status[ev.stream_id or 0] = int(dict(ev.headers or [])[b":status"])
                elif isinstance(ev, h2.events.DataReceived):
                    body[ev.stream_id or 0] += ev.data or b""
                    conn.acknowledge_received_data(
                        ev.flow_controlled_length or 0, ev.stream_id or 0
                    )
                elif isinstance(ev, h2.events.StreamEnded):
                    ended.add(ev.stream_id or 0)
            sock.sendall(conn.data_to_send())
    return [(status[s], bytes(body[s])) for s in sids]


def test_the_h2_floor_entry_is_for_the_1k_h2_workload_only() -> None:
    spec = SERVERS["h2-floor"]
    assert spec.kind == "h2-floor" and "h2" in spec.tags
    assert spec.only_workloads == frozenset({"1k-h2"})
    assert WORKLOADS["1k-h2"].file == "1k.bin"


def test_the_h2_floor_passes_the_probe_and_answers_every_stream_with_the_file(
    tmp_path: Path,
) -> None:
    fixture = fixtures.create(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    spec = SERVERS["h2-floor"]
    plan = KINDS["h2-floor"].plan(spec, _env(), tmp_path, tmp_path / "1k.bin", work)
    assert not isinstance(plan, str)
    assert isinstance(KINDS["h2-floor"].plan(spec, _env(), tmp_path, None, work), str)
    with running(spec, plan, work / "server.log", cpu=None, timeout_s=20) as rs:
        result = probe(WORKLOADS["1k-h2"], rs.port, fixture)  # HTTP/1.1, as for every server
        assert result.ok, result.reason
        answers = _h2c_get(rs.port, 8)
    body = (tmp_path / "1k.bin").read_bytes()
    assert answers == [(200, body)] * 8
