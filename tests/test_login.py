"""The login page, session cookie, trusted user header and share links
(issue 44): over HTTP/1.1 in memory and on real sockets, HTTP/2 too, with
hostile cookies, forms and tokens."""

from __future__ import annotations

import base64
import json
import re
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from serverio.login import share as share_mod
from serverio.login.cookies import cookie_value, set_cookie
from serverio.login.service import safe_next
from serverio.login.share import open_share, share_token, token_of
from serverio.signing import Signer, TokenError
from serverio.site.passwords import hash_password
from serverio.site.principal import MARK, principal_of, share_allows, share_authorization

from .conftest import HTTPClient, Response, connect, make_config, memory_connection, running_server
from .h2client import h2_memory

PASSWORD = "wonderland"
SECRET = b"s" * 40


@pytest.fixture
def users(tmp_path: Path) -> Path:
    f = tmp_path / "users.htpasswd"
    f.write_text(f"alice:{hash_password(PASSWORD, 1000)}\nbob:{hash_password('builder', 1000)}\n")
    return f


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    f = tmp_path / "secret"
    f.write_bytes(SECRET)
    return f


@pytest.fixture
def tree(root: Path) -> Path:
    (root / "private").mkdir()
    (root / "private" / "plan.txt").write_text("PLAN\n")
    (root / "private" / "docs").mkdir()
    (root / "private" / "docs" / "a.txt").write_text("DOC-A\n")
    (root / "private" / "docs" / "sub").mkdir()
    (root / "private" / "docs" / "sub" / "b.txt").write_text("DOC-B\n")
    (root / "private" / "sibling.txt").write_text("SIBLING\n")
    (root / "incoming").mkdir()
    return root


def config(root: Path, users: Path, secret: Path, **kw: object):  # type: ignore[no-untyped-def]
    return make_config(root, auth=(("/private/**", str(users)),), secret_file=str(secret), **kw)


def cookies_of(r: Response) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in r.raw_headers:
        if name.lower() == b"set-cookie":
            k, _, rest = value.decode().partition("=")
            out[k] = rest.split(";", 1)[0]
    return out


async def sign_in(client: HTTPClient, user: str = "alice", password: str = PASSWORD) -> str:
    """The browser's way in: the form (CSRF token, cookie), then its POST.
    The session cookie's value."""
    page = await client.get("/.serverio/login?next=/private/plan.txt")
    assert page.status == 200
    nonce = cookies_of(page)["serverio-login"]
    csrf = re.search(rb'name="csrf" value="([^"]+)"', page.body)
    assert csrf is not None
    form = urlencode(
        {"csrf": csrf.group(1).decode(), "user": user, "password": password, "next": "/private/"}
    )
    r = await post(client, "/.serverio/login", form, f"Cookie: serverio-login={nonce}\r\n")
    assert r.status == 303, r.body
    assert r.header("location") == "/private/"
    return cookies_of(r)["serverio-session"]


async def post(client: HTTPClient, target: str, form: str, headers: str = "") -> Response:
    body = form.encode()
    await client.send_raw(
        (
            f"POST {target} HTTP/1.1\r\nHost: t\r\n{headers}"
            "Content-Type: application/x-www-form-urlencoded\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        + body
    )
    return await client.read_response()


# ------------------------------------------------------------ pure pieces


def test_cookie_values_are_read_bounded_and_checked() -> None:
    assert cookie_value("a=1; serverio-session=tok.en; b=2", "serverio-session") == "tok.en"
    assert cookie_value('serverio-session="q"', "serverio-session") == "q"
    assert cookie_value("serverio-session=a b", "serverio-session") is None  # not cookie-octets
    assert cookie_value("x" * 20000 + "; serverio-session=t", "serverio-session") is None
    assert cookie_value(None, "n") is None
    assert cookie_value("serverio-sessionx=1", "serverio-session") is None
    _name, value = set_cookie("__Host-s", "v", 60, secure=True)
    assert value == b"__Host-s=v; Path=/; Max-Age=60; HttpOnly; SameSite=Lax; Secure"
    with pytest.raises(ValueError):
        set_cookie("s", "a;b", 1, secure=False)


@pytest.mark.parametrize(
    ("given", "want"),
    [
        ("/private/", "/private/"),
        ("//evil.example/", "/"),
        ("/\\evil.example", "/"),
        ("https://evil.example/", "/"),
        ("/a\r\nSet-Cookie: x=1", "/"),
        ("", "/"),
        (None, "/"),
        ("/ok?x=1", "/ok?x=1"),
    ],
)
def test_sign_in_sends_the_browser_only_to_a_path_here(given: str | None, want: str) -> None:
    assert safe_next(given) == want


def test_share_tokens_grant_their_path_and_rights_only() -> None:
    signer = Signer(SECRET)
    now = time.time()
    tok = share_token(signer, "/docs/", frozenset(("read", "list")), "", int(now) + 60)
    share = open_share(signer, tok, now)
    assert share.folder and share.rights == {"read", "list"}
    with pytest.raises(TokenError) as exc:
        open_share(signer, tok, now + 120)
    assert exc.value.kind == "expired"
    tampered = tok[:5] + ("A" if tok[5] != "A" else "B") + tok[6:]
    with pytest.raises(TokenError) as exc:
        open_share(signer, tampered, now)
    assert exc.value.kind == "invalid"
    # Another purpose's token (a session) is no share.
    with pytest.raises(TokenError):
        open_share(signer, signer.sign("session", ("alice", "x"), int(now) + 60), now)
    who = principal_of(share_authorization("/docs/", frozenset(("read", "list")), tok))
    assert who is not None and who.via == "share"
    assert share_allows(who, ("/docs/a.txt",), "read")
    assert share_allows(who, ("/docs/",), "list")
    assert not share_allows(who, ("/docs-x/a.txt",), "read")  # a sibling sharing the prefix
    assert not share_allows(who, ("/",), "list")  # the parent
    assert not share_allows(who, ("/docs/a.txt",), "upload")
    assert token_of("https://h/.serverio/s/abc.def/x.txt") == "abc.def"
    assert MARK.startswith("Serverio-") and len(MARK) > 20


# ------------------------------------------------------------ sign-in, HTTP/1.1


async def test_sign_in_then_the_cookie_opens_what_basic_would(
    tree: Path, users: Path, secret: Path
) -> None:
    async with memory_connection(config(tree, users, secret)) as (client, _, _):
        assert (await client.get("/private/plan.txt")).status == 401
        session = await sign_in(client)
        r = await client.get("/private/plan.txt", f"Cookie: serverio-session={session}\r\n")
        assert (r.status, r.body) == (200, b"PLAN\n")
        assert r.header("cache-control") == "private"
        who = await client.get("/.serverio/whoami", f"Cookie: serverio-session={session}\r\n")
        assert b'"user": "alice"' in who.body and b'"via": "session"' in who.body


async def test_the_session_cookie_is_host_only_httponly_lax_and_secure_on_tls(
    tree: Path, users: Path, secret: Path
) -> None:
    async with memory_connection(config(tree, users, secret)) as (client, _, _):
        page = await client.get("/.serverio/login")
        csp = page.header("content-security-policy") or ""
        assert "default-src 'none'" in csp and "script-src" not in csp
        assert page.header("cache-control") == "no-store"
        await sign_in(client)
    # The attributes themselves (TLS adds Secure and the __Host- prefix).
    _, value = set_cookie("__Host-serverio-session", "t", 5, secure=True)
    assert b"Domain" not in value and b"HttpOnly" in value and b"SameSite=Lax" in value


@pytest.mark.parametrize(
    "cookie",
    [
        "serverio-session=garbage",
        "serverio-session=" + "A" * 5000 + ".B",
        "serverio-session=" + "x" * 20000,
        "serverio-session=a.b.c",
        "serverio-session=\x01",
        "serverio-session=",
    ],
)
async def test_a_hostile_cookie_is_anonymous_never_an_error(
    tree: Path, users: Path, secret: Path, cookie: str
) -> None:
    async with memory_connection(config(tree, users, secret)) as (client, _, _):
        r = await client.get("/private/plan.txt", f"Cookie: {cookie}\r\n")
        # 431: past the head limit (--max-head-size), before any cookie is read.
        assert r.status in (401, 431) and b"PLAN" not in r.body
        if r.status == 401:
            assert (await client.get("/hello.txt", f"Cookie: {cookie}\r\n")).status == 200


async def test_expired_tampered_and_foreign_sessions_are_anonymous(
    tree: Path, users: Path, secret: Path
) -> None:
    async with memory_connection(config(tree, users, secret)) as (client, _, _):
        session = await sign_in(client)
        signer = Signer(SECRET)
        user, tag = signer.open("session", session, time.time()).fields
        expired = signer.sign("session", (user, tag), int(time.time()) - 1)
        forged = Signer(b"o" * 40).sign("session", (user, tag), int(time.time()) + 60)
        wrong_tag = signer.sign("session", (user, "0" * 20), int(time.time()) + 60)
        as_bob = signer.sign("session", ("mallory", tag), int(time.time()) + 60)
        share_as_session = signer.sign("share", ("/private/", "read,list", ""), 2**40)
        tampered = session[:-3] + ("AAA" if not session.endswith("AAA") else "BBB")
        for bad in (expired, forged, wrong_tag, as_bob, share_as_session, tampered):
            r = await client.get("/private/plan.txt", f"Cookie: serverio-session={bad}\r\n")
            assert r.status == 401, bad


def _alice_elsewhere(tree: Path, users: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A users file with a copy of alice's line, one with another hash
    for "alice", and a folder for each (``copied``, ``others``)."""
    line = next(x for x in users.read_text().splitlines() if x.startswith("alice:"))
    copy = tmp_path / "copy.htpasswd"
    copy.write_text(line + "\n")
    other = tmp_path / "other.htpasswd"
    other.write_text(f"alice:{hash_password('another-password', 1000)}\n")
    for d in ("copied", "others"):
        (tree / d).mkdir()
        (tree / d / "x.txt").write_text(d.upper())
    return copy, other


async def test_a_session_stands_for_its_user_under_each_file_with_its_hash(
    tree: Path, users: Path, secret: Path, tmp_path: Path
) -> None:
    """Sessions are judged per users file: a file that holds the very
    hash alice signed in with accepts her session (a copy of her line in
    another file too); a file naming "alice" with another hash (another
    password: maybe another person) does not, and asks for its own
    credentials.  (A session had to match every file naming the user: with
    two passwords alice's session was anonymous everywhere.)"""
    copy, other = _alice_elsewhere(tree, users, tmp_path)
    auth = (
        ("/private/**", str(users)),
        ("/copied/**", str(copy)),
        ("/others/**", str(other)),
    )
    cfg = make_config(tree, auth=auth, secret_file=str(secret))
    async with memory_connection(cfg) as (client, _, _):
        cookie = f"Cookie: serverio-session={await sign_in(client)}\r\n"
        r = await client.get("/private/plan.txt", cookie)
        assert (r.status, r.body) == (200, b"PLAN\n")
        r = await client.get("/copied/x.txt", cookie)
        assert (r.status, r.body) == (200, b"COPIED")
        r = await client.get("/others/x.txt", cookie)
        assert r.status == 401 and b"OTHERS" not in r.body
        # That file's own password still works there, by Basic.
        basic = base64.b64encode(b"alice:another-password").decode()
        r = await client.get("/others/x.txt", f"Authorization: Basic {basic}\r\n")
        assert (r.status, r.body) == (200, b"OTHERS")


async def test_the_login_form_needs_its_csrf_token_and_cookie(
    tree: Path, users: Path, secret: Path
) -> None:
    async with memory_connection(config(tree, users, secret)) as (client, _, _):
        page = await client.get("/.serverio/login")
        nonce = cookies_of(page)["serverio-login"]
        m = re.search(rb'name="csrf" value="([^"]+)"', page.body)
        assert m is not None
        csrf = m.group(1).decode()
        good = {"user": "alice", "password": PASSWORD}
        # No token, a token without its cookie, another cookie, another site.
        for form, headers in (
            (good, f"Cookie: serverio-login={nonce}\r\n"),
            ({**good, "csrf": csrf}, ""),
            ({**good, "csrf": csrf}, "Cookie: serverio-login=other\r\n"),
            (
                {**good, "csrf": csrf},
                f"Cookie: serverio-login={nonce}\r\nOrigin: http://evil.example\r\n",
            ),
        ):
            r = await post(client, "/.serverio/login", urlencode(form), headers)
            assert r.status == 403, (form, headers)
            assert "serverio-session" not in cookies_of(r)
        r = await post(
            client,
            "/.serverio/login",
            urlencode({**good, "password": "wrong", "csrf": csrf}),
            f"Cookie: serverio-login={nonce}\r\n",
        )
        assert r.status == 403 and b"Wrong user or password" in r.body


async def test_login_failures_share_basics_limiter(tree: Path, users: Path, secret: Path) -> None:
    async with memory_connection(config(tree, users, secret)) as (client, _srv, _):
        page = await client.get("/.serverio/login")
        nonce = cookies_of(page)["serverio-login"]
        m = re.search(rb'name="csrf" value="([^"]+)"', page.body)
        assert m is not None
        form = urlencode({"user": "alice", "password": "no", "csrf": m.group(1).decode()})
        statuses = []
        for _ in range(12):
            r = await post(client, "/.serverio/login", form, f"Cookie: serverio-login={nonce}\r\n")
            statuses.append(r.status)
        assert 429 in statuses
        # ... and Basic from the same client is refused too, even right.
        import base64

        token = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
        r = await client.get("/private/plan.txt", f"Authorization: Basic {token}\r\n")
        assert r.status == 429


async def test_sign_out_clears_the_cookie_and_needs_csrf(
    tree: Path, users: Path, secret: Path
) -> None:
    async with memory_connection(config(tree, users, secret)) as (client, _, _):
        session = await sign_in(client)
        jar = f"Cookie: serverio-session={session}\r\n"
        r = await post(client, "/.serverio/logout", "", jar)
        assert r.status == 403
        who = await client.get("/.serverio/whoami", jar)
        csrf = re.search(rb'"csrf": "([^"]+)"', who.body)
        assert csrf is not None
        r = await post(
            client, "/.serverio/logout", urlencode({"csrf": csrf.group(1).decode()}), jar
        )
        assert r.status == 303 and cookies_of(r)["serverio-session"] == ""


# ------------------------------------------------------------ share links


async def share(client: HTTPClient, session: str, path: str, **fields: str) -> Response:
    jar = f"Cookie: serverio-session={session}\r\n"
    who = await client.get("/.serverio/whoami", jar)
    m = re.search(rb'"csrf": "([^"]+)"', who.body)
    assert m is not None
    form = urlencode({"path": path, "csrf": m.group(1).decode(), **fields})
    return await post(client, "/.serverio/share", form, jar)


def link_of(r: Response) -> str:
    import json

    url: str = json.loads(r.body)["url"]
    return "/" + url.split("/", 3)[3]


async def test_a_folder_link_lists_and_reads_inside_and_nothing_beside(
    tree: Path, users: Path, secret: Path
) -> None:
    async with memory_connection(config(tree, users, secret)) as (client, _, _):
        session = await sign_in(client)
        r = await share(client, session, "/private/docs/")
        assert r.status == 201, r.body
        link = link_of(r)
        assert link.startswith("/.serverio/s/") and link.endswith("/")
        listing = await client.get(link)
        assert listing.status == 200 and b"a.txt" in listing.body
        assert listing.header("referrer-policy") == "same-origin"
        got = await client.get(link + "a.txt")
        assert (got.status, got.body) == (200, b"DOC-A\n")
        assert (await client.get(link + "sub/b.txt")).body == b"DOC-B\n"
        # A folder without its slash: redirected to the link's own URL.
        sub = await client.get(link + "sub")
        assert sub.status == 301 and sub.header("location") == link + "sub/"
    # No parent, no sibling, no writes, no WebDAV (a connection each: a
    # malformed target closes it).
    hostile = [
        ("GET", link + "../plan.txt"),
        ("GET", link + "..%2fplan.txt"),
        ("GET", link + "../sibling.txt"),
        ("GET", link.rstrip("/") + "%2f..%2fplan.txt"),
        ("PUT", link + "a.txt"),
        ("DELETE", link + "a.txt"),
        ("PROPFIND", link),
        ("POST", link),
    ]
    for method, target in hostile:
        async with memory_connection(config(tree, users, secret, upload=True)) as (client, _, _):
            r = await client.get(target, "Content-Length: 0\r\n", method=method)
            assert b"PLAN" not in r.body and b"SIBLING" not in r.body, target
            if method != "GET":
                assert r.status == 405, method
            assert (tree / "private" / "docs" / "a.txt").exists()


async def test_a_file_link_serves_that_file_only(tree: Path, users: Path, secret: Path) -> None:
    async with memory_connection(config(tree, users, secret)) as (client, _, _):
        session = await sign_in(client)
        link = link_of(await share(client, session, "/private/plan.txt", expires="60"))
        assert link.endswith("/plan.txt")
        assert (await client.get(link)).body == b"PLAN\n"
        base = link.rsplit("/", 1)[0]
        assert (await client.get(base + "/sibling.txt")).status == 404
        assert (await client.get(base + "/")).body == b"PLAN\n"


async def test_expired_altered_and_revoked_links_never_give_the_content(
    tree: Path, users: Path, secret: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(share_mod, "DENY_RECHECK", 0.0)  # look at the deny file every time
    deny = tmp_path / "deny"
    cfg = config(tree, users, secret, share_deny_file=str(deny))
    signer = Signer(SECRET)
    expired = share_token(
        signer, "/private/plan.txt", frozenset(("read",)), "", int(time.time()) - 1
    )
    async with memory_connection(cfg) as (client, _, _):
        r = await client.get(f"/.serverio/s/{expired}/plan.txt", "Accept: text/html\r\n")
        assert r.status == 410 and b"PLAN" not in r.body and b"expired" in r.body
        session = await sign_in(client)
        link = link_of(await share(client, session, "/private/plan.txt"))
        token = link.split("/")[3]
        altered = token[:-2] + ("AA" if not token.endswith("AA") else "BB")
        r = await client.get(link.replace(token, altered))
        assert r.status == 403 and b"PLAN" not in r.body
        # A token for a sibling path, signed by another secret: 403.
        other = share_token(
            Signer(b"z" * 40), "/private/sibling.txt", frozenset(("read",)), "", 2**40
        )
        assert (await client.get(f"/.serverio/s/{other}/sibling.txt")).status == 403
        assert (await client.get(link)).status == 200
        deny.write_text(f"# revoked\nhttp://t{link}\n")
        r = await client.get(link)
        assert r.status == 403 and b"PLAN" not in r.body


async def test_a_password_link_asks_for_it_first(tree: Path, users: Path, secret: Path) -> None:
    async with memory_connection(config(tree, users, secret)) as (client, _, _):
        session = await sign_in(client)
        link = link_of(await share(client, session, "/private/plan.txt", password="open sesame"))
        r = await client.get(link)
        assert r.status == 200 and b"PLAN" not in r.body and b"password" in r.body
        r = await post(client, link, urlencode({"password": "nope"}))
        assert r.status == 403 and b"PLAN" not in r.body
        r = await post(client, link, urlencode({"password": "open sesame"}))
        assert r.status == 303
        jar = "; ".join(f"{k}={v}" for k, v in cookies_of(r).items())
        got = await client.get(link, f"Cookie: {jar}\r\n")
        assert got.body == b"PLAN\n"


async def test_sharing_needs_a_user_and_the_rights_it_grants(
    tree: Path, users: Path, secret: Path
) -> None:
    async with memory_connection(config(tree, users, secret)) as (client, _, _):
        r = await post(client, "/.serverio/share", urlencode({"path": "/hello.txt"}))
        assert r.status == 401 and r.header("content-type") == "application/problem+json"
        import base64

        token = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
        basic = f"Authorization: Basic {token}\r\n"
        r = await post(client, "/.serverio/share", urlencode({"path": "/private/plan.txt"}), basic)
        assert r.status == 201, r.body
        for bad in ("../etc/passwd", "/private/../x", "/.hidden", "relative", "/a\x00b"):
            r = await post(client, "/.serverio/share", urlencode({"path": bad}), basic)
            assert r.status == 400, bad
        r = await post(
            client, "/.serverio/share", urlencode({"path": "/hello.txt", "mode": "upload"}), basic
        )
        assert r.status == 400
        r = await post(
            client, "/.serverio/share", urlencode({"path": "/x", "expires": "soon"}), basic
        )
        assert r.status == 400
        # Cookie sessions need the CSRF field.
        session = await sign_in(client)
        r = await post(
            client,
            "/.serverio/share",
            urlencode({"path": "/private/plan.txt"}),
            f"Cookie: serverio-session={session}\r\n",
        )
        assert r.status == 403


async def test_a_drop_box_takes_uploads_and_shows_nothing(
    tree: Path, users: Path, secret: Path
) -> None:
    cfg = config(tree, users, secret, upload=True)
    async with memory_connection(cfg) as (client, _, _):
        session = await sign_in(client)
        r = await share(client, session, "/private/docs/", mode="upload")
        assert r.status == 201, r.body
        link = link_of(r)
        page = await client.get(link)
        assert page.status == 200 and b"a.txt" not in page.body and b"multipart" in page.body
        assert (await client.get(link + "a.txt")).status == 404
        boundary = "XyZ"
        body = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="new.txt"\r\n'
            f"Content-Type: text/plain\r\n\r\nDROPPED\r\n--{boundary}--\r\n"
        ).encode()
        await client.send_raw(
            (
                f"POST {link} HTTP/1.1\r\nHost: t\r\n"
                f"Content-Type: multipart/form-data; boundary={boundary}\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            ).encode()
            + body
        )
        r = await client.read_response()
        assert r.status == 303, (r.status, r.body)
        assert r.header("location") == link
        assert (tree / "private" / "docs" / "new.txt").read_text() == "DROPPED"


# ------------------------------------------------------------ trusted header


async def test_the_trusted_header_counts_only_from_a_trusted_proxy(
    tree: Path, users: Path, secret: Path
) -> None:
    trusted = config(
        tree, users, secret, trusted_user_header="remote-user", trusted_proxies=("127.0.0.1",)
    )
    untrusted = config(
        tree, users, secret, trusted_user_header="remote-user", trusted_proxies=("10.0.0.0/8",)
    )
    async with running_server(trusted) as (_, port):
        c = await connect(port)
        try:
            r = await c.get("/private/plan.txt", "Remote-User: alice\r\n")
            assert (r.status, r.body) == (200, b"PLAN\n")
            for hostile in ("mallory", "", "a" * 300, "alice, bob"):
                r = await c.get("/private/plan.txt", f"Remote-User: {hostile}\r\n")
                assert r.status == 401, hostile
        finally:
            await c.stream.aclose()
    async with running_server(untrusted) as (_, port):
        c = await connect(port)
        try:
            r = await c.get("/private/plan.txt", "Remote-User: alice\r\n")
            assert r.status == 401 and b"PLAN" not in r.body
        finally:
            await c.stream.aclose()


# ------------------------------------------------------------ HTTP/2


async def test_sign_in_and_a_share_link_over_http2(tree: Path, users: Path, secret: Path) -> None:
    cfg = config(tree, users, secret)
    async with memory_connection(cfg) as (client, _srv, _):
        session = await sign_in(client)
        link = link_of(await share(client, session, "/private/docs/"))
    async with h2_memory(cfg) as (h2, _, _):
        r = await h2.get("/private/plan.txt", [("cookie", f"serverio-session={session}")])
        assert r.status == 200 and r.body == b"PLAN\n"
        # HTTP/2 splits cookies into crumbs (RFC 9113 §8.2.3).
        crumbs = [("cookie", "a=1"), ("cookie", f"serverio-session={session}")]
        assert (await h2.get("/private/plan.txt", crumbs)).status == 200
        r = await h2.get(link + "a.txt")
        assert r.status == 200 and r.body == b"DOC-A\n"
        r = await h2.get(link + "../plan.txt")
        assert b"PLAN" not in r.body


def test_the_proxy_drops_the_untrusted_user_header_and_serverios_cookies() -> None:
    from serverio.config import proxy_route
    from serverio.proxy.routes import request_fields

    route = proxy_route("/api", "http://127.0.0.1:3000", "t")
    fields = [
        (b"remote-user", b"admin"),
        (b"cookie", b"theirs=1; serverio-session=TOKEN; __Host-serverio-session=T2"),
        (b"cookie", b"serverio-login=N"),
    ]

    def upstream(trusted: bool) -> dict[bytes, bytes]:
        out = request_fields(
            route,
            fields,
            host=b"t",
            peer="192.0.2.1",
            trusted=trusted,
            tls=False,
            rewrite_host=False,
            length=None,
            has_content=False,
            user_header=b"remote-user",
            own_cookies=True,
        )
        return dict(out)

    untrusted = upstream(False)
    assert b"remote-user" not in untrusted
    assert untrusted[b"cookie"] == b"theirs=1"
    assert upstream(True)[b"remote-user"] == b"admin"


async def test_a_browser_401_links_to_the_sign_in_page_and_listings_show_the_corner(
    tree: Path, users: Path, secret: Path
) -> None:
    async with memory_connection(config(tree, users, secret)) as (client, _, _):
        r = await client.get("/private/plan.txt?x=1", "Accept: text/html\r\n")
        assert r.status == 401 and r.header("www-authenticate") is not None
        assert b'href="/.serverio/login?next=/private/plan.txt%3Fx%3D1"' in r.body
        plain = await client.get("/private/plan.txt")
        assert plain.status == 401 and b"login" not in plain.body
        listing = await client.get("/incoming/")
        assert b'id="account"' in listing.body
        csp = listing.header("content-security-policy") or ""
        assert "connect-src 'self'" in csp
        scripts = re.findall(rb"<script>(.*?)</script>", listing.body, re.S)
        import base64
        import hashlib

        for script in scripts:  # every inline script is allowed by its hash
            digest = base64.b64encode(hashlib.sha256(script).digest()).decode()
            assert f"'sha256-{digest}'" in csp


async def test_the_sign_in_form_and_a_share_over_http2(
    tree: Path, users: Path, secret: Path
) -> None:
    cfg = config(tree, users, secret)
    async with h2_memory(cfg) as (h2, _, _):
        page = await h2.get("/.serverio/login")
        assert page.status == 200
        set_cookie_value = dict(page.header_list)[b"set-cookie"].decode()
        nonce = set_cookie_value.split(";", 1)[0].split("=", 1)[1]
        m = re.search(rb'name="csrf" value="([^"]+)"', bytes(page.body))
        assert m is not None

        async def post_h2(path: str, form: str, extra: list[tuple[str, str]]) -> Any:
            body = form.encode()
            headers = [
                ("content-type", "application/x-www-form-urlencoded"),
                ("content-length", str(len(body))),
                *extra,
            ]
            sid = h2.request(path, "POST", headers, end_stream=False)
            h2.conn.send_data(sid, body, end_stream=True)
            await h2.flush()
            (r,) = await h2.wait(sid)
            return r

        form = urlencode(
            {
                "csrf": m.group(1).decode(),
                "user": "alice",
                "password": PASSWORD,
                "next": "/private/",
            }
        )
        r = await post_h2("/.serverio/login", form, [("cookie", f"serverio-login={nonce}")])
        assert r.status == 303, bytes(r.body)
        sets = [v.decode() for n, v in r.header_list if n == b"set-cookie"]
        [session] = [v.split(";", 1)[0].split("=", 1)[1] for v in sets if "serverio-session" in v]
        jar = [("cookie", f"serverio-session={session}")]
        who = await h2.get("/.serverio/whoami", jar)
        csrf = json.loads(bytes(who.body))["csrf"]
        assert json.loads(bytes(who.body))["user"] == "alice", bytes(who.body)
        r = await post_h2(
            "/.serverio/share", urlencode({"path": "/private/plan.txt", "csrf": csrf}), jar
        )
        assert r.status == 201, bytes(r.body)
        link = "/" + json.loads(bytes(r.body))["url"].split("/", 3)[3]
        got = await h2.get(link)
        assert got.status == 200 and bytes(got.body) == b"PLAN\n"


# ------------------------------------------------------------ rights (issue 44)


async def test_the_access_log_names_session_and_trusted_header_users(
    tree: Path, users: Path, secret: Path
) -> None:
    """A session's and a trusted header's user reach the access hook as its
    verified ``user`` (Access.user): the log's user field names them."""
    import io

    import trio

    from serverio import Server
    from serverio.net.connection import ConnectionTask
    from serverio.observe.accesslog import AccessLog

    from .conftest import HTTPClient

    out = io.StringIO()
    cfg = config(
        tree, users, secret, trusted_user_header="remote-user", trusted_proxies=("127.0.0.1",)
    )
    srv = Server(cfg, access_log=AccessLog("common", out))
    client_end, server_end = trio.testing.memory_stream_pair()
    conn = ConnectionTask(srv.env, server_end, "127.0.0.1")  # a trusted proxy's address
    async with srv.handler.running(), trio.open_nursery() as nursery:
        nursery.start_soon(conn.run)
        client = HTTPClient(client_end, server_end)
        session = await sign_in(client)
        r = await client.get("/private/plan.txt", f"Cookie: serverio-session={session}\r\n")
        assert (r.status, r.body) == (200, b"PLAN\n")
        r = await client.get("/private/sibling.txt", "Remote-User: bob\r\n")
        assert (r.status, r.body) == (200, b"SIBLING\n")
        nursery.cancel_scope.cancel()
    srv.opener.close()
    srv.access_log.pipe.close()
    lines = out.getvalue().splitlines()
    assert any(" - alice [" in line and "/private/plan.txt" in line for line in lines), lines
    assert any(" - bob [" in line and "/private/sibling.txt" in line for line in lines), lines


async def test_sharing_asks_the_share_right_of_access_rules(
    tree: Path, users: Path, secret: Path
) -> None:
    """With [[access]]/--allow rules, making a link asks Right.SHARE on its
    path (besides the rights the link grants): reading is not enough."""
    allow = ("alice:read,list@/private", "bob:read,list,share@/private")
    cfg = make_config(tree, auth_file=str(users), allow=allow, secret_file=str(secret))
    async with memory_connection(cfg) as (client, _, _):
        import base64

        for user, password, want in (("alice", PASSWORD, 403), ("bob", "builder", 201)):
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            basic = f"Authorization: Basic {token}\r\n"
            r = await post(
                client, "/.serverio/share", urlencode({"path": "/private/plan.txt"}), basic
            )
            assert r.status == want, (user, r.body)
        # The link's own rights are asked too: bob may not share what he
        # may not read.
        r = await post(client, "/.serverio/share", urlencode({"path": "/hello.txt"}), basic)
        assert r.status == 403, r.body


async def test_a_drop_box_never_replaces_an_existing_file(
    tree: Path, users: Path, secret: Path
) -> None:
    """A drop box grants upload, not overwrite: a file already there (one
    dropped before, or one of the folder's own) is not replaced, even where
    the upload form would (--on-duplicate overwrite)."""
    cfg = config(tree, users, secret, upload=True, min_free_space=0, on_duplicate="overwrite")
    async with memory_connection(cfg) as (client, _, _):
        session = await sign_in(client)
        r = await share(client, session, "/private/docs/", mode="upload")
        assert r.status == 201, r.body
        link = link_of(r)

        async def drop(name: str, data: str) -> Response:
            body = (
                f'--XyZ\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
                f"Content-Type: text/plain\r\n\r\n{data}\r\n--XyZ--\r\n"
            ).encode()
            await client.send_raw(
                (
                    f"POST {link} HTTP/1.1\r\nHost: t\r\n"
                    "Content-Type: multipart/form-data; boundary=XyZ\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n"
                ).encode()
                + body
            )
            return await client.read_response()

        assert (await drop("new.txt", "FIRST")).status == 303
        r = await drop("new.txt", "SECOND")
        assert r.status == 403, (r.status, r.body)
        assert (tree / "private" / "docs" / "new.txt").read_text() == "FIRST"
        r = await drop("a.txt", "REPLACED")
        assert r.status == 403, (r.status, r.body)
        assert (tree / "private" / "docs" / "a.txt").read_text() == "DOC-A\n"


# ------------------------------------------------------------ WebDAV lock owners

LOCKINFO = (
    b'<?xml version="1.0" encoding="utf-8"?><D:lockinfo xmlns:D="DAV:">'
    b"<D:lockscope><D:exclusive/></D:lockscope><D:locktype><D:write/></D:locktype>"
    b"</D:lockinfo>"
)


async def dav(
    client: HTTPClient, method: str, path: str, headers: str, body: bytes = b""
) -> Response:
    head = f"{method} {path} HTTP/1.1\r\nHost: t\r\n{headers}Content-Length: {len(body)}\r\n\r\n"
    await client.send_raw(head.encode() + body)
    return await client.read_response()


def basic_field(user: str, password: str) -> str:
    return f"Authorization: Basic {base64.b64encode(f'{user}:{password}'.encode()).decode()}\r\n"


async def _lock_belongs_to_alice(client: HTTPClient, signed_in: str) -> None:
    """A LOCK taken by alice signed in otherwise than by Basic (``signed_in``:
    her cookie or the trusted header) is hers: bob can neither use its token
    nor UNLOCK it (403), alice by Basic can (one principal however she signed
    in).  Its owner was nobody (the anonymous principal) before."""
    r = await dav(client, "LOCK", "/private/plan.txt", signed_in, LOCKINFO)
    assert r.status == 200, (r.status, r.body)
    token = r.header("lock-token")
    assert token is not None
    bob = basic_field("bob", "builder")
    r = await dav(client, "PUT", "/private/plan.txt", f"{bob}If: ({token})\r\n", b"BOB")
    assert r.status == 423, r.status
    r = await dav(client, "UNLOCK", "/private/plan.txt", f"{bob}Lock-Token: {token}\r\n")
    assert r.status == 403, r.status
    alice = basic_field("alice", PASSWORD)
    r = await dav(client, "PUT", "/private/plan.txt", f"{alice}If: ({token})\r\n", b"ALICE")
    assert r.status in (200, 204), r.status
    r = await dav(client, "UNLOCK", "/private/plan.txt", f"{alice}Lock-Token: {token}\r\n")
    assert r.status == 204, r.status


async def test_a_signed_in_users_lock_is_theirs(tree: Path, users: Path, secret: Path) -> None:
    cfg = config(tree, users, secret, webdav=True, upload=True, min_free_space=0)
    async with memory_connection(cfg) as (client, _, _):
        session = await sign_in(client)
        await _lock_belongs_to_alice(client, f"Cookie: serverio-session={session}\r\n")
    assert (tree / "private" / "plan.txt").read_text() == "ALICE"


async def test_a_trusted_header_users_lock_is_theirs(tree: Path, users: Path, secret: Path) -> None:
    cfg = config(
        tree,
        users,
        secret,
        webdav=True,
        upload=True,
        min_free_space=0,
        trusted_user_header="remote-user",
        trusted_proxies=("127.0.0.1",),
    )
    async with running_server(cfg) as (_, port):
        c = await connect(port)
        try:
            await _lock_belongs_to_alice(c, "Remote-User: alice\r\n")
        finally:
            await c.stream.aclose()


async def test_sign_in_with_access_rules_only(tree: Path, users: Path, secret: Path) -> None:
    """--auth-file with --allow rules names the users the sign-in page
    checks (no [[auth]] rule at all): alice signs in and her cookie carries
    her rights (the form said "Wrong user or password." before)."""
    allow = ("anonymous:read@/hello.txt", "alice:read,list@/private")
    cfg = make_config(tree, auth_file=str(users), allow=allow, secret_file=str(secret))
    async with memory_connection(cfg) as (client, _, _):
        assert (await client.get("/private/plan.txt")).status == 401
        session = await sign_in(client)
        r = await client.get("/private/plan.txt", f"Cookie: serverio-session={session}\r\n")
        assert (r.status, r.body) == (200, b"PLAN\n")


def _new_password(users: Path) -> None:
    users.write_text(f"alice:{hash_password('a-new-password', 1000)}\n")


async def test_a_session_of_a_changed_password_shares_nothing(
    tree: Path, users: Path, secret: Path
) -> None:
    """After alice's password changed (the users file, a restart), her old
    cookie is nobody: no user in whoami, and no share link minted in her
    name (the link endpoint took the cookie's user as signed in)."""
    async with memory_connection(config(tree, users, secret)) as (client, _, _):
        session = await sign_in(client)
    _new_password(users)
    async with memory_connection(config(tree, users, secret)) as (client, _, _):
        jar = f"Cookie: serverio-session={session}\r\n"
        assert json.loads((await client.get("/.serverio/whoami", jar)).body)["user"] is None
        assert (await client.get("/private/plan.txt", jar)).status == 401
        r = await share(client, session, "/private/plan.txt")
        assert r.status == 401, (r.status, r.body)
