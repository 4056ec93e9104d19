"""Rights per user and path (issue 44): ``[[access]]``, ``[[group]]`` and
``--allow`` rules compiled and decided by the one access hook.

The precedence and the principals on the compiled rules; each feature's
right (GET read, a listing list, PUT upload or overwrite, the form's files
and folders, DELETE, WebDAV MKCOL, LOCK, COPY and MOVE) over HTTP/1.1;
the start-up guard off loopback (public reads, signed-in writes); bad
rules as one line, exit 2; the access log's user field, the per-user
counters of /metrics and the refusal's log line at ``-v``.  The generated
cases are tests/test_access_properties.py's.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from serverio import Server
from serverio.config import Config
from serverio.errors import ConfigError
from serverio.http.access import Right
from serverio.observe.accesslog import AccessLog, AccessRecord
from serverio.ops.metrics import render, snapshot
from serverio.site.passwords import hash_password
from serverio.site.rights import allow_spec, compile_access, rule_at
from serverio.site.service import load_site

from .conftest import make_config, memory_connection
from .test_dav_members import client_for
from .test_upload_form import BOUNDARY, form_body

PASSWORD = "pw-of-the-test"


def basic(user: str, password: str = PASSWORD) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


@pytest.fixture
def users(tmp_path: Path) -> Path:
    f = tmp_path / "users"
    h = hash_password(PASSWORD, 1000)
    f.write_text(f"alice:{h}\nbob:{h}\ncarol:{h}\n")
    return f


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "incoming").mkdir(parents=True)
    (root / "private").mkdir()
    (root / "pub.txt").write_text("public")
    (root / "incoming" / "old.txt").write_text("old")
    (root / "private" / "s.txt").write_text("secret")
    return root


# ------------------------------------------------------------ compiled rules


def _compile(*lines: str, groups: tuple[tuple[str, tuple[str, ...]], ...] = ()) -> list[object]:
    return list(compile_access([allow_spec(x) for x in lines], ["alice", "bob"], groups, "t"))


def test_the_most_specific_rule_decides_alone() -> None:
    rules = compile_access(
        [
            allow_spec("anonymous:read,list@/"),
            allow_spec("alice:upload@/incoming"),
            ("/incoming/*.txt", (("bob", ("delete",)),), "t: [[access]] #1"),
            ("/incoming/**", (("staff", ("overwrite",)),), "t: [[access]] #2"),
        ],
        ["alice", "bob"],
        [("staff", ("bob",))],
        "t",
    )
    top = rule_at(rules, "/pub.txt")
    assert top is not None and top.rights_of(None) == {Right.READ, Right.LIST}
    incoming = rule_at(rules, "/incoming/new.bin")
    assert incoming is not None
    # One glob, two declarations: one rule, the grants added up.
    assert incoming.rights_of("alice") == {Right.UPLOAD}
    assert incoming.rights_of("bob") == {Right.OVERWRITE}
    # The anonymous read of "/" does not reach below a more specific rule.
    assert incoming.rights_of(None) == frozenset()
    # A longer literal start wins; at the same start, more literal characters.
    txt = rule_at(rules, "/incoming/a.txt")
    assert txt is not None and txt.rights_of("bob") == {Right.DELETE}
    assert txt.rights_of("alice") == frozenset()
    # Nothing matches: nobody may do anything.
    assert rule_at(compile_access([allow_spec("alice:read@/a")], ["alice"], [], "t"), "/b") is None


def test_authenticated_and_groups_add_to_anonymous() -> None:
    (rule,) = compile_access(
        [
            (
                "/**",
                (
                    ("anonymous", ("read",)),
                    ("authenticated", ("list",)),
                    ("staff", ("delete",)),
                    ("bob", ("upload",)),
                ),
                "t",
            )
        ],
        ["alice", "bob"],
        [("staff", ("alice",))],
        "t",
    )
    assert rule.rights_of(None) == {Right.READ}
    assert rule.rights_of("alice") == {Right.READ, Right.LIST, Right.DELETE}
    assert rule.rights_of("bob") == {Right.READ, Right.LIST, Right.UPLOAD}
    assert rule.rights_of("someone-else") == {Right.READ, Right.LIST}


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("alice:fly@/", "--allow 'alice:fly@/': unknown right 'fly'"),
        ("dave:read@/", "principal 'dave' is no user"),
        ("alice-read@/", "must be PRINCIPAL"),
        ("alice:read@", "must be PRINCIPAL"),
        ("alice:read@incoming", "must be PRINCIPAL"),
        (":read@/", "must be PRINCIPAL"),
        ("alice:@/", "must be PRINCIPAL"),
    ],
)
def test_a_bad_allow_names_itself(spec: str, needle: str) -> None:
    with pytest.raises(ConfigError) as got:
        compile_access([allow_spec(spec)], ["alice"], [], "t")
    assert needle in str(got.value)
    assert "\n" not in str(got.value)


def test_bad_groups_and_users_are_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"\[\[group\]\] #1 key 'members': 'zed'"):
        compile_access([], ["alice"], [("staff", ("zed",))], "t")
    with pytest.raises(ConfigError, match="'alice' is taken"):
        compile_access([], ["alice"], [("alice", ())], "t")
    with pytest.raises(ConfigError, match="no users"):
        compile_access([allow_spec("alice:read@/")], [], [], "t")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        # A bad rule stops the start before anything is bound.
        [sys.executable, "-m", "serverio", "-p", "0", "-b", "127.0.0.1", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("extra", "toml", "needle"),
    [
        (["--allow", "alice:fly@/"], "", "--allow 'alice:fly@/': unknown right 'fly'"),
        ([], '[[access]]\npath = "/**"\nallow = { alice = ["read", "x"] }\n', "[[access]] #1"),
        ([], '[[access]]\npath = "/**"\nallow = "alice"\n', "[[access]] #1 key 'allow'"),
        (
            [],
            '[[group]]\nname = "g"\nmembers = ["nobody"]\n[[access]]\npath = "/**"\n'
            'allow = { g = ["read"] }\n',
            "[[group]] #1 key 'members'",
        ),
    ],
)
def test_bad_rules_exit_2_with_one_line(
    tree: Path, users: Path, tmp_path: Path, extra: list[str], toml: str, needle: str
) -> None:
    args = ["-d", str(tree), "--auth-file", str(users), *extra]
    if toml:
        cfg = tmp_path / "site.toml"
        cfg.write_text(toml)
        args += ["--config", str(cfg)]
    r = _cli(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("serverio: error:"), r.stderr
    assert needle in lines[0], lines[0]


# ------------------------------------------------------------ the guard


def _public(tree: Path, users: Path, *allow: str, **kw: object) -> Config:
    return Config.of(
        directory=str(tree), host="0.0.0.0", upload=True, auth_file=str(users), allow=allow, **kw
    ).validate()


def test_public_reads_with_signed_in_writes_start_off_loopback(tree: Path, users: Path) -> None:
    """Anonymous reads, writes for users only: accepted on 0.0.0.0 without
    an [[auth]] rule over the writable paths (which would lock the reads)."""
    cfg = _public(tree, users, "anonymous:read,list@/", "alice,bob:upload,overwrite@/incoming")
    assert cfg.users.allow
    cfg = _public(tree, users, "anonymous:read@/", "authenticated:delete@/")
    assert cfg.users.allow


def test_anonymous_writes_off_loopback_need_the_opt_in(tree: Path, users: Path) -> None:
    with pytest.raises(ConfigError) as got:
        _public(tree, users, "anonymous:read,list@/", "anonymous,alice:upload@/incoming")
    assert "--allow 'anonymous,alice:upload@/incoming' gives anonymous clients" in str(got.value)
    with pytest.raises(ConfigError, match=r"\[\[access\]\] #1 gives anonymous"):
        Config.of(
            directory=str(tree),
            host="0.0.0.0",
            upload=True,
            access=(("/**", (("anonymous", ("read", "Delete")),)),),
        ).validate()
    ok = _public(tree, users, "anonymous:upload@/incoming", allow_anonymous_writes=True)
    assert ok.uploads.allow_anonymous_writes


# ------------------------------------------------------------ each feature's right


def _files(top: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in top.rglob("*") if p.is_file()}


def _rules(tree: Path, users: Path, **kw: object) -> Config:
    return make_config(
        tree,
        upload=True,
        min_free_space=0,
        auth_file=str(users),
        allow=(
            "anonymous:read,list@/",
            "alice:upload,read,list@/incoming",
            "bob:read,list,upload,overwrite,delete,mkdir,lock@/incoming",
            "carol:read,list@/private",
        ),
        **kw,
    )


@pytest.mark.parametrize(
    ("method", "path", "who", "status"),
    [
        ("GET", "/pub.txt", "", 200),
        ("GET", "/", "", 200),
        ("GET", "/private/s.txt", "", 401),  # nobody anonymous; credentials may help
        ("GET", "/private/s.txt", "alice", 403),  # signed in, and no right: 403
        ("GET", "/private/s.txt", "carol", 200),
        ("GET", "/private/", "carol", 200),
        ("GET", "/incoming/old.txt", "", 401),  # /incoming's rule decides alone
        ("GET", "/incoming/old.txt", "alice", 200),
        ("PUT", "/incoming/new.txt", "", 401),
        ("PUT", "/incoming/new.txt", "alice", 201),  # upload: a new name
        ("PUT", "/incoming/old.txt", "alice", 403),  # no overwrite
        ("PUT", "/incoming/old.txt", "bob", 204),
        ("PUT", "/pub2.txt", "alice", 403),
        ("DELETE", "/incoming/old.txt", "alice", 403),
        ("DELETE", "/incoming/old.txt", "bob", 204),
        ("DELETE", "/pub.txt", "", 403),  # nobody may: 403 without asking
        ("DELETE", "/pub.txt", "bob", 403),
    ],
)
async def test_each_method_asks_for_its_right(
    tree: Path, users: Path, method: str, path: str, who: str, status: int
) -> None:
    cfg = _rules(tree, users)
    before = _files(tree)
    async with client_for(cfg, "h1") as send:
        r = await send(method, path, basic(who) if who else {}, b"new" if method == "PUT" else b"")
    assert r.status == status, (r.status, r.body)
    if status in (401, 403):
        # The problem names the right (asked as JSON; never the rule).
        async with client_for(cfg, "h1") as send:
            asked = {**(basic(who) if who else {}), "Accept": "application/problem+json"}
            again = await send(method, path, asked, b"new" if method == "PUT" else b"")
        if again.status == status and again.body.startswith(b"{"):
            assert json.loads(again.body).get("right") in {r.value for r in Right}, again.body
    after = _files(tree)
    if status >= 400:
        assert after == before  # a refusal changes nothing


@pytest.mark.parametrize(
    ("who", "name", "status", "kept"),
    [
        ("alice", "n.txt", 200, True),
        ("alice", "old.txt", 403, False),  # overwrite (--on-duplicate overwrite): no right
        ("bob", "old.txt", 200, True),
    ],
)
async def test_the_forms_files_ask_upload_or_overwrite(
    tree: Path, users: Path, who: str, name: str, status: int, kept: bool
) -> None:
    cfg = _rules(tree, users, on_duplicate="overwrite")
    body = form_body(("file", name, b"form bytes"))
    headers = {**basic(who), "Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}
    async with client_for(cfg, "h1") as send:
        r = await send("POST", "/incoming/", {**headers, "Accept": "application/json"}, body)
    assert (r.status == 200 or r.status == 201) if status == 200 else r.status == status
    assert ((tree / "incoming" / name).read_bytes() == b"form bytes") is kept


@pytest.mark.parametrize("proto", ["h1", "h2"])
async def test_webdav_methods_ask_for_their_rights(tree: Path, users: Path, proto: str) -> None:
    cfg = _rules(tree, users, webdav=True)
    async with client_for(cfg, proto) as send:
        assert (await send("MKCOL", "/incoming/d/", basic("alice"))).status == 403  # no mkdir
        assert (await send("MKCOL", "/incoming/d/", basic("bob"))).status == 201
        # MOVE: the source's delete (alice has none), the destination's upload.
        move = {"Destination": "/incoming/moved.txt"}
        assert (await send("MOVE", "/incoming/old.txt", {**move, **basic("alice")})).status == 403
        assert (await send("MOVE", "/incoming/old.txt", {**move, **basic("bob")})).status == 201
        # COPY onto an existing file: an overwrite there.
        copy = {"Destination": "/incoming/moved.txt", "Overwrite": "T"}
        assert (await send("COPY", "/pub.txt", {**copy, **basic("alice")})).status == 403
        assert (await send("COPY", "/pub.txt", {**copy, **basic("bob")})).status == 204
        lock = (
            b'<?xml version="1.0"?><D:lockinfo xmlns:D="DAV:"><D:lockscope><D:exclusive/>'
            b"</D:lockscope><D:locktype><D:write/></D:locktype></D:lockinfo>"
        )
        depth0 = {"Depth": "0", "Timeout": "Second-60"}
        r = await send("LOCK", "/incoming/moved.txt", {**depth0, **basic("alice")}, lock)
        assert r.status == 403  # no lock
        r = await send("LOCK", "/incoming/moved.txt", {**depth0, **basic("bob")}, lock)
        assert r.status == 200
        # PROPFIND's members: a file only to who may read it.
        r = await send("PROPFIND", "/", {"Depth": "1"})
        assert r.status == 207 and b"pub.txt" in r.body and b"incoming" not in r.body
    assert (tree / "incoming" / "moved.txt").read_text() == "public"


async def test_a_symlink_is_decided_on_where_it_leads(tree: Path, users: Path) -> None:
    (tree / "pub").mkdir()
    (tree / "pub" / "ls").symlink_to("../private/s.txt")
    (tree / "pub" / "ld").symlink_to("../private")
    cfg = _rules(tree, users)
    async with client_for(cfg, "h1") as send:
        assert (await send("GET", "/pub/ls")).status == 401
        assert (await send("GET", "/pub/ld/")).status == 401
        assert (await send("GET", "/pub/ls", basic("carol"))).status == 200
        r = await send("GET", "/pub/?format=json")
        assert r.status == 200 and json.loads(r.body)["entries"] == []  # where names lead
        r = await send("GET", "/pub/?format=json", basic("carol"))
        names = {e["name"] for e in json.loads(r.body)["entries"]}
        assert names == {"ls", "ld"} or names == {"ls", "ld/"}, names


# ------------------------------------------------------------ observable


async def test_the_access_log_names_the_signed_in_user(tree: Path, users: Path) -> None:
    for fmt in ("common", "json"):
        out = io.StringIO()
        cfg = _rules(tree, users)
        srv = Server(cfg, access_log=AccessLog(fmt, out))
        async with memory_connection(cfg, server=srv) as (client, _, _):
            hdr = "".join(f"{k}: {v}\r\n" for k, v in basic("carol").items())
            assert (await client.get("/private/s.txt", hdr)).status == 200
            assert (await client.get("/pub.txt")).status == 200
        srv.access_log.pipe.close()
        lines = out.getvalue().splitlines()
        if fmt == "common":
            assert " - carol [" in lines[0] and " - - [" in lines[1], lines
        else:
            assert json.loads(lines[0])["user"] == "carol" and "user" not in json.loads(lines[1])


def test_the_user_field_is_escaped() -> None:
    record = AccessRecord("1.2.3.4", "GET", "/", "1.1", 200, 0, 0.0, user='a b"\n')
    line = AccessLog("common").format(record, 0.0)
    assert " - a\\x20b\\x22\\x0a [" in line


async def test_per_user_counters_in_metrics(tree: Path, users: Path) -> None:
    cfg = _rules(tree, users)
    srv = Server(cfg)
    async with client_for(cfg, "h1", srv) as send:
        assert (await send("GET", "/private/s.txt", basic("carol"))).status == 200
        assert (await send("GET", "/private/s.txt", basic("alice"))).status == 403
        assert (await send("GET", "/private/s.txt", basic("mallory"))).status == 401
    text = render(snapshot(srv))
    assert 'serverio_user_requests_total{user="carol"} 1' in text
    assert 'serverio_user_bytes_total{user="carol"} 6' in text
    assert 'serverio_user_denied_total{user="alice"} 1' in text
    assert 'serverio_user_denied_total{user="carol"} 0' in text
    assert "mallory" not in text  # only the users file's names: bounded


async def test_a_refusal_is_logged_with_its_rule_at_verbose(
    tree: Path, users: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """-v: at WARNING, so the default log level shows it (else at INFO)."""
    cfg = _rules(tree, users, verbose=True)
    with caplog.at_level(logging.WARNING, logger="serverio"):
        async with client_for(cfg, "h1") as send:
            assert (await send("PUT", "/incoming/old.txt", basic("alice"), b"x")).status == 403
    denied = [r.getMessage() for r in caplog.records if r.getMessage().startswith("denied")]
    assert denied == [
        "denied overwrite of '/incoming/old.txt' to alice: --allow "
        "'alice:upload,read,list@/incoming' / --allow "
        "'bob:read,list,upload,overwrite,delete,mkdir,lock@/incoming' (path '/incoming/**')"
    ], denied


@pytest.mark.parametrize("proto", ["h1", "h2"])
async def test_a_create_only_resumable_upload_counts_and_logs_no_denial(
    tree: Path, users: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, proto: str
) -> None:
    """A resumable creation asks whether it may also replace (to know
    whether the upload is create-only): for alice, without the overwrite
    right, that question's "no" is an answer, not a refusal: her allowed
    upload leaves the per-user "denied" counter at 0 and no "denied" line
    at -v (both were 1 when the second question was an ordinary ask)."""
    secret = tmp_path / "secret"
    secret.write_text("s" * 40)
    cfg = _rules(tree, users, secret_file=str(secret), verbose=True)
    srv = Server(cfg)
    whole = {"Upload-Complete": "?1", "Content-Type": "application/octet-stream"}

    def denials() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.getMessage().startswith("denied")]

    with caplog.at_level(logging.INFO, logger="serverio"):
        async with client_for(cfg, proto, srv) as send:
            r = await send("PUT", "/incoming/new.txt", {**whole, **basic("alice")}, b"alice's")
            assert r.status == 201, r.status
            assert (tree / "incoming" / "new.txt").read_text() == "alice's"
            assert denials() == []
            text = render(snapshot(srv))
            assert 'serverio_user_denied_total{user="alice"} 0' in text, text
            # A real refusal is still counted and logged: replacing needs overwrite.
            r = await send("PUT", "/incoming/old.txt", {**whole, **basic("alice")}, b"alice's")
            assert r.status == 403
            assert len(denials()) == 1 and denials()[0].startswith("denied overwrite"), denials()
            assert 'serverio_user_denied_total{user="alice"} 1' in render(snapshot(srv))


def test_load_site_keeps_auth_file_for_users_only_with_rules(tree: Path, users: Path) -> None:
    """With rules, --auth-file names the users (no whole-site [[auth]] rule)."""
    site = load_site(_rules(tree, users))
    assert site is not None and site.rules.auth == () and site.rules.users is not None
    assert set(site.rules.users.users) == {"alice", "bob", "carol"}
    assert site.may(Right.READ, "/pub.txt", None)
    assert not site.may(Right.UPLOAD, "/incoming/x", None)
    assert site.may(Right.UPLOAD, "/incoming/x", "alice")
    assert not site.may(Right.OVERWRITE, "/incoming/x", "alice")
    assert site.may(Right.LIST, "/private/", "carol")
    assert not site.may(Right.SHARE, "/private/s.txt", "carol")
    shared = load_site(_rules(tree, users, writable=(("/incoming/**", ("put",)),)))
    assert shared is not None and not shared.may(Right.DELETE, "/incoming/old.txt", "bob")
    assert shared.may(Right.OVERWRITE, "/incoming/old.txt", "bob")
    bare = load_site(make_config(tree, auth_file=str(users)))
    assert bare is not None and len(bare.rules.auth) == 1  # the shorthand, as before


def test_share_is_a_right_of_its_own(tree: Path, users: Path) -> None:
    """``share`` (the login feature's links) is asked like any right, and
    no [[writable]] table or --upload decides it."""
    cfg = make_config(
        tree, auth_file=str(users), allow=("anonymous:read@/", "alice:read,share@/private")
    )
    site = load_site(cfg)
    assert site is not None
    assert site.may(Right.SHARE, "/private/s.txt", "alice")
    assert not site.may(Right.SHARE, "/private/s.txt", "bob")
    assert not site.may(Right.SHARE, "/pub.txt", None)


async def test_the_access_log_names_the_user_of_an_auth_rule_too(tree: Path, users: Path) -> None:
    """The shorthand [[auth]]: the user field was "-" after Basic passed."""
    out = io.StringIO()
    cfg = make_config(tree, auth=(("/private/**", str(users)),))
    srv = Server(cfg, access_log=AccessLog("common", out))
    async with memory_connection(cfg, server=srv) as (client, _, _):
        hdr = "".join(f"{k}: {v}\r\n" for k, v in basic("carol").items())
        assert (await client.get("/private/s.txt", hdr)).status == 200
    srv.access_log.pipe.close()
    assert " - carol [" in out.getvalue(), out.getvalue()


@pytest.mark.parametrize("proto", ["h1", "h2"])
async def test_a_resumable_upload_needs_overwrite_to_replace_a_file(
    tree: Path, users: Path, tmp_path: Path, proto: str
) -> None:
    # The IETF draft's creation (Upload-Complete) asks upload-or-overwrite
    # first; without the overwrite right the upload is create-only: an
    # existing target is refused at once, and a target that appears
    # before the last byte is not replaced either.
    secret = tmp_path / "secret"
    secret.write_text("s" * 40)
    cfg = _rules(tree, users, secret_file=str(secret))
    whole = {"Upload-Complete": "?1", "Content-Type": "application/octet-stream"}
    async with client_for(cfg, proto) as send:
        r = await send("PUT", "/incoming/old.txt", {**whole, **basic("alice")}, b"alice's")
        assert r.status == 403
        assert (tree / "incoming" / "old.txt").read_text() == "old"
        r = await send("PUT", "/incoming/new.txt", {**whole, **basic("alice")}, b"alice's")
        assert r.status == 201
        r = await send("PUT", "/incoming/old.txt", {**whole, **basic("bob")}, b"bob's")
        assert r.status in (200, 204)
        assert (tree / "incoming" / "old.txt").read_text() == "bob's"
        # Created while alice's upload is incomplete: her completion fails.
        start = {"Upload-Complete": "?0", "Content-Type": "application/octet-stream"}
        r = await send("PUT", "/incoming/late.txt", {**start, **basic("alice")}, b"ab")
        assert r.status == 201, r.status
        location = {k.lower(): v for k, v in r.headers.items()}["location"]
        (tree / "incoming" / "late.txt").write_text("someone else's")
        patch = {
            "Upload-Complete": "?1",
            "Upload-Offset": "2",
            "Content-Type": "application/partial-upload",
        }
        r = await send("PATCH", location, {**patch, **basic("alice")}, b"cd")
        assert r.status >= 400
        assert (tree / "incoming" / "late.txt").read_text() == "someone else's"


def test_a_full_memo_of_open_reads_decides_the_asked_kind_alone(
    tree: Path, users: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The warm anonymous read's memo of each path's open kinds is bounded.
    Once full (a listing of more names than it holds, or a client's junk
    paths) a new path is decided on the asked kind alone, the same answer
    as with room, and the memo is neither cleared nor grown: a 10,000-name
    listing no longer pays five checks per name on every view."""
    from serverio.http.access import AccessTarget, Kind
    from serverio.site import gate as gate_mod

    cfg = make_config(
        tree, auth_file=str(users), allow=("anonymous:read,list@/", "alice:read@/private")
    )
    fresh = load_site(cfg)
    full = load_site(cfg)
    assert fresh is not None and full is not None
    monkeypatch.setattr(gate_mod, "_RULES_MAX", 8)
    for i in range(8):
        full.gate.decide_now(AccessTarget((f"/junk/{i}",), Kind.FILE), None, frozenset())
    memo = dict(full.gate._opens)
    assert len(memo) == 8
    checks: list[Kind] = []
    real = gate_mod._open_read

    def counted(found: object, target: AccessTarget) -> bool:
        checks.append(target.kind)
        return real(found, target)  # type: ignore[arg-type]

    monkeypatch.setattr(gate_mod, "_open_read", counted)
    for path in ("/pub.txt", "/private/s.txt", "/dir/", "/private/"):
        for kind in (Kind.FILE, Kind.LISTING, Kind.SIDECAR, Kind.WRITE):
            target = AccessTarget((path,), kind)
            want = fresh.gate.decide_now(target, None, frozenset()).verdict
            checks.clear()
            assert full.gate.decide_now(target, None, frozenset()).verdict == want, (path, kind)
            if kind is not Kind.WRITE:  # the memo's question: the asked kind only
                assert checks[:1] == [kind] and Kind.REQUEST not in checks, (path, kind)
    assert full.gate._opens == memo  # kept whole, not cleared, not grown
