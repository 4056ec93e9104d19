"""The reverse proxy's hook: :class:`ProxyService` (``Hooks.proxy``).

One exchange, as :meth:`ProxyService.forward` runs it:

1. the route's in-flight slot (:meth:`Pool.try_acquire`, no wait; none
   free: :meth:`Pool.acquire` waits in the route's bounded queue,
   ``--proxy-queue`` / ``--proxy-queue-timeout``, then 503);
2. a connection: a pooled keep-alive one, or a new one within
   ``--proxy-connect-timeout`` (refused: 502; too slow: 504);
3. the request, re-serialised by h11 from the checked target and the
   filtered fields (:mod:`serverio.proxy.routes`), its content streamed
   from the request-body seam (``async for chunk in content``) one chunk
   at a time as the upstream takes it, while the response head is read
   (:func:`~serverio.proxy.client.exchange`: an early answer, a 413, stops
   the sending and the connection is not pooled);
4. the response head within ``--proxy-head-timeout`` of the request's
   end (504), h11-parsed
   (whatever h11 refuses, and a head with both Content-Length and
   Transfer-Encoding, RFC 9112 §6.3: 502 with serverio's error page,
   never passed on, the connection closed; the upstream gone before the
   head: 502);
5. the answer: the plan (status, filtered fields) and a
   :class:`~serverio.model.StreamBody` whose source, :class:`Downstream`,
   pulls the upstream body one h11 event at a time as the transport sends
   it, each pull within ``--proxy-idle-timeout`` and all of it within
   ``--proxy-total-timeout``; after the head a failure is a
   :class:`~serverio.model.BodyCut`: the client's connection or stream is cut.

A pooled connection the upstream closed while idle fails before a byte of
the response: a request without content is then sent once more on a new
connection (RFC 9110 §9.2.2 allows retrying idempotent requests; a request
whose content was streamed cannot be replayed and gets its 502).

Cancellation handling: everything here runs in the client's request task.
A cancellation (the client went away: HTTP/1.1's disconnect, HTTP/2's
RST_STREAM; shutdown's cut) before :meth:`forward` returns closes the
upstream connection and gives the slot back; after it returns, the
transport's ``Body.close`` does the same through :meth:`Downstream.close`
unless the body was read to its end (then the connection is pooled).  An
upstream connection is never pooled mid-exchange.
"""

from __future__ import annotations

import dataclasses
import functools
import ipaddress
import logging
from collections.abc import Callable
from typing import Final

import h11
import trio

from ..config import Config, IPNetwork, ProxyPolicy, ProxyRoute
from ..errors import HTTPError
from ..fs.body import NO_BODY, Body, StreamBody
from ..http.core import Plan, RequestFacts
from ..http.extra import request_field
from ..http.forwarded import normalize_address, trusts
from ..model import BodyCut
from ..observe.stats import ProxyStats
from ..pipeline.handler import ClientGone, client_gone, watching_client
from ..pipeline.hooks import RawHead, TunnelBody, Upload
from ..pipeline.request import ForwardedClient
from .client import (
    Connect,
    Head,
    Pool,
    UpstreamConn,
    UpstreamError,
    exchange,
    only_cancelled,
    open_upstream,
)
from .routes import (
    Routes,
    forwarded_for,
    mount_prefixes,
    plain_route,
    plain_value,
    request_fields,
    response_fields,
    upgrade_token,
    upstream_target,
)
from .tunnel import TunnelGauge, UpstreamTunnel

__all__ = ["Downstream", "ProxyService"]

log = logging.getLogger("serverio")

# A request that asks to switch protocols (RFC 9110 §7.8: a WebSocket) is
# --proxy-fallback's, not a file's.
UPGRADE: Final = request_field("upgrade")

# Statuses that never have content (RFC 9110 §6.4.1).
_BODILESS = frozenset({204, 304})


class ProxyService:
    """The configured routes, one :class:`Pool` per route."""

    __slots__ = (
        "_deadlines",
        "_fallback",
        "_networks",
        "_own_cookies",
        "_plain",
        "_policy",
        "_reported",
        "_stats",
        "_user_header",
        "pools",
        "routes",
        "tunnels",
    )

    def __init__(self, config: Config, stats: ProxyStats, connect: Connect = open_upstream) -> None:
        policy = self._policy = config.proxy
        self._stats = stats
        self._networks = config.site.proxy_networks
        # The login feature's fields: the trusted user header (sent on only
        # from a trusted peer) and serverio's own cookies (never sent on).
        header = config.users.trusted_user_header
        self._user_header = header.lower().encode("ascii") if header is not None else None
        self._own_cookies = True  # the login feature's names: never an upstream's
        files = config.files
        mounts = mount_prefixes((route for route, _ in files.mounts), files.route_prefix)
        self.routes = Routes(policy.routes, mounts)
        self._fallback = policy.fallback
        # Open now (/metrics), and the tunnels' own budget.
        self.tunnels = TunnelGauge(policy.proxy_max_tunnels, policy.proxy_max_tunnels_per_client)
        self._reported: dict[str, float] = {}  # upstream -> when a failure was last logged
        every = policy.routes + ((policy.fallback,) if policy.fallback is not None else ())
        # One pool per route; the fallback's is keyed "" (its prefix "/"
        # may also be a route's).
        self.pools = {
            _key(r, policy.fallback): Pool(
                r,
                policy.proxy_max_inflight,
                policy.proxy_keepalive,
                stats,
                connect,
                policy.proxy_queue,
            )
            for r in every
        }
        # Each route's deadlines: its [[proxy]] table's, else the options'.
        self._deadlines = {_key(r, policy.fallback): Deadlines.of(r, policy) for r in every}
        # Each route's configured additions are plain (routes.plain_route).
        self._plain = {_key(r, policy.fallback): plain_route(r) for r in every}

    def match(self, req: RequestFacts) -> ProxyRoute | None:
        """The route of ``req``'s path; else, with ``--proxy-fallback``, the
        fallback for what the files never answer: a method other than GET
        or HEAD, or a request with an Upgrade field (a WebSocket: a dev
        server's hot-reload socket at ``/`` must not get ``index.html``)."""
        route = self.routes.match(req.target.segments)
        if route is None and self._fallback is not None:
            if req.method not in _FILE_METHODS or UPGRADE.of(req) is not None:
                return self._fallback
        return route

    def fallback(self, req: RequestFacts) -> ProxyRoute | None:
        """``--proxy-fallback`` for a request the files answered 404."""
        return self._fallback

    def close_idle(self) -> None:
        """Close every idle pooled connection (the server's end)."""
        for pool in self.pools.values():
            pool.close_idle()

    async def forward(
        self,
        route: object,
        req: RequestFacts,
        head: RawHead,
        content: Upload | None,
        now: float,
        client: Callable[[], str],
        authed: bool = False,
    ) -> tuple[Plan, Body]:
        """The upstream's answer to ``req`` (see the module docstring);
        ``authed``: serverio checked its credentials (an auth rule applied
        and passed: they are not sent on, :func:`request_fields`).

        Cancellation handling: cancelled before it returns, the upstream
        connection is closed (never pooled), the slot given back, and so is
        the tunnels' place a request that asks to switch took.
        """
        assert isinstance(route, ProxyRoute)
        key = _key(route, self._fallback)
        pool = self.pools[key]
        deadlines = self._deadlines[key]
        target = upstream_target(route, req.target)  # 400 for a backslash
        # A protocol switch (a WebSocket) is asked for only without content:
        # its bytes after the head belong to the new protocol.
        upgrade = upgrade_token(head.fields, head.version) if content is None else None
        fields, checked = self._fields(route, req, head, content, client, upgrade, authed)
        # The fields need no second validation by h11 when the client's
        # were parsed under h11's grammar (HTTP/1.1: serverio's fast head
        # parser or h11 itself; HTTP/2's go through h11's checks) and what
        # serverio adds is plain.
        checked = checked and head.version != b"2" and self._plain[key]
        # A request that asks to switch takes a place in the tunnels' own
        # budget first (503 at once past it), held until its tunnel ends,
        # or until now when it fails or the upstream declines.
        place = self._reserve(client) if upgrade is not None else None
        try:
            if not pool.try_acquire():
                # A wait for a slot: a client that leaves meanwhile is let go
                # (client_gone raises ClientGone; acquire gives on a slot
                # handed over as it left).  The waiting task watches the
                # client itself: no helper task per queued request.
                if not await pool.acquire(self._policy.proxy_queue_timeout, client_gone):
                    raise HTTPError(503, "upstream busy")
            total = trio.current_time() + deadlines.total
            try:
                up = (req, target, fields, content, checked)
                conn, response = await self._exchange(pool, up, deadlines, total)
            except BaseException:
                pool.release()
                raise
            if place is not None:
                conn.once = True  # never pooled after a request that asked to switch
                if response.status_code == 101:
                    answer = self._tunnel(pool, route, conn, response, place)
                    place = None  # the tunnel holds it now
                    return answer
            # From here the Downstream owns the connection and the slot.
            down = Downstream(pool, conn, self._stats, deadlines.idle, total)
            plan, body = await self._answer(down, route, req, head.version, response)
        finally:
            if place is not None:
                self.tunnels.release(place)
        if upgrade is not None and not plan.close:
            # Declined (RFC 9110 §7.8: the upstream answered as if no
            # Upgrade was sent): the answer is passed on, and the client's
            # connection closes after it, as a client that asked to switch
            # may already have sent bytes of the new protocol.
            plan = dataclasses.replace(plan, close=True)
        return plan, body

    def _reserve(self, client: Callable[[], str]) -> str:
        """A place in the tunnels' budget for ``client`` (its key), or 503."""
        place, refused = self.tunnels.reserve(client())
        if refused is not None:
            self._stats.busy += 1
            raise HTTPError(503, refused)
        return place

    def _tunnel(
        self,
        pool: Pool,
        route: ProxyRoute,
        conn: UpstreamConn,
        response: Head,
        place: str,
    ) -> tuple[Plan, Body]:
        """The upstream's 101: its filtered head, and the tunnel to run
        once it is sent (it owns the connection and the tunnel's ``place``
        from here).  The request slot goes back now: a tunnel, idle for
        minutes, must not keep ordinary requests waiting."""
        fields, _ = response_fields(route, response.headers, switched=True)
        idle = self._policy.proxy_tunnel_idle
        tunnel = UpstreamTunnel(pool, conn, self._stats, idle, self.tunnels, place)
        pool.release()
        return Plan(101, tuple(fields), (), send_body=False), TunnelBody(tunnel)

    def _fields(
        self,
        route: ProxyRoute,
        req: RequestFacts,
        head: RawHead,
        content: Upload | None,
        client: Callable[[], str],
        upgrade: bytes | None,
        authed: bool,
    ) -> tuple[list[tuple[bytes, bytes]], bool]:
        """The upstream request's fields, and whether the peer's address
        (in Forwarded and X-Forwarded-For) is a plain field value."""
        peer_of = client.peer if isinstance(client, ForwardedClient) else client
        peer, trusted, plain = _peer_facts(peer_of(), self._networks)
        real_ip = None
        if trusted:
            # X-Real-IP: the client the trusted proxy names, as serverio
            # itself decides it (http.forwarded.client_address: the access
            # log's client), never a value the client sent.
            real_ip = forwarded_for(normalize_address(client())).strip(b'"').strip(b"[]")
            plain = plain and plain_value(real_ip)
        host = head.authority
        if host is None:
            host = next((v for n, v in head.fields if n == b"host"), b"")
        fields = request_fields(
            route,
            head.fields,
            host=host or route.authority.encode("ascii"),
            peer=peer,
            trusted=trusted,
            tls=req.tls,
            rewrite_host=(route.host_mode or self._policy.proxy_host) == "upstream",
            length=content.declared if content is not None else None,
            has_content=content is not None,
            upgrade=upgrade,
            real_ip=real_ip,
            authenticated=authed,
            user_header=self._user_header,
            own_cookies=self._own_cookies,
        )
        return fields, plain

    async def _exchange(
        self,
        pool: Pool,
        up: tuple[RequestFacts, bytes, list[tuple[bytes, bytes]], Upload | None, bool],
        deadlines: Deadlines,
        total: float,
    ) -> tuple[UpstreamConn, Head]:
        """Steps 2-4: a connection, the request (its facts, the target and
        fields to send, its content) sent, the response head."""
        req, target, fields, content, checked = up
        stats = self._stats
        for attempt in (0, 1):
            conn: UpstreamConn | None = None
            head_by: float | None = None
            try:
                conn = pool.reuse() if attempt == 0 else None
                rest = b""
                if conn is not None and content is None:
                    # The usual case: a pooled connection, no content, and
                    # a request the socket takes at once: no cancel scope
                    # when the head is there after one scheduling round
                    # (head_soon: nothing waits), else one (_quick_head).
                    stats.requests += 1
                    rest = conn.start_request(req.method, target, fields, checked)
                    if not rest:
                        return conn, await _quick_head(conn, stats, deadlines.head, total)
                # One cancel scope for the exchange (each costs ~10 us on
                # this path's budget): its deadline is the total's, moved
                # earlier to the head timeout's once the request is sent; a
                # pooled connection needs no connect deadline at all.
                with trio.move_on_at(total) as whole:
                    if conn is None:
                        conn = await _connect(pool, stats, deadlines.connect)
                    if content is None:
                        if rest:
                            await conn.send_rest(rest)  # its start_request went above
                        else:
                            stats.requests += 1
                            method = req.method
                            await conn.send_request(method, target, fields, None, stats, checked)
                        head_by = trio.current_time() + deadlines.head
                        if head_by < total:
                            whole.deadline = head_by
                        return conn, await _read_head(conn)
                    stats.requests += 1
                    # With content: sent while the head is read (an early
                    # answer stops it); exchange keeps its own head deadline.
                    sent = (req.method, target, fields)
                    async with watching_client():  # an upload takes as long as the client
                        head = await exchange(conn, sent, content, stats, deadlines.head)
                    if head is not None:
                        return conn, head
                    stats.timeouts_head += 1
                    raise HTTPError(504, "upstream response timed out")
                assert whole.cancelled_caught
                raise _timed_out(stats, head_by, total)
            except UpstreamError as exc:
                retry = (
                    exc.kind == "reset"
                    and conn is not None
                    and conn.reused
                    and conn.received == 0
                    and content is None
                    and attempt == 0
                )
                if conn is not None:
                    pool.discard(conn)
                if retry:
                    continue  # a stale keep-alive connection: once more, on a new one
                _count(stats, exc.kind)
                self._report(pool.route, exc)
                raise HTTPError(502, f"upstream {exc.kind}") from None
            except BaseException as exc:
                if conn is not None:
                    pool.discard(conn)
                if isinstance(exc, ClientGone) or only_cancelled(exc):
                    stats.cancelled += 1
                raise
        raise AssertionError("unreachable")  # the loop returns or raises

    def _report(self, route: ProxyRoute, exc: UpstreamError) -> None:
        """A 502 for a failed upstream says why on stderr, beside its access
        line: the route, the upstream and the reason, at most once per
        second per upstream (a refusing upstream under load is one line a
        second, not one per request; the counters are on /metrics)."""
        now = trio.current_time()
        last = self._reported.get(route.upstream)
        if last is not None and now - last < _REPORT_INTERVAL:
            return
        self._reported[route.upstream] = now
        log.warning("--proxy %s: upstream %s: %s (502)", route.prefix, route.upstream, exc)

    async def _answer(
        self,
        down: Downstream,
        route: ProxyRoute,
        req: RequestFacts,
        version: bytes,
        response: Head,
    ) -> tuple[Plan, Body]:
        """Step 5: the plan and its streamed body (``down`` owns the
        connection and the slot)."""
        fields, length = response_fields(route, response.headers)
        status = response.status_code
        if req.method == b"HEAD" or status in _BODILESS:
            # No content (h11 knows it too): read to the end of the message
            # so that the connection can be pooled.
            try:
                if await down.next_chunk():
                    raise BodyCut("content where none may be")
            except BodyCut:
                down.close()
                raise HTTPError(502, "upstream framing") from None
            except BaseException:
                down.close()
                raise
            return Plan(status, tuple(fields), (), send_body=False), NO_BODY
        # Without a length, HTTP/1.1 frames the body with the chunked
        # coding; an HTTP/1.0 client's connection ends it (RFC 9112 §6.3).
        http10 = version == b"1.0"
        plan = Plan(status, tuple(fields), (), close=length is None and http10)
        # The source bounds its own pulls (--proxy-idle-timeout, the total).
        return plan, StreamBody(down, length, bounded=True)


_FILE_METHODS = frozenset({b"GET", b"HEAD"})
_REPORT_INTERVAL = 1.0  # seconds between two failure lines about one upstream

# How long an upstream may take to answer before the client is watched
# (pipeline.handler.watching_client: a helper task that notices a client
# that goes away, in a nursery of its own around the rest of the wait).
# Most answers come sooner and never pay for the watcher or its nursery; a
# client gone during the first WATCH_GRACE is noticed WATCH_GRACE late.
WATCH_GRACE = 0.05


async def _read_head(conn: UpstreamConn) -> Head:
    """The response head; past :data:`WATCH_GRACE` with the client watched.
    Cancellation handling: a read cut by the grace loses nothing (trio's
    ``receive_some`` is cancel-safe: no bytes are taken) and goes on."""
    with trio.move_on_after(WATCH_GRACE):
        return await conn.read_head()
    async with watching_client():
        return await conn.read_head()


async def _quick_head(conn: UpstreamConn, stats: ProxyStats, head_in: float, total: float) -> Head:
    """The response head to a request already sent, within ``head_in``
    seconds (the head timeout, from now) and by ``total`` (the exchange's
    deadline): 504 past the first of them; past :data:`WATCH_GRACE` with
    the client watched.  No cancel scope when the head is there after one
    scheduling round (:meth:`UpstreamConn.head_soon`: nothing waits, so no
    deadline can be due), one while the answer comes within the grace
    (its deadline the grace's or the first deadline's), a second one only
    for an answer that takes longer.

    Cancellation handling: as :func:`_read_head`; the caller closes the
    connection on a 504 or a cancellation."""
    head = await conn.head_soon()
    if head is not None:
        return head
    head_by = trio.current_time() + head_in
    by = min(head_by, total)
    grace = trio.current_time() + WATCH_GRACE
    with trio.move_on_at(min(grace, by)):
        return await conn.read_head()
    if grace < by:  # the grace is over, the deadline is not
        with trio.move_on_at(by):
            async with watching_client():
                return await conn.read_head()
    raise _timed_out(stats, head_by, total)


def _timed_out(stats: ProxyStats, head_by: float | None, total: float) -> HTTPError:
    """The 504 of an exchange whose deadline passed, counted: the head's
    (``head_by``, set once the request was sent) if it came first, else
    the whole exchange's."""
    if head_by is not None and head_by <= total:
        stats.timeouts_head += 1
        return HTTPError(504, "upstream response timed out")
    stats.timeouts_total += 1
    return HTTPError(504, "upstream exchange timed out")


async def _connect(pool: Pool, stats: ProxyStats, patience: float) -> UpstreamConn:
    """A new connection within ``patience`` seconds (504 past it), the client
    watched meanwhile.  Cancellation handling: a cancelled connect leaves
    nothing open (:meth:`Pool.checkout`)."""
    conn: UpstreamConn | None = None
    try:
        async with watching_client():
            with trio.move_on_after(patience):
                conn = await pool.checkout(fresh=True)
    except ClientGone:
        if conn is not None:  # connected as the client left
            pool.discard(conn)
        raise
    if conn is not None:
        return conn
    stats.timeouts_connect += 1
    raise HTTPError(504, "upstream connect timed out")


@dataclasses.dataclass(frozen=True, slots=True)
class Deadlines:
    """One route's deadlines in seconds: connect, response head, idle
    between body chunks, the whole exchange."""

    connect: float
    head: float
    idle: float
    total: float

    @classmethod
    def of(cls, route: ProxyRoute, policy: ProxyPolicy) -> Deadlines:
        """The route's own ([[proxy]] table) where set, else the options'."""

        def pick(own: float | None, default: float) -> float:
            return default if own is None else own

        return cls(
            pick(route.connect_timeout, policy.proxy_connect_timeout),
            pick(route.head_timeout, policy.proxy_head_timeout),
            pick(route.idle_timeout, policy.proxy_idle_timeout),
            pick(route.total_timeout, policy.proxy_total_timeout),
        )


@functools.lru_cache(maxsize=1024)
def _peer_facts(peer: str, networks: tuple[IPNetwork, ...]) -> tuple[str, bool, bool]:
    """The peer's canonical address text, whether it is a trusted proxy
    (``--proxy-networks``), and whether its text is a plain field value
    (:func:`~serverio.proxy.routes.plain_value`); memoised: a pure
    function of a few distinct peers, parsed once instead of per request."""
    address = normalize_address(peer)
    plain = plain_value(forwarded_for(address))
    if not networks:
        return address, False, plain
    try:
        return address, trusts(networks, ipaddress.ip_address(address)), plain
    except ValueError:
        return address, False, plain  # not an address (a Unix socket's peer)


def _key(route: ProxyRoute, fallback: ProxyRoute | None) -> str:
    return "" if route is fallback else route.prefix


def _count(stats: ProxyStats, kind: str) -> None:
    if kind == "connect":
        stats.errors_connect += 1
    elif kind == "reset":
        stats.errors_reset += 1
    else:
        stats.errors_framing += 1


class Downstream:
    """The source of a proxied response body (:class:`~serverio.model.ChunkSource`):
    each :meth:`next_chunk` is one h11 Data event, read when the transport asks
    for it (backpressure: an unread chunk stays in the upstream's socket).
    It owns the upstream connection and the pool slot until the end of the
    message (pooled) or :meth:`close` / a failure (closed)."""

    __slots__ = ("_conn", "_held", "_idle", "_pool", "_stats", "_total", "done")

    def __init__(
        self, pool: Pool, conn: UpstreamConn, stats: ProxyStats, idle: float, total: float
    ) -> None:
        self._held: object = None  # an event ready_chunk took but did not use
        self._pool = pool
        self._conn = conn
        self._stats = stats
        self._idle = idle
        self._total = total
        self.done = False

    async def next_chunk(self) -> bytes:
        """The next chunk, ``b""`` at the end.  Raises :class:`BodyCut`
        when the upstream fails, sends what h11 refuses, or is too slow.

        Cancellation handling: a cancelled pull leaves the exchange
        unfinished; the transport's ``close`` then closes the connection.
        """
        if self.done:
            return b""
        stats = self._stats
        while True:
            try:
                # What was already read needs no wait, so no deadline scope
                # (a small response's head, body and end come in one read).
                event, self._held = self._held, None
                if event is None:
                    event = self._conn.buffered_event()
                if event is None:
                    event = await self._receive()
            except UpstreamError as exc:
                self._end(False)
                _count(stats, exc.kind)
                raise BodyCut(f"upstream {exc.kind}") from None
            if isinstance(event, h11.Data):
                if not event.data:
                    continue
                stats.bytes_down += len(event.data)
                return bytes(event.data)
            if isinstance(event, h11.EndOfMessage):
                self._end(True)
                return b""
            self._end(False)  # ConnectionClosed mid-body: h11 raised already, or this
            _count(stats, "reset")
            raise BodyCut("upstream closed")

    def ready_chunk(self) -> bytes | None:
        """The next chunk if the bytes already read hold it (no I/O, no
        checkpoint: the transport sends it with the head in one write),
        ``b""`` at the end, None when a read is needed or the next event
        is anything else (:meth:`next_chunk` then deals with it)."""
        if self.done:
            return b""
        try:
            event = self._conn.buffered_event()
        except UpstreamError:
            return None  # h11 stays in ERROR: next_chunk raises it again as a cut
        if isinstance(event, h11.Data) and event.data:
            self._stats.bytes_down += len(event.data)
            return bytes(event.data)
        if isinstance(event, h11.EndOfMessage):
            self._end(True)
            return b""
        if event is not None:
            # Not a body chunk (an empty Data, a close): handled as the
            # next pull, with its accounting.
            self._held = event
        return None

    async def _receive(self) -> object:
        """The next event, read within the idle and total deadlines
        (:class:`BodyCut` past one).  Cancellation handling: as :meth:`next_chunk`."""
        idle = trio.current_time() + self._idle
        with trio.move_on_at(min(idle, self._total)):
            return await self._conn.next_event()
        self._end(False)
        if idle <= self._total:
            self._stats.timeouts_idle += 1
        else:
            self._stats.timeouts_total += 1
        raise BodyCut("upstream timed out")

    def _end(self, complete: bool) -> None:
        if self.done:
            return
        self.done = True
        if complete:
            self._pool.checkin(self._conn)
        else:
            self._pool.discard(self._conn)
        self._pool.release()

    def close(self) -> None:
        """Abandon the rest: the upstream connection is closed (the upstream
        sees the close), never pooled; the slot is given back."""
        if not self.done:
            self._stats.cancelled += 1
            self._end(False)
