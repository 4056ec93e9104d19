"""Messages that say what happened (issue 45): the exit summary, the
refusals, --print-config, the TOML file's paths, header spelling, the
proxy's upstream failures, --open's thread.

(``draining 0 responses`` no longer printed, and a 404 counted as a
client error: tests/test_cli.py::test_serving_line_and_sigterm_exit_0; the
plain-HTTP auth warning once: tests/test_cli_habits.py.)
"""

from __future__ import annotations

import logging
import re
import socket
import threading
import webbrowser
from pathlib import Path

import pytest
import trio

from serverio.errors import ConfigError
from serverio.ops import run
from serverio.ops.cli import build_parser, config_from_args, main
from serverio.ops.run import summary_line
from serverio.ops.tomlconfig import parse_with_config

from .conftest import make_config, memory_connection

DOCS = Path(__file__).resolve().parent.parent / "docs" / "cli.md"


def test_the_exit_summary_counts_client_and_server_errors_apart() -> None:
    stats = {"completed": 7, "client_errors": 3, "server_errors": 1, "bytes_sent": 2048}
    assert summary_line(stats, 9.25) == (
        "serverio: stopped: 7 requests, 3 client errors (4xx), 1 server error (5xx), "
        "2.0 KiB sent, up 9.2 s"
    )
    one = {"completed": 1, "client_errors": 1, "server_errors": 0}
    assert "1 request, 1 client error (4xx), 0 server errors (5xx)" in summary_line(one, 1)


def test_docs_cli_md_says_a_port_in_use_exits_3() -> None:
    intro = DOCS.read_text().split("## Where and what")[0]
    flat = " ".join(intro.split())
    assert "a port in use, an unknown option" not in flat  # listed among the 2s before
    assert "a port already in use prints one such line too and exits with status 3" in flat
    table = DOCS.read_text().split("## Exit status", 1)[1]
    assert re.search(r"^\| `3` \|", table, re.M), "the exit-status table lists 3"


@pytest.mark.parametrize(("flag", "named"), [("--webdav", "--webdav"), ("--upload", "--upload")])
def test_the_write_refusal_names_the_flag_given(
    root: Path, monkeypatch: pytest.MonkeyPatch, flag: str, named: str
) -> None:
    monkeypatch.chdir(root)
    args = parse_with_config(build_parser(), [flag, "-b", "0.0.0.0"])
    with pytest.raises(ConfigError, match=rf"^{named} on 0\.0\.0\.0: writable path /\*\* "):
        config_from_args(args)


def test_print_config_says_spa_when_spa_file_is_given(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["-d", str(root), "--spa-file", "index.html", "--print-config"], environ={}) == 0
    printed = capsys.readouterr().out
    assert "\nspa = true\n" in printed and '\nspa-file = "index.html"\n' in printed
    conf = tmp_path / "printed.toml"
    conf.write_text(printed)
    again = config_from_args(parse_with_config(build_parser(), ["--config", str(conf)]))
    assert again.content.spa == "index.html"
    assert main(["-d", str(root), "--print-config"], environ={}) == 0
    assert "\nspa = false\n" in capsys.readouterr().out


# ---------------------------------------------------------------- TOML paths


def test_toml_paths_are_relative_to_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``directory`` was relative to the working directory while ``[[mount]]
    dir`` and ``users-file`` were relative to the file: all are the file's now."""
    site = tmp_path / "site"
    (site / "public").mkdir(parents=True)
    (site / "extra").mkdir()
    conf = site / "serverio.toml"
    conf.write_text('directory = "public"\n[[mount]]\nroute = "/x"\ndir = "extra"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cfg = config_from_args(parse_with_config(build_parser(), ["--config", "../site/serverio.toml"]))
    assert cfg.root == str(site / "public")
    assert cfg.files.mounts == (("/x", str(site / "extra")),)
    assert capsys.readouterr().err == ""
    # --print-config writes it absolute: the printed file reads back the same anywhere.
    assert main(["--config", str(conf), "--print-config"], environ={}) == 0
    assert f'\ndirectory = "{site / "public"}"\n' in capsys.readouterr().out


def test_a_file_written_for_the_old_rule_still_works_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "public").mkdir()
    (tmp_path / "conf").mkdir()
    conf = tmp_path / "conf" / "old.toml"
    conf.write_text('directory = "public"\n')
    monkeypatch.chdir(tmp_path)
    args = parse_with_config(build_parser(), ["--config", str(conf)])
    assert config_from_args(args).root == str(tmp_path / "public")
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # once, though the file is read twice
    assert err.startswith(f"serverio: WARNING: {conf}: key 'directory' = 'public' is read ")
    assert "relative to the file" in err and "relative to the working directory" in err


# ---------------------------------------------------------------- header spelling


async def test_header_names_keep_the_case_given_over_http11(root: Path) -> None:
    rules = (("/hello.txt", (("X-Rule-Name", "2"),), ()),)
    cfg = make_config(root, headers=("X-Test: 1", "x-lower: 3"), header_rules=rules)
    async with memory_connection(cfg) as (client, _, _):
        r = await client.get("/hello.txt")
    names = [n for n, _ in r.raw_headers]
    assert b"X-Test" in names and b"X-Rule-Name" in names and b"x-lower" in names
    assert b"x-test" not in names
    assert b"X-Content-Type-Options" in names  # serverio's own spelling stays


# ---------------------------------------------------------------- proxy failures


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port: int = s.getsockname()[1]
    s.close()  # nothing listens there now: connecting is refused
    return port


async def test_a_refusing_upstream_is_one_line_per_second_per_upstream(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = _closed_port(), _closed_port()
    cfg = make_config(root, proxy=(f"/a=http://127.0.0.1:{a}", f"/b=http://127.0.0.1:{b}"))
    with caplog.at_level(logging.WARNING, logger="serverio"):
        async with memory_connection(cfg) as (client, _, _):
            for path in ("/a/x", "/a/y", "/b/x", "/a/z", "/b/y"):
                assert (await client.get(path)).status == 502
    lines = [r.getMessage() for r in caplog.records if "upstream" in r.getMessage()]
    assert lines == [
        f"--proxy /a: upstream http://127.0.0.1:{a}: connect: {_reason(lines[0])} (502)",
        f"--proxy /b: upstream http://127.0.0.1:{b}: connect: {_reason(lines[1])} (502)",
    ], lines
    assert "refused" in lines[0].lower()


def _reason(line: str) -> str:
    return line.split(": connect: ", 1)[1].removesuffix(" (502)")


async def test_the_next_line_about_an_upstream_comes_after_the_interval(
    root: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from serverio.proxy import service as proxy_service

    monkeypatch.setattr(proxy_service, "_REPORT_INTERVAL", 0.3)  # 1 s in use
    port = _closed_port()
    cfg = make_config(root, proxy=(f"/a=http://127.0.0.1:{port}",))
    with caplog.at_level(logging.WARNING, logger="serverio"):
        async with memory_connection(cfg) as (client, _, _):
            for _ in range(3):
                assert (await client.get("/a/")).status == 502
            await trio.sleep(0.4)
            assert (await client.get("/a/")).status == 502
    assert sum("upstream" in r.getMessage() for r in caplog.records) == 2


# ---------------------------------------------------------------- --open


async def test_open_runs_in_a_named_bounded_pool_not_the_default_limiter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[tuple[str, int]] = []
    default = trio.to_thread.current_default_thread_limiter()

    def fake_open(url: str, *args: object, **kwargs: object) -> bool:
        borrowed = trio.from_thread.run_sync(lambda: default.borrowed_tokens)
        seen.append((threading.current_thread().name, borrowed))
        return True

    monkeypatch.setattr(webbrowser, "open", fake_open)
    await run.browse("http://127.0.0.1:1/")
    assert seen == [("serverio browser pool", 0)]


def test_no_thread_offload_outside_the_blocking_module() -> None:
    """The project's rule: trio.to_thread only in concurrency/blocking.py."""
    package = Path(run.__file__).resolve().parent.parent
    users = sorted(
        str(p.relative_to(package))
        for p in package.rglob("*.py")
        if "to_thread" in p.read_text(encoding="utf-8")
    )
    assert users == ["concurrency/blocking.py"], users
