"""tuspy (the tus 1.0 Python client, PyPI ``tuspy``) as the judge of
resumable uploads, against ``python -m serverio --upload`` processes.

A file is uploaded in 8 MiB chunks; the client process is killed
mid-way, then the server with SIGKILL; a new server on the same port and
directory (the same ``--secret-file``) takes the resumed upload, which
ends byte-identical.  Nothing is at the target name before the last
chunk; no temporary is left after.  The CI size is 64 MiB (the 1 GiB
case runs in bench/resumable.py).
"""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from serverio.http.target import WRITE_TEMP_PREFIX

from .fleet import Replica, start, stop

tusclient = pytest.importorskip("tusclient", reason="tuspy is in the [test] extra")

CHUNK = 8 << 20
# 64 MiB in CI; SERVERIO_TUS_MIB=1024 runs the 1 GiB case by hand.
SIZE = int(os.environ.get("SERVERIO_TUS_MIB", "64")) << 20

# The client: uploads chunk by chunk, printing the offset after each;
# resumable through its URL storage (tuspy's FileStorage, keyed by the
# file's fingerprint).
CLIENT = r"""
import sys
from tusclient import client
from tusclient.storage.filestorage import FileStorage
url, path, store, stop_at = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
c = client.TusClient(url)
up = c.uploader(path, chunk_size=@CHUNK@, store_url=True, url_storage=FileStorage(store),
                metadata={"filename": "big.bin"}, upload_checksum=True, retries=0)
print("start", up.offset, flush=True)
while up.offset < min(stop_at, up.get_file_size()):
    up.upload_chunk()
    print("offset", up.offset, flush=True)
print("done", flush=True)
""".replace("@CHUNK@", str(CHUNK))


def _secret(tmp_path: Path) -> Path:
    secret = tmp_path / "secret"
    secret.write_bytes(os.urandom(32).hex().encode())
    return secret


def _server(root: Path, secret: Path, port: int = 0) -> Replica:
    return start(
        root,
        "--upload",
        "--min-free-space",
        "0",
        "--secret-file",
        str(secret),
        "--listen",
        f"127.0.0.1:{port}",
    )


def _temps(root: Path) -> list[str]:
    return [n for _, _, names in os.walk(root) for n in names if n.startswith(WRITE_TEMP_PREFIX)]


def _client(url: str, src: Path, store: Path, stop_at: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CLIENT, url, str(src), str(store), str(stop_at)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _port_free(port: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
                return
            except OSError:
                time.sleep(0.1)
    raise AssertionError(f"port {port} still taken")


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_tuspy_resumes_across_a_killed_client_and_a_sigkilled_server(tmp_path: Path) -> None:
    root = tmp_path / "www"
    (root / "incoming").mkdir(parents=True)
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(SIZE))
    store = tmp_path / "tus-urls.json"
    secret = _secret(tmp_path)
    server = _server(root, secret)
    port = int(server.url.rsplit(":", 1)[1].strip("/"))
    endpoint = server.url.rstrip("/") + "/incoming/"
    target = root / "incoming" / "big.bin"
    try:
        # 1. The client is killed after its third chunk.
        proc = _client(endpoint, src, store, SIZE)
        assert proc.stdout is not None
        offsets = []
        for line in proc.stdout:
            if line.startswith("offset"):
                offsets.append(int(line.split()[1]))
                if len(offsets) == 3:
                    proc.kill()
                    break
        proc.communicate(timeout=30)
        assert offsets == [CHUNK, 2 * CHUNK, 3 * CHUNK]
        assert not target.exists()  # nothing at the target before completion
        # 2. A second client run goes on, then the server is SIGKILLed.
        proc = _client(endpoint, src, store, 5 * CHUNK)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-2000:]
        assert "start 25165824" in out  # resumed at the durable offset, 3 chunks
        assert not target.exists()
    finally:
        server.proc.send_signal(signal.SIGKILL)
        stop(server)
    # 3. A new server on the same port and directory resumes it.
    _port_free(port)
    server = _server(root, secret, port)
    try:
        proc = _client(endpoint, src, store, SIZE)
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
        assert f"start {5 * CHUNK}" in out
        assert "done" in out
    finally:
        stop(server)
    want = hashlib.sha256(src.read_bytes()).hexdigest()
    assert hashlib.sha256(target.read_bytes()).hexdigest() == want
    assert _temps(root) == []
