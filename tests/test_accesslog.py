"""Access log: formats, escaping, request id, --access-log-file + SIGHUP."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import trio

from serverio import AccessLog, Server
from serverio.live.script import sse_reload
from testkit import simulation

from .conftest import make_config, memory_connection, wait_until
from .h2client import h2_memory


async def _one_request(root: Path, fmt: str, headers: str) -> str:
    out = io.StringIO()
    cfg = make_config(root)
    srv = Server(cfg, access_log=AccessLog(fmt, out))
    async with memory_connection(cfg, server=srv) as (client, _, _):
        r = await client.get("/hello.txt", headers)
        assert r.status == 200
    return out.getvalue()


async def test_json_record_fields(root: Path) -> None:
    line = await _one_request(
        root,
        "json",
        "User-Agent: curl/8\r\nReferer: http://r/\r\nX-Request-Id: abc-123\r\n",
    )
    assert line.endswith("\n") and line.count("\n") == 1
    rec = json.loads(line)
    assert set(rec) >= {
        "time", "client", "method", "target", "status", "bytes", "duration",
        "user_agent", "referer", "request_id",
    }  # fmt: skip
    assert rec["method"] == "GET" and rec["target"] == "/hello.txt" and rec["status"] == 200
    assert rec["bytes"] == 12 and rec["client"] == "memory"
    assert rec["user_agent"] == "curl/8" and rec["referer"] == "http://r/"
    assert rec["request_id"] == "abc-123"
    assert isinstance(rec["duration"], float) and rec["duration"] >= 0
    assert rec["time"].endswith("Z")


async def test_http2_record_has_the_same_fields_as_http11(root: Path) -> None:
    out = io.StringIO()
    cfg = make_config(root)
    srv = Server(cfg, access_log=AccessLog("json", out))
    async with h2_memory(cfg, server=srv) as (client, _, _):
        r = await client.get(
            "/hello.txt",
            [("user-agent", "curl/8"), ("referer", "http://r/"), ("x-request-id", "abc-123")],
        )
        assert r.status == 200
    rec = json.loads(out.getvalue())
    assert rec["version"] == "2.0"
    assert rec["method"] == "GET" and rec["target"] == "/hello.txt" and rec["status"] == 200
    assert rec["bytes"] == 12 and rec["client"] == "memory"
    assert rec["user_agent"] == "curl/8" and rec["referer"] == "http://r/"
    assert rec["request_id"] == "abc-123"


async def test_json_without_request_id_is_null(root: Path) -> None:
    rec = json.loads(await _one_request(root, "json", ""))
    assert rec["request_id"] is None and rec["user_agent"] is None


@pytest.mark.parametrize("fmt", ["common", "combined", "json"])
async def test_control_characters_escaped(root: Path, fmt: str) -> None:
    hostile = 'x\x1b[2J\x7f"\\\t\xff'
    headers = f"User-Agent: {hostile}\r\nReferer: {hostile}\r\nX-Request-Id: {hostile}\r\n"
    out = io.StringIO()
    cfg = make_config(root)
    srv = Server(cfg, access_log=AccessLog(fmt, out))
    async with memory_connection(cfg, server=srv) as (client, _, _):
        await client.send_raw(
            b"GET /hello.txt?q=%1b HTTP/1.1\r\nHost: t\r\n" + headers.encode("latin-1") + b"\r\n"
        )
        r = await client.read_response()
        assert r.status == 200
    text = out.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n")
    line = text[:-1]
    for ch in ("\x1b", "\x7f", "\t", "\r"):
        assert ch not in line, repr(line)
    assert line.isascii() and line.isprintable()
    if fmt == "combined":
        assert line.endswith(r'"x\x1b[2J\x7f\x22\x5c\x09\xff"')
    if fmt == "json":
        rec = json.loads(line)
        assert rec["user_agent"] == hostile and rec["request_id"] == hostile  # lossless


@pytest.mark.skipif(simulation.WINDOWS_SHAPED, reason="Windows has no SIGHUP (no log reopen)")
def test_access_log_file_reopened_on_sighup(root: Path, tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "serverio", "0", "-d", str(root), "--access-log", "json",
         "--access-log-file", str(log)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().split(" at ", 1)[1].strip()
        with urllib.request.urlopen(url + "hello.txt", timeout=10) as resp:
            resp.read()
        rotated = tmp_path / "access.log.1"
        log.rename(rotated)  # what logrotate does before its postrotate HUP
        proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while not log.exists():  # reopened by name: a new, empty file appears
            assert time.monotonic() < deadline
            time.sleep(0.02)
        with urllib.request.urlopen(url + "index.html", timeout=10) as resp:
            resp.read()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
    assert proc.returncode == 0
    assert [json.loads(x)["target"] for x in rotated.read_text().splitlines()] == ["/hello.txt"]
    assert [json.loads(x)["target"] for x in log.read_text().splitlines()] == ["/index.html"]
    assert "GET" not in err  # nothing went to stderr


def test_log_level_is_validated(root: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "serverio", "-d", str(root), "--log-level", "loud"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2 and "--log-level" in r.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--access-log-file", "/nonexistent/dir/a.log"], "does not exist"),
        # A directory: EISDIR on POSIX; Windows' C runtime says EACCES.
        (
            ["--access-log-file", "/tmp"],
            "cannot open --access-log-file /tmp: "
            + ("Permission denied" if os.name == "nt" else "Is a directory"),
        ),
    ],
)
def test_access_log_file_errors_exit_2(root: Path, args: list[str], needle: str) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "serverio", "0", "-d", str(root), *args],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("serverio: error:") and needle in lines[0]


async def _cut_download(root: Path, fmt: str) -> tuple[str, Server]:
    """A client that reads the start of an 8 MB download, then resets."""
    (root / "big.bin").write_bytes(b"b" * 8_000_000)
    out = io.StringIO()
    cfg = make_config(root).evolve(host="127.0.0.1", port=0)
    srv = Server(cfg, access_log=AccessLog(fmt, out))
    async with trio.open_nursery() as nursery:
        await nursery.start(srv.serve)
        port = srv.addresses()[0][1]
        sock = trio.socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        await sock.connect(("127.0.0.1", port))
        await sock.send(b"GET /big.bin HTTP/1.1\r\nHost: t\r\nUser-Agent: t\r\n\r\n")
        got = b""
        while b"\r\n\r\n" not in got or got.endswith(b"\r\n\r\n"):
            chunk = await sock.recv(100)  # until the head and a body byte are in
            assert chunk, got
            got += chunk
        # RST at close (SO_LINGER 0): the server's next write fails at once.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
        await wait_until(lambda: "big.bin" in out.getvalue(), limit=10)
        srv.shutdown()
    return out.getvalue(), srv


async def test_cut_off_download_is_logged_with_the_bytes_sent(root: Path) -> None:
    text, srv = await _cut_download(root, "combined")
    [line] = text.splitlines()
    m = re.search(r'"GET /big\.bin HTTP/1\.1" 200 (\d+) "-" "t" cut$', line)
    assert m is not None, line
    assert 0 < int(m.group(1)) < 8_000_000  # what went out, not the Content-Length
    # Not a completed response: the counters keep telling them apart.
    assert srv.stats.responses.completed == 0 and srv.stats.conns.resets == 1


async def test_cut_off_download_json_marker(root: Path) -> None:
    text, _ = await _cut_download(root, "json")
    record = json.loads(text)
    assert record["cut"] is True and record["status"] == 200
    assert 0 < record["bytes"] < 8_000_000


async def test_complete_responses_have_no_cut_marker(root: Path) -> None:
    common = await _one_request(root, "common", "")
    assert common.rstrip("\n").endswith('"GET /hello.txt HTTP/1.1" 200 12')
    assert "cut" not in json.loads(await _one_request(root, "json", ""))


async def test_event_stream_is_logged_when_it_ends(root: Path) -> None:
    out = io.StringIO()
    cfg = make_config(root, watch=True).evolve(host="127.0.0.1", port=0)
    srv = Server(cfg, access_log=AccessLog("common", out))
    async with trio.open_nursery() as nursery:
        await nursery.start(srv.serve)
        port = srv.addresses()[0][1]
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(b"GET /.serverio/events HTTP/1.1\r\nHost: t\r\n\r\n")
        got = b""
        while b"\r\n\r\n" not in got or len(got.split(b"\r\n\r\n", 1)[1]) == 0:
            got += await stream.receive_some(65536)
        assert out.getvalue() == ""  # not while it runs
        await stream.aclose()  # the client leaves: the stream ends
        await wait_until(lambda: "/.serverio/events" in out.getvalue(), limit=10)
        srv.shutdown()
    [line] = out.getvalue().splitlines()
    m = re.search(r'"GET /\.serverio/events HTTP/1\.1" 200 (\d+)$', line)
    assert m is not None, line
    assert int(m.group(1)) == len(got.split(b"\r\n\r\n", 1)[1])  # the body bytes it got


async def test_http2_stream_reset_mid_body_is_logged_cut(root: Path) -> None:
    (root / "big.bin").write_bytes(b"b" * 8_000_000)
    out = io.StringIO()
    cfg = make_config(root)
    srv = Server(cfg, access_log=AccessLog("json", out))
    async with h2_memory(cfg, server=srv, ack=False) as (client, _, _):
        sid = client.request("/big.bin")
        await client.flush()
        r = client.responses[sid]
        with trio.fail_after(10):
            while len(r.body) < 16384:  # the first window's worth, then it stalls
                assert await client.pump()
            client.conn.reset_stream(sid)  # the client gives up (CANCEL)
            await client.flush()
            await wait_until(lambda: "big.bin" in out.getvalue())
    rec = json.loads(out.getvalue())
    assert rec["version"] == "2.0" and rec["status"] == 200 and rec["cut"] is True
    assert len(r.body) <= rec["bytes"] < 8_000_000


# Live-reload event streams over memory streams, both protocols: one line
# each, written when the stream ends (never while it runs), status 200,
# the body bytes the client got, a duration; not marked cut.

EVENTS = "/.serverio/events"


async def test_http11_event_stream_is_logged_when_it_ends_memory(root: Path) -> None:
    out = io.StringIO()
    cfg = make_config(root, watch=True)
    srv = Server(cfg, access_log=AccessLog("json", out))
    async with memory_connection(cfg, server=srv) as (client, _, _):
        await client.send_raw(f"GET {EVENTS} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
        got = b""
        with trio.fail_after(10):
            while b"\r\n\r\n" not in got or not got.split(b"\r\n\r\n", 1)[1]:
                got += await client.stream.receive_some(65536)
            await trio.sleep(0.05)
            assert out.getvalue() == ""  # not while it runs
            await client.stream.aclose()  # the client leaves: the stream ends
            await wait_until(lambda: EVENTS in out.getvalue())
    rec = json.loads(out.getvalue())
    assert rec["version"] == "1.1" and rec["target"] == EVENTS and rec["status"] == 200
    assert rec["bytes"] == len(got.split(b"\r\n\r\n", 1)[1]) > 0  # the body bytes it got
    assert rec["duration"] >= 0.05 and "cut" not in rec


@pytest.mark.parametrize("end", ["reset", "drain"])
async def test_http2_event_stream_is_logged_when_it_ends(root: Path, end: str) -> None:
    out = io.StringIO()
    cfg = make_config(root, watch=True)
    srv = Server(cfg, access_log=AccessLog("json", out))
    async with h2_memory(cfg, server=srv) as (client, _, conn):
        sid = client.request(EVENTS, headers=[("user-agent", "t/1")])
        await client.flush()
        r = client.responses[sid]
        with trio.fail_after(10):
            while not r.body:
                assert await client.pump()
            assert srv.live is not None
            srv.live.publish({"p.html": "changed"})  # one more DATA frame
            while sse_reload() not in r.body:
                assert await client.pump()
            assert out.getvalue() == ""  # not while it runs
            if end == "reset":
                client.conn.reset_stream(sid)  # the client gives up (CANCEL)
                await client.flush()
            else:
                conn.drain()  # END_STREAM, then GOAWAY
                await client.until_closed()
                assert r.ended and r.reset is None
            await wait_until(lambda: EVENTS in out.getvalue())
    [line] = out.getvalue().splitlines()
    rec = json.loads(line)
    assert rec["version"] == "2.0" and rec["target"] == EVENTS and rec["status"] == 200
    assert rec["bytes"] == len(r.body) and rec["user_agent"] == "t/1"
    assert rec["duration"] >= 0 and "cut" not in rec


async def test_head_of_the_event_stream_is_logged_on_both_protocols(root: Path) -> None:
    out = io.StringIO()
    cfg = make_config(root, watch=True)
    srv = Server(cfg, access_log=AccessLog("common", out))
    async with memory_connection(cfg, server=srv) as (client, _, _):
        assert (await client.get(EVENTS, method="HEAD")).status == 200
    async with h2_memory(cfg, server=srv) as (h2c, _, _):
        with trio.fail_after(5):
            assert (await h2c.get(EVENTS, method="HEAD")).status == 200
    lines = out.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert lines[0].endswith(f'"HEAD {EVENTS} HTTP/1.1" 200 -')  # common: no body
    assert lines[1].endswith(f'"HEAD {EVENTS} HTTP/2.0" 200 -')
    assert srv.stats.responses.completed == 2
