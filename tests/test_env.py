"""Environment variables (issue 28): ``SERVERIO_<OPTION>`` for every option
with a TOML key, and ``PORT`` as http-server and serve read it.

Precedence, documented in docs/cli.md "Environment variables" and in the
epilog of --help: command line > SERVERIO_* > --config file > PORT >
default.  The tests run ``main()`` in-process with an explicit ``environ``
and catch the Config it would serve (trio.run replaced), so each row of the
table is the configuration a real start would use.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import trio

from serverio.config import Config
from serverio.net import activation
from serverio.ops.cli import build_parser, config_from_args, main
from serverio.ops.completions import SUBCOMMANDS
from serverio.ops.options import OPTIONS, env_bool, env_names
from serverio.ops.tomlconfig import option_keys, parse_with_config

DOCS = Path(__file__).resolve().parent.parent / "docs" / "cli.md"


def _served(
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    environ: dict[str, str],
    fds: list[int] | None = None,
) -> Config:
    """The Config main() would serve with this command line and environment
    (``fds``: what systemd socket activation hands over)."""
    seen: list[Config] = []

    def fake_run(fn: Any, *args: Any) -> int:
        seen.append(fn.args[0])  # functools.partial(run_server, cfg, ...)
        return 0

    monkeypatch.setattr(trio, "run", fake_run)  # what cli.main calls to serve
    # cli imports it when it serves (start-up: docs/performance.md)
    monkeypatch.setattr(activation, "systemd_fds", lambda: list(fds or []))
    assert main(argv, environ=environ) == 0
    [cfg] = seen
    return cfg


def _error(argv: list[str], environ: dict[str, str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one stderr line of a start that must fail with exit status 2."""
    try:
        code: object = main(argv, environ=environ)
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    out, err = capsys.readouterr()
    assert code == 2 and out == "", (code, out)
    [line] = err.splitlines()
    assert line.startswith("serverio: error: "), line
    return line


# ---------------------------------------------------------------- names


def test_every_option_with_a_key_has_a_variable_read_by_env_values() -> None:
    """Derived from the declarations: SERVERIO_ + the TOML key; each name
    env_names() lists is one env_values() reads (a flag value for each)."""
    keys = set(option_keys(build_parser()))
    names = env_names()
    assert {"SERVERIO_" + k.upper().replace("-", "_") for k in keys} | {"PORT"} == set(names)
    assert "SERVERIO_MAX_CONNECTIONS" in names and "SERVERIO_SPA" in names
    for opt in OPTIONS:
        if opt.key is None:
            assert opt.env is None, opt.flags  # --config, --check, --print-config, --version


def test_help_describes_what_serverio_is_today() -> None:
    """It opened with "Serve a directory over HTTP/1.1 (trio + h11)"."""
    description = build_parser().description or ""
    for needed in (
        "HTTP/1.1 and HTTP/2",
        "ALPN",
        "h2c",
        "TLS",
        "site rules",
        "live reload",
        "--workers",
    ):
        assert needed in description, needed


def test_help_shows_each_variable_and_the_precedence() -> None:
    text = " ".join(build_parser().format_help().split())
    for name in env_names():
        if name != "PORT":
            assert f"[env: {name}]" in text, name
    assert "command line > SERVERIO_* > --config file > PORT > default" in text
    assert "PORT the port when no port is given" in text


# ---------------------------------------------------------------- values


@pytest.mark.parametrize(
    ("raw", "value"),
    [(w, True) for w in ("1", "true", "YES", "On ")]
    + [(w, False) for w in ("0", "False", "no", "off")],
)
def test_booleans(raw: str, value: bool) -> None:
    assert env_bool("SERVERIO_HIDDEN", raw) is value


@pytest.mark.parametrize(
    ("environ", "field", "value"),
    [
        ({"SERVERIO_MAX_CONNECTIONS": "100"}, "max_connections", 100),
        ({"SERVERIO_HEAD_TIMEOUT": "2.5"}, "head_timeout", 2.5),
        ({"SERVERIO_LISTING_CACHE_SIZE": "1MiB"}, "listing_cache_size", 1024**2),
        ({"SERVERIO_ETAG": "content"}, "etag", "content"),
        ({"SERVERIO_HIDDEN": "yes"}, "hidden", True),
        ({"SERVERIO_NO_LISTING": "1"}, "listing", False),  # the flag's own sense
        ({"SERVERIO_HTTP2": "off"}, "http2", False),  # a --x/--no-x pair: one variable
        ({"SERVERIO_QUIET": "1"}, "access_log", "off"),  # what -q sets
        ({"SERVERIO_SPA": "1"}, "spa", "index.html"),  # the switch flag
        ({"SERVERIO_SPA_FILE": "app.html"}, "spa", "app.html"),
        ({"SERVERIO_INDEX": "a.html, b.html"}, "index", ("a.html", "b.html")),
        (
            {"SERVERIO_CORS_ORIGIN": "https://a.example,https://b.example"},
            "cors_origins",
            ("https://a.example", "https://b.example"),
        ),
        (
            {"SERVERIO_TRUSTED_PROXIES": "10.0.0.1/8,192.0.2.7"},
            "trusted_proxies",
            ("10.0.0.0/8", "192.0.2.7/32"),
        ),
        # -H: a comma inside a value stays there; a new item starts at "NAME:".
        (
            {"SERVERIO_HEADER": "Cache-Control: no-cache, no-store,X-A: 1"},
            "headers",
            ("Cache-Control: no-cache, no-store", "X-A: 1"),
        ),
        ({"SERVERIO_MAX_CONNECTIONS": ""}, "max_connections", 1024),  # empty: not set
        ({"SERVERIO_KEY_PASSWORD": "x", "SERVERIO_NOT_AN_OPTION": "1"}, "max_connections", 1024),
    ],
)
def test_each_kind_of_option(
    monkeypatch: pytest.MonkeyPatch, root: Path, environ: dict[str, str], field: str, value: Any
) -> None:
    cfg = _served(monkeypatch, ["-d", str(root)], environ)
    got = cfg.value(field)
    if field == "trusted_proxies":
        got = tuple(str(n) for n in cfg.site.proxy_networks)
    assert got == value


# ---------------------------------------------------------------- precedence


@pytest.mark.parametrize(
    ("argv", "environ", "toml", "field", "value"),
    [
        # flag > env > TOML > default, one row per layer
        ([], {}, "", "max_connections", 1024),
        ([], {}, "max-connections = 50", "max_connections", 50),
        ([], {"SERVERIO_MAX_CONNECTIONS": "100"}, "max-connections = 50", "max_connections", 100),
        (
            ["--max-connections", "200"],
            {"SERVERIO_MAX_CONNECTIONS": "100"},
            "max-connections = 50",
            "max_connections",
            200,
        ),
        # a flag the environment turns off although the file turned it on
        ([], {"SERVERIO_HIDDEN": "0"}, "hidden = true", "hidden", False),
        (["--hidden"], {"SERVERIO_HIDDEN": "0"}, "", "hidden", True),
        ([], {"SERVERIO_HTTP2": "0"}, "http2 = true", "http2", False),
        (["--http2"], {"SERVERIO_HTTP2": "0"}, "", "http2", True),
        # lists: the whole list of the higher layer replaces the lower one's
        (
            [],
            {"SERVERIO_INDEX": "a.html,b.html"},
            'index = ["t.html"]',
            "index",
            ("a.html", "b.html"),
        ),
        (
            ["--index", "c.html"],
            {"SERVERIO_INDEX": "a.html"},
            'index = ["t.html"]',
            "index",
            ("c.html",),
        ),
        # PORT: below the argument, SERVERIO_PORT and the file's key
        ([], {"PORT": "9001"}, "", "port", 9001),
        (["7000"], {"PORT": "9001"}, "", "port", 7000),
        ([], {"PORT": "9001", "SERVERIO_PORT": "7001"}, "", "port", 7001),
        ([], {"PORT": "9001"}, "port = 7002", "port", 7002),
        (["8000"], {"PORT": "9001"}, "", "port", 8000),  # an explicit 8000 is explicit
        ([], {"PORT": "0"}, "", "port", 0),
        # ... and below --listen (no "replace -b and the port" error either)
        (["--listen", "127.0.0.1:0"], {"PORT": "9001"}, "", "port", 8000),
        ([], {"PORT": "9001"}, 'listen = ["127.0.0.1:0"]', "port", 8000),
        (
            [],
            {"PORT": "9001", "SERVERIO_LISTEN": "127.0.0.1:0,[::1]:0"},
            "",
            "listen",
            ("127.0.0.1:0", "[::1]:0"),
        ),
        (["--fd", "3"], {"PORT": "9001"}, "", "port", 8000),
    ],
)
def test_precedence(
    monkeypatch: pytest.MonkeyPatch,
    root: Path,
    tmp_path: Path,
    argv: list[str],
    environ: dict[str, str],
    toml: str,
    field: str,
    value: Any,
) -> None:
    conf = tmp_path / "serverio.toml"
    conf.write_text(toml + "\n")
    cfg = _served(monkeypatch, [*argv, "-d", str(root), "--config", str(conf)], environ)
    assert cfg.value(field) == value


def test_port_is_below_socket_activation(monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    """LISTEN_FDS (read after parsing) names the listeners: PORT is ignored."""
    cfg = _served(monkeypatch, ["-d", str(root)], {"PORT": "9001"}, fds=[3])
    assert cfg.listeners.fds == (3,) and cfg.listeners.port == 8000
    cfg = _served(monkeypatch, ["-d", str(root)], {"PORT": "9001"})
    assert cfg.listeners.fds == () and cfg.listeners.port == 9001


def test_print_config_round_trips_what_the_environment_set(
    monkeypatch: pytest.MonkeyPatch, root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Printed under the environment, read back without it: the Config that
    a start under that environment serves."""
    environ = {
        "SERVERIO_MAX_CONNECTIONS": "77",
        "SERVERIO_HTTP2": "0",
        "SERVERIO_INDEX": "a.html,b.html",
        "SERVERIO_HEADER": "X-A: 1, 2,X-B: 3",
        "SERVERIO_SPA": "on",
        "PORT": "9005",
    }
    served = _served(monkeypatch, ["-d", str(root)], environ)
    assert main(["-d", str(root), "--print-config"], environ=environ) == 0
    printed = capsys.readouterr().out
    assert tomllib.loads(printed)["port"] == 9005
    conf = tmp_path / "printed.toml"
    conf.write_text(printed)
    again = config_from_args(parse_with_config(build_parser(), ["--config", str(conf)]))
    assert again.evolve(rules_source="") == served
    assert served.conn.max_connections == 77 and served.site.headers == ("X-A: 1, 2", "X-B: 3")


# ---------------------------------------------------------------- bad values


@pytest.mark.parametrize(
    ("flag", "variable", "bad"),
    [
        ("--max-connections", "SERVERIO_MAX_CONNECTIONS", "x"),
        ("--etag", "SERVERIO_ETAG", "zz"),
        ("--listing-cache-size", "SERVERIO_LISTING_CACHE_SIZE", "12XB"),
        ("--head-timeout", "SERVERIO_HEAD_TIMEOUT", "soon"),
        ("--fd", "SERVERIO_FD", "a"),
        ("--trusted-proxies", "SERVERIO_TRUSTED_PROXIES", "1.2.3"),
        ("--protocol", "SERVERIO_PROTOCOL", "HTTP/3"),
        ("--workers", "SERVERIO_WORKERS", "many"),
    ],
)
def test_a_bad_value_is_the_flags_error_naming_the_variable(
    root: Path, capsys: pytest.CaptureFixture[str], flag: str, variable: str, bad: str
) -> None:
    by_flag = _error([flag, bad, "-d", str(root)], {}, capsys)
    by_env = _error(["-d", str(root)], {variable: bad}, capsys)
    detail = re.sub(r"^serverio: error: argument [^:]+: ", "", by_flag)
    assert detail != by_flag  # argparse's "argument --x: ..." form
    assert by_env == f"serverio: error: {variable}: {detail}"


@pytest.mark.parametrize(
    ("flag_argv", "environ", "suffix"),
    [
        (
            ["--max-connections", "0"],
            {"SERVERIO_MAX_CONNECTIONS": "0"},
            " (from SERVERIO_MAX_CONNECTIONS)",
        ),
        (["99999"], {"SERVERIO_PORT": "99999"}, " (from SERVERIO_PORT)"),
        (
            ["--h2-max-streams", "100000"],
            {"SERVERIO_H2_MAX_STREAMS": "100000"},
            " (from SERVERIO_H2_MAX_STREAMS)",
        ),
    ],
)
def test_a_value_refused_by_validation_names_the_variable(
    root: Path,
    capsys: pytest.CaptureFixture[str],
    flag_argv: list[str],
    environ: dict[str, str],
    suffix: str,
) -> None:
    by_flag = _error([*flag_argv, "-d", str(root)], {}, capsys)
    assert _error(["-d", str(root)], environ, capsys) == by_flag + suffix
    # given on the command line as well, the flag's value is the one refused
    assert _error([*flag_argv, "-d", str(root)], environ, capsys) == by_flag


@pytest.mark.parametrize(
    ("environ", "line"),
    [
        (
            {"SERVERIO_HIDDEN": "maybe"},
            "SERVERIO_HIDDEN: 'maybe' is not a boolean (1/0, true/false, yes/no, on/off)",
        ),
        (
            {"SERVERIO_HTTP2": "2"},
            "SERVERIO_HTTP2: '2' is not a boolean (1/0, true/false, yes/no, on/off)",
        ),
        (
            {"SERVERIO_SPA": "index.html"},
            "SERVERIO_SPA: 'index.html' is not a boolean (1/0, true/false, yes/no, on/off)",
        ),
        ({"PORT": "http"}, "PORT: 'http' is not a port (0-65535)"),
        ({"PORT": "70000"}, "PORT: '70000' is not a port (0-65535)"),
        ({"PORT": "-1"}, "PORT: '-1' is not a port (0-65535)"),
        ({"PORT": "\u00b2"}, "PORT: '\u00b2' is not a port (0-65535)"),  # isdigit(), not int()
    ],
)
def test_bad_booleans_and_ports(
    root: Path, capsys: pytest.CaptureFixture[str], environ: dict[str, str], line: str
) -> None:
    assert _error(["-d", str(root)], environ, capsys) == f"serverio: error: {line}"


def test_a_bad_variable_in_a_real_process_is_one_line_exit_2(root: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "serverio", "-d", str(root)],
        env={**_clean_env(), "SERVERIO_MAX_CONNECTIONS": "lots"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == "serverio: error: SERVERIO_MAX_CONNECTIONS: invalid int value: 'lots'\n"


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in env_names()}


# ---------------------------------------------------------------- --help and docs/cli.md


def _doc_flags() -> set[str]:
    """The flags the option tables of docs/cli.md document (first cells)."""
    flags: set[str] = set()
    for row in re.findall(r"^\| ([^|]*(?:\\\|[^|]*)*) \|", DOCS.read_text(), re.M):
        flags |= set(re.findall(r"`(-{1,2}[A-Za-z0-9][\w-]*)", row))
    return flags


def test_every_documented_flag_is_an_option_and_every_option_is_documented() -> None:
    """docs/cli.md's tables and --help name the same options (the other
    direction, every flag of --help in docs/cli.md, in test_options.py too)."""
    parser = build_parser()
    parser_flags = {f for a in parser._actions for f in a.option_strings} - {"-h", "--help"}
    documented = _doc_flags()
    assert documented - parser_flags == set(), "documented, but not an option"
    assert parser_flags - documented == set(), "an option without a row in docs/cli.md"


# Flags docs/cli.md names that are not serverio's on purpose: --x / --no-x
# (the pattern of a toggle).
_NOT_OURS = {"--x", "--no-x"}


def test_every_flag_docs_cli_md_names_anywhere_exists() -> None:
    """Not only the tables' first cells: a flag named in prose or an example
    is one of serverio's or of a subcommand's (``hash-password --iterations``),
    so a renamed or removed option cannot linger in the text."""
    parser = build_parser()
    ours = {f for a in parser._actions for f in a.option_strings}
    ours |= {f for sub in SUBCOMMANDS for flag in sub.flags for f in flag.flags}
    named = set(re.findall(r"`(--[A-Za-z0-9][\w-]*)", DOCS.read_text()))
    assert _NOT_OURS <= named, "an exception no longer needed: drop it"
    assert named - ours - _NOT_OURS == set(), "named in docs/cli.md, but no such option"


def test_docs_cli_md_documents_the_variables_and_the_precedence() -> None:
    doc = DOCS.read_text()
    assert "## Environment variables" in doc
    assert "command line > `SERVERIO_*` > `--config` file > `PORT` > default" in doc
    for name in ("SERVERIO_MAX_CONNECTIONS", "PORT", "SERVERIO_SPA"):
        assert f"`{name}" in doc, name


def test_subcommands_are_listed_and_their_help_is_plain_text(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert "serverio hash-password" in build_parser().format_help().split("subcommands:")[1]
    with pytest.raises(SystemExit) as info:
        main(["hash-password", "--help"], environ={})
    out = capsys.readouterr().out
    assert info.value.code == 0 and out.startswith("usage: serverio hash-password")
    assert "``" not in out and ":func:" not in out  # it showed the docstring's reST
    assert "--iterations N  PBKDF2 rounds" in out and "(default: 600000)" in out


@pytest.mark.parametrize(
    ("key_line", "flag_argv"),
    [
        ("max-connections = 0", ["--max-connections", "0"]),
        ("head-timeout = -1.0", ["--head-timeout", "-1"]),
        ("h2-max-streams = 0", ["--h2-max-streams", "0"]),
    ],
)
def test_a_file_value_refused_by_validation_names_the_file_and_key(
    root: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    key_line: str,
    flag_argv: list[str],
) -> None:
    """A value the start-up checks refuse names where it came from: the
    command line's flag, else the variable, else the file and its key."""
    conf = tmp_path / "site.toml"
    conf.write_text(key_line + "\n")
    key = key_line.split(" = ")[0]
    by_flag = _error([*flag_argv, "-d", str(root)], {}, capsys)
    from_file = _error(["--config", str(conf), "-d", str(root)], {}, capsys)
    assert from_file == f"{by_flag} (from {conf}, key {key})"
    # the command line wins over the file: its own value is the one refused
    assert _error([*flag_argv, "--config", str(conf), "-d", str(root)], {}, capsys) == by_flag
