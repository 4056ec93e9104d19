"""Building wrk command lines and parsing wrk's ``--latency`` report."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_TIME_UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0, "h": 3_600_000.0}
_BYTE_UNITS = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3, "TB": 1024**4}

_PERCENTILE_RE = re.compile(
    r"^\s*(?P<pct>\d+(?:\.\d+)?)%\s+(?P<value>[\d.]+)(?P<unit>us|ms|s|m|h)\s*$"
)
_LATENCY_RE = re.compile(
    r"^\s*Latency\s+(?P<avg>[\d.]+)(?P<avg_unit>us|ms|s|m|h)\s+(?P<stdev>[\d.]+)(?P<stdev_unit>us|ms|s|m|h)"
    r"\s+(?P<max>[\d.]+)(?P<max_unit>us|ms|s|m|h)"
)
_REQUESTS_RE = re.compile(
    r"^\s*(?P<requests>\d+) requests in (?P<dur>[\d.]+)(?P<dur_unit>us|ms|s|m|h), "
    r"(?P<bytes>[\d.]+)(?P<bytes_unit>[KMGT]?B) read"
)
_SOCKET_RE = re.compile(
    r"^\s*Socket errors: connect (?P<connect>\d+), read (?P<read>\d+), "
    r"write (?P<write>\d+), timeout (?P<timeout>\d+)"
)
_NON2XX_RE = re.compile(r"^\s*Non-2xx or 3xx responses: (?P<count>\d+)")
_RPS_RE = re.compile(r"^Requests/sec:\s+(?P<rps>[\d.]+)")


class WrkParseError(ValueError):
    """wrk printed something this parser does not recognise as a report."""


@dataclass(frozen=True)
class WrkResult:
    requests: int
    duration_s: float
    rps: float
    bytes_read: int
    latency_avg_ms: float
    latency_max_ms: float
    percentiles_ms: dict[str, float]
    socket_errors: dict[str, int] = field(default_factory=dict)
    non_2xx_3xx: int = 0

    @property
    def p50_ms(self) -> float:
        return self.percentiles_ms.get("50", 0.0)

    @property
    def p99_ms(self) -> float:
        return self.percentiles_ms.get("99", 0.0)

    @property
    def error_count(self) -> int:
        return self.non_2xx_3xx + sum(self.socket_errors.values())


def _ms(value: str, unit: str) -> float:
    return float(value) * _TIME_UNITS_MS[unit]


def parse_wrk_output(text: str) -> WrkResult:
    """Parse the report ``wrk --latency`` prints to stdout.

    Raises WrkParseError when the summary lines (request count, Requests/sec)
    are missing, e.g. because wrk could not connect at all.
    """
    percentiles: dict[str, float] = {}
    socket_errors = {"connect": 0, "read": 0, "write": 0, "timeout": 0}
    non_2xx = 0
    avg_ms = max_ms = 0.0
    requests: int | None = None
    duration_s = 0.0
    bytes_read = 0
    rps: float | None = None
    in_distribution = False
    for line in text.splitlines():
        if line.strip() == "Latency Distribution":
            in_distribution = True
            continue
        if in_distribution:
            m = _PERCENTILE_RE.match(line)
            if m:
                percentiles[m["pct"].removesuffix(".000").removesuffix(".0")] = _ms(
                    m["value"], m["unit"]
                )
                continue
            in_distribution = False
        if m := _LATENCY_RE.match(line):
            avg_ms = _ms(m["avg"], m["avg_unit"])
            max_ms = _ms(m["max"], m["max_unit"])
        elif m := _REQUESTS_RE.match(line):
            requests = int(m["requests"])
            duration_s = _ms(m["dur"], m["dur_unit"]) / 1000.0
            bytes_read = int(float(m["bytes"]) * _BYTE_UNITS[m["bytes_unit"]])
        elif m := _SOCKET_RE.match(line):
            socket_errors = {k: int(m[k]) for k in ("connect", "read", "write", "timeout")}
        elif m := _NON2XX_RE.match(line):
            non_2xx = int(m["count"])
        elif m := _RPS_RE.match(line):
            rps = float(m["rps"])
    if requests is None or rps is None:
        raise WrkParseError("no request summary in wrk output")
    return WrkResult(
        requests=requests,
        duration_s=duration_s,
        rps=rps,
        bytes_read=bytes_read,
        latency_avg_ms=avg_ms,
        latency_max_ms=max_ms,
        percentiles_ms=percentiles,
        socket_errors=socket_errors,
        non_2xx_3xx=non_2xx,
    )


def wrk_command(
    url: str,
    *,
    connections: int,
    duration_s: int,
    threads: int,
    headers: tuple[tuple[str, str], ...] = (),
    timeout_s: int = 5,
    cpu: int | None = None,
    wrk: str = "wrk",
    script: str | None = None,
) -> list[str]:
    """The argv for one wrk run, optionally pinned to ``cpu`` with taskset.

    ``script`` is a Lua file for ``wrk -s`` (e.g. ``round_robin_script``'s);
    the ``-H`` headers still apply to the requests it builds.
    """
    argv = [] if cpu is None else ["taskset", "-c", str(cpu)]
    argv += [
        wrk,
        "--latency",
        f"-t{max(1, min(threads, connections))}",
        f"-c{connections}",
        f"-d{max(1, duration_s)}s",
        f"--timeout={timeout_s}s",
    ]
    if script is not None:
        argv += ["-s", script]
    for name, value in headers:
        argv += ["-H", f"{name}: {value}"]
    argv.append(url)
    return argv


# Paths go into a Lua string literal verbatim: only characters that need no escaping.
_LUA_SAFE_PATH = re.compile(r"/[A-Za-z0-9/._~%-]*")

ROUND_ROBIN_LUA = """\
-- Written by bench: GET these {count} paths round robin. wrk's Lua API has
-- no per-connection hook, so the counter belongs to the wrk thread: each
-- new request, on whichever connection is ready, takes the next path, and
-- every path gets 1/{count} of the requests. The requests are formatted once
-- in init(); wrk.format uses wrk.headers (the -H headers and Host).
local paths = {{
{items}
}}
local requests = {{}}
local n = 0

function init(args)
    for i, path in ipairs(paths) do
        requests[i] = wrk.format("GET", path)
    end
end

function request()
    n = n % #requests + 1
    return requests[n]
end
"""


def round_robin_script(paths: list[str]) -> str:
    """A wrk Lua script that requests ``paths`` (absolute paths, no query) round robin."""
    if not paths:
        raise ValueError("no paths to request")
    for path in paths:
        if not _LUA_SAFE_PATH.fullmatch(path):
            raise ValueError(f"path not safe in a Lua string literal: {path!r}")
    items = "\n".join(f'    "{path}",' for path in paths)
    return ROUND_ROBIN_LUA.format(count=len(paths), items=items)


RANDOM_TREE_LUA = """\
-- Written by bench: GET one of {count} files chosen at random (uniformly)
-- for every request: {prefix}/dDD/fNNNNNN.bin, DD = N mod {dirs}
-- (bench/fixtures.py tree_name).  Formatted per request (100,000 requests
-- could not be formatted once); wrk.format uses wrk.headers.
local count, dirs, prefix = {count}, {dirs}, "{prefix}"

function init(args)
    math.randomseed({seed})
end

function request()
    local i = math.random(0, count - 1)
    return wrk.format("GET", string.format("%s/d%02d/f%06d.bin", prefix, i % dirs, i))
end
"""


def random_tree_script(count: int, dirs: int, prefix: str = "", seed: int = 47) -> str:
    """A wrk Lua script requesting the files of a ``count``-file tree
    (bench/fixtures.py ``tree_name``) at random, under URL ``prefix``."""
    if count < 1 or not 1 <= dirs <= 100:
        raise ValueError(f"a tree of {count} files in {dirs} directories")
    if prefix and not _LUA_SAFE_PATH.fullmatch(prefix):
        raise ValueError(f"prefix not safe in a Lua string literal: {prefix!r}")
    return RANDOM_TREE_LUA.format(count=count, dirs=dirs, prefix=prefix.rstrip("/"), seed=seed)
