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

from ..errors import HTTPError
from ..http.core import Plan, RequestFacts, common_fields
from ..http.disposition import content_disposition
from ..http.negotiate import parse_query

__all__ = [
    "FORMATS",
    "QUERY_KEY",
    "Bounds",
    "Member",
    "archive_format",
    "archive_name",
    "archive_plan",
    "check_bounds",
]

QUERY_KEY: Final = "archive"

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
