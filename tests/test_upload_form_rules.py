"""Each file of an upload form is decided by its own rule (issue 41 item 3).

The write step admits a form ``POST`` on the directory; every file of it
is then asked of the access hook on the path it lands at (``Kind.WRITE``,
``"put"``), as a ``PUT`` of that file would be: ``[[auth]] path =
"/incoming/*.html"`` protects ``index.html`` from the form as it does from
``PUT``, ``[[writable]]`` tables apply per file, and a refusal comes before
a byte of that file is written.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from serverio.config import Config
from serverio.site.passwords import hash_password

from .conftest import memory_connection
from .h2client import h2_memory
from .test_body_seam import send_body
from .test_upload import put, request, temps, upload_config
from .test_upload_form import form_body
from .test_upload_form_wire import CTYPE, h1_post

PASSWORD = "wonderland"
GOOD = "Authorization: Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode() + "\r\n"
ORIGINAL = b"<h1>the real index</h1>\n"


@pytest.fixture
def incoming(root: Path, tmp_path: Path) -> Config:
    (root / "incoming").mkdir()
    (root / "incoming" / "index.html").write_bytes(ORIGINAL)
    users = tmp_path / "users"
    users.write_text(f"alice:{hash_password(PASSWORD, 1000)}\n")
    return upload_config(root, on_duplicate="overwrite", auth=(("/incoming/*.html", str(users)),))


async def test_h1_a_form_cannot_replace_a_file_its_own_rule_protects(
    root: Path, incoming: Config
) -> None:
    target = root / "incoming" / "index.html"
    evil = form_body(("file", "index.html", b"<script>steal()</script>"))
    async with memory_connection(incoming) as (client, srv, _):
        # The PUT of the same file: 401 (the rule covers it).
        assert (await request(client, put("/incoming/index.html", b"x")))[0] == 401
    async with memory_connection(incoming) as (client, srv, _):
        status, hs, _ = await request(client, h1_post("/incoming/", evil))
        assert status == 401 and hs["www-authenticate"].startswith("Basic")
        assert srv.stats.writes.files == 0 and srv.stats.writes.aborted == 1
    assert target.read_bytes() == ORIGINAL and temps(root) == []
    # A file no rule covers still goes in; one before the refused file stays
    # (a form is not atomic, each file is), the refused one is not written.
    mixed = form_body(("file", "notes.txt", b"fine"), ("file", "index.html", b"evil"))
    async with memory_connection(incoming) as (client, _srv, _):
        status, _, _ = await request(client, h1_post("/incoming/", mixed))
        assert status == 401
    assert (root / "incoming" / "notes.txt").read_bytes() == b"fine"
    assert target.read_bytes() == ORIGINAL and temps(root) == []
    # With alice's credentials the form may replace it.
    async with memory_connection(incoming) as (client, _srv, _):
        status, _, _ = await request(client, h1_post("/incoming/", evil, GOOD))
        assert status == 303
    assert target.read_bytes() == b"<script>steal()</script>"


async def test_h1_the_rule_of_the_name_the_duplicate_policy_picks(
    root: Path, tmp_path: Path
) -> None:
    """--on-duplicate rename: the file lands at ``page (1).html``; that
    path's rule decides (here the same glob covers it)."""
    (root / "incoming").mkdir()
    (root / "incoming" / "page.html").write_bytes(ORIGINAL)
    users = tmp_path / "users"
    users.write_text(f"alice:{hash_password(PASSWORD, 1000)}\n")
    cfg = upload_config(root, on_duplicate="rename", auth=(("/incoming/*.html", str(users)),))
    async with memory_connection(cfg) as (client, _srv, _):
        status, _, _ = await request(
            client, h1_post("/incoming/", form_body(("file", "page.html", b"x")))
        )
        assert status == 401
    assert sorted(p.name for p in (root / "incoming").iterdir()) == ["page.html"]


async def test_h1_with_writable_tables_each_file_still_meets_its_auth_rule(
    root: Path, tmp_path: Path
) -> None:
    """[[writable]] admits the directory; the file's [[auth]] glob is its own."""
    (root / "drop").mkdir()
    users = tmp_path / "users"
    users.write_text(f"alice:{hash_password(PASSWORD, 1000)}\n")
    cfg = upload_config(
        root, writable=(("/drop/**", ("put",)),), auth=(("/drop/*.html", str(users)),)
    )
    body = form_body(("file", "a.txt", b"a"), ("file", "b.html", b"b"))
    async with memory_connection(cfg) as (client, _srv, _):
        status, _, _ = await request(client, h1_post("/drop/", body, ""))
        assert status == 401
    assert (root / "drop" / "a.txt").read_bytes() == b"a"
    assert not (root / "drop" / "b.html").exists() and temps(root) == []


async def test_h2_a_form_cannot_replace_a_file_its_own_rule_protects(
    root: Path, incoming: Config
) -> None:
    body = form_body(("file", "index.html", b"evil"))
    async with h2_memory(incoming) as (client, srv, _):
        sid = client.request("/incoming/", "POST", [("content-type", CTYPE)], end_stream=False)
        await send_body(client, sid, body)
        (r,) = await client.wait(sid)
        assert r.status == 401
        headers = [
            ("content-type", CTYPE),
            ("accept", "application/json"),
            ("authorization", GOOD[15:-2]),
        ]
        sid = client.request("/incoming/", "POST", headers, end_stream=False)
        await send_body(client, sid, body)
        (r,) = await client.wait(sid)
        assert r.status == 201
        assert json.loads(bytes(r.body))["files"] == [
            {"name": "index.html", "href": "/incoming/index.html", "size": 4}
        ]
        assert srv.stats.writes.files == 1
    assert (root / "incoming" / "index.html").read_bytes() == b"evil"
    assert temps(root) == []


async def test_h1_a_new_folder_meets_its_own_rule(root: Path, tmp_path: Path) -> None:
    users = tmp_path / "users"
    users.write_text(f"alice:{hash_password(PASSWORD, 1000)}\n")
    cfg = upload_config(root, auth=(("/sub/private/**", str(users)),))
    body = form_body(("mkdir", None, b"private"))
    async with memory_connection(cfg) as (client, _srv, _):
        status, _, _ = await request(client, h1_post("/sub/", body))
        assert status == 401
        assert not (root / "sub" / "private").exists()
        status, _, _ = await request(client, h1_post("/sub/", body, GOOD))
        assert status == 303
    assert (root / "sub" / "private").is_dir()
