"""Building h2load command lines, parsing its report and its per-request log.

h2load (Debian ``nghttp2-client``) prints min/max/mean/sd of the request
time but no percentiles. With ``--log-file`` it writes one line per finished
request, tab-separated: start time (microseconds since the epoch), status
code, microseconds until the end of the response; the percentiles here come
from those lines.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

_TIME_UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0}

_FINISHED_RE = re.compile(r"^finished in (?P<dur>[\d.]+)(?P<unit>us|ms|s), (?P<rps>[\d.]+) req/s")
_REQUESTS_RE = re.compile(
    r"^requests: (?P<total>\d+) total, (?P<started>\d+) started, (?P<done>\d+) done, "
    r"(?P<succeeded>\d+) succeeded, (?P<failed>\d+) failed, (?P<errored>\d+) errored, "
    r"(?P<timeout>\d+) timeout"
)
_STATUS_RE = re.compile(
    r"^status codes: (?P<s2>\d+) 2xx, (?P<s3>\d+) 3xx, (?P<s4>\d+) 4xx, (?P<s5>\d+) 5xx"
)
_TRAFFIC_RE = re.compile(r"^traffic: \S+ \((?P<total>\d+)\) total, .*\((?P<data>\d+)\) data")
_T = r"([\d.]+)(us|ms|s)"
_REQUEST_TIME_RE = re.compile(rf"^time for request:\s+{_T}\s+{_T}\s+{_T}\s+{_T}")
_PROTOCOL_RE = re.compile(r"^Application protocol: (?P<proto>\S+)")


class H2loadParseError(ValueError):
    """h2load printed something this parser does not recognise as a report."""


@dataclass(frozen=True)
class H2loadResult:
    duration_s: float
    rps: float
    done: int
    succeeded: int
    failed: int
    errored: int
    timeout: int
    status: dict[str, int]
    bytes_total: int
    bytes_data: int
    protocol: str
    latency_min_ms: float
    latency_max_ms: float
    latency_mean_ms: float
    latency_sd_ms: float
    percentiles_ms: dict[str, float] = field(default_factory=dict)

    @property
    def error_count(self) -> int:
        return self.failed + self.errored + self.timeout + self.status["4xx"] + self.status["5xx"]

    @property
    def p50_ms(self) -> float:
        return self.percentiles_ms.get("50", 0.0)

    @property
    def p99_ms(self) -> float:
        return self.percentiles_ms.get("99", 0.0)


def _ms(value: str, unit: str) -> float:
    return float(value) * _TIME_UNITS_MS[unit]


def parse_h2load_output(text: str, percentiles_ms: dict[str, float] | None = None) -> H2loadResult:
    """Parse h2load's stdout report; ``percentiles_ms`` come from its log file, if any.

    Raises H2loadParseError when the summary lines are missing (e.g. the
    connection failed before any request).
    """
    found: dict[str, re.Match[str]] = {}
    for line in text.splitlines():
        line = line.strip()
        for key, regex in (
            ("finished", _FINISHED_RE),
            ("requests", _REQUESTS_RE),
            ("status", _STATUS_RE),
            ("traffic", _TRAFFIC_RE),
            ("time", _REQUEST_TIME_RE),
            ("protocol", _PROTOCOL_RE),
        ):
            if key not in found and (m := regex.match(line)):
                found[key] = m
                break
    missing = {"finished", "requests", "status"} - found.keys()
    if missing:
        raise H2loadParseError(f"no {', '.join(sorted(missing))} line in h2load output")
    fin, req, st = found["finished"], found["requests"], found["status"]
    traffic, timing, proto = found.get("traffic"), found.get("time"), found.get("protocol")
    times = [0.0] * 4
    if timing is not None:
        times = [_ms(timing[2 * i + 1], timing[2 * i + 2]) for i in range(4)]
    return H2loadResult(
        duration_s=_ms(fin["dur"], fin["unit"]) / 1000.0,
        rps=float(fin["rps"]),
        done=int(req["done"]),
        succeeded=int(req["succeeded"]),
        failed=int(req["failed"]),
        errored=int(req["errored"]),
        timeout=int(req["timeout"]),
        status={
            "2xx": int(st["s2"]),
            "3xx": int(st["s3"]),
            "4xx": int(st["s4"]),
            "5xx": int(st["s5"]),
        },
        bytes_total=int(traffic["total"]) if traffic else 0,
        bytes_data=int(traffic["data"]) if traffic else 0,
        protocol=proto["proto"] if proto else "",
        latency_min_ms=times[0],
        latency_max_ms=times[1],
        latency_mean_ms=times[2],
        latency_sd_ms=times[3],
        percentiles_ms=dict(percentiles_ms or {}),
    )


def percentile(sorted_values: list[float], pct: float) -> float:
    """Nearest-rank percentile of an ascending list (0.0 for an empty one)."""
    if not sorted_values:
        return 0.0
    # round() first: 99.9 / 100 * 1000 is 999.0000000000001 in floating point.
    rank = max(1, math.ceil(round(pct * len(sorted_values) / 100.0, 6)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


PERCENTILES = (50.0, 90.0, 99.0, 99.9)


def log_percentiles(lines: Iterable[str]) -> dict[str, float]:
    """p50/p90/p99/p99.9 in ms of the request times in an h2load ``--log-file``."""
    times: list[float] = []
    for line in lines:
        parts = line.split("\t")
        if len(parts) >= 3 and parts[2].strip().isdigit():
            times.append(int(parts[2]) / 1000.0)
    times.sort()
    if not times:
        return {}
    return {f"{p:g}": percentile(times, p) for p in PERCENTILES}


def read_log_percentiles(path: Path) -> dict[str, float]:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return log_percentiles(f)
    except OSError:
        return {}


def h2load_command(
    urls: list[str],
    *,
    connections: int,
    streams: int,
    duration_s: int,
    threads: int = 1,
    h1: bool = False,
    timeout_s: int = 5,
    log_file: Path | None = None,
    cpu: int | None = None,
    h2load: str = "h2load",
) -> list[str]:
    """The argv for one h2load run of ``duration_s`` seconds, optionally pinned to ``cpu``.

    ``urls`` are requested round robin on every connection (all on one
    origin). ``-N`` ends a connection that receives nothing for
    ``timeout_s``, as wrk's ``--timeout`` does.
    """
    argv = [] if cpu is None else ["taskset", "-c", str(cpu)]
    argv += [
        h2load,
        f"-t{max(1, min(threads, connections))}",
        f"-c{connections}",
        f"-m{max(1, streams)}",
        f"-D{max(1, duration_s)}",
        f"-N{timeout_s}",
    ]
    if h1:
        argv.append("--h1")
    if log_file is not None:
        argv.append(f"--log-file={log_file}")
    return argv + urls
