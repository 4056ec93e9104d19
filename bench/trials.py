"""What the wrk runner (bench.runner) and the h2load runner (bench.h2run) share.

The run's options and CPU placement, the outcome of one (workload, server)
pair, the progress log, a trial's progress line, and :class:`WorkloadRun`:
what a workload runner needs of the run (bench.runner.Run provides it), so
that bench.h2run depends on this module and not back on bench.runner.
"""

from __future__ import annotations

import sys
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from bench.fixtures import Fixture
from bench.procstat import Measured
from bench.servers import RunningServer, ServerSpec
from bench.stats import median
from bench.workloads import Workload

SLOW_DELAY_S = 0.010


@dataclass
class RunOptions:
    mode: str
    servers: list[ServerSpec]
    explicit_servers: bool
    workloads: list[Workload]
    rounds: int
    duration_s: int
    warmup_s: int
    idle_conns: int
    idle_rounds: int
    reference: str
    pin: bool
    wrk_threads: int | None
    out_dir: Path
    plots: bool
    peers_venv: Path
    repo: Path
    wrk_timeout_s: int = 5
    slow_delay_s: float = SLOW_DELAY_S


@dataclass
class Placement:
    server_cpu: int | None
    wrk_cpu: int | None
    wrk_threads: int
    # Every CPU the harness may use (the two-core workloads run unpinned on them).
    all_cpus: tuple[int, ...] = ()

    def describe(self) -> str:
        if self.server_cpu is None:
            return f"not pinned; wrk -t{self.wrk_threads}"
        return (
            f"server on CPU {self.server_cpu}, wrk (and harness) on CPU {self.wrk_cpu}; "
            f"wrk -t{self.wrk_threads}"
        )


@dataclass
class Entry:
    """The outcome for one (workload, server) pair."""

    workload: str
    server: str
    status: str = "ok"  # ok | errors | skipped | failed
    reason: str = ""
    probe: dict[str, str] = field(default_factory=dict)
    headers: list[list[str]] = field(default_factory=list)
    startup_s: float | None = None
    argv: list[str] = field(default_factory=list)
    trials: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    log_tail: str = ""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def trial_line(trial: dict[str, Any]) -> str:
    """One trial in one progress line: its error, or RPS, server CPU per
    request, p99, peak RSS and errors."""
    if trial.get("error"):
        return f"ERROR {trial['error']}"
    cpu = trial.get("cpu_us_per_req")
    line = (
        f"{trial['rps']:,.0f} rps"
        + (f", cpu {cpu:,.1f} us/req" if cpu is not None else "")
        + f", p99 {trial['p99_ms']:.2f} ms, rss {trial['peak_rss_kib'] / 1024:.1f} MiB"
    )
    up = trial.get("upstream_cpu_us_per_req")
    if up is not None:
        line += f", upstream cpu {up:,.1f} us/req"
    return line + (f", {trial['errors']} errors" if trial["errors"] else "")


def record_cpu(trial: dict[str, Any], measured: Measured, requests: int) -> None:
    """The trial's server CPU (and RSS at its start) from ``measured``: see bench.procstat."""
    trial["rss_start_kib"] = measured.rss_start_kib
    trial["cpu_ticks"] = measured.cpu_ticks
    trial["clk_tck"] = measured.hz
    trial["cpu_us_per_req"] = measured.cpu_us_per_request(requests)
    if measured.other_cpu_ticks:
        pid, ticks = next(iter(measured.other_cpu_ticks.items()))
        trial["upstream_cpu_ticks"] = ticks
        trial["upstream_cpu_us_per_req"] = measured.other_cpu_us_per_request(pid, requests)


def cpu_summary(good: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the good trials of the CPU figures of :func:`record_cpu`
    (None when no trial has one: artifacts from before them)."""
    out: dict[str, Any] = {}
    for key in ("cpu_us_per_req", "upstream_cpu_us_per_req"):
        values = [float(t[key]) for t in good if t.get(key) is not None]
        if values or key == "cpu_us_per_req":
            out[key] = median(values) if values else None
    return out


class WorkloadRun(Protocol):
    """What a workload runner uses of the run (bench.runner.Run)."""

    opts: RunOptions
    placement: Placement
    tmp: Path
    fixture: Fixture

    def server(
        self, spec: ServerSpec, workload: Workload, root: Path, entry: Entry
    ) -> AbstractContextManager[RunningServer | None]:
        """Start ``spec`` for ``workload``; None (and ``entry`` filled) when it cannot run."""
        ...
