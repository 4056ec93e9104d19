"""The reverse proxy's pure parts: which route, what goes up, what comes down.

No I/O and no event loop: a request's facts and a route in, fields out
(table-tested in ``tests/test_proxy_routes.py``).

* :class:`Routes`: the longest matching prefix, on segment boundaries
  (``/api`` takes ``/api`` and ``/api/x``, never ``/apix``), unless a
  longer mount prefix matches (the precedence rule), over the
  request's *decoded, checked* segments (:func:`serverio.http.target.parse_target`
  has already refused ``..``, encoded dot segments, NUL and a segment that
  decodes to ``/``): what is matched, what the site's access rules saw and
  what is sent upstream are one path.
* :func:`upstream_target`: the path sent upstream is re-serialised from those
  segments (each :func:`~serverio.http.target.quote_segment`-encoded, the
  query as received), never the bytes the client sent.  A segment holding a
  backslash is refused (400): a Windows or IIS upstream would read ``%5C``
  as a separator, a path the access rules never saw.
* :func:`request_fields` / :func:`response_fields`: RFC 9110 §7.6.1 — the
  hop-by-hop fields (Connection and every field it names, Keep-Alive, TE,
  Trailer, Transfer-Encoding, Upgrade, Proxy-*) are removed both ways; Via
  is appended (§7.6.3); Forwarded (RFC 7239) and X-Forwarded-For/-Proto/-Host
  name the client, appended to what arrived only when the peer is a
  ``--trusted-proxies`` network, replaced otherwise; X-Real-IP is always
  serverio's own (the client it logs: the peer, or the client a trusted
  proxy names), never the client's; Authorization is dropped when serverio
  itself checked it (an ``[[auth]]`` rule applied and passed) unless the
  route's ``pass-authorization`` says otherwise; framing is the proxy's
  own (Content-Length or chunked, chosen from the content, never copied).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from typing import Final

from ..config import ProxyRoute
from ..errors import HTTPError
from ..http.core import NOSNIFF_FIELD
from ..http.target import Target, quote_segment

__all__ = [
    "HOP_BY_HOP",
    "VIA",
    "Routes",
    "forwarded_for",
    "mount_prefixes",
    "own_cookie",
    "plain_route",
    "plain_value",
    "request_fields",
    "response_fields",
    "upgrade_token",
    "upstream_target",
]

Fields = list[tuple[bytes, bytes]]

# RFC 9110 §7.6.1, plus Proxy-Connection (a pre-standard Connection) and
# every Proxy-* field (credentials for *this* hop: never forwarded).
HOP_BY_HOP: Final = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"proxy-connection",
    }
)
# What the proxy sets itself upstream (framing, Host, 100-continue handled
# here, the forwarding fields) and never copies from the client.
_SET_UP: Final = frozenset(
    {
        b"host",
        b"content-length",
        b"expect",
        b"forwarded",
        b"x-forwarded-for",
        b"x-forwarded-proto",
        b"x-forwarded-host",
        b"x-real-ip",
        b"via",
    }
)
VIA: Final = b"1.1 serverio"
_NOSNIFF_NAME: Final = NOSNIFF_FIELD[0]


class Routes:
    """The configured routes, longest prefix first, and the mounts they
    share the path space with.

    The routing precedence (docs/features.md "Reverse proxy", one rule for
    both): the longest matching prefix among the proxy routes and the
    mounts wins, a proxy route winning a tie.  ``mounts`` are the mounts'
    absolute routes as segment tuples (``-d DIR`` at ``--route-prefix``,
    ``()`` without one, and each ``--mount`` below it: :func:`mount_prefixes`);
    a mount longer than the proxy route that matched takes the request
    (:meth:`match` says None: the files answer it)."""

    __slots__ = ("_by_length",)

    def __init__(
        self, routes: Iterable[ProxyRoute], mounts: Iterable[tuple[str, ...]] = ()
    ) -> None:
        keyed = [(tuple(s for s in r.prefix.split("/") if s), r) for r in routes]
        keyed.sort(key=lambda kr: len(kr[0]), reverse=True)
        shadows = sorted(set(mounts), key=len, reverse=True)
        # Each route with the mounts longer than its prefix (usually none:
        # the plain case pays nothing for mounts).
        self._by_length = tuple(
            (prefix, route, tuple(m for m in shadows if len(m) > len(prefix)))
            for prefix, route in keyed
        )

    def __bool__(self) -> bool:
        return bool(self._by_length)

    def match(self, segments: Sequence[str]) -> ProxyRoute | None:
        """The route with the longest prefix ``segments`` starts with; None
        when none does, or when a longer mount prefix does (the mount wins)."""
        for prefix, route, longer in self._by_length:
            n = len(prefix)
            if len(segments) >= n and tuple(segments[:n]) == prefix:
                for mount in longer:
                    if len(segments) >= len(mount) and tuple(segments[: len(mount)]) == mount:
                        return None
                return route
        return None


# A field name (RFC 9110 §5.6.2 tchar) and a field value of visible ASCII
# words with SP/HTAB runs inside: stricter than what h11 accepts (no
# obs-text), so that what passes needs no second check by h11.
_PLAIN_NAME: Final = re.compile(rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]+")
_PLAIN_VALUE: Final = re.compile(rb"(?:[!-~]++(?:[ \t]++[!-~]++)*+)?")


def plain_value(value: bytes) -> bool:
    """``value`` is a field value h11 would accept as it is (see above)."""
    return _PLAIN_VALUE.fullmatch(value) is not None


def plain_route(route: ProxyRoute) -> bool:
    """What ``route`` adds to an upstream request by configuration (its
    authority as Host, its set request fields) are plain field names and
    values: the request fields need no second validation by h11 when
    the client's were parsed under h11's grammar (the upstream client's
    ``checked``).  Decided once per route, at start-up."""
    try:
        values = [route.authority.encode("ascii")]
        values += [v.encode("latin-1") for _, v in route.set_up]
        names = [n.encode("latin-1") for n, _ in route.set_up]
    except UnicodeEncodeError:
        return False
    return all(map(plain_value, values)) and all(_PLAIN_NAME.fullmatch(n) for n in names)


def mount_prefixes(mounts: Iterable[str], route_prefix: str | None) -> tuple[tuple[str, ...], ...]:
    """The mounts' absolute routes as segment tuples: ``-d DIR`` at
    ``route_prefix`` (``()`` for ``/``) and each ``--mount`` route (already
    normalised: ``/docs``) below it.  Empty without mounts or a prefix (the
    one root at ``/`` never outranks a proxy route: a route wins a tie)."""
    base = tuple(s for s in (route_prefix or "").split("/") if s)
    table = [base + tuple(s for s in route.split("/") if s) for route in mounts]
    return tuple([base, *table]) if base or table else ()


def upstream_target(route: ProxyRoute, target: Target) -> bytes:
    """The origin-form target sent upstream (RFC 9112 §3.2.1)."""
    strip = route.prefix if route.strip_prefix else None
    path = _path(route.base, strip, target.segments, target.slash)
    if target.query is not None:
        return path + b"?" + target.query.encode("ascii")
    return path


@functools.lru_cache(maxsize=256)
def _path(base: str, strip: str | None, segments: tuple[str, ...], slash: bool) -> bytes:
    """The path part of :func:`upstream_target`, memoised: a pure function
    of the route's base and prefix and the request's checked segments, and
    most requests ask for a few hot paths (the query is not part of the
    key; 256 paths of at most a head's size bound the memory; the 400 is
    raised again on every call: an exception is never cached)."""
    if any("\\" in s for s in segments):
        raise HTTPError(400, "a backslash in a proxied path")
    if strip is not None:
        segments = segments[len([s for s in strip.split("/") if s]) :]
    path = base + "/" + "/".join(quote_segment(s) for s in segments)
    if slash and segments and not path.endswith("/"):
        path += "/"
    return path.encode("ascii")


def _named_by_connection(fields: Iterable[tuple[bytes, bytes]]) -> frozenset[bytes]:
    names: set[bytes] = set()
    for name, value in fields:
        if name == b"connection":
            names.update(t.strip().lower() for t in value.split(b",") if t.strip())
    return frozenset(names)


def _hop(name: bytes, named: frozenset[bytes]) -> bool:
    return name in HOP_BY_HOP or name in named or name.startswith(b"proxy-")


def upgrade_token(fields: Sequence[tuple[bytes, bytes]], version: bytes) -> bytes | None:
    """The ``Upgrade`` value of a request that asks to switch protocols
    (RFC 9110 §7.8: an HTTP/1.1 request whose Connection names ``upgrade``
    and that has an Upgrade field, e.g. ``websocket``), else None.  Only
    HTTP/1.1: HTTP/1.0 has no Upgrade, and over HTTP/2 a request with
    Connection or Upgrade is malformed (RFC 9113 §8.2.2; refused before
    any hook).  Several Upgrade fields are one comma-joined list."""
    if version != b"1.1" or b"upgrade" not in _named_by_connection(fields):
        return None
    values = [v.strip() for n, v in fields if n == b"upgrade" and v.strip()]
    return b", ".join(values) if values else None


def _tunnel_fields(upgrade: bytes | None) -> Fields:
    """What a protocol switch keeps of the hop-by-hop fields: Connection:
    upgrade and the Upgrade value, and nothing else (RFC 9110 §7.8)."""
    if upgrade is None:
        return []
    return [(b"connection", b"upgrade"), (b"upgrade", upgrade)]


def forwarded_for(address: str) -> bytes:
    """A ``for=`` value of RFC 7239 §6: an IPv6 address quoted in brackets."""
    if ":" in address:
        return b'"[' + address.encode("ascii", "replace") + b']"'
    return address.encode("ascii", "replace")


def _edit(out: Fields, remove: Sequence[str], sets: Sequence[tuple[str, str]]) -> Fields:
    """A route's own edits: removed names, then set fields (replacing)."""
    if not remove and not sets:
        return out  # the usual route edits nothing
    drop = {n.lower().encode("latin-1") for n in remove}
    drop.update(n.lower().encode("latin-1") for n, _ in sets)
    out = [(n, v) for n, v in out if n not in drop]
    out += [(n.lower().encode("latin-1"), v.encode("latin-1")) for n, v in sets]
    return out


def own_cookie(crumb: bytes) -> bool:
    """Is a ``Cookie`` crumb (``name=value``) one of serverio's own (the
    login feature's ``serverio-*`` cookies, ``__Host-`` prefixed on TLS)?"""
    name = crumb.strip().partition(b"=")[0]
    return name.startswith((b"serverio-", b"__Host-serverio-"))


def _end_to_end(
    out: Fields,
    fields: Sequence[tuple[bytes, bytes]],
    trusted: bool,
    user_header: bytes | None,
    own_cookies: bool,
) -> dict[bytes, bytes]:
    """Append to ``out`` the client's fields that go on upstream: no
    hop-by-hop field (RFC 9110 §7.6.1: the fixed ones, those Connection
    names, ``Proxy-*``), the Cookie lines joined into one (HTTP/2 may
    split it, RFC 9113 §8.2.3) without serverio's own with
    ``own_cookies``, the trusted user header only from a ``trusted``
    peer.  Returns the forwarding fields serverio sets itself
    (:data:`_SET_UP`), as the client sent them (lines joined)."""
    named = _named_by_connection(fields)
    cookies: list[bytes] = []
    seen: dict[bytes, bytes] = {}
    for name, value in fields:
        # _hop, inline (once per field of every proxied request)
        if name in HOP_BY_HOP or name in named or name.startswith(b"proxy-"):
            continue
        if name in _SET_UP:
            if name not in seen:
                seen[name] = value
            else:
                seen[name] += b", " + value
            continue
        if name == b"cookie":
            if own_cookies:
                value = b"; ".join(c.strip() for c in value.split(b";") if not own_cookie(c))
                if not value:
                    continue
            cookies.append(value)
            continue
        if name == user_header and not trusted:
            continue
        out.append((name, value))
    if cookies:
        out.append((b"cookie", b"; ".join(cookies)))
    return seen


def request_fields(
    route: ProxyRoute,
    fields: Sequence[tuple[bytes, bytes]],
    *,
    host: bytes,
    peer: str,
    trusted: bool,
    tls: bool,
    rewrite_host: bool,
    length: int | None,
    has_content: bool,
    upgrade: bytes | None = None,
    real_ip: bytes | None = None,
    authenticated: bool = False,
    user_header: bytes | None = None,
    own_cookies: bool = False,
) -> Fields:
    """The fields of the upstream request.  ``host``: the client's Host (or
    HTTP/2 :authority); ``peer``: the address of the connection's other
    end; ``trusted``: it is a ``--trusted-proxies`` network, whose own
    forwarding fields are kept and appended to; ``length``: the content's
    declared length (Content-Length upstream) or None (chunked, when
    ``has_content``); ``upgrade``: the protocol the client asks to switch
    to (:func:`upgrade_token`), kept with ``Connection: upgrade`` (a
    tunnel), every other hop-by-hop field still removed; ``real_ip``: the
    X-Real-IP value when the peer is trusted (the client it names, by
    :func:`serverio.http.forwarded.client_address`), else the peer's
    address is; ``authenticated``: serverio checked the request's
    credentials (an auth rule applied and passed), so its Authorization
    was for serverio and is not sent on, unless the route passes it
    (``pass-authorization``); ``user_header``: ``--trusted-user-header``'s
    field, sent on only from a trusted peer (from any other it would reach
    the upstream as if a proxy had vouched for it); ``own_cookies``:
    serverio's own cookies (its session, sign-in and share-password
    cookies, :func:`own_cookie`) are left out of ``Cookie``: an upstream
    never sees a token it could replay here."""
    out: Fields = [(b"host", route.authority.encode("ascii") if rewrite_host else host)]
    seen = _end_to_end(out, fields, trusted, user_header, own_cookies)
    fwd, xff, proto, real = _forwarding(peer, host, tls)
    if trusted:
        old = seen.get(b"forwarded")
        fwd = old + b", " + fwd if old else fwd
        old = seen.get(b"x-forwarded-for")
        xff = old + b", " + xff if old else xff
        proto = seen.get(b"x-forwarded-proto", proto)
        host = seen.get(b"x-forwarded-host", host)
        if real_ip is not None:
            real = (b"x-real-ip", real_ip)
    if authenticated and not route.pass_authorization:
        # The credentials were serverio's to check (RFC 9110 §11.6.2: for
        # the origin that asked for them); the upstream gets no copy.
        # Only on this path: an unprotected request's list is not rebuilt.
        out = [(n, v) for n, v in out if n != b"authorization"]
    via = seen.get(b"via")
    out += [
        (b"forwarded", fwd),
        (b"x-forwarded-for", xff),
        (b"x-forwarded-proto", proto),
        (b"x-forwarded-host", host),
        real,
        (b"via", via + b", " + VIA if via else VIA),
        *_tunnel_fields(upgrade),
    ]
    if length is not None:
        out.append((b"content-length", b"%d" % length))
    elif has_content:
        out.append((b"transfer-encoding", b"chunked"))
    return _edit(out, route.remove_up, route.set_up)


@functools.lru_cache(maxsize=1024)
def _forwarding(
    peer: str, host: bytes, tls: bool
) -> tuple[bytes, bytes, bytes, tuple[bytes, bytes]]:
    """This hop's Forwarded element, X-Forwarded-For and -Proto values,
    and the peer's X-Real-IP field; memoised: a pure function of a few
    distinct (peer, Host, scheme), so the usual request allocates none
    of them."""
    proto = b"https" if tls else b"http"
    me = forwarded_for(peer)
    fwd = b"for=" + me + b";host=" + _token_or_quoted(host) + b";proto=" + proto
    address = me.strip(b'"').strip(b"[]")
    return fwd, address, proto, (b"x-real-ip", address)


def _token_or_quoted(value: bytes) -> bytes:
    """RFC 7239 §4: a host with ':' (a port, IPv6) is a quoted-string."""
    if all(c not in value for c in b':[]"\\ '):
        return value
    return b'"' + value.replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"'


def response_fields(
    route: ProxyRoute, fields: Iterable[tuple[bytes, bytes]], switched: bool = False
) -> tuple[Fields, int | None]:
    """The upstream response's fields as sent to the client, and its
    Content-Length (None: unknown; the transport frames the body).
    ``switched``: the upstream's ``101 Switching Protocols`` to a request
    that asked for it: its Upgrade value is kept with ``Connection:
    upgrade`` (RFC 9110 §7.8, §15.2.2), the other hop-by-hop fields and
    any framing field removed (a 101 has no content)."""
    fields = list(fields)
    named = _named_by_connection(fields)
    # X-Content-Type-Options: nosniff on every response serverio sends
    # (docs/features.md), first as in every plan, unless the upstream chose
    # its own value (passed on as it is).
    sniff = False
    out: Fields = [NOSNIFF_FIELD]
    length: int | None = None
    via: bytes | None = None
    for name, value in fields:
        # _hop, inline (once per field of every proxied response)
        if name in HOP_BY_HOP or name in named or name.startswith(b"proxy-"):
            continue
        if name == _NOSNIFF_NAME:
            sniff = True
        if name == b"content-length":
            length = int(value)  # h11 has checked it (one value, digits)
            continue
        if name == b"via":
            via = value if via is None else via + b", " + value
            continue
        out.append((name, value))
    if sniff:
        del out[0]  # the upstream's own, kept in its place
    out.append((b"via", via + b", " + VIA if via else VIA))
    if switched:
        upgrade = upgrade_token([(b"connection", b"upgrade"), *fields], b"1.1")
        out += _tunnel_fields(upgrade)
        return _edit(out, route.remove_down, route.set_down), None
    if length is not None:
        out.append((b"content-length", b"%d" % length))
    return _edit(out, route.remove_down, route.set_down), length
