"""bench.copyceiling moves every byte it counts: the reader's total must equal the sender's."""

from __future__ import annotations

import shutil
import sys

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
