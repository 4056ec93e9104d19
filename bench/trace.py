"""Which serverio packages one warm request walks through, in order (issue 42's first gate).

``python -m bench trace [--json] [--serverio-commit REV] [--requests get,404,...]``
answers each request type a few times on a fresh in-process server (the
warm-up: caches filled, the once-a-second work done), then records the one
after that under :func:`sys.setprofile` and prints, per request type, the
serverio packages it entered in order, how many distinct ones, and how many
times it came back to a package it had already left.

Request types (each on its own server and connection, ``bench/pair.py``'s
:func:`~bench.pair.connected`: a ``ConnectionTask`` over a socketpair, the
client in the same trio run):

``get``      ``GET /1k.bin``, 200 (the warm 1 KiB GET of ``bench/pair.py``)
``404``      ``GET /missing.bin``, 404
``listing``  ``GET /dir/``, 200: the HTML listing of 20 files
``put``      ``PUT /put.bin`` of 1 KiB with ``--upload``, 204 (it overwrites
             the file the warm-up wrote)
``proxy``    ``GET /1k.bin`` with ``--proxy /=UPSTREAM``, 200; the upstream
             is the bare trio+h11 loop (bench/baselines/bare_trio_h11.py)
             serving the same file on a loopback listener, as a task of the
             same trio run (its frames are not serverio's)

The recorded span runs from the client's send of the traced request to the
moment every task of the run is blocked again after the client has read the
whole response: the server's reading, answering, writing and its return to
waiting for the next request.  Garbage collection is off for that span, the
wall clock stands still (:func:`bench.pair.freeze_wall_clock`), trio's
scheduler is seeded and ``PYTHONHASHSEED`` is 0, so a run repeats.

**Definitions.**  Only frames of serverio count: a frame is serverio's when
its module's ``__name__`` is ``serverio`` or starts with ``serverio.``.  Its
package is the first component below ``serverio.`` (``serverio.net.emit``:
``net``; a top-level module ``serverio.model``: ``model``; the package's
``__init__`` itself: ``serverio``); with ``--modules``, the first two
(``net.emit``, ``model``).  The profiler's events become steps:

- a ``call`` of a serverio frame (a function entered, or a suspended
  coroutine or generator resumed: Python reports both as ``call``) steps
  into that frame's package;
- a ``return`` from a serverio frame (a return, or a suspension at an
  ``await``/``yield``) steps into the package of the nearest serverio frame
  below it on the stack, the code it returns to; none (it returns into trio
  or the stdlib): no step;
- C calls are ignored; trio, h11, h2 and stdlib frames make no step and do
  not break the sequence (serverio called back from trio is serverio).

``packages`` is the steps' packages with consecutive repeats collapsed: the
packages entered, in order.  ``distinct`` is the number of different
packages in it; ``returns`` the number of positions whose package occurs
earlier in it (it was entered, left, and is entered again: every return
after a call into another package counts, as does a later call back into
it); ``calls`` the number of ``call`` steps (serverio frames entered).
``call_returns`` counts the same way over the ``call`` steps alone (a
package *called* again after the request was in another one; returning to
the caller is not counted).  :func:`summarize` is that computation, on
plain data.

The issue's figure (a warm GET "enters 17 packages, 93 calls, and climbs
back to a package it had left 19 times") was followed call by call from
``Handler.respond_now``; each request type therefore also reports
``respond_now``: the same measures over the steps from the call of
``serverio.pipeline.handler.Handler.respond_now`` up to its return, that
return's step to the caller left out (the first such call; ``null`` where
the request never reaches it, or where the code has no such method).
docs/history/trace-6c7bf43.md relates the two.

Only the thread running trio is profiled (``sys.setprofile`` is per
thread): work handed to a pool thread (``run_blocking``) shows as the hop
(``concurrency``), not as what the thread does.

``--serverio-commit REV`` traces the serverio of another commit, exported
by bench/commits.py, with *this* checkout's harness: the child process
imports that tree's ``serverio`` first, then this ``bench``.  The harness
drives ``Config.of``, ``Server``, ``Server.handler.running`` and
``ConnectionTask``: a commit whose API differs there cannot be traced.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

from bench import commits

# name -> (the request's bytes, the Config settings of its server, the
# statuses a right answer has).  ``get`` is bench/pair.py's REQUEST, written
# out: this module is imported by bench/cli.py, before the child has chosen
# which serverio to import (bench.pair imports serverio).  ``proxy``'s
# setting is filled in by trace_kind with its upstream's address.
KINDS: dict[str, tuple[bytes, dict[str, Any], tuple[int, ...]]] = {
    "get": (b"GET /1k.bin HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nUser-Agent: wrk\r\n\r\n", {}, (200,)),
    "404": (b"GET /missing.bin HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n\r\n", {}, (404,)),
    "listing": (b"GET /dir/ HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n\r\n", {}, (200,)),
    "put": (
        b"PUT /put.bin HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nContent-Length: 1024\r\n\r\n"
        + bytes(range(256)) * 4,
        {"upload": True},
        (204,),
    ),
    "proxy": (b"GET /1k.bin HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n\r\n", {"proxy": ()}, (200,)),
}
SCOPE_MODULE = "serverio.pipeline.handler"
SCOPE_QUALNAME = "Handler.respond_now"
LISTING_FILES = 20

# A step: ("call" | "return", the package stepped into, or None for no step).
Step = tuple[str, str | None]

# The child: import the traced tree's serverio first (so that it, not this
# checkout's, is the one in sys.modules), then this checkout's bench.
_CHILD = (
    "import sys; sys.path.insert(0, sys.argv[1]); import serverio; "
    "sys.path[0] = sys.argv[2]; from bench.trace import child; child(sys.argv[3:])"
)


class TraceError(RuntimeError):
    """A trace could not be taken; the message says why (one line)."""


@dataclass(frozen=True)
class Summary:
    """The measures of one step sequence (the module docstring defines them)."""

    packages: tuple[str, ...]
    distinct: int
    returns: int
    call_returns: int
    calls: int

    def as_json(self) -> dict[str, Any]:
        return {
            "packages": list(self.packages),
            "distinct": self.distinct,
            "returns": self.returns,
            "call_returns": self.call_returns,
            "calls": self.calls,
        }


def entered(steps: Iterable[Step]) -> list[str]:
    """The packages of ``steps`` in order, consecutive repeats collapsed."""
    packages: list[str] = []
    for _, package in steps:
        # No step (back into trio or the stdlib), or a step within the
        # package it is already in: the sequence goes on unchanged.
        if package is not None and (not packages or packages[-1] != package):
            packages.append(package)
    return packages


def reentries(packages: Sequence[str]) -> int:
    """Positions of ``packages`` whose package occurs earlier in it: with
    consecutive repeats collapsed, each was entered, left, and is entered again."""
    seen: set[str] = set()
    count = 0
    for package in packages:
        count += package in seen
        seen.add(package)
    return count


def summarize(steps: Sequence[Step]) -> Summary:
    """Packages entered in order, distinct packages, returns (over call and
    return steps, and over call steps only) and calls of ``steps``."""
    packages = entered(steps)
    called = entered(step for step in steps if step[0] == "call")
    calls = sum(event == "call" for event, _ in steps)
    return Summary(
        tuple(packages), len(set(packages)), reentries(packages), reentries(called), calls
    )


def package_of(module: str, modules: bool = False) -> str | None:
    """``net`` for ``serverio.net.emit`` (``net.emit`` with ``modules``),
    ``model`` for ``serverio.model``, ``serverio`` for the package itself;
    None for a module outside serverio."""
    if module == "serverio":
        return "serverio"
    if not module.startswith("serverio."):
        return None
    parts = module.split(".")[1:]
    return ".".join(parts[:2] if modules else parts[:1])


class Recorder:
    """The :func:`sys.setprofile` function: turns profiler events into steps,
    and marks where the scope (``Handler.respond_now``) begins and ends."""

    def __init__(self, modules: bool = False) -> None:
        self.steps: list[Step] = []
        self.scope: tuple[int, int] | None = None
        self._modules = modules
        self._packages: dict[CodeType, str | None] = {}
        self._scope_frame: FrameType | None = None
        self._scope_start = 0

    def _package(self, frame: FrameType) -> str | None:
        code = frame.f_code
        try:
            return self._packages[code]
        except KeyError:
            name = frame.f_globals.get("__name__")
            package = package_of(name, self._modules) if isinstance(name, str) else None
            self._packages[code] = package
            return package

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if event == "call":
            if self._package(frame) is None:
                return
            self.steps.append(("call", self._package(frame)))
            if self.scope is None and self._scope_frame is None and _is_scope(frame):
                self._scope_frame, self._scope_start = frame, len(self.steps) - 1
        elif event == "return":
            if self._package(frame) is None:
                return
            below = frame.f_back
            while below is not None and self._package(below) is None:
                below = below.f_back
            if frame is self._scope_frame:
                # The scope: from the call of respond_now up to (not
                # including) its return to the caller.
                self.scope, self._scope_frame = (self._scope_start, len(self.steps)), None
            self.steps.append(("return", None if below is None else self._package(below)))

    def summaries(self) -> dict[str, Any]:
        """The whole span's measures, with those of the scope under ``respond_now``."""
        out = summarize(self.steps).as_json()
        scoped = None if self.scope is None else self.steps[self.scope[0] : self.scope[1]]
        out["respond_now"] = None if scoped is None else summarize(scoped).as_json()
        return out


def _is_scope(frame: FrameType) -> bool:
    code = frame.f_code
    return (
        getattr(code, "co_qualname", code.co_name) == SCOPE_QUALNAME
        and frame.f_globals.get("__name__") == SCOPE_MODULE
    )


def make_root(root: Path) -> None:
    """``1k.bin`` (bench/pair.py's bytes) and ``dir/`` of 20 small files."""
    (root / "1k.bin").write_bytes(bytes(range(256)) * 4)
    (root / "dir").mkdir()
    for i in range(LISTING_FILES):
        (root / "dir" / f"f{i:02}.txt").write_text(f"file {i}\n")


async def _traced(cfg: Any, request: bytes, warm: int, recorder: Recorder) -> bytes:
    """Answer ``request`` ``warm`` times on a fresh connection of ``cfg``,
    then once more under ``recorder``; that response's head."""
    import trio.testing

    from bench import pair

    async with pair.connected(cfg) as client:
        for _ in range(warm):
            await client.send(request)
            await pair.read_response(client)
        await trio.testing.wait_all_tasks_blocked()
        gc.collect()
        gc.disable()
        sys.setprofile(recorder)
        try:
            await client.send(request)
            head = await pair.read_response(client)
            await trio.testing.wait_all_tasks_blocked()
        finally:
            sys.setprofile(None)
            gc.enable()
    return head


async def trace_kind(kind: str, root: Path, warm: int, modules: bool) -> dict[str, Any]:
    """One request type's result: its request line, status and measures."""
    import trio

    from bench.baselines.bare_trio_h11 import handle
    from serverio import Config

    request, settings, statuses = KINDS[kind]
    recorder = Recorder(modules)
    async with trio.open_nursery() as nursery:
        if "proxy" in settings:
            # The upstream: the bare trio+h11 loop serving 1k.bin, a task of
            # this run on a loopback listener (its frames are not
            # serverio's).  In-process, the order in which the proxy and it
            # run is trio's seeded one: a separate process answers before
            # or after the proxy's first read, which changes the trace.
            body = (root / "1k.bin").read_bytes()
            serve = functools.partial(
                trio.serve_tcp, functools.partial(handle, body=body), 0, host="127.0.0.1"
            )
            listeners = await nursery.start(serve)
            port = listeners[0].socket.getsockname()[1]
            settings = {"proxy": (f"/=http://127.0.0.1:{port}",)}
        cfg = Config.of(directory=str(root), access_log="off", max_requests=10**9, **settings)
        head = await _traced(cfg, request, warm, recorder)
        nursery.cancel_scope.cancel()
    status = int(head.split(b" ", 2)[1])
    if status not in statuses:
        raise TraceError(f"{kind}: status {status}, expected {statuses[0]}")
    line = request.split(b"\r\n", 1)[0].rsplit(b" ", 1)[0].decode()
    return {"request": line, "status": status, **recorder.summaries()}


def child(argv: Sequence[str]) -> None:
    """The child process's work: trace the kinds named in ``argv``, print JSON."""
    p = argparse.ArgumentParser(prog="bench.trace child")
    p.add_argument("--tree", type=Path, required=True)
    p.add_argument("--warm", type=int, required=True)
    p.add_argument("--modules", action="store_true")
    p.add_argument("kinds", nargs="+")
    args = p.parse_args(argv)
    import trio

    import serverio
    from bench import pair

    # A tree without a serverio package would let the import fall through
    # to this checkout's (the editable install): never trace the wrong code.
    served_from = Path(serverio.__file__).resolve().parent
    if served_from != (args.tree / "serverio").resolve():
        raise SystemExit(f"serverio was imported from {served_from}, not from {args.tree}")
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="serverio-trace-") as tmp:
        root = Path(tmp)
        make_root(root)
        # serverio caches a file once it has been unchanged for 2 s (the
        # "racy" rule of serverio.fs.filecache): wait that out, as pair.py does.
        time.sleep(2.1)
        pair.freeze_wall_clock()
        for kind in args.kinds:
            # Seeded per run: a request type's trace does not depend on
            # which types were traced before it.
            pair.seed_scheduler()
            out[kind] = trio.run(trace_kind, kind, root, args.warm, args.modules)
    json.dump({"serverio": str(served_from), "kinds": out}, sys.stdout)


def trace(tree: Path, kinds: Sequence[str], warm: int, modules: bool) -> dict[str, Any]:
    """Trace ``kinds`` against the serverio of ``tree`` in a child process."""
    argv = [sys.executable, "-c", _CHILD, str(tree), str(commits.REPO), "--tree", str(tree)]
    argv += ["--warm", str(warm)]
    argv += [*(["--modules"] if modules else []), *kinds]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    env.pop("PYTHONPATH", None)
    with tempfile.TemporaryDirectory(prefix="serverio-trace-cwd-") as cwd:
        proc = subprocess.run(
            argv, cwd=cwd, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL
        )
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise TraceError(f"exit {proc.returncode}: {tail[0][:200]}")
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def render(label: str, kinds: dict[str, Any]) -> str:
    """The text report: per request type, the packages in order and the counts."""
    lines = [f"serverio: {label}"]
    for kind, r in kinds.items():
        lines.append(
            f"{kind} ({r['request']}, {r['status']}): {r['distinct']} distinct, "
            f"{r['returns']} returns ({r['call_returns']} on calls), {r['calls']} calls"
        )
        lines.append("  " + " > ".join(r["packages"]))
        scoped = r["respond_now"]
        if scoped is not None:
            lines.append(
                f"  from Handler.respond_now: {scoped['distinct']} distinct, "
                f"{scoped['returns']} returns ({scoped['call_returns']} on calls), "
                f"{scoped['calls']} calls"
            )
            lines.append("    " + " > ".join(scoped["packages"]))
    return "\n".join(lines)


def as_json(kinds: dict[str, Any]) -> str:
    """One JSON object keyed by request type, one line per type (diffs read well)."""
    rows = [f" {json.dumps(kind)}: {json.dumps(r)}" for kind, r in kinds.items()]
    return "{\n" + ",\n".join(rows) + "\n}"


def _kinds(value: str) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in KINDS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown request type {', '.join(unknown) or '(none)'}; known: {', '.join(KINDS)}"
        )
    return names


def add_parser(sub: Any) -> None:
    tr = sub.add_parser(
        "trace", help="serverio packages one warm request enters, in order (sys.setprofile)"
    )
    tr.add_argument("--json", action="store_true", help="one JSON object keyed by request type")
    tr.add_argument(
        "--serverio-commit",
        metavar="REV",
        help="trace the serverio of commit REV (exported by bench/commits.py) instead",
    )
    tr.add_argument(
        "--requests",
        type=_kinds,
        default=list(KINDS),
        metavar="LIST",
        help=f"comma list of request types (default all: {','.join(KINDS)})",
    )
    tr.add_argument(
        "--warm", type=int, default=5, metavar="N", help="answers before the traced one (default 5)"
    )
    tr.add_argument(
        "--modules", action="store_true", help="count modules (net.emit) instead of packages"
    )


def run(args: argparse.Namespace) -> int:
    if args.warm < 1:
        print("trace: --warm must be at least 1", file=sys.stderr)
        return 2
    try:
        if args.serverio_commit:
            commit = commits.resolve(args.serverio_commit)
            tree, label = commits.checkout(commit), f"serverio@{commits.short(commit)}"
        else:
            tree, label = commits.REPO, "this checkout"
    except commits.CommitError as exc:
        print(f"trace: {exc}", file=sys.stderr)
        return 2
    try:
        result = trace(tree, args.requests, args.warm, args.modules)
    except TraceError as exc:
        print(f"trace: {label}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(as_json(result["kinds"]))
    else:
        print(render(label, result["kinds"]))
    return 0
