"""A property test of the rights a request needs (issue 41, "Tools"):
generated ``[[auth]]`` / ``[[writable]]`` configurations, trees with
in-root symlinks, and sequences of requests with or without the right
credentials, checked by an oracle of its own.

What it generates (:func:`_cases`):

* a tree from a small universe: files in up to two levels of
  collections, each holding a unique marker (``<M7>``), and in-root
  symlinks to files and directories, into protected places and out of
  them (``pub/la -> ../a``, ``a/lc -> ../c``, ``c/lf -> ../a/b/x.txt``);
* up to three ``[[auth]]`` rules (globs over the universe, over a link's
  path too), each with its own users file (alice, bob, or both), and up
  to two ``[[writable]]`` tables (``put``, ``delete`` or both);
* the server: ``--webdav`` or ``--upload --on-duplicate overwrite``, with
  ``--archives``, over HTTP/1.1 or HTTP/2 (memory streams);
* three to eight requests, each anonymous, as alice, as bob or with a
  wrong password (the method drawn from a weighted list, half of the URLs
  near a protected file: it, a collection above it, a link to either):
  GET / HEAD of files and listings (HTML, JSON, ``?archive=zip``),
  PUT, DELETE, a form upload to a folder, COPY / MOVE (``Overwrite`` T or
  F), PROPFIND (Depth 0, 1, infinity) and LOCK (depth infinity or 0) of
  files and collections, through links too.  One server per example: the
  lock table and the verified credentials last across its requests.

The oracle (:class:`Oracle`, :func:`_check_answer`, :func:`_check_changes`)
matches globs with ``_oracle_match`` of tests/test_dav_members.py (by
segments, not serverio's regular expressions) and resolves links with
``os.path.realpath``.  A path's rights are those of its first matching
``[[auth]]`` rule and its first matching ``[[writable]]`` table.  The tree
is read (bytes, link targets) before and after each request:

* a marker appears in an answer (a zip's members unpacked) only if the
  client may read some place that held it before;
* a marker appears at a new place only if the client could read it;
* every entry created, replaced or removed is one the client passes the
  rule of, on its real path and on the path the request named (through a
  link), and a ``[[writable]]`` table allows there (``put`` to create or
  replace, ``delete`` to remove);
* PROPFIND lists no file the client has not passed the rule of (its path
  or its link's target);
* a granted depth-infinity LOCK covers nothing below (in the universe)
  the client could not write; a ``423`` to a PUT comes from a lock whose
  holder could write that path;
* no answer is a 5xx and no upload temporary is left.

A depth-infinity LOCK is decided on the targets of the links below it
too (``test_a_lock_over_a_link_member_is_decided_on_its_target``, once a
strict xfail: the test found it).

Bounded: 60 examples by default (``SERVERIO_RIGHTS_EXAMPLES`` for a hunt,
with ``--hypothesis-seed``), at most eight requests each, 20 s per example,
memory streams.  What it found is pinned by the tests after it.
"""

from __future__ import annotations

import base64
import io
import os
import re
import zipfile
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from serverio import Server
from serverio.config import Config
from serverio.http.target import WRITE_TEMP_PREFIX
from serverio.site.passwords import hash_password

from .conftest import make_config
from .test_dav import hrefs, temps
from .test_dav_members import ALLPROP, Answer, _oracle_match, client_for
from .test_upload_form import BOUNDARY, form_body

pytestmark = pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")

PASSWORDS = {"alice": "wonderland", "bob": "looking-glass"}
# Who sends the request: (name for the oracle, Authorization value).
CREDS = {
    "anon": None,
    "alice": ("alice", "wonderland"),
    "bob": ("bob", "looking-glass"),
    "wrong": ("alice", "not-her-password"),
}
USER_SETS = {"alice": ("alice",), "bob": ("bob",), "both": ("alice", "bob")}

# ------------------------------------------------------------ the universe

_DIRS = ["a", "a/b", "b", "b/c", "c", "pub", "out"]
_FILES = [
    "a/x.txt",
    "a/y.key",
    "a/b/x.txt",
    "a/b/y.key",
    "b/x.txt",
    "b/c/x.txt",
    "c/y.key",
    "c/z.txt",
    "pub/p.txt",
]
# In-root links: (link, target as written); into protected places and out.
_LINKS = [
    ("pub/la", "../a"),
    ("pub/lb", "../a/b"),
    ("pub/lk", "../a/y.key"),
    ("pub/lx", "../b/x.txt"),
    ("a/lc", "../c"),
    ("b/lab", "../a/b"),
    ("c/lf", "../a/b/x.txt"),
]
_AUTH_GLOBS = [
    # Members first (hypothesis favours the first): a rule on some members
    # of a collection and not on the collection itself is what a tree
    # operation must look inside for.
    "**/*.key",
    "/a/b/**",
    "/a/*/x.txt",
    "/b/x.txt",
    "/b/c/**",
    "/pub/la/**",
    "/a/**",
    "/c/**",
    "/out/**",
]
_WRITABLE = ["/**", "/a/**", "/b/**", "/c/**", "/out/**", "/pub/**"]
_ALLOW = [("put",), ("delete",), ("put", "delete")]
# URLs a request names (a trailing "/": a collection).
_COLLECTIONS = [
    "/",
    "/a/",
    "/a/b/",
    "/b/",
    "/b/c/",
    "/c/",
    "/pub/",
    "/pub/la/",
    "/pub/lb/",
    "/a/lc/",
    "/b/lab/",
]
_FILE_URLS = [
    *("/" + f for f in _FILES),
    "/pub/la/x.txt",
    "/pub/la/y.key",
    "/pub/la/b/x.txt",
    "/pub/lb/y.key",
    "/pub/lk",
    "/pub/lx",
    "/a/lc/y.key",
    "/b/lab/x.txt",
    "/c/lf",
]
_NEW_FILES = ["/out/n.txt", "/a/n.txt", "/c/n.key", "/pub/n.txt", "/pub/la/n.txt"]
_NEW_COLLECTIONS = ["/out/", "/out/new/", "/c/new/", "/pub/new/", "/pub/la/new/"]
_UNIVERSE = [*_COLLECTIONS, *_FILE_URLS, *_NEW_FILES, *_NEW_COLLECTIONS, "/a/b/n.key"]

LOCKINFO = (
    b'<?xml version="1.0"?><D:lockinfo xmlns:D="DAV:"><D:lockscope><D:exclusive/>'
    b"</D:lockscope><D:locktype><D:write/></D:locktype><D:owner>t</D:owner></D:lockinfo>"
)
MARKER = re.compile(rb"<M\d+>")
_GONE = ("gone",)
_WRITE_METHODS = {"PUT", "DELETE", "POST", "COPY", "MOVE", "LOCK"}


@dataclass(frozen=True)
class Op:
    method: str  # GET HEAD ARCHIVE JSON PUT DELETE POST COPY MOVE PROPFIND LOCK
    who: str  # a key of CREDS
    url: str
    dst: str = ""  # COPY / MOVE: the Destination; POST: the file name
    param: str = ""  # PROPFIND / LOCK: Depth; COPY / MOVE: Overwrite


@dataclass(frozen=True)
class Case:
    mode: str  # "dav" | "upload"
    proto: str
    files: tuple[str, ...]
    links: tuple[tuple[str, str], ...]
    auth: tuple[tuple[str, str], ...]  # (glob, key of USER_SETS)
    writable: tuple[tuple[str, tuple[str, ...]], ...]
    ops: tuple[Op, ...]


# The requests of each server, by weight (a name twice: drawn twice as
# often): WebDAV's with --webdav, the upload form's with --upload (its
# POST is 405 under WebDAV); reads, PUT and DELETE with both.
_BOTH = ["GET", "HEAD", "ARCHIVE", "JSON", "PUT", "DELETE"]
_METHODS = {
    "upload": [*_BOTH, "POST", "POST"],
    "dav": [*_BOTH, "COPY", "MOVE", "TREE", "TREE", "PROPFIND", "PROPFIND", "LOCK", "LOCK"],
}


def _pick(draw: st.DrawFn, close: list[str], pool: list[str]) -> str:
    """A URL of ``pool``: one of ``close`` half the time (when any)."""
    if close and bool(draw(st.booleans())):
        return draw(st.sampled_from(close))
    return draw(st.sampled_from(pool))


@st.composite
def _op(draw: st.DrawFn, mode: str, near: list[str]) -> Op:
    """One request.  Half of the URLs are ``near`` a protected file (it, a
    collection above it, a link to either): where a request must look.
    (The method is drawn first, from a list: ``one_of`` over per-method
    strategies drew some methods far less often than others.)"""
    method = draw(st.sampled_from(_METHODS[mode]))
    who = draw(st.sampled_from(list(CREDS)))

    def pick(pool: list[str]) -> str:
        return _pick(draw, [u for u in near if u in pool], pool)

    dirs = [*_COLLECTIONS, *near, "/out/"]
    dirs = [u for u in dict.fromkeys(dirs) if u.endswith("/")]
    anything = list(dict.fromkeys([*_UNIVERSE, *near]))
    if method in ("ARCHIVE", "JSON", "POST"):
        name = draw(st.sampled_from(["x.txt", "y.key", "n.txt"])) if method == "POST" else ""
        return Op(method, who, pick(dirs), name)
    if method == "PUT":
        return Op(method, who, pick([u for u in anything if not u.endswith("/")]))
    if method in ("COPY", "MOVE"):
        dst = draw(st.sampled_from([*_NEW_FILES, *_NEW_COLLECTIONS, *_UNIVERSE]))
        return Op(method, who, pick(anything), dst, draw(st.sampled_from("TF")))
    if method == "TREE":  # a collection to a new place, or its DELETE
        verb = draw(st.sampled_from(["COPY", "MOVE", "DELETE"]))
        dst = draw(st.sampled_from(["/out/new/", "/out/", "/pub/new/", "/pub/la/new/"]))
        return Op(verb, who, pick(dirs), "" if verb == "DELETE" else dst, "T")
    if method == "PROPFIND":
        return Op(method, who, pick(anything), "", draw(st.sampled_from("01i")))
    if method == "LOCK":
        return Op(method, who, pick(dirs + anything), "", draw(st.sampled_from("ii0")))
    return Op(method, who, pick(anything))


# Where each directory link of _LINKS leads (as a collection URL).
_LINKED_DIRS = {"/pub/la/": "/a/", "/pub/lb/": "/a/b/", "/a/lc/": "/c/", "/b/lab/": "/a/b/"}


def _near(files: tuple[str, ...], links: tuple[tuple[str, str], ...], auth: list[str]) -> list[str]:
    """The URLs near a file some rule protects: the file, the collections
    above it, and the links (present) to either."""
    guarded = ["/" + f for f in files if any(_oracle_match(g, "/" + f) for g in auth)]
    out = [u for u in _COLLECTIONS if any(f.startswith(u) for f in guarded)]
    present = {"/" + link for link, _ in links}
    for link, real in _LINKED_DIRS.items():
        if link.rstrip("/") in present and any(f.startswith(real) for f in guarded):
            out.append(link)
    for link, target in links:
        real = os.path.normpath(os.path.join("/" + os.path.dirname(link), target))
        if real in guarded:
            out.append("/" + link)
    return guarded + out


@st.composite
def _cases(draw: st.DrawFn) -> Case:
    mode = draw(st.sampled_from(["dav", "upload"]))
    files = tuple(draw(st.lists(st.sampled_from(_FILES), min_size=4, max_size=9, unique=True)))
    links = tuple(draw(st.lists(st.sampled_from(_LINKS), max_size=3, unique=True)))
    auth = draw(
        st.lists(
            st.tuples(st.sampled_from(_AUTH_GLOBS), st.sampled_from(list(USER_SETS))),
            min_size=1,
            max_size=3,
            unique_by=lambda r: r[0],
        )
    )
    writable = draw(
        st.one_of(
            st.just([]),  # --upload / --webdav alone: the whole root
            st.just([]),
            st.lists(
                st.tuples(st.sampled_from(_WRITABLE), st.sampled_from(_ALLOW)),
                min_size=1,
                max_size=2,
                unique_by=lambda r: r[0],
            ),
        )
    )
    near = _near(files, links, [g for g, _ in auth])
    ops = draw(st.lists(_op(mode, near), min_size=3, max_size=8))
    proto = draw(st.sampled_from(["h1", "h2"]))
    return Case(mode, proto, files, links, tuple(auth), tuple(writable), tuple(ops))


# ------------------------------------------------------------ the oracle


def _mp(rel: str, is_dir: bool) -> str:
    """The match path of a path relative to the root
    (docs/reference/basic-auth.md, "Through a symlink")."""
    if not rel:
        return "/"
    return "/" + rel + ("/" if is_dir else "")


@dataclass
class Oracle:
    case: Case
    root: Path
    locks: list[tuple[str, str, str, str | None]] = field(default_factory=list)
    # (holder, URL root, depth, resolved root)

    def passes(self, who: str, path: str) -> bool:
        """Does ``who`` pass the first [[auth]] rule matching ``path``?"""
        for glob, users in self.case.auth:
            if _oracle_match(glob, path):
                return who in USER_SETS[users]
        return True

    def writable(self, action: str, path: str) -> bool:
        """May ``action`` be done at ``path`` (the first matching table)?"""
        if not self.case.writable:
            return True
        for glob, allow in self.case.writable:
            if _oracle_match(glob, path):
                return action in allow
        return False

    def resolve(self, url: str) -> str | None:
        """Where ``url`` leads below the root (links followed), or None."""
        top = os.path.realpath(self.root)
        real = os.path.realpath(os.path.join(top, url.strip("/")))
        if real == top:
            return ""
        if not real.startswith(top + os.sep):
            return None
        return os.path.relpath(real, top).replace(os.sep, "/")

    def may_write(self, who: str, url: str, action: str = "put") -> bool:
        """``who`` may ``action`` at ``url``: its rules and its target's."""
        is_dir = url.endswith("/")
        real = self.resolve(url)
        paths = [url] + ([] if real is None else [_mp(real, is_dir)])
        return all(self.passes(who, p) and self.writable(action, p) for p in paths)


Entry = tuple[object, ...]


def snapshot(root: Path) -> dict[str, Entry]:
    """Every entry under ``root`` (links not followed) but serverio's own
    (the dead-property store, upload temporaries): bytes, a link's target."""
    out: dict[str, Entry] = {}
    for top, dirs, names in os.walk(root):
        rel_top = os.path.relpath(top, root).replace(os.sep, "/")
        for name in [*dirs, *names]:
            if name.startswith(WRITE_TEMP_PREFIX):
                continue
            full = os.path.join(top, name)
            rel = name if rel_top == "." else f"{rel_top}/{name}"
            if os.path.islink(full):
                out[rel] = ("link", os.readlink(full))
            elif os.path.isdir(full):
                out[rel] = ("dir",)
            else:
                out[rel] = ("file", Path(full).read_bytes())
        dirs[:] = [d for d in dirs if not d.startswith(WRITE_TEMP_PREFIX)]
    return out


def _markers(data: bytes) -> set[bytes]:
    return set(MARKER.findall(data))


def _answer_markers(body: bytes) -> set[bytes]:
    """The markers an answer carries, a zip's members unpacked."""
    found = _markers(body)
    if body.startswith(b"PK"):
        try:
            z = zipfile.ZipFile(io.BytesIO(body))
            for name in z.namelist():
                found |= _markers(z.read(name))
        except zipfile.BadZipFile:
            pass  # a cut archive: its raw bytes were searched
    return found


def _readable(oracle: Oracle, who: str, before: dict[str, Entry]) -> set[bytes]:
    """The markers ``who`` may read: held by a file whose rule it passes."""
    out: set[bytes] = set()
    for rel, entry in before.items():
        if entry[0] == "file" and oracle.passes(who, _mp(rel, False)):
            out |= _markers(entry[1])  # type: ignore[arg-type]
    return out


def _named(op: Op) -> list[str]:
    """The URLs a request writes at (its target, a Destination, a form's file)."""
    if op.method in ("COPY", "MOVE"):
        return [op.url, op.dst] if op.method == "MOVE" else [op.dst]
    if op.method == "POST":
        return [op.url.rstrip("/") + "/" + op.dst]
    return [op.url] if op.method in _WRITE_METHODS else []


def _check_changes(
    oracle: Oracle,
    op: Op,
    resolved: dict[str, str | None],
    before: dict[str, Entry],
    after: dict[str, Entry],
    sent: set[bytes],
) -> list[str]:
    """Every entry the request changed: rights on its real path, on the
    path the request named, and no marker the client could not read."""
    bad: list[str] = []
    readable = _readable(oracle, op.who, before) | sent
    for rel in sorted(set(before) | set(after)):
        old, new = before.get(rel, _GONE), after.get(rel, _GONE)
        if old == new:
            continue
        actions = []
        if new != _GONE:
            actions.append("put")
        if old != _GONE and (new == _GONE or old[0] != new[0]):
            actions.append("delete")
        is_dir = "dir" in (old[0], new[0])
        paths = [_mp(rel, is_dir)]
        for url, real in resolved.items():
            if real is None or not (real == "" or rel == real or rel.startswith(real + "/")):
                continue
            tail = rel[len(real) :].lstrip("/") if real else rel
            paths.append(url.rstrip("/") + ("/" + tail if tail else "") + ("/" if is_dir else ""))
        for p in paths:
            if not oracle.passes(op.who, p):
                bad.append(f"{rel} changed ({old[0]} -> {new[0]}) without the rule of {p}")
            for action in actions:
                if not oracle.writable(action, p):
                    bad.append(f"{rel} changed ({old[0]} -> {new[0]}): no {action} at {p}")
        if new[0] == "file":
            held = _markers(old[1]) if old[0] == "file" else set()  # type: ignore[arg-type]
            leaked = _markers(new[1]) - held - readable  # type: ignore[arg-type]
            if leaked:
                bad.append(f"{sorted(leaked)} copied to {rel}")
    return bad


def _check_answer(oracle: Oracle, op: Op, r: Answer, before: dict[str, Entry]) -> list[str]:
    """The answer itself: no unreadable marker, no unpassed member listed,
    no lock over what the client could not write, no foreign 423, no 5xx."""
    bad: list[str] = []
    if r.status >= 500:
        bad.append(f"status {r.status}")
    leaked = _answer_markers(r.body) - _readable(oracle, op.who, before)
    if leaked:
        bad.append(f"answer {r.status} carries {sorted(leaked)}")
    if op.method == "PROPFIND" and r.status == 207:
        for href in hrefs(r.body):
            real = oracle.resolve(href)
            paths = [href] + ([] if real is None else [_mp(real, href.endswith("/"))])
            if not href.endswith("/") and not all(oracle.passes(op.who, p) for p in paths):
                bad.append(f"PROPFIND lists {href}")
    if op.method == "LOCK" and r.status in (200, 201) and op.param == "i":
        top = op.url if op.url.endswith("/") else op.url + "/"
        for u in _UNIVERSE:
            if u.startswith(top) and u != top and not oracle.may_write(op.who, u):
                bad.append(f"LOCK {op.url} granted over {u}")
    # (A PUT at a link's own name is 409 whatever its locks: a write never
    # goes through the last name; a lock there keeps out only the link's
    # own DELETE, MOVE.)
    at_link = (oracle.root / op.url.strip("/")).is_symlink()
    if r.status == 423 and op.method == "PUT" and not at_link:
        holders = [
            who
            for who, url, depth, _ in oracle.locks
            if url == op.url or (depth == "i" and op.url.startswith(url.rstrip("/") + "/"))
        ]
        if holders and not any(oracle.may_write(w, op.url) for w in holders):
            bad.append(f"PUT 423 from a lock by {holders}, who could not write it")
    return bad


# ------------------------------------------------------------ the requests


def _headers(op: Op) -> dict[str, str]:
    h: dict[str, str] = {}
    cred = CREDS[op.who]
    if cred is not None:
        h["Authorization"] = "Basic " + base64.b64encode(":".join(cred).encode()).decode()
    if op.method in ("COPY", "MOVE"):
        h["Destination"] = op.dst
        h["Overwrite"] = op.param
    elif op.method == "PROPFIND":
        h["Depth"] = {"0": "0", "1": "1", "i": "infinity"}[op.param]
    elif op.method == "LOCK":
        h["Depth"] = "infinity" if op.param == "i" else "0"
        h["Timeout"] = "Second-600"
    elif op.method == "POST":
        h["Content-Type"] = f"multipart/form-data; boundary={BOUNDARY}"
    return h


def _request(op: Op, marker: bytes) -> tuple[str, str, bytes]:
    """(method, target, body) on the wire."""
    if op.method == "ARCHIVE":
        return "GET", op.url + "?archive=zip", b""
    if op.method == "JSON":
        return "GET", op.url + "?format=json", b""
    if op.method == "PUT":
        return "PUT", op.url, marker + b" put\n"
    if op.method == "POST":
        return "POST", op.url, form_body(("file", op.dst, marker + b" form\n"))
    if op.method == "PROPFIND":
        return "PROPFIND", op.url, ALLPROP
    if op.method == "LOCK":
        return "LOCK", op.url, LOCKINFO
    return op.method, op.url, b""


def _build(case: Case, top: Path) -> tuple[Path, Config]:
    root = top / "root"
    for d in _DIRS:
        (root / d).mkdir(parents=True, exist_ok=True)
    for i, f in enumerate(case.files):
        (root / f).write_bytes(b"<M%d> %s\n" % (i, f.encode()))
    for link, target in case.links:
        os.symlink(target, root / link)
    users = {}
    for key, names in USER_SETS.items():
        users[key] = top / f"users-{key}"
        users[key].write_text("".join(f"{n}:{hash_password(PASSWORDS[n], 1000)}\n" for n in names))
    mode: dict[str, object] = (
        {"webdav": True, "webdav_depth_infinity": 100}
        if case.mode == "dav"
        else {"upload": True, "on_duplicate": "overwrite"}
    )
    cfg = make_config(
        root,
        archives=True,
        min_free_space=0,
        allow_anonymous_writes=True,
        auth=tuple((g, str(users[u])) for g, u in case.auth),
        writable=case.writable,
        **mode,
    )
    return root, cfg


async def _run(case: Case, top: Path) -> list[str]:
    root, cfg = _build(case, top)
    oracle = Oracle(case, root)
    srv = Server(cfg)
    problems: list[str] = []
    with trio.fail_after(20):  # the example's deadline
        async with AsyncExitStack() as stack:
            for i, op in enumerate(case.ops):
                # A connection each (a refused PUT closes an HTTP/1.1 one),
                # one server: its locks and verified credentials last.
                send = await stack.enter_async_context(client_for(cfg, case.proto, srv))
                marker = b"<M%d>" % (100 + i)
                method, target, body = _request(op, marker)
                before = snapshot(root)
                resolved = {u: oracle.resolve(u) for u in _named(op)}
                r = await send(method, target, _headers(op), body)
                after = snapshot(root)
                bad = _check_answer(oracle, op, r, before)
                bad += _check_changes(oracle, op, resolved, before, after, {marker})
                if temps(root):
                    bad.append(f"temporaries left: {temps(root)}")
                if op.method == "LOCK" and r.status in (200, 201):
                    oracle.locks.append((op.who, op.url, op.param, oracle.resolve(op.url)))
                problems += [f"op {i} {op} -> {r.status}: {b}" for b in bad]
    srv.opener.close()
    return problems


def _examples() -> int:
    return int(os.environ.get("SERVERIO_RIGHTS_EXAMPLES", "60"))


def test_no_protected_byte_is_read_written_moved_or_deleted_without_rights(
    tmp_path: Path,
) -> None:
    """Generated rules, trees with links and requests (see the module
    docstring); every request's answer and every change of the tree is
    checked against the oracle's rights."""
    counter = iter(range(1_000_000))

    @settings(
        max_examples=_examples(),
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(_cases())
    def check(case: Case) -> None:
        top = tmp_path / f"case{next(counter)}"
        top.mkdir()
        problems = trio.run(_run, case, top)
        assert not problems, (case, problems)

    check()


async def test_a_lock_over_a_link_member_is_decided_on_its_target(tmp_path: Path) -> None:
    """``c/lf -> ../a/b/x.txt`` and ``pub/la -> ../a`` with ``[[auth]]
    path = "/a/b/**"``: an anonymous ``LOCK /c/`` or ``LOCK /pub/``
    (depth infinity) would cover ``/c/lf`` and ``/pub/la/b/x.txt``, alice's
    file, and keep her out of them (her PUT through the directory link was
    423 until the lock expired): both are refused (401) like a lock of
    ``/a/b/``.  Her PUT at the file link's own name is 409 whatever the
    locks (a write never goes through the last name); the one through the
    directory link writes ``a/b/x.txt`` (204)."""
    case = Case(
        "dav",
        "h1",
        ("a/b/x.txt",),
        (("c/lf", "../a/b/x.txt"), ("pub/la", "../a")),
        (("/a/b/**", "alice"),),
        (),
        (
            Op("LOCK", "anon", "/c/", "", "i"),
            Op("LOCK", "anon", "/pub/", "", "i"),
            Op("PUT", "alice", "/c/lf"),
            Op("PUT", "alice", "/pub/la/b/x.txt"),
        ),
    )
    _, cfg = _build(case, tmp_path)
    srv = Server(cfg)
    statuses = []
    async with AsyncExitStack() as stack:
        for op in case.ops:
            send = await stack.enter_async_context(client_for(cfg, case.proto, srv))
            method, target, body = _request(op, b"<M9>")
            statuses.append((await send(method, target, _headers(op), body)).status)
    srv.opener.close()
    assert statuses == [401, 401, 409, 204], statuses


@pytest.mark.parametrize("proto", ["h1", "h2"])
@pytest.mark.parametrize(
    ("method", "src", "dst"),
    [
        ("MOVE", "/a/", "/pub/la/new/"),  # into itself through the link: was 500
        ("COPY", "/a/", "/pub/la/new/"),  # was a 207 copy of /a/ into /a/new/
        ("MOVE", "/a/b/x.txt", "/pub/la/b/"),  # onto its own collection: lost a/b, 500
        ("COPY", "/a/b/x.txt", "/pub/la/b/"),
        ("MOVE", "/pub/la/b/", "/a/"),  # onto a collection holding it
        ("COPY", "/a/b/", "/pub/la/b/"),  # onto itself
    ],
)
async def test_copy_and_move_compare_the_ends_where_links_lead(
    tmp_path: Path, proto: str, method: str, src: str, dst: str
) -> None:
    """With ``pub/la -> ../a`` the destination URL ``/pub/la/new/`` lies
    inside ``/a/``, and ``/pub/la/b/`` is ``/a/b/``: COPY and MOVE refuse
    (403) onto itself, into itself and onto a collection holding the source
    where the ends lie, as they do for the URLs, and nothing changes (found
    by the property test above; no rule is needed)."""
    root = tmp_path / "root"
    (root / "a" / "b").mkdir(parents=True)
    (root / "pub").mkdir()
    (root / "a" / "b" / "x.txt").write_bytes(b"X")
    (root / "a" / "b" / "y.txt").write_bytes(b"Y")
    (root / "a" / "z.txt").write_bytes(b"Z")
    os.symlink("../a", root / "pub" / "la")
    before = snapshot(root)
    cfg = make_config(root, webdav=True, min_free_space=0)
    srv = Server(cfg)
    async with client_for(cfg, proto, srv) as send:
        r = await send(method, src, {"Destination": dst, "Overwrite": "T"})
        assert r.status == 403, r.status
        # The link itself is a resource of its own: replacing it is allowed.
        r = await send("COPY", "/a/b/", {"Destination": "/pub/lb/"})
        assert r.status == 201
    srv.opener.close()
    after = snapshot(root)
    assert {k: v for k, v in after.items() if not k.startswith("pub/lb")} == before
    assert temps(root) == []


@pytest.mark.parametrize("proto", ["h1", "h2"])
async def test_propfind_through_a_link_hides_what_the_targets_rules_protect(
    tmp_path: Path, proto: str
) -> None:
    """``pub/la -> ../a`` with ``[[auth]]`` on ``/a/b/**`` and ``/a/*.key``:
    an anonymous PROPFIND of ``/pub/la/`` (Depth 1 and infinity) lists no
    member those rules protect where it lies, as a listing or archive
    through the link leaves them out (found by the property test: Depth
    infinity listed ``/pub/la/b/x.txt`` with its size and ETag)."""
    root = tmp_path / "root"
    (root / "a" / "b").mkdir(parents=True)
    (root / "pub").mkdir()
    for name in ("a/x.txt", "a/y.key", "a/b/x.txt"):
        (root / name).write_bytes(b"<M1>")
    os.symlink("../a", root / "pub" / "la")
    users = tmp_path / "users"
    users.write_text(f"alice:{hash_password(PASSWORDS['alice'], 1000)}\n")
    rules = (("/a/b/**", str(users)), ("/a/*.key", str(users)))
    cfg = make_config(root, webdav=True, webdav_depth_infinity=100, auth=rules)
    alice = {"Authorization": "Basic " + base64.b64encode(b"alice:wonderland").decode()}
    srv = Server(cfg)
    async with client_for(cfg, proto, srv) as send:
        for depth in ("1", "infinity"):
            r = await send("PROPFIND", "/pub/la/", {"Depth": depth}, ALLPROP)
            assert r.status == 207, depth
            got = hrefs(r.body)
            assert "/pub/la/x.txt" in got, got
            assert not [h for h in got if h.endswith((".key", "/b/x.txt"))], (depth, got)
        # Credentials verified for the rules: listed, as in a listing.
        for path in ("/a/b/x.txt", "/a/y.key"):
            assert (await send("GET", path, alice)).status == 200
        r = await send("PROPFIND", "/pub/la/", {"Depth": "infinity", **alice}, ALLPROP)
        assert {"/pub/la/b/x.txt", "/pub/la/y.key"} <= set(hrefs(r.body))
    srv.opener.close()
