"""Active content under writable paths (issue 41 item 9; serverio.http.active).

With writes on, an HTML, SVG, XML or JavaScript file under a writable
path is served with ``Content-Security-Policy: sandbox`` (the default),
as an attachment, or inline, as ``--upload-active`` or its
``[[writable]]`` table's ``active`` says: on HTTP/1.1 and HTTP/2, to GET
and HEAD, from the warm-file cache and compressed.  A read-only server
sends nothing new.
"""

from __future__ import annotations

import argparse
import tomllib
from pathlib import Path

import pytest

from serverio.config import Config
from serverio.errors import ConfigError
from serverio.fs import prepare
from serverio.http.active import active_mode, is_active
from serverio.ops.cli import build_parser, config_from_args
from serverio.ops.tomlconfig import parse_with_config
from serverio.site.rules import compile_writable

from .conftest import make_config, memory_connection
from .h2client import h2_memory
from .test_cli import run_cli
from .test_upload import put, request, upload_config

SVG = b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(document.cookie)</script></svg>'


@pytest.fixture
def active_root(root: Path) -> Path:
    (root / "up").mkdir()
    for where in (root, root / "up"):
        (where / "page.html").write_bytes(b"<script>steal()</script>")
        (where / "pic.svg").write_bytes(SVG)
        (where / "app.js").write_bytes(b"alert(1)\n")
        (where / "doc.xhtml").write_bytes(b"<html xmlns='http://www.w3.org/1999/xhtml'/>")
        (where / "feed.rss").write_bytes(b"<rss/>")
        (where / "notes.txt").write_bytes(b"plain\n")
        (where / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    return root


@pytest.mark.parametrize(
    ("ctype", "active"),
    [
        ("text/html; charset=utf-8", True),
        ("application/xhtml+xml", True),
        ("image/svg+xml", True),
        ("text/xml; charset=utf-8", True),
        ("application/xml", True),
        ("application/rss+xml", True),
        ("application/atom+xml", True),
        ("text/javascript; charset=utf-8", True),
        ("application/javascript", True),
        ("TEXT/HTML", True),
        ("text/plain; charset=utf-8", False),
        ("text/css; charset=utf-8", False),
        ("application/json", False),
        ("image/png", False),
        ("application/pdf", False),
        ("application/octet-stream", False),
    ],
)
def test_the_active_types(ctype: str, active: bool) -> None:
    assert is_active(ctype) is active


def test_the_mode_of_a_path(root: Path) -> None:
    assert active_mode(make_config(root), "a.html") == "inline"  # read-only
    assert active_mode(upload_config(root), "a/b.html") == "sandbox"  # the whole root
    assert active_mode(upload_config(root, upload_active="attachment"), "a.html") == "attachment"
    tables = (
        ("/ro/**", ("delete",)),
        ("/up/**", ("put",), "attachment"),
        ("/dav/**", ("put", "delete"), "inline"),
        ("/**", ("put",)),
    )
    cfg = upload_config(root, writable=tables[:3])
    assert active_mode(cfg, "ro/a.html") == "inline"  # no put: nothing is uploaded there
    assert active_mode(cfg, "up/a.html") == "attachment"
    assert active_mode(cfg, "UP/a.html") == "attachment"  # a case-insensitive root's spelling
    assert active_mode(cfg, "upx/a.html") == "inline"  # segment boundaries
    assert active_mode(cfg, "dav/x/a.html") == "inline"
    assert active_mode(cfg, "a.html") == "inline"  # under no table
    everywhere = upload_config(root, writable=tables, upload_active="sandbox")
    assert active_mode(everywhere, "a.html") == "sandbox"  # /** with the default
    assert active_mode(everywhere, "ro/a.html") == "sandbox"  # the first table with put


async def test_h1_with_upload_active_files_get_csp_sandbox_on_get_and_head(
    active_root: Path,
) -> None:
    async with memory_connection(upload_config(active_root)) as (client, _srv, _):
        for name in ("page.html", "pic.svg", "app.js", "doc.xhtml", "feed.rss", "up/page.html"):
            for method in ("GET", "HEAD"):
                r = await client.get("/" + name, method=method)
                assert r.status == 200, name
                assert r.header("content-security-policy") == "sandbox", (name, method)
                assert r.header("content-disposition") is None
        for name in ("notes.txt", "photo.png"):
            r = await client.get("/" + name)
            assert r.status == 200 and r.header("content-security-policy") is None, name
        # The index file of a directory is the file served.
        assert (await client.get("/")).header("content-security-policy") == "sandbox"
        # ?download keeps its attachment, and the sandbox.
        r = await client.get("/page.html?download")
        assert (
            r.header(
                "content-disposition",
            )
            is not None
        )
        assert r.header("content-security-policy") == "sandbox"


async def test_h1_a_page_uploaded_then_fetched_is_sandboxed(root: Path) -> None:
    async with memory_connection(upload_config(root)) as (client, _srv, _):
        assert (await request(client, put("/evil.svg", SVG)))[0] == 201
        r = await client.get("/evil.svg")
        assert r.body == SVG and r.header("content-security-policy") == "sandbox"


async def test_h1_a_read_only_server_adds_nothing(active_root: Path) -> None:
    async with memory_connection(make_config(active_root)) as (client, _srv, _):
        for name in ("page.html", "pic.svg", "up/app.js"):
            r = await client.get("/" + name)
            assert r.status == 200 and r.header("content-security-policy") is None
            assert r.header("content-disposition") is None


async def test_h1_writable_tables_decide_per_path_with_their_own_mode(active_root: Path) -> None:
    cfg = upload_config(active_root, writable=(("/up/**", ("put",), "attachment"),))
    async with memory_connection(cfg) as (client, _srv, _):
        r = await client.get("/up/page.html")
        assert r.header("content-disposition") == (
            "attachment; filename=\"page.html\"; filename*=UTF-8''page.html"
        )
        assert r.header("content-security-policy") is None
        r = await client.get("/page.html")  # not writable: as before
        assert r.header("content-disposition") is None
        assert r.header("content-security-policy") is None
    cfg = upload_config(active_root, writable=(("/up/**", ("put",), "inline"),))
    async with memory_connection(cfg) as (client, _srv, _):
        r = await client.get("/up/page.html")
        assert r.header("content-disposition") is None
        assert r.header("content-security-policy") is None
    cfg = upload_config(active_root, writable=(("/up/**", ("put",)),), upload_active="attachment")
    async with memory_connection(cfg) as (client, _srv, _):
        r = await client.get("/up/pic.svg")
        assert r.header("content-disposition") is not None


async def test_h1_the_warm_cache_and_compression_keep_the_field(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(prepare, "settled", lambda st, now: True)
    (root / "big.html").write_bytes(b"<p>" + b"x" * 4000 + b"</p>")
    cfg = upload_config(root, fs_workers=1, fs_queue=4, fs_cache_valid=60.0)
    async with memory_connection(cfg) as (client, srv, _):
        for _ in range(3):  # the second and third come from the warm-file cache
            r = await client.get("/index.html")
            assert r.header("content-security-policy") == "sandbox"
        assert srv.files.get("index.html") is not None
        r = await client.get("/big.html", "Accept-Encoding: gzip\r\n")
        assert r.header("content-encoding") == "gzip"
        assert r.header("content-security-policy") == "sandbox"


async def test_h2_active_files_get_csp_sandbox_on_get_and_head(active_root: Path) -> None:
    async with h2_memory(upload_config(active_root)) as (client, _srv, _):
        for method in ("GET", "HEAD"):
            r = await client.get("/pic.svg", method=method)
            assert r.status == 200 and r.headers["content-security-policy"] == "sandbox"
        r = await client.get("/notes.txt")
        assert "content-security-policy" not in r.headers


# ------------------------------------------------------------ configuration


def test_bad_modes_are_one_line_errors() -> None:
    with pytest.raises(ConfigError, match="--upload-active must be one of sandbox, attachment"):
        Config.of(upload=True, upload_active="off").validate()
    with pytest.raises(ConfigError, match=r"^s\.toml: \[\[writable\]\] #1 key 'active' must"):
        compile_writable([("/up/**", ("put",), "yes")], "s.toml")


def test_the_flag_and_the_table_key_load_and_print(root: Path, tmp_path: Path) -> None:
    args: argparse.Namespace = parse_with_config(
        build_parser(), ["-d", str(root), "--upload", "--upload-active", "attachment"]
    )
    assert config_from_args(args).uploads.upload_active == "attachment"
    conf = tmp_path / "site.toml"
    conf.write_text(
        f'directory = "{root}"\nupload = true\n'
        '[[writable]]\npath = "/up/**"\nallow = ["put"]\nactive = "inline"\n'
        '[[writable]]\npath = "/drop/**"\nallow = ["put"]\n'
    )
    cfg = config_from_args(parse_with_config(build_parser(), ["--config", str(conf)]))
    assert cfg.site.writable == (("/up/**", ("put",), "inline"), ("/drop/**", ("put",)))
    r = run_cli("--config", str(conf), "--print-config")
    assert r.returncode == 0, r.stderr
    printed = tomllib.loads(r.stdout)
    assert printed["upload-active"] == "sandbox"
    assert printed["writable"] == [
        {"path": "/up/**", "allow": ["put"], "active": "inline"},
        {"path": "/drop/**", "allow": ["put"]},
    ]
    bad = tmp_path / "bad.toml"
    bad.write_text('upload = true\n[[writable]]\npath = "/up/**"\nactive = 1\n')
    r = run_cli("--config", str(bad), "-d", str(root), "--print-config")
    assert r.returncode == 2 and "key 'active' must be a string" in r.stderr
