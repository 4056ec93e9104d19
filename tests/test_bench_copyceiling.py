"""The ceiling tools: bench.copyceiling moves every byte it counts (the reader's total
must equal the sender's); bench.h2floor's frames-only server satisfies h2load."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from bench import copyceiling

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or shutil.which("dd") is None,
    reason="needs os.sendfile/os.preadv on sockets and dd (Linux)",
)


def test_both_ways_move_bytes_and_report_cpu() -> None:
    rows = copyceiling.measure(1, 0.2, 2, (65536,), (None, None))
    assert [(mode, piece) for mode, piece, _ in rows] == [
        ("sendfile", 524288),
        ("read+write", 65536),
    ]
    for _, _, med in rows:
        assert med["mib_s"] > 0
        assert med["user"] >= 0 and med["sys"] >= 0


@pytest.mark.skipif(shutil.which("h2load") is None, reason="needs h2load (nghttp2-client)")
def test_frames_only_h2_server_serves_h2load_whole_responses(tmp_path: Path) -> None:
    from bench import h2floor

    path = tmp_path / "8m.bin"
    path.write_bytes(os.urandom(h2floor.FILE_SIZE))
    got = h2floor.once(path, 65536, 2, 1, None)
    assert got["rps"] > 0
    assert got["errors"] == 0  # h2load saw no protocol or flow-control error
