"""CORS preflights for writes (``--cors-writes``, serverio.site.rules
preflight_fields): answered with the write methods only where the path is
writable and only for the listed origins; the CSRF rule of the upload
form accepts those origins; ``--cors-writes`` without a list is refused.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from serverio.errors import ConfigError
from serverio.site.rules import compile_rules

from .conftest import memory_connection
from .test_upload import request, upload_config
from .test_upload_form import BOUNDARY, form_body

APP = "https://app.example"


def preflight(path: str, method: str, origin: str = APP) -> str:
    return (
        f"Origin: {origin}\r\nAccess-Control-Request-Method: {method}\r\n"
        "Access-Control-Request-Headers: content-type\r\n"
    )


async def test_preflights_allow_writes_where_writable(root: Path) -> None:
    (root / "up").mkdir()
    cfg = upload_config(
        root,
        cors_origins=(APP,),
        cors_writes=True,
        writable=(("/up/**", ("put",)), ("/noindex/**", ("put", "delete"))),
    )
    async with memory_connection(cfg) as (client, _srv, _):
        r = await client.get("/up/a.txt", preflight("/up/a.txt", "PUT"), method="OPTIONS")
        assert r.status == 204
        assert r.header("access-control-allow-methods") == "GET, HEAD, OPTIONS, PUT, POST"
        assert r.header("access-control-allow-origin") == APP
        r = await client.get("/noindex/a.txt", preflight("/", "DELETE"), method="OPTIONS")
        assert r.header("access-control-allow-methods") == "GET, HEAD, OPTIONS, PUT, POST, DELETE"
        r = await client.get("/hello.txt", preflight("/", "PUT"), method="OPTIONS")
        assert r.header("access-control-allow-methods") == "GET, HEAD, OPTIONS"  # not writable
        r = await client.get(
            "/up/a.txt", preflight("/", "PUT", "https://evil.example"), method="OPTIONS"
        )
        assert r.header("access-control-allow-methods") is None  # not a listed origin


async def test_without_cors_writes_preflights_stay_read_only(root: Path) -> None:
    cfg = upload_config(root, cors_origins=(APP,))
    async with memory_connection(cfg) as (client, _srv, _):
        r = await client.get("/a.txt", preflight("/a.txt", "PUT"), method="OPTIONS")
        assert r.header("access-control-allow-methods") == "GET, HEAD, OPTIONS"


@pytest.mark.parametrize(("writes", "status"), [(True, 303), (False, 403)])
async def test_the_csrf_rule_accepts_the_listed_origins_with_cors_writes(
    root: Path, writes: bool, status: int
) -> None:
    body = form_body(("file", "x.txt", b"x"))
    head = (
        f"POST / HTTP/1.1\r\nHost: t\r\nOrigin: {APP}\r\n"
        f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    cfg = upload_config(root, cors_origins=(APP,), cors_writes=writes)
    async with memory_connection(cfg) as (client, _srv, _):
        got, hs, _ = await request(client, head + body)
    assert got == status
    assert (root / "x.txt").exists() is writes
    if writes:
        assert hs["access-control-allow-origin"] == APP  # the answer carries CORS too


def test_cors_writes_needs_a_list_of_origins() -> None:
    with pytest.raises(ConfigError, match="--cors-writes needs --cors-origin"):
        compile_rules(cors=True, cors_writes=True)
    with pytest.raises(ConfigError, match="--cors-writes needs --cors-origin"):
        compile_rules(cors_writes=True)
