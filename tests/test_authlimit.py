"""The basic-auth failure limiter: its rules as a table (pure, explicit
clock) and through the Site API under concurrency (real auth-pool threads,
cheap hashes)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import trio

from serverio.http.core import RequestFacts
from serverio.http.target import parse_target
from serverio.site import passwords as passwords_mod
from serverio.site import service as site_mod
from serverio.site.authlimit import (
    BACKOFF_CAP,
    CLIENT_BUDGET,
    FAILURE_BUDGET,
    FAILURE_WINDOW,
    IN_FLIGHT,
    USER_FREE,
    Attempt,
    AuthLimiter,
)
from serverio.site.gate import client_key
from serverio.site.passwords import hash_password
from serverio.site.service import Site

from .conftest import make_config
from .test_site import basic


def _fail(lim: AuthLimiter, client: str, user: str, now: float) -> bool:
    """One wrong password: True when it was let through to the hash."""
    got = lim.reserve(client, user, now)
    if not isinstance(got, Attempt):
        return False
    lim.settle(got, failed=True)
    return True


# ------------------------------------------------------------ the table


def test_budget_per_client_and_user_then_refused_even_when_right() -> None:
    lim = AuthLimiter()
    assert all(_fail(lim, "a", "alice", 0.0) for _ in range(FAILURE_BUDGET))
    assert lim.refusal("a", "alice", 1.0) == pytest.approx(FAILURE_WINDOW - 1.0)
    assert isinstance(lim.reserve("a", "alice", 1.0), float)  # the right password too
    # The same client for another user, another client for alice: not refused.
    assert lim.refusal("a", "bob", 1.0) is None
    assert lim.refusal("b", "alice", 1.0) is None
    # The window slides: the oldest failure leaves it, one attempt returns.
    assert lim.refusal("a", "alice", FAILURE_WINDOW + 0.5) is None


def test_a_success_gives_the_reservation_back() -> None:
    lim = AuthLimiter()
    for _ in range(FAILURE_BUDGET * 3):
        got = lim.reserve("a", "alice", 0.0)
        assert isinstance(got, Attempt)
        lim.settle(got, failed=False)
        lim.settle(got, failed=False)  # idempotent
    assert lim.refusal("a", "alice", 0.0) is None and lim.in_flight("a") == 0


def test_in_flight_per_client_is_bounded() -> None:
    lim = AuthLimiter()
    held = [lim.reserve("a", f"u{i}", 0.0) for i in range(IN_FLIGHT)]
    assert all(isinstance(h, Attempt) for h in held)
    assert lim.reserve("a", "other", 0.0) == 1.0  # refused at once
    assert isinstance(lim.reserve("b", "other", 0.0), Attempt)
    for h in held:
        assert isinstance(h, Attempt)
        lim.settle(h, failed=True)
    assert isinstance(lim.reserve("a", "other", 0.0), Attempt)


def test_per_user_backoff_holds_back_failed_clients_not_fresh_ones() -> None:
    """Past USER_FREE failures for alice (from any clients), a client that
    failed for her waits for the backoff; a client that did not fail for
    her is let through, so the real user gets in during a spread attack.
    The backoff doubles per failure, capped."""
    lim = AuthLimiter()
    for i in range(USER_FREE):
        assert _fail(lim, f"c{i}", "alice", 0.0)
    assert _fail(lim, "c0", "alice", 0.0)  # c0 had one failure, no backoff yet: 11th
    wait = lim.refusal("c0", "alice", 0.0)
    assert wait == pytest.approx(1.0)  # base * 2**0
    assert lim.refusal("fresh", "alice", 0.0) is None
    assert lim.refusal("c0", "bob", 0.0) is None  # bob is not under backoff
    got = lim.reserve("fresh", "alice", 0.0)
    assert isinstance(got, Attempt)
    lim.settle(got, failed=False)  # the right password: passes
    # The backoff grows with every failure, up to the cap.
    for i in range(20):
        assert _fail(lim, f"d{i}", "alice", 0.0)
    assert lim.refusal("c0", "alice", 0.0) == pytest.approx(BACKOFF_CAP)
    assert lim.refusal("d0", "alice", 1.0) == pytest.approx(BACKOFF_CAP - 1.0)
    # Forgotten after a quiet period.
    assert lim.refusal("d0", "alice", 10_000.0) is None


def test_unknown_and_known_users_are_limited_alike() -> None:
    """The limiter never sees whether a user exists: the same sequence of
    failures gives the same refusals for any name."""
    out = []
    for name in ("alice", "no-such-user"):
        lim = AuthLimiter()
        out.append([_fail(lim, "a", name, float(t)) for t in range(30)])
    assert out[0] == out[1]


def test_tables_are_bounded_and_eviction_keeps_the_recent() -> None:
    """Past max_entries the least recently used entries go, never all: an
    attacker's spent budget survives thousands of other clients failing."""
    lim = AuthLimiter(max_entries=4096)
    for _ in range(FAILURE_BUDGET):
        _fail(lim, "attacker", "alice", 0.0)
    for i in range(5000):
        _fail(lim, f"10.1.{i // 256}.{i % 256}", f"user{i % 100}", 0.0)
        if i % 1000 == 0:
            # The attacker keeps trying (and being refused): still remembered.
            assert lim.refusal("attacker", "alice", 0.0) is not None
    assert lim.refusal("attacker", "alice", 0.0) is not None
    assert len(lim) <= 3 * 4096


def test_one_password_over_many_names_meets_the_client_budget() -> None:
    """Password spraying: one wrong password for each of 300 names from one
    client is one failure per name, under every per-user rule; the client's
    own budget lets CLIENT_BUDGET through in the window, then refuses any
    name until its oldest failure leaves the window.  Other clients are not
    affected, and a success gives its reservation back."""
    lim = AuthLimiter()
    let_through = [_fail(lim, "a", f"user{i}", 0.0) for i in range(300)]
    assert let_through.count(True) == CLIENT_BUDGET
    assert let_through[:CLIENT_BUDGET] == [True] * CLIENT_BUDGET
    assert lim.reserve("a", "alice", 1.0) == pytest.approx(FAILURE_WINDOW - 1.0)
    assert lim.client_refusal("a", 1.0) == pytest.approx(FAILURE_WINDOW - 1.0)
    assert isinstance(lim.reserve("b", "user1", 1.0), Attempt)
    assert lim.client_refusal("a", FAILURE_WINDOW + 0.5) is None
    got = lim.reserve("a", "alice", FAILURE_WINDOW + 0.5)
    assert isinstance(got, Attempt)
    lim.settle(got, failed=False)  # the right password: not counted
    fresh = AuthLimiter()
    for i in range(CLIENT_BUDGET - 1):
        assert _fail(fresh, "c", f"user{i}", 0.0)
    ok = fresh.reserve("c", "alice", 0.0)
    assert isinstance(ok, Attempt)
    fresh.settle(ok, failed=False)
    assert fresh.client_refusal("c", 0.0) is None
    assert _fail(fresh, "c", "bob", 0.0)
    assert fresh.client_refusal("c", 0.0) is not None


def test_workers_divide_the_client_budget() -> None:
    for n in (1, 2, 4, 7):
        lims = [AuthLimiter(processes=n) for _ in range(n)]
        let_through = sum(
            _fail(lim, "a", f"user{i}", 0.0) for lim in lims for i in range(2 * CLIENT_BUDGET)
        )
        assert CLIENT_BUDGET - n < let_through <= CLIENT_BUDGET, n


async def test_long_user_names_are_kept_small(root: Path, tmp_path: Path) -> None:
    """User names are client input (up to ~3 KB in a 4096-character token):
    the limiter keys a long one by a digest (3 KB names x 4,096 entries x 2
    tables would be 24 MB), and still limits it."""
    site = _site(root, tmp_path)
    name = "m" * 2000  # parse_basic takes tokens up to 4096 characters
    for i in range(FAILURE_BUDGET):
        assert await _attempts(site, [("192.0.2.8", name, f"x{i}")]) == [401]
    assert await _attempts(site, [("192.0.2.8", name, "x")]) == [429]
    keys = list(site.limiter._users)
    assert len(keys) == 1 and len(keys[0]) < 64


def test_workers_divide_the_budget() -> None:
    """--workers N: each process gets budget // N, so all of them together
    allow at most the documented budget per (client, user)."""
    for n in (1, 2, 3, 4, 10):
        lims = [AuthLimiter(processes=n) for _ in range(n)]
        let_through = sum(_fail(lim, "a", "alice", 0.0) for lim in lims for _ in range(50))
        assert let_through <= FAILURE_BUDGET, n
        assert let_through >= FAILURE_BUDGET - n + 1  # not needlessly lower
    lims = [AuthLimiter(processes=32) for _ in range(32)]
    assert sum(_fail(lim, "a", "alice", 0.0) for lim in lims for _ in range(5)) == 32


@pytest.mark.parametrize(
    ("peer", "key"),
    [
        ("192.0.2.1", "192.0.2.1"),
        ("192.0.2.1:5555", "192.0.2.1"),
        ("::ffff:192.0.2.1", "192.0.2.1"),
        ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),
        ("[2001:db8:1:2::9]:443", "2001:db8:1:2::/64"),
        ("memory", "memory"),
        ("_hidden", "_hidden"),
    ],
)
def test_client_key(peer: str, key: str) -> None:
    assert client_key(peer) == key


# ------------------------------------------------------------ through the Site


def _site(root: Path, tmp_path: Path, **kw: object) -> Site:
    users = tmp_path / "users"
    users.write_text(
        f"alice:{hash_password('wonderland', 1000)}\nbob:{hash_password('builder', 1000)}\n"
    )
    site = site_mod.load_site(make_config(root, auth_file=str(users), **kw))
    assert site is not None
    return site


def _req(user: str, password: str) -> RequestFacts:
    value = basic(user, password).split(": ", 1)[1].strip()
    return RequestFacts(b"GET", parse_target(b"GET", b"/hello.txt"), authorization=value)


def _counting_verify(monkeypatch: pytest.MonkeyPatch, delay: float = 0.0) -> list[str]:
    """Patch the hash check (run in the auth pool's threads) to record each
    password verified; ``delay`` keeps each one in flight a while."""
    calls: list[str] = []
    lock = threading.Lock()
    real = passwords_mod.verify

    def counting(h: str, password: str) -> bool:
        with lock:
            calls.append(password)
        if delay:
            time.sleep(delay)
        return real(h, password)

    monkeypatch.setattr(passwords_mod, "verify", counting)
    return calls


async def _attempts(site: Site, batch: list[tuple[str, str, str]]) -> list[int]:
    """Run (client, user, password) attempts all at once; their statuses."""
    statuses: list[int] = [0] * len(batch)

    async def one(i: int, client: str, user: str, password: str) -> None:
        ticket = await site.route(_req(user, password), time.time(), lambda: client)
        statuses[i] = 200 if ticket.plan is None else ticket.plan.status

    async with trio.open_nursery() as nursery:
        for i, (client, user, password) in enumerate(batch):
            nursery.start_soon(one, i, client, user, password)
    return statuses


async def test_concurrent_wrong_attempts_from_one_address_are_all_counted(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 2: waves of concurrent wrong passwords from one address.  The
    old limiter read the count, awaited the hash, stored the stale count + 1:
    a wave of 34 in flight raised it by one.  Now each attempt is counted
    before its hash, at most IN_FLIGHT hashes run per client (the rest: 429
    at once) and at most FAILURE_BUDGET are verified in the window."""
    calls = _counting_verify(monkeypatch, delay=0.01)
    site = _site(root, tmp_path)
    statuses: list[int] = []
    with trio.fail_after(30):
        for wave in range(12):
            statuses += await _attempts(
                site, [("192.0.2.1", "alice", f"w{wave}-{i}") for i in range(40)]
            )
    assert len(calls) == FAILURE_BUDGET
    assert set(statuses) == {401, 429}
    assert statuses.count(401) == FAILURE_BUDGET
    # The right password from that client is refused for the window.
    assert await _attempts(site, [("192.0.2.1", "alice", "wonderland")]) == [429]


async def test_a_shared_address_does_not_lock_out_other_users(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 4: ten wrong passwords for alice from a NAT address do not lock
    out bob behind the same address (the old per-address budget did)."""
    _counting_verify(monkeypatch)
    site = _site(root, tmp_path)
    for i in range(FAILURE_BUDGET):
        assert await _attempts(site, [("203.0.113.1", "alice", f"x{i}")]) == [401]
    assert await _attempts(site, [("203.0.113.1", "bob", "builder")]) == [200]
    assert await _attempts(site, [("203.0.113.1", "alice", "wonderland")]) == [429]


async def test_spraying_from_a_shared_address_stops_at_the_client_budget(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One password tried on many names from one address (each name one
    failure, the per-user rules never met) is verified CLIENT_BUDGET times
    in the window, then 429 for any name, a real user's too.  Alice, signed
    in from that address before (her credentials verified and cached), is
    not held back; another address is not either."""
    _counting_verify(monkeypatch)
    site = _site(root, tmp_path)
    assert await _attempts(site, [("203.0.113.9", "alice", "wonderland")]) == [200]
    statuses: list[int] = []
    with trio.fail_after(60):
        for i in range(CLIENT_BUDGET + 20):
            statuses += await _attempts(site, [("203.0.113.9", f"name{i}", "Summer2026!")])
    assert statuses[:CLIENT_BUDGET] == [401] * CLIENT_BUDGET
    # A 401 is a verified guess (the dummy hash for an unknown name), a
    # 429 one refused before any hash.
    assert set(statuses[CLIENT_BUDGET:]) == {429}
    assert await _attempts(site, [("203.0.113.9", "bob", "builder")]) == [429]
    assert await _attempts(site, [("203.0.113.9", "alice", "wonderland")]) == [200]
    assert await _attempts(site, [("198.51.100.9", "bob", "builder")]) == [200]


async def test_spread_guessing_meets_the_per_user_backoff(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 4: 200 guesses for alice from 20 addresses (10 each).  A fresh
    budget per address let all 200 through with no 429; the per-user
    backoff lets each address one guess once alice is past USER_FREE
    failures, and alice herself, from an address that has not failed,
    still gets in."""
    calls = _counting_verify(monkeypatch)
    site = _site(root, tmp_path)
    statuses: list[int] = []
    with trio.fail_after(30):
        for round_ in range(10):
            for a in range(20):
                statuses += await _attempts(site, [(f"198.51.100.{a}", "alice", f"g{round_}-{a}")])
    assert statuses.count(429) > 0
    # USER_FREE free failures, then about one per address (the backoff's
    # first doublings, 1 s, 2 s..., may let a few more through while it
    # is shorter than this test; it runs in well under a second).
    assert len(calls) <= USER_FREE + 20 + 2
    assert await _attempts(site, [("192.0.2.200", "alice", "wonderland")]) == [200]


async def test_eviction_never_forgets_everyone(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 4: after failures from 4,096 other clients the old table was
    cleared whole, and the attacker had a fresh budget; now the least
    recently used entries go, and the attacker, who keeps trying, stays."""
    monkeypatch.setattr(passwords_mod, "verify", lambda h, password: False)  # fast
    site = _site(root, tmp_path)
    for i in range(FAILURE_BUDGET):
        assert await _attempts(site, [("192.0.2.66", "alice", f"x{i}")]) == [401]
    with trio.fail_after(60):
        for start in range(0, 5000, 25):
            batch = [(f"10.9.{i // 256}.{i % 256}", "bob", "x") for i in range(start, start + 25)]
            assert set(await _attempts(site, batch)) == {401}
            if start % 500 == 0:
                assert await _attempts(site, [("192.0.2.66", "alice", "again")]) == [429]
    assert await _attempts(site, [("192.0.2.66", "alice", "wonderland")]) == [429]


async def test_a_cancelled_verification_counts_as_a_failure(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that goes away while its hash runs (the thread is abandoned
    and keeps hashing) has still spent an attempt, and its in-flight slot
    is free again: disconnecting cannot buy extra guesses."""
    gate = threading.Event()
    real = passwords_mod.verify

    def stuck(h: str, password: str) -> bool:
        gate.wait(10)
        return real(h, password)

    monkeypatch.setattr(passwords_mod, "verify", stuck)
    site = _site(root, tmp_path)
    try:
        with trio.fail_after(20):
            for i in range(FAILURE_BUDGET):
                with trio.move_on_after(0.05) as scope:
                    await site.route(_req("alice", f"x{i}"), time.time(), lambda: "192.0.2.9")
                assert scope.cancelled_caught
                assert site.limiter.in_flight("192.0.2.9") == 0
            ticket = await site.route(_req("alice", "x"), time.time(), lambda: "192.0.2.9")
            assert ticket.plan is not None and ticket.plan.status == 429
    finally:
        gate.set()


async def test_workers_together_allow_at_most_the_budget(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 4: --workers 4 is four processes, each with its own limiter,
    and a client's connections may reach all of them.  Each had the whole
    budget (4 x 10 guesses per window); now each gets 10 // 4, so the four
    together verify at most FAILURE_BUDGET."""
    calls = _counting_verify(monkeypatch)
    workers = [_site(root, tmp_path, workers=4) for _ in range(4)]
    for _ in range(FAILURE_BUDGET):
        for site in workers:
            await _attempts(site, [("192.0.2.5", "alice", "wrong")])
    assert 0 < len(calls) <= FAILURE_BUDGET
