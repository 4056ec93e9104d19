"""Command line of the benchmark harness."""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from bench import (
    callgrind,
    commits,
    davrun,
    golden,
    h2floor,
    h2profile,
    peers,
    report,
    startup,
    structure,
    trace,
)
from bench.runner import execute
from bench.servers import (
    DEFAULT_PEERS_VENV,
    KINDS,
    SERVERS,
    SMOKE_SERVERS,
    HarnessEnv,
    ServerSpec,
    commit_entry,
    find_nginx,
    serverio_entry,
)
from bench.trials import RunOptions
from bench.workloads import SMOKE_WORKLOADS, WORKLOADS

REPO = Path(__file__).resolve().parent.parent
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"

# mode -> rounds, duration s, warm-up s, idle connections, idle rounds
PRESETS: dict[str, tuple[int, int, int, int, int]] = {
    "full": (5, 5, 2, 10_000, 3),
    "quick": (3, 2, 1, 2_000, 1),
    "smoke": (2, 1, 0, 200, 1),
}


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _variant(value: str) -> ServerSpec:
    name, sep, args = value.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(
            "expected NAME='serverio args', e.g. serverio-small='--small-file-size 4096'"
        )
    return serverio_entry(name.strip(), *shlex.split(args), description=f"serverio {args.strip()}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the benchmark (from the repo root)")
    mode = run.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="3 rounds x 2 s, 2,000 idle connections")
    mode.add_argument(
        "--smoke", action="store_true", help="CI check of the harness itself (< 1 min)"
    )
    run.add_argument(
        "--servers", type=_csv, help=f"comma list; default all of: {', '.join(SERVERS)}"
    )
    run.add_argument(
        "--workloads", type=_csv, help=f"comma list; default all of: {', '.join(WORKLOADS)}"
    )
    run.add_argument("--rounds", type=int, help="rotated rounds per workload (default 5)")
    run.add_argument("--duration", type=int, help="seconds per trial (default 5)")
    run.add_argument(
        "--warmup", type=int, help="seconds of warm-up per server and workload (default 2)"
    )
    run.add_argument(
        "--idle-conns", type=int, help="connections for the idle workload (default 10000)"
    )
    run.add_argument(
        "--idle-rounds", type=int, help="fresh-server rounds for the idle workload (default 3)"
    )
    run.add_argument(
        "--reference", default="serverio-inline", help="server the ratio column divides by"
    )
    run.add_argument(
        "--serverio-variant",
        type=_variant,
        action="append",
        default=[],
        metavar="NAME=ARGS",
        help="add a serverio entry with extra CLI args (repeatable)",
    )
    run.add_argument(
        "--serverio-commit",
        action="append",
        default=[],
        metavar="REV[=NAME]",
        help="add the serverio of git commit REV as one more server (repeatable); "
        "default name serverio@<short id>",
    )
    run.add_argument(
        "--baseline",
        action="store_true",
        help="add the recorded baseline commit (bench/baseline.txt) as serverio@<short id>",
    )
    run.add_argument(
        "--commit-like",
        default="serverio-inline",
        metavar="ENTRY",
        help="serverio entry whose arguments the commit peers use (default serverio-inline)",
    )
    run.add_argument("--wrk-threads", type=int, help="wrk -t (default 1 when pinned)")
    run.add_argument(
        "--no-pin", action="store_true", help="do not pin server/wrk to CPUs with taskset"
    )
    run.add_argument("--no-plots", action="store_true")
    run.add_argument(
        "--out", type=Path, default=ARTIFACTS, help="artifact directory (default bench/artifacts)"
    )
    run.add_argument("--peers-venv", type=Path, default=DEFAULT_PEERS_VENV)

    setup = sub.add_parser(
        "setup", help="create bench/.peers-venv with the peer servers; apt-get the tools"
    )
    setup.add_argument("--peers-venv", type=Path, default=DEFAULT_PEERS_VENV)
    setup.add_argument("--python", default=sys.executable, help="interpreter for the peers venv")
    setup.add_argument("--force", action="store_true", help="recreate the venv")
    setup.add_argument(
        "--no-apt", action="store_true", help="do not apt-get missing wrk/nginx/h2load/caddy"
    )

    rep = sub.add_parser("report", help="re-render the table (and plots) from an artifact")
    rep.add_argument("artifact", type=Path)
    rep.add_argument("--reference", help="server for the ratio column")
    rep.add_argument("--no-plots", action="store_true")
    rep.add_argument(
        "--plots-dir",
        type=Path,
        help="default: next to the artifact, in a folder named after the run",
    )

    golden.add_parser(sub)
    callgrind.add_parser(sub)
    h2profile.add_parser(sub)
    h2floor.add_parser(sub)
    structure.add_parser(sub)
    startup.add_parser(sub)
    trace.add_parser(sub)
    davrun.add_parser(sub)

    ls = sub.add_parser("list", help="list servers and workloads and whether each can run here")
    ls.add_argument("--peers-venv", type=Path, default=DEFAULT_PEERS_VENV)
    return parser


def _select(
    names: list[str] | None, registry: dict[str, object], default: Sequence[str], what: str
) -> list[str]:
    chosen = list(default) if names is None else names
    unknown = [n for n in chosen if n not in registry]
    if unknown:
        raise SystemExit(f"unknown {what}: {', '.join(unknown)} (known: {', '.join(registry)})")
    return chosen


def commit_peers(revs: list[str], baseline: bool, like_name: str) -> list[ServerSpec]:
    """One serverio entry per requested commit, with the arguments of ``like_name``."""
    like = SERVERS.get(like_name)
    if like is None or like.kind != "serverio":
        raise SystemExit(f"--commit-like: not a serverio entry: {like_name}")
    wanted = [r.partition("=")[::2] for r in revs]
    if baseline:
        try:
            wanted.append((commits.read_baseline(), ""))
        except commits.CommitError as exc:
            raise SystemExit(f"--baseline: {exc}") from exc
    peers_: list[ServerSpec] = []
    for rev, name in wanted:
        try:
            commit = commits.resolve(rev.strip())
            commits_tree = commits.checkout(commit)
        except commits.CommitError as exc:
            raise SystemExit(f"--serverio-commit: {exc}") from exc
        spec = commit_entry(like, commit, commits_tree, name.strip())
        if all(p.name != spec.name for p in peers_):
            peers_.append(spec)
    return peers_


def cmd_run(args: argparse.Namespace) -> int:
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    rounds, duration, warmup, idle_conns, idle_rounds = PRESETS[mode]
    registry = dict(SERVERS)
    variants: list[ServerSpec] = args.serverio_variant
    registry.update({v.name: v for v in variants})
    at_commits = commit_peers(args.serverio_commit, args.baseline, args.commit_like)
    registry.update({p.name: p for p in at_commits})
    default_servers = [*SMOKE_SERVERS] if mode == "smoke" else [*SERVERS]
    default_servers += [v.name for v in variants]
    server_names = _select(args.servers, dict(registry), default_servers, "servers")
    # Commit peers were asked for by name: they run even with an explicit
    # --servers list, right after the entry whose arguments they copy, so
    # the rotation puts old and new side by side.
    extra = [p.name for p in at_commits if p.name not in server_names]
    if args.commit_like in server_names:
        at = server_names.index(args.commit_like) + 1
        server_names[at:at] = extra
    else:
        server_names += extra
    default_workloads = SMOKE_WORKLOADS if mode == "smoke" else tuple(WORKLOADS)
    workload_names = _select(args.workloads, dict(WORKLOADS), default_workloads, "workloads")
    opts = RunOptions(
        mode=mode,
        servers=[registry[n] for n in server_names],
        explicit_servers=args.servers is not None,
        workloads=[WORKLOADS[n] for n in WORKLOADS if n in workload_names],
        rounds=max(1, args.rounds or rounds),
        duration_s=max(1, args.duration or duration),
        warmup_s=max(0, warmup if args.warmup is None else args.warmup),
        idle_conns=max(1, args.idle_conns or idle_conns),
        idle_rounds=max(1, args.idle_rounds or idle_rounds),
        reference=args.reference,
        pin=not args.no_pin,
        wrk_threads=args.wrk_threads,
        out_dir=args.out,
        plots=not args.no_plots,
        peers_venv=args.peers_venv,
        repo=REPO,
    )
    code = execute(opts)
    if mode == "smoke" and args.servers is None and args.workloads is None:
        # The write and WebDAV workloads, shrunk, serverio only (bench/davrun.py, ~3 s).
        code = max(code, davrun.smoke(args.out, args.peers_venv, pin=not args.no_pin))
    return code


def cmd_report(args: argparse.Namespace) -> int:
    artifact = json.loads(args.artifact.read_text())
    print(report.render_markdown(artifact, args.reference))
    if not args.no_plots:
        out = args.plots_dir or args.artifact.parent / artifact["run_id"]
        print(report.plots_message(report.write_plots(artifact, out)), file=sys.stderr)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    env = HarnessEnv(REPO, sys.executable, args.peers_venv / "bin" / "python", find_nginx())
    print("servers:")
    for spec in SERVERS.values():
        reason = KINDS[spec.kind].unavailable(env)
        print(
            f"  {spec.name:18} {'ok' if reason is None else 'unavailable: ' + reason}"
            f"  ({spec.description})"
        )
    print("workloads:")
    for w in WORKLOADS.values():
        print(f"  {w.name:10} {w.description}")
    return 0


def _terminate_on_sigterm(signum: int, frame: FrameType | None) -> None:
    # Turn SIGTERM into SystemExit so every `finally` tears its server down.
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate_on_sigterm)
    return dispatch(args)


def dispatch(args: argparse.Namespace) -> int:
    """Run the parsed command (``main`` without the process-wide signal setup)."""
    if args.command == "run":
        return cmd_run(args)
    if args.command == "setup":
        return peers.setup(args.peers_venv, args.python, force=args.force, apt=not args.no_apt)
    if args.command == "report":
        return cmd_report(args)
    if args.command == "golden":
        return golden.run(args)
    if args.command == "callgrind":
        return callgrind.run(args)
    if args.command == "h2profile":
        return h2profile.run(args)
    if args.command == "h2floor":
        return h2floor.run(args)
    if args.command == "structure":
        return structure.run(args)
    if args.command == "dav":
        return davrun.run(args)
    if args.command == "startup":
        return startup.run(args)
    if args.command == "trace":
        return trace.run(args)
    return cmd_list(args)
