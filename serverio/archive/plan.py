"""The pure decisions of a folder archive: which format, its name, its plan.

No I/O here (like ``http/``): the request's query says whether an archive
is asked for and in which format; the directory's segments give its
download name; the plan carries the fields of the response, whose body is
produced while it is sent (:class:`serverio.archive.stream.ArchiveStream`),
so it has no Content-Length (HTTP/1.1 frames it with the chunked coding).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final
from urllib.parse import parse_qsl

from ..errors import HTTPError, Problem
from ..http.core import Plan, RequestFacts, common_fields
from ..http.disposition import content_disposition
from ..http.negotiate import parse_query

__all__ = [
    "FORMATS",
    "NAME_KEY",
    "QUERY_KEY",
    "SELECT_MAX",
    "Bounds",
    "Member",
    "archive_format",
    "archive_name",
    "archive_plan",
    "check_bounds",
    "missing_name",
    "selected_names",
]

QUERY_KEY: Final = "archive"

# A selection (the listing page's "Download selected"): ?archive=zip&name=A
# &name=B, each a name of the folder's listing; at most SELECT_MAX of them
# (docs/reference/selection.md).  The request target's own bound (8 KiB)
# usually ends a longer selection first: the page then asks for the whole
# folder when every row is selected.
NAME_KEY: Final = "name"
SELECT_MAX: Final = 1000
# A separator or NUL can never be part of one name in a folder (and "\\"
# is one on Windows): such a "name" asks for something below or above.
_NOT_IN_A_NAME: Final = ("/", "\\", "\0")

# format -> (media type, file name suffix).  application/gzip: RFC 6713.
FORMATS: Final[dict[str, tuple[bytes, str]]] = {
    "zip": (b"application/zip", ".zip"),
    "tar.gz": (b"application/gzip", ".tar.gz"),
}


@dataclass(frozen=True, slots=True)
class Member:
    """One archive member: its path below the archive's top folder, and
    what the walk found (a directory has size 0)."""

    segments: tuple[str, ...]
    is_dir: bool
    size: int
    mtime: float
    # With auth rules, where the member leads (Entry.real, whose rules
    # passed; False: not looked for), checked again when it is opened.
    led: str | bool | None = False


@dataclass(frozen=True, slots=True)
class Bounds:
    """``--archive-max-entries`` and ``--archive-max-bytes``."""

    entries: int
    size: int


def archive_format(query: str | None) -> str | None:
    """The format asked for by ``?archive=``; None when the query does not
    ask for an archive.  A value that is not a format is a 400."""
    params = parse_query(query)
    if QUERY_KEY not in params:
        return None
    value = params[QUERY_KEY]
    if value not in FORMATS:
        raise HTTPError(400, "unknown archive format")
    return value


def _refused(name: str, rule: str) -> HTTPError:
    shown = name if len(name) <= 80 else name[:80] + "\u2026"
    return HTTPError(
        400,
        f"selection: {rule}",
        problem=Problem(f"Not a name in this folder ({rule}): {shown!r}", (("name", shown),)),
    )


def selected_names(query: str | None) -> frozenset[str] | None:
    """The names an archive request selects (``name``, repeated), or None
    when it selects none (the whole folder).

    Each value is percent-decoded once (UTF-8; a byte that is not UTF-8
    stays the name's byte, ``surrogateescape``, as listed names are), and
    must be one name of this folder: not empty, not ``.`` or ``..``, without
    ``/``, ``\\`` or NUL (an encoded ``%2F`` decodes to ``/``: refused too).
    A 400 names the rule; past :data:`SELECT_MAX` names, a 400 names the
    limit.  Whether each name is in the folder's listing (for this client:
    hidden, ``--hide`` and the access hook applied) is the walk's question
    (:func:`serverio.archive.stream.walk`); repeats count once."""
    if not query or NAME_KEY not in query:
        return None
    values = [
        v
        for k, v in parse_qsl(query, keep_blank_values=True, errors="surrogateescape")
        if k == NAME_KEY
    ]
    if not values:
        return None
    if len(values) > SELECT_MAX:
        raise HTTPError(
            400,
            "selection over its limit",
            problem=Problem(
                f"At most {SELECT_MAX} names in one selection; {len(values)} were sent.",
                (("limit", SELECT_MAX), ("names", len(values))),
            ),
        )
    for name in values:
        if name in ("", ".", ".."):
            raise _refused(name, "empty, . or ..")
        if any(c in name for c in _NOT_IN_A_NAME):
            raise _refused(name, "a separator or NUL")
    return frozenset(values)


def missing_name(name: str) -> HTTPError:
    """The 404 of a selected name the folder's listing does not show this
    client (absent, hidden, ``--hide``, a symlink out of the root, no
    right): one answer for all, so it tells no more than the listing."""
    shown = name if len(name) <= 80 else name[:80] + "\u2026"
    return HTTPError(
        404,
        "selection: a name not in the listing",
        problem=Problem(f"Not in this folder's listing: {shown!r}", (("name", shown),)),
    )


def archive_name(segments: tuple[str, ...], root_name: str) -> str:
    """The archive's top folder (and download name without its suffix): the
    directory's own name, the root's folder name for the root."""
    name = segments[-1] if segments else root_name
    return name or "files"


def check_bounds(count: int, size: int, bounds: Bounds) -> None:
    """413 when the walk found more than the bounds allow (before the
    response starts: the client gets a status, not a cut archive)."""
    if count > bounds.entries or size > bounds.size:
        raise HTTPError(413, "archive over --archive-max-entries or --archive-max-bytes")


def archive_plan(req: RequestFacts, now: float, fmt: str, name: str, *, private: bool) -> Plan:
    """The 200 of an archive: media type, ``attachment`` with the name
    (RFC 6266, ``filename*`` for a name that is not ASCII), no validators
    (generated per request, no ETag, no ranges: ``Accept-Ranges: none``),
    ``Cache-Control: private`` when access rules may have left members out
    for this client.  The body is produced while sent (empty here)."""
    ctype, suffix = FORMATS[fmt]
    headers = common_fields(now)
    headers.append((b"content-type", ctype))
    headers.append((b"content-disposition", content_disposition(name + suffix)))
    headers.append((b"accept-ranges", b"none"))
    if private:
        headers.append((b"cache-control", b"private"))
    return Plan(200, tuple(headers), (), send_body=req.method != b"HEAD")
