"""Content options on the command line: parsing, defaults, one-line errors."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from serverio.config import Config
from serverio.ops.cli import build_parser, config_from_args, main


def parse(root: Path, *args: str) -> Config:
    return config_from_args(build_parser().parse_args([*args, "-d", str(root)]))


def test_defaults(root: Path) -> None:
    cfg = parse(root)
    assert cfg.content.listing and cfg.content.listing_max_entries == 10_000
    assert cfg.content.download == () and cfg.content.spa is None
    assert cfg.content.precompressed and not cfg.content.digest
    assert cfg.content.compress_max_size == 8 * 1024 * 1024
    assert cfg.content.compress_cache_size == 64 * 1024 * 1024


def test_all_options(root: Path) -> None:
    cfg = parse(
        root,
        "--no-listing",
        "--listing-max-entries",
        "50",
        "--download",
        "*.zip",
        "--download",
        "releases/*",
        "--spa",
        "--no-precompressed",
        "--compress-max-size",
        "512k",
        "--compress-cache-size",
        "16MiB",
        "--digest",
    )
    assert not cfg.content.listing and cfg.content.listing_max_entries == 50
    assert cfg.content.download == ("*.zip", "releases/*") and cfg.content.spa == "index.html"
    assert not cfg.content.precompressed and cfg.content.digest
    assert (
        cfg.content.compress_max_size == 512 * 1024 and cfg.content.compress_cache_size == 16 << 20
    )


@pytest.mark.parametrize(
    ("args", "spa"),
    [
        (["--spa"], "index.html"),
        (["--spa-file", "app/shell.html"], "app/shell.html"),
        (["--spa", "--spa-file", "app/shell.html"], "app/shell.html"),
        (["--spa=x.html"], "x.html"),
        (["--spa-file=x.html"], "x.html"),
        ([], None),
    ],
)
def test_spa_file(root: Path, args: list[str], spa: str | None) -> None:
    assert parse(root, *args).content.spa == spa


def _flag_like_options() -> list[str]:
    """Every option that may be given without a value: flags, and any option
    whose value is optional."""
    out: list[str] = []
    for action in build_parser()._actions:
        if not action.option_strings or isinstance(
            action, argparse._HelpAction | argparse._VersionAction
        ):
            continue
        if action.nargs in (0, "?", "*"):
            out.extend(action.option_strings)
    return out


@pytest.mark.parametrize("option", _flag_like_options())
def test_a_number_after_any_valueless_option_is_the_port(root: Path, option: str) -> None:
    """``serverio --spa 8080`` serves on port 8080: no option swallows it."""
    args = build_parser().parse_args([option, "8080", "-d", str(root)])
    assert args.port == 8080
    args = build_parser().parse_args(["-d", str(root), option, "8080"])
    assert args.port == 8080


def test_valueless_options_are_all_covered() -> None:
    options = _flag_like_options()
    assert "--spa" in options and "--hidden" in options and "--digest" in options
    assert "--spa-file" not in options  # it always takes its value


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--listing-max-entries", "0"], "--listing-max-entries"),
        (["--listing-max-entries", "99999999"], "absurd"),
        (["--compress-max-size", "-1"], "--compress-max-size"),
        (["--compress-max-size", "12XB"], "is not a size"),
        (["--compress-cache-size", "lots"], "is not a size"),
        (["--spa=../index.html"], "--spa"),
        (["--spa=/etc/passwd"], "--spa"),
        (["--spa=.hidden/index.html"], "--spa"),
        (["--spa=a//b"], "--spa"),
        (["--download", ""], "--download"),
        (["--download", "/abs/*"], "--download"),
    ],
)
def test_invalid_values_exit_2_one_line(
    root: Path, args: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # main() returns 2 for a ConfigError; argparse type errors exit(2) itself.
    try:
        code: object = main([*args, "-d", str(root)])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("serverio: error:"), err
    assert needle in lines[0]


def test_spa_then_port_in_the_effective_configuration(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import tomllib

    assert main(["--spa", "8080", "-d", str(root), "--print-config"]) == 0
    printed = tomllib.loads(capsys.readouterr().out)
    assert printed["port"] == 8080 and printed["spa"] is True and "spa-file" not in printed
    conf = tmp_path / "spa.toml"
    conf.write_text(f'directory = "{root}"\nspa-file = "app/shell.html"\n')
    assert main(["--config", str(conf), "--print-config"]) == 0
    printed = tomllib.loads(capsys.readouterr().out)
    assert printed["spa-file"] == "app/shell.html" and printed["port"] == 8000
