"""Which ``Host`` names this server answers for: the DNS-rebinding rule (pure).

DNS rebinding: a page on ``attacker.example`` has its name re-pointed at
127.0.0.1 (or a LAN address) once loaded.  To the browser, its requests to
``http://attacker.example:8000/`` stay same-origin with the page, so it may
read every answer, and its ``Origin`` matches its ``Host``: the upload
form's CSRF rule (:func:`serverio.upload.decide.cross_site`) passes, and a
PUT, DELETE or WebDAV method needs no preflight.  What tells such a request
apart is its ``Host``: a name this server was never given.  So, as vite and
webpack-dev-server do, a server that writes or proxies answers only for
expected names (:func:`host_allowed`):

* an IP literal, any (``127.0.0.1``, ``192.168.1.20``, ``[::1]``): an
  address cannot be rebound, so a page whose origin is an address is this
  server's own page.  This covers 127.0.0.0/8, ``::1``, the bound
  addresses and the ``Network:`` addresses printed at start
  (:mod:`serverio.ops.lan`);
* ``localhost`` and every name below it (RFC 6761 §6.3: browsers resolve
  them to loopback themselves, never through DNS);
* the names the listeners are bound to (``-b``, ``--listen``,
  ``--listen-tls``) and this machine's own name (the one ``--dev-tls``
  certifies; read once at start, no DNS);
* the ``--allowed-hosts`` names: ``NAME`` exactly, ``.NAME`` that name and
  every subdomain, ``*.NAME`` the subdomains only; ``*`` turns the check
  off.

Names are compared without the port, in lower case, a trailing dot
dropped (``LocalHost.:8000`` is ``localhost``).  A request without a
``Host`` (HTTP/1.0; an HTTP/2 request without ``:authority``), or with an
empty one (RFC 9112 §3.2), names no host and is answered: a browser always
sends one.  On HTTP/2 ``:authority`` is the Host (RFC 9113 §8.3.1).

Which requests (:attr:`serverio.config.SitePolicy.check_hosts`): every
request, reads included, once ``--upload``, ``--webdav`` or a proxy route
is on, or ``--allowed-hosts`` is given: a rebound page that may read also
reads every file, listing and upstream answer, and the proxy would carry
its requests to an upstream that trusts loopback.  Plain static serving
without those keeps answering any Host (a read-only server behind a proxy
that passes the public name on keeps working); ``--allowed-hosts NAME``
turns the check on there too.

Behind a reverse proxy the ``Host`` checked is the one the proxy sends:
a proxy that passes the client's (Caddy's default, nginx's
``proxy_set_header Host $host``) needs the public names in
``--allowed-hosts``; one that sends its upstream's address (nginx's
default) passes, and then the proxy's own host routing (``server_name``)
is the defence.  ``X-Forwarded-Host`` is not read: serverio builds no URL
from it.

Refused: ``421 Misdirected Request`` (RFC 9110 §15.5.20: "a request that
was directed at a server that is unable or unwilling to produce an
authoritative response for the target URI"), whose one-line body names
the option that admits the host (:func:`misdirected_plan`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from ..config import Config, parse_listen
from .core import Plan, RequestFacts, common_fields
from .extra import HOST

__all__ = ["HostRule", "host_allowed", "host_name", "host_rule", "misdirected_plan"]

# Names a browser resolves to loopback itself (RFC 6761 §6.3), and the
# loopback literals as they appear in a Host (for a cheap first look-up).
_LOCAL: Final = frozenset({"localhost", "127.0.0.1", "::1"})
_WILDCARDS: Final = frozenset({"", "0.0.0.0", "::"})
# A DNS name has at most 253 characters (RFC 1035 §2.3.4); longer is not
# repeated in the refusal's body.
_NAME_MAX: Final = 253
# Host values remembered as served per rule (HostRule.seen).
_SEEN_MAX: Final = 64


@dataclass(frozen=True, slots=True)
class HostRule:
    """The names served besides IP literals and ``localhost``: ``names``
    exactly (lower case, no trailing dot), and each of ``domains``
    (``(suffix, apex)``: ``(".example.com", True)`` for ``.example.com``,
    the name itself too; ``False`` for ``*.example.com``)."""

    names: frozenset[str] = frozenset()
    domains: tuple[tuple[str, bool], ...] = ()
    # Host values, as sent, found served: the next request with one is
    # judged by one look-up (a keep-alive client sends the same Host every
    # time).  At most _SEEN_MAX (clients choose them); not part of the rule.
    seen: set[str] = field(default_factory=set, compare=False, repr=False)


def _normal(name: str) -> str:
    name = name.strip().lower()
    return name[:-1] if name.endswith(".") else name


def host_rule(cfg: Config, machine: str = "") -> HostRule | None:
    """The rule for ``cfg``, or None when Host is not checked
    (``cfg.site.check_hosts`` off: module docstring).  ``machine``: this
    machine's name (``socket.gethostname()``, read by the caller)."""
    if not cfg.site.check_hosts:
        return None
    listeners = cfg.listeners
    bound = [listeners.host] if not (listeners.listen or listeners.listen_tls) else []
    bound += [parse_listen(a, "--listen")[0] for a in listeners.listen]
    bound += [parse_listen(a, "--listen-tls")[0] for a in listeners.listen_tls]
    return _rule([*(b for b in bound if b not in _WILDCARDS), machine, *cfg.site.allowed_hosts])


def _rule(values: Iterable[str]) -> HostRule:
    names: set[str] = set()
    domains: list[tuple[str, bool]] = []
    for value in values:
        value = _normal(value)
        if value.startswith("*."):
            domains.append((value[1:], False))
        elif value.startswith("."):
            domains.append((value, True))
        elif value:
            names.add(value[1:-1] if value.startswith("[") else value)
    return HostRule(frozenset(names), tuple(domains))


def host_name(authority: str) -> str:
    """The name of a ``Host`` value: no port, no brackets around an IPv6
    literal, lower case, no trailing dot (``[::1]:8000`` -> ``::1``)."""
    if authority.startswith("["):
        return authority[1:].partition("]")[0].lower()
    return _normal(authority.partition(":")[0])


def host_allowed(rule: HostRule, authority: str | None) -> bool:
    """May a request whose ``Host`` (or ``:authority``) is ``authority`` be
    answered under ``rule``?  None or empty: no host named, answered."""
    if not authority:
        return True
    name = host_name(authority)
    if not name or name in _LOCAL or name in rule.names or name.endswith(".localhost"):
        return True
    for suffix, apex in rule.domains:
        if name.endswith(suffix) or (apex and name == suffix[1:]):
            return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True  # an address cannot be rebound


def misdirected_plan(rule: HostRule, req: RequestFacts, now: float) -> Plan | None:
    """None when ``req``'s Host is served under ``rule``; else the 421
    Misdirected Request (RFC 9110 §15.5.20) to send instead, its one line
    naming the option that admits the host.  The name is echoed only as
    the Host grammar lets it through (serverio.wire.fields: no space, no
    quote, no angle bracket), in a text/plain body with nosniff."""
    authority = HOST.of(req)
    if authority is None:
        return None  # no host named: answered (host_allowed)
    seen = rule.seen
    if authority in seen:
        return None
    if host_allowed(rule, authority):
        if len(seen) < _SEEN_MAX:
            seen.add(authority)
        return None
    assert authority is not None
    name = host_name(authority)
    if len(name) > _NAME_MAX or "'" in name:
        line = "421 Misdirected Request: this server does not answer for that Host\n"
    else:
        line = (
            f"421 Misdirected Request: Host '{name}' is not served here; "
            f"add --allowed-hosts {name}\n"
        )
    body = line.encode("ascii", "replace")
    hs = common_fields(now)
    hs += [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", b"%d" % len(body)),
        (b"cache-control", b"no-store"),
    ]
    return Plan(421, tuple(hs), (body,), send_body=req.method != b"HEAD")
