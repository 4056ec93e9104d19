"""Helpers for the fleet tests: serverio replicas as real subprocesses."""

from __future__ import annotations

import http.client
import os
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Replica:
    proc: subprocess.Popen[str]
    urls: list[str]
    admin: str

    @property
    def url(self) -> str:
        return self.urls[0]


def _port_free_url(url: str) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port


def start(root: Path, *extra: str, admin: bool = False, listeners: int = 1) -> Replica:
    """Start ``python -m serverio`` on loopback (port 0 unless ``extra`` says)."""
    args = [sys.executable, "-m", "serverio", "-d", str(root), "-q", *extra]
    if not any(a.startswith("--listen") for a in extra):
        args.insert(3, "0")
    if admin:
        args += ["--admin-bind", "127.0.0.1:0"]
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy()
    )
    assert proc.stdout is not None
    urls = []
    for _ in range(listeners):
        line = proc.stdout.readline()
        assert line.startswith("Serving "), (line, proc.stderr.read() if proc.stderr else "")
        urls.append(line.split(" at ", 1)[1].strip())
    admin_url = ""
    if admin:
        admin_url = proc.stdout.readline().split(" at ", 1)[1].strip().removesuffix("metrics")
    return Replica(proc, urls, admin_url)


def stop(r: Replica) -> None:
    if r.proc.poll() is None:
        r.proc.kill()
    r.proc.communicate(timeout=30)


@contextmanager
def replicas(*roots: Path, extra: tuple[str, ...] = ()) -> Iterator[list[Replica]]:
    with ExitStack() as stack:
        out = []
        for root in roots:
            r = start(root, *extra)
            stack.callback(stop, r)
            out.append(r)
        yield out


def request(
    url: str, path: str, headers: dict[str, str] | None = None, method: str = "GET"
) -> tuple[int, dict[str, str], bytes]:
    host, port = _port_free_url(url)
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request(method, path, headers=headers or {})
        resp = conn.getresponse()
        body = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, body
    finally:
        conn.close()


def wait_for_etag(url: str, path: str, headers: dict[str, str] | None = None) -> str:
    """The ETag of ``path`` once the server has one (a large file's hash is
    computed in the background; until then responses carry none)."""
    deadline = time.monotonic() + 10
    while True:
        status, hs, _ = request(url, path, headers, method="HEAD")
        assert status == 200
        if "etag" in hs:
            return hs["etag"]
        assert time.monotonic() < deadline, "no ETag after 10 s"
        time.sleep(0.05)
