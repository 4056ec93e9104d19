"""How many password guesses basic authentication lets through (pure state,
trio thread only; docs/features.md "Basic authentication").

One job: before a password hash is verified, :meth:`AuthLimiter.reserve`
counts the attempt as a failure (so concurrent attempts see each other:
the count never reads stale across an ``await``); :meth:`AuthLimiter.settle`
then records the outcome (a success gives the reservation back).  A
refusal is the number of seconds to wait, for a 429 and its Retry-After.

The rules, per worker process:

* **per (client, user)**: at most ``budget`` failures in any ``window``
  seconds (a sliding log), then every attempt of that client for that
  user is refused until the oldest failure leaves the window, *even with
  the right password* (a client that guessed too much does not get to
  find out it was right);
* **per user** (any client; the users file's names and unknown names
  alike, so a refusal tells nothing about which users exist): past
  ``user_free`` failures, each failure sets a backoff of ``base * 2**k``
  seconds (k = failures past ``user_free`` - 1), capped at ``cap``.  While
  it runs, a client that failed for this user within the window waits for
  it; a client that has not failed for this user is not held back, so the
  real user still gets in while someone else guesses from elsewhere.  A
  user's count is forgotten after ``forget`` seconds without a failure;
* **per client**: at most ``in_flight`` verifications at once; another one
  is refused at once (Retry-After 1); and at most ``client_budget``
  failures in any ``window`` seconds, whatever the users (a sliding log),
  then every new verification of that client is refused until the oldest
  failure leaves the window: one password tried for many names (password
  spraying) meets no per-user rule, since each name sees one failure.
  Credentials already verified (the caller's cache) are not held back, so
  the users behind a shared address who are signed in stay signed in;
* **bounded memory**: each table keeps at most ``max_entries`` entries;
  past that the least recently used ones are dropped (never the whole
  table), so an attacker who wants his own entries forgotten must first
  fail for that many other names, every failure a verified hash under
  these same limits.

With ``processes`` N > 1 (``--workers N``: each process has its own
limiter, and a client's connections may reach any of them) the budgets are
divided: ``max(1, budget // N)`` per process, so N processes together let
at most ``max(budget, N)`` failures per (client, user) through per window
(and the same for ``client_budget`` per client).
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import TypeVar

__all__ = [
    "BACKOFF_BASE",
    "BACKOFF_CAP",
    "CLIENT_BUDGET",
    "FAILURE_BUDGET",
    "FAILURE_WINDOW",
    "IN_FLIGHT",
    "MAX_ENTRIES",
    "USER_FORGET",
    "USER_FREE",
    "Attempt",
    "AuthLimiter",
    "retry_after",
]

K = TypeVar("K")
V = TypeVar("V")

FAILURE_BUDGET = 10  # failures per (client, user) ...
FAILURE_WINDOW = 60.0  # ... in any window of this many seconds
# Failures per client, any users, in the same window: ten users behind one
# address each spending their own budget, or one client trying a password
# on 100 names a minute (a hash of 0.1-0.4 s and two in flight allowed
# 300-1,200 before).
CLIENT_BUDGET = 100
USER_FREE = 10  # failures per user (from any client) before its backoff starts
BACKOFF_BASE = 1.0  # seconds, doubled per failure past USER_FREE ...
BACKOFF_CAP = 60.0  # ... up to this
USER_FORGET = 900.0  # a user's count is forgotten after this long without a failure
IN_FLIGHT = 2  # verifications at once per client
MAX_ENTRIES = 4096  # per table


@dataclass(slots=True)
class _User:
    failures: int = 0  # reserved and failed attempts of the current streak
    last: float = 0.0  # the latest reservation
    until: float = 0.0  # backoff end (failed clients wait until then)


@dataclass(slots=True, eq=False)
class Attempt:
    """A reserved attempt, to :meth:`AuthLimiter.settle` exactly once."""

    client: str
    user: str
    at: float
    settled: bool = False


class AuthLimiter:
    """Counts failed basic-auth attempts per (client, user), per user and
    per client (rules: the module docstring)."""

    def __init__(
        self,
        *,
        budget: int = FAILURE_BUDGET,
        client_budget: int = CLIENT_BUDGET,
        window: float = FAILURE_WINDOW,
        user_free: int = USER_FREE,
        base: float = BACKOFF_BASE,
        cap: float = BACKOFF_CAP,
        forget: float = USER_FORGET,
        in_flight: int = IN_FLIGHT,
        max_entries: int = MAX_ENTRIES,
        processes: int = 1,
    ) -> None:
        self.budget = max(1, budget // processes)
        self.client_budget = max(1, client_budget // processes)
        self.user_free = max(1, user_free // processes)
        self.window = window
        self.base = base
        self.cap = cap
        self.forget = forget
        self.max_in_flight = in_flight
        self.max_entries = max_entries
        # (client, user) -> reservation times, oldest first, at most budget.
        self._pairs: OrderedDict[tuple[str, str], deque[float]] = OrderedDict()
        self._users: OrderedDict[str, _User] = OrderedDict()
        # client -> reservation times (any user), oldest first, at most client_budget.
        self._clients: OrderedDict[str, deque[float]] = OrderedDict()
        self._in_flight: dict[str, int] = {}

    # ------------------------------------------------------------ queries

    def refusal(self, client: str, user: str, now: float) -> float | None:
        """Seconds ``client`` must wait before trying ``user`` again, or None."""
        pair = self._pair(client, user, now)
        if pair is None:
            return None
        if len(pair) >= self.budget:
            wait = pair[0] + self.window - now
        else:
            u = self._user(user, now)
            if u is None or now >= u.until:
                return None
            # Under the user's backoff, and this client failed for it
            # recently: wait for the backoff, or for those failures to age out.
            wait = min(u.until, pair[-1] + self.window) - now
        # A refused client that keeps trying stays the most recently used:
        # eviction forgets those who stopped, not those being refused.
        self._pairs.move_to_end((client, user))
        return wait

    def in_flight(self, client: str) -> int:
        return self._in_flight.get(client, 0)

    def client_refusal(self, client: str, now: float) -> float | None:
        """Seconds ``client`` must wait before any new verification, whatever
        the user (its failures over all users: ``client_budget``), or None."""
        log = _live(self._clients, client, now - self.window)
        if log is None or len(log) < self.client_budget:
            return None
        self._clients.move_to_end(client)  # refused and still trying: stays recent
        return log[0] + self.window - now

    def __len__(self) -> int:
        """Entries held (every table): bounded by 3 * max_entries + in-flight clients."""
        return len(self._pairs) + len(self._users) + len(self._clients) + len(self._in_flight)

    # ------------------------------------------------------------ updates

    def reserve(self, client: str, user: str, now: float) -> Attempt | float:
        """Count an attempt before its hash is verified: an :class:`Attempt`
        to settle, or the seconds to wait (refused: verify nothing)."""
        if self._in_flight.get(client, 0) >= self.max_in_flight:
            return 1.0
        wait = self.refusal(client, user, now)
        if wait is None:
            wait = self.client_refusal(client, now)
        if wait is not None:
            return wait
        _log(self._clients, client, now, self.max_entries)
        _log(self._pairs, (client, user), now, self.max_entries)
        u = self._users.get(user)
        if u is None:
            u = self._users[user] = _User()
            _trim(self._users, self.max_entries)
        else:
            self._users.move_to_end(user)
        u.failures += 1
        u.last = now
        past = u.failures - self.user_free
        if past > 0:
            # min() before the power: 2**k for a huge streak stays finite.
            delay = self.cap if past > 64 else min(self.cap, self.base * 2.0 ** (past - 1))
            u.until = max(u.until, now + delay)
        self._in_flight[client] = self._in_flight.get(client, 0) + 1
        return Attempt(client, user, now)

    def settle(self, attempt: Attempt, *, failed: bool) -> None:
        """The outcome of a reserved attempt (idempotent).  ``failed``
        False (the password was right, or nothing was verified): the
        reservation is given back; a running backoff is not shortened."""
        if attempt.settled:
            return
        attempt.settled = True
        n = self._in_flight.get(attempt.client, 0) - 1
        if n > 0:
            self._in_flight[attempt.client] = n
        else:
            self._in_flight.pop(attempt.client, None)
        if failed:
            return
        _unlog(self._clients, attempt.client, attempt.at)
        _unlog(self._pairs, (attempt.client, attempt.user), attempt.at)
        u = self._users.get(attempt.user)
        if u is not None and u.failures > 0:
            u.failures -= 1

    # ------------------------------------------------------------ helpers

    def _pair(self, client: str, user: str, now: float) -> deque[float] | None:
        return _live(self._pairs, (client, user), now - self.window)

    def _user(self, user: str, now: float) -> _User | None:
        u = self._users.get(user)
        if u is not None and now - u.last >= self.forget:
            del self._users[user]
            return None
        return u


def _live(logs: OrderedDict[K, deque[float]], key: K, horizon: float) -> deque[float] | None:
    """``key``'s log of reservation times after ``horizon`` (older ones
    dropped), or None (the entry removed when nothing is left)."""
    log = logs.get(key)
    if log is None:
        return None
    while log and log[0] <= horizon:
        log.popleft()
    if not log:
        del logs[key]
        return None
    return log


def _log(logs: OrderedDict[K, deque[float]], key: K, at: float, max_entries: int) -> None:
    """Append reservation time ``at`` to ``key``'s log, the most recently used."""
    log = logs.get(key)
    if log is None:
        log = logs[key] = deque()
        _trim(logs, max_entries)
    else:
        logs.move_to_end(key)
    log.append(at)


def _unlog(logs: OrderedDict[K, deque[float]], key: K, at: float) -> None:
    """Give back the reservation made at ``at`` (a success, or nothing verified)."""
    log = logs.get(key)
    if log is None:
        return
    try:
        log.remove(at)
    except ValueError:
        pass  # aged out or evicted meanwhile
    if not log:
        del logs[key]


def _trim(table: OrderedDict[K, V], n: int) -> None:
    # Least recently used first; never the whole table (the newest stays).
    while len(table) > n:
        table.popitem(last=False)


def retry_after(wait: float) -> int:
    """Whole seconds for a Retry-After field (RFC 9110 §10.2.3), at least 1."""
    return max(1, math.ceil(wait))
