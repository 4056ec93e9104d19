"""``python -m bench setup``: the peers' own virtualenv, plus wrk, nginx, h2load and caddy from
Debian."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from bench.machine import PEER_PACKAGES, peer_versions
from bench.servers import BENCH_DIR, find_nginx

REQUIREMENTS = BENCH_DIR / "peers-requirements.txt"


def _run(argv: list[str], timeout_s: float) -> int:
    print("+ " + " ".join(argv), file=sys.stderr, flush=True)
    try:
        return subprocess.run(argv, timeout=timeout_s, stdin=subprocess.DEVNULL).returncode
    except subprocess.TimeoutExpired:
        print(f"timed out after {timeout_s:.0f}s", file=sys.stderr)
        return 124


def _apt_install(packages: list[str]) -> int:
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        print(f"please install: {' '.join(packages)} (needs root and apt-get)", file=sys.stderr)
        return 1
    env_ok = _run(["apt-get", "update"], 600)
    if env_ok != 0:
        return env_ok
    return _run(["apt-get", "install", "-y", "--no-install-recommends", *packages], 900)


def setup(venv: Path, python: str, *, force: bool, apt: bool) -> int:
    """Create ``venv`` with the peer servers; apt-get wrk/nginx-light/nghttp2-client/caddy when
    missing."""
    status = 0
    if apt:
        missing = [
            pkg
            for tool, pkg in (
                ("wrk", "wrk"),
                ("nginx", "nginx-light"),
                ("h2load", "nghttp2-client"),
                ("caddy", "caddy"),
            )
            if not _has(tool)
        ]
        if missing:
            status |= _apt_install(missing)
    if force and venv.exists():
        shutil.rmtree(venv)
    venv_python = venv / "bin" / "python"
    if not venv_python.exists() and _run([python, "-m", "venv", str(venv)], 300) != 0:
        return 1
    if _run(
        [
            str(venv_python),
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "-r",
            str(REQUIREMENTS),
        ],
        1200,
    ):
        return 1
    versions = peer_versions(venv_python)
    print(f"peers venv {venv}:", file=sys.stderr)
    for name in ("python", *PEER_PACKAGES):
        print(f"  {name} {versions.get(name)}", file=sys.stderr)
    return status


def _has(tool: str) -> bool:
    if tool == "nginx":
        return find_nginx() is not None
    return shutil.which(tool) is not None
