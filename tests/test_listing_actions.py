"""The listing page's write actions by right (issues 44 and 46), without a
browser: the page carries each control only where the reader has its
right (the access hook's answers: ``upload`` the upload form, ``mkdir``
the new-folder form, ``delete`` on an entry its rename, move and delete);
the rows' script is sent, and allowed by the CSP, only then; and the
endpoints it uses (``MOVE`` with ``Overwrite: F``, ``DELETE`` of a file
or a folder) answer with ``--upload`` alone, each under its right.
The browser side is tests/test_browser_actions.py."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest

from serverio.config import Config
from serverio.fs.globs import compile_glob
from serverio.http.access import Access, AccessTarget, Kind, Right, Verdict
from serverio.http.core import RequestFacts
from serverio.http.listing import (
    ALL_RIGHTS,
    Entry,
    ListingQuery,
    PageRights,
    listing_csp,
    render_html,
)
from serverio.http.pageassets import sha256_source
from serverio.http.rowactions import ACTIONS_SCRIPT, ACTIONS_SOURCE
from serverio.http.target import parse_target
from serverio.site.pagerights import _uniform, page_rights
from serverio.site.passwords import hash_password
from serverio.site.rules import SiteRules, WritableRule

from .conftest import make_config, memory_connection
from .test_dav_members import client_for

PASSWORD = "pw-of-the-test"
ENTRIES = [Entry("keep.txt", False, 1, 0), Entry("old.txt", False, 2, 0), Entry("d", True, -1, 0)]


def basic(user: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{PASSWORD}".encode()).decode()}


# ------------------------------------------------------------ the render


def _page(rights: PageRights) -> str:
    return render_html(("s",), ENTRIES, ListingQuery(), rights=rights).decode()


def test_no_right_no_control() -> None:
    page = _page(PageRights())
    assert "data-may" not in page and ACTIONS_SCRIPT not in page
    assert "form.files" not in page and 'class="files"' not in page
    assert 'class="mkdir"' not in page and 'id="actions"' not in page


def test_each_form_with_its_own_right() -> None:
    upload = _page(PageRights(upload=True))
    assert 'class="files"' in upload and 'class="mkdir"' not in upload
    assert '<table data-may="upload">' in upload and ACTIONS_SCRIPT not in upload
    mkdir = _page(PageRights(mkdir=True))
    assert 'class="mkdir"' in mkdir and 'class="files"' not in mkdir
    assert "drop files" not in mkdir  # nothing to drop onto without upload


def test_share_alone_sends_the_rows_script() -> None:
    page = _page(PageRights(share=True))
    assert '<table data-may="share">' in page and ACTIONS_SCRIPT in page
    assert 'class="files"' not in page


def test_delete_right_sends_the_rows_script_and_marks_the_odd_rows() -> None:
    every = _page(PageRights(delete=True))
    assert '<table data-may="delete">' in every and f"<script>{ACTIONS_SCRIPT}</script>" in every
    assert '<tr class="entry file" data-may' not in every
    # Most may be deleted: the folder says delete, the one that may not says so.
    most = _page(PageRights(delete=True, odd=frozenset({"keep.txt"})))
    assert '<tr class="entry file" data-may=""><td class="name">' in most
    assert most.count("data-may=") == 2
    # Few may: the folder says nothing of delete, the one that may says so.
    few = _page(PageRights(odd=frozenset({"old.txt"})))
    assert '<table data-may="">' in few and ACTIONS_SCRIPT in few
    row = re.search(r'<tr class="entry file" data-may="delete">.*?</tr>', few)
    assert row is not None and "old.txt" in row.group()


def test_the_csp_allows_the_rows_script_by_its_hash() -> None:
    assert ACTIONS_SOURCE == sha256_source(ACTIONS_SCRIPT)
    assert ACTIONS_SOURCE.encode() in listing_csp(False, False, True)
    assert ACTIONS_SOURCE.encode() not in listing_csp(True, True, False)
    assert b"'unsafe-inline'" not in listing_csp(True, True, True)


def test_rights_key_tells_renders_apart() -> None:
    keys = {
        r.key()
        for r in (
            PageRights(),
            ALL_RIGHTS,
            PageRights(upload=True),
            PageRights(delete=True, odd=frozenset({"a"})),
            PageRights(delete=True, odd=frozenset({"b"})),
        )
    }
    assert len(keys) == 5


# ------------------------------------------------------------ the decision


class _Asked:
    """An access hook that allows the (path, right) pairs it is given
    (pending: as for Basic credentials, which ``may`` then decides for
    the user the folder's ENTRY names)."""

    def __init__(self, allowed: set[tuple[str, Right]], pending: str = "") -> None:
        self.allowed = allowed
        self.pending = pending
        self.asked: list[tuple[str, Right]] = []

    def access_now(
        self, target: AccessTarget, req: RequestFacts | None, user: str | None = None
    ) -> Access:
        if target.kind is Kind.ENTRY:  # verified credentials: their user
            return Access(Verdict.ALLOW, user=self.pending)
        key = (target.paths[0], target.needs)
        self.asked.append(key)
        if self.pending:
            return Access(Verdict.PENDING)
        return Access(Verdict.ALLOW if key in self.allowed else Verdict.FORBID)

    def may(self, right: Right, path: str, user: str | None) -> bool:
        return user == "alice" and (path, right) in self.allowed


def _req(path: str) -> RequestFacts:
    return RequestFacts(method=b"GET", target=parse_target(b"GET", path.encode()))


def test_page_rights_ask_the_hook_on_the_folder_and_each_entry() -> None:
    req = _req("/s/")
    hook = _Asked({("/s/", Right.UPLOAD), ("/s/old.txt", Right.DELETE), ("/s/d/", Right.DELETE)})
    got = page_rights(hook, req, ENTRIES, ALL_RIGHTS)
    assert got == PageRights(upload=True, mkdir=False, delete=True, odd=frozenset({"keep.txt"}))
    assert ("/s/", Right.MKDIR) in hook.asked and ("/s/keep.txt", Right.DELETE) in hook.asked
    # What the features do not offer is not asked, and not given.
    hook.asked.clear()
    assert page_rights(hook, req, ENTRIES, PageRights(upload=True)) == PageRights(upload=True)
    assert hook.asked == [("/s/", Right.UPLOAD)]
    # Pending a password check of this request's Basic credentials: as
    # the user they were verified as (the folder's ENTRY names them).
    every = {("/s/", r) for r in (Right.UPLOAD, Right.MKDIR)}
    every |= {(f"/s/{n}", Right.DELETE) for n in ("keep.txt", "old.txt", "d/")}
    every |= {(f"/s/{n}", Right.OVERWRITE) for n in ("keep.txt", "old.txt")}
    assert page_rights(_Asked(every, pending="alice"), req, ENTRIES, ALL_RIGHTS) == ALL_RIGHTS
    assert page_rights(_Asked(every, pending="bob"), req, ENTRIES, ALL_RIGHTS) == PageRights()
    # Share: a signed-in reader (the folder's ENTRY names them) with the right.
    shares = _Asked({("/s/", Right.SHARE)}, pending="alice")
    assert page_rights(shares, req, ENTRIES, PageRights(share=True)) == PageRights(share=True)
    nobody = _Asked({("/s/", Right.SHARE)})  # anonymous: no user, no share link
    assert page_rights(nobody, req, ENTRIES, PageRights(share=True)) == PageRights()
    # Overwrite (the editor's save): asked of the text files it opens only,
    # most say the folder's, the others their own.
    edits = _Asked({("/s/old.txt", Right.OVERWRITE)})
    got = page_rights(edits, req, ENTRIES, PageRights(overwrite=True))
    assert got == PageRights(overwrite=True, odd_overwrite=frozenset({"keep.txt"}))
    assert sorted(edits.asked) == [
        ("/s/keep.txt", Right.OVERWRITE),
        ("/s/old.txt", Right.OVERWRITE),
    ]
    assert got.row_tokens("keep.txt") == "" and got.row_tokens("old.txt") is None


def _writable(pattern: str) -> WritableRule:
    return WritableRule(pattern, compile_glob(pattern), frozenset({"put", "delete"}), "")


@pytest.mark.parametrize(
    ("pattern", "uniform"),
    [
        ("/**", True),  # every path
        ("/s/**", True),  # every entry of /s/
        ("/other/**", True),  # none of them
        ("/s/*.txt", False),  # some
        ("/s/keep.txt", False),
        ("/s/d/**", False),  # d's own members, not d: the entries differ
        ("**/*.txt", False),
    ],
)
def test_rules_that_cannot_tell_entries_apart_are_uniform(pattern: str, uniform: bool) -> None:
    assert _uniform(SiteRules(writable=(_writable(pattern),)), "/s/") is uniform


def test_case_folding_rules_are_never_uniform() -> None:
    assert _uniform(SiteRules(), "/s/")
    assert not _uniform(SiteRules(fold=True), "/s/")
    assert not _uniform(None, "/s/")  # a hook without rules: asked per entry


class _Ruled(_Asked):
    """:class:`_Asked` with the site's rules (what Site has), which the
    page reads to ask once per kind of entry when they are uniform."""

    def __init__(self, allowed: set[tuple[str, Right]], rules: SiteRules) -> None:
        super().__init__(allowed)
        self.rules = rules


def test_page_rights_ask_once_per_kind_of_entry_under_uniform_rules() -> None:
    """A 10,000-entry folder was 16,000 questions to the access hook per
    listing (issue 46's listing cost): under rules that cannot tell the
    entries apart, one file's and one folder's answer is every file's and
    every folder's."""
    req = _req("/s/")
    files = [Entry(f"f{i}.txt", False, 1, 0) for i in range(50)]
    entries = [*files, Entry("d", True, -1, 0), Entry("e", True, -1, 0), Entry(".h", False, 1, 0)]
    allowed = {(f"/s/{e.name}{'/' if e.is_dir else ''}", Right.DELETE) for e in entries}
    hook = _Ruled(allowed, SiteRules())
    got = page_rights(hook, req, entries, PageRights(delete=True))
    assert got == PageRights(delete=True)
    # One file, one folder, one dotted name.
    assert hook.asked == [
        ("/s/f0.txt", Right.DELETE),
        ("/s/d/", Right.DELETE),
        ("/s/.h", Right.DELETE),
    ]
    # A table naming one entry: each is asked, and the odd one is told apart.
    ruled = _Ruled(
        allowed - {("/s/f7.txt", Right.DELETE)}, SiteRules(writable=(_writable("/s/f7.txt"),))
    )
    got = page_rights(ruled, req, entries, PageRights(delete=True))
    assert got == PageRights(delete=True, odd=frozenset({"f7.txt"}))
    assert len(ruled.asked) == len(entries)


# ------------------------------------------------------------ a server


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "incoming" / "sub").mkdir(parents=True)
    (root / "incoming" / "old.txt").write_text("old")
    (root / "incoming" / "keep.txt").write_text("keep")
    (root / "incoming" / "sub" / "inner.txt").write_text("inner")
    (root / "pub.txt").write_text("public")
    return root


@pytest.fixture
def users(tmp_path: Path) -> Path:
    f = tmp_path / "users"
    h = hash_password(PASSWORD, 1000)
    f.write_text(f"alice:{h}\nbob:{h}\ncarol:{h}\n")
    return f


def _rules(tree: Path, users: Path) -> Config:
    return make_config(
        tree,
        upload=True,
        min_free_space=0,
        auth_file=str(users),
        allow=(
            "anonymous:read,list@/",
            "alice:read,list,upload@/incoming",
            "bob:read,list,upload,overwrite,delete,mkdir@/incoming",
            "carol:read,list,delete@/incoming",
            "carol:read,list@/incoming/keep.txt",
        ),
    )


def _names(top: Path) -> list[str]:
    return sorted(p.relative_to(top).as_posix() for p in top.rglob("*"))


def _table(body: bytes) -> str:
    m = re.search(rb"<table( data-may=\"([^\"]*)\")?>", body)
    assert m is not None, body[:200]
    return "-" if m.group(1) is None else m.group(2).decode()


async def test_the_page_shows_each_user_only_their_controls(tree: Path, users: Path) -> None:
    cfg = _rules(tree, users)
    async with client_for(cfg, "h1") as send:
        # Anonymous: reads only, no write control at all.
        anon = await send("GET", "/", {})
        assert anon.status == 200 and _table(anon.body) == "-"
        assert ACTIONS_SCRIPT.encode() not in anon.body and b'class="files"' not in anon.body
        # alice: upload, no new folder, no delete.
        alice = await send("GET", "/incoming/", basic("alice"))
        assert alice.status == 200 and _table(alice.body) == "upload"
        assert b'class="files"' in alice.body and b'class="mkdir"' not in alice.body
        assert ACTIONS_SCRIPT.encode() not in alice.body
        assert ACTIONS_SOURCE.encode() not in alice.headers["content-security-policy"].encode()
        # bob: every control.
        bob = await send("GET", "/incoming/", basic("bob"))
        assert _table(bob.body) == "upload mkdir delete overwrite"
        assert ACTIONS_SCRIPT.encode() in bob.body and b'class="mkdir"' in bob.body
        assert ACTIONS_SOURCE in bob.headers["content-security-policy"]
        assert b'data-may=""' not in bob.body  # no row differs
        # carol: delete, but not keep.txt (its own rule): that row says so.
        carol = await send("GET", "/incoming/", basic("carol"))
        assert _table(carol.body) == "delete" and ACTIONS_SCRIPT.encode() in carol.body
        rows = re.findall(rb'<tr class="entry [a-z]+" data-may="">.*?</tr>', carol.body)
        assert len(rows) == 1 and b"keep.txt" in rows[0]
        # The server still decides: alice's DELETE is refused whatever the page shows.
        assert (await send("DELETE", "/incoming/old.txt", basic("alice"))).status == 403
        assert (await send("DELETE", "/incoming/keep.txt", basic("carol"))).status == 403
    assert (tree / "incoming" / "old.txt").exists() and (tree / "incoming" / "keep.txt").exists()


async def test_json_and_text_listings_carry_no_rights(tree: Path, users: Path) -> None:
    cfg = _rules(tree, users)
    async with client_for(cfg, "h1") as send:
        for fmt in ("json", "text"):
            r = await send("GET", f"/incoming/?format={fmt}", basic("bob"))
            assert r.status == 200 and b"data-may" not in r.body


@pytest.mark.parametrize("proto", ["h1", "h2"])
async def test_move_and_folder_delete_with_upload_alone(tmp_path: Path, proto: str) -> None:
    root = tmp_path / "www"
    (root / "a" / "deep").mkdir(parents=True)
    (root / "a" / "deep" / "x.txt").write_text("x")
    (root / "f.txt").write_text("f")
    (root / "taken.txt").write_text("taken")
    cfg = make_config(root, upload=True, min_free_space=0)
    async with client_for(cfg, proto) as send:
        # Rename: MOVE with Overwrite: F; an existing name is never replaced.
        move = {"Destination": "/taken.txt", "Overwrite": "F"}
        assert (await send("MOVE", "/f.txt", move)).status == 412
        assert (root / "taken.txt").read_text() == "taken"
        r = await send("MOVE", "/f.txt", {"Destination": "/g.txt", "Overwrite": "F"})
        assert r.status == 201 and (root / "g.txt").read_text() == "f"
        assert not (root / "f.txt").exists()
        # Move into a folder, and a folder into another.
        r = await send("MOVE", "/g.txt", {"Destination": "/a/g.txt", "Overwrite": "F"})
        assert r.status == 201 and (root / "a" / "g.txt").read_text() == "f"
        r = await send("MOVE", "/a/deep/", {"Destination": "/deep/", "Overwrite": "F"})
        assert r.status == 201 and (root / "deep" / "x.txt").read_text() == "x"
        # Into a folder that does not exist: 409, nothing moved.
        r = await send("MOVE", "/taken.txt", {"Destination": "/nope/t.txt", "Overwrite": "F"})
        assert r.status == 409 and (root / "taken.txt").exists()
        # Into itself, to another server: refused.
        r = await send("MOVE", "/a/", {"Destination": "/a/b/", "Overwrite": "F"})
        assert r.status == 403
        r = await send("MOVE", "/taken.txt", {"Destination": "http://elsewhere.example/t"})
        assert r.status == 502
        # A hidden or temporary destination: 403.
        r = await send("MOVE", "/taken.txt", {"Destination": "/.hidden", "Overwrite": "F"})
        assert r.status == 403 and (root / "taken.txt").exists()
        # A folder's DELETE (with its slash) removes the tree.
        assert (await send("DELETE", "/deep/")).status == 204
        assert not (root / "deep").exists()
        # Other WebDAV methods stay off without --webdav.
        assert (await send("PROPFIND", "/", {"Depth": "0"})).status == 405
        assert (await send("MKCOL", "/new/")).status == 405


async def test_move_and_folder_delete_ask_the_delete_right(tree: Path, users: Path) -> None:
    cfg = _rules(tree, users)
    before = _names(tree)
    async with client_for(cfg, "h1") as send:
        move = {"Destination": "/incoming/new.txt", "Overwrite": "F"}
        assert (await send("MOVE", "/incoming/old.txt", {**move, **basic("alice")})).status == 403
        assert (await send("MOVE", "/incoming/old.txt", move)).status == 401
        assert (await send("DELETE", "/incoming/sub/", basic("alice"))).status == 403
        # carol may delete in /incoming, but a move must also make the new name.
        assert (await send("MOVE", "/incoming/old.txt", {**move, **basic("carol")})).status == 403
        assert _names(tree) == before
        assert (await send("MOVE", "/incoming/old.txt", {**move, **basic("bob")})).status == 201
        assert (await send("DELETE", "/incoming/sub/", basic("bob"))).status == 204
    assert (tree / "incoming" / "new.txt").read_text() == "old"
    assert not (tree / "incoming" / "sub").exists()


async def test_signed_in_through_the_login_page_with_allow_rules_alone(
    tree: Path, users: Path, tmp_path: Path
) -> None:
    """Public reads, signed-in writes (--allow and --auth-file, no [[auth]]
    rule): the login page signs alice in, and her session's page shows her
    controls; anonymous sees none."""
    from .test_login import cookies_of, sign_in

    secret = tmp_path / "secret"
    secret.write_bytes(b"s" * 40)
    cfg = make_config(
        tree,
        upload=True,
        min_free_space=0,
        auth_file=str(users),
        secret_file=str(secret),
        allow=(
            "anonymous:read,list@/",
            "anonymous:read,list@/private",
            "bob:upload,delete,share@/private",
        ),
    )
    (tree / "private").mkdir()
    (tree / "private" / "plan.txt").write_text("PLAN")
    async with memory_connection(cfg) as (client, _, _):
        anon = await client.get("/private/")
        assert anon.status == 200 and _table(anon.body) == "-"
        session = await sign_in(client, "bob", PASSWORD)
        page = await client.get("/private/", f"Cookie: serverio-session={session}\r\n")
        assert _table(page.body) == "upload delete share" and ACTIONS_SCRIPT.encode() in page.body
        # Share links need a signed-in user: an anonymous reader of a folder
        # gets no share control even where anonymous may read.
        assert cookies_of(page) == {}


def test_the_rows_actions_stay_within_their_share_of_the_page_weight() -> None:
    """The rows' script and style: at most 3 KiB of the 100-entry page's
    60 KiB (tests/test_listing_page.py weighs the whole page)."""
    from serverio.http.rowactions import ACTIONS_CSS

    assert len((ACTIONS_SCRIPT + ACTIONS_CSS).encode()) <= 3 * 1024
    assert "/*" not in ACTIONS_SCRIPT and "//" not in ACTIONS_SCRIPT.replace("://", "")
