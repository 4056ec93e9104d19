"""Built-in error pages and problem documents, chosen by ``Accept`` (pure).

:func:`serverio.http.core.error_plan` makes every error a plain text
("409 Conflict\\n", then the problem's detail when the code that refused
said why: :class:`serverio.errors.Problem`).  :func:`negotiated_error`
turns such a plan into

- an RFC 9457 problem document (``application/problem+json``: ``type``
  ``about:blank``, ``title``, ``status``, ``detail``, ``instance`` the
  request's path, and the problem's extension members) for a client that
  names ``application/problem+json`` or ``application/json`` at least as
  high as HTML (:func:`serverio.http.negotiate.prefers_problem`; the
  listing page's own fetch() calls ask for it);
- a small HTML page in the listing's style (the status, one sentence, the
  detail, the requested path and a link to its parent) for a client that
  prefers HTML;
- the plain text for every other client.  The HTML choice
  (:func:`prefers_html`, RFC 9110 §12.5.1):

- HTML only when ``Accept`` names ``text/html`` itself with q > 0 and at
  least the weight it gives ``text/plain`` (browsers' navigations send
  ``text/html,...,*/*;q=0.8``);
- ``*/*`` and ``text/*`` alone (curl, wget, scripts, fetch() by default),
  no ``Accept`` at all, or a field that weights plain text higher: plain
  text, as before (what a terminal shows best, what scripts already parse).

Because the body depends on ``Accept``, every variant carries
``Vary: Accept`` (RFC 9110 §12.5.5).  The page shows the request's path
(its decoded segments, control and bidi characters made visible as in
listings, HTML-escaped) and links to the parent by its percent-encoded
path: nothing else from the request (no query, no header).  The detail is
the refusing code's sentence, HTML-escaped too.  The page has no script
and allows only its own inline style, by hash (:data:`ERROR_CSP`, the listing's rules:
``default-src 'none'``, ``base-uri 'none'``, ``frame-ancestors 'none'``),
and ``X-Content-Type-Options: nosniff`` comes with every plan
(:func:`serverio.http.core.common_fields`).

Only the built-in body is replaced: a plan whose body is anything else (a
site's ``[errors]`` page, the live-reload page, a redirect's) is returned
as it is, so site error pages keep their priority.  The warm path never
calls this: only answers with a status of 400 or more do.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Final

from ..errors import Problem, reason_phrase
from .core import Plan, RequestFacts, error_text
from .hashsource import sha256_source
from .listing import json_text, shown_name
from .negotiate import prefers_html, prefers_problem
from .target import quote_segment

__all__ = [
    "ERROR_CSP",
    "error_for",
    "error_html",
    "negotiated_error",
    "problem_json",
    "text_body",
]

# One sentence per status: what happened, in the reader's terms.  Constant
# text: nothing from the request or the filesystem is ever shown.
_SENTENCES: Final[dict[int, str]] = {
    400: "The request could not be understood by this server.",
    401: "This page needs a user name and password.",
    403: "You do not have permission to see this page.",
    404: "There is nothing at this address.",
    405: "This address does not answer that method.",
    406: "There is no version of this page in a form the browser accepts.",
    408: "The request took too long to arrive.",
    411: "The request must say how long its content is.",
    412: "A condition the request set does not hold.",
    413: "The request's content is larger than this server accepts.",
    414: "The address is longer than this server accepts.",
    415: "The request's content is in a form this server does not take.",
    416: "The requested range is not part of the file.",
    417: "The server cannot meet the request's expectation.",
    421: "This server does not answer for that address.",
    429: "Too many attempts: wait a moment, then try again.",
    431: "The request's header fields are larger than this server accepts.",
    500: "Something went wrong on the server.",
    501: "The server does not know how to answer this request.",
    502: "The server could not get an answer from the next server.",
    503: "The server is busy: try again in a moment.",
    504: "The next server did not answer in time.",
    505: "The server does not speak this version of HTTP.",
}

_CSS: Final = """
:root{color-scheme:light dark;--fg:#1f2328;--bg:#fff;--mute:#59636e;--line:#d1d9e0;\
--link:#0969da}
@media (prefers-color-scheme:dark){:root{--fg:#e6edf3;--bg:#0d1117;--mute:#9198a1;\
--line:#3d444d;--link:#4493f8}}
body{margin:0 auto;max-width:60rem;padding:1.5rem 1rem;font:15px/1.5 system-ui,sans-serif;\
color:var(--fg);background:var(--bg)}
h1{font-size:1.25rem;font-weight:600;margin:0 0 1rem;padding-bottom:.5rem;\
border-bottom:1px solid var(--line)}
p{margin:0 0 1rem}footer{color:var(--mute);font-size:.85rem}
a{color:var(--link);text-decoration:underline}
code{overflow-wrap:anywhere}
"""


# The listing's policy without its script and images: nothing loads, the one
# inline style is allowed by its hash (CSP Level 3 §8.4), no base, no form,
# no framing.
ERROR_CSP: Final = (
    f"default-src 'none'; style-src {sha256_source(_CSS)}; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
).encode("ascii")

_HTML_TYPE: Final = b"text/html; charset=utf-8"
_PLAIN_TYPE: Final = b"text/plain; charset=utf-8"

_TEXT_MEMO: dict[int, bytes] = {}
_HTML_MEMO: dict[int, bytes] = {}
_MEMO_MAX: Final = 1000  # statuses are 100-999: the memos stay bounded


def text_body(status: int) -> bytes:
    """The built-in plain-text body: ``"404 Not Found\\n"``."""
    body = _TEXT_MEMO.get(status)
    if body is None:
        body = b"%d %s\n" % (status, reason_phrase(status))
        if len(_TEXT_MEMO) < _MEMO_MAX:
            _TEXT_MEMO[status] = body
    return body


def _sentence(status: int) -> str:
    got = _SENTENCES.get(status)
    if got is not None:
        return got
    if status >= 500:
        return "The server could not answer this request."
    return "This request could not be answered."


def _path_text(segments: Sequence[str], slash: bool) -> str:
    return "/" + "/".join(shown_name(seg) for seg in segments) + ("/" if slash and segments else "")


def _url_path(segments: Sequence[str], slash: bool) -> str:
    path = "/" + "/".join(quote_segment(seg) for seg in segments)
    return path + "/" if slash and segments else path


def error_html(
    status: int,
    problem: Problem | None = None,
    segments: Sequence[str] | None = None,
    slash: bool = False,
) -> bytes:
    """The built-in HTML page for ``status``: its sentence, the problem's
    detail, the requested path (``segments``, decoded) and a link to its
    parent.  Without a problem or a path it is constant per status (and
    memoised)."""
    plain = problem is None and segments is None
    if plain:
        page = _HTML_MEMO.get(status)
        if page is not None:
            return page
    esc = html.escape
    title = f"{status} {reason_phrase(status).decode('ascii')}"
    detail = f"<p>{esc(problem.detail)}</p>\n" if problem is not None else ""
    where = ""
    footer = '<a href="/">Home</a>'
    if segments:
        parent = _url_path(segments[:-1], True)
        where = f"<p>Requested: <code>{esc(_path_text(segments, slash))}</code></p>\n"
        footer = (
            f'<a href="{parent}">Up to <code>{esc(_path_text(segments[:-1], True))}</code></a>'
            f" \u00b7 {footer}"
        )
    text = (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="color-scheme" content="light dark">\n'
        f"<title>{title}</title>\n"
        f"<style>{_CSS}</style></head>\n"
        f"<body>\n<main>\n<h1>{title}</h1>\n"
        f"<p>{_sentence(status)}</p>\n{detail}{where}</main>\n"
        f"<footer>{footer}</footer>\n"
        "</body></html>\n"
    )
    page = text.encode("utf-8", "replace")
    if plain and len(_HTML_MEMO) < _MEMO_MAX:
        _HTML_MEMO[status] = page
    return page


def problem_json(
    status: int,
    problem: Problem | None = None,
    segments: Sequence[str] | None = None,
    slash: bool = False,
) -> bytes:
    """The RFC 9457 problem document (§3.1 members; the problem's own as
    extension members, §3.2), ASCII JSON whatever the names in it."""
    doc: dict[str, str | int] = {
        "type": "about:blank",  # §4.2.1: the status says it all; title is its phrase
        "title": reason_phrase(status).decode("ascii"),
        "status": status,
    }
    if problem is not None:
        doc["detail"] = json_text(problem.detail)
        for key, value in problem.members:
            if key not in doc:
                doc[key] = json_text(value) if isinstance(value, str) else value
    if segments is not None:
        doc["instance"] = _url_path(segments, slash)
    return json.dumps(doc, ensure_ascii=True).encode("ascii") + b"\n"


def _is_builtin(plan: Plan) -> bool:
    """``plan`` still carries error_plan's own text body (not a site page)."""
    if plan.status < 400 or len(plan.body) != 1:
        return False
    if plan.body[0] != error_text(plan.status, plan.problem):
        return False
    return (b"content-type", _PLAIN_TYPE) in plan.headers


def _with_vary_accept(
    headers: tuple[tuple[bytes, bytes], ...],
) -> list[tuple[bytes, bytes]]:
    """``headers`` with Accept added to Vary (merged into one that exists)."""
    out: list[tuple[bytes, bytes]] = []
    merged = False
    for name, value in headers:
        if name == b"vary" and not merged:
            tokens = [t.strip().lower() for t in value.split(b",")]
            if b"accept" not in tokens and b"*" not in tokens:
                value = value + b", Accept"
            merged = True
        out.append((name, value))
    if not merged:
        out.append((b"vary", b"Accept"))
    return out


def negotiated_error(
    plan: Plan,
    accept: str | None,
    segments: Sequence[str] | None = None,
    slash: bool = False,
) -> Plan:
    """``plan`` as the client's ``Accept`` prefers it: a problem document
    (:func:`problem_json`), the HTML page (:func:`error_html`, with
    :data:`ERROR_CSP`), or the plain text; each with ``Vary: Accept``.
    ``segments`` (decoded) and ``slash``: the requested path, shown on the
    page and as the problem's ``instance`` (None: not known).  Any plan
    that is not a built-in error is returned unchanged (the same object).
    HEAD gets the same fields (the plan's ``send_body`` is kept)."""
    if not _is_builtin(plan):
        return plan
    if prefers_problem(accept):
        body = problem_json(plan.status, plan.problem, segments, slash)
        ctype = b"application/problem+json"
    elif prefers_html(accept):
        body = error_html(plan.status, plan.problem, segments, slash)
        ctype = _HTML_TYPE
    else:
        return replace(plan, headers=tuple(_with_vary_accept(plan.headers)), shared=False)
    hs: list[tuple[bytes, bytes]] = []
    for name, value in _with_vary_accept(plan.headers):
        if name == b"content-type":
            hs.append((name, ctype))
        elif name == b"content-length":
            hs.append((name, b"%d" % len(body)))
        else:
            hs.append((name, value))
    if ctype is _HTML_TYPE:
        hs.append((b"content-security-policy", ERROR_CSP))
    return replace(plan, headers=tuple(hs), body=(body,), shared=False)


def error_for(plan: Plan, req: RequestFacts | None) -> Plan:
    """:func:`negotiated_error` for ``req``'s Accept and path (no request:
    the plain text)."""
    if req is None:
        return negotiated_error(plan, None)
    target = req.target
    return negotiated_error(plan, req.accept, target.segments, target.slash)
