"""The warm path under site rules (issue 44's target: the warm anonymous GET
with rules present): the site's routing and the access hook are decided in
the exchange's step when no password check is due, and a warm file's
precomputed answer (serverio/pipeline/warm.py) stands in for the handler's
for an anonymous request the rules routed with no rule applying.  Every
decision is still made per request: what the warm answer serves is asked of
the access hook, and anything with credentials, a cookie, or a rule that
is not an unconditional allow for anonymous goes the long way."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from serverio.config import Config
from serverio.fs import filecache as _filecache
from serverio.http.core import RequestFacts
from serverio.http.target import parse_target
from serverio.pipeline.exchange import Final
from serverio.pipeline.handler import Handler
from serverio.pipeline.stages import begin
from serverio.site.passwords import hash_password

from .conftest import make_config, memory_connection

NOW = float(int(time.time()))
BASIC = "Authorization: Basic " + base64.b64encode(b"alice:pw").decode() + "\r\n"


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """The wall clock, frozen at a second's start; every file is settled."""
    now = [NOW]
    monkeypatch.setattr(time, "time", lambda: now[0])
    monkeypatch.setattr(_filecache, "RACY_SECONDS", -3600.0)
    yield now


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The targets Handler.respond_now was asked for (it still answers)."""
    seen: list[bytes] = []
    real = Handler.respond_now

    def counting(self: Handler, req: RequestFacts, now: float, transform: bool = True) -> object:
        seen.append(req.target.relpath.encode())
        return real(self, req, now, transform)

    monkeypatch.setattr(Handler, "respond_now", counting)
    return seen


@pytest.fixture
def users(tmp_path: Path) -> Path:
    path = tmp_path / "users"
    path.write_text(f"alice:{hash_password('pw', 1000)}\n")
    return path


def _allow(root: Path, users: Path, *allow: str) -> Config:
    return make_config(root).evolve(auth_file=str(users), allow=allow, headers=("X-Site: 1",))


@pytest.mark.usefixtures("clock")
async def test_an_anonymous_warm_get_under_rules_is_the_precomputed_answer(
    root: Path, users: Path, asked: list[bytes]
) -> None:
    cfg = _allow(root, users, "anonymous:read,list@/", "alice:upload@/incoming")
    async with memory_connection(cfg) as (client, srv, _):
        await client.get("/hello.txt")
        second = await client.get("/hello.txt")  # a hit: the answer is kept
        hits = srv.files.stats.hits
        asked.clear()
        for _ in range(3):
            got = await client.get("/hello.txt")
            assert (got.status, got.raw_headers, got.body) == (
                200,
                second.raw_headers,
                b"hello world\n",
            )
        assert second.header("x-site") == "1"  # the site's finish, each time
        assert asked == []  # the handler was not asked again
        assert srv.files.stats.hits == hits + 3
        # With credentials: the long way (decided with them, the handler asked).
        authed = await client.get("/hello.txt", BASIC)
        assert authed.status == 200 and asked == [b"hello.txt"]


@pytest.mark.usefixtures("clock")
async def test_the_anonymous_warm_get_under_rules_needs_no_driver(root: Path, users: Path) -> None:
    cfg = _allow(root, users, "anonymous:read,list@/")
    async with memory_connection(cfg) as (client, srv, _):
        await client.get("/hello.txt")
        await client.get("/hello.txt")
        req = RequestFacts(b"GET", parse_target(b"GET", b"/hello.txt"))
        _, out = begin(srv.env, req, NOW)
        assert type(out) is Final and out.plan.status == 200  # no Authenticate, no Admit
        assert out.ticket is not None and not out.ticket.protected
        out.body.close()


@pytest.mark.usefixtures("clock")
async def test_a_link_into_a_protected_area_is_never_answered_warm(root: Path, users: Path) -> None:
    (root / "private").mkdir()
    (root / "private" / "s.txt").write_text("secret\n")
    (root / "pub").mkdir()
    (root / "pub" / "ls.txt").symlink_to("../private/s.txt")
    cfg = make_config(root).evolve(auth=(("/private/**", str(users)),))
    async with memory_connection(cfg) as (client, _, _):
        for _ in range(2):
            assert (await client.get("/pub/ls.txt")).status == 401
        # alice's reads make (and keep) the handler's warm answer ...
        for _ in range(3):
            got = await client.get("/pub/ls.txt", BASIC)
            assert (got.status, got.body) == (200, b"secret\n")
        # ... which an anonymous request never gets: its target is decided.
        for _ in range(2):
            refused = await client.get("/pub/ls.txt")
            assert refused.status == 401 and b"secret" not in refused.body


@pytest.mark.usefixtures("clock")
async def test_a_list_only_right_never_reads_a_warm_file(root: Path, users: Path) -> None:
    cfg = _allow(root, users, "anonymous:list@/", "alice:read,list@/")
    async with memory_connection(cfg) as (client, _, _):
        for _ in range(3):
            got = await client.get("/hello.txt", BASIC)
            assert (got.status, got.body) == (200, b"hello world\n")
        for _ in range(2):
            refused = await client.get("/hello.txt")
            assert refused.status in (401, 403) and b"hello world" not in refused.body


@pytest.mark.usefixtures("clock")
async def test_a_protected_path_is_never_answered_warm(
    root: Path, users: Path, asked: list[bytes]
) -> None:
    cfg = make_config(root).evolve(auth=(("/**", str(users)),))
    async with memory_connection(cfg) as (client, _, _):
        for _ in range(3):
            assert (await client.get("/hello.txt", BASIC)).status == 200
        assert len(asked) == 3  # a rule applied: each answer is the handler's
        assert (await client.get("/hello.txt")).status == 401
