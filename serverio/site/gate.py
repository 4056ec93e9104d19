"""The credentials side of the access hook (trio thread only).

:class:`Gate` turns an :class:`~serverio.http.access.AccessTarget` and the
request's credentials into an :class:`~serverio.http.access.Access`: the
rule that protects the target (:func:`serverio.site.access.rule_for`, the
one matcher), the Basic credentials (RFC 7617), the failure limiter
(:mod:`serverio.site.authlimit`), a bounded cache of recently verified
credentials (keyed by an HMAC with a per-process key, never the password
itself) and the password check, in its own small pool (``auth``):
password spraying saturates that pool (503), not the filesystem or work
pools, and never the event loop.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from collections import OrderedDict
from collections.abc import Callable

import trio

from ..concurrency.blocking import Pool, PoolSaturated, run_blocking
from ..http.access import ALLOWED, Access, AccessTarget, Kind, Verdict
from ..observe.stats import Stats
from .access import rule_for, rules_below, write_allowed
from .authlimit import Attempt, AuthLimiter, retry_after
from .passwords import verify_padded
from .rules import AuthRule, SiteRules, parse_basic

__all__ = ["AUTH_QUEUE", "AUTH_WORKERS", "Gate", "client_key"]

AUTH_WORKERS = 2
AUTH_QUEUE = 32
_VERIFIED_MAX = 1024  # recently verified credentials kept
_VERIFIED_TTL = 300.0  # seconds a verification is trusted
_RULES_MAX = 4096  # memoised rule per target (targets are client input)


def client_key(peer: str) -> str:
    """The limiter's key for a client address (the trusted-proxy client when
    --trusted-proxies applies): per address, not per connection (a new
    connection must not reset a budget), without a port; an IPv6 client
    by its /64, the block one host or one customer's network gets (one
    IPv6 host can use any address of it)."""
    if peer.startswith("["):
        peer = peer[1:].split("]", 1)[0]
    else:
        host, sep, port = peer.rpartition(":")
        if sep and port.isdigit() and ":" not in host:
            peer = host
    try:
        addr = ipaddress.ip_address(peer)
    except ValueError:
        return peer
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.ipv4_mapped is not None:
            return str(addr.ipv4_mapped)
        return str(ipaddress.IPv6Network((addr, 64), strict=False))
    return str(addr)


class Gate:
    """Access decisions for one server's auth rules."""

    def __init__(self, rules: SiteRules, stats: Stats, processes: int) -> None:
        self.rules = rules
        self.stats = stats
        self.auth_pool = Pool("auth", AUTH_WORKERS, AUTH_QUEUE)
        self._key = secrets.token_bytes(32)
        self._verified: OrderedDict[bytes, float] = OrderedDict()
        # Failed basic-auth attempts: per (client, user), per user, in flight.
        self.limiter = AuthLimiter(processes=processes)
        self._rules: dict[AccessTarget, AuthRule | None] = {}

    def rule(self, target: AccessTarget) -> AuthRule | None:
        """:func:`~serverio.site.access.rule_for`, memoised (bounded)."""
        rules = self._rules
        try:
            return rules[target]
        except KeyError:
            pass
        found = rule_for(self.rules, target)
        if len(rules) >= _RULES_MAX:
            rules.clear()
        rules[target] = found
        return found

    def decide_now(
        self, target: AccessTarget, authorization: str | None, granted: frozenset[int]
    ) -> Access:
        """The decision without waiting: ``Verdict.PENDING`` when a served
        target needs the limiter and the password check; never for a named
        kind (an ENTRY is shown to credentials verified within the window,
        an EVENT only when no rule protects its path)."""
        kind = target.kind
        if kind is Kind.WRITE and not write_allowed(self.rules, target):
            return Access(Verdict.FORBID)  # not a writable path, or not for this method
        if target.tree:
            return self._tree_now(target, authorization, granted)
        rule = self.rule(target)
        if rule is None:
            return ALLOWED
        if kind is Kind.EVENT:
            return Access(Verdict.CHALLENGE, rule.index, rule.realm)
        if kind is Kind.ENTRY:
            if self._verified_for(rule, authorization):
                return Access(Verdict.ALLOW, rule.index)
            return Access(Verdict.CHALLENGE, rule.index, rule.realm)
        if rule.index in granted:
            return Access(Verdict.ALLOW, rule.index)
        if parse_basic(authorization) is None:
            # No (usable) credentials: the first step of every login, not a failure.
            return Access(Verdict.CHALLENGE, rule.index, rule.realm)
        return Access(Verdict.PENDING, rule.index, rule.realm)

    async def decide(
        self,
        target: AccessTarget,
        authorization: str | None,
        granted: frozenset[int],
        peer: Callable[[], str],
    ) -> Access:
        """The whole decision: :meth:`decide_now`, then for a pending one
        the limiter, the cache of verified credentials and the password
        check (the only wait).

        The limiter is asked before the cache (a client past its budget
        gets 429 even with the right password) and reserves the attempt
        before the hash is awaited, so concurrent attempts are all counted.

        Cancellation handling: a cancelled verification (the client went
        away) is settled as a failure: its hash may still run in the
        abandoned thread, so it counts against the budget.
        """
        pending = self.decide_now(target, authorization, granted)
        if pending.verdict is not Verdict.PENDING:
            return pending
        creds = parse_basic(authorization)
        assert creds is not None
        got = await self._check(self.rules.auth[pending.rule], creds, peer)
        if target.tree and got.verdict is Verdict.ALLOW:
            # A tree's next rule (each passed one is granted from now on).
            return await self.decide(target, authorization, granted | {got.rule}, peer)
        return got

    def _tree_now(
        self, target: AccessTarget, authorization: str | None, granted: frozenset[int]
    ) -> Access:
        """:meth:`decide_now` for a :attr:`~serverio.http.access.AccessTarget.tree`
        target: the rule of its own paths and every rule that can match
        below them (:func:`~serverio.site.access.rules_below`), each as a
        target of its own would be; the first that does not allow decides
        (401 while credentials could pass it), else allowed under the first
        rule.  Not memoised: a tree target is rare (a depth-infinity LOCK)."""
        found = rule_for(self.rules, target)
        rules = {} if found is None else {found.index: found}
        for path in target.paths:
            rules.update((r.index, r) for r in rules_below(self.rules, path))
        for rule in rules.values():
            if rule.index in granted:
                continue
            if parse_basic(authorization) is None:
                return Access(Verdict.CHALLENGE, rule.index, rule.realm)
            return Access(Verdict.PENDING, rule.index, rule.realm)
        return Access(Verdict.ALLOW, next(iter(rules))) if rules else ALLOWED

    async def _check(
        self, rule: AuthRule, creds: tuple[str, str], peer: Callable[[], str]
    ) -> Access:
        user, password = creds
        client = client_key(peer())
        # The limiter's user key, per rule (users files are per rule); a long
        # name (client input, ~3 KB at most) by a keyed digest, so the
        # limiter's tables stay small whatever names are tried.
        if len(user) > 64:
            user_id = hashlib.blake2b(user.encode(), digest_size=16, key=self._key).hexdigest()
            who = f"{rule.index}:#{user_id}"
        else:
            who = f"{rule.index}:{user}"
        mono = trio.current_time()
        limiter = self.limiter
        wait = limiter.refusal(client, who, mono)
        if wait is not None:
            return Access(Verdict.THROTTLE, rule.index, retry_after=retry_after(wait))
        key = self._credentials_key(rule, user, password)
        seen = self._verified.get(key)
        if seen is not None and mono - seen < _VERIFIED_TTL:
            self._verified.move_to_end(key)
            return Access(Verdict.ALLOW, rule.index)
        attempt = limiter.reserve(client, who, mono)
        if not isinstance(attempt, Attempt):
            return Access(Verdict.THROTTLE, rule.index, retry_after=retry_after(attempt))
        # Known or not, every check of this users file does the work of its
        # cost profile (rule.dummy; passwords.verify_padded): its time does
        # not tell which users exist, nor which scheme a user's hash uses.
        known = rule.users.get(user)
        failed = True
        try:
            ok = await run_blocking(self.auth_pool, verify_padded, known, password, rule.dummy)
            failed = not ok
        except PoolSaturated:
            failed = False  # nothing was verified: no guess to count
            return Access(Verdict.UNAVAILABLE, rule.index)
        finally:
            limiter.settle(attempt, failed=failed)
        if not failed:
            self._verified[key] = mono
            if len(self._verified) > _VERIFIED_MAX:
                self._verified.popitem(last=False)
            return Access(Verdict.ALLOW, rule.index)
        self.stats.site.auth_failures += 1
        return Access(Verdict.CHALLENGE, rule.index, rule.realm)

    def _credentials_key(self, rule: AuthRule, user: str, password: str) -> bytes:
        return hmac.new(
            self._key,
            b"%d\0%s\0%s" % (rule.index, user.encode(), password.encode()),
            hashlib.sha256,
        ).digest()

    def _verified_for(self, rule: AuthRule, authorization: str | None) -> bool:
        """Were these credentials verified for ``rule`` recently?
        (No password check here: only the cache of verified credentials.)"""
        creds = parse_basic(authorization)
        if creds is None or creds[0] not in rule.users:
            return False
        seen = self._verified.get(self._credentials_key(rule, *creds))
        return seen is not None and trio.current_time() - seen < _VERIFIED_TTL
