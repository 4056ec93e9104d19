"""Instructions per request under callgrind, for this checkout and another commit.

``python -m bench callgrind [--commit REV | --baseline] [-n 500,1500]`` runs
``bench/pair.py`` (one connection over a socketpair, in one process) under
``valgrind --tool=callgrind`` twice per serverio, with N1 and N2 requests,
and prints ``(Ir[N2] - Ir[N1]) / (N2 - N1)``: the instructions of one warm
1 KiB keep-alive GET, client and server together.  Start-up, imports and the
file-settling sleep cancel out in the difference.

``--churn C`` measures instructions per *connection* of the churn workload
instead (``bench/pair.py --churn C``: a whole server on a loopback
listener, C in-process clients, one ``Connection: close`` request per
connection), client and server together.

``--assets VARIANT`` measures instructions per request of the 20 text
assets round robin (``bench/pair.py --assets --variant VARIANT``):
``sidecars`` (precompressed sidecars), ``plain`` (no sidecars, the
workload's Accept-Encoding: the compression cache's br) and ``identity``
(no sidecars, ``Accept-Encoding: identity``); ``plain`` against
``identity`` is the negotiated warm path's premium.

``--proxy`` measures instructions per *proxied* 1 KiB keep-alive GET
instead (``bench/pair.py --proxy``: serverio with ``--proxy /=UPSTREAM``
over the socketpair; the upstream runs in a process of its own, which
valgrind does not follow, so its work is not counted), client and server
together; with ``--bare`` also the floor of
``bench/baselines/h11_proxy_floor.py`` driven the same way (the least a
trio proxy on h11 does per request: the issue's "proxied 1 KiB <= 1.2x
the h11 floor").

``--rules MODE`` measures the warm GET under site rules given the same
way to every commit: ``bench/rulespair.py`` (this checkout's, copied out
of the tree) runs each tree's own ``pair.py`` with ``plain`` (no rule),
``auth`` (an ``[[auth]]`` rule over ``/incoming/**``: a public site with
a protected area, as it was written before rights rules) or ``access``
(``--allow 'anonymous:read,list@/'`` and a user's upload below
``/incoming``: the same site with rights rules; a tree before them
refuses the option, so compare ``access`` here with ``auth`` there),
``cookie`` (an ``[[auth]]`` rule over the whole site and a signed-in
browser's session cookie) or ``cookie-access`` (reads for that user only,
by ``--allow``; the same cookie): compare these with ``plain`` or ``auth``
on a tree from before sessions.

``--h2`` measures instructions per *stream* of a warm 1 KiB HTTP/2 GET
instead (``bench/pair.py --h2``: one h2c connection with prior knowledge
over the socketpair, N streams on it, ``--streams M`` in flight at a time,
default 1), client and server together.

``--listing N`` measures instructions per HTML listing of a folder of N
files (``GET /big/``, ``Accept: text/html``) with ``--listing-cache-size
0``: the rendered-listings cache is the only memo of a listing (the
directory is scanned on every request), so with it off every request
scans, decides and renders.  ``--listing-mode rules`` adds ``--upload``
and ``--allow`` rules (an anonymous reader; the page asks the access hook
per entry which row actions to show).  As for ``--rules``,
``bench/listingpair.py`` is this checkout's, run in each tree on that
tree's own ``pair.py`` connection.

Each serverio is measured with *its own* ``bench/pair.py``: the script drives
serverio's connection class directly, whose shape the commit defines, so an
old commit is run from its exported tree (bench/commits.py) with that tree as
working directory and on ``PYTHONPATH``.  ``PYTHONHASHSEED`` is fixed so that
two runs of the same commit count (nearly) the same instructions; pair.py
also stops the wall clock once its file has settled, so that serverio's
once-a-second work does not depend on how fast valgrind runs.

Before its two runs, each tree's ``serverio/`` and ``bench/`` are compiled
to bytecode natively (``compileall``): with ``PYTHONDONTWRITEBYTECODE`` set,
or an exported tree never imported, every run would otherwise compile each
module from source under valgrind (about 40% of a short run's
instructions; the difference cancels them, the time does not).  The two
runs of a subject then go at once (two processes: each is one thread).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import commits

# bench/rulespair.py's modes (--rules), and the marker of that workload.
RULES = ("plain", "auth", "access", "cookie", "cookie-access")
_RULES_DRIVER = "@rulespair"
# bench/listingpair.py's modes (--listing N --listing-mode M), and its marker.
LISTING_MODES = ("plain", "rules")
_LISTING_DRIVER = "@listingpair"
# Each copied out of this checkout and run in every tree (module docstring).
_DRIVERS = {_RULES_DRIVER: "rulespair.py", _LISTING_DRIVER: "listingpair.py"}

_TOTAL = re.compile(rb"^(?:summary|totals):\s*(\d+)", re.MULTILINE)


class CallgrindError(RuntimeError):
    """A measurement could not be taken; the message says why (one line)."""


@dataclass(frozen=True)
class Subject:
    label: str
    tree: Path
    env: dict[str, str]


def total_ir(out_file: Path) -> int:
    """The total instruction count (``Ir``) recorded in a callgrind output file."""
    m = _TOTAL.search(out_file.read_bytes())
    if m is None:
        raise CallgrindError(f"no summary line in {out_file.name}")
    return int(m[1])


def mode_args(
    churn: int = 0,
    h2_streams: int = 0,
    assets: str = "",
    proxy: bool = False,
    login: str = "",
    files: int = 0,
    tls: bool = False,
) -> list[str]:
    """The ``bench/pair.py`` arguments of a mode: churn, HTTP/2, the many
    assets (``assets``: its variant), a proxied GET, many files (cold
    bytes, warm metadata), the warm GET over TLS, or the warm HTTP/1.1 GET
    (none)."""
    if sum(map(bool, (churn, h2_streams, assets, proxy, login, files, tls))) > 1:
        raise CallgrindError(
            "--churn, --h2, --assets, --proxy, --login, --files and --tls are different "
            "workloads: choose one"
        )
    if tls:
        return ["--tls"]
    if files:
        return ["--files", str(files)]
    if login:
        return ["--login", login]
    if assets:
        return ["--assets", "--variant", assets]
    if proxy:
        return ["--proxy"]
    if churn:
        return ["--churn", str(churn)]
    if h2_streams:
        return ["--h2", "--streams", str(h2_streams)]
    return []


def precompile(subject: Subject, python: str) -> None:
    """Bytecode for ``subject``'s own modules, compiled natively (what its
    runs would otherwise compile under valgrind, see the module docstring);
    up-to-date files are left alone."""
    dirs = [str(subject.tree / d) for d in ("serverio", "bench") if (subject.tree / d).is_dir()]
    subprocess.run(
        [python, "-m", "compileall", "-q", *dirs],
        cwd=subject.tree,
        capture_output=True,
        stdin=subprocess.DEVNULL,
        check=False,  # a file that does not compile fails the run itself, with its message
    )


def _argv(
    subject: Subject, n: int, server: str, python: str, workdir: Path, mode: Sequence[str]
) -> tuple[list[str], Path]:
    script = subject.tree / "bench" / "pair.py"
    if not script.exists():
        raise CallgrindError(f"{subject.label} has no bench/pair.py")
    out = workdir / f"callgrind.{subject.label.replace('/', '_')}.{server}.{n}"
    if mode and mode[0] in _DRIVERS:
        driver = workdir / _DRIVERS[mode[0]]
        return [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            python,
            str(driver),
            *mode[1:],
            "-n",
            str(n),
        ], out
    argv = [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={out}",
        python,
        "-m",
        "bench.pair",
        "--server",
        server,
        "-n",
        str(n),
        *mode,
    ]
    return argv, out


def _start(subject: Subject, argv: list[str]) -> subprocess.Popen[str]:
    # ``-m`` from the tree's root: its own bench/ and serverio/ come first
    # on sys.path (older trees' pair.py also edit sys.path themselves).
    env = {**os.environ, **subject.env, "PYTHONHASHSEED": "0"}
    return subprocess.Popen(
        argv,
        cwd=subject.tree,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )


def _finish(subject: Subject, n: int, proc: subprocess.Popen[str], out: Path) -> int:
    stdout, stderr = proc.communicate()
    if proc.returncode != 0:
        tail = (stderr or stdout).strip().splitlines()[-1:] or ["no output"]
        raise CallgrindError(f"{subject.label} n={n}: exit {proc.returncode}: {tail[0][:200]}")
    return total_ir(out)


def measure(
    subject: Subject, n: int, server: str, python: str, workdir: Path, mode: Sequence[str] = ()
) -> int:
    """The total instructions of one run of ``subject``'s pair.py (``n`` requests)."""
    argv, out = _argv(subject, n, server, python, workdir, mode)
    return _finish(subject, n, _start(subject, argv), out)


def per_request(
    subject: Subject,
    ns: tuple[int, int],
    server: str,
    python: str,
    workdir: Path,
    mode: Sequence[str] = (),
) -> dict[str, Any]:
    runs = [_argv(subject, n, server, python, workdir, mode) for n in ns]
    procs: list[subprocess.Popen[str]] = []
    try:
        for argv, _ in runs:
            procs.append(_start(subject, argv))
        # Both run at once; each count is its own process's.
        pairs = zip(ns, procs, runs, strict=True)
        low, high = (_finish(subject, n, proc, out) for n, proc, (_, out) in pairs)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return {
        "label": subject.label,
        "server": server,
        "ir": {str(ns[0]): low, str(ns[1]): high},
        "ir_per_request": (high - low) / (ns[1] - ns[0]),
    }


def subjects(revs: list[str], baseline: bool) -> list[Subject]:
    out = [Subject("this checkout", commits.REPO, {})]
    wanted = list(revs)
    if baseline:
        wanted.append(commits.read_baseline())
    for rev in wanted:
        commit = commits.resolve(rev)
        tree = commits.checkout(commit)
        out.append(Subject(f"serverio@{commits.short(commit)}", tree, {"PYTHONPATH": str(tree)}))
    return out


def _ns(value: str) -> tuple[int, int]:
    try:
        a, b = (int(v) for v in value.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError("expected N1,N2 with N1 < N2, e.g. 500,1500") from None
    if not 0 < a < b:
        raise argparse.ArgumentTypeError("expected N1,N2 with 0 < N1 < N2")
    return a, b


def add_parser(sub: Any) -> None:
    cg = sub.add_parser(
        "callgrind", help="instructions per request over bench/pair.py (valgrind callgrind)"
    )
    cg.add_argument(
        "--commit",
        action="append",
        default=[],
        metavar="REV",
        help="also measure the serverio of commit REV (repeatable)",
    )
    cg.add_argument(
        "--baseline", action="store_true", help="also measure the commit in bench/baseline.txt"
    )
    cg.add_argument(
        "-n",
        type=_ns,
        default=(500, 1500),
        metavar="N1,N2",
        help="request counts of the two runs (default 500,1500)",
    )
    cg.add_argument(
        "--bare", action="store_true", help="also measure the bare trio+h11 loop (the ceiling)"
    )
    cg.add_argument(
        "--churn",
        type=int,
        default=0,
        metavar="C",
        help="instructions per connection of the churn workload, C clients at once",
    )
    cg.add_argument(
        "--h2",
        action="store_true",
        help="instructions per stream of a warm 1 KiB HTTP/2 GET (h2c, one connection)",
    )
    cg.add_argument(
        "--assets",
        choices=("sidecars", "plain", "identity"),
        default="",
        metavar="VARIANT",
        help="instructions per request of the 20 assets round robin (bench/pair.py --assets): "
        "sidecars (precompressed), plain (no sidecars: the cached on-the-fly br) or identity "
        "(no sidecars, Accept-Encoding: identity); use counts that are multiples of 20",
    )
    cg.add_argument(
        "--streams",
        type=int,
        default=1,
        metavar="M",
        help="with --h2: streams in flight at a time (default 1)",
    )
    cg.add_argument(
        "--login",
        choices=("anonymous", "cookie", "cookie-public"),
        default="",
        metavar="VARIANT",
        help="instructions per warm 1 KiB GET on a server with users (an [[auth]] rule, "
        "sessions): anonymous (the public file), cookie (the protected file with a session "
        "cookie) or cookie-public (the public file with the cookie)",
    )
    cg.add_argument(
        "--files",
        type=int,
        default=0,
        metavar="K",
        help="instructions per GET of K distinct 1 KiB files round robin, more than the "
        "warm-file cache holds: cold bytes, warm metadata (bench/pair.py --files; use counts "
        "that are multiples of K)",
    )
    cg.add_argument(
        "--tls",
        action="store_true",
        help="instructions per warm 1 KiB GET over TLS (HTTP/1.1, client included); with "
        "--bare also the floor of bench/baselines/tls_floor.py (a canned response per head "
        "over trio.SSLStream)",
    )
    cg.add_argument(
        "--proxy",
        action="store_true",
        help="instructions per proxied 1 KiB GET (--proxy /=UPSTREAM; the upstream, a bare "
        "trio+h11 loop in a process of its own, is not counted); with --bare also the floor "
        "of bench/baselines/h11_proxy_floor.py",
    )
    cg.add_argument(
        "--rules",
        choices=RULES,
        default="",
        help="the warm GET under site rules, the same for every commit (bench/rulespair.py, "
        "this checkout's, runs each tree's own pair.py): plain (none), auth (an [[auth]] "
        "rule over /incoming/**), access (--allow anonymous:read,list@/ and a user's "
        "upload below /incoming), cookie (an [[auth]] rule over the site, a session cookie), "
        "cookie-access (--allow alice:read,list@/, the same cookie)",
    )
    cg.add_argument(
        "--listing",
        type=int,
        default=0,
        metavar="N",
        help="instructions per HTML listing (GET /big/, Accept: text/html) of a folder of N "
        "files, with --listing-cache-size 0 so that every request scans and renders "
        "(bench/listingpair.py, this checkout's, runs in each tree; use small counts, "
        "e.g. -n 3,9)",
    )
    cg.add_argument(
        "--listing-mode",
        choices=LISTING_MODES,
        default="plain",
        help="with --listing: plain (default settings) or rules (--upload, --allow "
        "anonymous:read,list@/ and alice:upload,delete@/; an anonymous reader: the page "
        "asks the access hook per entry; a tree before --allow refuses it)",
    )


def run(args: argparse.Namespace) -> int:
    if shutil.which("valgrind") is None:
        print("callgrind: valgrind not found (apt-get install -y valgrind)", file=sys.stderr)
        return 2
    try:
        subs = subjects(args.commit, args.baseline)
    except commits.CommitError as exc:
        print(f"callgrind: {exc}", file=sys.stderr)
        return 2
    churn = args.churn
    if churn < 0:
        print("callgrind: --churn must be a positive client count", file=sys.stderr)
        return 2
    if args.streams < 1:
        print("callgrind: --streams must be at least 1", file=sys.stderr)
        return 2
    h2_streams = args.streams if args.h2 else 0
    try:
        mode = mode_args(
            churn, h2_streams, args.assets, args.proxy, args.login, args.files, args.tls
        )
    except CallgrindError as exc:
        print(f"callgrind: {exc}", file=sys.stderr)
        return 2
    # The bare trio+h11 loop speaks one HTTP/1.1 connection only.
    servers = ["serverio", *(["bare"] if args.bare and not mode else [])]
    if args.tls and args.bare:
        servers.append("tls-floor")  # the floor of the same path: TLS, no HTTP
    if args.proxy and args.bare:
        servers.append("h11-proxy-floor")  # the least a trio proxy on h11 does
    if args.rules and (mode or args.bare):
        print("callgrind: --rules is the warm HTTP/1.1 GET: no other workload", file=sys.stderr)
        return 2
    if args.listing < 0 or (args.listing and (mode or args.bare or args.rules)):
        print("callgrind: --listing N is a workload of its own (N > 0)", file=sys.stderr)
        return 2
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="serverio-callgrind-") as tmp:
        if args.rules:
            # A copy outside any tree: its directory (first on sys.path)
            # holds nothing but it, whichever tree it runs in.
            shutil.copy(commits.REPO / "bench" / "rulespair.py", Path(tmp) / "rulespair.py")
            mode = [_RULES_DRIVER, args.rules]
        if args.listing:
            shutil.copy(commits.REPO / "bench" / "listingpair.py", Path(tmp) / "listingpair.py")
            mode = [_LISTING_DRIVER, args.listing_mode, "--entries", str(args.listing)]
        for subject in subs:
            precompile(subject, sys.executable)
            for server in servers:
                if server != "serverio" and subject is not subs[0]:
                    continue  # the bare loop is the same program in every commit
                print(f"callgrind: {subject.label} {server} n={args.n}", file=sys.stderr)
                try:
                    rows.append(
                        per_request(subject, args.n, server, sys.executable, Path(tmp), mode)
                    )
                except CallgrindError as exc:
                    print(f"callgrind: {exc}", file=sys.stderr)
                    return 1
    first = rows[0]["ir_per_request"]
    if churn:
        unit = f"Ir/connection (churn, {churn} clients)"
    elif h2_streams:
        unit = f"Ir/stream (h2, {h2_streams} in flight)"
    elif args.assets:
        unit = f"Ir/request (assets, {args.assets})"
    elif args.proxy:
        unit = "Ir/proxied request"
    elif args.tls:
        unit = "Ir/request (TLS, client included)"
    elif args.files:
        unit = f"Ir/request (files, {args.files} round robin)"
    elif args.login:
        unit = f"Ir/request (login, {args.login})"
    elif args.rules:
        unit = f"Ir/request (rules: {args.rules})"
    elif args.listing:
        unit = f"Ir/listing ({args.listing} entries, {args.listing_mode})"
    else:
        unit = "Ir/request"
    print(f"| serverio | server | {unit} (n={args.n[0]}..{args.n[1]}) | vs this checkout |")
    print("|---|---|---:|---:|")
    for row in rows:
        ratio = row["ir_per_request"] / first - 1 if row["server"] == "serverio" else None
        rel = f"{ratio:+.1%}" if ratio is not None else ""
        print(f"| {row['label']} | {row['server']} | {row['ir_per_request']:,.0f} | {rel} |")
    return 0
