"""serverio from another commit: a cached checkout of that commit, run through its CLI.

``checkout(rev)`` resolves ``rev`` to a full commit id in this repository
and returns a directory holding that commit's tree, created on first use
under ``$TMPDIR/serverio-bench-worktrees/<commit>`` (outside the repository,
so neither git nor pytest nor ruff sees it) and reused afterwards.  The tree
is exported with ``git archive``: a read-only snapshot needs no entry in the
repository's worktree list, so nothing is left registered in ``.git`` when
the cache directory is cleaned.

``serverio_launch(tree)`` is how every tool runs that commit: ``python -m
serverio`` with the *current* interpreter (same trio and h11 versions),
``PYTHONPATH`` set to the tree and the tree as working directory.  The
working directory matters: ``python -m`` puts it first on ``sys.path``, so
running from the current checkout would import the current serverio.  An
editable install of the current checkout does not interfere: its finder
is appended to ``sys.meta_path`` after the path-based one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BASELINE_FILE = Path(__file__).resolve().parent / "baseline.txt"


class CommitError(RuntimeError):
    """The revision cannot be resolved or exported; the message says why (one line)."""


def cache_dir() -> Path:
    return Path(tempfile.gettempdir()) / "serverio-bench-worktrees"


def resolve(rev: str, repo: Path = REPO) -> str:
    """The full commit id of ``rev`` (anything ``git rev-parse`` accepts)."""
    proc = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        raise CommitError(f"not a commit in {repo}: {rev!r}")
    return proc.stdout.strip()


def checkout(rev: str, repo: Path = REPO) -> Path:
    """A directory with the tree of ``rev``; created once per commit, then reused."""
    commit = resolve(rev, repo)
    dest = cache_dir() / commit
    if (dest / "serverio" / "__init__.py").exists():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    # Export into a private directory, then rename: a concurrent or
    # interrupted export never leaves a half-written tree under ``dest``.
    staging = Path(tempfile.mkdtemp(prefix=f".{commit[:12]}-", dir=dest.parent))
    try:
        archive = staging / "tree.tar"
        proc = subprocess.run(
            ["git", "-C", str(repo), "archive", "--format=tar", "-o", str(archive), commit],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        if proc.returncode != 0:
            raise CommitError(f"git archive {commit[:12]} failed: {proc.stderr.strip()[:200]}")
        tree = staging / "tree"
        with tarfile.open(archive) as tar:
            tar.extractall(tree, filter="data")
        archive.unlink()
        if not (tree / "serverio" / "__init__.py").exists():
            raise CommitError(f"commit {commit[:12]} has no serverio package")
        try:
            os.rename(tree, dest)
        except OSError:
            if not (dest / "serverio" / "__init__.py").exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return dest


def short(commit: str) -> str:
    return commit[:7]


def read_baseline(path: Path = BASELINE_FILE) -> str:
    """The recorded baseline commit: the first non-comment word of ``bench/baseline.txt``."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise CommitError(f"cannot read {path.name}: {exc.strerror}") from exc
    for line in lines:
        word = line.split("#", 1)[0].strip()
        if word:
            return word
    raise CommitError(f"{path.name} names no commit")


@dataclass(frozen=True)
class Launch:
    """How to start ``python -m serverio``: interpreter, working directory, extra env."""

    python: str
    cwd: Path
    env: dict[str, str]

    def argv(self, *args: str) -> list[str]:
        return [self.python, "-m", "serverio", *args]


def serverio_launch(python: str, tree: Path | None) -> Launch:
    """The current checkout's serverio (``tree`` None) or the one in ``tree``."""
    if tree is None:
        return Launch(python, REPO, {})
    return Launch(python, tree, {"PYTHONPATH": str(tree)})
