"""Cookies: read one by name from a request, write ``Set-Cookie`` (pure).

The ``Cookie`` field is attacker input: :func:`cookie_value` reads at most
:data:`MAX_COOKIE_FIELD` characters of it (a longer field is ignored
whole: the client is anonymous), splits it on ``;`` (RFC 6265 §5.4, §4.2.1;
HTTP/2's split crumbs arrive joined with ``"; "``), and returns the first
value of the name asked for when it is made of cookie-octets only (§4.1.1),
else None.  Nothing here decodes or trusts a value: the session and share
cookies are signed tokens (serverio.signing), opened by their owners.

:func:`set_cookie` writes what RFC 6265bis asks of a session cookie:
``HttpOnly`` (no script reads it), ``SameSite`` (a cross-site POST does not
carry it), ``Path=/`` and no ``Domain`` (host-only), ``Secure`` over TLS,
where the name also takes the ``__Host-`` prefix (§4.1.3.2: a browser
accepts it only Secure, host-only, for ``/``, so no sibling subdomain or
plain-HTTP page can plant one).
"""

from __future__ import annotations

import re

__all__ = ["MAX_COOKIE_FIELD", "clear_cookie", "cookie_name", "cookie_value", "set_cookie"]

# Browsers send at most ~4 KiB per cookie and a few dozen cookies; a field
# longer than this is not one of ours to read (oversized: anonymous).
MAX_COOKIE_FIELD = 16384
# cookie-octet (RFC 6265 §4.1.1): no controls, whitespace, DQUOTE, comma,
# semicolon or backslash.
_OCTETS = re.compile(r"[\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]{1,8192}")
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
# Crumbs: ";" (RFC 6265 §4.2.1) and "," (lines joined by the field scan;
# never inside a cookie-octet value).
_CRUMBS = re.compile(r"[;,]")


def cookie_name(base: str, tls: bool) -> str:
    """The name a cookie takes on this connection: ``__Host-`` prefixed
    over TLS (RFC 6265bis §4.1.3.2)."""
    return "__Host-" + base if tls else base


def cookie_value(field: str | None, name: str) -> str | None:
    """The first value of cookie ``name`` in a ``Cookie`` field, or None
    (absent, oversized field, or not cookie-octets)."""
    if field is None or len(field) > MAX_COOKIE_FIELD:
        return None
    for crumb in _CRUMBS.split(field):
        key, eq, value = crumb.strip().partition("=")
        if eq and key == name:
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = value[1:-1]  # §4.1.1 allows a quoted value
            return value if _OCTETS.fullmatch(value) is not None else None
    return None


def set_cookie(
    name: str,
    value: str,
    max_age: int,
    *,
    secure: bool,
    same_site: str = "Lax",
) -> tuple[bytes, bytes]:
    """A ``Set-Cookie`` field for a host-only cookie on ``/``."""
    if _NAME.fullmatch(name.removeprefix("__Host-")) is None:
        raise ValueError(f"bad cookie name {name!r}")
    if _OCTETS.fullmatch(value) is None:
        raise ValueError("a cookie value must be cookie-octets")
    parts = [f"{name}={value}", "Path=/", f"Max-Age={max(0, max_age)}", "HttpOnly"]
    parts.append(f"SameSite={same_site}")
    if secure:
        parts.append("Secure")
    return (b"set-cookie", "; ".join(parts).encode("ascii"))


def clear_cookie(name: str, *, secure: bool) -> tuple[bytes, bytes]:
    """The ``Set-Cookie`` that removes cookie ``name`` (RFC 6265 §3.1:
    an expiry in the past; Max-Age=0)."""
    parts = [f"{name}=", "Path=/", "Max-Age=0", "HttpOnly", "SameSite=Lax"]
    if secure:
        parts.append("Secure")
    return (b"set-cookie", "; ".join(parts).encode("ascii"))
