"""--config FILE (TOML) and --print-config."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from serverio.errors import ConfigError
from serverio.ops.cli import build_parser, config_from_args
from serverio.ops.tomlconfig import CLI_ONLY, OPTION_TABLES, dump, option_keys, parse_with_config

from .test_cli import run_cli


def _parse(argv: list[str]) -> argparse.Namespace:
    return parse_with_config(build_parser(), argv)


def test_file_values_and_command_line_precedence(root: Path, tmp_path: Path) -> None:
    conf = tmp_path / "serverio.toml"
    conf.write_text(
        f'directory = "{root}"\n'
        "max-connections = 100\n"
        "head-timeout = 3\n"
        "keepalive-timeout = 2.5\n"
        "hidden = true\n"
        'index = ["a.html", "b.html"]\n'
        'access-log = "json"\n'
        "port = 9000\n"
    )
    cfg = config_from_args(_parse(["--config", str(conf)]))
    assert (cfg.conn.max_connections, cfg.conn.head_timeout, cfg.conn.keepalive_timeout) == (
        100,
        3.0,
        2.5,
    )
    assert (
        cfg.files.hidden
        and cfg.files.index == ("a.html", "b.html")
        and cfg.log.access_log == "json"
    )
    assert cfg.listeners.port == 9000 and cfg.root == str(root)
    # Only what the command line actually says overrides the file.
    cfg = config_from_args(
        _parse(["--config", str(conf), "--max-connections", "7", "--index", "c.html", "8080"])
    )
    assert (
        cfg.conn.max_connections == 7
        and cfg.files.index == ("c.html",)
        and cfg.listeners.port == 8080
    )
    assert (
        cfg.conn.head_timeout == 3.0 and cfg.files.hidden
    )  # untouched keys still come from the file


def test_header_adds_to_the_file_list_and_an_empty_value_removes(
    root: Path, tmp_path: Path
) -> None:
    conf = tmp_path / "serverio.toml"
    conf.write_text(
        f'directory = "{root}"\nheader = ["X-File: 1", "X-Frame-Options: DENY"]\n'
        'index = ["a.html"]\n'
    )
    env = {"header": ["X-Env: 2"]}
    args = parse_with_config(
        build_parser(),
        ["--config", str(conf), "-H", "X-Cli: 3", "-H", "x-frame-options:", "--index", "b.html"],
        env,
    )
    cfg = config_from_args(args)
    # file, then environment, then command line; "Name:" took the file's X-Frame-Options away.
    assert cfg.site.headers == ("X-File: 1", "X-Env: 2", "X-Cli: 3")
    assert cfg.files.index == ("b.html",)  # other lists are still replaced (docs/cli.md)
    # --print-config writes the merged list, which reads back the same.
    again = tmp_path / "again.toml"
    again.write_text(dump(build_parser(), args))
    assert config_from_args(_parse(["--config", str(again)])).site.headers == cfg.site.headers
    # The command line alone: a header and its removal leave nothing.
    cfg = config_from_args(_parse(["-d", str(root), "-H", "X-A: 1", "-H", "X-A:"]))
    assert cfg.site.headers == ()


def test_serverio_header_adds_to_the_file_headers_end_to_end(root: Path, tmp_path: Path) -> None:
    conf = tmp_path / "serverio.toml"
    conf.write_text('header = ["X-File: 1", "X-Gone: 0"]\n')
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "serverio",
            "--config",
            str(conf),
            "-d",
            str(root),
            "-H",
            "X-Gone:",
            "-H",
            "X-Cli",
            "3",
            "--print-config",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "SERVERIO_HEADER": "X-Env: a, b, X-Env2: c"},
    )
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("header ="))
    assert line == 'header = ["X-File: 1", "X-Env: a, b", "X-Env2: c", "X-Cli: 3"]'


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("max-conections = 5\n", "unknown key 'max-conections'"),
        ("max_connections = 5\n", "unknown key 'max_connections'"),
        ('max-connections = "5"\n', "key 'max-connections' must be an integer, got string"),
        ("max-connections = true\n", "key 'max-connections' must be an integer, got boolean"),
        ("hidden = 1\n", "key 'hidden' must be a boolean"),
        ('head-timeout = "soon"\n', "key 'head-timeout'"),
        ('access-log = "xml"\n', "key 'access-log' must be one of"),
        ("bind = 127\n", "key 'bind' must be a string"),
        ("[table]\nx = 1\n", "unknown key 'table'"),
        ("config = 'other.toml'\n", "unknown key 'config'"),
        ("max-connections = \n", "invalid TOML"),
    ],
)
def test_file_errors_exit_2_naming_key_and_file(
    root: Path, tmp_path: Path, body: str, needle: str
) -> None:
    conf = tmp_path / "bad.toml"
    conf.write_text(body)
    with pytest.raises(ConfigError) as info:
        _parse(["--config", str(conf)])
    assert needle in str(info.value) and str(conf) in str(info.value)
    r = run_cli("--config", str(conf), "-d", str(root))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == [f"serverio: error: {info.value}"]


def test_missing_config_file(tmp_path: Path) -> None:
    r = run_cli("--config", str(tmp_path / "nope.toml"))
    assert r.returncode == 2 and "nope.toml" in r.stderr and len(r.stderr.splitlines()) == 1


def _sample(action: argparse.Action) -> object:
    if action.nargs == 0:
        return True
    if action.choices is not None:
        return list(action.choices)[-1]
    value: object
    if action.type is int:
        value = 3
    elif action.type is None:
        value = "x"
    elif getattr(action.type, "__name__", "") == "_cidr":
        value = "10.0.0.0/8"  # --trusted-proxies: an address or network
    elif isinstance(action.default, int | float | str) and not isinstance(action.default, bool):
        value = action.default  # a converter of its own (seconds, sizes): its default parses
    else:
        value = 1.5
    if isinstance(action, argparse._AppendAction):
        return [value]
    return value


def test_every_cli_option_has_a_toml_key() -> None:
    """Options added later get a key automatically; this proves each one
    loads from a file and appears in --print-config."""
    parser = build_parser()
    keys = option_keys(parser)
    for action in parser._actions:
        if action.dest in CLI_ONLY:
            continue
        longs = [o[2:] for o in action.option_strings if o.startswith("--")]
        key = longs[0] if longs else action.dest
        assert keys.get(key) is action, f"{action.option_strings or action.dest} has no TOML key"
    doc = "\n".join(f"{k} = {_toml(_sample(a))}" for k, a in keys.items())
    parsed = tomllib.loads(doc)
    assert set(parsed) == set(keys)


def _toml(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    if isinstance(v, str):
        return f'"{v}"'
    return str(v)


def test_every_key_loads_from_a_file(tmp_path: Path) -> None:
    parser = build_parser()
    for key, action in option_keys(parser).items():
        conf = tmp_path / f"{key}.toml"
        if key in OPTION_TABLES:  # --mount: [[mount]] tables, written back as tables
            conf.write_text(f'[[{key}]]\nroute = "/r"\ndir = "d"\n')
            args = parse_with_config(build_parser(), ["--config", str(conf)])
            assert f"\n[[{key}]]\nroute = " in dump(parser, args), key
            continue
        conf.write_text(f"{key} = {_toml(_sample(action))}\n")
        args = parse_with_config(build_parser(), ["--config", str(conf)])
        assert f"\n{key} = " in dump(parser, args), key


def test_print_config_round_trips(root: Path, tmp_path: Path) -> None:
    conf = tmp_path / "in.toml"
    conf.write_text(f'directory = "{root}"\nwork-workers = 5\ncache-control = "max-age=60"\n')
    r = run_cli("--config", str(conf), "--max-requests", "9", "--print-config")
    assert r.returncode == 0, r.stderr
    printed = tomllib.loads(r.stdout)
    assert printed["work-workers"] == 5 and printed["max-requests"] == 9
    assert printed["directory"] == str(root) and printed["cache-control"] == "max-age=60"
    assert printed["workers"] == 1 and printed["hidden"] is False
    out = tmp_path / "out.toml"
    out.write_text(r.stdout)
    again = run_cli("--config", str(out), "--print-config")
    assert again.returncode == 0 and again.stdout == r.stdout


def test_print_config_escapes_strings(tmp_path: Path) -> None:
    parser = build_parser()
    args = parser.parse_args(["--cache-control", 'a"b\\c\x7f'])
    printed = tomllib.loads(dump(parser, args))
    assert printed["cache-control"] == 'a"b\\c\x7f'


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9100", ("127.0.0.1", 9100)),
        ("[::1]:9100", ("::1", 9100)),
        ("localhost:0", ("localhost", 0)),
    ],
)
def test_admin_bind_parsing(text: str, expected: tuple[str, int]) -> None:
    from serverio.config import parse_host_port

    assert parse_host_port(text, "--admin-bind") == expected


@pytest.mark.parametrize("text", ["9100", "::1:9100", "host:", ":9100", "h:70000", "h:x"])
def test_admin_bind_invalid(root: Path, text: str) -> None:
    r = run_cli("-d", str(root), "--admin-bind", text)
    assert r.returncode == 2 and "--admin-bind must be HOST:PORT" in r.stderr


def test_admin_bind_never_the_public_address(root: Path) -> None:
    r = run_cli("9100", "-d", str(root), "--admin-bind", "127.0.0.1:9100")
    assert r.returncode == 2 and "must not be the public address" in r.stderr
    r = run_cli("9100", "-b", "0.0.0.0", "-d", str(root), "--admin-bind", "127.0.0.1:9100")
    assert r.returncode == 2 and "must not be the public address" in r.stderr


def test_proxy_tables_with_their_own_deadlines_load_and_round_trip(
    root: Path, tmp_path: Path
) -> None:
    conf = tmp_path / "proxy.toml"
    conf.write_text(
        f'directory = "{root}"\n'
        "proxy-head-timeout = 30\n"
        "[[proxy]]\n"
        'prefix = "/api"\n'
        'upstream = "http://127.0.0.1:3000"\n'
        "strip-prefix = true\n"
        'host = "upstream"\n'
        "head-timeout = 2.5\n"
        "total-timeout = 20\n"
        'set-request-headers = { "X-Api-Key" = "dev" }\n'
        'remove-response-headers = ["Server"]\n'
        "[[proxy]]\n"
        'prefix = "/ws"\n'
        'upstream = "unix:/run/app.sock"\n'
    )
    parser = build_parser()
    args = parse_with_config(parser, ["--config", str(conf)])
    cfg = config_from_args(args)
    api, ws = cfg.proxy.routes
    assert (api.prefix, api.strip_prefix, api.head_timeout, api.total_timeout) == (
        "/api",
        True,
        2.5,
        20.0,
    )
    assert api.connect_timeout is None and api.idle_timeout is None and api.host_mode == "upstream"
    assert api.set_up == (("X-Api-Key", "dev"),) and api.remove_down == ("Server",)
    assert ws.unix == "/run/app.sock" and ws.head_timeout is None
    assert cfg.proxy.proxy_head_timeout == 30.0  # the option: routes without their own
    out = tmp_path / "out.toml"
    out.write_text(dump(parser, args))
    again = config_from_args(parse_with_config(build_parser(), ["--config", str(out)]))
    assert again.proxy.routes == cfg.proxy.routes


@pytest.mark.parametrize("value", ["0", "-1", "true", '"5"', "inf"])
def test_a_proxy_tables_deadline_must_be_positive_seconds(tmp_path: Path, value: str) -> None:
    conf = tmp_path / "bad.toml"
    conf.write_text(
        f'[[proxy]]\nprefix = "/api"\nupstream = "http://127.0.0.1:1"\nidle-timeout = {value}\n'
    )
    with pytest.raises((ConfigError, SystemExit)) as err:
        config_from_args(parse_with_config(build_parser(), ["--config", str(conf)]))
    if isinstance(err.value, ConfigError):
        assert "'idle-timeout' must be a positive number of seconds" in str(err.value)


def test_a_proxy_tables_host_must_be_pass_or_upstream(tmp_path: Path) -> None:
    conf = tmp_path / "bad.toml"
    conf.write_text('[[proxy]]\nprefix = "/a"\nupstream = "http://127.0.0.1:1"\nhost = "x"\n')
    with pytest.raises(ConfigError, match="key 'host' must be"):
        config_from_args(parse_with_config(build_parser(), ["--config", str(conf)]))
