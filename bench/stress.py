"""Adversarial stress runs with full counts; prints figures (JSON + a table).

    python -m bench.stress all                 # every scenario below
    python -m bench.stress slowloris           # 1,000 dribbling connections
    python -m bench.stress nonreaders          # 500 clients that never read 8 MiB
    python -m bench.stress nonreaders_buffered # the same with --no-sendfile
    python -m bench.stress flood               # connections beyond --max-connections
    python -m bench.stress fsstall             # FUSE stall: fs pool saturation
    python -m bench.stress shutdown            # SIGTERM during 200 transfers
    python -m bench.stress truncation          # files truncated/replaced mid-transfer
    python -m bench.stress slowhttptest        # the same attack by slowhttptest, if installed
    python -m bench.stress fuzz --cases 1000000 --jobs 2
    python -m bench.stress fasthead --cases 1000000 --jobs 2   # head fast path vs h11

The scenarios are the same functions tests/test_reliability.py runs with
reduced counts (testkit/reliability.py, testkit/fuzzing.py); here they run with
the issue's counts and report what they measured.  Every server is a real
``python -m serverio`` subprocess (or, for the fuzzer, the engine over memory
streams) on 127.0.0.1.  ``--json FILE`` also writes the figures to FILE.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from testkit import fuzzing

Figures = dict[str, Any]


def machine() -> Figures:
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "kernel": platform.release(),
    }


# ------------------------------------------------------------------ fuzz


def _fuzz_worker(seed: int, start: int, cases: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="serverio-fuzz-") as tmp:

        def progress(done: int) -> None:
            print(f"  fuzz seed {seed}: {start + done:,} cases", file=sys.stderr, flush=True)

        report = fuzzing.fuzz_sync(Path(tmp), cases, seed, start=start, progress=progress)
    return report.as_dict()


def run_fuzz(cases: int, jobs: int, seed: int) -> Figures:
    """Split ``cases`` of run ``seed`` over ``jobs`` processes and merge."""
    per = -(-cases // jobs)
    parts = [(seed, i * per, min(per, cases - i * per)) for i in range(jobs) if i * per < cases]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(_fuzz_worker, *zip(*parts, strict=True)))
    statuses: dict[str, int] = {}
    outcomes: dict[str, int] = {}
    transports: dict[str, int] = {}
    failures: list[Any] = []
    for r in results:
        for k, v in r["transports"].items():
            transports[k] = transports.get(k, 0) + v
        for k, v in r["statuses"].items():
            statuses[k] = statuses.get(k, 0) + v
        for k, v in r["outcomes"].items():
            outcomes[k] = outcomes.get(k, 0) + v
        failures.extend(r["failures"])
    return {
        "cases": sum(r["cases"] for r in results),
        "seed": seed,
        "jobs": jobs,
        "responses": sum(r["responses"] for r in results),
        "bytes_in": sum(r["bytes_in"] for r in results),
        "failures": failures,
        "statuses": dict(sorted(statuses.items())),
        "outcomes": dict(sorted(outcomes.items())),
        "transports": dict(sorted(transports.items())),
        "fd_growth": max(r["fds_after"] - r["fds_before"] for r in results),
        "seconds": round(time.perf_counter() - t0, 1),
        "ok": not failures,
    }


# ------------------------------------------------------------------ fasthead


def _fasthead_worker(seed: int, start: int, cases: int) -> dict[str, Any]:
    from testkit import fasthead_diff

    return fasthead_diff.run(seed, start, cases).as_dict()


def run_fasthead(cases: int, jobs: int, seed: int) -> Figures:
    """The differential run of the request-head fast path against h11
    (testkit/fasthead_diff.py), ``cases`` split over ``jobs`` processes."""
    per = -(-cases // jobs)
    parts = [(seed, i * per, min(per, cases - i * per)) for i in range(jobs) if i * per < cases]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(_fasthead_worker, *zip(*parts, strict=True)))
    failures = [f for r in results for f in r["failures"]]
    out: Figures = {
        k: sum(r[k] for r in results)
        for k in ("cases", "accepted", "deferred", "split_cases", "split_fast")
    }
    out.update(seed=seed, jobs=jobs, failures=failures[:20])
    out["seconds"] = round(time.perf_counter() - t0, 1)
    out["ok"] = not failures
    return out


# ------------------------------------------------------------------ main


def _scenario(name: str) -> Callable[[argparse.Namespace], Figures]:
    def run(args: argparse.Namespace) -> Figures:
        # Imported here: the fuzz workers need none of the socket machinery.
        import testkit.reliability as rel

        fig: Figures = getattr(rel, name)(**rel.FULL[name])
        return fig

    return run


SCENARIOS: dict[str, Callable[[argparse.Namespace], Figures]] = {
    name: _scenario(name)
    for name in (
        "slowloris",
        "nonreaders",
        "nonreaders_buffered",
        "flood",
        "fsstall",
        "shutdown",
        "truncation",
        "slowhttptest",
    )
}
SCENARIOS["fuzz"] = lambda a: run_fuzz(a.cases, a.jobs, a.seed)
SCENARIOS["fasthead"] = lambda a: run_fasthead(a.cases, a.jobs, a.seed)


def table(name: str, fig: Figures) -> str:
    rows = [f"{name}: {'ok' if fig.get('ok') else 'FAILED'}"]
    for k, v in fig.items():
        if k == "ok" or (isinstance(v, dict | list) and len(json.dumps(v)) > 100):
            continue
        rows.append(f"  {k:<28} {v}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("scenario", choices=[*SCENARIOS, "all"])
    p.add_argument("--cases", type=int, default=100_000, help="fuzz, fasthead: number of cases")
    p.add_argument("--jobs", type=int, default=max(1, min(2, os.cpu_count() or 1)))
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", metavar="FILE", help="also write the figures here")
    args = p.parse_args(argv)
    names = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    command = " ".join(["python -m bench.stress", *sys.argv[1:]])
    out: Figures = {"machine": machine(), "command": command}
    ok = True
    for name in names:
        print(f"== {name}", file=sys.stderr, flush=True)
        fig = SCENARIOS[name](args)
        out[name] = fig
        ok = ok and bool(fig.get("ok"))
        print(table(name, fig), flush=True)
    text = json.dumps(out, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
