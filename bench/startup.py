"""Start-up: the first answer against the floor of any server on trio + h11.

``python -m bench startup [-n 7] [--commit REV]... [--source]`` times, per
serverio (this checkout, and each ``--commit``'s exported tree), exec of
``python -m serverio 0 -d DIR -q`` until a client on 127.0.0.1 has the
``200`` of ``GET /hello.txt`` (the ``Serving`` line read from its stdout,
one request over a plain socket), and, in the same rounds, the whole
process ``python -c 'import trio, h11'`` (the floor: no server on this
stack starts faster).  The runs are interleaved (A B ... floor, A B ...
floor) so that a machine shared with other work loads each alike; it
prints the medians and each first answer as a multiple of the floor,
the figure docs/performance.md "Start-up" gives (issue 45's target:
1.5x), in wall time and in CPU time (user + system of the process, from
``wait4``: what a loaded machine changes least; the server is killed as
soon as its answer is read).

Each tree's ``serverio/`` is compiled to bytecode first (``compileall``),
as ``pip install`` does for an installed package, so that a run under
``PYTHONDONTWRITEBYTECODE`` (or of a fresh tree) does not time the
compiler; ``--source`` removes that bytecode instead, timing a start
that compiles every module it imports.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import commits

FLOOR = "import trio, h11"


def _env() -> dict[str, str]:
    # The server's own variables would change what starts.
    return {k: v for k, v in os.environ.items() if not k.startswith("SERVERIO_")}


def _reap(proc: subprocess.Popen[Any]) -> float:
    """Wait for ``proc``; its CPU seconds (user + system; 0.0 where
    ``wait4`` is missing)."""
    if not hasattr(os, "wait4"):
        proc.wait()
        return 0.0
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return float(usage.ru_utime + usage.ru_stime)


def _kill(proc: subprocess.Popen[Any]) -> None:
    """Kill ``proc`` without reaping it. ``Popen.kill`` polls first (so as
    not to signal a recycled pid), and a poll that finds the child already
    gone reaps it: ``wait4`` would then fail with ECHILD and lose the CPU
    figure. An unreaped child's pid cannot be recycled, so signalling it
    directly is safe; where ``wait4`` is missing, ``Popen.kill`` it is."""
    if sys.platform == "win32" or not hasattr(os, "wait4"):
        proc.kill()
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGKILL)


def first_answer(python: str, tree: Path, root: Path) -> tuple[float, float]:
    """Seconds from exec of a plain static start to a client's ``200``,
    and the CPU seconds the server process used."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [python, "-m", "serverio", "0", "-d", str(root), "-q"],
        cwd=tree,
        env=_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if " at " not in line:
            raise SystemExit(f"startup: no Serving line from {tree}: {line!r}")
        host, _, port = line.split(" at ", 1)[1].strip().split("//")[1].rstrip("/").rpartition(":")
        with socket.create_connection((host.strip("[]"), int(port)), timeout=30) as sock:
            sock.sendall(b"GET /hello.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        took = time.perf_counter() - start
        if not data.startswith(b"HTTP/1.1 200"):
            raise SystemExit(f"startup: {tree} answered {data[:40]!r}")
    finally:
        _kill(proc)
        proc.stdout.close()  # type: ignore[union-attr]
        cpu = _reap(proc)
    return took, cpu


def floor(python: str) -> tuple[float, float]:
    """Seconds of a whole ``python -c 'import trio, h11'``, and its CPU seconds."""
    start = time.perf_counter()
    proc = subprocess.Popen([python, "-c", FLOOR], cwd=tempfile.gettempdir(), env=_env())
    cpu = _reap(proc)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"startup: the floor exited {proc.returncode}")
    return took, cpu


def prepare(tree: Path, python: str, source: bool) -> None:
    """Bytecode for ``tree``'s serverio (or none, ``source``)."""
    if source:
        for cache in (tree / "serverio").rglob("__pycache__"):
            shutil.rmtree(cache, ignore_errors=True)
        return
    subprocess.run(
        [python, "-m", "compileall", "-q", str(tree / "serverio")],
        capture_output=True,
        check=False,
    )


def measure(
    trees: list[tuple[str, Path]], rounds: int, python: str, source: bool = False
) -> dict[str, Any]:
    """The medians (milliseconds, wall and CPU) of ``rounds`` interleaved rounds."""
    for _, tree in trees:
        prepare(tree, python, source)
    times: dict[str, list[tuple[float, float]]] = {label: [] for label, _ in trees}
    floors: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory(prefix="serverio-startup-") as tmp:
        root = Path(tmp)
        (root / "hello.txt").write_bytes(b"hello world\n")
        for _ in range(rounds):
            for label, tree in trees:
                times[label].append(first_answer(python, tree, root))
            floors.append(floor(python))

    def medians(runs: list[tuple[float, float]]) -> tuple[float, float]:
        return (
            statistics.median(w for w, _ in runs) * 1000,
            statistics.median(c for _, c in runs) * 1000,
        )

    return {
        "floor_ms": medians(floors),
        "first_answer_ms": {k: medians(v) for k, v in times.items()},
    }


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "startup", help="first answer of a plain static start against import trio, h11"
    )
    p.add_argument("-n", type=int, default=7, help="interleaved rounds (medians; default 7)")
    p.add_argument(
        "--commit",
        action="append",
        default=[],
        metavar="REV",
        help="also time the serverio of commit REV (repeatable)",
    )
    p.add_argument(
        "--source", action="store_true", help="without bytecode: every start compiles its modules"
    )


def run(args: argparse.Namespace) -> int:
    if args.n < 1:
        print("startup: -n must be at least 1", file=sys.stderr)
        return 2
    trees = [("this checkout", commits.REPO)]
    try:
        for rev in args.commit:
            commit = commits.resolve(rev)
            trees.append((f"serverio@{commits.short(commit)}", commits.checkout(commit)))
    except commits.CommitError as exc:
        print(f"startup: {exc}", file=sys.stderr)
        return 2
    got = measure(trees, args.n, sys.executable, args.source)
    wall, cpu = got["floor_ms"]
    load = f", load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
    mode = "from source" if args.source else "bytecode"
    print(
        f"| serverio ({mode}, medians of {args.n}{load}) "
        "| first answer | x floor | CPU | x floor's CPU |"
    )
    print("|---|---:|---:|---:|---:|")
    for label, (ms, cms) in got["first_answer_ms"].items():
        print(f"| {label} | {ms:.0f} ms | {ms / wall:.2f}x | {cms:.0f} ms | {cms / cpu:.2f}x |")
    print(f"| floor: `python -c '{FLOOR}'` | {wall:.0f} ms | 1.00x | {cpu:.0f} ms | 1.00x |")
    return 0
