"""``python -m bench startup``: the first answer of a plain static start and
the floor (``import trio, h11``), interleaved (docs/performance.md "Start-up")."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench import cli, startup


def _bench(*argv: str) -> int:
    return cli.dispatch(cli.build_parser().parse_args(argv))


def test_one_round_prints_the_first_answer_and_the_floor(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _bench("startup", "-n", "1") == 0
    out = capsys.readouterr().out
    row = r"^\| this checkout \| (\d+) ms \| (\d+\.\d\d)x \| (\d+) ms \| (\d+\.\d\d)x \|$"
    m = re.search(row, out, re.MULTILINE)
    assert m is not None, out
    floor_row = (
        r"^\| floor: `python -c 'import trio, h11'` \| (\d+) ms \| 1\.00x \| (\d+) ms \| 1\.00x \|$"
    )
    floor = re.search(floor_row, out, re.MULTILINE)
    assert floor is not None, out
    # A real server answered: more than the floor's imports, within reason.
    assert 0 < int(floor[1]) < int(m[1]) < 60_000
    assert 0 < int(floor[2]) < int(m[3])  # CPU too (Linux: wait4)


def test_a_tree_that_never_serves_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "serverio").mkdir()
    (tmp_path / "serverio" / "__init__.py").write_text("")
    (tmp_path / "serverio" / "__main__.py").write_text("print('no server here')\n")
    with pytest.raises(SystemExit, match="no Serving line"):
        startup.measure([("broken", tmp_path)], 1, sys.executable)


@pytest.mark.skipif(not hasattr(os, "waitid"), reason="needs waitid(WNOWAIT) to hold the exit")
def test_a_server_that_already_exited_is_still_reaped_with_its_cpu() -> None:
    # The race CI once lost: the child exits between its last line and the
    # kill. ``Popen.kill`` polls first, the poll reaps, and wait4 then fails
    # with ECHILD. waitid(WNOWAIT) waits for the exit without reaping, so
    # the kill here always finds a zombie.
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
    startup._kill(proc)
    assert startup._reap(proc) >= 0.0
    assert proc.returncode == 0


def test_rounds_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    assert _bench("startup", "-n", "0") == 2
    assert "at least 1" in capsys.readouterr().err
