"""The warm path under site rules (issue 44's target: the warm anonymous GET
with rules present): the site's routing and the access hook are decided in
the exchange's step when no password check is due, and a warm file's
precomputed answer (serverio/pipeline/warm.py) stands in for the handler's
for a request the rules routed to the files without credentials of its
own: anonymous, or signed in with a session cookie.  Every decision is
still made per request: the session where the request path is decided,
what the warm answer serves asked of the access hook for the principal;
Basic credentials go the long way."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from serverio.config import Config
from serverio.http.core import RequestFacts
from serverio.http.target import parse_target
from serverio.model.decide import SHARE_AFTER
from serverio.pipeline.exchange import Final
from serverio.pipeline.stages import begin
from serverio.site.passwords import hash_password

from .conftest import WARM_NOW, make_config, memory_connection

NOW = WARM_NOW  # the second the clock fixture freezes (tests/conftest.py)
BASIC = "Authorization: Basic " + base64.b64encode(b"alice:pw").decode() + "\r\n"


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
        for _ in range(SHARE_AFTER + 1):  # resolved, then SHARE_AFTER answers of its own
            await client.get("/hello.txt")
        second = await client.get("/hello.txt")  # shared: the answer is kept
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
async def test_a_protected_path_with_basic_credentials_goes_the_long_way(
    root: Path, users: Path, asked: list[bytes]
) -> None:
    cfg = make_config(root).evolve(auth=(("/**", str(users)),))
    async with memory_connection(cfg) as (client, _, _):
        for _ in range(3):
            assert (await client.get("/hello.txt", BASIC)).status == 200
        assert len(asked) == 3  # a rule applied: each answer is the handler's
        assert (await client.get("/hello.txt")).status == 401


def _session(users: Path, secret: bytes, expires: int, user: str = "alice") -> str:
    """A session token as the sign-in page issues it (bound to ``user``'s hash)."""
    from serverio.signing import Signer
    from serverio.site.principal import password_tag

    stored = dict(line.split(":", 1) for line in users.read_text().splitlines())[user]
    return Signer(secret).sign("session", (user, password_tag(stored)), expires)


async def test_a_signed_in_warm_get_is_the_precomputed_answer_decided_per_request(
    root: Path, users: Path, tmp_path: Path, clock: list[float], asked: list[bytes]
) -> None:
    """A browser's session cookie on a protected site (issue 44's cookie
    target): the warm answer stands in for the handler's, the same bytes
    the long way gives (private: a rule passed), and the session is still
    decided on each request: once it expires, nothing of the file."""
    secret = tmp_path / "secret"
    secret.write_bytes(b"k" * 32)
    cfg = make_config(root).evolve(auth=(("/**", str(users)),), secret_file=str(secret))
    cookie = f"Cookie: serverio-session={_session(users, b'k' * 32, int(NOW) + 30)}\r\n"
    async with memory_connection(cfg) as (client, srv, _):
        long_way = await client.get("/hello.txt", cookie)
        assert (long_way.status, long_way.body) == (200, b"hello world\n")
        assert "private" in (long_way.header("cache-control") or "")
        for _ in range(SHARE_AFTER):  # answers of its own, then
            await client.get("/hello.txt", cookie)
        await client.get("/hello.txt", cookie)  # shared: the answer is kept
        hits = srv.files.stats.hits
        asked.clear()
        for _ in range(3):
            got = await client.get("/hello.txt", cookie)
            assert (got.status, got.raw_headers, got.body) == (
                200,
                long_way.raw_headers,
                b"hello world\n",
            )
        assert asked == []  # the handler was not asked: the warm answer
        assert srv.files.stats.hits == hits + 3
        assert (await client.get("/hello.txt")).status == 401  # no cookie: no file
        clock[0] = NOW + 31  # the session has expired (the same file is warm)
        expired = await client.get("/hello.txt", cookie)
        assert expired.status == 401 and b"hello world" not in expired.body


def _add_bob(users: Path) -> None:
    users.write_text(users.read_text() + f"bob:{hash_password('pw2', 1000)}\n")


async def test_a_signed_in_user_without_the_right_never_reads_a_warm_file(
    root: Path, users: Path, tmp_path: Path, clock: list[float]
) -> None:
    """bob's session under rules that let alice alone read: alice's reads
    make (and keep) the warm answer; bob's, with the same file warm, are
    refused each time (the access hook decides for the principal)."""
    _add_bob(users)
    secret = tmp_path / "secret"
    secret.write_bytes(b"k" * 32)
    cfg = make_config(root).evolve(
        auth_file=str(users), allow=("alice:read,list@/",), secret_file=str(secret)
    )
    expires = int(NOW) + 3600
    alice = f"Cookie: serverio-session={_session(users, b'k' * 32, expires)}\r\n"
    bob = f"Cookie: serverio-session={_session(users, b'k' * 32, expires, 'bob')}\r\n"
    async with memory_connection(cfg) as (client, _, _):
        for _ in range(3):
            got = await client.get("/hello.txt", alice)
            assert (got.status, got.body) == (200, b"hello world\n")
        for _ in range(2):
            refused = await client.get("/hello.txt", bob)
            assert refused.status in (401, 403) and b"hello world" not in refused.body
        clock[0] = NOW + 3601
        gone = await client.get("/hello.txt", alice)
        assert gone.status in (401, 403) and b"hello world" not in gone.body


def _private_tree(root: Path, users: Path, tmp_path: Path) -> tuple[Config, dict[str, str]]:
    """A tree with a public folder, a private one and a link from the
    public one into the private one; rights for anonymous (one file),
    alice (everything) and bob (the public folder's listing: its paths
    pass the request's check, what they serve does not);
    the request headers of each way of asking (none, sessions, a stale
    and an altered session, Basic)."""
    (root / "private").mkdir()
    (root / "private" / "s.txt").write_text("secret\n")
    (root / "pub").mkdir()
    (root / "pub" / "p.txt").write_text("public\n")
    (root / "pub" / "ls.txt").symlink_to("../private/s.txt")
    _add_bob(users)
    secret = tmp_path / "secret"
    secret.write_bytes(b"k" * 32)
    cfg = make_config(root).evolve(
        auth_file=str(users),
        allow=(
            "anonymous:read@/hello.txt",
            "alice:read,list@/",
            "alice:read,list@/pub",
            "bob:list@/pub",
        ),
        secret_file=str(secret),
    )
    expires = int(NOW) + 3600
    alice = _session(users, b"k" * 32, expires)
    bob = _session(users, b"k" * 32, expires, "bob")
    ways = {
        "anonymous": "",
        "alice": f"Cookie: serverio-session={alice}\r\n",
        "bob": f"Cookie: other=1; serverio-session={bob}\r\n",
        "stale": f"Cookie: serverio-session={_session(users, b'k' * 32, int(NOW) - 1)}\r\n",
        "altered": f"Cookie: serverio-session={alice[:-2]}xx\r\n",
        "basic": BASIC,
    }
    return cfg, ways


def _h2_fields(headers: str) -> list[tuple[str, str]]:
    """The same way of asking as HTTP/2 fields (a Cookie split into its
    crumbs, as RFC 9113 §8.2.3 lets a client send it)."""
    out: list[tuple[str, str]] = []
    for line in filter(None, headers.split("\r\n")):
        name, _, value = line.partition(": ")
        if name.lower() == "cookie":
            out.extend(("cookie", crumb) for crumb in value.split("; "))
        else:
            out.append((name.lower(), value))
    return out


Ask = Callable[[str, str], Awaitable[tuple[int, bytes]]]


@asynccontextmanager
async def _asker(cfg: Config, protocol: str) -> AsyncIterator[Ask]:
    """One connection of ``protocol`` and a GET over it: (status, body) of
    ``path`` asked with ``headers`` (HTTP/1.1 field lines)."""
    if protocol == "h1":
        async with memory_connection(cfg) as (client, _, _):

            async def get1(path: str, headers: str) -> tuple[int, bytes]:
                got = await client.get(path, headers)
                return got.status, got.body

            yield get1
    else:
        from .h2client import h2_memory

        async with h2_memory(cfg) as (h2, _, _):

            async def get2(path: str, headers: str) -> tuple[int, bytes]:
                got = await h2.get(path, _h2_fields(headers))
                return got.status, bytes(got.body)

            yield get2


@pytest.mark.usefixtures("clock")
@pytest.mark.parametrize("protocol", ["h1", "h2"])
async def test_warm_answers_never_change_an_answer_whoever_asked_first(
    root: Path, users: Path, tmp_path: Path, protocol: str
) -> None:
    """The oracle is each way of asking alone, on a fresh connection of a
    fresh server (nothing warm); then on one connection every way asks
    every path three times in turn, so that each answer is kept warm by
    some other principal's request first: every status and body must be
    the fresh one.  Over HTTP/1.1 and HTTP/2 (the same exchange; cookies
    in crumbs there)."""
    cfg, ways = _private_tree(root, users, tmp_path)
    paths = ("/hello.txt", "/pub/p.txt", "/pub/ls.txt", "/private/s.txt")
    fresh: dict[tuple[str, str], tuple[int, bytes]] = {}
    for way, headers in ways.items():
        for path in paths:
            async with _asker(cfg, protocol) as get:
                fresh[way, path] = await get(path, headers)
    assert fresh["alice", "/private/s.txt"] == (200, b"secret\n")
    assert fresh["bob", "/pub/p.txt"][0] in (401, 403)  # a listing right reads no file
    assert fresh["anonymous", "/hello.txt"] == (200, b"hello world\n")
    assert fresh["alice", "/pub/p.txt"] == (200, b"public\n")
    async with _asker(cfg, protocol) as get:
        for turn in range(3):
            order = list(ways.items())
            order = order[turn:] + order[:turn]  # a different first asker each turn
            for path in paths:
                for way, headers in order:
                    got = await get(path, headers)
                    assert got == fresh[way, path], (turn, way, path)
