"""Server CPU per request (bench/procstat.py): utime + stime (+ reaped
children's) summed over a process tree read from a fake /proc, and the
per-request arithmetic the wrk and h2load tables print."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import procstat, report
from bench.trials import cpu_summary, record_cpu, trial_line


def _stat(
    pid: int, comm: str, ppid: int, utime: int, stime: int, cut: int = 0, cst: int = 0
) -> str:
    # proc(5): pid (comm) state ppid pgrp session tty_nr tpgid flags minflt
    # cminflt majflt cmajflt utime stime cutime cstime priority nice ...
    rest = [ppid, 1, 1, 0, -1, 4194560, 10, 0, 0, 0, utime, stime, cut, cst, 20, 0, 1, 0]
    return f"{pid} ({comm}) S " + " ".join(str(v) for v in rest) + "\n"


def _proc(tmp_path: Path, procs: dict[int, tuple[str, int, int, int, int, int, int]]) -> Path:
    root = tmp_path / "proc"
    root.mkdir(exist_ok=True)
    for pid, (comm, ppid, ut, st, cut, cst, rss) in procs.items():
        d = root / str(pid)
        d.mkdir(exist_ok=True)
        (d / "stat").write_text(_stat(pid, comm, ppid, ut, st, cut, cst))
        (d / "status").write_text(f"Name:\t{comm}\nVmRSS:\t{rss} kB\n")
    (root / "self").mkdir(exist_ok=True)  # not a pid: ignored
    return root


def test_cpu_ticks_reads_fields_14_to_17(tmp_path: Path) -> None:
    proc = _proc(tmp_path, {10: ("nginx", 1, 300, 200, 7, 3, 100)})
    assert procstat.cpu_ticks(10, proc) == 300 + 200 + 7 + 3


def test_command_names_with_spaces_and_parentheses(tmp_path: Path) -> None:
    # The command name may hold ") " itself: the fields start after the last ")".
    proc = _proc(tmp_path, {10: ("a) b (c", 1, 11, 22, 0, 0, 5)})
    assert procstat.cpu_ticks(10, proc) == 33
    assert procstat.process_tree(10, proc) == [10]


def test_tree_sums_master_and_workers_not_strangers(tmp_path: Path) -> None:
    proc = _proc(
        tmp_path,
        {
            100: ("nginx", 1, 5, 5, 0, 0, 4000),  # master
            101: ("nginx", 100, 400, 600, 0, 0, 3000),  # worker
            102: ("nginx", 100, 100, 100, 0, 0, 3000),  # worker
            103: ("helper", 101, 1, 2, 0, 0, 10),  # a worker's child
            200: ("wrk", 1, 9999, 9999, 0, 0, 1),  # not in the tree
        },
    )
    assert sorted(procstat.process_tree(100, proc)) == [100, 101, 102, 103]
    assert procstat.tree_cpu_ticks(100, proc) == 10 + 1000 + 200 + 3
    assert procstat.tree_rss_kib(100, proc) == 4000 + 3000 + 3000 + 10


def test_gone_process_counts_nothing(tmp_path: Path) -> None:
    proc = _proc(tmp_path, {10: ("x", 1, 1, 1, 0, 0, 1)})
    assert procstat.cpu_ticks(99, proc) == 0
    assert procstat.tree_cpu_ticks(99, proc) == 0


def test_a_reaped_worker_moves_into_cutime_and_is_not_lost(tmp_path: Path) -> None:
    before = _proc(
        tmp_path, {1000: ("srv", 1, 50, 50, 0, 0, 1), 1001: ("w", 1000, 30, 20, 0, 0, 1)}
    )
    start = procstat.tree_cpu_ticks(1000, before)
    (before / "1001" / "stat").unlink()  # the worker exits; the master reaps it
    (before / "1001" / "status").unlink()
    (before / "1001").rmdir()
    (before / "1000" / "stat").write_text(_stat(1000, "srv", 1, 60, 50, 40, 25))
    # master +10 own ticks; the worker's 50 before plus 15 more, now in cutime/cstime
    assert procstat.tree_cpu_ticks(1000, before) - start == 10 + 15


def test_cpu_per_request_arithmetic() -> None:
    # 250 ticks at 100 Hz = 2.5 s over 50,000 requests = 50 µs each.
    assert procstat.cpu_us_per_request(250, 50_000, 100) == pytest.approx(50.0)
    assert procstat.cpu_us_per_request(250, 0, 100) is None
    assert procstat.cpu_us_per_request(0, 10, 100) == 0.0


def test_measured_and_trial_fields() -> None:
    m = procstat.Measured(None, 2048, 1024, 120, 100, {77: 30})
    trial: dict[str, object] = {"rps": 4000.0, "p99_ms": 3.0, "peak_rss_kib": 2048, "errors": 0}
    record_cpu(trial, m, 20_000)
    assert trial["cpu_us_per_req"] == pytest.approx(60.0)  # 1.2 s / 20,000
    assert trial["upstream_cpu_us_per_req"] == pytest.approx(15.0)  # 0.3 s / 20,000
    assert trial["rss_start_kib"] == 1024
    assert "cpu 60.0 us/req" in trial_line(trial) and "upstream cpu 15.0" in trial_line(trial)


def test_summary_is_the_median_over_good_trials() -> None:
    trials = [{"cpu_us_per_req": v} for v in (80.0, 50.0, 60.0)]
    assert cpu_summary(trials) == {"cpu_us_per_req": 60.0}
    assert cpu_summary([{}]) == {"cpu_us_per_req": None}  # artifacts from before


def test_report_prints_cpu_beside_rps() -> None:
    summary: dict[str, float] = {
        "median_rps": 10_000.0,
        "cpu_us_per_req": 84.9,
        "mean_ms": 6.0,
        "p50_ms": 5.0,
        "p99_ms": 9.0,
        "mib_per_s": 11.0,
        "mad_pct": 1.0,
        "peak_rss_mib": 30.0,
    }
    entry: dict[str, object] = {
        "workload": "1k",
        "server": "serverio-inline",
        "status": "ok",
        "reason": "",
        "summary": summary,
    }
    row = report._wrk_table([entry], "serverio-inline")[2]
    assert row.startswith("| serverio-inline | 10,000 | 84.9 | 6.00 |")
    old = {**entry, "summary": {k: v for k, v in summary.items() if k != "cpu_us_per_req"}}
    assert report._wrk_table([old], "serverio-inline")[2].startswith(
        "| serverio-inline | 10,000 |  |"
    )
