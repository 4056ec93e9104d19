"""The client address behind trusted reverse proxies (pure; RFC 7239).

With ``--trusted-proxies CIDR...`` a request whose *peer* (the address that
opened the connection) is inside one of those networks may name its client
in ``Forwarded`` (RFC 7239 §4, ``for=`` parameters) or ``X-Forwarded-For``
(the de-facto list of addresses).  Each proxy appends the address it saw
to the right, so the list is read from the right: hops that are trusted
proxies are skipped, and the first hop that is not one is the client
(RFC 7239 §7.4: only the entries added by proxies one trusts are
reliable; what lies to the left of the first untrusted hop was written by
the client and is ignored).

Rules, for hostile values:

* the peer is not trusted: the fields are ignored, the peer is the client
  (default: no network is trusted, so nothing here runs);
* at most :data:`MAX_HOPS` hops are read; when all of them are trusted
  the leftmost one read is the client (a bounded walk, whatever the field
  length);
* a hop that is ``unknown``, a syntax error or has no ``for=`` ends the
  walk at the trusted hop that reported it (the client is not known
  better than that proxy);
* an obfuscated identifier (RFC 7239 §6.3, ``_`` + token characters)
  is the client, as the proxy that wrote it names it;
* ports are dropped (``192.0.2.1:4711``, ``"[2001:db8::1]:4711"``);
  IPv6 must be bracketed and quoted in ``Forwarded`` (§6), is compressed,
  and an IPv4-mapped IPv6 address is its IPv4 address;
* both fields present but naming different clients: the peer is the client
  (a proxy sets one of them; the other was forged by the client, and a
  forged field must never pick the address).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence

__all__ = [
    "MAX_HOPS",
    "IPAddress",
    "IPNetwork",
    "client_address",
    "normalize_address",
    "trusts",
]

MAX_HOPS = 16

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# forwarded-pair = token "=" value ; value = token / quoted-string (RFC 7239 §4,
# RFC 9110 §5.6.2 and §5.6.4).  Matched one pair at a time.
_TCHAR = r"[!#$%&'*+.^_`|~0-9A-Za-z-]"
_PAIR = re.compile(
    rf"[ \t]*({_TCHAR}+)=(?:({_TCHAR}+)|\"((?:[^\"\\\x00-\x08\x0a-\x1f\x7f]|\\[\t -~])*)\")[ \t]*"
)
_OBFUSCATED = re.compile(r"_[A-Za-z0-9._-]{1,64}")
_PORT = re.compile(r"[0-9]{1,5}")


def trusts(networks: Sequence[IPNetwork], addr: IPAddress) -> bool:
    """Is ``addr`` inside one of ``networks``?"""
    return any(addr in net for net in networks)


def _ip(text: str) -> IPAddress | None:
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


def normalize_address(peer: str) -> str:
    """The canonical text of an address (``::ffff:192.0.2.1`` -> ``192.0.2.1``);
    anything that is not an address unchanged (``-``, a Unix socket)."""
    addr = _ip(peer)
    return peer if addr is None else str(addr)


def _node(text: str, quoted: bool) -> IPAddress | str | None:
    """A node (RFC 7239 §6): an address, an obfuscated identifier, or None
    (``unknown`` or not a node)."""
    if text.startswith("["):
        # "[" IPv6address "]" [ ":" port ]: only legal quoted (the colons).
        if not quoted:
            return None
        inner, close, rest = text[1:].partition("]")
        if not close or (rest and not (rest[:1] == ":" and _port(rest[1:]))):
            return None
        if "%" in inner:
            return None  # a zone index names an interface, not a client
        try:
            v6 = ipaddress.IPv6Address(inner)
        except ValueError:
            return None
        return v6.ipv4_mapped or v6
    host, colon, port = text.partition(":")
    if colon and not _port(port):
        return None
    if _OBFUSCATED.fullmatch(host):
        return host
    try:
        return ipaddress.IPv4Address(host)
    except ValueError:
        return None


def _port(text: str) -> bool:
    # node-port = port / obfport (RFC 7239 §6)
    return _PORT.fullmatch(text) is not None or _OBFUSCATED.fullmatch(text) is not None


def _forwarded_for(element: str) -> IPAddress | str | None:
    """The ``for=`` node of one forwarded-element; None when it has none or
    is not well-formed."""
    pos, end = 0, len(element)
    found: IPAddress | str | None = None
    seen = False
    while pos < end:
        m = _PAIR.match(element, pos)
        if m is None:
            return None
        name, token, quoted = m.group(1), m.group(2), m.group(3)
        if name.lower() == "for":
            if seen:
                return None  # a parameter appears at most once (§4)
            seen = True
            if token is not None:
                found = _node(token, False)
            else:
                found = _node(re.sub(r"\\(.)", r"\1", quoted), True)
        pos = m.end()
        if pos < end:
            if element[pos] != ";":
                return None
            pos += 1
    return found


def _xff(hop: str) -> IPAddress | str | None:
    # X-Forwarded-For: bare addresses, sometimes with a port, IPv6 bare or bracketed.
    hop = hop.strip(" \t")
    if hop.startswith("["):
        return _node(hop, True)
    addr = _ip(hop)
    if addr is not None:
        return addr
    return _node(hop, False)


def _walk(peer: str, value: str, forwarded: bool, trusted: Sequence[IPNetwork]) -> str:
    # rsplit bounds the work: at most MAX_HOPS + 1 pieces, whatever the length.
    hops = value.rsplit(",", MAX_HOPS)
    client = peer
    for n, raw in enumerate(reversed(hops)):
        if n == MAX_HOPS:
            break  # all read hops trusted: the leftmost read is the client
        node = _forwarded_for(raw.strip(" \t")) if forwarded else _xff(raw)
        if node is None:
            return client  # unknown or malformed: the trusted hop that reported it
        if isinstance(node, str):
            return node  # obfuscated identifier
        client = str(node)
        if not trusts(trusted, node):
            return client
    return client


def client_address(
    peer: str,
    forwarded: str | None,
    x_forwarded_for: str | None,
    trusted: Sequence[IPNetwork],
) -> str:
    """The client of a request that ``peer`` sent (rules: module docstring)."""
    addr = _ip(peer)
    if addr is None:
        return peer
    peer = str(addr)
    if not trusts(trusted, addr) or (forwarded is None and x_forwarded_for is None):
        return peer
    via_fwd = _walk(peer, forwarded, True, trusted) if forwarded is not None else None
    via_xff = _walk(peer, x_forwarded_for, False, trusted) if x_forwarded_for is not None else None
    if via_fwd is not None and via_xff is not None and via_fwd != via_xff:
        return peer  # one of them is forged, and we cannot tell which
    return via_fwd if via_fwd is not None else via_xff or peer
