"""An offline wheelhouse from the distributions this interpreter has installed.

The README's set-up commands run ``pip install .`` and ``pip install -e
'.[test]'`` in a fresh virtual environment.  A test that runs them verbatim
must not reach a package index (tests never leave loopback), so pip is
pointed at a directory of wheels instead (``PIP_NO_INDEX=1``,
``PIP_FIND_LINKS=DIR``): :func:`build_wheelhouse` writes one wheel per
distribution the requirements need, repacked from what is installed here
(the files its RECORD lists, under the tag its WHEEL file names), so the
versions are exactly the ones the suite already runs with.

Files installed outside site-packages (``../../../bin/ruff``,
``../../../share/man/...``) go back to the wheel's ``.data`` directory;
console-script wrappers are left out (pip writes them again from
``entry_points.txt``), as are ``__pycache__`` files and the installer's own
records (INSTALLER, REQUESTED, direct_url.json, RECORD, rewritten).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata as md
import re
import zipfile
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

__all__ = ["build_wheelhouse", "closure", "repack"]

_SKIP = frozenset({"INSTALLER", "REQUESTED", "direct_url.json", "RECORD"})


def _dist(name: str) -> md.Distribution | None:
    try:
        return md.distribution(name)
    except md.PackageNotFoundError:
        return None


def closure(requirements: Iterable[str]) -> dict[str, md.Distribution]:
    """{canonical name: installed distribution} of ``requirements`` and
    everything they need, markers evaluated for this interpreter (extras
    included as asked: ``serverio[test]``).  Raises LookupError for a
    requirement that is not installed."""
    todo = [Requirement(r) for r in requirements]
    seen: dict[str, md.Distribution] = {}
    asked: set[tuple[str, str]] = set()
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        extras = set(req.extras) or {""}
        new = {e for e in extras if (name, e) not in asked}
        if not new:
            continue
        asked |= {(name, e) for e in new}
        dist = seen.get(name) or _dist(req.name)
        if dist is None:
            raise LookupError(f"{req.name} is not installed")
        seen[name] = dist
        for line in dist.requires or ():
            sub = Requirement(line)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in new):
                todo.append(sub)
    return seen


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode()


def _console_scripts(dist: md.Distribution) -> set[str]:
    return {ep.name for ep in dist.entry_points if ep.group in ("console_scripts", "gui_scripts")}


def repack(dist: md.Distribution, out: Path) -> Path:
    """One installed distribution as a wheel file in ``out``; its path."""
    meta = dist.read_text("WHEEL") or ""
    tags = re.findall(r"^Tag:\s*(\S+)$", meta, re.M)
    if not tags or dist.files is None:
        raise LookupError(f"{dist.metadata['Name']}: no WHEEL tags or RECORD to repack")
    # The .dist-info directory as installed (pyyaml-6.0.4, not PyYAML-6.0.4):
    # a wheel holds exactly one, and its data directory has the same stem.
    info = next(
        f.parent.name
        for f in dist.files
        if f.name == "METADATA" and f.parent.name.endswith(".dist-info")
    )
    stem = info.removesuffix(".dist-info")
    data_dir = f"{stem}.data"
    base = Path(str(dist.locate_file(""))).resolve()
    prefix = base.parent.parent.parent  # site-packages -> lib/pythonX.Y -> lib -> prefix
    scripts = _console_scripts(dist)
    # The compressed tag set of the name (py2.py3-none-any), as wheels spell it.
    parts = [list(dict.fromkeys(t.split("-")[i] for t in tags)) for i in range(3)]
    wheel = out / f"{stem}-{'-'.join('.'.join(p) for p in parts)}.whl"
    record: list[str] = []
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as zf:
        for rel in dist.files:
            posix = PurePosixPath(rel.as_posix())
            if "__pycache__" in posix.parts:
                continue
            src = (base / str(rel)).resolve()
            if posix.parts[0] == "..":
                inside = src.relative_to(prefix).as_posix()
                if inside.startswith("bin/"):
                    if src.name in scripts:
                        continue
                    arc = f"{data_dir}/scripts/{src.name}"
                else:
                    arc = f"{data_dir}/data/{inside}"
            elif posix.parent.name.endswith(".dist-info"):
                if posix.name in _SKIP:
                    continue
                arc = f"{info}/{posix.name}" if len(posix.parts) == 2 else posix.as_posix()
            else:
                arc = posix.as_posix()
            if not src.is_file():
                continue
            body = src.read_bytes()
            zf.writestr(arc, body)
            record.append(f"{arc},{_record_hash(body)},{len(body)}")
        record.append(f"{info}/RECORD,,")
        zf.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return wheel


def build_wheelhouse(requirements: Iterable[str], out: Path) -> list[Path]:
    """Wheels for ``requirements`` and what they need into ``out`` (made if
    missing); the paths written.  ``serverio`` itself is never repacked: the
    commands under test build it from the checkout."""
    out.mkdir(parents=True, exist_ok=True)
    dists = closure(requirements)
    return [repack(d, out) for n, d in sorted(dists.items()) if n != "serverio"]
