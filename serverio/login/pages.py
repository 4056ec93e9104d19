"""The login feature's pages and JSON answers (pure).

Every page is a constant shell with escaped text in it (user names, paths
and ``next`` targets are attacker input: :func:`html.escape` where shown,
never in a script or a style), one inline style allowed by its hash and
no script at all, sent with :data:`PAGE_CSP` (the listing's rules:
``default-src 'none'``, ``form-action 'self'``, no framing, no base).
Every answer here is ``Cache-Control: no-store`` (a sign-in form carries a
CSRF token; a share's pages are per link) and ``Referrer-Policy:
same-origin`` (a share link's token must not leak to another site through
``Referer``; ``no-referrer`` would make a browser send ``Origin: null``
with the forms' POSTs, which the CSRF checks refuse).  Errors for JSON
clients are problem details (RFC 9457, ``application/problem+json``).
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from typing import Final
from urllib.parse import quote

from ..errors import reason_phrase
from ..http.core import Plan, common_fields
from ..http.hashsource import sha256_source

__all__ = [
    "PAGE_CSP",
    "dropbox_page",
    "json_plan",
    "login_page",
    "page_plan",
    "problem_plan",
    "see_other",
    "share_password_page",
    "share_refused_page",
    "sign_in_needed",
]

_CSS: Final = """
:root{color-scheme:light dark;--fg:#1f2328;--bg:#fff;--mute:#59636e;--line:#d1d9e0;\
--link:#0969da}
@media (prefers-color-scheme:dark){:root{--fg:#e6edf3;--bg:#0d1117;--mute:#9198a1;\
--line:#3d444d;--link:#4493f8}}
body{margin:0 auto;max-width:30rem;padding:1.5rem 1rem;font:15px/1.5 system-ui,sans-serif;\
color:var(--fg);background:var(--bg)}
h1{font-size:1.25rem;font-weight:600;margin:0 0 1rem;padding-bottom:.5rem;\
border-bottom:1px solid var(--line)}
label{display:block;margin:.5rem 0 .2rem}input{font:inherit;width:100%;box-sizing:border-box}
button{font:inherit;margin-top:1rem}p{margin:0 0 1rem}.err{color:#cf222e}
a{color:var(--link)}
"""


# Nothing loads, the one style by hash, no script; forms post to this
# origin only; no framing (clickjacking a sign-in form), no base.
PAGE_CSP: Final = (
    f"default-src 'none'; style-src {sha256_source(_CSS)}; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
).encode("ascii")

_HTML: Final = b"text/html; charset=utf-8"


def _shell(title: str, body: str) -> bytes:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="referrer" content="same-origin">'
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head>\n"
        f"<body><h1>{html.escape(title)}</h1>\n{body}</body></html>\n"
    ).encode()


def page_plan(
    status: int,
    now: float,
    body: bytes,
    fields: Sequence[tuple[bytes, bytes]] = (),
    *,
    head: bool = False,
    content_type: bytes = _HTML,
) -> Plan:
    """A page answer: ``body``, no-store, the page policy, ``fields`` after."""
    hs = common_fields(now)
    hs += [
        (b"content-type", content_type),
        (b"content-length", b"%d" % len(body)),
        (b"cache-control", b"no-store"),
        (b"referrer-policy", b"same-origin"),
    ]
    if content_type == _HTML:
        hs.append((b"content-security-policy", PAGE_CSP))
    hs += fields
    return Plan(status, tuple(hs), (body,), send_body=not head)


def see_other(now: float, location: str, fields: Sequence[tuple[bytes, bytes]] = ()) -> Plan:
    """303 See Other to ``location`` (RFC 9110 §15.4.4: a form's answer;
    reloading the page it lands on is a GET, never a repost)."""
    body = b"303 See Other\n"
    hs = common_fields(now)
    hs += [
        (b"location", location.encode("ascii")),
        (b"cache-control", b"no-store"),
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", b"%d" % len(body)),
        *fields,
    ]
    return Plan(303, tuple(hs), (body,))


def json_plan(status: int, now: float, data: object) -> Plan:
    body = json.dumps(data, ensure_ascii=True).encode("ascii") + b"\n"
    return page_plan(status, now, body, content_type=b"application/json")


def problem_plan(
    status: int, now: float, detail: str, fields: Sequence[tuple[bytes, bytes]] = ()
) -> Plan:
    """A problem details answer (RFC 9457 §3) with ``detail``."""
    data = {
        "type": "about:blank",
        "title": reason_phrase(status).decode("latin-1"),
        "status": status,
        "detail": detail,
    }
    body = json.dumps(data, ensure_ascii=True).encode("ascii") + b"\n"
    return page_plan(status, now, body, fields, content_type=b"application/problem+json")


def login_page(csrf: str, next_path: str, error: str = "") -> bytes:
    """The sign-in form (POSTs to itself, the CSRF token in a hidden field)."""
    esc = html.escape
    note = f'<p class="err" role="alert">{esc(error)}</p>\n' if error else ""
    return _shell(
        "Sign in",
        f"{note}"
        '<form method="post" action="/.serverio/login">\n'
        f'<input type="hidden" name="csrf" value="{esc(csrf)}">\n'
        f'<input type="hidden" name="next" value="{esc(next_path)}">\n'
        '<label for="user">User</label>'
        '<input id="user" name="user" autocomplete="username" required autofocus>\n'
        '<label for="password">Password</label>'
        '<input id="password" name="password" type="password" '
        'autocomplete="current-password" required>\n'
        '<button type="submit">Sign in</button>\n</form>\n',
    )


def sign_in_needed(next_path: str) -> bytes:
    """A 401's page for a browser: a link to the sign-in form."""
    href = "/.serverio/login?next=" + quote(next_path, safe="/")
    # As every error page (docs/reference/errors.md): the requested path,
    # escaped, and a link to its parent.
    parent = next_path.rstrip("/").rsplit("/", 1)[0] + "/"
    up = html.escape(quote(parent, safe="/"))
    return _shell(
        "Sign in needed",
        f'<p>This page needs you signed in. <a href="{html.escape(href)}">Sign in</a></p>\n'
        f"<p>Requested: <code>{html.escape(next_path)}</code></p>\n"
        f'<p><a href="{up}">Up to {html.escape(parent)}</a></p>\n',
    )


def share_password_page(error: str = "") -> bytes:
    """The password form of a protected share link (POSTs to the link)."""
    note = f'<p class="err" role="alert">{html.escape(error)}</p>\n' if error else ""
    return _shell(
        "Password needed",
        f"{note}<p>This shared link is protected by a password.</p>\n"
        '<form method="post" action="">\n'
        '<label for="password">Password</label>'
        '<input id="password" name="password" type="password" required autofocus>\n'
        '<button type="submit">Open</button>\n</form>\n',
    )


def dropbox_page(name: str) -> bytes:
    """A drop box link's page: an upload form to the folder, no listing."""
    return _shell(
        "Upload files",
        f"<p>Files sent here go to <b>{html.escape(name)}</b>; "
        "you cannot see what is there.</p>\n"
        '<form method="post" action="" enctype="multipart/form-data">\n'
        '<input type="file" name="file" multiple required>\n'
        '<button type="submit">Upload</button>\n</form>\n',
    )


def share_refused_page(status: int) -> bytes:
    """410 for an expired link, 403 for an altered or revoked one."""
    if status == 410:
        return _shell("This link has expired", "<p>Ask whoever shared it for a new link.</p>\n")
    return _shell(
        "This link is not valid",
        "<p>It was changed, revoked, or made by another server. "
        "Ask whoever shared it for a new link.</p>\n",
    )
