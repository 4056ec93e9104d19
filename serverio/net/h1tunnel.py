"""The HTTP/1.1 side of a protocol switch: :func:`serve_tunnel`.

The seam (docs/architecture.md "The tunnel seam"): an answer whose body is
a :class:`~serverio.pipeline.hooks.TunnelBody` (the proxy's answer to a
WebSocket request the upstream accepted with ``101``) is not a response
to frame.  The connection writes the 101's head, moves to its TUNNEL
phase (in flight for a graceful shutdown: drained until
``--shutdown-timeout``, then cut with the connections nursery) and hands
its stream, with the bytes it read past the request head, to
:meth:`~serverio.pipeline.hooks.Tunnel.run`.  It reads no further request:
HTTP on this connection is over (RFC 9110 §7.8), and the connection closes
when the tunnel returns.
"""

from __future__ import annotations

from ..fs.body import Body
from ..http.core import Plan
from ..pipeline.hooks import TunnelBody
from ..wire.h1 import head_bytes
from .emit import Emitter
from .h1state import TUNNEL, Lifetime

__all__ = ["serve_tunnel"]


async def serve_tunnel(
    emitter: Emitter, life: Lifetime, plan: Plan, body: Body, initial: bytes
) -> int:
    """Send ``plan``'s head (a 101, no Connection: close: the connection
    now carries the new protocol) and run the tunnel on the stream; the
    bytes the tunnel sent to the client.

    Cancellation handling: the head write has the write deadline; the
    tunnel closes its own side when cancelled, the caller closes the
    stream and ``body`` (its ``finally``).
    """
    assert isinstance(body, TunnelBody)  # the caller's test
    life.lift()
    await emitter.send(head_bytes(plan.status, plan.headers, close=False, keep_alive_10=False))
    life.to(TUNNEL)
    return await body.tunnel.run(emitter.stream, initial)
