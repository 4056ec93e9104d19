"""bench.h2floor's frames-only h2c server satisfies h2load: whole responses, no errors."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from bench import h2floor

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or shutil.which("h2load") is None,
    reason="needs os.preadv (Linux) and h2load (nghttp2-client)",
)


def test_frames_only_h2_server_serves_h2load_whole_responses(tmp_path: Path) -> None:
    path = tmp_path / "8m.bin"
    path.write_bytes(os.urandom(h2floor.FILE_SIZE))
    got = h2floor.once(path, 65536, 2, 1, None)
    assert got["rps"] > 0
    assert got["errors"] == 0  # h2load saw no protocol or flow-control error
