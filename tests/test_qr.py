"""--qr: the QR code of the URL (serverio.ops.qr), read back by an
independent decoder (zxing-cpp) from an image of the printed text."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from serverio.ops.qr import QUIET, qr_matrix, qr_text

zxingcpp = pytest.importorskip("zxingcpp")
Image = pytest.importorskip("PIL.Image")

URLS = [
    "http://192.168.1.20:8000/",
    "https://[fd00::1234:5678]:8443/",
    "http://10.0.0.7:8000/" + "a/b-c_d~e%20f/" * 12,  # ~190 bytes
]
LIGHT = {
    "\u2588": (True, True),
    "\u2580": (True, False),
    "\u2584": (False, True),
    " ": (False, False),
}


def _from_text(text: str) -> list[list[bool]]:
    """The modules (True = dark) the half blocks show: light drawn as blocks."""
    rows: list[list[bool]] = []
    for line in text.splitlines():
        cells = [LIGHT[c] for c in line]
        rows.append([not top for top, _ in cells])
        rows.append([not bottom for _, bottom in cells])
    return rows


def _decode(modules: list[list[bool]]) -> str:
    scale = 6
    img = Image.new("L", (len(modules[0]) * scale, len(modules) * scale), 255)
    for y, row in enumerate(modules):
        for x, dark in enumerate(row):
            if dark:
                img.paste(0, (x * scale, y * scale, (x + 1) * scale, (y + 1) * scale))
    found = zxingcpp.read_barcodes(img)
    assert len(found) == 1
    return str(found[0].text)


@pytest.mark.parametrize("url", URLS)
def test_printed_code_decodes_to_the_url(url: str) -> None:
    text = qr_text(url)
    modules = _from_text(text)
    assert modules[: len(qr_matrix(url))] == qr_matrix(url)
    # The quiet zone: the first and last QUIET module rows are light.
    assert not any(any(r) for r in modules[:QUIET])
    assert _decode(modules) == url


def _serve(tmp_path: Path, *flags: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "serverio", *flags, "0", "-d", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    lines = [proc.stdout.readline()]
    if "--qr" in flags:
        while len(lines) < 4 or lines[-1].strip("\u2588\n"):  # to the bottom quiet zone
            lines.append(proc.stdout.readline())
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=20)
    return "".join(lines) + out


@pytest.mark.slow
@pytest.mark.skipif(os.name != "posix", reason="SIGINT to a child")
def test_cli_prints_the_code_only_with_qr(tmp_path: Path) -> None:
    out = _serve(tmp_path, "--qr")
    first, _, rest = out.partition("\n")
    assert first.startswith("Serving ")
    url = first.split(" at ", 1)[1]
    block = "\n".join(line for line in rest.splitlines() if set(line) <= set(LIGHT) and line)
    assert _decode(_from_text(block)) == url
    assert "\u2588" not in _serve(tmp_path)


def test_without_segno_one_line_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from serverio.ops.cli import main

    monkeypatch.setitem(sys.modules, "segno", None)  # import raises ImportError
    assert main(["--qr", "-d", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'serverio[qr]'" in err
