"""``python -m bench dav``: the write and WebDAV workloads (issue 29).

Servers (bench/davservers.py) each get a writable root of their own and
run together for the whole run, pinned to the server CPU; this process is
the load client (bench/davclient.py) on the other CPU.  Workloads, each in
rotated rounds (round r starts with server r):

- ``propfind-10k``: ``PROPFIND`` ``Depth: 1`` of a directory of 10,000
  files asking for five live properties (what mounting clients such as
  rclone and davfs2 ask), one keep-alive connection; an untimed first
  PROPFIND per server, then one timed per round.  Checked: 207, and the
  multistatus names the collection and each of the 10,000 files once.
- ``put-4k-c16``: 1,000 PUTs of distinct 4 KiB bodies to new paths over
  16 keep-alive connections.  Checked: every answer 201, every file on
  disk byte-identical.
- ``put-1g``: one PUT of a 1 GiB file (``os.sendfile`` from the client),
  throughput from the first byte sent to the answer.  Checked: 201, the
  file's SHA-256 equals the source's.  ``os.sync()`` before each trial, so
  no trial pays for the previous one's dirty pages; the file is removed
  after it.

For each trial: the server tree's CPU time over the trial (bench/procstat.py)
and its RSS right before and at its peak (sampled every 100 ms).  Then
``litmus`` (basic, copymove, props, locks, http) against every WebDAV
server, each suite's pass count recorded.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from bench import davclient
from bench.davservers import DAV_KINDS, DAV_SERVERS, PUT_ONLY
from bench.machine import machine_facts
from bench.procstat import PeakRssSampler, clock_ticks_per_s, tree_cpu_ticks, tree_rss_kib
from bench.servers import (
    DEFAULT_PEERS_VENV,
    HarnessEnv,
    RunningServer,
    ServerSpec,
    ServerStartError,
    find_nginx,
    running,
)
from bench.stats import median
from bench.trials import log

__all__ = [
    "LITMUS_SUITES",
    "PROPFIND_BODY",
    "WORKLOADS",
    "DavOptions",
    "Sizes",
    "add_parser",
    "body_4k",
    "check_multistatus",
    "execute",
    "litmus_summary",
    "render_markdown",
    "run",
    "smoke",
    "targets",
]

MiB = 1 << 20
REPO = Path(__file__).resolve().parent.parent
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
WORKLOADS = ("propfind-10k", "put-4k-c16", "put-1g")
LITMUS_SUITES = ("basic", "copymove", "props", "locks", "http")
PROPFIND_BODY = (
    b'<?xml version="1.0" encoding="utf-8"?>\n'
    b'<D:propfind xmlns:D="DAV:"><D:prop><D:resourcetype/><D:getcontentlength/>'
    b"<D:getlastmodified/><D:getetag/><D:getcontenttype/></D:prop></D:propfind>"
)


@dataclass(frozen=True)
class Sizes:
    """How big each workload is (``--smoke`` shrinks them)."""

    put_bytes: int = 1024 * MiB
    puts: int = 1000
    put_size: int = 4096
    connections: int = 16
    entries: int = 10_000


SMOKE_SIZES = Sizes(put_bytes=8 * MiB, puts=100, entries=200)


@dataclass
class DavOptions:
    servers: list[ServerSpec]
    workloads: list[str]
    sizes: Sizes = Sizes()
    rounds: int = 3
    litmus: bool = True
    pin: bool = True
    out_dir: Path = ARTIFACTS
    peers_venv: Path = DEFAULT_PEERS_VENV
    mode: str = "dav"


@dataclass
class Server:
    """One running server of the run, with its root."""

    rs: RunningServer
    root: Path
    work: Path
    failed: str = ""

    @property
    def name(self) -> str:
        return self.rs.spec.name


@dataclass
class Trial:
    ok: bool
    value: float  # the workload's figure: MiB/s, requests/s or PROPFINDs/s
    cpu_s: float
    rss_start_mib: float
    rss_peak_mib: float
    facts: dict[str, Any] = field(default_factory=dict)
    error: str = ""


# ------------------------------------------------------------------ fixtures


def body_4k(i: int, size: int = 4096) -> bytes:
    """The body of PUT number ``i``: distinct per ``i``, fixed per run."""
    rng = random.Random(i)
    return rng.randbytes(size)


def make_source(path: Path, size: int) -> str:
    """``size`` random bytes (64 MiB blocks, each stamped with its index,
    so a reordering shows) at ``path``; their SHA-256."""
    block = os.urandom(min(size, 64 * MiB))
    digest = hashlib.sha256()
    with open(path, "wb") as f:
        written, n = 0, 0
        while written < size:
            part = n.to_bytes(8, "big") + block[8 : min(len(block), size - written)]
            f.write(part)
            digest.update(part)
            written += len(part)
            n += 1
    return digest.hexdigest()


def make_root(root: Path, sizes: Sizes, rounds: int) -> None:
    """A server's root: ``big/`` with ``entries`` files of 100 bytes, and an
    empty ``put4k/rN/`` per round for the small PUTs."""
    big = root / "big"
    big.mkdir(parents=True)
    data = b"x" * 100
    for i in range(sizes.entries):
        (big / f"e{i:05d}.txt").write_bytes(data)
    for r in range(rounds + 1):
        (root / "put4k" / f"r{r}").mkdir(parents=True)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(4 * MiB):
            digest.update(chunk)
    return digest.hexdigest()


# ------------------------------------------------------------------ checks


def check_multistatus(body: bytes, collection: str, names: set[str]) -> str:
    """ "" when ``body`` is a multistatus naming ``collection`` and each of
    ``names`` (its members) exactly once, else what is wrong."""
    try:
        tree = ET.fromstring(body)
    except ET.ParseError as exc:
        return f"not XML: {exc}"
    if tree.tag != "{DAV:}multistatus":
        return f"not a DAV:multistatus: {tree.tag}"
    seen: list[str] = []
    for resp in tree.iter("{DAV:}response"):
        href = resp.findtext("{DAV:}href") or ""
        path = unquote(href.split("://", 1)[-1].partition("/")[2] if "://" in href else href)
        seen.append(path.rstrip("/").rsplit("/", 1)[-1])
    members = [s for s in seen if s in names]
    if len(members) != len(names) or set(members) != names:
        return f"{len(set(members))} of {len(names)} members listed ({len(seen)} responses)"
    if len(seen) != len(names) + 1 or collection not in seen:
        return f"{len(seen)} responses, expected the collection and {len(names)} members"
    return ""


# ------------------------------------------------------------------ trials


def _measured(server: Server, work: Callable[[], tuple[float, dict[str, Any]]]) -> Trial:
    pid = server.rs.pid
    hz = clock_ticks_per_s()
    rss0 = tree_rss_kib(pid)
    ticks0 = tree_cpu_ticks(pid)
    with PeakRssSampler(pid) as sampler:
        try:
            value, facts = work()
            error = facts.pop("error", "")
        except (OSError, davclient.ClientError) as exc:
            value, facts, error = 0.0, {}, f"{type(exc).__name__}: {exc}"
    cpu_s = (tree_cpu_ticks(pid) - ticks0) / hz
    if not server.rs.alive():
        error = error or f"server exited with {server.rs.proc.returncode}"
    return Trial(not error, value, cpu_s, rss0 / 1024, sampler.peak_kib / 1024, facts, error)


def trial_put_1g(server: Server, rnd: int, source: Path, sha: str) -> Trial:
    os.sync()  # the previous trial's dirty pages are not this one's cost
    name = f"gib-r{rnd}.bin"
    size = source.stat().st_size

    def work() -> tuple[float, dict[str, Any]]:
        resp, seconds = davclient.put_file(server.rs.port, f"/{name}", str(source))
        facts: dict[str, Any] = {"status": resp.status, "seconds": round(seconds, 3)}
        target = server.root / name
        if resp.status != 201:
            facts["error"] = f"PUT answered {resp.status}"
        elif not target.exists() or file_sha256(target) != sha:
            facts["error"] = "the stored file is not the bytes sent"
        return size / MiB / seconds, facts

    trial = _measured(server, work)
    (server.root / name).unlink(missing_ok=True)
    return trial


def trial_put_many(server: Server, rnd: int, sizes: Sizes) -> Trial:
    paths = [f"/put4k/r{rnd}/f{i:04d}.bin" for i in range(sizes.puts)]

    def body(i: int) -> bytes:
        return body_4k(i, sizes.put_size)

    def work() -> tuple[float, dict[str, Any]]:
        res = davclient.put_many(server.rs.port, paths, body, sizes.connections)
        facts: dict[str, Any] = {
            "seconds": round(res.seconds, 4),
            "statuses": {str(k): v for k, v in sorted(res.statuses.items())},
            "reconnects": res.reconnects,
        }
        if res.statuses != {201: sizes.puts}:
            facts["error"] = f"statuses {res.statuses}, expected 201 x {sizes.puts}"
        else:
            bad = [
                p
                for i, p in enumerate(paths)
                if (server.root / p.lstrip("/")).read_bytes() != body(i)
            ]
            if bad:
                facts["error"] = f"{len(bad)} files differ from what was sent, e.g. {bad[0]}"
        return res.requests / res.seconds, facts

    return _measured(server, work)


def propfind_once(port: int, sizes: Sizes) -> tuple[float, davclient.Response]:
    with davclient.connect(port) as sock:
        started = time.perf_counter()
        resp = davclient.request(
            sock,
            port,
            "PROPFIND",
            "/big/",
            [("Depth", "1"), ("Content-Type", 'application/xml; charset="utf-8"')],
            PROPFIND_BODY,
        )
        return time.perf_counter() - started, resp


def trial_propfind(server: Server, sizes: Sizes) -> Trial:
    names = {f"e{i:05d}.txt" for i in range(sizes.entries)}

    def work() -> tuple[float, dict[str, Any]]:
        seconds, resp = propfind_once(server.rs.port, sizes)
        facts: dict[str, Any] = {
            "status": resp.status,
            "seconds": round(seconds, 4),
            "body_bytes": len(resp.body),
        }
        problem = (
            f"PROPFIND answered {resp.status}"
            if resp.status != 207
            else check_multistatus(resp.body, "big", names)
        )
        if problem:
            facts["error"] = problem
        return 1.0 / seconds, facts

    return _measured(server, work)


# ------------------------------------------------------------------ litmus


def litmus_summary(output: str) -> dict[str, Any]:
    """Per suite (run, passed, failed), the total, and the FAILed tests."""
    import re

    pat = re.compile(r"summary for `(\w+)': of (\d+) tests run: (\d+) passed, (\d+) failed")
    suites = {m[1]: [int(m[2]), int(m[3]), int(m[4])] for m in pat.finditer(output)}
    fails = [line.strip()[:160] for line in output.splitlines() if "FAIL" in line]
    return {
        "suites": suites,
        "run": sum(v[0] for v in suites.values()),
        "passed": sum(v[1] for v in suites.values()),
        "failed_tests": fails,
    }


def run_litmus(server: Server, timeout_s: float = 300.0) -> dict[str, Any]:
    """Each suite of :data:`LITMUS_SUITES` in its own ``litmus`` run (the
    ``litmus`` script stops at the first suite with a failure, so one run
    would leave the later suites of a failing server uncounted)."""
    litmus = shutil.which("litmus")
    if litmus is None:
        return {"error": "litmus not installed (apt-get install litmus)"}
    cwd = server.work / "litmus"  # litmus writes debug.log and child.log here
    cwd.mkdir(exist_ok=True)
    started = time.monotonic()
    outputs: list[str] = []
    for suite in LITMUS_SUITES:
        try:
            done = subprocess.run(
                [litmus, f"http://127.0.0.1:{server.rs.port}/"],
                cwd=cwd,
                env={**os.environ, "TESTS": suite},
                capture_output=True,
                text=True,
                timeout=timeout_s,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            outputs.append(f"litmus {suite} ran past {timeout_s:.0f}s\n")
            continue
        outputs.append(done.stdout + done.stderr)
    out = litmus_summary("".join(outputs))
    out["seconds"] = round(time.monotonic() - started, 1)
    (server.work / "litmus.out").write_text("".join(outputs))
    return out


# ------------------------------------------------------------------ the run


def _start_all(
    stack: ExitStack, opts: DavOptions, env: HarnessEnv, tmp: Path, cpu: int | None
) -> tuple[list[Server], dict[str, str]]:
    servers: list[Server] = []
    failed: dict[str, str] = {}
    for spec in opts.servers:
        root, work = tmp / "roots" / spec.name, tmp / "work" / spec.name
        work.mkdir(parents=True)
        make_root(root, opts.sizes, opts.rounds)
        plan = DAV_KINDS[spec.kind].plan(spec, env, root, None, work)
        if isinstance(plan, str):
            failed[spec.name] = plan
            continue
        try:
            rs = stack.enter_context(running(spec, plan, work / "server.log", cpu=cpu))
        except ServerStartError as exc:
            failed[spec.name] = f"did not start: {exc}"
            log(f"  {spec.name}: FAILED to start: {exc}")
            continue
        servers.append(Server(rs, root, work))
    return servers, failed


def _rotations(servers: list[Server], rounds: int) -> Iterator[tuple[int, Server]]:
    for r in range(rounds):
        for k in range(len(servers)):
            yield r, servers[(r + k) % len(servers)]


def _run_workload(
    name: str, servers: list[Server], opts: DavOptions, source: tuple[Path, str]
) -> dict[str, list[Trial]]:
    taking = [s for s in servers if not (name == "propfind-10k" and s.name in PUT_ONLY)]
    trials: dict[str, list[Trial]] = {s.name: [] for s in taking}
    if name == "propfind-10k":
        for s in taking:  # untimed: the first listing warms each server's caches
            try:
                propfind_once(s.rs.port, opts.sizes)
            except (OSError, davclient.ClientError) as exc:
                s.failed = f"warm-up PROPFIND: {exc}"
    for rnd, s in _rotations(taking, opts.rounds):
        if s.failed or (trials[s.name] and not trials[s.name][-1].ok):
            continue  # a server that failed a trial is not measured again
        if name == "put-1g":
            t = trial_put_1g(s, rnd, *source)
        elif name == "put-4k-c16":
            t = trial_put_many(s, rnd, opts.sizes)
        else:
            t = trial_propfind(s, opts.sizes)
        trials[s.name].append(t)
        growth = t.rss_peak_mib - t.rss_start_mib
        log(
            f"  {name} r{rnd} {s.name}: {'ok' if t.ok else 'FAILED ' + t.error} "
            f"{t.value:.1f} cpu {t.cpu_s:.3f}s rss +{growth:.1f} MiB"
        )
    return trials


def summarize(trials: list[Trial]) -> dict[str, Any]:
    good = [t for t in trials if t.ok]
    if not good:
        return {"status": "failed", "error": next((t.error for t in trials), "no trial")}
    return {
        "status": "ok" if len(good) == len(trials) else "errors",
        "trials": len(trials),
        "value": round(median([t.value for t in good]), 2),
        "values": [round(t.value, 2) for t in good],
        "cpu_s": round(median([t.cpu_s for t in good]), 4),
        "rss_start_mib": round(median([t.rss_start_mib for t in good]), 1),
        "rss_peak_mib": round(max(t.rss_peak_mib for t in good), 1),
        "rss_growth_mib": round(max(t.rss_peak_mib - t.rss_start_mib for t in good), 1),
        **({"error": next(t.error for t in trials if not t.ok)} if len(good) < len(trials) else {}),
    }


def _first_line(argv: list[str]) -> str | None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0] if lines else None


def dav_versions(env: HarnessEnv) -> dict[str, str | None]:
    """The versions of the WebDAV peers and of litmus (None: not there)."""
    probe = "import importlib.metadata as m; print(m.version('wsgidav'), m.version('cheroot'))"
    return {
        "wsgidav cheroot": _first_line([str(env.peers_python), "-c", probe])
        if env.peers_python.exists()
        else None,
        "apache2": _first_line(["apache2", "-v"]) if shutil.which("apache2") else None,
        "rclone": _first_line(["rclone", "version"]) if shutil.which("rclone") else None,
        "litmus": _first_line(["litmus", "--version"]) if shutil.which("litmus") else None,
    }


def execute(opts: DavOptions) -> int:
    env = HarnessEnv(REPO, sys.executable, opts.peers_venv / "bin" / "python", find_nginx())
    unavailable = {s.name: r for s in opts.servers if (r := DAV_KINDS[s.kind].unavailable(env))}
    for name, reason in unavailable.items():
        log(f"server {name} unavailable: {reason}")
    opts.servers = [s for s in opts.servers if s.name not in unavailable]
    cpus = sorted(os.sched_getaffinity(0))
    pinned = opts.pin and len(cpus) >= 2 and shutil.which("taskset") is not None
    server_cpu = cpus[0] if pinned else None
    if pinned:
        os.sched_setaffinity(0, {cpus[1]})  # the client (this process) off the server's CPU
    started = time.time()
    run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started)) + f"-{opts.mode}"
    artifact: dict[str, Any] = {
        "schema": 1,
        "run_id": run_id,
        "mode": opts.mode,
        "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(started)),
        "loadavg_start": list(os.getloadavg()),
        "settings": {
            "rounds": opts.rounds,
            "sizes": vars(opts.sizes),
            "server_cpu": server_cpu,
            "client_cpu": cpus[1] if pinned else None,
        },
        "machine": machine_facts(REPO, env.peers_python, env.nginx, shutil.which("wrk")),
        "dav_versions": dav_versions(env),
        "servers": {
            s.name: {"kind": s.kind, "description": s.description, "args": list(s.extra_args)}
            for s in opts.servers
        },
        "unavailable": unavailable,
        "results": {},
        "litmus": {},
    }
    tmp = Path(tempfile.mkdtemp(prefix="serverio-davbench-"))
    os.chmod(tmp, 0o755)  # Apache's child (www-data) must reach its root
    try:
        with ExitStack() as stack:
            source = tmp / "source.bin"
            sha = make_source(source, opts.sizes.put_bytes) if "put-1g" in opts.workloads else ""
            servers, failed = _start_all(stack, opts, env, tmp, server_cpu)
            artifact["failed_to_start"] = failed
            for name in WORKLOADS:
                if name in opts.workloads:
                    log(f"workload {name}")
                    got = _run_workload(name, servers, opts, (source, sha))
                    artifact["results"][name] = {k: summarize(v) for k, v in got.items()}
                    artifact["results"][name + ":trials"] = {
                        k: [vars(t) for t in v] for k, v in got.items()
                    }
            if opts.litmus:
                for s in servers:
                    if s.name not in PUT_ONLY:
                        log(f"litmus {s.name}")
                        artifact["litmus"][s.name] = run_litmus(s)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    artifact["finished_utc"] = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    artifact["loadavg_end"] = list(os.getloadavg())
    # Never judged in a smoke run (its sizes are not the targets').
    artifact["targets"] = [] if "smoke" in opts.mode else targets(artifact)
    opts.out_dir.mkdir(parents=True, exist_ok=True)
    path = opts.out_dir / f"{run_id}.json"
    path.write_text(json.dumps(artifact, indent=1) + "\n")
    print(render_markdown(artifact))
    log(f"artifact: {path}")
    bad = [
        f"{w}/{s}"
        for w, per in artifact["results"].items()
        if not w.endswith(":trials")
        for s, v in per.items()
        if v["status"] != "ok"
    ]
    return 1 if bad or failed else 0


# ------------------------------------------------------------------ report

UNITS = {"put-1g": "MiB/s", "put-4k-c16": "PUT/s", "propfind-10k": "PROPFIND/s"}


def _value(artifact: dict[str, Any], workload: str, server: str) -> float | None:
    got = artifact["results"].get(workload, {}).get(server)
    return got["value"] if got and got["status"] != "failed" else None


def targets(artifact: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets, each with its figures and whether it is met."""
    out: list[dict[str, Any]] = []

    def ratio(workload: str, ours: str, peer: str, floor: float) -> None:
        a, b = _value(artifact, workload, ours), _value(artifact, workload, peer)
        r = None if a is None or b is None or b == 0 else round(a / b, 3)
        out.append(
            {
                "target": f"{workload}: {ours} >= {floor}x {peer}",
                "ratio": r,
                "met": None if r is None else r >= floor,
            }
        )

    ratio("put-1g", "serverio-dav", "apache-dav", 0.8)
    ratio("put-1g", "serverio-dav-nofsync", "apache-dav", 0.8)
    for name in ("serverio-dav", "serverio-dav-nofsync"):
        got = artifact["results"].get("put-1g", {}).get(name)
        if got and got["status"] != "failed":
            growth = got["rss_growth_mib"]
            out.append(
                {
                    "target": f"put-1g: {name} RSS growth < 64 MiB",
                    "value": growth,
                    "met": growth < 64,
                }
            )
    ratio("put-4k-c16", "serverio-dav", "wsgidav", 1.0)
    ratio("propfind-10k", "serverio-dav", "wsgidav", 1.0)
    lit = artifact.get("litmus", {}).get("serverio-dav")
    if lit and "run" in lit:
        out.append(
            {
                "target": "litmus: serverio-dav passes every test",
                "value": f"{lit['passed']}/{lit['run']}",
                "met": lit["run"] > 0 and lit["passed"] == lit["run"],
            }
        )
    return out


def render_markdown(artifact: dict[str, Any]) -> str:
    lines = [
        f"## WebDAV run {artifact['run_id']} ({artifact['started_utc']} UTC, "
        f"load {artifact['loadavg_start'][0]:.2f} -> {artifact['loadavg_end'][0]:.2f})",
        "",
        "sizes: PUT of {put_bytes} bytes; {puts} PUTs of {put_size} bytes over {connections} "
        "connections; PROPFIND of {entries} entries".format(**artifact["settings"]["sizes"]),
        "",
    ]
    for workload, per in artifact["results"].items():
        if workload.endswith(":trials"):
            continue
        unit = UNITS.get(workload, "value")
        lines += [
            f"### {workload}",
            "",
            f"| server | median {unit} | trials | server CPU s (median) | RSS before MiB "
            "| peak RSS growth MiB | status |",
            "|---|---:|---:|---:|---:|---:|---|",
        ]
        for server, v in per.items():
            if v["status"] == "failed":
                lines.append(f"| {server} | - | - | - | - | - | FAILED: {v['error'][:80]} |")
                continue
            lines.append(
                f"| {server} | {v['value']:.{1 if v['value'] >= 10 else 2}f} | {v['trials']} "
                f"| {v['cpu_s']:.3f} "
                f"| {v['rss_start_mib']:.1f} | {v['rss_growth_mib']:.1f} | {v['status']} |"
            )
        lines.append("")
    if artifact.get("litmus"):
        lines += ["### litmus (" + ", ".join(LITMUS_SUITES) + ")", ""]
        lines += ["| server | passed | " + " | ".join(LITMUS_SUITES) + " |"]
        lines += ["|---|---:|" + "---:|" * len(LITMUS_SUITES)]
        for server, lit in artifact["litmus"].items():
            if "error" in lit:
                lines.append(f"| {server} | {lit['error']} |")
                continue
            cells = [
                "{1}/{0}".format(*lit["suites"][s]) if s in lit["suites"] else "-"
                for s in LITMUS_SUITES
            ]
            lines.append(f"| {server} | {lit['passed']}/{lit['run']} | " + " | ".join(cells) + " |")
        lines.append("")
    if artifact.get("targets"):
        lines += ["### targets", ""]
        for t in artifact["targets"]:
            fig = t.get("ratio", t.get("value"))
            verdict = "not measured" if t["met"] is None else "met" if t["met"] else "NOT MET"
            lines.append(f"- {t['target']}: {fig} -> {verdict}")
    return "\n".join(lines)


# ------------------------------------------------------------------ command line


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "dav", help="write and WebDAV workloads and litmus against serverio and its peers"
    )
    p.add_argument("--servers", help=f"comma list (default all: {', '.join(DAV_SERVERS)})")
    p.add_argument("--workloads", help=f"comma list (default all: {', '.join(WORKLOADS)})")
    p.add_argument("--rounds", type=int, default=3, help="rotated rounds per workload")
    p.add_argument("--no-litmus", action="store_true", help="skip the litmus runs")
    p.add_argument(
        "--smoke",
        action="store_true",
        help="serverio-dav only, 8 MiB PUT, 100 PUTs, 200 entries, 1 round, no litmus "
        "(checks the harness; never judges speed)",
    )
    p.add_argument("--no-pin", action="store_true")
    p.add_argument("--out", type=Path, default=ARTIFACTS)
    p.add_argument("--peers-venv", type=Path, default=DEFAULT_PEERS_VENV)


def _names(value: str | None, known: dict[str, Any] | tuple[str, ...], what: str) -> list[str]:
    names = list(known) if value is None else [v.strip() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown {what}: {', '.join(unknown)} (known: {', '.join(known)})")
    return names


def smoke(out_dir: Path, peers_venv: Path, pin: bool = True) -> int:
    """``python -m bench dav --smoke``: serverio-dav alone, every workload
    shrunk (SMOKE_SIZES), one round, no litmus; the checks still apply."""
    opts = DavOptions(
        servers=[DAV_SERVERS["serverio-dav"]],
        workloads=list(WORKLOADS),
        sizes=SMOKE_SIZES,
        rounds=1,
        litmus=False,
        pin=pin,
        out_dir=out_dir,
        peers_venv=peers_venv,
        mode="dav-smoke",
    )
    return execute(opts)


def run(args: argparse.Namespace) -> int:
    servers = _names(
        args.servers or ("serverio-dav" if args.smoke else None), DAV_SERVERS, "servers"
    )
    opts = DavOptions(
        servers=[DAV_SERVERS[n] for n in servers],
        workloads=_names(args.workloads, WORKLOADS, "workloads"),
        sizes=SMOKE_SIZES if args.smoke else Sizes(),
        rounds=1 if args.smoke else max(1, args.rounds),
        litmus=not (args.no_litmus or args.smoke),
        pin=not args.no_pin,
        out_dir=args.out,
        peers_venv=args.peers_venv,
        mode="dav-smoke" if args.smoke else "dav",
    )
    return execute(opts)
