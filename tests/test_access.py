"""The one access hook: targets, kinds, decisions and their plans.

Pure tables first (``site.access``: the target of what was served, the one
matcher; ``http.access``: the response of each refusal), then the gate's
decision table, then end to end: every access question a request raises —
the request path, the resolved file, a listing and its names, a sidecar,
the reserved live-reload paths, an event's path — goes through the hook,
and the pipeline's hook (``pipeline.request.access``) is callable by a
feature with a target of its own.
"""

from __future__ import annotations

import ast
import base64
import dataclasses
from pathlib import Path

import pytest
import trio

from bench import structure
from serverio.http.access import (
    ALLOWED,
    Access,
    AccessTarget,
    Kind,
    Right,
    Verdict,
    access_plan,
    served_target,
)
from serverio.http.core import RequestFacts
from serverio.http.target import parse_target
from serverio.live.service import LiveReload
from serverio.observe.stats import Stats
from serverio.pipeline import request as request_mod
from serverio.site.access import rule_for
from serverio.site.authlimit import FAILURE_BUDGET
from serverio.site.gate import Gate
from serverio.site.passwords import cost_profile, hash_password
from serverio.site.rules import SiteRules, compile_rules
from serverio.site.service import Ticket

from .conftest import make_config, memory_connection

_RIGHT = {"put": Right.UPLOAD, "delete": Right.DELETE}

NOW = 1_700_000_000.0
PASSWORD = "wonderland"
HASH = hash_password(PASSWORD, 1000)


def authorization(user: str = "alice", password: str = PASSWORD) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def _rules(*globs: str, fold: bool = False) -> SiteRules:
    users = {"alice": HASH}
    auth = [(g, users, cost_profile(users.values())) for g in globs]
    return compile_rules(auth=auth, fold=fold)


# ------------------------------------------------------------ pure tables


@pytest.mark.parametrize(
    ("served", "kind"),
    [
        ("/", Kind.LISTING),
        ("/d/", Kind.LISTING),
        ("/a.txt", Kind.FILE),
        ("/d/index.html", Kind.FILE),
        ("/r/q3.html.gz", Kind.SIDECAR),
        ("/r/q3.html.br", Kind.SIDECAR),
        ("/r/.gz", Kind.FILE),  # a dot name, not a coding of a file
        ("/r/q3.htmlgz", Kind.FILE),
    ],
)
def test_the_target_of_what_was_served(served: str, kind: Kind) -> None:
    assert served_target(served) == AccessTarget((served,), kind)


@pytest.mark.parametrize(
    ("globs", "paths", "index"),
    [
        (("/p/**",), ("/p/a.txt",), 0),
        (("/p/**",), ("/q/a.txt",), None),
        (("/q/*", "/p/**"), ("/p/",), 1),  # the first rule that matches
        (("/r/*.html",), ("/r/q3.html.gz",), 0),  # a sidecar: its file's rule
        (("/r/*.html",), ("/r/q3.htmlgz",), None),
        (("/x/index.html",), ("/x/", "/x/index.html"), 0),  # any of the paths
        (("/**",), ("/anything",), 0),
    ],
)
def test_rule_for_is_the_one_matcher(
    globs: tuple[str, ...], paths: tuple[str, ...], index: int | None
) -> None:
    rule = rule_for(_rules(*globs), AccessTarget(paths, Kind.FILE))
    assert (rule.index if rule is not None else None) == index


def test_rule_for_folds_on_a_case_insensitive_root() -> None:
    target = AccessTarget(("/Private/Plan.TXT",), Kind.FILE)
    assert rule_for(_rules("/private/**", fold=True), target) is not None
    assert rule_for(_rules("/private/**"), target) is None
    assert rule_for(compile_rules(), target) is None


@pytest.mark.parametrize(
    ("access", "status", "fields"),
    [
        (
            Access(Verdict.CHALLENGE, 0, "serverio"),
            401,
            {
                b"www-authenticate": b'Basic realm="serverio", charset="UTF-8"',
                b"cache-control": b"no-store",
            },
        ),
        (Access(Verdict.THROTTLE, 0, retry_after=7), 429, {b"retry-after": b"7"}),
        (Access(Verdict.FORBID, 0), 403, {}),
        (Access(Verdict.UNAVAILABLE, 0), 503, {b"retry-after": b"1"}),
    ],
)
@pytest.mark.parametrize("head", [False, True])
def test_each_refusal_becomes_its_error_plan(
    access: Access, status: int, fields: dict[bytes, bytes], head: bool
) -> None:
    plan = access_plan(access, NOW, head=head)
    hs = dict(plan.headers)
    assert plan.status == status
    assert plan.headers[0] == (b"x-content-type-options", b"nosniff")  # common fields first
    for name, value in fields.items():
        assert hs[name] == value
    assert plan.send_body is not head
    body = b"".join(p for p in plan.body if isinstance(p, bytes))
    assert hs[b"content-length"] == b"%d" % len(body)


@pytest.mark.parametrize("verdict", [Verdict.ALLOW, Verdict.PENDING])
def test_an_allow_or_pending_decision_has_no_plan(verdict: Verdict) -> None:
    with pytest.raises(ValueError, match=verdict.name):
        access_plan(Access(verdict), NOW, head=False)


# ------------------------------------------------------------ the gate's decisions

GOOD = authorization()
BAD = authorization(password="nope")


@pytest.mark.parametrize(
    ("kind", "path", "auth", "granted", "verdict"),
    [
        # No rule: allowed whatever the kind and credentials.
        (Kind.FILE, "/open.txt", None, (), Verdict.ALLOW),
        (Kind.EVENT, "/open.css", None, (), Verdict.ALLOW),
        (Kind.ENTRY, "/open/", None, (), Verdict.ALLOW),
        # Served kinds: no credentials -> a challenge at once; credentials ->
        # the password check (pending); a rule already passed -> allowed.
        (Kind.REQUEST, "/p/a.txt", None, (), Verdict.CHALLENGE),
        (Kind.FILE, "/p/a.txt", "Bearer x", (), Verdict.CHALLENGE),
        (Kind.SIDECAR, "/p/a.html.gz", GOOD, (), Verdict.PENDING),
        (Kind.LISTING, "/p/", BAD, (), Verdict.PENDING),
        (Kind.RESERVED, "/p/x", GOOD, (), Verdict.PENDING),
        (Kind.FILE, "/p/a.txt", None, (0,), Verdict.ALLOW),
        # Named kinds never wait: an event never names a protected path; a
        # listed name needs credentials verified before (none here).
        (Kind.EVENT, "/p/a.css", GOOD, (0,), Verdict.CHALLENGE),
        (Kind.ENTRY, "/p/a.txt", GOOD, (0,), Verdict.CHALLENGE),
    ],
)
async def test_the_decision_without_waiting(
    kind: Kind, path: str, auth: str | None, granted: tuple[int, ...], verdict: Verdict
) -> None:
    gate = Gate(_rules("/p/**"), Stats(), 1)
    got = gate.decide_now(AccessTarget((path,), kind), auth, frozenset(granted))
    assert got.verdict is verdict
    assert got.rule == (-1 if path.startswith("/open") else 0)


async def test_the_whole_decision_checks_the_password_once_then_trusts_it() -> None:
    stats = Stats()
    gate = Gate(_rules("/p/**"), stats, 1)
    file = AccessTarget(("/p/a.txt",), Kind.FILE)
    entry = AccessTarget(("/p/b.txt",), Kind.ENTRY)
    peer = lambda: "192.0.2.1"  # noqa: E731
    assert (await gate.decide(file, BAD, frozenset(), peer)).verdict is Verdict.CHALLENGE
    assert stats.site.auth_failures == 1
    assert gate.decide_now(entry, GOOD, frozenset()).verdict is Verdict.CHALLENGE
    assert await gate.decide(file, GOOD, frozenset(), peer) == Access(
        Verdict.ALLOW, 0, user="alice"
    )
    # Verified now: a listed name is shown to the same credentials, no check.
    assert gate.decide_now(entry, GOOD, frozenset()) == Access(Verdict.ALLOW, 0)
    assert await gate.decide(AccessTarget(("/x",), Kind.FILE), None, frozenset(), peer) is ALLOWED


async def test_a_spent_budget_is_throttled_with_retry_after() -> None:
    gate = Gate(_rules("/p/**"), Stats(), 1)
    file = AccessTarget(("/p/a.txt",), Kind.FILE)
    for i in range(FAILURE_BUDGET):
        await gate.decide(file, authorization(password=f"x{i}"), frozenset(), lambda: "192.0.2.9")
    got = await gate.decide(file, GOOD, frozenset(), lambda: "192.0.2.9")
    assert got.verdict is Verdict.THROTTLE and got.retry_after >= 1
    assert access_plan(got, NOW, head=False).status == 429


# ------------------------------------------------------------ end to end


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    www = tmp_path / "www"
    (www / "p").mkdir(parents=True)
    (www / "p" / "a.html").write_text("<p>a</p>\n")
    (www / "p" / "a.html.gz").write_bytes(b"\x1f\x8b not really gzip")
    (www / "open").mkdir()
    (www / "open" / "b.txt").write_text("b\n")
    (www / "open" / "c.txt").write_text("c\n")
    return www


@pytest.fixture
def users(tmp_path: Path) -> Path:
    f = tmp_path / "users.htpasswd"
    f.write_text(f"alice:{HASH}\n")
    return f


async def test_every_access_question_goes_through_the_hook(
    tree: Path, users: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[Kind, tuple[str, ...], Verdict]] = []
    real = Gate.decide_now

    def spy(
        self: Gate,
        target: AccessTarget,
        auth: str | None,
        granted: frozenset[int],
        user: str | None = None,
    ) -> Access:
        got = real(self, target, auth, granted, user)
        seen.append((target.kind, target.paths, got.verdict))
        return got

    monkeypatch.setattr(Gate, "decide_now", spy)
    cfg = make_config(
        tree,
        watch=True,
        upload=True,
        min_free_space=0,
        auth=(("/p/**", str(users)), ("/open/c.txt", str(users))),
    )
    hdr = f"Authorization: {GOOD}\r\n"
    async with memory_connection(cfg) as (client, srv, _):
        put = f"PUT /p/new.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n{hdr}\r\nx"
        await client.send_raw(put.encode())
        assert (await client.read_response()).status == 201
        assert (await client.get("/p/a.html")).status == 401
        assert (await client.get("/p/a.html", hdr)).status == 200
        assert (await client.get("/p/a.html.gz", hdr)).status == 200
        r = await client.get("/open/")
        assert r.status == 200 and b"b.txt" in r.body and b"c.txt" not in r.body
        assert (await client.get("/.serverio/livereload.js")).status == 200
        live = srv.live
        assert isinstance(live, LiveReload)
        assert live.may_name("/open/b.txt") and not live.may_name("/p/a.css")
    kinds = {kind for kind, _, _ in seen}
    assert kinds == set(Kind), sorted(k.name for k in set(Kind) - kinds)
    assert (Kind.REQUEST, ("/p/a.html",), Verdict.CHALLENGE) in seen
    assert (Kind.FILE, ("/p/a.html",), Verdict.ALLOW) in seen  # passed at routing
    assert (Kind.SIDECAR, ("/p/a.html.gz",), Verdict.ALLOW) in seen
    assert (Kind.LISTING, ("/open/",), Verdict.ALLOW) in seen
    assert (Kind.ENTRY, ("/open/c.txt",), Verdict.CHALLENGE) in seen
    assert (Kind.RESERVED, ("/.serverio/livereload.js",), Verdict.ALLOW) in seen
    assert (Kind.EVENT, ("/p/a.css",), Verdict.CHALLENGE) in seen
    assert (Kind.WRITE, ("/p/new.txt",), Verdict.PENDING) in seen  # then the password check


@pytest.mark.parametrize(
    ("path", "action", "auth", "verdict"),
    [
        # Writable and unprotected: allowed, for the methods its table allows.
        ("/open/a.txt", "put", None, Verdict.ALLOW),
        ("/open/a.txt", "delete", None, Verdict.ALLOW),
        # Writable and protected: the auth rule, as for a served file.
        ("/p/a.txt", "put", None, Verdict.CHALLENGE),
        ("/p/a.txt", "put", GOOD, Verdict.PENDING),
        # Not for this method, or not writable at all: forbidden, whatever
        # the credentials (before any password check).
        ("/p/a.txt", "delete", GOOD, Verdict.FORBID),
        ("/elsewhere.txt", "put", None, Verdict.FORBID),
        ("/elsewhere.txt", "put", GOOD, Verdict.FORBID),
    ],
)
def test_a_write_is_decided_on_the_writable_paths_then_the_auth_rules(
    path: str, action: str, auth: str | None, verdict: Verdict
) -> None:
    users = {"alice": HASH}
    rules = compile_rules(
        auth=[("/p/**", users, cost_profile(users.values()))],
        writable=[("/p/**", ("put",)), ("/open/**", ("put", "delete"))],
    )
    gate = Gate(rules, Stats(), 1)
    got = gate.decide_now(AccessTarget((path,), Kind.WRITE, _RIGHT[action]), auth, frozenset())
    assert got.verdict is verdict
    # Without [[writable]] tables (--upload alone) the whole root is writable.
    bare = Gate(_rules("/p/**"), Stats(), 1)
    anywhere = bare.decide_now(
        AccessTarget(("/elsewhere.txt",), Kind.WRITE, _RIGHT[action]), None, frozenset()
    )
    assert anywhere.verdict is Verdict.ALLOW


async def test_a_later_feature_asks_the_pipelines_hook_with_its_own_target(
    tree: Path, users: Path
) -> None:
    # What a write, a proxy route or a mount would do once it has resolved
    # its target: ask the hook, send the refusal it gets, or go on.
    cfg = make_config(tree, auth=(("/p/uploads/**", str(users)),))
    async with memory_connection(cfg) as (_, srv, _):
        deps = srv.env
        target = AccessTarget(("/p/uploads/report.pdf",), Kind.FILE)
        peer = lambda: "192.0.2.1"  # noqa: E731

        def req(auth: str | None, method: bytes = b"GET") -> RequestFacts:
            return RequestFacts(method, parse_target(method, b"/api"), authorization=auth)

        ticket = Ticket(None, req(None, b"HEAD"))
        refusal, after = await request_mod.access(deps, target, ticket, NOW, peer)
        assert refusal is not None and refusal.status == 401 and not refusal.send_body
        assert dict(refusal.headers)[b"www-authenticate"].startswith(b"Basic ")
        assert after is not None and not after.protected and not after.granted

        ticket = Ticket(None, req(GOOD))
        refusal, after = await request_mod.access(deps, target, ticket, NOW, peer)
        assert refusal is None and after is not None
        assert after.protected and after.authed and after.granted == {0}
        # Tickets are immutable: the decision is recorded in a new one.
        assert not ticket.protected and not ticket.granted
        with pytest.raises(dataclasses.FrozenInstanceError):
            ticket.user = "mallory"  # type: ignore[misc]
        # Another target, unprotected: allowed, nothing recorded.
        other = Ticket(None, req(None))
        got = await request_mod.access(deps, served_target("/p/x"), other, NOW, peer)
        assert got == (None, other)
    # Without site rules the hook allows at once.
    async with memory_connection(make_config(tree)) as (_, srv, _):
        assert srv.env.site is None
        plain = Ticket(None, req(None))
        assert await request_mod.access(srv.env, target, plain, NOW, peer) == (None, plain)
    await trio.lowlevel.checkpoint()


# ------------------------------------------------------------ size gates


def test_the_site_package_keeps_the_size_gates() -> None:
    # No function over 80 lines, no class over 450 lines or 20 attributes
    # (issue 26), in the site package and the pipeline's request steps.
    package = Path(structure.__file__).resolve().parent.parent / "serverio"
    files = [*sorted((package / "site").glob("*.py")), package / "pipeline" / "request.py"]
    found = [f.describe() for p in files for f in structure.findings(p.read_text(), p.name)]
    assert found == []


# Fields only the pure layer writes: the site decides (a realm, a wait, a
# Location, a page) and http.access / http.plans / error_plan make the plan.
_PLAN_FIELDS = {
    b"www-authenticate",
    b"retry-after",
    b"location",
    b"content-type",
    b"content-length",
}


def test_site_code_makes_no_response_itself() -> None:
    package = Path(structure.__file__).resolve().parent.parent / "serverio" / "site"
    found: list[str] = []
    for path in sorted(package.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            where = f"{path.name}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Constant) and node.value in _PLAN_FIELDS:
                found.append(f"{where}: the field {node.value!r}")
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
                continue
            if node.func.id == "Plan":
                found.append(f"{where}: a Plan built")
            kwargs = {k.arg for k in node.keywords if k.arg is not None}
            if node.func.id == "replace" and kwargs & {"headers", "body", "status"}:
                found.append(f"{where}: a plan's {sorted(kwargs)} replaced")
    assert found == []
