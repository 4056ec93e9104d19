"""HTTP/2 robustness, round 3: body-length stream errors, WINDOW_UPDATE
floods, descriptor budgets and window stalls, nosniff, raw query bytes.
In-memory streams with h2 as the (attacking) client."""

from __future__ import annotations

from pathlib import Path

import h2.settings
import trio
import trio.testing
from h2.errors import ErrorCodes

from .conftest import make_config
from .h2client import h2_memory

S = h2.settings.SettingCodes


# ---------------------------------------------------------------- content-length


async def test_body_length_mismatch_resets_only_that_stream(root: Path) -> None:
    """RFC 9113 §8.1.1: DATA that disagrees with content-length makes the
    request malformed, a *stream* error.  h2's own check raised a
    connection error (GOAWAY PROTOCOL_ERROR) and killed the download on
    the other stream."""
    cfg = make_config(root)
    # Small windows: the download is still in flight when the bad request ends.
    async with h2_memory(cfg, settings={S.INITIAL_WINDOW_SIZE: 16384}) as (client, srv, _):
        big = client.request("/big.bin")
        await client.flush()
        await client.pump()  # the download has started
        short = client.request(
            "/hello.txt", "POST", [("content-length", "5")], end_stream=False
        )
        long = client.request("/hello.txt", "POST", [("content-length", "2")], end_stream=False)
        client.conn.send_data(short, b"abc", end_stream=True)
        client.conn.send_data(long, b"abcd", end_stream=True)
        await client.flush()
        rs, rl, rb = await client.wait(short, long, big)
    assert client.goaway is None
    assert rs.reset == ErrorCodes.PROTOCOL_ERROR and rl.reset == ErrorCodes.PROTOCOL_ERROR
    assert rb.status == 200 and len(rb.body) == 300_000 and rb.ended
    assert bytes(rb.body) == (root / "big.bin").read_bytes()
    assert srv.stats.h2_stream_errors == 2 and srv.stats.h2_protocol_errors == 0
