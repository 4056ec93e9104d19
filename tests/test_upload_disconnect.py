"""A client that disconnects after half of a 100 MiB upload (issue 29's
target), on real sockets on 127.0.0.1: no file, no temporary, no
descriptor and no pool token left, and /metrics says so (the aborted
upload and its removed temporary counted, the write pool's running gauge
back to 0).  A PUT and an upload-form POST; 50 MiB sent, then a close.
Also the access log's line for the form and the metrics of one that
completes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from serverio.http.target import WRITE_TEMP_PREFIX

from .conftest import connect, make_config, open_fd_count, running_server, wait_until
from .test_metrics import admin_for, admin_get, samples
from .test_upload_form import BOUNDARY

HALF = 50 << 20
WHOLE = 100 << 20
CHUNK = b"\xa5" * (1 << 20)


def temps(root: Path) -> list[str]:
    return [n for _, _, names in os.walk(root) for n in names if n.startswith(WRITE_TEMP_PREFIX)]


def _head(kind: str) -> bytes:
    if kind == "put":
        return f"PUT /half.bin HTTP/1.1\r\nHost: t\r\nContent-Length: {WHOLE}\r\n\r\n".encode()
    part = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="half.bin"\r\n\r\n'
    ).encode()
    return (
        f"POST / HTTP/1.1\r\nHost: t\r\nOrigin: http://t\r\n"
        f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\n"
        f"Content-Length: {WHOLE + len(part)}\r\n\r\n"
    ).encode() + part


@pytest.mark.parametrize("kind", ["put", "form"])
async def test_a_client_gone_after_half_of_100_mib_leaves_nothing(
    tmp_path: Path, kind: str
) -> None:
    root = tmp_path / "www"
    root.mkdir()
    cfg = make_config(root, upload=True, min_free_space=0, max_upload_size=200 << 20)
    with trio.fail_after(60):
        async with running_server(cfg) as (srv, port), admin_for(srv) as admin:
            up = srv.services.uploads
            assert up is not None
            fds = open_fd_count()
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            await stream.send_all(_head(kind))
            for _ in range(HALF // len(CHUNK)):
                await stream.send_all(CHUNK)
            await wait_until(lambda: len(temps(root)) == 1, 10)  # being written
            await stream.aclose()  # gone, half-way
            await wait_until(lambda: srv.stats.writes.aborted == 1, 10)
            await wait_until(lambda: up.pool.running == 0 and up.in_flight == 0, 10)
            assert temps(root) == [] and os.listdir(root) == []
            await wait_until(lambda: open_fd_count() <= fds, 5)  # the server side's close
            assert open_fd_count() == fds
            _, _, body = await admin_get(admin, "/metrics")
    m = samples(body.decode())
    assert m[("serverio_writes_aborted_total", ())] == 1
    assert m[("serverio_writes_temps_removed_total", ())] == 1
    assert m[("serverio_writes_files_total", ())] == 0
    assert m[("serverio_pool_running", (("pool", "write"),))] == 0
    assert m[("serverio_pool_queued", (("pool", "write"),))] == 0


async def test_a_completed_form_is_counted_and_logged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "www"
    root.mkdir()
    from .test_upload_form import form_body

    body = form_body(
        ("file", "a.bin", b"a" * 1000), ("file", "b.bin", b"b" * 24), ("mkdir", None, b"d")
    )
    head = (
        f"POST / HTTP/1.1\r\nHost: t\r\nOrigin: http://t\r\n"
        f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    cfg = make_config(root, upload=True, min_free_space=0).evolve(access_log="common")
    with trio.fail_after(30):
        async with running_server(cfg) as (srv, port), admin_for(srv) as admin:
            client = await connect(port)
            await client.send_raw(head + body)
            r = await client.read_response()
            assert r.status == 303
            await client.stream.aclose()
            _, _, text = await admin_get(admin, "/metrics")
    m = samples(text.decode())
    assert m[("serverio_writes_files_total", ())] == 2
    assert m[("serverio_writes_bytes_total", ())] == 1024
    assert m[("serverio_writes_directories_total", ())] == 1
    assert m[("serverio_writes_aborted_total", ())] == 0
    logged = capsys.readouterr()
    assert '"POST / HTTP/1.1" 303' in logged.out + logged.err
