"""The option declarations (serverio.ops.options): one per setting, and
everything the command line, --help, the TOML file and --print-config say
derived from it."""

from __future__ import annotations

import argparse
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from serverio.config import FIELD_GROUP, Config
from serverio.ops.cli import build_parser, config_from_args, main
from serverio.ops.options import (
    GROUPS,
    NOT_SETTABLE,
    OPTIONS,
    TABLES,
    Option,
    config_fields,
)
from serverio.ops.tomlconfig import dump, option_keys, parse_with_config

DOCS = Path(__file__).resolve().parent.parent / "docs" / "cli.md"


def _help_text(capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as info:
        main(["--help-all"])
    assert info.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # argparse wraps lines


def _exits(action: argparse.Action) -> bool:
    return isinstance(action, argparse._HelpAction | argparse._VersionAction)


# ---------------------------------------------------------------- --help


def test_every_option_has_help_and_shows_its_default(capsys: pytest.CaptureFixture[str]) -> None:
    """Each argparse action (the generated ones, the --spa switch included)
    has help text with "(default: ...)", then its variable as "[env: ...]"
    when it has a TOML key, and --help prints it; -h and --version, which
    exit at once, have help text."""
    text = _help_text(capsys)
    parser = build_parser()
    actions = [a for a in parser._actions if not _exits(a)]
    assert len(actions) > 60
    keys = option_keys(parser)
    for action in actions:
        name = action.option_strings[-1] if action.option_strings else action.dest
        assert action.help, f"{name} has no help text"
        m = re.search(r"\(default: [^)]+\)( \[env: (SERVERIO_\w+)\])?$", action.help)
        assert m, f"{name}: {action.help!r}"
        key = next((k for k, a in keys.items() if a is action), None)
        wanted = None if key is None else "SERVERIO_" + key.upper().replace("-", "_")
        assert m.group(2) == wanted, name
        assert " ".join(action.help.split()) in text, name
    for action in parser._actions:
        if _exits(action):
            assert action.help and action.help in text, action.option_strings


@pytest.mark.parametrize(
    ("flag", "shown"),
    [
        ("--max-connections", "1024"),
        ("--head-timeout", "10"),
        ("--write-timeout", "30"),
        ("--shutdown-timeout", "10"),
        ("--http2", "on"),
        ("--index", "index.html,index.htm"),
        ("--listing-cache-size", "8MiB"),
        ("--compress-cache-size", "64MiB"),
        ("--file-cache-size", "16MiB"),
        ("--etag", "auto"),
        ("--hidden", "off"),
        ("--cache-control", "none"),
        ("--trusted-proxies", "trust no one"),
        ("-d", "the current directory"),
    ],
)
def test_shown_defaults(flag: str, shown: str) -> None:
    [action] = [a for a in build_parser()._actions if flag in a.option_strings]
    assert action.help is not None and f"(default: {shown})" in action.help


def _parsed_default(opt: Option) -> Any:
    """The shown default read back through the option's own parser."""
    text = opt.shown_default()
    if opt.kind in ("list", "extend"):
        return tuple(text.split(","))
    return opt.parse(text) if opt.parse is not None else text


def test_shown_defaults_are_the_config_defaults(root: Path) -> None:
    """What --help states is what an empty command line gives: each shown
    default, parsed as the option parses its value, is the Config field."""
    cfg = config_from_args(build_parser().parse_args(["-d", str(root)]))
    checked = 0
    for opt in OPTIONS:
        if opt.field is None or opt.default_text is not None or opt.kind == "flag":
            continue  # flags say "off"; default_text describes what None means
        value = cfg.value(opt.field)
        if isinstance(value, bool):
            assert opt.shown_default() == ("on" if value else "off"), opt.flags
        elif value == ():
            assert opt.shown_default() == "none", opt.flags
        else:
            assert _parsed_default(opt) == value, opt.flags
        checked += 1
    assert checked > 35


def test_help_describes_todays_server(capsys: pytest.CaptureFixture[str]) -> None:
    text = _help_text(capsys)
    assert "HTTP/2" in text.split("options:")[0]  # the description
    assert "always speaks HTTP/1.1" not in text
    assert "hash-password" in text
    for title in GROUPS:
        assert f" {title}: " in f" {text}", title


# ---------------------------------------------------------------- declarations


def test_every_settable_config_field_has_exactly_one_declaration() -> None:
    declared = [o.field for o in OPTIONS if o.field is not None] + [t.field for t in TABLES]
    fields = set(FIELD_GROUP)  # every setting: a field of a policy, or of Config itself
    twice = sorted({f for f in declared if declared.count(f) > 1})
    assert not twice, f"declared more than once: {twice}"
    missing = sorted(fields - set(declared) - set(NOT_SETTABLE))
    assert not missing, (
        f"undeclared Config fields: {missing}; declare each on its field, "
        "name: T = serverio.config.setting(default, flags, help, group, ...), or list it in "
        "NOT_SETTABLE"
    )
    assert not set(declared) & set(NOT_SETTABLE)
    assert set(declared) | set(NOT_SETTABLE) == fields
    for opt in OPTIONS:
        assert all(f in fields for f, _ in opt.sets), opt.flags


def test_defaults_come_from_config_never_from_the_declaration() -> None:
    defaults = Config()
    for opt in OPTIONS:
        if opt.field is None:
            continue
        assert repr(opt.default) == "MISSING", opt.flags  # not stated a second time
        if opt.default_factory is None:
            assert opt.field_default == defaults.value(opt.field), opt.flags
        if opt.kind == "flag":
            # A flag moves its field away from the default: on, or off if inverted.
            assert defaults.value(opt.field) is opt.invert, opt.flags
        if opt.kind == "toggle":
            assert isinstance(defaults.value(opt.field), bool)


def test_names_are_unique_and_derived() -> None:
    flags = [f for o in OPTIONS for f in (*o.flags, *(o.switch[:1] if o.switch else ()))]
    assert len(flags) == len(set(flags))
    keys = [o.key for o in OPTIONS if o.key is not None]
    assert len(keys) == len(set(keys))
    assert set(keys) | {"spa"} == set(option_keys(build_parser()))  # "spa": the switch
    envs = [o.env for o in OPTIONS if o.env is not None]
    assert len(envs) == len(set(envs)) == len(keys)
    assert all(re.fullmatch(r"SERVERIO_[A-Z0-9_]+", e) for e in envs)
    by_flag = {f: o for o in OPTIONS for f in o.flags}
    assert by_flag["--max-connections"].env == "SERVERIO_MAX_CONNECTIONS"
    assert by_flag["--port"].env == "SERVERIO_PORT" and by_flag["-b"].key == "bind"
    assert by_flag["--http2"].key == "http2" and by_flag["--no-http2"] is by_flag["--http2"]
    assert by_flag["--config"].env is None and by_flag["--check"].key is None
    for opt in OPTIONS:
        assert opt.group in GROUPS, opt.flags


def test_groups_and_flags_are_the_ones_docs_cli_md_uses() -> None:
    doc = DOCS.read_text()
    headings = {m.strip() for m in re.findall(r"^#+ (.+)$", doc, re.M)}
    assert set(GROUPS) <= headings, set(GROUPS) - headings
    for opt in OPTIONS:
        for flag in (*opt.flags, *(opt.switch[:1] if opt.switch else ())):
            assert re.search(rf"`{re.escape(flag)}\b", doc), f"{flag} is not in docs/cli.md"


# ---------------------------------------------------------------- --http2 / --no-http2


def test_print_config_states_http2_truly(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It printed ``http2 = false`` and ``no-http2 = false`` with HTTP/2 on."""
    assert main(["-d", str(root), "--print-config"]) == 0
    printed = tomllib.loads(capsys.readouterr().out)
    assert printed["http2"] is True and "no-http2" not in printed
    assert main(["-d", str(root), "--no-http2", "--print-config"]) == 0
    printed = tomllib.loads(capsys.readouterr().out)
    assert printed["http2"] is False and "no-http2" not in printed


@pytest.mark.parametrize(
    ("body", "argv", "http2"),
    [
        ("http2 = false\n", [], False),  # ignored before: HTTP/2 stayed on
        ("http2 = true\n", [], True),
        ("no-http2 = true\n", [], False),  # files written before the pair was one key
        ("no-http2 = false\n", [], True),
        ("http2 = false\n", ["--http2"], True),  # the command line wins
        ("http2 = true\n", ["--no-http2"], False),
        ("", ["--no-http2", "--no-http2"], False),
    ],
)
def test_http2_from_file_and_command_line(
    root: Path, tmp_path: Path, body: str, argv: list[str], http2: bool
) -> None:
    conf = tmp_path / "h2.toml"
    conf.write_text(body)
    args = parse_with_config(build_parser(), ["--config", str(conf), "-d", str(root), *argv])
    assert config_from_args(args).h2.http2 is http2


# ---------------------------------------------------------------- --print-config round trip


def _sample_argv(opt: Option) -> list[str]:
    """A command line giving ``opt`` a value other than its default."""
    if opt.kind == "flag":
        return [opt.flags[-1]]
    if opt.kind == "toggle":
        return [next(f for f in opt.flags if f.startswith("--no-"))]
    if opt.choices is not None:
        value = next(c for c in reversed(opt.choices) if c != opt.field_default)
    elif opt.parse is int or getattr(opt.parse, "__name__", "") == "_workers":
        value = "3"
    elif getattr(opt.parse, "__name__", "") in ("_seconds", "float"):
        value = "2.5"
    elif getattr(opt.parse, "__name__", "") == "_bytes":
        value = "3k"
    elif getattr(opt.parse, "__name__", "") == "_cidr":
        value = "10.0.0.1/8"
    elif getattr(opt.parse, "__name__", "") == "_field_name":
        value = "X-Remote-User"  # a request field's name: a token (RFC 9110 §5.1)
    elif getattr(opt.parse, "__name__", "") == "_mount":
        # --mount ROUTE=DIR (written back as [[mount]] tables)
        # (absolute: a file's relative dir is relative to the file)
        return [opt.flags[-1], '/a=/d "b" \\ c', opt.flags[-1], "/z=/y"]
    elif opt.fs_path:
        # Absolute: --print-config writes a path absolute (a file's relative
        # path is relative to the file, the command line's to the cwd).
        value = '/a "b" \\ c'
    else:
        value = 'a "b" \\ c'  # quoting and escapes survive the TOML round trip
    if opt.kind == "positional":
        return [value]
    if opt.kind in ("list", "extend"):
        second = "4" if value == "3" else "192.0.2.7" if value.startswith("10.") else "z,y"
        if opt.spelling.two_token:  # "-H NAME VALUE" is another form: give the one-token one
            value, second = f"X-A: {value}", f"X-B: {second}"
        return [opt.flags[-1], value, opt.flags[-1], second]
    return [opt.flags[-1], value]


_SETTABLE = [o for o in OPTIONS if o.field is not None and o.key is not None]


def _fields(args: argparse.Namespace) -> dict[str, Any]:
    out = config_fields(args)
    del out["rules_source"]  # the file the rules came from: differs by design
    return out


@pytest.mark.parametrize("opt", _SETTABLE, ids=lambda o: o.flags[-1])
def test_each_option_round_trips_through_print_config(tmp_path: Path, opt: Option) -> None:
    """Set one option away from its default, print the configuration, read
    it back with --config: every Config field is the same."""
    argv = _sample_argv(opt)
    args = build_parser().parse_args(argv)
    before = _fields(args)
    assert opt.field is not None and before[opt.field] != Config().value(opt.field), argv
    conf = tmp_path / "printed.toml"
    conf.write_text(dump(build_parser(), args))
    after = _fields(parse_with_config(build_parser(), ["--config", str(conf)]))
    assert after == before, argv


def test_spa_switch_round_trips(tmp_path: Path) -> None:
    for argv in (["--spa"], ["--spa=app/x.html"], ["--spa", "--spa-file", "y.html"]):
        args = build_parser().parse_args(argv)
        conf = tmp_path / "spa.toml"
        conf.write_text(dump(build_parser(), args))
        again = parse_with_config(build_parser(), ["--config", str(conf)])
        assert _fields(again)["spa"] == _fields(args)["spa"] is not None, argv


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--no-http2", "-q", "--spa", "--index", "a.html,b.html", "--index", "c.html"],
        [
            "9001",
            "-b",
            "::1",
            "--max-connections",
            "77",
            "--head-timeout",
            "2.5",
            "--listing-cache-size",
            "1MiB",
            "--no-listing",
            "--no-sendfile",
            "--etag",
            "content",
            "-H",
            "X-A",
            "1",
            "--cors-origin",
            "https://a.example",
            "--trailing-slash",
            "add",
            "--fs-workers",
            "4",
            "--fs-queue",
            "8",
            "--download",
            "*.zip",
            "--access-log",
            "json",
            "--log-level",
            "warning",
            "--watch",
            "--watch-poll",
            "--trusted-proxies",
            "10.0.0.0/8",
            "192.0.2.1",
        ],
    ],
)
def test_print_config_round_trips_to_the_same_config(
    root: Path, tmp_path: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """End to end through main(): validated Configs compare equal."""
    full = [*argv, "-d", str(root)]
    cfg = config_from_args(parse_with_config(build_parser(), full))
    assert main([*full, "--print-config"]) == 0
    conf = tmp_path / "printed.toml"
    conf.write_text(capsys.readouterr().out)
    again = config_from_args(parse_with_config(build_parser(), ["--config", str(conf)]))
    assert again.site.rules_source == str(conf)
    assert again.evolve(rules_source="") == cfg


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["-p", "HTTP/2"], "argument -p/--protocol: invalid choice: 'HTTP/2'"),
        (["--protocol", "HTTP/0.9"], "--protocol"),
        (["--http2", "--no-http2"], "--http2 and --no-http2 contradict each other"),
        (["--no-http2", "--http2"], "--no-http2 and --http2 contradict each other"),
        (["--workers", "many"], "'many' is not a number or 'auto'"),
    ],
)
def test_bad_values_are_one_line_exit_2(
    root: Path, argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        code: object = main([*argv, "-d", str(root)])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    [line] = err.splitlines()
    assert line.startswith("serverio: error: ") and needle in line


def test_protocol_in_a_file_names_the_key(root: Path, tmp_path: Path) -> None:
    from serverio.errors import ConfigError

    conf = tmp_path / "p.toml"
    conf.write_text('protocol = "HTTP/2"\n')
    with pytest.raises(ConfigError, match=r"p\.toml: key 'protocol' must be one of HTTP/1\.0"):
        parse_with_config(build_parser(), ["--config", str(conf)])
