"""WebDAV locks, pure (serverio.dav.locks, serverio.dav.lockplans, RFC 4918
§6, §7, §9.10, §9.11, §10.4): the table's conflict rules, coverage,
timeouts with an injected clock, the bound, refresh, unlock, what DELETE
and MOVE do to locks, the If field evaluated against the table and the
current ETags, and the plans.  No event loop but for the guard's two
async methods (trio.run, no I/O: ``create`` is a stub)."""

from __future__ import annotations

import re
import uuid

import pytest
import trio

from serverio.dav.ifheader import parse_if
from serverio.dav.lockguard import TableLocks, lock_path, new_token
from serverio.dav.lockplans import (
    conflict_plan,
    denied_plan,
    full_plan,
    lock_plan,
    locked_plan,
    parse_lock_token,
    supportedlock,
    unlock_mismatch_plan,
    unlocked_plan,
)
from serverio.dav.locks import (
    DEFAULT_TIMEOUT,
    Denied,
    Lock,
    LockPath,
    LockRefusal,
    LockRefused,
    LockTable,
    check_request,
    choose_timeout,
)
from serverio.dav.xml import DAV, Element, LockInfo, LockScope, QName, parse_xml, serialize
from serverio.errors import HTTPError
from serverio.http.core import RequestFacts
from serverio.http.target import parse_target

from .conftest import extra

EX = LockInfo(LockScope.EXCLUSIVE)
SH = LockInfo(LockScope.SHARED)


def grant(
    table: LockTable,
    path: LockPath,
    info: LockInfo = EX,
    *,
    infinite: bool = False,
    timeouts: tuple[int | None, ...] = (),
    principal: str | None = None,
    now: float = 0.0,
    collection: bool = False,
) -> Lock:
    return table.grant(
        path,
        info,
        collection=collection,
        infinite=infinite,
        timeouts=timeouts,
        principal=principal,
        now=now,
    )


# ------------------------------------------------------------ tokens, timeouts


def test_tokens_are_fresh_urn_uuids() -> None:
    tokens = {new_token() for _ in range(100)}
    assert len(tokens) == 100
    for t in tokens:
        assert t.startswith("urn:uuid:")
        assert uuid.UUID(t[len("urn:uuid:") :]).version == 4


@pytest.mark.parametrize(
    ("prefs", "maximum", "granted"),
    [
        ((), 86400, DEFAULT_TIMEOUT),  # absent: the default
        ((), 60, 60),  # the default is capped too
        ((600,), 86400, 600),
        ((600, None), 86400, 600),  # the first preference wins
        ((None,), 86400, 86400),  # Infinite: the maximum
        ((None, 600), 100, 100),
        ((2**32 - 1,), 86400, 86400),  # capped
        ((0,), 86400, 1),  # at least a second
    ],
)
def test_timeout_choice(prefs: tuple[int | None, ...], maximum: int, granted: int) -> None:
    assert choose_timeout(prefs, maximum) == granted


# ------------------------------------------------------------ conflicts

A: LockPath = ("a",)
AB: LockPath = ("a", "b")
ABC: LockPath = ("a", "b", "c")
B: LockPath = ("b",)

# (held: scope, root, infinite) x (asked: scope, path, infinite) -> conflict?
CONFLICTS = [
    # §6.1: an exclusive lock conflicts with any other on the resource.
    ((EX, A, False), (EX, A, False), True),
    ((EX, A, False), (SH, A, False), True),
    ((SH, A, False), (EX, A, False), True),
    # §6.2: shared locks do not conflict with each other.
    ((SH, A, False), (SH, A, False), False),
    # A depth-infinity lock on a collection covers its members (§7.4) ...
    ((EX, A, True), (EX, ABC, False), True),
    ((EX, A, True), (SH, AB, False), True),
    ((SH, A, True), (SH, AB, True), False),
    # ... a depth-0 one does not (it protects the membership, not members).
    ((EX, A, False), (EX, AB, False), False),
    # A depth-infinity lock asked above a locked member conflicts with it.
    ((EX, ABC, False), (EX, A, True), True),
    ((SH, ABC, False), (EX, A, True), True),
    ((SH, ABC, False), (SH, A, True), False),
    # ... a depth-0 one does not reach the member.
    ((EX, ABC, False), (EX, A, False), False),
    # Unrelated resources, and a name that is only a string prefix.
    ((EX, A, True), (EX, B, True), False),
    ((EX, ("a",), True), (EX, ("ab",), False), False),
    # The root collection, depth infinity: covers everything.
    ((EX, (), True), (SH, ABC, False), True),
]


@pytest.mark.parametrize(("held", "asked", "conflict"), CONFLICTS)
def test_conflict_rules(
    held: tuple[LockInfo, LockPath, bool],
    asked: tuple[LockInfo, LockPath, bool],
    conflict: bool,
) -> None:
    table = LockTable(max_locks=4096, timeout_max=86400, tokens=new_token)
    first = grant(table, held[1], held[0], infinite=held[2])
    if conflict:
        with pytest.raises(LockRefused) as err:
            grant(table, asked[1], asked[0], infinite=asked[2])
        assert err.value.refusal is LockRefusal.CONFLICT
        assert err.value.lock == first
        assert len(table) == 1
    else:
        second = grant(table, asked[1], asked[0], infinite=asked[2])
        assert second.token != first.token
        assert len(table) == 2


def test_coverage_and_discovery() -> None:
    table = LockTable(max_locks=4096, timeout_max=86400, tokens=new_token)
    coll = grant(table, A, SH, infinite=True, collection=True)
    member = grant(table, ABC, SH)
    assert table.covering(A, 0) == (coll,)
    assert table.covering(ABC, 0) == (coll, member)
    assert table.covering(("a", "zz"), 0) == (coll,)  # a member made later
    assert table.covering(B, 0) == ()
    assert table.covering((), 0) == ()
    assert table.below(A, 0) == (member,)
    assert table.below((), 0) == (coll, member)


# ------------------------------------------------------------ time


def test_locks_expire_with_the_injected_clock() -> None:
    table = LockTable(max_locks=4096, timeout_max=100, tokens=new_token)
    lock = grant(table, A, timeouts=(10,), now=1000.0)
    assert lock.expires == 1010.0 and lock.timeout == 10
    assert lock.remaining(1000.0) == 10
    assert lock.remaining(1009.5) == 1
    assert table.covering(A, 1009.9) == (lock,)
    assert table.covering(A, 1010.0) == ()  # its time is up
    assert len(table) == 0
    # The resource can be locked again.
    grant(table, A, now=1010.0)


def test_refresh_extends_and_keeps_the_token() -> None:
    table = LockTable(max_locks=4096, timeout_max=100, tokens=new_token)
    lock = grant(table, A, infinite=True, timeouts=(10,), now=0.0)
    # Through a member (litmus indirect_refresh): the lock covers it.
    fresh = table.refresh(AB, [lock.token], timeouts=(50,), principal=None, now=8.0)
    assert [f.token for f in fresh] == [lock.token]
    assert fresh[0].expires == 58.0
    assert table.covering(A, 20.0) == fresh  # the old expiry is stale
    assert table.covering(A, 58.0) == ()
    # A token that is not the lock's, or another principal's refresh: none.
    lock = grant(table, A, timeouts=(10,), now=100.0, principal="ann")
    assert table.refresh(A, ["urn:uuid:x"], timeouts=(), principal="ann", now=101) == ()
    assert table.refresh(A, [lock.token], timeouts=(), principal="bob", now=101) == ()
    assert table.refresh(B, [lock.token], timeouts=(), principal="ann", now=101) == ()


def test_expiry_after_a_refresh_shortened_nothing() -> None:
    # A refresh to a later time leaves the table's "soonest" early: the
    # pass it triggers drops nothing and the lock lives to its new expiry.
    table = LockTable(max_locks=4096, timeout_max=100, tokens=new_token)
    lock = grant(table, A, timeouts=(10,))
    other = grant(table, B, timeouts=(50,))
    table.refresh(A, [lock.token], timeouts=(100,), principal=None, now=5.0)
    assert table.expire(20.0) == 0 and len(table) == 2
    assert table.expire(50.0) == 1 and table.get(other.token, 50.0) is None
    assert table.covering(A, 104.9) != () and table.covering(A, 105.0) == ()


# ------------------------------------------------------------ the bound


def test_a_full_table_refuses_until_locks_expire() -> None:
    table = LockTable(max_locks=3, timeout_max=100, tokens=new_token)
    for i in range(3):
        grant(table, (f"f{i}",), timeouts=(10,), now=0.0)
    with pytest.raises(LockRefused) as err:
        grant(table, ("more",), now=5.0)
    assert err.value.refusal is LockRefusal.FULL
    assert len(table) == 3
    grant(table, ("more",), now=10.0)  # the three expired first
    assert len(table) == 1


def test_bounds_are_positive() -> None:
    with pytest.raises(ValueError):
        LockTable(max_locks=0, timeout_max=1, tokens=new_token)
    with pytest.raises(ValueError):
        LockTable(max_locks=1, timeout_max=0, tokens=new_token)


# ------------------------------------------------------------ unlock, forget


def test_release() -> None:
    table = LockTable(max_locks=4096, timeout_max=86400, tokens=new_token)
    lock = grant(table, A, infinite=True, principal="ann")
    with pytest.raises(LockRefused) as err:
        table.release("urn:uuid:nope", A, "ann", 0)
    assert err.value.refusal is LockRefusal.NO_LOCK
    with pytest.raises(LockRefused) as err:
        table.release(lock.token, B, "ann", 0)  # does not cover B
    assert err.value.refusal is LockRefusal.NO_LOCK
    with pytest.raises(LockRefused) as err:
        table.release(lock.token, A, "bob", 0)
    assert err.value.refusal is LockRefusal.NOT_OWNER
    # Through a member it covers (§9.11: the lock applies to the URI).
    assert table.release(lock.token, AB, "ann", 0) == lock
    assert len(table) == 0
    with pytest.raises(LockRefused):
        table.release(lock.token, A, "ann", 0)  # twice: gone


def test_forget_removes_the_subtree_only() -> None:
    # DELETE of a/ (§9.6.1) or MOVE of its source (§9.9: locks not moved).
    table = LockTable(max_locks=4096, timeout_max=86400, tokens=new_token)
    grant(table, A, SH, infinite=True)
    grant(table, ABC, SH)
    other = grant(table, ("ab",))
    keep = grant(table, B)
    assert table.forget(A) == 2
    assert set(table._by_token) == {other.token, keep.token}
    assert table.forget(("nothing",)) == 0


# ------------------------------------------------------------ If + locks


def etags(path: LockPath) -> str | None:
    return {A: '"ea"', AB: '"eab"', B: '"eb"'}.get(path)


def resolve(tag: str) -> LockPath | None:
    path = re.sub(r"^https?://[^/]+", "", tag).strip("/")
    return tuple(path.split("/")) if path else ()


def run_check(
    table: LockTable,
    if_value: str | None,
    affected: list[tuple[LockPath, bool]],
    request: LockPath = A,
    principal: str | None = None,
) -> Denied | None:
    field = parse_if([if_value.encode()]) if if_value is not None else None
    return check_request(
        table,
        field,
        request,
        affected,
        etag_of=etags,
        resolve=resolve,
        principal=principal,
        now=0.0,
    )


def test_if_without_locks_is_an_etag_precondition() -> None:
    table = LockTable(max_locks=4096, timeout_max=86400, tokens=new_token)
    assert run_check(table, None, [(A, False)]) is None
    assert run_check(table, '(["ea"])', [(A, False)]) is None
    assert run_check(table, '(["zz"])', [(A, False)]) == Denied(412)
    assert run_check(table, '(Not ["ea"])', [(A, False)]) == Denied(412)
    # A weak tag never matches (compared strongly).
    assert run_check(table, '([W/"ea"])', [(A, False)]) == Denied(412)
    # No lock: a state token never matches (litmus fail_cond_put_unlocked).
    assert run_check(table, "(<urn:uuid:x>)", [(A, False)]) == Denied(412)
    assert run_check(table, "(Not <DAV:no-lock>)", [(A, False)]) is None
    # An unmapped URL has no state (§10.4.5).
    assert run_check(table, "(<DAV:no-lock>)", [(A, False)]) == Denied(412)
    assert run_check(table, '</nowhere> (Not ["x"])', [(A, False)]) is None


def test_litmus_conditional_puts_on_a_locked_file() -> None:
    table = LockTable(max_locks=4096, timeout_max=86400, tokens=new_token)
    lock = grant(table, A)
    tok = lock.token
    url = "http://127.0.0.1:1/a"
    cases: list[tuple[str | None, Denied | None]] = [
        (None, Denied(423, lock)),  # notowner_modify
        (f"(<{tok}>)", None),  # owner_modify
        (f'<{url}> (<{tok}> ["ea"])', None),  # cond_put
        (f'<{url}> (<{tok}> ["bad"])', Denied(412)),  # fail_cond_put
        (f"(<{tok}>) (Not <DAV:no-lock>)", None),  # cond_put_with_not
        # cond_put_corrupt_token: the field holds (second list) but the
        # lock's token is not submitted: 423, not 412.
        (f"(<{tok}x>) (Not <DAV:no-lock>)", Denied(423, lock)),
        (f'(<{tok}> ["ea"]) (Not <DAV:no-lock> ["ea"])', None),  # complex_cond_put
        (f'(<{tok}> ["bad"]) (Not <DAV:no-lock> ["bad"])', Denied(412)),
        (f"(Not <{tok}>)", Denied(412)),
        (f"</b> (<{tok}>)", Denied(412)),  # the token does not cover /b
    ]
    for value, want in cases:
        assert run_check(table, value, [(A, False)]) == want, value


def test_shared_locks_one_token_per_lock_root() -> None:
    table = LockTable(max_locks=4096, timeout_max=86400, tokens=new_token)
    s1 = grant(table, A, SH, infinite=True)
    s2 = grant(table, A, SH, infinite=True)
    member = grant(table, AB, SH)
    # Either shared token of a/ will do for a/ itself ...
    assert run_check(table, f"(<{s1.token}>)", [(A, False)]) is None
    assert run_check(table, f"(<{s2.token}>)", [(A, False)]) is None
    # ... but a/b is also locked on its own: both roots need a token.
    assert run_check(table, f"(<{s1.token}>)", [(AB, False)]) == Denied(423, member)
    assert run_check(table, f"(<{member.token}>)", [(AB, False)], request=AB) == Denied(423, s1)
    both = f"(<{s2.token}> <{member.token}>)"
    assert run_check(table, both, [(AB, False)], request=AB) is None
    # Two lists, each naming one: both are submitted (§10.4.1), one holds.
    two = f"(<{s1.token}>) (<{member.token}>)"
    assert run_check(table, two, [(AB, False)], request=AB) is None


def test_depth_infinity_reaches_locked_members() -> None:
    # DELETE of a/ with a/b/c locked (§9.6.1): c's token is needed.
    table = LockTable(max_locks=4096, timeout_max=86400, tokens=new_token)
    deep = grant(table, ABC)
    assert run_check(table, None, [(A, False)]) is None
    assert run_check(table, None, [(A, True)]) == Denied(423, deep)
    # The token is submitted in a list tagged with the member (an untagged
    # list is evaluated against the request URI, which it does not cover).
    assert run_check(table, f"(<{deep.token}>)", [(A, True)]) == Denied(412)
    assert run_check(table, f"</a/b/c> (<{deep.token}>)", [(A, True)]) is None


def test_a_new_member_needs_the_parents_token() -> None:
    # A depth-0 lock on a collection protects its membership (§7.4): a PUT
    # of a new member lists the parent among the affected resources.
    table = LockTable(max_locks=4096, timeout_max=86400, tokens=new_token)
    coll = grant(table, A, collection=True)
    assert run_check(table, None, [(AB, False)]) is None  # an existing member
    assert run_check(table, None, [(AB, False), (A, False)]) == Denied(423, coll)
    assert run_check(table, f"(<{coll.token}>)", [(AB, False), (A, False)]) is None


def test_a_token_counts_only_for_its_principal() -> None:
    table = LockTable(max_locks=4096, timeout_max=86400, tokens=new_token)
    lock = grant(table, A, principal="ann")
    value = f"(<{lock.token}>)"
    assert run_check(table, value, [(A, False)], principal="ann") is None
    assert run_check(table, value, [(A, False)], principal="bob") == Denied(423, lock)
    assert run_check(table, value, [(A, False)], principal=None) == Denied(423, lock)


# ------------------------------------------------------------ plans


def fields(plan_headers: tuple[tuple[bytes, bytes], ...]) -> dict[bytes, bytes]:
    return dict(plan_headers)


def test_lock_plan() -> None:
    table = LockTable(max_locks=4096, timeout_max=86400, tokens=new_token)
    owner = Element(
        QName(DAV, "owner"),
        (),
        (Element(QName("urn:x", "who"), (), ("a&b <c>",)),),
    )
    lock = grant(table, ("dir", "f x"), LockInfo(LockScope.SHARED, owner), now=0.0)
    plan = lock_plan(table.covering(lock.root, 1.0), 1.0, new=lock, created=True)
    assert plan.status == 201
    hs = fields(plan.headers)
    assert plan.headers[0] == (b"x-content-type-options", b"nosniff")
    assert hs[b"lock-token"] == f"<{lock.token}>".encode()
    assert hs[b"content-type"] == b"application/xml; charset=utf-8"
    body = b"".join(p for p in plan.body if isinstance(p, bytes))
    assert hs[b"content-length"] == b"%d" % len(body)
    root = parse_xml(body)
    assert root is not None and root.tag == QName(DAV, "prop")
    disc = root.find(QName(DAV, "lockdiscovery"))
    assert disc is not None
    (active,) = list(disc.elements())
    names = [e.tag.name for e in active.elements()]
    assert names == ["locktype", "lockscope", "depth", "owner", "timeout", "locktoken", "lockroot"]
    assert active.find(QName(DAV, "owner")) == owner  # round-trips, escaped
    timeout = active.find(QName(DAV, "timeout"))
    assert timeout is not None and timeout.text == f"Second-{DEFAULT_TIMEOUT - 1}"
    href = active.find(QName(DAV, "lockroot"))
    assert href is not None
    assert b"<D:href>/dir/f%20x</D:href>" in body
    # A refresh: 200, no Lock-Token.
    plan = lock_plan(table.covering(lock.root, 1.0), 1.0)
    assert plan.status == 200 and b"lock-token" not in fields(plan.headers)


def test_refusal_plans() -> None:
    table = LockTable(max_locks=4096, timeout_max=86400, tokens=new_token)
    lock = grant(table, ("c",), infinite=True, collection=True)
    plan = locked_plan(lock, 0.0)
    assert plan.status == 423
    body = b"".join(p for p in plan.body if isinstance(p, bytes))
    assert b"<D:lock-token-submitted><D:href>/c/</D:href></D:lock-token-submitted>" in body
    assert denied_plan(Denied(423, lock), 0.0).body == plan.body
    assert denied_plan(Denied(412), 0.0).status == 412
    plan = conflict_plan(lock, 0.0)
    assert plan.status == 423 and b"no-conflicting-lock" in plan.body[0]  # type: ignore[operator]
    plan = unlock_mismatch_plan(0.0)
    assert plan.status == 409 and b"<D:lock-token-matches-request-uri/>" in plan.body[0]  # type: ignore[operator]
    assert full_plan(0.0).status == 507
    plan = unlocked_plan(0.0)
    assert plan.status == 204 and not plan.send_body
    entries = list(supportedlock().elements())
    assert len(entries) == 2
    assert "shared" in serialize(entries[1]) and "exclusive" in serialize(entries[0])


@pytest.mark.parametrize(
    ("value", "token"),
    [
        (b"<urn:uuid:1234>", "urn:uuid:1234"),
        (b"  <opaquelocktoken:x-y>\t", "opaquelocktoken:x-y"),
        (None, None),
        (b"urn:uuid:1234", None),  # not a Coded-URL
        (b"<urn:uuid:1> <urn:uuid:2>", None),
        (b"<>", None),
        (b"<" + b"a:" + b"x" * 2000 + b">", None),
    ],
)
def test_lock_token_field(value: bytes | None, token: str | None) -> None:
    if token is None:
        with pytest.raises(HTTPError) as err:
            parse_lock_token(value)
        assert err.value.status == 400
    else:
        assert parse_lock_token(value) == token


# ------------------------------------------------------------ the guard

LOCKINFO = (
    b'<?xml version="1.0"?><D:lockinfo xmlns:D="DAV:"><D:lockscope><D:exclusive/>'
    b"</D:lockscope><D:locktype><D:write/></D:locktype><D:owner>litmus</D:owner></D:lockinfo>"
)


def request(method: bytes, path: bytes, **fields: str) -> RequestFacts:
    return RequestFacts(method=method, target=parse_target(method, path), extra=extra(**fields))


def test_guard_lock_refresh_unlock() -> None:
    guard = TableLocks(LockTable(max_locks=4096, timeout_max=86400, tokens=new_token))
    made: list[str] = []

    async def create() -> int:
        made.append("x")
        return 201

    async def main() -> None:
        assert guard.classes == b"1, 2"
        plan = await guard.lock(request(b"LOCK", b"/new"), LOCKINFO, "new", False, 0.0, create)
        assert plan.status == 201 and made == ["x"]
        token = fields(plan.headers)[b"lock-token"].decode()[1:-1]
        assert len(guard.discovery("new", 1.0)) == 1
        assert guard.check(
            request(b"PUT", b"/new"), ["new"], depth_infinity=False, etag_of=lambda p: None, now=1
        ) == (423, "new")
        ok = request(b"PUT", b"/new", dav_if=f"(<{token}>)")
        assert guard.check(ok, ["new"], depth_infinity=False, etag_of=lambda p: None, now=1) is None
        # Another LOCK: 423; a refresh without If: 400; with it: 200.
        plan = await guard.lock(request(b"LOCK", b"/new"), LOCKINFO, "new", True, 1.0, create)
        assert plan.status == 423
        plan = await guard.lock(request(b"LOCK", b"/new"), b"", "new", True, 1.0, create)
        assert plan.status == 400
        refresh = request(b"LOCK", b"/new", dav_if=f"(<{token}>)", timeout="Second-100")
        plan = await guard.lock(refresh, b"", "new", True, 2.0, create)
        assert plan.status == 200 and b"Second-100" in plan.body[0]  # type: ignore[operator]
        plan = await guard.lock(
            request(b"LOCK", b"/new", dav_if="(<urn:uuid:nope>)"), b"", "new", True, 2.0, create
        )
        assert plan.status == 412
        # Depth 1 is not a lock depth; a malformed body is 400.
        plan = await guard.lock(
            request(b"LOCK", b"/o", depth="1"), LOCKINFO, "o", True, 2.0, create
        )
        assert plan.status == 400
        plan = await guard.lock(request(b"LOCK", b"/o"), b"<x", "o", True, 2.0, create)
        assert plan.status == 400
        # UNLOCK: wrong token 409, none 400, right 204, twice 409.
        bad = request(b"UNLOCK", b"/new", lock_token="<urn:uuid:nope>")
        assert (await guard.unlock(bad, "new", 3.0)).status == 409
        assert (await guard.unlock(request(b"UNLOCK", b"/new"), "new", 3.0)).status == 400
        good = request(b"UNLOCK", b"/new", lock_token=f"<{token}>")
        assert (await guard.unlock(good, "new", 3.0)).status == 204
        assert (await guard.unlock(good, "new", 3.0)).status == 409
        assert guard.discovery("new", 3.0) == ()

    trio.run(main)


def test_guard_lock_of_an_unmapped_url_that_cannot_be_made_leaves_no_lock() -> None:
    guard = TableLocks(LockTable(max_locks=4096, timeout_max=86400, tokens=new_token))

    async def refused() -> int:
        return 409  # no parent collection (§9.10.4)

    async def hangs() -> int:
        await trio.sleep_forever()
        raise AssertionError

    async def main() -> None:
        plan = await guard.lock(request(b"LOCK", b"/x/y"), LOCKINFO, "x/y", False, 0.0, refused)
        assert plan.status == 409
        assert len(guard.table) == 0
        with trio.move_on_after(0.01):
            await guard.lock(request(b"LOCK", b"/x/y"), LOCKINFO, "x/y", False, 0.0, hangs)
        assert len(guard.table) == 0  # cancelled: no lock recorded

    trio.run(main)


def test_guard_moved_and_depth_for_parents() -> None:
    guard = TableLocks(LockTable(max_locks=4096, timeout_max=86400, tokens=new_token))
    table = guard.table
    grant(table, lock_path("d/f"))
    etag = {"d": None}.get
    # DELETE of d/ lists d and its parent "" with depth infinity: the
    # member's lock counts, the parent's siblings do not.
    other = grant(table, lock_path("e"))
    req = request(b"DELETE", b"/d/")
    assert guard.check(req, ["d", ""], depth_infinity=True, etag_of=etag, now=0) == (423, "d/f")
    assert other.token in table._by_token
    guard.moved("d", None)
    assert guard.check(req, ["d", ""], depth_infinity=True, etag_of=etag, now=0) is None
    assert guard.discovery("e", 0) and not guard.discovery("d/f", 0)
    assert len(guard.supported()) == 2


def test_guard_moved_drops_source_and_replaced_destination_locks() -> None:
    guard = TableLocks(LockTable(max_locks=4096, timeout_max=86400, tokens=new_token))
    table = guard.table
    grant(table, lock_path("src"))
    grant(table, lock_path("dst"))
    parent = grant(table, lock_path("p"), SH, infinite=True, collection=True)
    guard.moved("src", "dst")
    assert not guard.discovery("src", 0) and not guard.discovery("dst", 0)
    # Moved under a depth-infinity lock: covered by it, by path.
    guard.moved("x", "p/x")
    assert [e.find(QName(DAV, "locktoken")) for e in guard.discovery("p/x", 0)] == [
        Element(QName(DAV, "locktoken"), (), (Element(QName(DAV, "href"), (), (parent.token,)),))
    ]
