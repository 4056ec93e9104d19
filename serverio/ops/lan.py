"""The addresses another machine can use: the ``Network:`` lines.

On ``-b 0.0.0.0`` / ``-b ::`` (or a ``--listen`` on one of them) the stdout
line says ``http://0.0.0.0:8000/``, which no other machine can open; like
vite and serve, serverio then also prints, on standard error, one
``Network: http://192.168.1.20:8000/`` line per address of this host that
such a listener accepts on (stdout keeps its one line per listener, which
scripts read).

Where the addresses come from, without sending anything: for each family a
UDP socket is ``connect()``-ed to a documentation address (192.0.2.1,
RFC 5737 TEST-NET-1; 2001:db8::1, RFC 3849) and its ``getsockname()`` read.
``connect()`` on a datagram socket sends no packet: it only records the
peer address (POSIX connect() on a connectionless socket), for which the
kernel picks the route and so the source address it would use: the address
of the interface a LAN peer reaches through the default route.  A host without a route
for that family raises OSError there, and that family has no line.  No new
dependency (Python has no interface enumeration), and no
``getaddrinfo(gethostname())``: that may ask DNS (traffic, and a blocking
wait in the event loop) and on Debian mostly answers 127.0.1.1.

Loopback, unspecified and link-local addresses are left out (a link-local
IPv6 URL needs a zone id no browser accepts from another machine).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence

__all__ = ["WILDCARDS", "interface_addresses", "network_urls"]

# The bind addresses that mean "every interface" (RFC 4291 §2.5.2 for ::).
WILDCARDS = frozenset({"0.0.0.0", "::", ""})

# Documentation addresses (RFC 5737, RFC 3849): never routed anywhere, and
# a UDP connect() to them sends nothing anyway.
_PROBES = ((socket.AF_INET, "192.0.2.1"), (socket.AF_INET6, "2001:db8::1"))

AddressSource = Callable[[], Sequence[str]]


def interface_addresses() -> list[str]:
    """This host's outward addresses, one per family at most (module doc).

    Cancellation handling: not a blocking call (a UDP connect() neither
    waits nor sends), so it runs in the event loop thread directly.
    """
    out: list[str] = []
    for family, probe in _PROBES:
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as sock:
                sock.connect((probe, 9))  # port 9: discard (RFC 863); nothing is sent
                out.append(str(sock.getsockname()[0]))
        except OSError:  # no route for this family, or no such family here
            continue
    return out


def _reachable(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return None
    if ip.is_loopback or ip.is_unspecified or ip.is_link_local:
        return None
    return ip


def network_urls(
    scheme: str, host: str, port: int, source: AddressSource | None = None
) -> list[str]:
    """``scheme://ADDRESS:port/`` for every address a wildcard ``host``
    listener is reachable at; [] for any other host.

    ``0.0.0.0`` accepts IPv4 only; ``::`` IPv6 and IPv4 too (serverio's
    listeners are dual-stack, serverio.net.listen).  ``source``: where the
    addresses come from (default: :func:`interface_addresses`, looked up at
    call time so that tests can replace it).
    """
    if host not in WILDCARDS:
        return []
    families = (4,) if host == "0.0.0.0" else (4, 6)
    urls: list[str] = []
    for address in (source or interface_addresses)():
        ip = _reachable(address)
        if ip is None or ip.version not in families:
            continue
        shown = f"[{ip}]" if ip.version == 6 else str(ip)
        url = f"{scheme}://{shown}:{port}/"
        if url not in urls:
            urls.append(url)
    return urls
