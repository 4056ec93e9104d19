"""A property test of the login feature's principals against an oracle of
its own: random trees of protected and public files, random requests with
no credentials, Basic, a session cookie (valid, expired, tampered, for an
unknown user, of another secret), the trusted user header (from a trusted
and an untrusted peer) and share links (valid, expired, tampered, for a
sibling path, escapes through ``..``), over HTTP/1.1 and HTTP/2.  No
answer may carry a byte the oracle says the principal may not read, and
every allowed read gets the file."""

from __future__ import annotations

import base64
import random
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from serverio.login.share import share_token
from serverio.signing import Signer
from serverio.site.passwords import hash_password
from serverio.site.principal import password_tag

from .conftest import connect, make_config, memory_connection, running_server
from .h2client import h2_memory

SECRET = b"p" * 40
USERS = {"alice": "wonder land", "bob": "builder"}
# Protected areas: path prefix -> who may read (the users file of the rule).
AREAS = {"/a/": ("alice", "bob"), "/c/": ("bob",)}
DIRS = ("a", "a/b", "a/b2", "c", "pub", "pub/d")


@dataclass(frozen=True)
class Who:
    label: str
    headers: tuple[tuple[str, str], ...] = ()
    user: str | None = None  # who the oracle takes it for (None: anonymous)
    share: tuple[str, frozenset[str]] | None = None  # a link's grant
    link: str = ""  # the link's URL prefix (/.serverio/s/TOKEN/)


def _tree(root: Path, rng: random.Random) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    for d in DIRS:
        (root / d).mkdir(parents=True, exist_ok=True)
        for i in range(rng.randint(1, 3)):
            path = f"/{d}/f{i}.txt"
            body = f"SECRET-{d}-{i}-{rng.getrandbits(32):08x}\n".encode()
            (root / path.lstrip("/")).write_bytes(body)
            files[path] = body
    # In-root symlinks out of a public and a protected folder into /c/ (bob's):
    # the rules of where they lead apply, and no share link reaches past them.
    (root / "pub" / "d" / "link.txt").symlink_to("../../c/f0.txt")
    (root / "a" / "b" / "up").symlink_to("../../c")
    return files


# Targets through the links above (they reach /c/f0.txt).
LINKED = ("/pub/d/link.txt", "/a/b/up/f0.txt")


def _may(who: Who, path: str) -> bool:
    if who.share is not None:
        top, rights = who.share
        return "read" in rights and (path == top or (top.endswith("/") and path.startswith(top)))
    for prefix, readers in AREAS.items():
        if path.startswith(prefix):
            return who.user in readers
    return True


def _principals(rng: random.Random, users_hashes: dict[str, str]) -> list[Who]:
    signer = Signer(SECRET)
    now = int(time.time())

    def cookie(user: str, tag: str, expires: int, key: Signer = signer) -> tuple[str, str]:
        return ("cookie", f"x=1; serverio-session={key.sign('session', (user, tag), expires)}")

    tags = {u: password_tag(h) for u, h in users_hashes.items()}
    good = signer.sign("session", ("alice", tags["alice"]), now + 600)
    flip = good[:-4] + ("AAAA" if not good.endswith("AAAA") else "BBBB")
    basic = base64.b64encode(f"bob:{USERS['bob']}".encode()).decode()
    out = [
        Who("anonymous"),
        Who("basic bob", (("authorization", f"Basic {basic}"),), user="bob"),
        Who("cookie alice", (cookie("alice", tags["alice"], now + 600),), user="alice"),
        Who("cookie bob", (cookie("bob", tags["bob"], now + 600),), user="bob"),
        Who("cookie expired", (cookie("bob", tags["bob"], now - 1),)),
        Who("cookie tampered", (("cookie", f"serverio-session={flip}"),)),
        Who("cookie stale tag", (cookie("bob", "0" * 20, now + 600),)),
        Who("cookie unknown", (cookie("mallory", tags["bob"], now + 600),)),
        Who("cookie other secret", (cookie("bob", tags["bob"], now + 600, Signer(b"q" * 40)),)),
        Who("header untrusted", (("remote-user", "bob"),)),
    ]
    for top in rng.sample(["/a/b/", "/c/", "/pub/d/", "/a/", "/c/f0.txt", "/a/b/f0.txt"], 3):
        rights = frozenset(("read", "list")) if top.endswith("/") else frozenset(("read",))
        tok = share_token(signer, top, rights, "", now + 600)
        out.append(Who(f"link {top}", share=(top, rights), link=f"/.serverio/s/{tok}/"))
        expired = share_token(signer, top, rights, "", now - 1)
        out.append(
            Who(f"expired link {top}", share=(top, frozenset()), link=f"/.serverio/s/{expired}/")
        )
        bad = tok[:-3] + ("AAA" if not tok.endswith("AAA") else "BBB")
        out.append(
            Who(f"tampered link {top}", share=(top, frozenset()), link=f"/.serverio/s/{bad}/")
        )
    return out


def _requests(who: Who, files: dict[str, bytes], rng: random.Random) -> list[tuple[str, str]]:
    """(target, the real path the oracle says it reaches; "" for none: a
    listing, an escape, a name the link does not grant)."""
    paths = rng.sample(sorted(files), min(8, len(files)))
    if not who.link:
        return [(p, p) for p in paths] + [(t, "") for t in LINKED]
    top = who.share[0] if who.share else "/"
    out: list[tuple[str, str]] = []
    for p in paths:
        name = p.rsplit("/", 1)[1]
        if top.endswith("/"):
            if p.startswith(top):
                out.append((who.link + p[len(top) :], p))
            # escapes: the parent, a sibling folder sharing the prefix
            out.append((who.link + "../" + name, ""))
            out.append((who.link.rstrip("/") + "2/" + name, ""))
        else:
            # a file link serves its one file under its own name only
            out.append((who.link + name, top if name == top.rsplit("/", 1)[1] else ""))
            out.append((who.link + "../" + name, ""))
    out.append((who.link, "" if top.endswith("/") else top))
    out += [(who.link + t[len(top) :], "") for t in LINKED if t.startswith(top)]
    return out


def _check(
    who: Who, target: str, real: str, status: int, body: bytes, files: dict[str, bytes]
) -> None:
    for path, content in files.items():
        if content in body:
            allowed = _may(who, path) if not who.link else (path == real and _may(who, path))
            assert allowed, (who.label, target, path, status)
    if real and _may(who, real):
        assert status == 200 and body == files[real], (who.label, target, status)
    # The link's own URL (not an escape, not another token): the clear refusal.
    on_link = who.link and target.startswith(who.link) and "/../" not in target
    if on_link and who.label.startswith("expired"):
        assert status == 410, (who.label, target, status)
    if on_link and who.label.startswith("tampered"):
        assert status == 403, (who.label, target, status)


@pytest.mark.parametrize("seed", range(3))
async def test_no_principal_reads_beyond_its_grant(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    root = tmp_path / "www"
    files = _tree(root, rng)
    etc = tmp_path / "etc"
    etc.mkdir()
    hashes = {u: hash_password(p, 1000) for u, p in USERS.items()}
    (etc / "ab").write_text("".join(f"{u}:{hashes[u]}\n" for u in AREAS["/a/"]))
    (etc / "c").write_text("".join(f"{u}:{hashes[u]}\n" for u in AREAS["/c/"]))
    (etc / "secret").write_bytes(SECRET)
    cfg = make_config(
        root,
        auth=(("/a/**", str(etc / "ab")), ("/c/**", str(etc / "c"))),
        secret_file=str(etc / "secret"),
        trusted_user_header="remote-user",
    )
    for who in _principals(rng, hashes):
        targets = _requests(who, files, rng)
        extra = "".join(f"{k}: {v}\r\n" for k, v in who.headers)
        for target, real in targets:
            async with memory_connection(cfg) as (client, _, _):
                r = await client.get(target, extra)
                _check(who, target, real, r.status, r.body, files)
        async with h2_memory(cfg) as (h2, _, _):
            for target, real in targets:
                got = await h2.get(target, list(who.headers))
                _check(who, target, real, got.status, bytes(got.body), files)


async def test_the_trusted_header_from_a_trusted_peer_reads_as_that_user(tmp_path: Path) -> None:
    rng = random.Random(7)
    root = tmp_path / "www"
    files = _tree(root, rng)
    etc = tmp_path / "etc"
    etc.mkdir()
    hashes = {u: hash_password(p, 1000) for u, p in USERS.items()}
    (etc / "ab").write_text("".join(f"{u}:{hashes[u]}\n" for u in AREAS["/a/"]))
    (etc / "c").write_text("".join(f"{u}:{hashes[u]}\n" for u in AREAS["/c/"]))
    common = dict(
        auth=(("/a/**", str(etc / "ab")), ("/c/**", str(etc / "c"))),
        secret_file=str(etc / "secret"),
        trusted_user_header="remote-user",
    )
    (etc / "secret").write_bytes(SECRET)
    for trusted in ("127.0.0.1", "10.0.0.0/8"):
        cfg = make_config(root, trusted_proxies=(trusted,), **common)
        async with running_server(cfg) as (_, port):
            c = await connect(port)
            try:
                for user in ("alice", "bob", "mallory"):
                    who = Who(user, user=user if trusted == "127.0.0.1" else None)
                    for path in rng.sample(sorted(files), 6):
                        r = await c.get(path, f"Remote-User: {user}\r\n")
                        _check(who, path, path, r.status, r.body, files)
            finally:
                await c.stream.aclose()
