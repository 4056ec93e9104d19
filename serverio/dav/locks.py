"""WebDAV write locks (RFC 4918 §6, §7, class 2): the lock table, pure.

:class:`LockTable` holds the write locks of one server process, in
memory: exclusive and shared, Depth 0 or infinity, each with its owner
(the client's ``DAV:owner`` kept as a parsed
:class:`~serverio.dav.xml.Element`, re-serialised, never pasted), the
principal that took it, its timeout and expiry.  No I/O, no clock: every
method that depends on time takes ``now`` (seconds, any epoch, the same
one throughout), so every rule is table-tested without an event loop
(``tests/test_dav_locks.py``).  Expired locks vanish lazily, at the next
call that passes a later ``now``.

Resources are named by their URL path's decoded segments (a
:data:`LockPath`; the root is ``()``), the key the transports already
parse; a lock on a collection covers its members when its depth is
infinity (§7.4: they need not exist yet: a member created later is
covered, by path).

:func:`check_request` is the one decision every modifying method makes
(§10.4, §7): the If field must hold (412), then every lock covering a
resource the request changes must have one of its tokens submitted
(423).  Lock tokens come from the ``tokens`` callable the table is given
(:func:`serverio.dav.lockguard.new_token`: ``urn:uuid:`` random UUIDs,
§6.5), so this module draws no randomness itself.

Bounds: at most ``max_locks`` live locks (a full table refuses with
:attr:`LockRefusal.FULL`: the caller answers 507 Insufficient Storage,
§11.5, "unable to store the representation needed to complete the
request": expired locks are dropped first, so a full table is one that
holds that many live locks); at most ``per_client`` of them taken by one
client (:attr:`Lock.client`, its address: one client cannot fill the
table, :attr:`LockRefusal.CLIENT_FULL`); at most ``per_resource`` locks
covering any one resource (shared locks stack, and each is listed in
every lockdiscovery of it, §15.8: :attr:`LockRefusal.RESOURCE_FULL`); a
timeout never exceeds ``timeout_max`` (``Infinite`` included, §6.6: the
server need not honour a request), nor ``anonymous_timeout_max`` for a
lock without a principal (no credentials: anyone's lock).

Principals: a lock remembers the principal that took it (the
authenticated user, or None when no auth rule names one: then every
client is the same principal, as in a server without authentication).
A submitted token counts only for the principal that owns its lock
(§6.4: "the lock token ... must be associated with the principal").
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Final

from .ifheader import IfField, ResourceState
from .xml import Element, LockInfo, LockScope

__all__ = [
    "DEFAULT_TIMEOUT",
    "Denied",
    "Lock",
    "LockPath",
    "LockRefusal",
    "LockRefused",
    "LockTable",
    "check_request",
    "choose_timeout",
]

LockPath = tuple[str, ...]

# The bounds (live locks, longest timeout) are settings: --webdav-max-locks
# and --webdav-lock-timeout-max (serverio.config.UploadPolicy).  The
# timeout of a LOCK without a Timeout field (capped by the maximum):
DEFAULT_TIMEOUT: Final = 3600


def choose_timeout(preferences: Sequence[int | None], maximum: int) -> int:
    """The timeout granted from a Timeout field's preferences (as
    :func:`~serverio.dav.ifheader.parse_timeout` gives them; None is
    ``Infinite``): the first one, capped at ``maximum``, at least one
    second; :data:`DEFAULT_TIMEOUT` (capped) when the field is absent."""
    if not preferences:
        return max(1, min(DEFAULT_TIMEOUT, maximum))
    first = preferences[0]
    return max(1, maximum if first is None else min(first, maximum))


@dataclass(frozen=True, slots=True)
class Lock:
    """One write lock (§6, §14.1 ``DAV:activelock``); immutable (a refresh
    replaces it in the table)."""

    token: str
    root: LockPath  # the lock-root (§6.1): the resource LOCK named
    collection: bool  # the lock-root is a collection (its href ends in "/")
    scope: LockScope
    infinite: bool  # Depth: infinity (else 0), §9.10.3
    owner: Element | None
    principal: str | None
    timeout: int  # seconds granted by the last LOCK or refresh
    expires: float  # ``now`` + timeout at that time
    client: str = ""  # the key of the client that took it (per_client)

    def covers(self, path: LockPath) -> bool:
        """The lock applies to ``path``: its root, or a member of it at any
        depth when the depth is infinity (§7.4)."""
        n = len(self.root)
        return path[:n] == self.root and (len(path) == n or self.infinite)

    def remaining(self, now: float) -> int:
        """Whole seconds left (for ``DAV:timeout``, §14.29), at least 0."""
        return max(0, int(self.expires - now + 0.999))


def _conflict(a: LockScope, b: LockScope) -> bool:
    # §6.1, §6.2: an exclusive lock conflicts with any other lock; shared
    # locks are compatible with each other.
    return a is LockScope.EXCLUSIVE or b is LockScope.EXCLUSIVE


class LockRefusal(enum.Enum):
    """Why a LOCK or UNLOCK is refused (the caller picks the status)."""

    CONFLICT = "conflicting lock"  # 423 DAV:no-conflicting-lock, §9.10.6
    FULL = "lock table full"  # 507, §11.5
    CLIENT_FULL = "too many locks of this client"  # 507, per_client
    RESOURCE_FULL = "too many locks on the resource"  # 507, per_resource
    NO_LOCK = "no such lock on the resource"  # UNLOCK: 409, §9.11.1
    NOT_OWNER = "lock of another principal"  # 403, §9.11.1


class LockRefused(Exception):
    """A refused lock operation; ``lock`` is the conflicting one, if any."""

    def __init__(self, refusal: LockRefusal, lock: Lock | None = None) -> None:
        super().__init__(refusal.value)
        self.refusal = refusal
        self.lock = lock


class LockTable:
    """The live locks of one process (see the module docstring).

    Indexed by token and by lock-root.  Expiry: ``_soonest`` is a time no
    live lock expires before; a call with an earlier ``now`` does nothing,
    a later one drops the expired locks (one pass) and sets it again.
    """

    __slots__ = (
        "_by_client",
        "_by_root",
        "_by_token",
        "_soonest",
        "anonymous_timeout_max",
        "max_locks",
        "per_client",
        "per_resource",
        "timeout_max",
        "tokens",
    )

    def __init__(
        self,
        *,
        max_locks: int,
        timeout_max: int,
        tokens: Callable[[], str],
        per_client: int | None = None,
        per_resource: int | None = None,
        anonymous_timeout_max: int | None = None,
    ) -> None:
        """``per_client``, ``per_resource`` and ``anonymous_timeout_max``
        default to no bound of their own (``max_locks``, ``timeout_max``)."""
        self.max_locks = max_locks
        self.timeout_max = timeout_max
        self.per_client = max_locks if per_client is None else per_client
        self.per_resource = max_locks if per_resource is None else per_resource
        self.anonymous_timeout_max = (
            timeout_max if anonymous_timeout_max is None else anonymous_timeout_max
        )
        if min(max_locks, timeout_max, self.per_client, self.per_resource) < 1:
            raise ValueError("lock bounds must be positive")
        if self.anonymous_timeout_max < 1:
            raise ValueError("lock bounds must be positive")
        self.tokens = tokens
        self._by_token: dict[str, Lock] = {}
        self._by_root: dict[LockPath, dict[str, Lock]] = {}
        self._by_client: dict[str, int] = {}  # live locks per Lock.client
        self._soonest = float("inf")

    def __len__(self) -> int:
        return len(self._by_token)

    # ------------------------------------------------------------ reading

    def get(self, token: str, now: float) -> Lock | None:
        """The live lock with this token."""
        self.expire(now)
        return self._by_token.get(token)

    def covering(self, path: LockPath, now: float) -> tuple[Lock, ...]:
        """The locks that apply to ``path`` (its lockdiscovery, §15.8):
        rooted at it, or at an ancestor with depth infinity; oldest
        first."""
        self.expire(now)
        if not self._by_token:
            return ()
        out: list[Lock] = []
        for i in range(len(path) + 1):
            for lock in self._by_root.get(path[:i], {}).values():
                if lock.covers(path):
                    out.append(lock)
        return tuple(out)

    def below(self, path: LockPath, now: float) -> tuple[Lock, ...]:
        """The locks rooted strictly inside ``path`` (members at any depth):
        what a Depth-infinity operation on it also touches."""
        self.expire(now)
        n = len(path)
        return tuple(
            lock
            for root, locks in self._by_root.items()
            if len(root) > n and root[:n] == path
            for lock in locks.values()
        )

    # ------------------------------------------------------------ changing

    def expire(self, now: float) -> int:
        """Drop the locks whose time is up (§6.6); the number dropped."""
        if now < self._soonest:
            return 0
        doomed = [lk for lk in self._by_token.values() if lk.expires <= now]
        for lock in doomed:
            self._remove(lock)
        self._soonest = min((lk.expires for lk in self._by_token.values()), default=float("inf"))
        return len(doomed)

    def conflicting(
        self, path: LockPath, scope: LockScope, infinite: bool, now: float
    ) -> Lock | None:
        """A live lock a new one (``scope``, depth) on ``path`` would conflict
        with (§6.1, §7): one covering ``path``, or, for depth infinity, one
        rooted inside it; None when it can be granted."""
        for lock in self.covering(path, now):
            if _conflict(lock.scope, scope):
                return lock
        if infinite:
            for lock in self.below(path, now):
                if _conflict(lock.scope, scope):
                    return lock
        return None

    def grant(
        self,
        path: LockPath,
        info: LockInfo,
        *,
        collection: bool,
        infinite: bool,
        timeouts: Sequence[int | None],
        principal: str | None,
        now: float,
        client: str = "",
    ) -> Lock:
        """A new lock (§9.10.1) taken by ``client`` (its key).  Raises
        :class:`LockRefused` CONFLICT (with the conflicting lock), FULL,
        CLIENT_FULL or RESOURCE_FULL."""
        other = self.conflicting(path, info.scope, infinite, now)
        if other is not None:
            raise LockRefused(LockRefusal.CONFLICT, other)
        if len(self._by_token) >= self.max_locks:
            raise LockRefused(LockRefusal.FULL)
        if self._by_client.get(client, 0) >= self.per_client:
            raise LockRefused(LockRefusal.CLIENT_FULL)
        if self._stacked(path, infinite, now) >= self.per_resource:
            raise LockRefused(LockRefusal.RESOURCE_FULL)
        timeout = choose_timeout(timeouts, self._timeout_max(principal))
        lock = Lock(
            token=self.tokens(),
            root=path,
            collection=collection,
            scope=info.scope,
            infinite=infinite,
            owner=info.owner,
            principal=principal,
            timeout=timeout,
            expires=now + timeout,
            client=client,
        )
        self._add(lock)
        return lock

    def _timeout_max(self, principal: str | None) -> int:
        """The longest timeout for a lock of ``principal``: a lock without
        one (no credentials) is capped lower, so a lock anyone could take
        cannot hold a resource for long unrefreshed."""
        if principal is None:
            return min(self.timeout_max, self.anonymous_timeout_max)
        return self.timeout_max

    def _stacked(self, path: LockPath, infinite: bool, now: float) -> int:
        """The most locks that cover one resource a new lock on ``path``
        would cover: ``path`` itself and, for depth infinity, the roots of
        the locks below it (every other member is covered by no more than
        the nearest of those, or ``path``)."""
        most = len(self.covering(path, now))
        if infinite:
            for root in {lock.root for lock in self.below(path, now)}:
                most = max(most, len(self.covering(root, now)))
        return most

    def refresh(
        self,
        path: LockPath,
        tokens: Iterable[str],
        *,
        timeouts: Sequence[int | None],
        principal: str | None,
        now: float,
    ) -> tuple[Lock, ...]:
        """Refresh the locks that cover ``path`` whose tokens were submitted
        by their principal (§9.10.2: a LOCK without a body, the token in
        the If field); the refreshed locks, empty when none matched (the
        caller answers 412)."""
        wanted = set(tokens)
        out: list[Lock] = []
        for lock in self.covering(path, now):
            if lock.token in wanted and lock.principal == principal:
                timeout = choose_timeout(timeouts, self._timeout_max(principal))
                fresh = replace(lock, timeout=timeout, expires=now + timeout)
                self._add(fresh)
                out.append(fresh)
        return tuple(out)

    def release(self, token: str, path: LockPath, principal: str | None, now: float) -> Lock:
        """UNLOCK (§9.11): remove the lock ``token`` names, which must cover
        ``path`` (else NO_LOCK: 409 ``DAV:lock-token-matches-request-uri``)
        and belong to ``principal`` (else NOT_OWNER: 403)."""
        lock = self.get(token, now)
        if lock is None or not lock.covers(path):
            raise LockRefused(LockRefusal.NO_LOCK)
        if lock.principal != principal:
            raise LockRefused(LockRefusal.NOT_OWNER, lock)
        self._remove(lock)
        return lock

    def forget(self, path: LockPath) -> int:
        """Remove every lock rooted at ``path`` or inside it: the resource is
        gone (a DELETE, the source of a MOVE, an overwritten destination:
        §7.5, §9.6.1, §9.9.1 "locks are not moved").  The number removed."""
        n = len(path)
        doomed = [
            lock
            for root, locks in self._by_root.items()
            if root[:n] == path
            for lock in locks.values()
        ]
        for lock in doomed:
            self._remove(lock)
        return len(doomed)

    def discard(self, token: str) -> None:
        """Remove the lock ``token`` names, if any (a LOCK whose empty
        resource could not be made)."""
        lock = self._by_token.get(token)
        if lock is not None:
            self._remove(lock)

    def _add(self, lock: Lock) -> None:
        if lock.token not in self._by_token:  # a refresh replaces its lock
            self._by_client[lock.client] = self._by_client.get(lock.client, 0) + 1
        self._by_token[lock.token] = lock
        self._by_root.setdefault(lock.root, {})[lock.token] = lock
        self._soonest = min(self._soonest, lock.expires)

    def _remove(self, lock: Lock) -> None:
        if self._by_token.pop(lock.token, None) is not None:
            left = self._by_client[lock.client] - 1
            if left:
                self._by_client[lock.client] = left
            else:
                del self._by_client[lock.client]
        locks = self._by_root.get(lock.root)
        if locks is not None:
            locks.pop(lock.token, None)
            if not locks:
                del self._by_root[lock.root]


# ------------------------------------------------------------- If and locks


@dataclass(frozen=True, slots=True)
class Denied:
    """A request refused by its If field or by a lock: 412 (the If field
    does not hold, §10.4.1) or 423 (``lock`` covers a resource the
    request changes and none of its lock-root's tokens was submitted,
    §7, §16 ``DAV:lock-token-submitted``)."""

    status: int
    lock: Lock | None = None


# The key the untagged lists are evaluated against: a Resource-Tag is
# never empty (serverio.dav.ifheader), so "" cannot collide with one.
_REQUEST: Final = ""


def _groups(locks: Iterable[Lock]) -> Iterator[tuple[Lock, ...]]:
    by_root: dict[LockPath, list[Lock]] = {}
    for lock in locks:
        by_root.setdefault(lock.root, []).append(lock)
    return (tuple(g) for g in by_root.values())


def check_request(
    table: LockTable,
    field: IfField | None,
    request: LockPath,
    affected: Sequence[tuple[LockPath, bool]],
    *,
    etag_of: Callable[[LockPath], str | None],
    resolve: Callable[[str], LockPath | None],
    principal: str | None,
    now: float,
) -> Denied | None:
    """The If field and the locks, for a request that changes the
    resources ``affected`` (each a path and whether the change reaches
    every member, Depth infinity: a DELETE or MOVE of a collection); None
    when it may go on.

    1. The If field (§10.4): it must hold, each untagged list evaluated
       against ``request``, each tagged list against the resource its tag
       names (``resolve`` maps a tag, an absolute URI or path, to a path,
       None for a resource this server does not serve: then it is an
       unmapped URL, §10.4.5: it has no state).  A state token matches
       when a live lock covering the resource has it (§10.4.4); an entity
       tag when it is the resource's current strong one (``etag_of``, None
       for an unmapped resource).  Else 412.
    2. The locks (§7, §6.4): for every lock-root whose locks cover an
       affected resource (or, for Depth infinity, lie inside it), one of
       that root's lock tokens must be submitted in the If field by the
       principal owning its lock (shared locks on one root: any of them).
       Else 423 naming that lock.
    """

    def state(key: str) -> ResourceState:
        path = request if key == _REQUEST else resolve(key)
        if path is None:
            return ResourceState(None, frozenset())
        locks = table.covering(path, now)
        return ResourceState(etag_of(path), frozenset(lk.token for lk in locks))

    if field is not None and not field.holds(_REQUEST, state):
        return Denied(412)
    submitted = field.tokens if field is not None else frozenset()
    for path, infinite in affected:
        locks = table.covering(path, now)
        if infinite:
            locks += table.below(path, now)
        for group in _groups(locks):
            if not any(lk.token in submitted and lk.principal == principal for lk in group):
                return Denied(423, group[0])
    return None
