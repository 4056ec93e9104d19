"""Where a pooled request's descriptors are closed: in the blocking hop."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import trio

import serverio.fs.prepare as prepare_module
import serverio.model as model_module

from .conftest import connect, make_config, running_server

pytestmark = pytest.mark.slow


async def test_pooled_small_file_descriptor_is_closed_in_the_hop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # close(2) of a file on a network or FUSE filesystem is a round trip to
    # it (NFS CLOSE, FUSE FLUSH); with an fs pool the event loop must not
    # make it.  A small body is read whole in the hop, which then closes it.
    (tmp_path / "small.txt").write_bytes(b"s" * 1024)
    (tmp_path / "small.txt.gz").write_bytes(b"g" * 100)
    closed_on: list[str] = []
    real_close = model_module.close_fd

    def recording_close(fd: int) -> None:
        closed_on.append(threading.current_thread().name)
        real_close(fd)

    monkeypatch.setattr(prepare_module, "close_fd", recording_close)
    monkeypatch.setattr(model_module, "close_fd", recording_close)
    cfg = make_config(tmp_path, fs_workers=2, fs_queue=8, file_cache_size=0)
    loop_thread = threading.current_thread().name
    async with running_server(cfg) as (_, port):
        client = await connect(port)
        with trio.fail_after(10):
            for path, headers in (
                ("/small.txt", ""),
                ("/small.txt", "Accept-Encoding: gzip\r\n"),
                ("/small.txt", "Range: bytes=0-9\r\n"),
            ):
                closed_on.clear()
                r = await client.get(path, headers=headers)
                assert r.status in (200, 206)
                assert closed_on, "no descriptor was closed"
                assert loop_thread not in closed_on, (path, headers, closed_on)
        await client.stream.aclose()
