"""The pure decisions of a write: preconditions, statuses and answers.

No I/O: the facts come from :mod:`serverio.fs.writer` (through the upload
service), the decisions reuse :mod:`serverio.http.core`'s validators
(RFC 9110 §13.2.2, the code that decides a GET's 304 and 412).
"""

from __future__ import annotations

import errno
import json
from collections.abc import Sequence
from typing import Final
from urllib.parse import urlsplit

from ..errors import Problem
from ..http.core import (
    FileFacts,
    Plan,
    RequestFacts,
    common_fields,
    evaluate_preconditions,
    sent_mtime,
)
from ..http.extra import HOST
from ..http.negotiate import prefers_json
from ..http.target import quote_segment
from .fields import ORIGIN, SEC_FETCH_SITE

__all__ = [
    "REFUSAL_STATUS",
    "created_plan",
    "cross_site",
    "deleted_plan",
    "duplicate_problem",
    "errno_status",
    "form_answer",
    "has_preconditions",
    "is_create_only",
    "name_problem",
    "precondition_status",
    "refusal_problem",
    "replaced_plan",
    "too_large_problem",
]

# The statuses of serverio.fs.writer.Refusal, by its value (fs gives reasons,
# this layer the statuses; docs/features.md "Uploads").
REFUSAL_STATUS: Final[dict[str, int]] = {
    "unsafe name": 403,  # a dotfile (without --hidden), a reserved name, refused containment
    "parent directory missing": 409,  # RFC 4918 §9.7.1: no intermediate collection made
    "target is a directory": 409,  # PUT onto, or DELETE of, a directory
    "target is not a regular file": 409,  # a symlink, FIFO or device is never replaced
    "target exists": 412,  # If-None-Match: * and a file appeared meanwhile
    "target changed since its preconditions were decided": 412,
    "target does not exist": 404,
    "not enough free space": 507,  # RFC 4918 §11.5
}


def errno_status(code: int | None) -> int:
    """The status of a write that failed with ``code``: 507 when the disk
    or quota is full, 403 when the filesystem refuses, else 500."""
    if code in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        return 507
    if code in (errno.EACCES, errno.EPERM, errno.EROFS):
        return 403
    return 500


def is_create_only(req: RequestFacts) -> bool:
    """``If-None-Match: *``: create, never overwrite (RFC 9110 §13.1.2)."""
    v = req.if_none_match
    return v is not None and v.strip() == "*"


def precondition_status(req: RequestFacts, current: FileFacts | None, now: float) -> int | None:
    """412 when the request's preconditions fail on the target as it is
    (``current``: its facts, None when there is no file), else None.

    RFC 9110 §13.2.2 for a method other than GET/HEAD: a failed
    If-Match, If-Unmodified-Since or If-None-Match is 412.  Without a
    current representation, ``If-Match`` never holds (§13.1.1: not even
    ``*``), If-Unmodified-Since is ignored (no modification date,
    §13.1.4) and ``If-None-Match`` always holds.
    """
    if current is None:
        return 412 if req.if_match is not None else None
    mtime = sent_mtime(current.mtime, now)
    return evaluate_preconditions(req, current.etag, mtime).status


def has_preconditions(req: RequestFacts) -> bool:
    """Does the request carry a precondition a write must hold to?"""
    return (
        req.if_match is not None
        or req.if_none_match is not None
        or req.if_unmodified_since is not None
    )


def created_plan(facts: FileFacts, location: str, now: float, head: bool = False) -> Plan:
    """201 Created (RFC 9110 §15.3.2, §9.3.4) with the new file's ETag and
    ``Location`` (its absolute path)."""
    body = b"201 Created\n"
    etag = facts.etag
    hs = common_fields(now)
    if etag:
        hs.append((b"etag", etag.encode("ascii")))
    hs += [
        (b"location", location.encode("ascii")),
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", b"%d" % len(body)),
    ]
    return Plan(201, tuple(hs), (body,), send_body=not head)


def replaced_plan(facts: FileFacts, now: float) -> Plan:
    """204 No Content with the new ETag (a replaced file, §9.3.4)."""
    etag = facts.etag
    hs = common_fields(now)
    if etag:
        hs.append((b"etag", etag.encode("ascii")))
    return Plan(204, tuple(hs), (), send_body=False)


def deleted_plan(now: float) -> Plan:
    """204 No Content (a deleted file, RFC 9110 §9.3.5)."""
    return Plan(204, tuple(common_fields(now)), (), send_body=False)


# Sec-Fetch-Site values a form post may carry (Fetch Metadata): "none" is
# a user's own navigation; "same-site" (a sibling subdomain) is refused.
_SAME_ORIGIN_FETCH: Final = frozenset(("same-origin", "none"))
_DEFAULT_PORT: Final = {"http": 80, "https": 443}


def _host_port(authority: str, scheme: str) -> tuple[str, int] | None:
    try:
        parts = urlsplit("//" + authority)
        port = parts.port
    except ValueError:
        return None
    host = (parts.hostname or "").lower()
    return host, _DEFAULT_PORT.get(scheme, 0) if port is None else port


def cross_site(req: RequestFacts, allowed: frozenset[str] = frozenset()) -> bool:
    """Is this write request (a form POST) from another site?  The CSRF
    rule of the upload form (docs/features.md "Uploads").

    With an ``Origin`` (RFC 6454 §7; every browser sends one on a POST),
    it must name this server: the request's scheme (TLS or not) and its
    ``Host`` / ``:authority``, default ports folded; ``Origin: null`` (a
    sandboxed or file: page) is cross-site.  Without one, a
    ``Sec-Fetch-Site`` other than ``same-origin`` or ``none`` is
    cross-site.  Without either (curl, scripts: no ambient browser
    credentials) the request is not judged cross-site.  ``allowed``: other
    origins that may write (``--cors-origin`` with ``--cors-writes``),
    compared exactly as the CORS rules compare them.
    """
    origin = ORIGIN.of(req)
    host = HOST.of(req)
    if origin is not None:
        if origin in allowed:
            return False
        parts = urlsplit(origin.strip())
        scheme = parts.scheme.lower()
        want = "https" if req.tls else "http"
        if scheme != want or parts.path or parts.query or host is None:
            return True
        theirs = _host_port(parts.netloc, scheme)
        ours = _host_port(host, want)
        return theirs is None or theirs != ours
    site = SEC_FETCH_SITE.of(req)
    return site is not None and site.strip().lower() not in _SAME_ORIGIN_FETCH


def form_answer(
    req: RequestFacts, files: Sequence[tuple[str, int]], directories: Sequence[str], now: float
) -> Plan:
    """The answer to a completed form POST to the directory ``req`` names.

    A browser (no JSON asked for) gets 303 See Other back to the listing
    (RFC 9110 §15.4.4: the reload of the page it lands on is a GET, never
    a repost).  A client whose ``Accept`` prefers ``application/json``
    (the page's drag-and-drop script, scripts) gets 201 Created
    (§15.3.2) with what was made: ``{"files": [{"name", "href", "size"}],
    "directories": [{"name", "href"}]}``, hrefs percent-encoded absolute
    paths, and ``Location`` when exactly one file was made.
    """
    base = req.target.url_path(slash=True)
    if not prefers_json(req.accept):
        body = b"303 See Other\n"
        hs = common_fields(now)
        hs += [
            (b"location", base.encode("ascii")),
            (b"cache-control", b"no-store"),
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", b"%d" % len(body)),
        ]
        return Plan(303, tuple(hs), (body,))
    summary = {
        "files": [{"name": n, "href": base + quote_segment(n), "size": size} for n, size in files],
        "directories": [{"name": n, "href": base + quote_segment(n) + "/"} for n in directories],
    }
    data = json.dumps(summary, ensure_ascii=True).encode("ascii") + b"\n"
    hs = common_fields(now)
    if len(files) == 1:
        hs.append((b"location", (base + quote_segment(files[0][0])).encode("ascii")))
    hs += [
        (b"cache-control", b"no-store"),
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(data)),
    ]
    return Plan(201, tuple(hs), (data,))


# ------------------------------------------------------------- problems
#
# What a refused write tells its client (serverio.errors.Problem): the
# name, the limit, the rule or the option that would help; rendered as a
# page, a problem document or the second line of the text by
# serverio.http.errorpage.


def duplicate_problem(name: str) -> Problem:
    """409: a form upload's file whose name is taken (``--on-duplicate error``)."""
    return Problem(
        f"A file named \u201c{name}\u201d already exists here. The server keeps it "
        "(--on-duplicate error); --on-duplicate rename keeps both, overwrite replaces it.",
        (("name", name), ("option", "--on-duplicate")),
    )


def too_large_problem(limit: int) -> Problem:
    """413: the upload is larger than ``--max-upload-size``."""
    return Problem(
        f"The upload is larger than this server accepts: at most {limit} bytes "
        "(--max-upload-size).",
        (("limit", limit), ("option", "--max-upload-size")),
    )


def name_problem(rule: str, name: str = "") -> Problem:
    """400: a name the upload rules refuse; ``rule`` says which
    (:class:`serverio.fs.names.NameProblem`'s text)."""
    shown = f" \u201c{name}\u201d" if name else ""
    return Problem(f"The name{shown} is refused: {rule}.", (("rule", rule),))


_REFUSAL_DETAIL: Final[dict[str, tuple[str, tuple[tuple[str, str | int], ...]]]] = {
    "parent directory missing": (
        "The folder this would be written in does not exist. Create it first "
        "(MKCOL, or New folder on the page), or start the server with --upload-mkdirs.",
        (("option", "--upload-mkdirs"),),
    ),
    "target is a directory": ("A folder of that name is there: a file cannot replace it.", ()),
    "target is not a regular file": (
        "Something other than a regular file (a link, a device) has that name: it is never "
        "replaced.",
        (),
    ),
    "unsafe name": ("The name is refused: a hidden or reserved name.", (("rule", "unsafe name"),)),
    "not enough free space": (
        "The disk would be left with less free space than --min-free-space.",
        (("option", "--min-free-space"),),
    ),
}


def refusal_problem(refusal: str) -> Problem | None:
    """The problem for a :class:`serverio.fs.writer.Refusal` (by value), or
    None where the status says it all (412, 404)."""
    got = _REFUSAL_DETAIL.get(refusal)
    return None if got is None else Problem(got[0], got[1])
