"""Pieces of the warm 1 KiB keep-alive request, each in a loop, for callgrind.

``python -m bench.hotpath PART N`` runs one piece of the per-request work N
times (the request of ``bench/pair.py``); under callgrind,
``(Ir[N2] - Ir[N1]) / (N2 - N1)`` is that piece's instructions per request::

    for n in 1000 3000; do
      PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=/tmp/hp.$n \\
        python -m bench.hotpath parse-h11 $n
    done

Parts: ``parse-h11`` (a fresh ``h11.Connection``, the head, its fields and
leftover, as serverio did per request before the fast path), ``parse-fast``
(the same through ``serverio.wire.fasthead.HeadParser``), ``facts``
(``serverio.wire.h1facts.request_facts``), ``decide`` (facts, ``route``,
``Handler.respond_now`` on the warm cache and closing the result; minus
``facts`` is the decision), ``deadline`` (one move of a cancel scope's
deadline), ``checkpoint`` (one trio scheduling round), ``hop`` (one
:func:`serverio.concurrency.blocking.run_blocking` of a function that does
nothing, in a 4-worker pool: the thread hop of pooled mode, round trip).

``hop`` also prints, without valgrind, the process's CPU time (every
thread, ``getrusage``) and context switches per hop: what a hop costs
whatever the machine's load.

``python -m bench.hotpath profile N`` prints a cProfile breakdown of N
requests of ``bench/pair.py`` by part (cProfile inflates call-heavy code:
shares, not absolute times).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import resource
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import h11
import trio

from bench.pair import REQUEST
from serverio import Config, Server
from serverio.http.core import route
from serverio.wire.fasthead import HeadParser
from serverio.wire.h1facts import request_facts

PARTS = ("parse-h11", "parse-fast", "facts", "decide", "deadline", "checkpoint", "hop")


def _parse_h11(n: int) -> None:
    for _ in range(n):
        c = h11.Connection(h11.SERVER, max_incomplete_event_size=16384)
        c.receive_data(REQUEST)
        e = c.next_event()
        assert type(e) is h11.Request
        list(e.headers)
        c.trailing_data  # noqa: B018  # serverio reads it per request


def _parse_fast(n: int) -> None:
    for _ in range(n):
        p = HeadParser(16384)
        p.receive_data(REQUEST)
        e = p.next_event()
        list(e.headers)  # type: ignore[attr-defined]
        p.trailing_data  # noqa: B018


async def _engine(part: str, n: int, root: Path) -> None:
    a, b = socket.socketpair()
    srv = Server(Config.of(directory=str(root), access_log="off", max_requests=10**9).validate())
    event = HeadParser(16384, REQUEST).next_event()
    assert not isinstance(event, type(h11.NEED_DATA))
    cfg, handler = srv.env.config, srv.env.handler
    for _ in range(n):
        req = request_facts(event, cfg)[0]  # type: ignore[arg-type]
        if part == "facts":
            continue
        now = time.time()
        route(req, cfg, now)
        answer = handler.respond_now(req, now)
        answer.close()
    a.close()
    b.close()


async def _hops(n: int) -> None:
    from serverio.concurrency.blocking import Pool, run_blocking

    pool = Pool("fs", 4, 64)
    for _ in range(min(n, 100)):  # the worker thread exists, trio's cache is warm
        await run_blocking(pool, int)
    before = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(n):
        await run_blocking(pool, int)
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    switches = (after.ru_nvcsw + after.ru_nivcsw) - (before.ru_nvcsw + before.ru_nivcsw)
    print(
        f"hop: {cpu / n * 1e6:.1f} us CPU, {switches / n:.2f} context switches per hop "
        f"(n={n}, every thread of the process)",
        file=sys.stderr,
    )


async def _trio(part: str, n: int) -> None:
    with trio.CancelScope() as scope:
        for _ in range(n):
            if part == "deadline":
                scope.deadline = trio.current_time() + 5.0
            else:
                await trio.lowlevel.checkpoint()


def _with_file(run: Callable[[Path], None]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "1k.bin").write_bytes(bytes(range(256)) * 4)
        time.sleep(2.1)  # the file cache's "racy" rule, as in bench/pair.py
        run(root)


def profile(n: int) -> None:
    from bench import pair

    prof = cProfile.Profile()

    def go(root: Path) -> None:
        prof.enable()
        trio.run(pair.run, "serverio", n, root)
        prof.disable()

    _with_file(go)
    st: dict[tuple[str, int, str], tuple[int, int, float, float, object]]
    st = pstats.Stats(prof).stats  # type: ignore[attr-defined]

    def cum(path: str, *names: str) -> float:
        return sum(v[3] for k, v in st.items() if path in k[0] and k[2] in names)

    total = cum("trio/_core/_run.py", "unrolled_run")
    parts = {
        "head parsing (HeadParser / h11)": cum(
            "fasthead.py", "__init__", "next_event", "receive_data", "trailing_data"
        )
        + cum("h11/_connection.py", "__init__", "next_event", "receive_data", "trailing_data"),
        "facts (request_facts: parse_target, scan_fields)": cum("wire/h1facts.py", "request_facts"),
        "decision (route, Handler.respond_now)": cum("http/core.py", "route")
        + cum("pipeline/handler.py", "respond_now"),
        "emit (Emitter.emit, writev)": cum("net/emit.py", "emit"),
        "deadline moves": cum("trio/_core/_run.py", "deadline"),
        "client (bench/pair.py)": cum("bench/pair.py", "run"),
    }
    print(f"{n} requests, {total / n * 1e6:.1f} us/request under cProfile")
    for name, t in parts.items():
        print(f"| {name} | {t / total:.0%} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("part", choices=(*PARTS, "profile"))
    p.add_argument("n", type=int)
    args = p.parse_args()
    if args.part == "profile":
        profile(args.n)
    elif args.part == "parse-h11":
        _parse_h11(args.n)
    elif args.part == "parse-fast":
        _parse_fast(args.n)
    elif args.part in ("facts", "decide"):
        _with_file(lambda root: trio.run(_engine, args.part, args.n, root))
    elif args.part == "hop":
        trio.run(_hops, args.n)
    else:
        trio.run(_trio, args.part, args.n)


if __name__ == "__main__":
    main()
