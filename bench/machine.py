"""Facts about the machine and software versions, recorded in every artifact."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

PEER_PACKAGES = (
    "aiohttp",
    "starlette",
    "uvicorn",
    "uvloop",
    "httptools",
    "hypercorn",
    "trio",
    "h11",
    "h2",
    "granian",
)
OWN_PACKAGES = ("serverio", "trio", "h11", "h2", "matplotlib")

_PEER_SCRIPT = """
import importlib.metadata as m, json, sys
out = {"python": sys.version.split()[0]}
for name in sys.argv[1:]:
    try:
        out[name] = m.version(name)
    except m.PackageNotFoundError:
        out[name] = None
print(json.dumps(out))
"""


def _first_line(argv: list[str]) -> str:
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unavailable ({exc.__class__.__name__})"
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    return lines[0].strip() if lines else ""


def _tool_version(tool: str, flag: str) -> str | None:
    path = shutil.which(tool)
    return _first_line([path, flag]) if path else None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_total_mib() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 0


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def peer_versions(peers_python: Path) -> dict[str, str | None]:
    if not peers_python.exists():
        return {}
    try:
        proc = subprocess.run(
            [str(peers_python), "-c", _PEER_SCRIPT, *PEER_PACKAGES],
            capture_output=True,
            text=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
        )
        data: dict[str, str | None] = json.loads(proc.stdout)
        return data
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError):
        return {}


def git_revision(repo: Path) -> str:
    line = _first_line(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"])
    if not line or " " in line or line.startswith("fatal"):
        return "none"
    dirty = _first_line(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"])
    return f"{line}{'-dirty' if dirty else ''}"


def machine_facts(
    repo: Path, peers_python: Path, nginx: str | None, wrk: str | None
) -> dict[str, Any]:
    peers = peer_versions(peers_python)
    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    notes = {}
    if peers:
        notes["uvicorn-starlette"] = (
            f"--loop auto -> {'uvloop' if peers.get('uvloop') else 'asyncio'}, "
            f"--http auto -> {'httptools' if peers.get('httptools') else 'h11'}"
        )
        notes["aiohttp"] = "asyncio default loop (uvloop not enabled)"
        notes["hypercorn-trio"] = "trio worker, in-process (--workers 0)"
    return {
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": affinity,
        "mem_total_mib": _mem_total_mib(),
        "kernel": platform.release(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "python_executable": sys.executable,
        "packages": {name: _version(name) for name in OWN_PACKAGES},
        "serverio_git": git_revision(repo),
        "peers": peers,
        "peer_notes": notes,
        "nginx": _first_line([nginx, "-v"]) if nginx else None,
        "wrk": _first_line([wrk, "-v"]) if wrk else None,
        "h2load": _tool_version("h2load", "--version"),
        "caddy": _tool_version("caddy", "version"),
    }
