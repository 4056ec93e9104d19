"""Build a wheel, install it non-editable into a fresh venv, serve one file.

CI installs serverio editable, which imports straight from the checkout and
so cannot notice a module or package missing from the wheel.  This builds
the wheel from a clean copy of the tree, installs it into a new virtual
environment, and runs README command 1 through the installed console
script: ``serverio 0 -d DIR`` (port 0: any free port), read the
``Serving DIR at http://HOST:PORT/`` line, fetch a file from 127.0.0.1 and
compare bytes, then SIGINT and expect exit status 0.

Run with the project's venv: ``.venv/bin/python .ci/wheel_smoke.py``.
"""

from __future__ import annotations

import http.client
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO

SOURCE = Path(__file__).resolve().parent.parent
SERVING = re.compile(r"^Serving (.+) at http://(.+):(\d+)/$")
BODY = b"served from an installed wheel\n" * 40


def run(*cmd: str | Path, cwd: Path, env: dict[str, str]) -> str:
    print("+", " ".join(map(str, cmd)), flush=True)
    t0 = time.monotonic()
    done = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, check=False, capture_output=True, timeout=180
    )
    if done.returncode != 0:
        sys.stderr.write(done.stdout.decode() + done.stderr.decode())
        raise SystemExit(f"wheel smoke: exit status {done.returncode}")
    print(f"  ({time.monotonic() - t0:.1f} s)", flush=True)
    return done.stdout.decode()


def first_line(stream: IO[str], timeout: float) -> str:
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: lines.put(stream.readline()), daemon=True).start()
    try:
        return lines.get(timeout=timeout).rstrip("\n")
    except queue.Empty:
        raise SystemExit(f"wheel smoke: no 'Serving' line within {timeout} s") from None


def main() -> int:
    started = time.monotonic()
    # Nothing from the checkout may leak into the installed environment.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    with tempfile.TemporaryDirectory(prefix="serverio-wheel-") as tmp_name:
        tmp = Path(tmp_name)
        src = tmp / "src"
        src.mkdir()
        for name in ("pyproject.toml", "README.md"):
            shutil.copy2(SOURCE / name, src / name)
        shutil.copytree(
            SOURCE / "serverio", src / "serverio", ignore=shutil.ignore_patterns("__pycache__")
        )
        dist = tmp / "dist"
        run(
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "-w",
            dist,
            src,
            cwd=tmp,
            env=env,
        )
        (wheel,) = dist.glob("serverio-*.whl")
        venv = tmp / "venv"
        # No pip of its own (ensurepip is the slow part): the project's pip
        # installs into it, an ordinary non-editable install of the wheel.
        run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp, env=env)
        python = venv / "bin" / "python"
        run(
            sys.executable,
            "-m",
            "pip",
            "--python",
            python,
            "install",
            "-q",
            wheel,
            cwd=tmp,
            env=env,
        )
        where = run(
            python,
            "-c",
            "import serverio; print(serverio.__file__)",
            cwd=tmp,
            env=env,
        )
        site = Path(where.strip()).resolve()
        if not site.is_relative_to(venv.resolve()):
            raise SystemExit(f"wheel smoke: serverio imported from {site}, not the fresh venv")

        root = tmp / "public"
        root.mkdir()
        (root / "notes.txt").write_bytes(BODY)
        proc = subprocess.Popen(
            [str(venv / "bin" / "serverio"), "0", "-d", str(root)],
            cwd=tmp,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            line = first_line(proc.stdout, 20)
            m = SERVING.match(line)
            if m is None:
                raise SystemExit(f"wheel smoke: unexpected first line {line!r}")
            port = int(m.group(3))
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/notes.txt")
            resp = conn.getresponse()
            body = resp.read()
            conn.close()
            if resp.status != 200 or body != BODY:
                raise SystemExit(
                    f"wheel smoke: GET /notes.txt gave {resp.status}, {len(body)} bytes"
                )
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        if proc.returncode != 0 or "serverio: stopped:" not in err or "Traceback" in err:
            raise SystemExit(f"wheel smoke: exit {proc.returncode}, stderr:\n{err}")
    print(f"wheel smoke: ok ({wheel.name}, {time.monotonic() - started:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
