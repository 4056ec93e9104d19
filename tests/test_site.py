"""Site rules end to end: over memory streams, a few over real sockets, and
the command line / TOML front ends."""

from __future__ import annotations

import base64
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trio.testing

from serverio import Server
from serverio.errors import ConfigError
from serverio.net.connection import ConnectionTask
from serverio.ops.cli import build_parser, config_from_args
from serverio.ops.tomlconfig import dump, parse_with_config
from serverio.site import finish as finish_mod
from serverio.site import gate as gate_mod
from serverio.site import passwords as passwords_mod
from serverio.site import rules as rules_mod
from serverio.site import service as site_mod
from serverio.site.passwords import hash_password, verify

from .conftest import HTTPClient, connect, make_config, memory_connection, running_server
from .test_cli import run_cli


def basic(user: str, password: str) -> str:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return f"Authorization: Basic {token}\r\n"


@pytest.fixture
def users(tmp_path: Path) -> Path:
    f = tmp_path / "users.htpasswd"
    f.write_text(f"alice:{hash_password('wonderland', 1000)}\n# comment\n")
    return f


@pytest.fixture
def site_root(root: Path) -> Path:
    (root / "about.html").write_text("<p>about</p>\n")
    (root / "404.html").write_text("<h1>custom 404</h1>\n")
    (root / "private").mkdir()
    (root / "private" / "secret.txt").write_text("top secret\n")
    (root / "private" / "401.html").write_text("<h1>private 401 page</h1>\n")
    (root / "assets").mkdir()
    (root / "assets" / "app.js").write_text("console.log(1)\n")
    return root


# ------------------------------------------------------------ no rules


async def test_without_rules_the_engine_is_never_consulted(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(*a: object, **k: object) -> None:
        raise AssertionError("rule engine consulted without rules")

    for name in ("header_ops", "apply_headers", "cors_headers"):
        monkeypatch.setattr(finish_mod, name, boom)
    monkeypatch.setattr(site_mod, "decide_route", boom)
    for name in ("route", "alternative", "admit", "access", "finish"):
        monkeypatch.setattr(site_mod.Site, name, boom)
    async with memory_connection(make_config(root)) as (client, srv, _):
        assert srv.env.site is None
        for target in ("/hello.txt", "/hello.txt", "/missing", "/sub/", "/noindex/"):
            r = await client.get(target)
            assert r.status in (200, 404)


def test_empty_rules_compile_to_nothing(root: Path) -> None:
    assert site_mod.load_site(make_config(root)) is None
    assert rules_mod.compile_rules().empty


# ------------------------------------------------------------ headers


async def test_custom_headers_on_every_response_kind(root: Path) -> None:
    cfg = make_config(root, headers=("X-Frame-Options: DENY",), cache_control="max-age=60")
    async with memory_connection(cfg) as (client, _, _):
        r200 = await client.get("/hello.txt")
        r200b = await client.get("/hello.txt")  # from the warm memo
        etag = r200.header("etag")
        r304 = await client.get("/hello.txt", f"If-None-Match: {etag}\r\n")
        r206 = await client.get("/data.bin", "Range: bytes=0-9\r\n")
        r404 = await client.get("/missing")
        r405 = await client.get("/hello.txt", method="DELETE")
        for r in (r200, r200b, r304, r206, r404, r405):
            assert r.header("x-frame-options") == "DENY", r.status
        assert [r.status for r in (r200, r304, r206, r404, r405)] == [200, 304, 206, 404, 405]
        assert r304.header("cache-control") == "max-age=60"
        assert r200b.body == b"hello world\n"


async def test_header_rules_by_glob_override_cache_control_and_merge_vary(site_root: Path) -> None:
    cfg = make_config(
        site_root,
        cache_control="no-cache",
        header_rules=(
            ("/assets/**", (("Cache-Control", "public, max-age=31536000, immutable"),), ()),
            ("**/*.js", (("Vary", "Origin"), ("Cross-Origin-Opener-Policy", "same-origin")), ()),
        ),
    )
    async with memory_connection(cfg) as (client, _, _):
        for _ in range(2):  # cold, then from the warm memo
            r = await client.get("/assets/app.js", "Accept-Encoding: gzip\r\n")
            assert r.header("cache-control") == "public, max-age=31536000, immutable"
            assert r.header("cross-origin-opener-policy") == "same-origin"
            vary = [v.strip() for v in (r.header("vary") or "").split(",")]
            assert sorted(vary) == ["Accept-Encoding", "Origin"]
        etag = r.header("etag")
        r = await client.get(
            "/assets/app.js", f"If-None-Match: {etag}\r\nAccept-Encoding: gzip\r\n"
        )
        assert r.status == 304
        assert r.header("cache-control") == "public, max-age=31536000, immutable"
        assert "Origin" in (r.header("vary") or "")
        r = await client.get("/hello.txt")
        assert r.header("cache-control") == "no-cache"
        assert r.header("cross-origin-opener-policy") is None


async def test_memoised_head_is_rebuilt_with_rule_headers(root: Path) -> None:
    """The warm plan memo must not send a head without the rule's fields."""
    cfg = make_config(root, headers=("X-A: 1",))
    async with memory_connection(cfg) as (client, _, _):
        for _ in range(5):
            await client.send_raw(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
        for _ in range(5):
            r = await client.read_response()
            assert r.header("x-a") == "1" and r.body == b"hello world\n"
            assert [n.lower() for n, _ in r.raw_headers].count(b"x-a") == 1


# ------------------------------------------------------------ CORS


async def test_cors_any_origin(root: Path) -> None:
    async with memory_connection(make_config(root, cors=True)) as (client, _, _):
        r = await client.get("/hello.txt", "Origin: http://app.example\r\n")
        assert r.header("access-control-allow-origin") == "*"
        assert "Content-Range" in (r.header("access-control-expose-headers") or "")
        assert r.header("access-control-allow-credentials") is None
        r = await client.get(
            "/hello.txt",
            "Origin: http://app.example\r\nAccess-Control-Request-Method: GET\r\n"
            "Access-Control-Request-Headers: range\r\n",
            method="OPTIONS",
        )
        assert r.status == 204
        assert r.header("access-control-allow-headers") == "range"
        raw = [n.lower() for n, _ in r.raw_headers]
        assert raw.count(b"access-control-allow-origin") == 1


async def test_cors_origin_list_echoes_and_varies(root: Path) -> None:
    cfg = make_config(root, cors_origins=("http://good.example",))
    async with memory_connection(cfg) as (client, _, _):
        for _ in range(2):
            r = await client.get("/hello.txt", "Origin: http://good.example\r\n")
            assert r.header("access-control-allow-origin") == "http://good.example"
            assert "Origin" in (r.header("vary") or "")
            r = await client.get("/hello.txt", "Origin: http://evil.example\r\n")
            assert r.header("access-control-allow-origin") is None
            assert "Origin" in (r.header("vary") or "")  # caches must key on it


# ------------------------------------------------------------ redirects and rewrites


async def test_redirects_end_to_end(root: Path) -> None:
    cfg = make_config(root, redirects=(("/old/*", "/:splat", 301), ("/docs", "/sub/", 308)))
    async with memory_connection(cfg) as (client, _, _):
        r = await client.get("/old/hello.txt?x=1")
        assert (r.status, r.header("location")) == (301, "/hello.txt?x=1")
        r = await client.get("/old//evil.com")
        assert r.header("location") == "/evil.com"  # never //evil.com
        r = await client.get("/old/%0d%0aX:1")
        assert r.status == 301 and r.header("x") is None
        assert r.header("location") == "/%0D%0AX%3A1"
        r = await client.get("/docs", method="HEAD")
        assert (r.status, r.header("location"), r.body) == (308, "/sub/", b"")
        r = await client.get("/old/\\evil")
        assert r.status == 400  # a raw backslash is refused before any rule


async def test_rewrites_are_contained_and_respect_hidden(root: Path) -> None:
    cfg = make_config(
        root, rewrites=(("/app/*", "/index.html"), ("/s", "/.secret"), ("/f/*", "/sub/:splat"))
    )
    async with memory_connection(cfg) as (client, _, _):
        r = await client.get("/app/deep/route")
        assert r.status == 200 and r.body == b"<h1>home</h1>\n"
        assert (await client.get("/s")).status == 404  # dotfile, no --hidden
        r = await client.get("/f/index.html")
        assert r.body == b"<p>sub</p>\n"
        # ".." in a request never reaches the rewrite (400 at parse time).
        assert (await client.get("/f/../../outside/secret.txt")).status == 400


async def test_clean_urls(site_root: Path) -> None:
    async with memory_connection(make_config(site_root, clean_urls=True)) as (client, _, _):
        r = await client.get("/about")
        assert (r.status, r.body) == (200, b"<p>about</p>\n")
        r = await client.get("/about.html?x")
        assert (r.status, r.header("location")) == (301, "/about?x")
        assert (await client.get("/sub/")).status == 200  # directories unchanged
        assert (await client.get("/sub")).status == 301
        assert (await client.get("/nothing")).status == 404


async def test_trailing_slash_remove_serves_directories_without_slash(root: Path) -> None:
    async with memory_connection(make_config(root, trailing_slash="remove")) as (client, _, _):
        r = await client.get("/sub")
        assert (r.status, r.body) == (200, b"<p>sub</p>\n")
        r = await client.get("/sub/")
        assert (r.status, r.header("location")) == (301, "/sub")


async def test_clean_urls_with_trailing_slash_add(site_root: Path) -> None:
    cfg = make_config(site_root, clean_urls=True, trailing_slash="add")
    async with memory_connection(cfg) as (client, _, _):
        r = await client.get("/about.html")
        assert (r.status, r.header("location")) == (301, "/about/")
        r = await client.get("/about")
        assert (r.status, r.header("location")) == (301, "/about/")
        r = await client.get("/about/")
        assert (r.status, r.body) == (200, b"<p>about</p>\n")


async def test_trailing_slash_add(root: Path) -> None:
    async with memory_connection(make_config(root, trailing_slash="add")) as (client, _, _):
        r = await client.get("/sub")
        assert (r.status, r.header("location")) == (301, "/sub/")
        assert (await client.get("/hello.txt")).status == 200


# ------------------------------------------------------------ error pages


async def test_error_pages_keep_status_and_take_their_type(site_root: Path) -> None:
    cfg = make_config(site_root, error_pages=(("404", "404.html"),), spa=None)
    async with memory_connection(cfg) as (client, _, _):
        r = await client.get("/missing")
        assert (r.status, r.body) == (404, b"<h1>custom 404</h1>\n")
        assert r.header("content-type") == "text/html; charset=utf-8"
        r = await client.get("/missing", method="HEAD")
        assert (r.status, r.body) == (404, b"")
        assert r.header("content-length") == str(len(b"<h1>custom 404</h1>\n"))
        r = await client.get("/hello.txt", method="DELETE")
        assert r.body == b"405 Method Not Allowed\n"  # no page for 405: built-in


async def test_error_pages_work_with_spa(site_root: Path) -> None:
    cfg = make_config(site_root, error_pages=(("404", "404.html"),), spa="index.html")
    async with memory_connection(cfg) as (client, _, _):
        assert (await client.get("/client/route")).body == b"<h1>home</h1>\n"
        assert (await client.get("/missing.js")).body == b"<h1>custom 404</h1>\n"


@pytest.mark.parametrize(
    ("pages", "needle"),
    [
        ((("404", "nope.html"),), "[errors] key '404': error page 'nope.html' is missing"),
        ((("404", "../outside/secret.txt"),), "must be a file below the root"),
        ((("404", ".secret"),), "must be a file below the root"),
        ((("404", "sub"),), "not a regular file"),
    ],
)
def test_bad_error_pages_are_start_up_errors(
    root: Path, pages: tuple[tuple[str, str], ...], needle: str
) -> None:
    with pytest.raises(ConfigError) as info:
        site_mod.load_site(make_config(root, error_pages=pages, rules_source="s.toml"))
    assert needle in str(info.value) and str(info.value).startswith("s.toml")


# ------------------------------------------------------------ auth


async def test_auth_challenge_then_success_is_private(site_root: Path, users: Path) -> None:
    cfg = make_config(site_root, auth=(("/private/**", str(users)),))
    async with memory_connection(cfg) as (client, srv, _):
        r = await client.get("/private/secret.txt")
        assert r.status == 401
        assert r.header("www-authenticate") == 'Basic realm="serverio", charset="UTF-8"'
        assert b"secret" not in r.body
        r = await client.get("/private/secret.txt", basic("alice", "wonderland"))
        assert (r.status, r.body) == (200, b"top secret\n")
        assert r.header("cache-control") == "private"
        assert (await client.get("/hello.txt")).status == 200  # outside the rule
        r = await client.get("/private/secret.txt", basic("alice", "wrong"))
        assert r.status == 401
        r = await client.get("/private/secret.txt", basic("mallory", "wonderland"))
        assert r.status == 401
        assert srv.stats.site.auth_failures == 2


async def test_auth_reveals_nothing_about_existence(site_root: Path, users: Path) -> None:
    cfg = make_config(site_root, auth=(("/private/**", str(users)),))
    async with memory_connection(cfg) as (client, _, _):
        exists = await client.get("/private/secret.txt")
        missing = await client.get("/private/no-such-file")
        directory = await client.get("/private")
        assert exists.status == missing.status == directory.status == 401
        assert exists.body == missing.body


async def test_auth_cannot_be_bypassed(site_root: Path, users: Path) -> None:
    cfg = make_config(
        site_root,
        auth=(("/private/**", str(users)),),
        rewrites=(("/open/*", "/private/:splat"),),
        clean_urls=True,
        error_pages=(("401", "private/401.html"),),
    )
    (site_root / "private" / "page.html").write_text("private page\n")
    async with memory_connection(cfg) as (client, _, _):
        for target in (
            "/open/secret.txt",  # a rewrite into the protected path
            "/private/page",  # a clean URL of a protected file
            "/private//secret.txt",
            "/%70rivate/secret.txt",  # percent-encoded 'p'
        ):
            r = await client.get(target)
            assert r.status == 401, target
            # The 401 page lives under the protected path: built-in body
            # (the status line, then what is missing: issue 46).
            assert r.body == b"401 Unauthorized\nSign in as a user with permission here.\n"
    for target in ("/private/../private/secret.txt", "/private/%2e%2e/private/secret.txt"):
        async with memory_connection(cfg) as (client, _, _):
            assert (await client.get(target)).status == 400  # before any rule runs


async def test_preflight_is_exempt_from_auth(site_root: Path, users: Path) -> None:
    cfg = make_config(site_root, auth_file=str(users), cors_origins=("http://app.example",))
    async with memory_connection(cfg) as (client, _, _):
        r = await client.get(
            "/private/secret.txt",
            "Origin: http://app.example\r\nAccess-Control-Request-Method: GET\r\n"
            "Access-Control-Request-Headers: authorization\r\n",
            method="OPTIONS",
        )
        assert r.status == 204
        assert r.header("access-control-allow-origin") == "http://app.example"
        assert r.header("access-control-allow-credentials") == "true"
        r = await client.get("/hello.txt", "Origin: http://app.example\r\n")
        assert r.status == 401


async def test_failure_budget_then_429(site_root: Path, users: Path) -> None:
    cfg = make_config(site_root, auth_file=str(users))
    async with memory_connection(cfg) as (client, _, _):
        for _ in range(site_mod.FAILURE_BUDGET):
            assert (await client.get("/hello.txt", basic("alice", "bad"))).status == 401
        r = await client.get("/hello.txt", basic("alice", "wonderland"))
        assert r.status == 429 and int(r.header("retry-after") or "0") >= 1


async def test_verified_credentials_are_cached(
    site_root: Path, users: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    real = verify

    def counting(h: str, password: str) -> bool:
        calls.append(password)
        return real(h, password)

    monkeypatch.setattr(passwords_mod, "verify", counting)
    async with memory_connection(make_config(site_root, auth_file=str(users))) as (client, _, _):
        for _ in range(5):
            assert (await client.get("/hello.txt", basic("alice", "wonderland"))).status == 200
        assert len(calls) == 1


class _WorkCounter:
    """Counts the hashing work done in serverio.site.passwords, in each
    scheme's unit: PBKDF2 iterations x 32-byte blocks, bcrypt 2**cost."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import hashlib
        import types

        bcrypt = pytest.importorskip("bcrypt")
        self.pbkdf2: list[int] = []
        self.bcrypt: list[int] = []

        def pbkdf2_hmac(
            name: str, pw: bytes, salt: bytes, n: int, dklen: int | None = None
        ) -> bytes:
            self.pbkdf2.append(n * -(-(dklen or 32) // 32))
            return hashlib.pbkdf2_hmac(name, pw, salt, n, dklen)

        def cost(h: bytes) -> int:
            return 1 << int(h[4:6])

        def hashpw(pw: bytes, salt: bytes) -> bytes:
            self.bcrypt.append(cost(salt))
            return bytes(bcrypt.hashpw(pw, salt))

        def checkpw(pw: bytes, h: bytes) -> bool:
            self.bcrypt.append(cost(h))
            return bool(bcrypt.checkpw(pw, h))

        fake_hashlib = types.SimpleNamespace(pbkdf2_hmac=pbkdf2_hmac)
        fake_bcrypt = types.SimpleNamespace(hashpw=hashpw, checkpw=checkpw, gensalt=bcrypt.gensalt)
        monkeypatch.setattr(passwords_mod, "hashlib", fake_hashlib)
        monkeypatch.setattr(passwords_mod, "_bcrypt", lambda: fake_bcrypt)

    def take(self) -> tuple[int, int]:
        out = (sum(self.pbkdf2), sum(self.bcrypt))
        self.pbkdf2.clear()
        self.bcrypt.clear()
        return out


async def test_every_check_does_the_same_work_whatever_the_user_and_scheme(
    site_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 5: with PBKDF2 and bcrypt hashes of different costs in one file,
    a known user of either scheme and an unknown user cost the same work
    (the old dummy copied the first user's scheme: unknown = alice's cost,
    bob's bcrypt more), and a right password still passes."""
    bcrypt = pytest.importorskip("bcrypt")
    f = tmp_path / "mixed.htpasswd"
    lines = [
        f"alice:{hash_password('a-pw', 1000)}",
        f"carol:{hash_password('c-pw', 3000)}",
        "bob:" + bcrypt.hashpw(b"b-pw", bcrypt.gensalt(rounds=5)).decode(),
        "dave:" + bcrypt.hashpw(b"d-pw", bcrypt.gensalt(rounds=4)).decode(),
    ]
    f.write_text("\n".join(lines) + "\n")
    cfg = make_config(site_root, auth_file=str(f))
    async with memory_connection(cfg) as (client, _, _):
        work = _WorkCounter(monkeypatch)
        seen = {}
        for user in ("alice", "carol", "bob", "dave", "nobody"):
            assert (await client.get("/hello.txt", basic(user, "wrong"))).status == 401
            seen[user] = work.take()
        assert set(seen.values()) == {(3000, 2**5)}, seen
        for user, pw in (("alice", "a-pw"), ("bob", "b-pw"), ("dave", "d-pw")):
            assert (await client.get("/hello.txt", basic(user, pw))).status == 200
            assert work.take() == (3000, 2**5), user


async def test_auth_over_real_sockets(site_root: Path, users: Path) -> None:
    cfg = make_config(site_root, auth_file=str(users), headers=("X-A: 1",))
    with trio.fail_after(10):
        async with running_server(cfg) as (_, port):
            client = await connect(port)
            r = await client.get("/hello.txt")
            assert r.status == 401 and r.header("x-a") == "1"
            r = await client.get("/hello.txt", basic("alice", "wonderland"))
            assert (r.status, r.body) == (200, b"hello world\n")
            await client.stream.aclose()


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("bob:$apr1$x$y\n", "$apr1$"),
        ("bob\n", "expected user:hash"),
        ("", "has no users"),
        ("bob:{SHA}abc\n", "unknown hash scheme"),
    ],
)
def test_bad_users_files_are_start_up_errors(
    root: Path, tmp_path: Path, content: str, needle: str
) -> None:
    f = tmp_path / "u.txt"
    f.write_text(content)
    with pytest.raises(ConfigError) as info:
        site_mod.load_site(make_config(root, auth_file=str(f)))
    assert needle in str(info.value) and "--auth-file" in str(info.value)


def test_users_file_inside_the_root_is_refused(root: Path) -> None:
    (root / "users").write_text(f"a:{hash_password('x', 1000)}\n")
    with pytest.raises(ConfigError, match="inside the served root"):
        site_mod.load_site(make_config(root, auth_file=str(root / "users")))


def test_a_missing_users_file_inside_the_root_is_reported_missing(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not "is inside the served root" (issue 28): there is no file yet."""
    from serverio.ops.cli import main

    missing = root / "users.txt"
    assert main(["0", "-d", str(root), "--auth-file", str(missing)], environ={}) == 2
    out, err = capsys.readouterr()
    assert (out, err) == (
        "",
        f"serverio: error: --auth-file: users file {str(missing)!r}: No such file or directory\n",
    )


# ------------------------------------------------------------ CLI and TOML


def _parse(argv: list[str]) -> object:
    return parse_with_config(build_parser(), argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["-H", "X-A: 1", "8000"],
        ["--header", "X-A: 1", "8000"],
        ["-H", "X-A", "1", "8000"],  # CPython http.server's two-argument form
        ["8000", "-H", "X-A", "1"],
    ],
)
def test_header_option_forms(root: Path, argv: list[str]) -> None:
    cfg = config_from_args(parse_with_config(build_parser(), [*argv, "-d", str(root)]))
    assert cfg.listeners.port == 8000 and cfg.site.headers == ("X-A: 1",)


def test_version_option() -> None:
    r = run_cli("--version")
    assert r.returncode == 0 and r.stdout.startswith("serverio ")


@pytest.fixture
def site_toml(tmp_path: Path, site_root: Path, users: Path) -> Iterator[Path]:
    conf = tmp_path / "site.toml"
    conf.write_text(
        # Literal strings: a Windows path's backslashes are not escapes.
        f"directory = '{site_root}'\n"
        'header = ["X-Global: 1"]\n'
        "clean-urls = true\n"
        'trailing-slash = "keep"\n'
        "\n[[headers]]\n"
        'path = "/assets/**"\n'
        'set = { Cache-Control = "public, max-age=31536000, immutable" }\n'
        'remove = ["X-Global"]\n'
        "\n[[redirects]]\n"
        'from = "/old/*"\n'
        'to = "/new/:splat"\n'
        "status = 302\n"
        "\n[[rewrites]]\n"
        'from = "/app/*"\n'
        'to = "/index.html"\n'
        "\n[[auth]]\n"
        'path = "/private/**"\n'
        f"users-file = '{users}'\n"
        "\n[errors]\n"
        '"404" = "404.html"\n'
    )
    yield conf


def test_toml_tables_load_and_print_config_round_trips(site_toml: Path, tmp_path: Path) -> None:
    args = parse_with_config(build_parser(), ["--config", str(site_toml)])
    cfg = config_from_args(args)
    assert cfg.site.headers == ("X-Global: 1",) and cfg.site.clean_urls
    assert cfg.site.header_rules == (
        ("/assets/**", (("Cache-Control", "public, max-age=31536000, immutable"),), ("X-Global",)),
    )
    assert cfg.site.redirects == (("/old/*", "/new/:splat", 302),)
    assert cfg.site.rewrites == (("/app/*", "/index.html"),)
    assert cfg.site.error_pages == (("404", "404.html"),)
    assert cfg.site.auth[0][0] == "/private/**"
    printed = dump(build_parser(), args)
    again = tmp_path / "again.toml"
    again.write_text(printed)
    cfg2 = config_from_args(parse_with_config(build_parser(), ["--config", str(again)]))
    for field in ("headers", "header_rules", "redirects", "rewrites", "error_pages", "auth"):
        assert cfg2.value(field) == cfg.value(field), field


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ('\n[[headers]]\npath = "assets/*"\nset = { A = "b" }\n', "[[headers]] #2 key 'path'"),
        (
            '\n[[headers]]\npath = "/a"\nset = { Content-Length = "1" }\n',
            "[[headers]] #2 key 'set'",
        ),
        ('\n[[headers]]\npath = "/a"\nset = { A = "b\\r\\nX: y" }\n', "no CR, LF or NUL"),
        # Vary is semantic: removing it would hand one coding to every client.
        ('\n[[headers]]\npath = "/**"\nremove = ["Vary"]\n', "#2 key 'remove': 'Vary' cannot"),
        ('\n[[redirects]]\nfrom = "/x"\nto = "/x"\n', "redirects '/x' to itself"),
        ('\n[[redirects]]\nfrom = "/x"\nto = "/y"\nstatus = 200\n', "key 'status'"),
        ('\n[[redirects]]\nfrom = "/x"\n', "[[redirects]] #2 key 'to' must be a string"),
        ('\n[[redirects]]\nfrom = "/x"\nto = "/y"\nextra = 1\n', "unknown key 'extra'"),
        ('\n[[auth]]\npath = "/a/**"\nusers-file = "/nonexistent/u"\n', "users file"),
    ],
)
def test_bad_tables_exit_2_with_one_line_naming_file_and_key(
    site_toml: Path, extra: str, needle: str
) -> None:
    text = site_toml.read_text()
    # Insert before [errors] so the new table is not inside it.
    head, _, tail = text.partition("\n[errors]\n")
    site_toml.write_text(head + extra + "\n[errors]\n" + tail)
    r = run_cli("--config", str(site_toml), "--print-config")
    assert r.returncode == 2, r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(site_toml) in lines[0] and needle in lines[0], lines


def test_bad_header_option_exits_2(root: Path) -> None:
    r = run_cli("-H", "Content-Length: 1", "-d", str(root), "--print-config")
    assert r.returncode == 2 and "--header" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_hash_password_reads_stdin_not_argv(tmp_path: Path) -> None:
    import subprocess
    import sys

    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "serverio",
            "hash-password",
            "--iterations",
            "1000",
            "--user",
            "bob",
        ],
        input="s3cret\n",
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 0, r.stderr
    user, _, h = r.stdout.strip().partition(":")
    assert user == "bob" and verify(h, "s3cret") and "s3cret" not in r.stdout


# ------------------------------------------------------------ case-insensitive roots


@pytest.mark.skipif(
    sys.platform == "win32", reason="needs a case-sensitive directory (Windows volumes fold case)"
)
def test_case_probe_on_a_case_sensitive_root(root: Path) -> None:
    assert not site_mod.case_insensitive(str(root))


async def test_auth_matches_the_canonical_path_on_a_case_insensitive_root(
    tmp_path: Path, users: Path
) -> None:
    """On a case-insensitive filesystem /PRIVATE/x opens /private/x: the rule
    must match it too, with the same 401 whether or not x exists."""
    from testkit.fusefs import SlowFS, fuse_available

    reason = fuse_available()
    if reason is not None:
        pytest.skip(reason)
    backing = tmp_path / "backing"
    (backing / "private").mkdir(parents=True)
    (backing / "private" / "secret.txt").write_text("top secret\n")
    (backing / "Public.txt").write_text("public\n")
    with SlowFS(backing, tmp_path / "mnt", case_insensitive=True) as fs:
        assert fs.path("PRIVATE/SECRET.TXT").read_bytes() == b"top secret\n"
        cfg = make_config(
            fs.path(),
            auth=(("/private/**", str(users)),),
            header_rules=(("/public.txt", (("X-Rule", "1"),), ()),),
        )
        assert site_mod.case_insensitive(cfg.root)
        async with memory_connection(cfg) as (client, _, _):
            for target in ("/PRIVATE/secret.txt", "/Private/SECRET.TXT", "/PRIVATE/missing"):
                r = await client.get(target)
                assert r.status == 401 and r.body.startswith(b"401 Unauthorized\n"), target
            r = await client.get("/PRIVATE/secret.txt", basic("alice", "wonderland"))
            assert (r.status, r.body) == (200, b"top secret\n")
            r = await client.get("/PUBLIC.TXT")
            assert r.status == 200 and r.header("x-rule") == "1"


async def test_bcrypt_password_over_72_bytes_is_401_not_500(
    site_root: Path, tmp_path: Path
) -> None:
    bcrypt = pytest.importorskip("bcrypt")
    f = tmp_path / "bc.htpasswd"
    f.write_text("bob:" + bcrypt.hashpw(b"a" * 72, bcrypt.gensalt(rounds=4)).decode() + "\n")
    async with memory_connection(make_config(site_root, auth_file=str(f))) as (client, _, _):
        assert (await client.get("/hello.txt", basic("bob", "a" * 100))).status == 401
        assert (await client.get("/hello.txt", basic("bob", "a" * 72))).status == 200


async def test_password_spraying_saturates_only_the_auth_pool(
    site_root: Path, users: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While every auth worker is stuck and its queue is full, a request that
    needs no verification is still served, and one more login gets 503."""
    import threading

    gate = threading.Event()
    real = verify

    def slow(h: str, password: str) -> bool:
        gate.wait(10)
        return real(h, password)

    monkeypatch.setattr(passwords_mod, "verify", slow)
    cfg = make_config(site_root, auth=(("/private/**", str(users)),), work_workers=1)
    srv = Server(cfg)
    site = srv.env.site
    assert isinstance(site, site_mod.Site) and site.auth_pool is not srv.work
    stuck = gate_mod.AUTH_WORKERS + gate_mod.AUTH_QUEUE
    try:
        with trio.fail_after(20):
            async with srv.handler.running(), trio.open_nursery() as nursery:
                clients = []
                for i in range(stuck + 1):
                    ours, theirs = trio.testing.memory_stream_pair()
                    nursery.start_soon(ConnectionTask(srv.env, theirs, f"192.0.2.{i}").run)
                    clients.append(HTTPClient(ours, theirs))
                for i, c in enumerate(clients[:stuck]):
                    await c.send_raw(
                        b"GET /private/secret.txt HTTP/1.1\r\nHost: t\r\n"
                        + basic("alice", str(i)).encode()
                        + b"\r\n"
                    )
                await trio.testing.wait_all_tasks_blocked()
                last = clients[stuck]
                r = await last.get("/noindex/")  # a listing: the work pool is free
                assert r.status == 200
                r = await last.get("/private/secret.txt", basic("alice", "x"))
                assert r.status == 503
                gate.set()
                for c in clients[:stuck]:
                    assert (await c.read_response()).status == 401
                nursery.cancel_scope.cancel()
    finally:
        gate.set()
        srv.opener.close()


def test_plaintext_auth_on_a_public_address_warns(root: Path, users: Path) -> None:
    # Said once by the command (tests/test_cli_habits.py), not by load_site.
    public = make_config(root, auth_file=str(users), host="0.0.0.0")
    assert "plain HTTP" in (site_mod.plain_auth_warning(public) or "")
    local = make_config(root, auth_file=str(users), host="127.0.0.1")
    assert site_mod.plain_auth_warning(local) is None


async def test_a_changed_error_page_is_served_without_a_restart(
    site_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Error pages are bytes in memory (no pool hop for a 503's page), and
    re-read while the server runs: an edit shows up, a deleted page falls
    back to the built-in body, a restored one comes back."""
    monkeypatch.setattr(finish_mod, "PAGE_RECHECK", 0.05)
    cfg = make_config(site_root, error_pages=(("404", "404.html"),), spa=None)

    async def missing(port: int) -> bytes:
        client = await connect(port)
        try:
            r = await client.get("/nothing-here")
        finally:
            await client.stream.aclose()
        assert r.status == 404
        return r.body

    async def until(port: int, body: bytes) -> None:
        with trio.fail_after(5):
            # Polls the server: a file edit has no event to wait on here.
            while await missing(port) != body:  # noqa: ASYNC110
                await trio.sleep(0.05)

    async with running_server(cfg) as (_, port):
        assert await missing(port) == b"<h1>custom 404</h1>\n"
        (site_root / "404.html").write_text("<h1>edited 404</h1>\n")
        await until(port, b"<h1>edited 404</h1>\n")
        (site_root / "404.html").unlink()
        await until(port, b"404 Not Found\n")
        (site_root / "404.html").write_text("<h1>back</h1>\n")
        await until(port, b"<h1>back</h1>\n")
