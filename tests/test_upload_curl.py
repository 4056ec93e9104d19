"""``curl -T`` against ``--upload`` on 127.0.0.1, with and without
``Expect: 100-continue`` (curl sends it for bodies over 1 MiB; forced with
``-H 'Expect: 100-continue'``, disabled with ``-H 'Expect:'``), and
refused uploads (413, 403) answered before the body is sent: no
``100 Continue``, and curl's ``%{size_upload}`` is 0.

Skipped, with the reason, where curl is not installed.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import trio

from .conftest import make_config, running_server

CURL = shutil.which("curl")
pytestmark = pytest.mark.skipif(CURL is None, reason="curl is not installed (apt install curl)")


async def _curl(*args: str) -> tuple[str, str]:
    """curl's ``-w`` line (status and bytes uploaded) and its verbose log."""
    assert CURL is not None
    with trio.fail_after(30):
        done = await trio.run_process(
            [CURL, "-sS", "-v", "-o", os.devnull, "-w", "%{http_code} %{size_upload}", *args],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")[-2000:]
    return done.stdout.decode(), done.stderr.decode("utf-8", "replace")


def _continued(log: str) -> bool:
    return any(line.startswith("< HTTP/1.1 100") for line in log.splitlines())


@pytest.mark.parametrize(
    ("size", "expect", "continued"),
    [
        (3 << 20, None, True),  # curl's own Expect for a body over 1 MiB
        (3 << 20, "Expect:", False),  # disabled: the body follows the head at once
        (500, "Expect: 100-continue", True),  # forced on a small body
        (500, "Expect:", False),
        (500, None, None),  # curl's choice (7.x sends it on every PUT): 100 iff it asked
    ],
)
async def test_curl_put_with_and_without_expect(
    tmp_path: Path, size: int, expect: str | None, continued: bool | None
) -> None:
    root = tmp_path / "www"
    root.mkdir()
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(size))
    cfg = make_config(root, upload=True, min_free_space=0)
    async with running_server(cfg) as (_, port):
        extra = ["-H", expect] if expect is not None else []
        out, log = await _curl("-T", str(src), *extra, f"http://127.0.0.1:{port}/put.bin")
    assert out == f"201 {size}"
    asked = "> Expect: 100-continue" in log
    assert continued is None or asked is continued
    assert _continued(log) is asked  # 100 Continue exactly when asked for
    assert (root / "put.bin").read_bytes() == src.read_bytes()


@pytest.mark.parametrize("status", [413, 403])
async def test_a_refused_upload_is_answered_before_the_body_is_sent(
    tmp_path: Path, status: int
) -> None:
    root = tmp_path / "www"
    (root / "ro").mkdir(parents=True)
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(3 << 20))
    cfg = make_config(
        root,
        upload=True,
        min_free_space=0,
        max_upload_size=1 << 20,
        writable=(("/up/**", ("put",)),),
    )
    (root / "up").mkdir()
    target = "/up/big.bin" if status == 413 else "/ro/big.bin"
    async with running_server(cfg) as (_, port):
        for expect in ([], ["-H", "Expect: 100-continue"]):
            out, log = await _curl("-T", str(src), *expect, f"http://127.0.0.1:{port}{target}")
            assert out == f"{status} 0", log[-2000:]  # not a byte of the body was sent
            assert not _continued(log)
    assert not (root / "up" / "big.bin").exists() and not (root / "ro" / "big.bin").exists()
