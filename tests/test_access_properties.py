"""A property test of rights per user and path (issue 44): generated
``[[access]]`` / ``--allow`` configurations, trees with in-root symlinks
and requests, each answer and each change of the tree checked against an
oracle of its own.

What it generates (:func:`_cases`):

* a tree from the universe of tests/test_rights_properties.py: files in
  up to two levels of collections, each with a unique marker, and in-root
  symlinks to files and directories (``pub/la -> ../a``, ``c/lf ->
  ../a/b/x.txt`` ...);
* users alice and bob (one users file, ``--auth-file``), a group
  ``staff`` of some of them, and one to four rules over overlapping globs
  (``/**``, ``/a/**``, ``/a/b/**``, ``**/*.key`` ...), each giving some of
  ``anonymous``, ``authenticated``, ``alice``, ``bob``, ``staff`` a set of
  rights; a rule whose glob is ``PREFIX/**`` is given as ``--allow`` half
  of the time, and two rules may share a glob;
* the server: ``--webdav`` or ``--upload --on-duplicate overwrite``, with
  ``--archives``, over HTTP/1.1 or HTTP/2 (memory streams);
* three to eight requests, each anonymous, as alice, as bob or with a
  wrong password: GET and HEAD of files and listings (HTML, JSON,
  ``?archive=zip``), PUT, DELETE, a form upload, COPY / MOVE, PROPFIND
  (Depth 0, 1, infinity), LOCK (depth infinity or 0) and MKCOL, through
  links too.

The oracle (:class:`Rights`) is written from the documented rules, not
from serverio's code: the globs are matched by segments
(``_oracle_match``), the rule that decides a path is the matching one
with the longest literal start, then the most literal characters, then
one without ``**``, then the last declared (rules with one glob are one rule); a signed-in user
has ``anonymous``'s, ``authenticated``'s, their own and their groups'
rights there; a wrong password is an anonymous client.  A path reached
through a link needs the right on the named path and on where it leads
(``os.path.realpath``).  Checked:

* a marker appears in an answer (a zip unpacked) only if the client may
  ``read`` a file that held it;
* a listing (HTML, JSON, an archive) is answered 200 only to a client
  that may ``list`` the directory; PROPFIND names a file only to a client
  that may ``read`` it, a collection only to one that may ``list`` it;
* every entry created is one the client may ``upload`` (a collection:
  ``upload`` or ``mkdir``), every file replaced one it may ``overwrite``,
  every entry removed one it may ``delete``, on its real path and the
  path the request named; a marker copied to a new place was readable;
* a granted LOCK: the client may ``lock`` its URL and (depth infinity)
  every URL below it in the universe (the known gap of links below a
  lock, tests/test_rights_properties.py, is exempted);
* a GET of a file the client may read (both paths) is answered 200: the
  rules do not refuse what they give;
* no answer is a 5xx and no upload temporary is left.

Bounded: 40 examples by default (``SERVERIO_ACCESS_EXAMPLES`` for a hunt,
with ``--hypothesis-seed``), at most eight requests each, 20 s per example,
memory streams.
"""

from __future__ import annotations

import os
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from serverio import Server
from serverio.config import Config
from serverio.site.passwords import hash_password

from .conftest import make_config
from .test_dav import hrefs, temps
from .test_dav_members import Answer, _oracle_match, client_for
from .test_rights_properties import (
    _COLLECTIONS,
    _DIRS,
    _FILE_URLS,
    _FILES,
    _GONE,
    _LINKS,
    _NEW_COLLECTIONS,
    _NEW_FILES,
    _UNIVERSE,
    PASSWORDS,
    Entry,
    Op,
    _answer_markers,
    _markers,
    _mp,
    _named,
    _request,
    snapshot,
)

pytestmark = pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")

RIGHTS = ("read", "list", "upload", "overwrite", "delete", "mkdir", "lock", "share")
PRINCIPALS = ("anonymous", "authenticated", "alice", "bob", "staff")
_GLOBS = ["/**", "/a/**", "/a/b/**", "**/*.key", "/b/**", "/c/**", "/pub/**", "/out/**", "/a/*"]
# Rights sets drawn per principal: reads, writes, everything, a few alone
# (the writes without their neighbour: upload without overwrite...).
_SETS = [
    ("read", "list"),
    ("read",),
    ("list",),
    ("upload",),
    ("read", "list", "upload"),
    ("upload", "overwrite"),
    ("overwrite",),
    ("delete",),
    ("read", "delete"),
    ("mkdir", "upload"),
    ("mkdir",),
    ("lock", "upload", "overwrite"),
    ("lock",),
    RIGHTS,
]


@dataclass(frozen=True)
class AccessCase:
    mode: str  # "dav" | "upload"
    proto: str
    files: tuple[str, ...]
    links: tuple[tuple[str, str], ...]
    staff: tuple[str, ...]
    # (glob, ((principal, rights), ...), as --allow)
    rules: tuple[tuple[str, tuple[tuple[str, tuple[str, ...]], ...], bool], ...]
    ops: tuple[Op, ...]


_METHODS = {
    "upload": ["GET", "HEAD", "ARCHIVE", "JSON", "PUT", "PUT", "DELETE", "POST", "POST"],
    "dav": [
        *("GET", "HEAD", "ARCHIVE", "JSON", "PUT", "PUT", "DELETE"),
        *("COPY", "MOVE", "TREE", "PROPFIND", "PROPFIND", "LOCK", "MKCOL"),
    ],
}


# Who sends a request: signed-in users twice as often (their rights differ
# from anonymous's; a wrong password is decided as anonymous).
_WHO = ["anon", "alice", "alice", "bob", "bob", "wrong"]


@st.composite
def _op(draw: st.DrawFn, mode: str, files: tuple[str, ...]) -> Op:
    """One request; a PUT or DELETE names an existing file two times in
    three (the difference between upload and overwrite, and delete)."""
    method = draw(st.sampled_from(_METHODS[mode]))
    who = draw(st.sampled_from(_WHO))
    dirs = [*_COLLECTIONS, "/out/"]
    present = ["/" + f for f in files]
    if method in ("PUT", "DELETE") and draw(st.integers(0, 2)) > 0:
        return Op(method, who, draw(st.sampled_from(present)))
    if method in ("ARCHIVE", "JSON", "POST"):
        name = draw(st.sampled_from(["x.txt", "y.key", "n.txt"])) if method == "POST" else ""
        return Op(method, who, draw(st.sampled_from(dirs)), name)
    if method == "PUT":
        return Op(method, who, draw(st.sampled_from([*_FILE_URLS, *_NEW_FILES])))
    if method == "MKCOL":
        return Op(method, who, draw(st.sampled_from(_NEW_COLLECTIONS)))
    if method in ("COPY", "MOVE"):
        dst = draw(st.sampled_from([*_NEW_FILES, *_NEW_COLLECTIONS, *_UNIVERSE]))
        return Op(method, who, draw(st.sampled_from(_UNIVERSE)), dst, draw(st.sampled_from("TF")))
    if method == "TREE":
        verb = draw(st.sampled_from(["COPY", "MOVE", "DELETE"]))
        dst = draw(st.sampled_from(["/out/new/", "/out/", "/pub/new/", "/pub/la/new/"]))
        return Op(verb, who, draw(st.sampled_from(dirs)), "" if verb == "DELETE" else dst, "T")
    if method == "PROPFIND":
        return Op(method, who, draw(st.sampled_from(_UNIVERSE)), "", draw(st.sampled_from("01i")))
    if method == "LOCK":
        return Op(method, who, draw(st.sampled_from(_UNIVERSE)), "", draw(st.sampled_from("i0")))
    return Op(method, who, draw(st.sampled_from(_UNIVERSE)))


@st.composite
def _rule(draw: st.DrawFn) -> tuple[str, tuple[tuple[str, tuple[str, ...]], ...], bool]:
    glob = draw(st.sampled_from(_GLOBS))
    who = draw(st.lists(st.sampled_from(PRINCIPALS), min_size=1, max_size=4, unique=True))
    grants = tuple((p, draw(st.sampled_from(_SETS))) for p in who)
    # A PREFIX/** glob may come from --allow (PATH is then the prefix).
    cli = glob.endswith("/**") and "*" not in glob[:-3] and bool(draw(st.booleans()))
    return glob, grants, cli


@st.composite
def _cases(draw: st.DrawFn) -> AccessCase:
    mode = draw(st.sampled_from(["dav", "upload"]))
    files = tuple(draw(st.lists(st.sampled_from(_FILES), min_size=4, max_size=9, unique=True)))
    links = tuple(draw(st.lists(st.sampled_from(_LINKS), max_size=3, unique=True)))
    staff = tuple(draw(st.lists(st.sampled_from(["alice", "bob"]), max_size=2, unique=True)))
    rules = tuple(draw(st.lists(_rule(), min_size=1, max_size=4)))
    ops = tuple(draw(st.lists(_op(mode, files), min_size=3, max_size=8)))
    proto = draw(st.sampled_from(["h1", "h2"]))
    return AccessCase(mode, proto, files, links, staff, rules, ops)


# ------------------------------------------------------------ the oracle


def _specificity(glob: str) -> tuple[int, int, bool]:
    """The documented precedence: the literal start (before the first
    wildcard), then the count of literal characters, then no ``**``."""
    start = 0
    while start < len(glob) and glob[start] not in "*?":
        start += 1
    return start, sum(1 for c in glob if c not in "*?"), "**" not in glob


class Rights:
    """What each client may do where, from the case's rules alone."""

    def __init__(self, case: AccessCase, root: Path) -> None:
        self.root = root
        self.staff = set(case.staff)
        merged: dict[str, dict[str, set[str]]] = {}
        last: dict[str, int] = {}
        # The file's [[access]] tables first, then --allow (command line).
        ordered = [r for r in case.rules if not r[2]] + [r for r in case.rules if r[2]]
        for i, (glob, grants, _) in enumerate(ordered):
            table = merged.setdefault(glob, {})
            for who, rights in grants:
                table.setdefault(who, set()).update(rights)
            last[glob] = i
        self.rules = merged
        self.order = last

    def decider(self, path: str) -> str | None:
        """The glob of the rule that decides ``path`` (None: none matches)."""
        matching = [g for g in self.rules if _oracle_match(g, path)]
        if not matching:
            return None
        return max(matching, key=lambda g: (*_specificity(g), self.order[g]))

    def rights(self, who: str, path: str) -> set[str]:
        glob = self.decider(path)
        if glob is None:
            return set()
        table = self.rules[glob]
        out = set(table.get("anonymous", ()))
        if who in ("alice", "bob"):
            out |= table.get("authenticated", set()) | table.get(who, set())
            if who in self.staff:
                out |= table.get("staff", set())
        return out

    def resolve(self, url: str) -> str | None:
        top = os.path.realpath(self.root)
        real = os.path.realpath(os.path.join(top, url.strip("/")))
        if real == top:
            return ""
        if not real.startswith(top + os.sep):
            return None
        return os.path.relpath(real, top).replace(os.sep, "/")

    def paths(self, url: str) -> list[str]:
        """``url`` and, through a link, the match path it leads to."""
        real = self.resolve(url)
        return [url] + ([] if real is None else [_mp(real, url.endswith("/"))])

    def may(self, who: str, right: str, url: str) -> bool:
        return all(right in self.rights(who, p) for p in self.paths(url))

    def via_member_link(self, top: str, url: str) -> bool:
        """The known gap of depth-infinity locks (see the module doc)."""
        real_top, real = self.resolve(top), self.resolve(url)
        if real_top is None or real is None:
            return False
        if real_top != top.strip("/") and not (self.root / real_top).is_dir():
            return True
        tail = url[len(top.rstrip("/")) :].strip("/")
        return real != "/".join(p for p in (real_top, tail) if p)


def _signed(who: str) -> str:
    """The principal the oracle decides for (a wrong password: anonymous)."""
    return who if who in ("alice", "bob") else "anon"


def _readable(oracle: Rights, who: str, before: dict[str, Entry]) -> set[bytes]:
    out: set[bytes] = set()
    for rel, entry in before.items():
        if entry[0] == "file" and "read" in oracle.rights(who, _mp(rel, False)):
            out |= _markers(entry[1])  # type: ignore[arg-type]
    return out


def _check_answer(
    oracle: Rights, op: Op, r: Answer, before: dict[str, Entry], root: Path
) -> list[str]:
    who = _signed(op.who)
    bad: list[str] = []
    if r.status >= 500:
        bad.append(f"status {r.status}")
    leaked = _answer_markers(r.body) - _readable(oracle, who, before)
    if leaked:
        bad.append(f"answer {r.status} carries {sorted(leaked)}")
    listing = op.method in ("ARCHIVE", "JSON") or (
        op.method in ("GET", "HEAD") and op.url.endswith("/")
    )
    if listing and r.status == 200 and not oracle.may(who, "list", op.url):
        bad.append(f"listing of {op.url} without list")
    if op.method in ("GET", "HEAD") and not op.url.endswith("/") and r.status == 200:
        if not oracle.may(who, "read", op.url):
            bad.append(f"{op.url} read without read")
    if op.method == "PROPFIND" and r.status == 207:
        for href in hrefs(r.body):
            right = "list" if href.endswith("/") else "read"
            if not oracle.may(who, right, href):
                bad.append(f"PROPFIND names {href} without {right}")
    if op.method == "LOCK" and r.status in (200, 201):
        if not oracle.may(who, "lock", op.url):
            bad.append(f"LOCK {op.url} without lock")
        if op.param == "i":
            top = op.url if op.url.endswith("/") else op.url + "/"
            for u in _UNIVERSE:
                if u.startswith(top) and u != top and not oracle.may(who, "lock", u):
                    if not oracle.via_member_link(top, u):
                        bad.append(f"LOCK {op.url} granted over {u}")
    # Not refused what the rules give: a GET of a regular file.
    target = root / op.url.strip("/")
    if (
        op.method == "GET"
        and not op.url.endswith("/")
        and target.is_file()
        and oracle.resolve(op.url) is not None
        and oracle.may(who, "read", op.url)
        and r.status != 200
    ):
        bad.append(f"GET {op.url} refused ({r.status}) though {who} may read it")
    return bad


def _check_changes(
    oracle: Rights,
    op: Op,
    resolved: dict[str, str | None],
    before: dict[str, Entry],
    after: dict[str, Entry],
    sent: set[bytes],
) -> list[str]:
    who = _signed(op.who)
    bad: list[str] = []
    readable = _readable(oracle, who, before) | sent
    for rel in sorted(set(before) | set(after)):
        old, new = before.get(rel, _GONE), after.get(rel, _GONE)
        if old == new:
            continue
        needs: list[tuple[str, ...]] = []  # each: one of these rights
        if old == _GONE:
            needs.append(("upload", "mkdir") if new[0] == "dir" else ("upload",))
        elif new == _GONE:
            needs.append(("delete",))
        elif old[0] != new[0]:
            needs += [("delete",), ("upload", "mkdir") if new[0] == "dir" else ("upload",)]
        else:
            needs.append(("overwrite",))
        is_dir = "dir" in (old[0], new[0])
        paths = [_mp(rel, is_dir)]
        for url, real in resolved.items():
            if real is None or not (real == "" or rel == real or rel.startswith(real + "/")):
                continue
            tail = rel[len(real) :].lstrip("/") if real else rel
            paths.append(url.rstrip("/") + ("/" + tail if tail else "") + ("/" if is_dir else ""))
        for p in paths:
            mine = oracle.rights(who, p)
            for need in needs:
                if not mine & set(need):
                    bad.append(f"{rel} changed ({old[0]} -> {new[0]}) without {need} at {p}")
        if new[0] == "file":
            held = _markers(old[1]) if old[0] == "file" else set()  # type: ignore[arg-type]
            leaked = _markers(new[1]) - held - readable  # type: ignore[arg-type]
            if leaked:
                bad.append(f"{sorted(leaked)} copied to {rel}")
    return bad


# ------------------------------------------------------------ the requests


def _headers(op: Op) -> dict[str, str]:
    from .test_rights_properties import _headers as dav_headers

    h = dav_headers(op)
    if op.method == "MKCOL":
        h.pop("Content-Type", None)
    return h


def _build(case: AccessCase, top: Path) -> tuple[Path, Config]:
    root = top / "root"
    for d in _DIRS:
        (root / d).mkdir(parents=True, exist_ok=True)
    for i, f in enumerate(case.files):
        (root / f).write_bytes(b"<M%d> %s\n" % (i, f.encode()))
    for link, target in case.links:
        os.symlink(target, root / link)
    users = top / "users"
    users.write_text("".join(f"{n}:{hash_password(p, 1000)}\n" for n, p in PASSWORDS.items()))
    access = tuple((glob, grants) for glob, grants, cli in case.rules if not cli)
    allow = tuple(
        f"{who}:{','.join(rights)}@{glob[:-3] or '/'}"
        for glob, grants, cli in case.rules
        if cli
        for who, rights in grants
    )
    mode: dict[str, object] = (
        {"webdav": True, "webdav_depth_infinity": 100}
        if case.mode == "dav"
        else {"upload": True, "on_duplicate": "overwrite"}
    )
    cfg = make_config(
        root,
        archives=True,
        min_free_space=0,
        auth_file=str(users),
        access=access,
        allow=allow,
        groups=(("staff", case.staff),),
        **mode,
    )
    return root, cfg


async def _run(case: AccessCase, top: Path) -> list[str]:
    root, cfg = _build(case, top)
    oracle = Rights(case, root)
    srv = Server(cfg)
    problems: list[str] = []
    with trio.fail_after(20):
        async with AsyncExitStack() as stack:
            for i, op in enumerate(case.ops):
                send = await stack.enter_async_context(client_for(cfg, case.proto, srv))
                marker = b"<M%d>" % (100 + i)
                method, target, body = _request(op, marker)
                before = snapshot(root)
                named = _named(op) + ([op.url] if op.method == "MKCOL" else [])
                resolved = {u: oracle.resolve(u) for u in named}
                r = await send(method, target, _headers(op), body)
                after = snapshot(root)
                bad = _check_answer(oracle, op, r, before, root)
                bad += _check_changes(oracle, op, resolved, before, after, {marker})
                if temps(root):
                    bad.append(f"temporaries left: {temps(root)}")
                problems += [f"op {i} {op} -> {r.status}: {b}" for b in bad]
    srv.opener.close()
    return problems


def _examples() -> int:
    return int(os.environ.get("SERVERIO_ACCESS_EXAMPLES", "40"))


def test_no_request_reads_writes_moves_or_deletes_beyond_its_rights(tmp_path: Path) -> None:
    """Generated [[access]] / --allow rules, trees with links and requests
    (see the module docstring), each checked against the oracle."""
    counter = iter(range(1_000_000))

    @settings(
        max_examples=_examples(),
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(_cases())
    def check(case: AccessCase) -> None:
        top = tmp_path / f"case{next(counter)}"
        top.mkdir()
        problems = trio.run(_run, case, top)
        assert not problems, (case, problems)

    check()


def test_the_oracle_takes_the_most_specific_rule() -> None:
    """The oracle's own precedence, on the documented examples."""
    case = AccessCase(
        "upload",
        "h1",
        (),
        (),
        ("bob",),
        (
            ("/**", (("anonymous", ("read", "list")),), False),
            ("/a/**", (("alice", ("upload",)),), True),
            ("/a/*", (("staff", ("delete",)),), False),
            ("/a/**", (("bob", ("read",)),), False),
        ),
        (),
    )
    oracle = Rights(case, Path("/nonexistent"))
    assert oracle.decider("/x") == "/**"
    assert oracle.decider("/a/b/c") == "/a/**"
    assert oracle.decider("/a/f") == "/a/*"
    assert oracle.rights("anon", "/x") == {"read", "list"}
    assert oracle.rights("alice", "/a/b/c") == {"upload"}
    assert oracle.rights("bob", "/a/b/c") == {"read"}
    assert oracle.rights("bob", "/a/f") == {"delete"}
    assert oracle.rights("anon", "/a/f") == set()
