"""A WebSocket (any ``Upgrade``) tunnel through the proxy: :class:`UpstreamTunnel`.

After the upstream's ``101 Switching Protocols`` (RFC 9110 §15.2.2) to a
request that asked to switch (§7.8), HTTP is over on both connections: the
client's and the upstream's are two byte streams, joined here by two tasks
in one nursery, one per direction:

* ``up``: client -> upstream; ``down``: upstream -> client;
* each reads at most :data:`~serverio.proxy.client.RECV_SIZE` bytes and
  writes them before it reads again (backpressure: a side that stops
  reading stops the other side's pump, nothing is buffered here beyond
  one read);
* either side closing (EOF), resetting or failing a write ends the
  direction, which cancels the nursery: the other direction ends too, the
  upstream socket is closed here and the client's by its connection
  (:meth:`serverio.net.connection.ConnectionTask.run`'s ``finally``);
* ``--proxy-tunnel-idle``: one cancel scope around both, whose deadline
  every delivered chunk (either way) pushes forward; no byte either way
  for that long closes the tunnel (counted ``proxy_timeouts_tunnel``);
* graceful shutdown leaves a tunnel alone as an in-flight request (the
  connection is in its TUNNEL phase) until ``--shutdown-timeout``; then
  the connections nursery is cancelled, which cancels both pumps.

Bytes already read past either head are delivered first: what the upstream
sent right after its 101 (h11's ``trailing_data``) to the client, what the
client sent past its request head to the upstream.

Tunnels have their own budget (:class:`TunnelGauge`), apart from the
routes' request slots (``--proxy-max-inflight``): idle WebSockets must not
starve ordinary requests.  A request that asks to switch reserves a place
before it goes upstream: at most ``--proxy-max-tunnels`` at once, every
route together, and ``--proxy-max-tunnels-per-client`` of them per client
(the access log's client, an IPv6 one by its /64); past either, 503 at
once (counted ``proxy_busy``).  The handshake itself holds a request slot
like any exchange; at the upstream's 101 that slot is given back and the
tunnel keeps its place and its upstream connection, never pooled, until
it ends.
"""

from __future__ import annotations

import trio

from ..observe.stats import ProxyStats
from ..site.gate import client_key
from .client import RECV_SIZE, Pool, UpstreamConn

__all__ = ["TunnelGauge", "UpstreamTunnel"]

_GONE = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


class TunnelGauge:
    """The tunnels open now (``serverio_proxy_tunnels_open`` in /metrics)
    and their budget (module docstring): ``limit`` places at once,
    ``per_client`` of them per client.  A place is held from the request
    that asks to switch (:meth:`reserve`) to the end of its tunnel, or of
    its exchange when the upstream declines (:meth:`release`)."""

    __slots__ = ("_by_client", "held", "limit", "open", "per_client")

    def __init__(self, limit: int = 256, per_client: int = 32) -> None:
        self.open = 0  # tunnels running now
        self.held = 0  # places held: handshakes under way and tunnels
        self.limit = limit
        self.per_client = per_client
        self._by_client: dict[str, int] = {}  # places held per client key

    def reserve(self, client: str) -> tuple[str, str | None]:
        """A place for ``client`` (its address): its key for :meth:`release`,
        and None, or the refusal's reason (nothing is then held)."""
        key = client_key(client)
        mine = self._by_client.get(key, 0)
        if self.held >= self.limit:
            return key, "too many tunnels (--proxy-max-tunnels)"
        if mine >= self.per_client:
            return key, "too many tunnels from this client (--proxy-max-tunnels-per-client)"
        self.held += 1
        self._by_client[key] = mine + 1
        return key, None

    def release(self, key: str) -> None:
        """Give back a place :meth:`reserve` gave ``key`` (once per place)."""
        self.held -= 1
        left = self._by_client[key] - 1
        if left:
            self._by_client[key] = left
        else:
            del self._by_client[key]  # the table holds only clients with a place


class UpstreamTunnel:
    """One switched exchange (:class:`serverio.pipeline.hooks.Tunnel`)."""

    __slots__ = ("_conn", "_gauge", "_idle", "_key", "_pool", "_stats", "done", "sent")

    def __init__(
        self,
        pool: Pool,
        conn: UpstreamConn,
        stats: ProxyStats,
        idle: float,
        gauge: TunnelGauge,
        key: str,
    ) -> None:
        self._pool = pool
        self._conn = conn
        self._stats = stats
        self._idle = idle
        self._gauge = gauge
        self._key = key  # the client's place in ``gauge`` (TunnelGauge.reserve)
        self.done = False
        self.sent = 0  # bytes sent to the client

    async def run(self, client: trio.abc.Stream, initial: bytes) -> int:
        """Join ``client`` and the upstream until either ends (module
        docstring); the bytes sent to the client.

        Cancellation handling: cancelled, the upstream connection is closed
        and the tunnel's place given back before it propagates; ``client``
        is the caller's to close.
        """
        stats = self._stats
        stats.tunnels += 1
        self._gauge.open += 1
        upstream = self._conn.stream
        try:
            with trio.CancelScope(deadline=trio.current_time() + self._idle) as idle:
                if await self._first(client, upstream, initial):
                    async with trio.open_nursery() as nursery:
                        done = nursery.cancel_scope
                        nursery.start_soon(self._pump, client, upstream, done, idle, True)
                        nursery.start_soon(self._pump, upstream, client, done, idle, False)
            if idle.cancelled_caught:
                stats.timeouts_tunnel += 1
        finally:
            self._gauge.open -= 1
            self.close()
        return self.sent

    async def _first(
        self, client: trio.abc.Stream, upstream: trio.abc.Stream, initial: bytes
    ) -> bool:
        """Deliver what was read past the heads; False: a side is gone."""
        early = self._conn.trailing
        try:
            if early:
                await client.send_all(early)
                self.sent += len(early)
                self._stats.bytes_down += len(early)
            if initial:
                await upstream.send_all(initial)
                self._stats.bytes_up += len(initial)
        except _GONE:
            return False
        return True

    async def _pump(
        self,
        src: trio.abc.Stream,
        dst: trio.abc.Stream,
        done: trio.CancelScope,
        idle: trio.CancelScope,
        up: bool,
    ) -> None:
        """One direction until EOF or a failure; then both end (``done``)."""
        stats = self._stats
        try:
            while True:
                data = await src.receive_some(RECV_SIZE)
                if not data:
                    break  # EOF: that side is done, and so is the tunnel
                await dst.send_all(data)
                idle.deadline = trio.current_time() + self._idle
                if up:
                    stats.bytes_up += len(data)
                else:
                    stats.bytes_down += len(data)
                    self.sent += len(data)
        except _GONE:
            pass
        done.cancel()

    def close(self) -> None:
        """Close the upstream connection and give the tunnel's place back
        (once; the request slot went back at the 101)."""
        if not self.done:
            self.done = True
            self._pool.discard(self._conn)
            self._gauge.release(self._key)
