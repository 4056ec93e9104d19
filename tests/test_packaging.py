"""The wheel holds every module and PEP 561 marker of the source tree.

An editable install imports straight from the checkout, so a package left
out of the wheel's configuration goes unnoticed by every other test.  This
builds a real wheel from a clean copy of the tree, with one extra nested
subpackage, and compares file lists.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parent.parent


def _copy_tree(dst: Path) -> None:
    # A clean copy: no build/ or *.egg-info left by earlier builds (setuptools
    # builds in the source directory and would reuse them).
    dst.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(SOURCE / name, dst / name)
    shutil.copytree(
        SOURCE / "serverio", dst / "serverio", ignore=shutil.ignore_patterns("__pycache__")
    )


def packaged_files(tree: Path) -> set[str]:
    """Paths (relative to ``tree``) that a wheel of serverio must contain."""
    return {
        p.relative_to(tree).as_posix()
        for p in (tree / "serverio").rglob("*")
        if p.is_file() and (p.suffix == ".py" or p.name == "py.typed")
    }


@pytest.mark.slow
def test_wheel_contains_every_module_and_marker(tmp_path: Path) -> None:
    src = tmp_path / "src"
    _copy_tree(src)
    # A nested subpackage the layout may grow, with its own marker: a fixed
    # package list in pyproject.toml would leave it out.
    probe = src / "serverio" / "_layoutprobe" / "inner"
    probe.mkdir(parents=True)
    (probe.parent / "__init__.py").write_text("")
    (probe / "__init__.py").write_text("")
    (probe / "py.typed").write_text("")
    dist = tmp_path / "dist"
    # Absolute paths: pip reads a bare word as a project name on the index.
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(src)],
        check=True,
        capture_output=True,
        timeout=240,
    )
    (wheel,) = dist.glob("serverio-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    expected = packaged_files(src)
    assert "serverio/_layoutprobe/inner/py.typed" in expected
    assert sorted(expected - names) == []
    # Nothing else: no tests, no benchmarks, only serverio and its metadata.
    others = {n for n in names if not n.startswith(("serverio/", "serverio-"))}
    assert others == set()
    meta = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    with zipfile.ZipFile(wheel) as zf:
        assert "serverio = serverio.ops.cli:main" in zf.read(meta).decode()
