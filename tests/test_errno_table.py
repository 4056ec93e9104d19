"""The one errno -> status table, and what each kind of caller makes of it.

A file lookup answers the table's status; a listing skips an entry it cannot
open; a sidecar that cannot be opened is absent (the file itself is served).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from serverio.errors import errno_status

from .conftest import make_config, memory_connection

TABLE = [
    (errno.ENOENT, 404),
    (errno.ENOTDIR, 404),
    (errno.ELOOP, 404),  # a symlink loop, or O_NOFOLLOW on Linux and macOS
    (errno.EMLINK, 404),  # O_NOFOLLOW on FreeBSD
    (errno.EXDEV, 404),  # containment: would leave the root
    (errno.ENAMETOOLONG, 404),
    (errno.EINVAL, 404),
    (errno.EACCES, 403),
    (errno.EPERM, 403),
    (errno.EMFILE, 503),
    (errno.ENFILE, 503),
    (errno.ENOMEM, 503),
    (errno.EIO, 500),
    (None, 500),
]
if hasattr(errno, "EFTYPE"):  # NetBSD: O_NOFOLLOW on a symlink
    TABLE.append((errno.EFTYPE, 404))


@pytest.mark.parametrize(("code", "status"), TABLE)
def test_errno_status_table(code: int | None, status: int) -> None:
    assert errno_status(code) == status


async def test_symlink_loop_is_404_skipped_in_listing_and_absent_as_sidecar(
    root: Path, strategy: str
) -> None:
    os.symlink("loop-b", root / "loop-a")
    os.symlink("loop-a", root / "loop-b")
    (root / "style.css").write_text("body { color: red }\n" * 100)
    os.symlink("style.css.gz", root / "style.css.gz")  # a sidecar that loops on itself
    async with memory_connection(make_config(root)) as (client, _, _):
        looped = await client.get("/loop-a")
        listing = await client.get("/", headers="Accept: application/json\r\n")
        css = await client.get("/style.css", headers="Accept-Encoding: gzip\r\n")
    assert looped.status == 404
    assert listing.status == 200
    assert b"loop-a" not in listing.body and b"style.css.gz" not in listing.body
    assert css.status == 200
    # On-the-fly gzip, not the looping sidecar (no descriptor was ever opened
    # for it) and never a 500.
    assert css.header("content-encoding") == "gzip"
