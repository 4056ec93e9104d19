"""Auth decided on what is served, however it is reached (security round 3).

Every ``[[auth]]`` rule protects the bytes of the files it matches: through
index files, clean-URL and trailing-slash alternatives, rewrites, the SPA
fallback, sidecars asked for by name, listings (protected names are not
listed to a client without the credentials) and the live-reload paths;
over HTTP/1.1 and HTTP/2.  The property test at the end generates
configurations and request paths and checks with an oracle of its own
(not the server's glob code) that no protected byte and no protected name
is ever served without credentials.
"""

from __future__ import annotations

import base64
import gzip
import itertools
import ntpath
import os
import random
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio

from serverio.fs import opener as opener_mod
from serverio.fs.opener import RootOpener
from serverio.http.access import ALLOWED, Access, Ticket
from serverio.live.service import LiveReload
from serverio.site import service as site_mod
from serverio.site.passwords import hash_password

from .conftest import make_config, memory_connection
from .h2client import h2_memory

PASSWORD = "wonderland"


def basic(user: str = "alice", password: str = PASSWORD) -> str:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return f"Authorization: Basic {token}\r\n"


@pytest.fixture
def users(tmp_path: Path) -> Path:
    f = tmp_path / "users.htpasswd"
    f.write_text(f"alice:{hash_password(PASSWORD, 1000)}\n")
    return f


# ------------------------------------------------------------ the reported cases


async def test_trailing_slash_remove_and_rewrite_alternatives_are_protected(
    root: Path, users: Path
) -> None:
    # (a) /priv2/ is 401, but /priv2, /priv2?x and the rewrite /aliasdir ->
    # /priv2 were answered with /priv2/index.html by the retried alternative.
    (root / "priv2").mkdir()
    (root / "priv2" / "index.html").write_text("PRIV2-INDEX\n")
    cfg = make_config(
        root,
        trailing_slash="remove",
        auth=(("/priv2/*", str(users)),),
        rewrites=(("/aliasdir", "/priv2"),),
    )
    async with memory_connection(cfg) as (client, _, _):
        for target in ("/priv2/", "/priv2", "/priv2?x", "/aliasdir", "/aliasdir?y"):
            r = await client.get(target)
            assert r.status in (301, 401), (target, r.status)
            assert b"PRIV2" not in r.body, target
        r = await client.get("/priv2", basic())
        assert (r.status, r.body) == (200, b"PRIV2-INDEX\n")
        assert r.header("cache-control") == "private"


async def test_globs_naming_an_index_file_protect_the_directory_urls(
    root: Path, users: Path
) -> None:
    # (b) **/*.html and /x/index.html were bypassed by /x/, /x//, /x/?format=json.
    (root / "x").mkdir()
    (root / "x" / "index.html").write_text("X-INDEX\n")
    for glob in ("**/*.html", "/x/index.html"):
        cfg = make_config(root, auth=((glob, str(users)),))
        async with memory_connection(cfg) as (client, _, _):
            for target in ("/x/", "/x//", "/x/?format=json", "//x/", "/x/index.html"):
                r = await client.get(target)
                assert r.status == 401, (glob, target, r.status)
                assert b"X-INDEX" not in r.body
            r = await client.get("/x/", basic())
            assert (r.status, r.body) == (200, b"X-INDEX\n")


async def test_a_sidecar_is_protected_by_its_files_rule_and_not_listed(
    root: Path, users: Path
) -> None:
    # (c) /reports/q3.html.gz returned the protected content and was listed.
    (root / "reports").mkdir()
    (root / "reports" / "q3.html").write_text("Q3-REPORT\n")
    (root / "reports" / "q3.html.gz").write_bytes(gzip.compress(b"Q3-REPORT\n"))
    (root / "reports" / "public.txt").write_text("public\n")
    cfg = make_config(root, auth=(("/reports/*.html", str(users)),))
    async with memory_connection(cfg) as (client, _, _):
        for target, extra in (
            ("/reports/q3.html.gz", ""),
            ("/reports/q3.html", "Accept-Encoding: gzip\r\n"),
            ("/reports/q3.html", ""),
        ):
            r = await client.get(target, extra)
            assert r.status == 401, target
        listing = await client.get("/reports/")
        assert listing.status == 200
        assert b"public.txt" in listing.body
        assert b"q3.html" not in listing.body
        as_json = await client.get("/reports/?format=json")
        assert b"public.txt" in as_json.body and b"q3" not in as_json.body
        # With the credentials the names are listed and the sidecar served.
        authed = await client.get("/reports/q3.html", basic())
        assert authed.status == 200
        listing = await client.get("/reports/", basic())
        assert b"q3.html" in listing.body and b"q3.html.gz" in listing.body
        r = await client.get("/reports/q3.html.gz", basic())
        assert r.status == 200 and gzip.decompress(r.body) == b"Q3-REPORT\n"


async def test_the_spa_fallback_and_clean_urls_are_protected(root: Path, users: Path) -> None:
    (root / "app").mkdir()
    (root / "app" / "shell.html").write_text("APP-SHELL\n")
    (root / "docs").mkdir()
    (root / "docs" / "plan.html").write_text("DOCS-PLAN\n")
    rules = (("/app/**", str(users)), ("/docs/*.html", str(users)))
    for cfg, target in (
        (make_config(root, spa="app/shell.html", auth=rules), "/some/client/route"),
        (make_config(root, clean_urls=True, auth=rules), "/docs/plan"),
        (make_config(root, clean_urls=True, auth=rules), "/docs/plan?x=1"),
    ):
        async with memory_connection(cfg) as (client, _, _):
            r = await client.get(target)
            assert r.status == 401, target
            assert b"APP-SHELL" not in r.body and b"DOCS-PLAN" not in r.body
            assert (await client.get(target, basic())).body in (b"APP-SHELL\n", b"DOCS-PLAN\n")


async def test_revalidations_of_a_protected_resolved_file_need_credentials(
    root: Path, users: Path
) -> None:
    # A 304 or 412 tells the ETag: it is an answer about the protected bytes.
    (root / "y").mkdir()
    (root / "y" / "index.html").write_text("Y\n")
    cfg = make_config(root, auth=(("/y/index.html", str(users)),))
    async with memory_connection(cfg) as (client, _, _):
        etag = (await client.get("/y/", basic())).header("etag")
        assert etag
        for extra in (f"If-None-Match: {etag}\r\n", 'If-Match: "nope"\r\n', "Range: bytes=0-0\r\n"):
            r = await client.get("/y/", extra)
            assert r.status == 401, extra
            assert r.header("etag") is None
        assert (await client.get("/y/", f"If-None-Match: {etag}\r\n" + basic())).status == 304


async def test_resolved_target_rules_hold_over_http2(root: Path, users: Path) -> None:
    (root / "x").mkdir()
    (root / "x" / "index.html").write_text("X-INDEX\n")
    (root / "x" / "a.html").write_text("A\n")
    (root / "x" / "a.html.gz").write_bytes(gzip.compress(b"A\n"))
    cfg = make_config(root, auth=(("**/*.html", str(users)),))
    token = basic().split(": ", 1)[1].strip()
    async with h2_memory(cfg) as (client, _, _):
        for path in ("/x/", "/x//", "/x/?format=json", "/x/a.html.gz"):
            r = await client.get(path)
            assert r.status == 401, path
            assert b"X-INDEX" not in r.body
        listing = await client.get("/noindex/")
        assert listing.status == 200 and b"a.txt" in bytes(listing.body)
        sub = await client.get("/x/a.html", [("authorization", token)])
        assert sub.status == 200 and bytes(sub.body) == b"A\n"


# ------------------------------------------------------------ live reload


async def test_live_reload_paths_go_through_auth(root: Path, users: Path) -> None:
    # /.serverio/events answered unauthenticated clients under --auth-file.
    cfg = make_config(root, watch=True, auth=(("/**", str(users)),))
    async with memory_connection(cfg) as (client, _, _):
        for target in ("/.serverio/events", "/.serverio/livereload.js"):
            r = await client.get(target, method="HEAD")
            assert r.status == 401, target
        r = await client.get("/.serverio/livereload.js", basic())
        assert r.status == 200 and b"EventSource" in r.body


async def test_events_never_name_a_protected_path(root: Path, users: Path) -> None:
    cfg = make_config(root, watch=True, auth=(("/private/**", str(users)),))
    srv_site = site_mod.load_site(cfg)
    assert srv_site is not None
    async with memory_connection(cfg) as (_, srv, _):
        live = srv.live
        assert isinstance(live, LiveReload)
        assert live.may_name("/public.css")
        assert not live.may_name("/private/roadmap-2027.css")
        sub = live.broadcast.subscribe()
        live.publish({"private/roadmap-2027.css": "changed"})
        live.publish({"style.css": "changed"})
        sent = await live.broadcast.next(sub, 1.0)
        live.broadcast.unsubscribe(sub)
        assert b"roadmap" not in sent
        assert b"event: reload" in sent and b"/style.css" in sent


# ------------------------------------------------------------ Windows paths


async def test_an_encoded_backslash_is_one_name_where_it_is_a_separator(
    root: Path, users: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found by the real Windows CPython: the windows strategy split request
    # segments on "\\" too, so /private%5cplan.txt opened private/plan.txt
    # while [[auth]] matched the single name "private\\plan.txt".  Here
    # the strategy is given Windows' separators (on Linux "\\" is an
    # ordinary name character and the name would simply not exist).
    (root / "private").mkdir()
    (root / "private" / "plan.txt").write_text("PLAN\n")
    monkeypatch.setattr(opener_mod, "_SEPARATORS", re.compile(r"[\\/]"))
    opener = RootOpener(str(root), follow_symlinks=False, strategy="windows")
    try:
        with pytest.raises(OSError):
            opener.open("private\\plan.txt")
        os.close(opener.open("private/plan.txt"))
    finally:
        opener.close()
    plain_init = RootOpener.__init__

    def windows_init(self: RootOpener, root: str, **kw: object) -> None:
        if kw.get("strategy") is None:
            kw["strategy"] = "windows"
        plain_init(self, root, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(RootOpener, "__init__", windows_init)
    cfg = make_config(root, auth=(("/private/**", str(users)),))
    async with memory_connection(cfg) as (client, _, _):
        for target in (
            "/private%5cplan.txt",
            "/PRIVATE%5cplan.txt",
            "/sub%5c..%5cprivate%5cplan.txt",
        ):
            r = await client.get(target)
            assert r.status in (400, 404), (target, r.status)
            assert b"PLAN" not in r.body
        assert (await client.get("/private/plan.txt")).status == 401


@pytest.mark.parametrize(
    ("root", "path", "inside"),
    [
        ("C:\\srv\\public", "C:\\srv\\public\\users.htpasswd", True),
        ("C:\\srv\\public", "c:\\SRV\\Public\\sub\\users", True),  # case-insensitive
        ("C:\\srv\\public", "C:/srv/public/users", True),  # either separator
        ("C:\\srv\\public", "C:\\srv\\public-other\\users", False),
        ("C:\\srv\\public", "D:\\srv\\public\\users", False),
        ("C:\\srv\\public", "C:\\srv\\users", False),
        ("C:\\srv\\public", "C:\\srv\\public", True),
    ],
)
def test_users_file_inside_the_root_on_windows_paths(root: str, path: str, inside: bool) -> None:
    # _inside compared against root + "/", which never matches a Windows path.
    assert site_mod._inside(root, path, ntpath) is inside


# ------------------------------------------------------------ property


# The tree: every file's content is a marker of its own, every name a token
# that occurs nowhere else, so a leak shows up in any body.
TREE = {
    "pub.txt": "public",
    "f1x.html": "f1",
    "f1x.html.gz": "f1 sidecar",
    "dA/index.html": "dA index",
    "dA/f2x.html": "f2",
    "dA/f2x.html.br": "f2 sidecar",
    "dA/f3x.txt": "f3",
    "dB/f4x.html": "f4",
    "dB/f5x.txt": "f5",
    "dB/dC/index.htm": "dC index",
    "dB/dC/f6x.css": "f6",
    "app/shell.html": "spa shell",
}
GLOBS = (
    "/dA/**",
    "/dA/*",
    "/dA/index.html",
    "**/*.html",
    "/f1x.html",
    "/dB/*.html",
    "/dB/**",
    "**/f3x.txt",
    "/dB/dC/**",
    "/app/*",
    "/dB/dC/*.htm",
    "/*.html",
)


def _marker(rel: str) -> bytes:
    return f"MARK[{rel}]".encode()


def _glob_matches(glob: str, path: str) -> bool:
    """The documented glob semantics, written independently of the
    server's regex translation: ``*`` within a segment, ``**`` any number
    of whole segments, a trailing ``/`` is an empty last segment."""
    if glob.startswith("**"):
        glob = "/" + glob
    gs = glob[1:].split("/")
    ps = path[1:].split("/")

    def seg(g: str, p: str) -> bool:
        if not g:
            return not p
        if g[0] == "*":
            return any(seg(g[1:], p[i:]) for i in range(len(p) + 1))
        return bool(p) and (g[0] == "?" or g[0] == p[0]) and seg(g[1:], p[1:])

    def walk(i: int, j: int) -> bool:
        if i == len(gs):
            return j == len(ps)
        if gs[i] == "**":
            return any(walk(i + 1, k) for k in range(j, len(ps) + 1))
        return j < len(ps) and seg(gs[i], ps[j]) and walk(i + 1, j + 1)

    return walk(0, 0)


def _protected(globs: tuple[str, ...], path: str) -> bool:
    paths = [path]
    for suffix in (".gz", ".br", ".zst"):
        if path.endswith(suffix):
            paths.append(path[: -len(suffix)])
    return any(_glob_matches(g, p) for g in globs for p in paths)


@dataclass(frozen=True)
class Scenario:
    globs: tuple[str, ...]
    trailing_slash: str
    clean_urls: bool
    spa: str | None
    rewrites: tuple[tuple[str, str], ...]
    index: tuple[str, ...]


def _scenarios(n: int, seed: int) -> list[Scenario]:
    rng = random.Random(seed)
    rewrite_choices = (
        (),
        (("/aliasdir", "/dA"),),
        (("/alias/*", "/dA/:splat"),),
        (("/r/*", "/dB/:splat"), ("/rr", "/dB/dC")),
    )
    out = []
    for _ in range(n):
        out.append(
            Scenario(
                globs=tuple(rng.sample(GLOBS, rng.choice((1, 1, 2)))),
                trailing_slash=rng.choice(("keep", "add", "remove")),
                clean_urls=rng.random() < 0.5,
                spa=rng.choice((None, "app/shell.html")),
                rewrites=rng.choice(rewrite_choices),
                index=rng.choice((("index.html",), ("index.html", "index.htm"))),
            )
        )
    return out


def _targets() -> list[str]:
    base = ["/"]
    for rel in TREE:
        base.append("/" + rel)
        stem, _, ext = rel.rpartition(".")
        if ext in ("html", "htm"):
            base.append("/" + stem)  # clean URL
    for d in ("dA", "dB", "dB/dC", "app"):
        base += [f"/{d}", f"/{d}/", f"/{d}//", f"/{d}/?format=json", f"//{d}/"]
    base += ["/aliasdir", "/aliasdir/", "/alias/f2x.html", "/alias/", "/r/f4x.html", "/rr"]
    base += ["/rr/", "/no/such/route", "/missing", "/dA/f2x", "/DA/", "/%64A/"]
    return base


def _leaks(scenario: Scenario, body: bytes) -> list[str]:
    found = []
    for rel in TREE:
        if _protected(scenario.globs, "/" + rel) and _marker(rel) in body:
            found.append(rel)
    # Names: a listing must not show a protected entry.
    names = {rel.rsplit("/", 1)[-1]: rel for rel in TREE}
    for name, rel in names.items():
        listed = re.fullmatch(r"f\dx\..*", name) and name.encode() in body
        if listed and _protected(scenario.globs, "/" + rel):
            found.append("name:" + rel)
    for d in ("dA", "dB", "dB/dC", "app"):
        leaf = d.rsplit("/", 1)[-1]
        # The HTML listing links a directory as ./name/, JSON names it.
        shown = f'href="./{leaf}/"'.encode() in body or f'"{leaf}"'.encode() in body
        if shown and _protected(scenario.globs, f"/{d}/"):
            found.append("dir:" + d)
    return found


@pytest.mark.parametrize("protocol", ["http/1.1", "h2"])
async def test_no_protected_byte_or_name_is_served_without_credentials(
    tmp_path: Path, users: Path, protocol: str
) -> None:
    www = tmp_path / "www"
    for rel in TREE:
        f = www / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(_marker(rel))
    scenarios = _scenarios(30 if protocol == "http/1.1" else 12, seed=20261202)
    targets = _targets()
    encodings = ("", "gzip, br")
    leaks: list[tuple[Scenario, str, str, int, list[str]]] = []
    served = 0
    for sc in scenarios:
        cfg = make_config(
            www,
            auth=tuple((g, str(users)) for g in sc.globs),
            trailing_slash=sc.trailing_slash,
            clean_urls=sc.clean_urls,
            spa=sc.spa,
            rewrites=sc.rewrites,
            index=sc.index,
        )
        if protocol == "http/1.1":
            async with memory_connection(cfg) as (client, _, _):
                for target, enc in itertools.product(targets, encodings):
                    extra = f"Accept-Encoding: {enc}\r\n" if enc else ""
                    r = await client.get(target, extra)
                    served += r.status == 200
                    found = _leaks(sc, r.body)
                    if found:
                        leaks.append((sc, target, enc, r.status, found))
        else:
            async with h2_memory(cfg) as (h2c, _, _):
                for target, enc in itertools.product(targets, encodings):
                    hs = [("accept-encoding", enc)] if enc else []
                    h2r = await h2c.get(target, hs)
                    served += h2r.status == 200
                    found = _leaks(sc, bytes(h2r.body))
                    if found:
                        leaks.append((sc, target, enc, h2r.status, found))
    assert served > 100  # the test did serve public files
    assert not leaks, f"{len(leaks)} leaks, first: {leaks[:5]}"


def test_the_oracle_agrees_with_examples() -> None:
    # The property test's own glob code, checked on hand-picked cases.
    assert _glob_matches("/dA/**", "/dA/")
    assert _glob_matches("/dA/**", "/dA/x/y")
    assert _glob_matches("/dA/*", "/dA/")
    assert not _glob_matches("/dA/*", "/dA/x/y")
    assert _glob_matches("**/*.html", "/dA/f2x.html")
    assert not _glob_matches("**/*.html", "/dA/")
    assert _protected(("/f1x.html",), "/f1x.html.gz")
    assert not _protected(("/f1x.html",), "/f1x.htmlgz")


async def test_the_property_test_sees_a_leak_on_a_server_that_ignores_resolution(
    tmp_path: Path, users: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The harness itself can fail: with the resolved-target decision
    # switched off, a known bypass is reported as a leak.
    async def allow(
        self: object, target: object, ticket: Ticket, client: object
    ) -> tuple[Access, Ticket]:
        return ALLOWED, ticket

    monkeypatch.setattr(site_mod.Site, "admit", allow)
    www = tmp_path / "www"
    (www / "x").mkdir(parents=True)
    (www / "x" / "index.html").write_bytes(_marker("x/index.html"))
    cfg = make_config(www, auth=(("/x/index.html", str(users)),))
    async with memory_connection(cfg) as (client, _, _):
        r = await client.get("/x/")
    assert r.status == 200 and _marker("x/index.html") in r.body


async def test_checks_cost_nothing_without_auth_rules(root: Path) -> None:
    cfg = make_config(root, headers=("X-A: 1",))
    async with memory_connection(cfg) as (client, srv, _):
        assert srv.content.visible is None
        r = await client.get("/noindex/")
        assert r.status == 200 and b"a.txt" in r.body
    await trio.lowlevel.checkpoint()
