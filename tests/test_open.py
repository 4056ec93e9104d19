"""``--open``: the first URL in the browser once listening; off by default.
webbrowser.open is always replaced here: no test starts a browser."""

from __future__ import annotations

import webbrowser
from pathlib import Path

import pytest
import trio

from serverio import Server
from serverio.ops import run
from serverio.ops.run import browser_url, run_server

from .conftest import make_config, wait_until


async def _serve(root: Path, monkeypatch: pytest.MonkeyPatch, **over: object) -> list[str]:
    opened: list[str] = []

    def fake_open(url: str, *args: object, **kwargs: object) -> bool:
        opened.append(url)
        return True

    monkeypatch.setattr(webbrowser, "open", fake_open)
    cfg = make_config(root).evolve(host="127.0.0.1", port=0, **over)

    async def stop(srv: Server) -> None:
        if cfg.live.open_browser:
            await wait_until(lambda: bool(opened))
        else:
            await trio.sleep(0.2)  # what --open would have done by now
        srv.shutdown()

    with trio.fail_after(10):
        assert await run_server(cfg, admin=False, extra=[stop]) == 0
    return opened


async def test_open_opens_the_first_url_once(
    root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    opened = await _serve(root, monkeypatch, open_browser=True)
    out = capsys.readouterr().out
    url = out.split(" at ", 1)[1].split()[0]
    assert opened == [url] and url.startswith("http://127.0.0.1:")


async def test_open_is_off_by_default(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert await _serve(root, monkeypatch) == []


async def test_open_without_a_browser_says_so(
    root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(webbrowser, "open", lambda url, *a, **k: False)
    await run.browse("http://127.0.0.1:1/")
    assert capsys.readouterr().err == (
        "serverio: --open: no web browser found for http://127.0.0.1:1/\n"
    )


def test_a_wildcard_bind_opens_localhost() -> None:
    assert browser_url("http", "0.0.0.0", 8000) == "http://localhost:8000/"
    assert browser_url("https", "::", 8443) == "https://localhost:8443/"
    assert browser_url("http", "::1", 80) == "http://[::1]:80/"


def test_open_flag_parses() -> None:
    from serverio.ops.cli import build_parser, config_from_args

    parser = build_parser()
    assert config_from_args(parser.parse_args(["-d", ".", "--open"])).live.open_browser
    assert not config_from_args(parser.parse_args(["-d", "."])).live.open_browser
