"""Orchestration of one benchmark run: fixtures, servers, warm-up, rotated trials, artifact."""

from __future__ import annotations

import json
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from bench import fixtures, report, slowfs
from bench.gcscrape import scrape_gc
from bench.idle import measure_idle, raise_nofile
from bench.machine import machine_facts
from bench.procstat import run_measured, tree_rss_kib
from bench.servers import (
    KINDS,
    HarnessEnv,
    LaunchPlan,
    RunningServer,
    ServerSpec,
    ServerStartError,
    find_nginx,
    running,
)
from bench.stats import mad_percent, median, rotation
from bench.trials import (
    Entry,
    Placement,
    RunOptions,
    cpu_summary,
    log,
    record_cpu,
    trial_line,
)
from bench.workloads import H2_ONLY_REASON, Workload, for_server, probe
from bench.wrk import (
    WrkParseError,
    parse_wrk_output,
    random_tree_script,
    round_robin_script,
    wrk_command,
)

SCHEMA = 1
# File descriptors wrk and each server need beyond one per connection
# (listeners, logs, files being served, epoll).
NOFILE_HEADROOM = 256


def _placement(opts: RunOptions) -> Placement:
    cpus = sorted(os.sched_getaffinity(0))
    if opts.pin and len(cpus) >= 2 and shutil.which("taskset"):
        return Placement(cpus[0], cpus[1], opts.wrk_threads or 1, tuple(cpus))
    return Placement(None, None, opts.wrk_threads or min(2, len(cpus)), tuple(cpus))


class Run:
    def __init__(self, opts: RunOptions, env: HarnessEnv, placement: Placement, tmp: Path) -> None:
        self.opts = opts
        self.env = env
        self.placement = placement
        self.tmp = tmp
        self.fixture = fixtures.create(self._mkdir("root"))
        self._counter = 0

    def _mkdir(self, name: str) -> Path:
        path = self.tmp / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _server_dir(self, spec: ServerSpec, workload: Workload) -> Path:
        self._counter += 1
        return self._mkdir(f"servers/{self._counter:03d}-{workload.name}-{spec.name}")

    # -- server lifecycle ------------------------------------------------------

    def plan(
        self, spec: ServerSpec, workload: Workload, root: Path, workdir: Path
    ) -> LaunchPlan | str:
        file = root / workload.file if workload.file else None
        if spec.kind == "serverio" and workload.serverio_args:
            spec = replace(spec, extra_args=(*spec.extra_args, *workload.serverio_args))
        if workload.precompressed:
            # Kinds with a sidecar-serving configuration switch to it.
            spec = replace(spec, tags=spec.tags | {"precompressed"})
        if workload.tree and spec.kind == "serverio":
            # An admin listener: the collector's pauses are scraped from
            # /metrics after the trials (bench/gcscrape.py).
            spec = replace(spec, tags=spec.tags | {"admin"})
        if workload.cores > 1:
            # nginx worker_processes 2, Caddy GOMAXPROCS=2 (bench/servers.py).
            spec = replace(spec, tags=spec.tags | {"cores2"})
        return KINDS[spec.kind].plan(spec, self.env, root, file, workdir)

    @contextmanager
    def server(
        self, spec: ServerSpec, workload: Workload, root: Path, entry: Entry
    ) -> Iterator[RunningServer | None]:
        """Start ``spec`` for ``workload``; yields None (and fills ``entry``) when it cannot run."""
        workdir = self._server_dir(spec, workload)
        plan = self.plan(spec, workload, root, workdir)
        if isinstance(plan, str):
            entry.status, entry.reason = "skipped", plan
            yield None
            return
        with ExitStack() as stack:
            rs: RunningServer | None = None
            try:
                rs = stack.enter_context(
                    running(spec, plan, workdir / "server.log", cpu=self.placement.server_cpu)
                )
                entry.startup_s = round(rs.startup_s, 3)
                entry.argv = rs.argv
            except ServerStartError as exc:
                entry.status, entry.reason = "failed", "did not start"
                entry.log_tail = str(exc)
                log(f"  {spec.name}: FAILED to start: {exc}")
            yield rs
            if rs is not None and not rs.alive():
                entry.status, entry.reason = "failed", f"server exited with {rs.proc.returncode}"
                entry.log_tail = rs.log_tail()

    # -- wrk workloads ---------------------------------------------------------

    def wrk_once(
        self,
        rs: RunningServer,
        workload: Workload,
        headers: tuple[tuple[str, str], ...],
        seconds: int,
        others: tuple[int, ...] = (),
    ) -> dict[str, Any]:
        """One wrk run against ``rs``; ``others``: more process trees whose
        CPU over the same window goes in the trial (the proxy's upstream)."""
        argv = wrk_command(
            rs.url(workload.path),
            connections=workload.connections,
            duration_s=seconds,
            threads=self.placement.wrk_threads,
            headers=headers,
            timeout_s=self.opts.wrk_timeout_s,
            cpu=self.placement.wrk_cpu,
            script=self.wrk_script(rs, workload),
        )
        trial: dict[str, Any] = {"error": None, "loadavg": list(os.getloadavg())}
        measured = run_measured(argv, rs.pid, seconds + 60, others)
        proc = measured.proc
        trial["peak_rss_kib"] = measured.peak_rss_kib
        trial["server_alive"] = rs.alive()
        if proc is None:
            trial["error"] = "wrk did not finish in time"
            return trial
        try:
            result = parse_wrk_output(proc.stdout)
        except WrkParseError:
            trial["error"] = (
                f"wrk exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-300:]}"
            )
            return trial
        trial.update(
            rps=result.rps,
            requests=result.requests,
            duration_s=result.duration_s,
            bytes_read=result.bytes_read,
            latency_avg_ms=result.latency_avg_ms,
            latency_max_ms=result.latency_max_ms,
            percentiles_ms=result.percentiles_ms,
            p50_ms=result.p50_ms,
            p99_ms=result.p99_ms,
            mib_per_s=result.bytes_read / max(result.duration_s, 1e-9) / (1 << 20),
            non_2xx_3xx=result.non_2xx_3xx,
            socket_errors=result.socket_errors,
            errors=result.error_count,
        )
        record_cpu(trial, measured, result.requests)
        if result.requests == 0:
            trial["error"] = "no request completed"
        return trial

    def wrk_script(self, rs: RunningServer, workload: Workload) -> str | None:
        """For a workload of several paths, the round-robin Lua script for ``rs``
        (its prefix); for a many-files workload, the random one."""
        if not workload.paths and not workload.tree:
            return None
        script = self.tmp / "wrk-scripts" / f"{workload.name}-{rs.spec.name}.lua"
        if not script.exists():
            script.parent.mkdir(parents=True, exist_ok=True)
            if workload.tree:
                text = random_tree_script(workload.tree, fixtures.TREE_DIRS, rs.prefix)
            else:
                text = round_robin_script([rs.prefix + p for p in workload.paths])
            script.write_text(text)
        return str(script)

    def run_wrk_workload(
        self,
        workload: Workload,
        specs: list[ServerSpec],
        root: Path,
        others: tuple[int, ...] = (),
        fixture: fixtures.Fixture | None = None,
    ) -> list[Entry]:
        """Every server of ``specs`` on ``workload``: probe, warm-up, rotated
        trials.  ``others``: process trees whose CPU each trial also records
        (the proxy workloads' upstream); ``fixture``: what the probe checks
        against (default: the run's fixture)."""
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if nofile != resource.RLIM_INFINITY and nofile < workload.connections + NOFILE_HEADROOM:
            # wrk and the servers inherit this limit (raised by execute()).
            reason = (
                f"RLIMIT_NOFILE {nofile} is too low for {workload.connections} connections "
                f"(raise the hard limit: ulimit -Hn)"
            )
            log(f"  skipped: {reason}")
            return [Entry(workload.name, s.name, status="skipped", reason=reason) for s in specs]
        entries = {s.name: Entry(workload.name, s.name) for s in specs}
        live: dict[str, tuple[RunningServer, tuple[tuple[str, str], ...]]] = {}
        rss_before: dict[str, int] = {}
        with ExitStack() as outer:
            for spec in specs:
                entry = entries[spec.name]
                inner = outer.enter_context(ExitStack())
                rs = inner.enter_context(self.server(spec, workload, root, entry))
                if rs is None:
                    continue
                asked = for_server(workload, spec.tags)  # serverio-identity's Accept-Encoding
                result = probe(asked, rs.port, fixture or self.fixture, rs.prefix)
                entry.probe = result.facts
                if not result.ok:
                    entry.status, entry.reason = "skipped", result.reason
                    log(f"  {spec.name}: skipped: {result.reason}")
                    inner.close()
                    continue
                headers = asked.request_headers() + result.headers
                entry.headers = [list(h) for h in headers]
                live[spec.name] = (rs, headers)
                rss_before[spec.name] = tree_rss_kib(rs.pid)
            if self.opts.warmup_s > 0:
                for name, (rs, headers) in live.items():
                    log(f"  warm-up {name} ({self.opts.warmup_s}s)")
                    self.wrk_once(rs, workload, headers, self.opts.warmup_s, others)
            for rnd in range(self.opts.rounds):  # rotated: A B C, B C A, C A B, ...
                for name in rotation(list(live), rnd):
                    rs, headers = live[name]
                    entry = entries[name]
                    if not rs.alive():
                        continue
                    trial = self.wrk_once(rs, workload, headers, self.opts.duration_s, others)
                    trial["round"] = rnd + 1
                    entry.trials.append(trial)
                    log(f"  round {rnd + 1}/{self.opts.rounds} {name}: {trial_line(trial)}")
            # The collector's figures over the whole run (serverio's /metrics).
            collector = {
                name: scrape_gc(rs.admin_port)
                for name, (rs, _) in live.items()
                if rs.admin_port is not None and rs.alive()
            }
        for name in live:
            summarise_wrk(entries[name])
            summary = entries[name].summary
            # RSS growth: the tree's peak over the timed trials against its
            # RSS after the probe, before any load (the 8 MiB proxy target).
            summary["rss_before_load_mib"] = rss_before[name] / 1024
            summary["rss_growth_mib"] = summary["peak_rss_mib"] - rss_before[name] / 1024
            if collector.get(name):
                summary["gc"] = collector[name]
        return list(entries.values())

    @contextmanager
    def unpinned(self, threads: int) -> Iterator[None]:
        """Servers and the load generator on every CPU (``threads`` wrk threads):
        the harness's own affinity, which the servers inherit, widened for
        the block, and the pinned placement restored after it."""
        pinned, cpus = self.placement, set(self.placement.all_cpus)
        self.placement = Placement(None, None, threads, pinned.all_cpus)
        if cpus:
            os.sched_setaffinity(0, cpus)
        try:
            yield
        finally:
            self.placement = pinned
            if pinned.wrk_cpu is not None:
                os.sched_setaffinity(0, {pinned.wrk_cpu})

    def run_proxy(self, workload: Workload, specs: list[ServerSpec]) -> list[Entry]:
        """The proxy workloads: one upstream for all (bench/proxyrun.py), each
        proxy pointed at it, its CPU recorded beside the proxy's."""
        from bench.proxyrun import upstream, with_upstream

        with upstream(self, self.env, workload) as up:
            if isinstance(up, str):
                log(f"  skipped: {up}")
                return [Entry(workload.name, s.name, status="skipped", reason=up) for s in specs]
            url = up.url("")
            entries = self.run_wrk_workload(
                workload, [with_upstream(s, url) for s in specs], self.fixture.root, (up.pid,)
            )
            for entry in entries:
                entry.probe["upstream"] = f"nginx at {url}, {' '.join(up.argv[:3])}"
            return entries

    def run_tree(self, workload: Workload, specs: list[ServerSpec]) -> list[Entry]:
        """A many-files workload: the servers serve a tree of ``workload.tree``
        1 KiB files, made once and reused (bench/fixtures.py tree_root)."""
        began = time.monotonic()
        root = fixtures.tree_root(workload.tree)
        log(f"  tree of {workload.tree:,} files at {root} ({time.monotonic() - began:.1f}s)")
        tree = fixtures.Fixture(root=root, sizes={})
        return self.run_wrk_workload(workload, specs, root, fixture=tree)

    # -- idle connections --------------------------------------------------------

    def run_idle(self, workload: Workload, specs: list[ServerSpec]) -> list[Entry]:
        entries = {s.name: Entry(workload.name, s.name) for s in specs}
        path = f"/{workload.file}"
        for rnd in range(self.opts.idle_rounds):  # a fresh server per round: RSS starts clean
            for spec in specs:
                entry = entries[spec.name]
                if entry.status in ("skipped", "failed"):
                    continue
                with self.server(spec, workload, self.fixture.root, entry) as rs:
                    if rs is None:
                        continue
                    result = measure_idle(rs.pid, rs.port, path, self.opts.idle_conns)
                    trial = {
                        "round": rnd + 1,
                        **asdict(result),
                        "kib_per_connection": result.kib_per_connection,
                    }
                    trial["server_alive"] = rs.alive()
                    entry.trials.append(trial)
                    log(
                        f"  round {rnd + 1}/{self.opts.idle_rounds} {spec.name}: "
                        f"{result.still_open}/{result.requested}"
                        f" open, {result.kib_per_connection:.1f} KiB/conn"
                    )
        for entry in entries.values():
            if entry.trials:
                summarise_idle(entry)
        return list(entries.values())

    # -- slow storage ------------------------------------------------------------

    def run_slow(self, workload: Workload, specs: list[ServerSpec]) -> list[Entry]:
        def skipped(reason: str) -> list[Entry]:
            log(f"  skipped: {reason}")
            return [Entry(workload.name, s.name, status="skipped", reason=reason) for s in specs]

        reason = slowfs.availability()
        if reason:
            return skipped(reason)
        try:
            with slowfs.slow_mount(
                self.fixture.root,
                self.tmp / "slowfs-mount",
                self.opts.slow_delay_s,
                workload.file or "1k.bin",
            ) as served:
                return self.run_wrk_workload(workload, specs, served)
        except slowfs.SlowFsUnavailable as exc:
            return skipped(str(exc))

    def run_workload(self, workload: Workload) -> list[Entry]:
        specs: list[ServerSpec] = []
        entries: list[Entry] = []
        for spec in self.opts.servers:
            if spec.only_workloads is not None and workload.name not in spec.only_workloads:
                continue
            if workload.server_tags is not None and not (workload.server_tags & spec.tags):
                entries.append(
                    Entry(workload.name, spec.name, "skipped", workload.skip_reason_for_others)
                )
                continue
            specs.append(spec)
        if workload.kind == "idle":
            entries += self.run_idle(workload, specs)
        elif workload.kind == "slow":
            entries += self.run_slow(workload, specs)
        elif workload.kind == "h2load":
            from bench.h2run import run_h2load_workload

            entries += run_h2load_workload(self, workload, specs)
        elif workload.kind == "proxy":
            entries += self.run_proxy(workload, specs)
        elif workload.tree:
            entries += self.run_tree(workload, specs)
        elif workload.cores > 1:
            with self.unpinned(workload.cores):
                entries += self.run_wrk_workload(workload, specs, self.fixture.root)
        else:
            entries += self.run_wrk_workload(workload, specs, self.fixture.root)
        order = {spec.name: i for i, spec in enumerate(self.opts.servers)}
        return sorted(entries, key=lambda e: order[e.server])


def summarise_wrk(entry: Entry) -> None:
    good = [t for t in entry.trials if not t.get("error")]
    failed = len(entry.trials) - len(good)
    rps = [float(t["rps"]) for t in good]
    with_errors = [t for t in good if t["errors"]]
    error_kinds: dict[str, int] = {}
    for t in good:
        if t["non_2xx_3xx"]:
            error_kinds["non-2xx/3xx"] = error_kinds.get("non-2xx/3xx", 0) + int(t["non_2xx_3xx"])
        for kind, count in t["socket_errors"].items():
            if count:
                error_kinds[kind] = error_kinds.get(kind, 0) + int(count)
    entry.summary = {
        "trials": len(entry.trials),
        "failed_trials": failed,
        "trials_with_errors": len(with_errors),
        "error_kinds": error_kinds,
        "median_rps": median(rps),
        "mad_pct": mad_percent(rps),
        "p50_ms": median([float(t["p50_ms"]) for t in good]),
        "p99_ms": median([float(t["p99_ms"]) for t in good]),
        "mean_ms": median([float(t["latency_avg_ms"]) for t in good]),
        "mib_per_s": median([float(t.get("mib_per_s", 0.0)) for t in good]),
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


def summarise_idle(entry: Entry) -> None:
    trials = entry.trials
    per_conn = [float(t["kib_per_connection"]) for t in trials]
    entry.summary = {
        "trials": len(trials),
        "kib_per_connection": median(per_conn),
        "mad_pct": mad_percent(per_conn),
        "requested": int(trials[0]["requested"]),
        "still_open": int(median([float(t["still_open"]) for t in trials])),
        "rss_before_mib": median([float(t["rss_before_kib"]) for t in trials]) / 1024,
        "rss_after_mib": median([float(t["rss_after_kib"]) for t in trials]) / 1024,
        "failures": sum(int(t["failures"]) for t in trials),
        "first_error": next((t["first_error"] for t in trials if t["first_error"]), ""),
        "responsive_after": all(t["responsive_after"] for t in trials),
    }
    if not any(t["still_open"] for t in trials):
        entry.status, entry.reason = (
            "failed",
            entry.summary["first_error"] or "no connection stayed open",
        )
    elif entry.summary["failures"] or not entry.summary["responsive_after"]:
        entry.status = "errors" if entry.status == "ok" else entry.status


def smoke_problems(entries: list[dict[str, Any]], servers: list[str]) -> list[str]:
    """What makes a smoke run fail: harness breakage, never performance."""
    problems = []
    for e in entries:
        if e["status"] == "failed":
            problems.append(f"{e['workload']}/{e['server']}: failed: {e['reason']}")
        elif e["status"] == "skipped" and e["workload"] == "1k-h2":
            # The smoke run's h2 workload: only the servers without an
            # HTTP/2 entry may sit it out.
            if e["reason"] != H2_ONLY_REASON:
                problems.append(f"{e['workload']}/{e['server']}: skipped: {e['reason']}")
        elif e["status"] == "skipped" and e["workload"] in ("1k", "1k-churn", "idle"):
            problems.append(
                f"{e['workload']}/{e['server']}: skipped a basic workload: {e['reason']}"
            )
    ran = {e["server"] for e in entries if e["status"] in ("ok", "errors")}
    problems += [f"{name}: never served a workload" for name in servers if name not in ran]
    return problems


def execute(opts: RunOptions) -> int:
    """Run everything in ``opts``; write the artifact; print the table. Returns the exit code."""
    wrk = shutil.which("wrk")
    if wrk is None:
        log("wrk not found: apt-get install -y wrk (or python -m bench setup)")
        return 2
    nofile = raise_nofile()
    env = HarnessEnv(
        repo=opts.repo,
        python=sys.executable,
        peers_python=opts.peers_venv / "bin" / "python",
        nginx=find_nginx(),
    )
    unavailable = {s.name: r for s in opts.servers if (r := KINDS[s.kind].unavailable(env))}
    for name, reason in unavailable.items():
        log(f"server {name} unavailable: {reason}")
    if unavailable and (opts.explicit_servers or opts.mode == "smoke"):
        log("requested servers are unavailable; nothing was run")
        return 2
    opts.servers = [s for s in opts.servers if s.name not in unavailable]
    if not opts.servers:
        log("no server available")
        return 2
    placement = _placement(opts)
    if placement.wrk_cpu is not None:
        os.sched_setaffinity(0, {placement.wrk_cpu})  # keep the harness off the server's CPU
    started = time.time()
    run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started)) + f"-{opts.mode}"
    names = [s.name for s in opts.servers]
    reference = opts.reference if opts.reference in names else names[0]
    artifact: dict[str, Any] = {
        "schema": SCHEMA,
        "run_id": run_id,
        "mode": opts.mode,
        "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(started)),
        "loadavg_start": list(os.getloadavg()),
        "settings": {
            "rounds": opts.rounds,
            "duration_s": opts.duration_s,
            "warmup_s": opts.warmup_s,
            "idle_conns": opts.idle_conns,
            "idle_rounds": opts.idle_rounds,
            "wrk_threads": placement.wrk_threads,
            "wrk_timeout_s": opts.wrk_timeout_s,
            "server_cpu": placement.server_cpu,
            "wrk_cpu": placement.wrk_cpu,
            "placement": placement.describe(),
            "nofile": nofile,
            "slow_delay_s": opts.slow_delay_s,
            "reference": reference,
        },
        "machine": machine_facts(opts.repo, env.peers_python, env.nginx, wrk),
        "servers": {
            s.name: {
                "kind": s.kind,
                "description": s.description,
                "extra_args": list(s.extra_args),
                **({"commit": s.commit} if s.commit else {}),
            }
            for s in opts.servers
        },
        "unavailable": unavailable,
        "workloads": {
            w.name: {
                "description": w.description,
                "kind": w.kind,
                "path": w.path,
                "connections": w.connections if w.kind != "idle" else opts.idle_conns,
                "churn": w.churn,
                "cores": w.cores,
                **(
                    {"streams": w.streams, "paths": len(w.request_paths()), "h1": w.h1}
                    if w.kind == "h2load"
                    else {}
                ),
                **(
                    {"paths": list(w.paths), "script": "round robin (bench/wrk.py)"}
                    if w.kind == "wrk" and w.paths
                    else {}
                ),
                "headers": [list(h) for h in w.request_headers()],
            }
            for w in opts.workloads
        },
        "results": [],
    }
    log(
        f"run {run_id}: servers {', '.join(names)}; "
        f"workloads {', '.join(w.name for w in opts.workloads)}"
    )
    log(f"placement: {placement.describe()}")
    tmp = Path(tempfile.mkdtemp(prefix="serverio-bench-"))
    try:
        run = Run(opts, env, placement, tmp)
        for workload in opts.workloads:
            log(f"workload {workload.name}: {workload.description}")
            artifact["results"].extend(asdict(e) for e in run.run_workload(workload))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    artifact["finished_utc"] = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    artifact["elapsed_s"] = round(time.time() - started, 1)
    artifact["loadavg_end"] = list(os.getloadavg())
    opts.out_dir.mkdir(parents=True, exist_ok=True)
    path = opts.out_dir / f"{run_id}.json"
    path.write_text(json.dumps(artifact, indent=2, sort_keys=False) + "\n")
    print(report.render_markdown(artifact))
    log(f"artifact: {path}")
    if opts.plots:
        log(report.plots_message(report.write_plots(artifact, opts.out_dir / run_id)))
    problems = [
        f"{e['workload']}/{e['server']}: failed: {e['reason']}"
        for e in artifact["results"]
        if e["status"] == "failed"
    ]
    if opts.mode == "smoke":
        problems = smoke_problems(artifact["results"], names)
        log("smoke: OK" if not problems else "smoke: FAILED")
    for problem in problems:
        log(f"  {problem}")
    return 1 if problems else 0
