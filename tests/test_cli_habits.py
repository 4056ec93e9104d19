"""The habits of other file servers on serverio's command line (issue 45).

``serverio [DIR] [PORT]`` in either order (miniserve, dufs, http-server,
serve take the directory as the positional argument), ``--port``, ``-p
8080`` as the port while ``-p HTTP/1.0`` keeps http.server's meaning,
``--root``, no abbreviations (``--auth`` is not ``--auth-file``), a
suggestion for a mistyped flag, and ``--auth USER:PASS`` beside
``--auth-file``.
"""

from __future__ import annotations

import base64
import logging
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from serverio.config import Config
from serverio.errors import ConfigError
from serverio.ops.cli import COMMON, build_parser, config_from_args, main
from serverio.ops.completions import SUBCOMMANDS
from serverio.ops.options import OPTIONS
from serverio.ops.tomlconfig import parse_with_config
from serverio.site import service as site_mod
from serverio.site.passwords import hash_password, verify

from .conftest import make_config, memory_connection


def _parsed(argv: list[str]) -> Config:
    return config_from_args(parse_with_config(build_parser(), argv))


def _usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as info:
        main(argv, environ={})
    assert info.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1, err
    return err.strip()


@pytest.fixture
def here(root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The working directory: the parent of ``root`` (named ``www``)."""
    monkeypatch.chdir(root.parent)
    return root


@pytest.mark.parametrize(
    ("argv", "port", "directory"),
    [
        (["www"], 8000, "www"),
        (["./www", "8080"], 8080, "./www"),
        (["8080", "www"], 8080, "www"),
        (["8080"], 8080, None),  # http.server's form
        (["--port", "9000", "www"], 9000, "www"),
        (["-p", "8081"], 8081, None),
        (["-p", "HTTP/1.0", "8082"], 8082, None),
        (["--root", "www"], 8000, "www"),
        (["-d", "www", "7000"], 7000, "www"),
    ],
)
def test_dir_and_port_in_the_habits_of_other_servers(
    here: Path, argv: list[str], port: int, directory: str | None
) -> None:
    cfg = _parsed(argv)
    assert cfg.listeners.port == port
    assert cfg.root == str(here) if directory is not None else cfg.root == os.getcwd()


def test_p_with_a_protocol_keeps_http_servers_meaning(here: Path) -> None:
    args = parse_with_config(build_parser(), ["-p", "HTTP/1.0", "www"])
    assert (args.protocol, args.port, args.directory) == ("HTTP/1.0", 8000, "www")


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["site"], "'site' is neither a port (0-65535) nor an existing directory"),
        (["www/hello.txt"], "'www/hello.txt' is not a directory"),
        (["8080", "9090"], "two ports given: 8080 and 9090"),
        (["www", "outside"], "two directories given: 'www' and 'outside'"),
        (["www", "-d", "outside"], "the directory is given twice: 'www' and -d 'outside'"),
        (["8080", "--port", "9000"], "the port is given twice: 8080 and --port 9000"),
        (["8080", "-p", "9000"], "the port is given twice: 8080 and -p 9000"),
        (["-p", "fast"], "argument -p/--protocol: invalid choice: 'fast' (a port number, or"),
        (["--protocol", "8080"], "invalid choice: '8080' (choose from 'HTTP/1.0', 'HTTP/1.1')"),
        (["--uplaod"], "unrecognized arguments: --uplaod (did you mean --upload?)"),
        (["--auth-f", "x"], "unrecognized arguments: --auth-f (did you mean --auth-file?)"),
        (
            ["--max-conn", "5"],
            "unrecognized arguments: --max-conn (did you mean --max-connections?)",
        ),
        (["--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_usage_errors_say_what_to_type(
    here: Path, argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _usage_error(argv, capsys)
    assert line.startswith("serverio: error: ") and needle in line, line
    if argv == ["--bogus"]:
        assert "did you mean" not in line  # no hint where none helps


def test_no_abbreviations_auth_is_not_auth_file(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--auth alice:pw`` was taken as ``--auth-file alice:pw`` (argparse's
    abbreviations): now it is the inline user, and a prefix is refused."""
    cfg = _parsed(["--auth", "alice:pw"])
    assert cfg.users.auth_file is None
    [line] = cfg.users.auth_users
    user, _, h = line.partition(":")
    assert user == "alice" and verify(h, "pw") and "pw" not in h.split("$")
    line = _usage_error(["--direct", "www"], capsys)
    assert "unrecognized arguments: --direct" in line


def test_help_states_the_positional_rule_and_p() -> None:
    text = " ".join(build_parser().format_help().split())
    assert "usage: serverio" in text and "[DIR] [PORT]" in text
    assert "a number is the port, an existing directory the directory" in text
    assert "-p with a number is the port" in text


# ---------------------------------------------------------------- --auth USER:PASS


def test_auth_inline_is_hashed_once_and_never_printed(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--auth", "alice:s3cret-pw", "--print-config"], environ={}) == 0
    out, err = capsys.readouterr()
    assert "s3cret-pw" not in out + err
    bad = _usage_error(["--auth", "alice"], capsys)
    assert "--auth: must be USER:PASS" in bad


@pytest.mark.parametrize(
    ("extra", "refused"),
    [
        (["-b", "0.0.0.0"], True),
        (["-b", "::"], True),
        (["--listen", "0.0.0.0:0"], True),
        (["-b", "0.0.0.0", "--allow-plain-auth"], False),
        (["-b", "127.0.0.1"], False),
        (["-b", "localhost"], False),
    ],
)
def test_auth_inline_off_loopback_needs_tls_or_allow_plain_auth(
    here: Path, extra: list[str], refused: bool
) -> None:
    argv = ["--auth", "alice:pw", *extra]
    if refused:
        with pytest.raises(ConfigError, match=r"^--auth on .* without TLS: .*--allow-plain-auth"):
            _parsed(argv)
    else:
        assert _parsed(argv).users.auth_users


def test_auth_inline_with_tls_is_allowed(here: Path, cert_files: tuple[Path, Path]) -> None:
    cert, key = cert_files
    cfg = _parsed(
        ["--auth", "a:b", "-b", "0.0.0.0", "--certfile", str(cert), "--keyfile", str(key)]
    )
    assert cfg.users.auth_users and site_mod.plain_auth_warning(cfg) is None


async def test_auth_inline_guards_the_whole_site(root: Path, tmp_path: Path) -> None:
    line = f"alice:{hash_password('pw', 1000)}"
    users = tmp_path / "users"
    users.write_text(f"bob:{hash_password('bob-pw', 1000)}\n")
    for cfg in (
        make_config(root, auth_users=(line,)),
        make_config(root, auth_users=(line,), auth_file=str(users)),  # one rule, both users
    ):
        async with memory_connection(cfg) as (client, _, _):
            assert (await client.get("/hello.txt")).status == 401
            good = base64.b64encode(b"alice:pw").decode()
            ok = await client.get("/hello.txt", f"Authorization: Basic {good}\r\n")
            assert ok.status == 200 and ok.body == b"hello world\n"
            bad = base64.b64encode(b"alice:nope").decode()
            assert (await client.get("/hello.txt", f"Authorization: Basic {bad}\r\n")).status == 401
            if cfg.users.auth_file is not None:
                bob = base64.b64encode(b"bob:bob-pw").decode()
                r = await client.get("/hello.txt", f"Authorization: Basic {bob}\r\n")
                assert r.status == 200


def test_auth_inline_satisfies_the_write_rule(here: Path) -> None:
    """--upload off loopback needs auth over the writable paths: --auth is it."""
    argv = ["--upload", "-b", "0.0.0.0", "--allow-plain-auth"]
    with pytest.raises(ConfigError, match="under no"):
        _parsed(argv)
    assert _parsed([*argv, "--auth", "a:b"]).uploads.upload


# ---------------------------------------------------------------- the plain-HTTP warning, once


def test_compiling_the_rules_warns_no_more(
    root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    users = tmp_path / "users"
    users.write_text(f"alice:{hash_password('pw', 1000)}\n")
    cfg = make_config(root, auth_file=str(users), host="0.0.0.0")
    with caplog.at_level(logging.WARNING, logger="serverio"):
        site_mod.load_site(cfg)  # the check before binding, then each server's compile
        site_mod.load_site(cfg)
    assert caplog.text == ""
    assert site_mod.plain_auth_warning(cfg) == (
        "basic authentication over plain HTTP on 0.0.0.0: passwords cross the network readable"
    )
    assert site_mod.plain_auth_warning(cfg.evolve(host="127.0.0.1")) is None
    assert site_mod.plain_auth_warning(make_config(root, host="0.0.0.0")) is None


NETNS = ["unshare", "-rn", "sh", "-c", 'ip link set lo up && exec "$@"', "sh"]


def _netns() -> list[str]:
    """A network namespace of its own: 0.0.0.0 there reaches nothing else."""
    if not (shutil.which("unshare") and shutil.which("ip")):
        pytest.skip("needs unshare and ip (a network namespace for a 0.0.0.0 bind)")
    probe = subprocess.run([*NETNS, "true"], capture_output=True, timeout=30, check=False)
    if probe.returncode != 0:
        pytest.skip("no unprivileged network namespace here")
    return NETNS


@pytest.mark.slow
def test_the_plain_http_auth_warning_is_printed_once(root: Path, tmp_path: Path) -> None:
    users = tmp_path / "users"
    users.write_text(f"alice:{hash_password('pw', 1000)}\n")
    argv = ["0", "-b", "0.0.0.0", "-d", str(root), "--auth-file", str(users), "-q"]
    proc = subprocess.Popen(
        [*_netns(), sys.executable, "-m", "serverio", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("Serving ")
        proc.send_signal(signal.SIGINT)  # unshare execs: the signal reaches python
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert err.count("plain HTTP") == 1, err
    assert "serverio: WARNING: basic authentication over plain HTTP on 0.0.0.0" in err


# ---------------------------------------------------------------- --help and --help-all


def _page(flag: str, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as info:
        main([flag], environ={})
    out, err = capsys.readouterr()
    assert info.value.code == 0 and err == ""
    return out


def test_help_is_a_short_page_that_says_where_the_rest_is(
    capsys: pytest.CaptureFixture[str],
) -> None:
    page = _page("--help", capsys)
    lines = page.splitlines()
    assert lines[0] == "usage: serverio [DIR] [PORT] [options]" and lines[1] == ""
    assert len(lines) <= 80, len(lines)  # it was 455, with 44 lines of usage
    flat = " ".join(page.split())
    for flag in COMMON:
        assert f" {flag}" in flat, flag
    assert 10 <= len(COMMON) <= 20
    for sub in SUBCOMMANDS:  # hash-password, completions, manpage
        assert f"serverio {sub.name}" in page, sub.name
    assert "serverio --help-all" in flat and "serverio manpage | man -l -" in flat
    assert "docs/cli.md" in flat
    assert "(default:" not in page  # the long page states those
    assert _page("-h", capsys) == page


def test_help_all_is_generated_from_the_declarations(capsys: pytest.CaptureFixture[str]) -> None:
    page = _page("--help-all", capsys)
    assert page == build_parser().format_help()
    assert page.splitlines()[0] == "usage: serverio [DIR] [PORT] [options]"
    flat = " ".join(page.split())
    for opt in OPTIONS:
        for flag in opt.flags:
            assert flag in flat, flag
        text = opt.help if opt.kind == "version" else opt.full_help()
        assert " ".join(text.split()) in flat, opt.flags
    for sub in SUBCOMMANDS:
        assert f"serverio {sub.name}" in page, sub.name
