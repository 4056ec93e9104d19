"""Access log: formats, escaping, request id, --access-log-file + SIGHUP."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from serverio import AccessLog, Server
from testkit import simulation

from .conftest import make_config, memory_connection
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
