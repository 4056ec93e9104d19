"""The README's two set-up commands, verbatim, in a fresh clone (issue 45).

A fresh clone is the checkout's tracked files (``git ls-files``) copied to a
temporary directory: no ``public/``, no ``.venv``, no build leftovers.  Each
command runs as written, through ``bash -c``, with pip pointed at an offline
wheelhouse (``PIP_NO_INDEX=1``, ``PIP_FIND_LINKS``: the distributions this
suite runs with, repacked by :mod:`testkit.wheelhouse`), inside a network
namespace of its own (``unshare -rn``) whose loopback is the only
interface: nothing can reach the network, and the README's port 8000 is free
there whatever else runs on this machine.

Command 1 must print its ``Serving`` line and answer 200.  Command 2 would
run this whole suite, this test included, so it is checked only up to its
last step: the venv and the editable ``.[test]`` install run verbatim, then
the installed pytest runs one small file (tests/test_exports.py, which
imports every module of the package) instead of everything.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import IO
from unittest import mock

import pytest

from testkit.wheelhouse import build_wheelhouse

SOURCE = Path(__file__).resolve().parent.parent
README = SOURCE / "README.md"
SERVING = re.compile(r"^Serving (.+) at http://(.+):(\d+)/$")
# Up to its first pytest, then a small selection instead of the whole suite
# (the parallel run, then the serial one).
CMD2_TAIL = ".venv/bin/python -m pytest -n auto && .venv/bin/python -m pytest -n 0 -m serial"
CMD2_INSTEAD = ".venv/bin/python -m pytest -q -n 2 -p no:cacheprovider tests/test_exports.py"
ANY_LISTING = mock.ANY
NETNS = ["unshare", "-rn", "sh", "-c", 'ip link set lo up && exec "$@"', "sh"]


def readme_commands() -> list[str]:
    """The ``sh`` blocks of the README's "Set up on a fresh machine" section."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## Set up on a fresh machine", 1)[1].split("\n## ", 1)[0]
    return [b.strip() for b in re.findall(r"```sh\n(.*?)```", section, re.S)]


def test_the_readme_has_two_one_line_setup_commands_and_ci_runs_the_second() -> None:
    cmds = readme_commands()
    assert len(cmds) == 2 and all("\n" not in c for c in cmds), cmds
    assert cmds[0].startswith("python3 -m venv .venv && .venv/bin/pip install -q . && ")
    assert cmds[1].endswith(CMD2_TAIL)
    ci = (SOURCE / ".ci" / "run").read_text(encoding="utf-8")
    m = re.search(r'^TEST_CMD="(.*)"$', ci, re.M)
    assert m is not None and m[1] == cmds[1]


def _offline_env(wheels: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(
        PIP_NO_INDEX="1",
        PIP_FIND_LINKS=str(wheels),
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PIP_NO_CACHE_DIR="1",
    )
    return env


def _fresh_clone(dst: Path) -> Path:
    try:
        listed = subprocess.run(
            ["git", "-C", str(SOURCE), "ls-files", "-z"],
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: no fresh clone to make")
    for name in filter(None, listed.decode().split("\0")):
        src = SOURCE / name
        if src.is_file():  # a file deleted in the work tree is not in a clone either
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / name)
    return dst


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    project = tomllib.loads((SOURCE / "pyproject.toml").read_text(encoding="utf-8"))
    reqs = [
        *project["build-system"]["requires"],
        *project["project"]["dependencies"],
        *project["project"]["optional-dependencies"]["test"],
    ]
    out = tmp_path_factory.mktemp("wheels")
    try:
        build_wheelhouse(reqs, out)
    except LookupError as exc:  # e.g. setuptools>=68 not installed in this venv
        pytest.skip(f"no offline wheelhouse: {exc}")
    return out


def _isolated() -> list[str]:
    """The network-namespace prefix, or [] when port 8000 is free here anyway."""
    if shutil.which("unshare") and shutil.which("ip"):
        probe = subprocess.run([*NETNS, "true"], capture_output=True, timeout=30, check=False)
        if probe.returncode == 0:
            return NETNS
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", 8000))
        except OSError:
            pytest.skip("no network namespace (unshare -rn) and port 8000 is taken")
    return []


def _run_inside(step: str, clone: Path, wheels: Path, timeout: float) -> dict[str, object]:
    done = subprocess.run(
        [
            *_isolated(),
            sys.executable,
            "-c",
            "import sys; from tests.test_readme_commands import inside; inside(sys.argv[1:])",
            step,
            str(clone),
            str(wheels),
        ],
        cwd=SOURCE,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def _lines(stream: IO[str] | None, until: float) -> Iterator[str]:
    assert stream is not None
    while time.monotonic() < until:
        line = stream.readline()
        if not line:
            return
        yield line.rstrip("\n")


def _serve(clone: Path, env: dict[str, str], cmd: str) -> dict[str, object]:
    """Command 1 in ``clone``: the Serving line, GET / and GET /README.md, SIGINT."""
    proc = subprocess.Popen(
        ["bash", "-c", cmd],
        cwd=clone,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    report: dict[str, object] = {}
    try:
        # pip -q prints nothing on stdout: the first line is the server's.
        first = next(_lines(proc.stdout, time.monotonic() + 240), "")
        report["line"] = first
        m = SERVING.match(first)
        if m is not None:
            for path in ("/", "/README.md"):
                conn = http.client.HTTPConnection(m[2], int(m[3]), timeout=20)
                conn.request("GET", path)
                resp = conn.getresponse()
                body = resp.read()
                conn.close()
                report[path] = [resp.status, body.decode("utf-8", "replace")]
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    report["rc"] = proc.returncode
    report["stderr"] = err
    return report


def _tests(clone: Path, env: dict[str, str], cmd: str) -> dict[str, object]:
    """Command 2 in ``clone`` up to its last step, then one small test file."""
    prefix = cmd.removesuffix(CMD2_TAIL)
    done = subprocess.run(
        ["bash", "-c", prefix + CMD2_INSTEAD],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return {"rc": done.returncode, "out": done.stdout[-3000:], "err": done.stderr[-3000:]}


def inside(argv: list[str]) -> None:
    """Run in the namespace: one README command in a clone; a JSON line out."""
    step, clone, wheels = argv
    cmd1, cmd2 = readme_commands()
    env = _offline_env(Path(wheels))
    report = _serve(Path(clone), env, cmd1) if step == "serve" else _tests(Path(clone), env, cmd2)
    print(json.dumps(report))


@pytest.mark.slow
def test_readme_command_1_verbatim_serves_a_fresh_clone(tmp_path: Path, wheelhouse: Path) -> None:
    clone = _fresh_clone(tmp_path / "serverio")
    assert not (clone / "public").exists()
    report = _run_inside("serve", clone, wheelhouse, timeout=400)
    line = str(report["line"])
    assert SERVING.match(line), report
    assert line.endswith(":8000/"), line  # the README's port, as printed there
    assert report["/"] == [200, ANY_LISTING] and "README.md" in str(report["/"]), report
    assert report["/README.md"] == [200, README.read_text(encoding="utf-8")]
    assert report["rc"] == 0 and "serverio: stopped:" in str(report["stderr"]), report


@pytest.mark.slow
def test_readme_command_2_verbatim_installs_then_runs_one_test_file_not_the_suite(
    tmp_path: Path, wheelhouse: Path
) -> None:
    clone = _fresh_clone(tmp_path / "serverio")
    report = _run_inside("tests", clone, wheelhouse, timeout=700)
    assert report["rc"] == 0, report
    assert re.search(r"\d+ passed", str(report["out"])), report


class _Item:
    def __init__(self, serial: bool) -> None:
        self.serial = serial
        self.added: list[pytest.MarkDecorator] = []

    def get_closest_marker(self, name: str) -> object | None:
        return object() if name == "serial" and self.serial else None

    def add_marker(self, mark: pytest.MarkDecorator) -> None:
        self.added.append(mark)


def test_serial_tests_are_skipped_by_xdist_workers_and_run_by_the_second_invocation() -> None:
    """The README's command: the parallel run skips the ``serial`` tests
    (saying where they run), the ``-n 0 -m serial`` run runs them."""
    from types import SimpleNamespace

    from . import conftest

    items = [_Item(True), _Item(False)]
    worker = SimpleNamespace(workerinput={"workerid": "gw0"})
    conftest.pytest_collection_modifyitems(worker, items)  # type: ignore[arg-type]
    assert [m.mark.kwargs.get("reason") for m in items[0].added] == [conftest.SERIAL_SKIP]
    assert items[1].added == []
    alone = [_Item(True)]
    conftest.pytest_collection_modifyitems(SimpleNamespace(), alone)  # type: ignore[arg-type]
    assert alone[0].added == []
    assert "-m serial" in readme_commands()[1] and "-n auto" in readme_commands()[1]
    marked = (SOURCE / "tests" / "test_reliability.py").read_text(encoding="utf-8")
    assert "pytestmark = pytest.mark.serial" in marked
