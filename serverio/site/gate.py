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

With ``[[access]]`` rules (:mod:`serverio.site.rights`) the target's right
is decided first on them: what an anonymous client may do needs no
credentials; anything else needs a signed-in user (Basic credentials
checked against the users file, or a user the caller verified otherwise:
``user``) who has the right there, else 401 without credentials and 403
with them.  The ``[[auth]]`` rules then apply as before (both must pass).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import secrets
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace

import trio

from ..concurrency.blocking import Pool, PoolSaturated, run_blocking
from ..http.access import ALLOWED, Access, AccessTarget, Kind, Right, Verdict, access_paths
from ..observe.stats import Stats
from .access import rule_for, rules_below, write_allowed
from .authlimit import Attempt, AuthLimiter, retry_after
from .passwords import verify_padded
from .principal import MARK, Principal, password_tag, share_allows
from .rights import rule_at
from .rules import (
    AccessRule,
    AuthRule,
    SiteRules,
    canonical,
    glob_below,
    parse_basic,
)
from .vouch import Vouchers

__all__ = ["AUTH_QUEUE", "AUTH_WORKERS", "Gate", "client_key"]

AUTH_WORKERS = 2
AUTH_QUEUE = 32
_VERIFIED_MAX = 1024  # recently verified credentials kept
_VERIFIED_TTL = 300.0  # seconds a verification is trusted
# The kinds _open_read answers for (reads a memo of open kinds covers).
_READ_KINDS = (Kind.REQUEST, Kind.RESERVED, Kind.FILE, Kind.SIDECAR, Kind.LISTING)
_RULES_MAX = 4096  # memoised rule per target (targets are client input)

log = logging.getLogger("serverio")


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

    def __init__(
        self, rules: SiteRules, stats: Stats, processes: int, verbose: bool = False
    ) -> None:
        self.rules = rules
        # -v: each refusal is logged at WARNING (seen at the default level);
        # else at INFO (--log-level info).
        self._refusal_level = logging.WARNING if verbose else logging.INFO
        self.stats = stats
        self.auth_pool = Pool("auth", AUTH_WORKERS, AUTH_QUEUE)
        self._key = secrets.token_bytes(32)
        self._verified: OrderedDict[bytes, float] = OrderedDict()
        # Failed basic-auth attempts: per (client, user), per user, in flight.
        self.limiter = AuthLimiter(processes=processes)
        self._rules: dict[AccessTarget, AuthRule | None] = {}
        # [[access]]: the rules that decide each path of a target (memoised).
        self._deciders: dict[tuple[str, ...], tuple[AccessRule | None, ...]] = {}
        # Per user of the users files: [requests, bytes, denied] (/metrics);
        # bounded: the names the files hold, nothing a client sends.
        self.per_user: dict[str, list[int]] = {u: [0, 0, 0] for u in _user_names(rules)}
        # What each principal the login feature verified is worth (memoised).
        self.vouchers = Vouchers(rules)
        self._allows: dict[tuple[int, str], Access] = {}
        # [[access]] rules and no [[auth]] one: per paths, the read kinds
        # every rule deciding them gives anyone (decide_now's first test).
        self._rights_only = bool(rules.access) and not rules.auth
        self._opens: dict[tuple[str, ...], tuple[Kind, ...]] = {}
        self._signed: dict[tuple[AccessTarget, str], Access] = {}  # _signed_rights

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
        self,
        target: AccessTarget,
        authorization: str | None,
        granted: frozenset[int],
        user: str | None = None,
    ) -> Access:
        """The decision without waiting: ``Verdict.PENDING`` when a served
        target needs the limiter and the password check; never for a named
        kind (an ENTRY is shown to credentials verified within the window,
        an EVENT only when no rule protects its path).  ``user``: a user
        the caller has verified (not by Basic credentials: a session, a
        trusted proxy's header); None: only ``authorization`` may name one."""
        if user is None and authorization is not None and authorization.startswith(MARK):
            # A principal the login feature verified: its allows are memoised
            # (serverio.site.vouch.Vouchers.keep says why that is exact).
            key = (target, authorization, granted)
            vouchers = self.vouchers
            got = vouchers.decided.get(key)
            if got is None:
                got = vouchers.keep(key, self._decide_now(target, authorization, granted, None))
            return got
        return self._decide_now(target, authorization, granted, user)

    def _decide_now(
        self,
        target: AccessTarget,
        authorization: str | None,
        granted: frozenset[int],
        user: str | None,
    ) -> Access:
        if authorization is None and user is None and self._rights_only:
            # The warm anonymous read: a memo of the paths' open kinds.
            if target.right is None and target.also is None:
                kinds = self._opens.get(target.paths)
                if kinds is not None:
                    if target.kind in kinds:
                        return ALLOWED
                elif len(self._opens) < _RULES_MAX:
                    if target.kind in self._open_kinds(target.paths):
                        return ALLOWED
                elif target.kind in _READ_KINDS and _open_read(
                    self._decider(target.paths), AccessTarget(target.paths, target.kind)
                ):
                    # The memo is full (a listing of more names than it
                    # holds, or client input): the asked kind alone, not
                    # the five of a memo entry, and the memo kept.
                    return ALLOWED
        kind = target.kind
        if kind is Kind.WRITE and not write_allowed(self.rules, target):
            return Access(Verdict.FORBID)  # not a writable path, or not for this method
        accepted: frozenset[int] | None = None
        if authorization is not None and authorization.startswith(MARK):
            # What the login feature verified (serverio.site.principal),
            # judged once per value (serverio.site.vouch): a share link's
            # grant decides alone; a session's or a trusted header's user
            # is decided on as a signed-in ``user`` under the rules whose
            # users files accept them (the access log and the per-user
            # counters name it from there).
            marked = self.vouchers.of(authorization)
            if marked.share is not None:
                return _share_now(self.rules.canonical, target, marked.share)
            authorization = None
            if user is None and marked.user is not None:
                user, accepted = marked.user, marked.accepted
        if not self.rules.access:
            return self._auth_now(target, authorization, granted, user, accepted)
        users = self.rules.users
        signed = user
        if accepted is not None and (users is None or users.index not in accepted):
            signed = None  # a session the users [[access]] rules name hold another hash for
        if signed is not None and not target.tree:
            got = self._signed_rights(target, signed)
        else:
            got = self._rights_now(target, authorization, granted, signed)
        if got.verdict is not Verdict.ALLOW or not self.rules.auth:
            return got
        rest = self._auth_now(target, authorization, granted, user, accepted)
        if rest.verdict is not Verdict.ALLOW:
            return rest
        return got if rest.rule < 0 else replace(rest, user=rest.user or got.user)

    def _auth_now(
        self,
        target: AccessTarget,
        authorization: str | None,
        granted: frozenset[int],
        user: str | None,
        accepted: frozenset[int] | None = None,
    ) -> Access:
        """The ``[[auth]]`` rules' part of :meth:`decide_now`.  ``accepted``:
        the rules whose users files accept ``user`` (a session's:
        serverio.site.vouch); None: every rule whose file names them."""
        kind = target.kind
        if target.tree:
            return _tree_now(self, target, authorization, granted, user, accepted)
        rule = self.rule(target)
        if rule is None:
            return ALLOWED
        if kind is Kind.EVENT:
            return Access(Verdict.CHALLENGE, rule.index, rule.realm)
        if user is not None and user in rule.users and (accepted is None or rule.index in accepted):
            got = self._allows.get((rule.index, user))
            return got if got is not None else self._allowed(rule.index, user)
        if kind is Kind.ENTRY:
            if self._verified_for(rule, authorization):
                return Access(Verdict.ALLOW, rule.index)
            return Access(Verdict.CHALLENGE, rule.index, rule.realm)
        if rule.index in granted:
            return Access(Verdict.ALLOW, rule.index, user=_basic_user(authorization))
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
        user: str | None = None,
        pending: Access | None = None,
    ) -> Access:
        """The whole decision: :meth:`decide_now` (``pending``: its answer,
        when the caller has it), then for a pending one the limiter, the
        cache of verified credentials and the password check (the only
        wait).

        The limiter is asked before the cache (a client past its budget
        gets 429 even with the right password) and reserves the attempt
        before the hash is awaited, so concurrent attempts are all counted.

        Cancellation handling: a cancelled verification (the client went
        away) is settled as a failure: its hash may still run in the
        abandoned thread, so it counts against the budget.
        """
        if pending is None:
            pending = self.decide_now(target, authorization, granted, user)
        verdict = pending.verdict
        if verdict is Verdict.ALLOW:
            return pending
        if verdict is not Verdict.PENDING:
            if (verdict is Verdict.FORBID or verdict is Verdict.CHALLENGE) and not target.probe:
                _refused(self, target, pending, user or _basic_user(authorization))
                if self.rules.access:
                    # The refusal's problem names the right it lacked.
                    pending = replace(pending, right=target.needs.value)
            return pending
        creds = parse_basic(authorization)
        assert creds is not None
        users = self.rules.users
        verifying = users is not None and pending.rule == users.index
        rule = users if users is not None and verifying else self.rules.auth[pending.rule]
        got = await self._check(rule, creds, peer)
        if got.verdict is Verdict.ALLOW and (target.tree or verifying):
            # Credentials verified: the rights of that user (a tree: its
            # next rule; each passed one is granted from now on).
            return await self.decide(target, authorization, granted | {got.rule}, peer, user)
        return got

    # ------------------------------------------------------------ [[access]]

    def _decider(self, paths: tuple[str, ...]) -> tuple[AccessRule | None, ...]:
        """The ``[[access]]`` rule that decides each of ``paths`` (and the
        file each sidecar is a coding of), memoised (bounded)."""
        memo = self._deciders
        try:
            return memo[paths]
        except KeyError:
            pass
        rules = self.rules
        out: list[AccessRule | None] = []
        for path in paths:
            for p in access_paths(rules.canonical(path)):
                loose = canonical(p) if rules.fold_under and _under(rules.fold_under, p) else None
                out.append(rule_at(rules.access, p, loose))
        if len(memo) >= _RULES_MAX:
            memo.clear()  # bounded: paths are client input
        found = memo[paths] = tuple(out)
        return found

    def _rights_now(
        self,
        target: AccessTarget,
        authorization: str | None,
        granted: frozenset[int],
        user: str | None,
    ) -> Access:
        """The ``[[access]]`` rules' part of :meth:`decide_now` (the module doc)."""
        found = self._decider(target.paths)
        if target.tree:
            found = found + self._below(target.paths)
        elif _open_read(found, target):
            # The warm path: a read anyone may (no rights tuple, no hashing).
            known = user if user is not None else self._known(authorization, granted)
            return ALLOWED if not known else self._allowed(-1, known)
        rights = target.rights()
        if _all_allow(found, rights, None):
            # What anyone may: no credentials asked; a user already known
            # is still named (the log, the per-user counters).
            known = user if user is not None else self._known(authorization, granted)
            return ALLOWED if not known else self._allowed(-1, known)
        users = self.rules.users
        index = -1 if users is None else users.index
        if target.kind is Kind.EVENT:
            return Access(Verdict.CHALLENGE, index, "serverio")
        if not all(r is not None and r.someone(rights) for r in found):
            return Access(Verdict.FORBID, index)  # nobody may, signed in or not
        if user is None and target.kind is Kind.ENTRY:
            user = self._known(authorization, granted)
        if user is None and users is not None and users.index in granted:
            user = _basic_user(authorization) or None
        if user is not None:
            if _all_allow(found, rights, user):
                return self._allowed(index, user)
            return Access(Verdict.FORBID, index, user=user)
        if users is None or target.kind is Kind.ENTRY:
            return Access(Verdict.CHALLENGE if users else Verdict.FORBID, index, "serverio")
        if parse_basic(authorization) is None:
            return Access(Verdict.CHALLENGE, index, users.realm)
        return Access(Verdict.PENDING, index, users.realm)

    def _signed_rights(self, target: AccessTarget, user: str) -> Access:
        """:meth:`_rights_now` for a verified ``user``: it depends on the
        target and the user alone, so it is memoised (bounded: targets are
        client input; a signed-in client's requests repeat theirs)."""
        key = (target, user)
        memo = self._signed
        got = memo.get(key)
        if got is None:
            got = self._rights_now(target, None, frozenset(), user)
            if len(memo) >= _RULES_MAX:
                memo.clear()
            memo[key] = got
        return got

    def _open_kinds(self, paths: tuple[str, ...]) -> tuple[Kind, ...]:
        """The read kinds (a request path, a file, a sidecar, a listing) of
        ``paths`` every deciding ``[[access]]`` rule lets an anonymous
        client have, memoised (the caller asks only while the memo has
        room: at most ``_RULES_MAX`` entries): :func:`_open_read` per kind.  A
        tuple: ``in`` finds an enum member by identity (a frozenset would
        hash it, in Python)."""
        found = self._decider(paths)
        kinds = tuple(k for k in _READ_KINDS if _open_read(found, AccessTarget(paths, k)))
        self._opens[paths] = kinds  # bounded by the caller: paths are client input
        return kinds

    def _below(self, paths: tuple[str, ...]) -> tuple[AccessRule | None, ...]:
        """The ``[[access]]`` rules that can decide a path below the
        collections ``paths`` names (a depth-infinity LOCK reaches members
        not made yet): each must allow too."""
        rules = self.rules
        out: list[AccessRule | None] = []
        for path in paths:
            top = rules.canonical(path)
            out += [r for r in rules.access if r.match is None or glob_below(r.pattern, top)]
        return tuple(out)

    def _known(self, authorization: str | None, granted: frozenset[int]) -> str | None:
        """The user of ``authorization`` when already verified (this request,
        or within the verification window); never a password check."""
        users = self.rules.users
        if users is None or authorization is None:
            return None
        if users.index in granted or self._verified_for(users, authorization):
            return _basic_user(authorization) or None
        return None

    def allows(self, target: AccessTarget, user: str | None) -> bool:
        """Would ``user`` (verified by the caller; None: anonymous) be
        allowed ``target``, by the ``[[access]]`` and ``[[auth]]`` rules
        and the ``[[writable]]`` tables?  No credentials, no wait."""
        return self.decide_now(target, None, frozenset(), user).allowed

    async def check_password(
        self, user: str, password: str, peer: Callable[[], str]
    ) -> tuple[Access, str]:
        """A login page's password check: the same limiter, cache and
        pool as Basic credentials, against the first auth rule whose users
        file names ``user`` (the first rule when none does: an unknown
        user costs the same work).  With the verdict, the password tag of
        the hash it matched (:func:`~serverio.site.principal.password_tag`;
        ``""`` unless allowed).

        Cancellation handling: as :meth:`decide` (a cancelled check counts
        as a failure).
        """
        rules = list(self.rules.auth)
        if self.rules.users is not None:
            rules.append(self.rules.users)  # the users [[access]] rules name
        if not rules or user.startswith(MARK):
            return Access(Verdict.FORBID), ""
        rule = next((r for r in rules if user in r.users), rules[0])
        got = await self._check(rule, (user, password), peer)
        if got.verdict is not Verdict.ALLOW:
            return got, ""
        return got, password_tag(rule.users[user])

    async def check_secret(
        self, who: str, check: Callable[[str], bool], password: str, peer: Callable[[], str]
    ) -> Access:
        """A password check other than a users file's (a share link's:
        ``check`` is the pure, costly comparison) under the same limiter and
        pool as Basic credentials; ``who``: the limiter's key for what is
        guessed.  ALLOW, CHALLENGE (wrong), THROTTLE or UNAVAILABLE.

        Cancellation handling: as :meth:`decide` (a cancelled check counts
        as a failure).
        """
        client = client_key(peer())
        mono = trio.current_time()
        attempt = self.limiter.reserve(client, who, mono)
        if not isinstance(attempt, Attempt):
            return Access(Verdict.THROTTLE, retry_after=retry_after(attempt))
        failed = True
        try:
            failed = not await run_blocking(self.auth_pool, check, password)
        except PoolSaturated:
            failed = False
            return Access(Verdict.UNAVAILABLE)
        finally:
            self.limiter.settle(attempt, failed=failed)
        if failed:
            self.stats.site.auth_failures += 1
            return Access(Verdict.CHALLENGE)
        return ALLOWED

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
        key = _credentials_key(self._key, rule, user, password)
        seen = self._verified.get(key)
        if seen is not None and mono - seen < _VERIFIED_TTL:
            self._verified.move_to_end(key)
            return Access(Verdict.ALLOW, rule.index, user=user)
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
            return Access(Verdict.ALLOW, rule.index, user=user)
        self.stats.site.auth_failures += 1
        return Access(Verdict.CHALLENGE, rule.index, rule.realm)

    def _allowed(self, index: int, user: str) -> Access:
        """``Access(ALLOW, index, user=user)``, made once per rule and user
        (immutable; a signed-in client's every request is allowed alike)."""
        key = (index, user)
        got = self._allows.get(key)
        if got is None:
            allows = self._allows
            if len(allows) >= _RULES_MAX:
                allows.clear()  # bounded: the users files' names, per rule
            got = allows[key] = Access(Verdict.ALLOW, index, user=user)
        return got

    def count(self, user: str, size: int) -> None:
        """One response to ``user`` of ``size`` bytes (a user of the users
        files; any other name is not counted: the labels stay bounded)."""
        counters = self.per_user.get(user)
        if counters is not None:
            counters[0] += 1
            counters[1] += size

    def _verified_for(self, rule: AuthRule, authorization: str | None) -> bool:
        """Were these credentials verified for ``rule`` recently?
        (No password check here: only the cache of verified credentials.)"""
        creds = parse_basic(authorization)
        if creds is None or creds[0] not in rule.users:
            return False
        seen = self._verified.get(_credentials_key(self._key, rule, *creds))
        return seen is not None and trio.current_time() - seen < _VERIFIED_TTL


def _refused(gate: Gate, target: AccessTarget, access: Access, user: str | None) -> None:
    """Count and log (at -v) a refusal, naming the rule that decided it."""
    counters = gate.per_user.get(user) if user else None
    if counters is not None and access.verdict is Verdict.FORBID:
        counters[2] += 1
    level = gate._refusal_level
    if not log.isEnabledFor(level):
        return
    right = target.needs.value
    who = user or "anonymous"
    path = target.paths[0] if target.paths else "/"
    log.log(level, "denied %s of %r to %s: %s", right, path, who, _why(gate, target, user))


def _credentials_key(key: bytes, rule: AuthRule, user: str, password: str) -> bytes:
    """The verified-credentials cache's key (a MAC under the gate's own
    ``key``: the cache holds no password)."""
    return hmac.new(
        key, b"%d\0%s\0%s" % (rule.index, user.encode(), password.encode()), hashlib.sha256
    ).digest()


def _tree_now(
    gate: Gate,
    target: AccessTarget,
    authorization: str | None,
    granted: frozenset[int],
    user: str | None = None,
    accepted: frozenset[int] | None = None,
) -> Access:
    """:meth:`Gate.decide_now` for a :attr:`~serverio.http.access.AccessTarget.tree`
    target: the rule of its own paths and every rule that can match
    below them (:func:`~serverio.site.access.rules_below`), each as a
    target of its own would be; the first that does not allow decides
    (401 while credentials could pass it), else allowed under the first
    rule.  Not memoised: a tree target is rare (a depth-infinity LOCK)."""
    found = rule_for(gate.rules, target)
    rules = {} if found is None else {found.index: found}
    for path in target.paths:
        rules.update((r.index, r) for r in rules_below(gate.rules, path))
    for rule in rules.values():
        if rule.index in granted or (
            user is not None and user in rule.users and (accepted is None or rule.index in accepted)
        ):
            continue
        if parse_basic(authorization) is None:
            return Access(Verdict.CHALLENGE, rule.index, rule.realm)
        return Access(Verdict.PENDING, rule.index, rule.realm)
    return Access(Verdict.ALLOW, next(iter(rules))) if rules else ALLOWED


def _why(gate: Gate, target: AccessTarget, user: str | None) -> str:
    """The rule of ``gate`` that refused ``target`` to ``user``, for the log."""
    kind = target.kind
    if kind is Kind.WRITE and not write_allowed(gate.rules, target):
        return "no [[writable]] table allows it"
    if gate.rules.access:
        rights = target.rights()
        found = gate._decider(target.paths)
        if target.tree:
            found = found + gate._below(target.paths)
        for rule in found:
            if rule is None:
                return "no [[access]] rule matches"
            if not any(r in rule.rights_of(user) for r in rights):
                return f"{rule.where} (path {rule.pattern!r})"
    auth = gate.rule(target)
    return "an [[auth]] rule" if auth is None else f"[[auth]] path {auth.pattern!r}"


def _basic_user(authorization: str | None) -> str:
    """The user name of Basic credentials ("" without)."""
    creds = parse_basic(authorization)
    return "" if creds is None else creds[0]


def _open_read(found: tuple[AccessRule | None, ...], target: AccessTarget) -> bool:
    """Is ``target`` a read (a request path, a file, a listing) that every
    rule of ``found`` lets an anonymous client have?  The common question,
    answered from the flags the rules were compiled with; False: ask
    :func:`_all_allow` (it may still allow)."""
    if target.right is not None or target.also is not None:
        return False
    kind = target.kind
    for rule in found:
        if rule is None:
            return False
        if kind is Kind.FILE or kind is Kind.SIDECAR:
            if not rule.anonymous_reads:
                return False
        elif kind is Kind.LISTING:
            if not rule.anonymous_lists:
                return False
        elif kind is Kind.REQUEST or kind is Kind.RESERVED:
            if not (rule.anonymous_reads or rule.anonymous_lists):
                return False
        else:
            return False
    return True


def _all_allow(
    found: tuple[AccessRule | None, ...], rights: tuple[Right, ...], user: str | None
) -> bool:
    """Does every rule of ``found`` give ``user`` one of ``rights``?"""
    for rule in found:
        if rule is None:
            return False
        if rule.rights_of(user).isdisjoint(rights):
            return False
    return True


def _under(prefixes: tuple[str, ...], path: str) -> bool:
    low = canonical(path)
    return any(p == "/" or low == p or low.startswith(p + "/") for p in prefixes)


def _user_names(rules: SiteRules) -> list[str]:
    names: dict[str, None] = {}
    if rules.users is not None:
        names.update(dict.fromkeys(rules.users.users))
    for rule in rules.auth:
        names.update(dict.fromkeys(rule.users))
    return list(names)


def _share_now(canon: Callable[[str], str], target: AccessTarget, who: Principal) -> Access:
    """A share link's grant (serverio.site.principal): exactly its
    path and rights, whatever the rules say elsewhere; everything else
    is 403 (never a challenge: no credentials can widen a link)."""
    kind = target.kind
    if kind is Kind.WRITE:
        # A drop box uploads: a new file only (Right.UPLOAD; a PUT asks
        # upload-or-overwrite before it knows, then the one it needs),
        # never an overwrite, a delete, a folder or a lock.
        right = "upload" if target.needs is Right.UPLOAD and not target.tree else ""
    elif kind is Kind.LISTING or kind is Kind.ENTRY:
        right = "list"
    elif kind is Kind.FILE or kind is Kind.SIDECAR:
        right = "read"
    elif kind is Kind.REQUEST:
        # The request path: what it serves is decided again (FILE or LISTING).
        right = "list" if "list" in who.share_rights else "read"
    else:
        right = ""  # EVENT, RESERVED: never through a link
    paths = tuple(canon(p) for p in target.paths)
    if right and share_allows(who, paths, right, canon(who.share_path)):
        return ALLOWED
    return Access(Verdict.FORBID)
