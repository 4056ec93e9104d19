"""HTTP/2 workloads driven by h2load, beside the wrk runner in bench.runner.

The machinery is the wrk workloads': every server of the workload starts
pinned to the server CPU, a probe checks it serves the workload's paths
correctly (over HTTP/2: 200 and the exact bytes of each file, on one
connection), a warm-up, then rotated rounds ``A B C, B C A, ...`` of
``h2load -D<duration>`` pinned to the load CPU while the server tree's peak
RSS is sampled; medians over rounds. Latency percentiles come from h2load's
per-request ``--log-file`` (bench.h2load).
"""

from __future__ import annotations

import os
import shutil
from contextlib import ExitStack
from typing import Any

from bench.h2load import (
    H2loadParseError,
    h2load_command,
    parse_h2load_output,
    read_log_percentiles,
)
from bench.h2probe import H2ProbeError, h2_get
from bench.procstat import run_measured
from bench.servers import LOOPBACK, RunningServer, ServerSpec
from bench.stats import mad_percent, median, rotation
from bench.trials import Entry, WorkloadRun, cpu_summary, log, record_cpu, trial_line
from bench.workloads import ProbeResult, Workload, probe


def probe_h2(workload: Workload, rs: RunningServer, run: WorkloadRun) -> ProbeResult:
    """Every path of ``workload`` over HTTP/2 on one connection: 200 with the file's bytes."""
    if workload.h1:
        if rs.scheme != "http":
            return ProbeResult(False, "the HTTP/1.1 reference runs in clear text only")
        return probe(workload, rs.port, run.fixture)
    paths = workload.request_paths()
    try:
        protocol, answers = h2_get(
            LOOPBACK,
            rs.port,
            f"{LOOPBACK}:{rs.port}",
            [rs.prefix + p for p in paths],
            tls=rs.scheme == "https",
        )
    except (OSError, H2ProbeError) as exc:
        return ProbeResult(False, f"no HTTP/2 answer: {exc}")
    for path, answer in zip(paths, answers, strict=True):
        want = run.fixture.path(path.lstrip("/")).read_bytes()
        if answer.status != 200 or bytes(answer.body) != want:
            return ProbeResult(
                False,
                f"h2 GET {path} -> {answer.status} with {len(answer.body)} bytes, "
                f"expected 200 with {len(want)}",
            )
    return ProbeResult(True, facts={"protocol": protocol, "paths": str(len(paths))})


def h2load_once(
    run: WorkloadRun, rs: RunningServer, workload: Workload, seconds: int
) -> dict[str, Any]:
    log_file = run.tmp / f"h2load-{rs.pid}.log"
    argv = h2load_command(
        [rs.url(p) for p in workload.request_paths()],
        connections=workload.connections,
        streams=workload.streams,
        duration_s=seconds,
        threads=run.placement.wrk_threads,
        h1=workload.h1,
        timeout_s=run.opts.wrk_timeout_s,
        log_file=log_file,
        cpu=run.placement.wrk_cpu,
    )
    trial: dict[str, Any] = {"error": None, "loadavg": list(os.getloadavg())}
    measured = run_measured(argv, rs.pid, seconds + 60)
    proc = measured.proc
    trial["peak_rss_kib"] = measured.peak_rss_kib
    trial["server_alive"] = rs.alive()
    percentiles = read_log_percentiles(log_file)
    log_file.unlink(missing_ok=True)
    if proc is None:
        trial["error"] = "h2load did not finish in time"
        return trial
    try:
        result = parse_h2load_output(proc.stdout, percentiles)
    except H2loadParseError:
        trial["error"] = (
            f"h2load exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-300:]}"
        )
        return trial
    trial.update(
        rps=result.rps,
        requests=result.succeeded,
        duration_s=result.duration_s,
        bytes_read=result.bytes_total,
        mib_per_s=result.bytes_data / max(result.duration_s, 1e-9) / (1 << 20),
        protocol=result.protocol,
        latency_mean_ms=result.latency_mean_ms,
        latency_max_ms=result.latency_max_ms,
        percentiles_ms=result.percentiles_ms,
        p50_ms=result.p50_ms,
        p99_ms=result.p99_ms,
        failed=result.failed,
        errored=result.errored,
        timeout=result.timeout,
        status=result.status,
        errors=result.error_count,
    )
    record_cpu(trial, measured, result.succeeded)
    if result.succeeded == 0:
        trial["error"] = "no request completed"
    return trial


def run_h2load_workload(
    run: WorkloadRun, workload: Workload, specs: list[ServerSpec]
) -> list[Entry]:
    entries = {s.name: Entry(workload.name, s.name) for s in specs}
    h2load = shutil.which("h2load")
    if h2load is None:
        reason = "h2load not found (apt-get install -y nghttp2-client)"
        log(f"  skipped: {reason}")
        for e in entries.values():
            e.status, e.reason = "skipped", reason
        return list(entries.values())
    live: dict[str, RunningServer] = {}
    root = run.fixture.root
    with ExitStack() as outer:
        for spec in specs:
            entry = entries[spec.name]
            inner = outer.enter_context(ExitStack())
            rs = inner.enter_context(run.server(spec, workload, root, entry))
            if rs is None:
                continue
            result = probe_h2(workload, rs, run)
            entry.probe = result.facts
            if not result.ok:
                entry.status, entry.reason = "skipped", result.reason
                log(f"  {spec.name}: skipped: {result.reason}")
                inner.close()
                continue
            live[spec.name] = rs
        if run.opts.warmup_s > 0:
            for name, rs in live.items():
                log(f"  warm-up {name} ({run.opts.warmup_s}s)")
                h2load_once(run, rs, workload, run.opts.warmup_s)
        for rnd in range(run.opts.rounds):  # rotated: A B C, B C A, C A B, ...
            for name in rotation(list(live), rnd):
                rs = live[name]
                if not rs.alive():
                    continue
                trial = h2load_once(run, rs, workload, run.opts.duration_s)
                trial["round"] = rnd + 1
                entries[name].trials.append(trial)
                line = trial_line(trial)
                if not trial.get("error"):
                    line += f", mean {trial['latency_mean_ms']:.2f} ms"
                log(f"  round {rnd + 1}/{run.opts.rounds} {name}: {line}")
    for name in live:
        summarise_h2load(entries[name])
    return list(entries.values())


def summarise_h2load(entry: Entry) -> None:
    good = [t for t in entry.trials if not t.get("error")]
    failed = len(entry.trials) - len(good)
    rps = [float(t["rps"]) for t in good]
    with_errors = [t for t in good if t["errors"]]
    error_kinds: dict[str, int] = {}
    for t in good:
        for kind in ("failed", "errored", "timeout"):
            if t[kind]:
                error_kinds[kind] = error_kinds.get(kind, 0) + int(t[kind])
        for kind in ("4xx", "5xx"):
            if t["status"][kind]:
                error_kinds[kind] = error_kinds.get(kind, 0) + int(t["status"][kind])
    entry.summary = {
        "trials": len(entry.trials),
        "failed_trials": failed,
        "trials_with_errors": len(with_errors),
        "error_kinds": error_kinds,
        "median_rps": median(rps),
        "mad_pct": mad_percent(rps),
        "mean_ms": median([float(t["latency_mean_ms"]) for t in good]),
        "p50_ms": median([float(t["p50_ms"]) for t in good]),
        "p99_ms": median([float(t["p99_ms"]) for t in good]),
        "mib_per_s": median([float(t["mib_per_s"]) for t in good]),
        "protocol": good[0]["protocol"] if good else "",
        "peak_rss_mib": max((int(t["peak_rss_kib"]) for t in entry.trials), default=0) / 1024,
        **cpu_summary(good),
    }
    if not good:
        entry.status = "failed"
        entry.reason = entry.reason or (
            entry.trials[0]["error"] if entry.trials else "no trial ran"
        )
    elif failed or with_errors:
        entry.status = "errors" if entry.status == "ok" else entry.status
