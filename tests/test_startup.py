"""Start-up imports only what the command needs (issue 45; docs/performance.md
"Start-up").

``serverio --version`` and ``--help`` need no event loop: they import
neither trio nor any part of the server.  A plain static start imports none
of the optional features (live reload, uploads, WebDAV, archives, the
proxy, the site rules, HTTP/2's connection and h2's state machine, TLS
set-up, the Markdown renderer): each is imported where its option turns it
on, HTTP/2 by the first connection that speaks it.  Read from
``python -X importtime`` (every module a process imports, on stderr).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from serverio.site.passwords import hash_password
from testkit import simulation

# Never imported by --version or --help: the event loop, the protocols,
# the server and its features.
NOT_FOR_HELP = (
    "trio",
    "h11",
    "h2",
    "ssl",
    "serverio.net",
    "serverio.pipeline",
    "serverio.http.core",
    "serverio.site",
    "serverio.dav",
    "serverio.proxy",
    "serverio.archive",
    "serverio.live",
    "serverio.upload",
    "serverio.writes",
    "serverio.fs",
    "logging",
)
# Never imported by a plain static start (serverio 0 -d DIR), which answers.
NOT_FOR_STATIC = (
    "serverio.dav",
    "serverio.proxy",
    "serverio.archive",
    "serverio.live.service",
    "serverio.live.inject",
    "serverio.fs.watch",
    "serverio.upload",
    "serverio.writes",
    "serverio.site.service",
    "serverio.site.passwords",
    "serverio.site.authlimit",
    "serverio.net.h2conn",
    "h2.connection",
    "hpack",
    "markdown_it",
    "serverio.ops.devtls",
    "webbrowser",
    "serverio.ops.completions",
    "encodings.idna",
)


def imported(importtime: str) -> set[str]:
    """The modules of a ``-X importtime`` report."""
    names = set()
    for line in importtime.splitlines():
        if line.startswith("import time:") and "|" in line and "[us]" not in line:
            names.add(line.rsplit("|", 1)[1].strip())
    return names


def _hits(names: set[str], banned: tuple[str, ...]) -> list[str]:
    return sorted(n for n in names if any(n == b or n.startswith(b + ".") for b in banned))


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("SERVERIO_")}


def test_the_report_parser() -> None:
    report = (
        "import time: self [us] | cumulative | imported package\n"
        "import time:       153 |        153 |   trio._version\n"
        "import time:     11085 |     280855 | trio\n"
    )
    assert imported(report) == {"trio._version", "trio"}
    assert _hits({"trio._version", "trio", "triode"}, ("trio",)) == ["trio", "trio._version"]


@pytest.mark.parametrize("flag", ["--version", "--help", "--help-all"])
def test_version_and_help_import_no_event_loop_and_no_server(flag: str) -> None:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "serverio", flag],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
        check=False,
    )
    assert done.returncode == 0 and done.stdout, done.stderr[-2000:]
    names = imported(done.stderr)
    assert "serverio.ops.cli" in names  # the report is the real one
    assert _hits(names, NOT_FOR_HELP) == []


@pytest.mark.slow
@pytest.mark.skipif(
    simulation.REAL_WINDOWS, reason="SIGINT from outside: Windows has none (test_cli.py)"
)
def test_a_plain_static_start_imports_no_optional_feature(root: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-X", "importtime", "-m", "serverio", "0", "-d", str(root), "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = line.split(" at ", 1)[1].strip()
        with urllib.request.urlopen(url + "hello.txt", timeout=10) as resp:
            assert resp.read() == b"hello world\n"
        with urllib.request.urlopen(url, timeout=10) as resp:  # a listing
            assert resp.status == 200
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err[-2000:]
    names = imported(err)
    assert {"trio", "h11", "serverio.app.server"} <= names
    assert _hits(names, NOT_FOR_STATIC) == []


@pytest.mark.parametrize(
    "settings",
    [
        {"headers": ("X-A: 1",)},
        {"header_rules": (("/**", (("X-B", "2"),), ()),)},
        {"cors": True},
        {"cors_origins": ("https://a.example",)},
        {"redirects": (("/old", "/new", 301),)},
        {"rewrites": (("/a", "/hello.txt"),)},
        {"clean_urls": True},
        {"trailing_slash": "add"},
        {"error_pages": (("404", "index.html"),)},
        {"auth_users": (f"a:{hash_password('pw', 1000)}",)},
        {"upload": True, "writable": (("/sub/**", ("put",)),)},
        {"hidden": True},
        {"upload": True},
        {},
    ],
)
def test_the_site_rules_are_skipped_only_when_they_would_compile_to_nothing(
    root: Path, settings: dict[str, object]
) -> None:
    """A static start skips compiling (and importing) the site rules when
    nothing asks for them: never when they would have enforced something."""
    from serverio.config import wants_site_rules
    from serverio.site.service import load_site

    from .conftest import make_config

    cfg = make_config(root, **settings)
    compiled = load_site(cfg)
    if compiled is not None:
        assert wants_site_rules(cfg), settings
    if not settings or settings in ({"hidden": True}, {"upload": True}):
        assert compiled is None and not wants_site_rules(cfg)
