"""The filesystem's reasons and the one reason -> status table, and what each
kind of caller makes of them.

The filesystem says why (serverio.model.errno_reason: an errno becomes a
Reason, never a status); the HTTP layer says which status
(serverio.model.reasons.REASON_STATUS).  A file lookup answers the table's
status; a listing skips an entry it cannot open; a sidecar that cannot be
opened is absent (the file itself is served).
"""

from __future__ import annotations

import ast
import errno
import os
from pathlib import Path

import pytest

import serverio.fs.prepare
from serverio.model import Reason, errno_reason
from serverio.model.reasons import REASON_STATUS, reason_status

from .conftest import make_config, memory_connection

R = Reason
TABLE = [
    (errno.ENOENT, R.NOT_FOUND, 404),
    (errno.ENOTDIR, R.NOT_FOUND, 404),
    (errno.ENAMETOOLONG, R.NOT_FOUND, 404),
    (errno.EINVAL, R.NOT_FOUND, 404),
    (errno.ELOOP, R.FORBIDDEN_NAME, 404),  # a symlink loop, or O_NOFOLLOW on Linux and macOS
    (errno.EMLINK, R.FORBIDDEN_NAME, 404),  # O_NOFOLLOW on FreeBSD
    (errno.EXDEV, R.FORBIDDEN_NAME, 404),  # containment: would leave the root
    (errno.EACCES, R.DENIED, 403),
    (errno.EPERM, R.DENIED, 403),
    (errno.EMFILE, R.EXHAUSTED, 503),
    (errno.ENFILE, R.EXHAUSTED, 503),
    (errno.ENOMEM, R.EXHAUSTED, 503),
    (errno.EIO, R.FAILED, 500),
    (None, R.FAILED, 500),
]
if hasattr(errno, "EFTYPE"):  # NetBSD: O_NOFOLLOW on a symlink
    TABLE.append((errno.EFTYPE, R.FORBIDDEN_NAME, 404))


@pytest.mark.parametrize(("code", "reason", "status"), TABLE)
def test_errno_reason_and_status_table(code: int | None, reason: Reason, status: int) -> None:
    assert errno_reason(code) is reason
    assert reason_status(errno_reason(code)) == status


def test_every_reason_has_one_status() -> None:
    assert set(REASON_STATUS) == set(Reason)
    assert REASON_STATUS[Reason.NOT_REGULAR] == 404  # a FIFO, a socket, a device


def test_the_filesystem_layer_names_no_status() -> None:
    # fs/prepare.py says why (a Reason, an errno); the status is the HTTP
    # layer's: no status literal, no import of the status table.
    source = Path(serverio.fs.prepare.__file__).read_text()
    tree = ast.parse(source)
    numbers = {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, int)
    }
    assert not numbers & {403, 404, 500, 503}
    imported = {
        f"{node.module}.{alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert imported  # the walk saw the imports
    assert not {name for name in imported if "reasons" in name or "errno_status" in name}


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
