"""Active content under writable paths (pure; issue 41 item 9).

Anyone who may write under the root (``--upload``, ``--webdav``) could
otherwise publish a page that runs script in the site's origin: an HTML
or SVG file served inline from the same origin reads every page the
victim's browser may read there (``[[auth]]`` pages with its cached
credentials included) and writes as the victim.  So a file of an
*active* type (:func:`is_active`) under a writable path is served with
one of three treatments (``--upload-active``, or ``active`` per
``[[writable]]`` table):

* ``sandbox`` (the default): ``Content-Security-Policy: sandbox`` (CSP
  Level 2 §7.14 / HTML's iframe sandboxing flags: the document gets an
  opaque origin, no script, no form submission, no plugins, no popups,
  no top-level navigation).  The page still displays.
* ``attachment``: ``Content-Disposition: attachment`` (RFC 6266): the
  browser downloads it instead of rendering it.
* ``inline``: served as any other file (for a trusted set of writers).

A file is under a writable path when writes are on and either there are
no ``[[writable]]`` tables (the whole root is writable) or a table that
allows ``"put"`` covers it; then the first such table's ``active``
applies, else ``--upload-active``.  The tables are compared without
regard to case, so that a case-insensitive root (where ``/UP/x.html`` is
``/up/x.html``) never serves an uploaded page inline; on a case-sensitive
root that can only apply the treatment to more files, never fewer.

Read-only servers pay nothing: :func:`active_fields` is asked only with
writes on, by :func:`serverio.http.select.file_headers`, whose answer the
warm-file cache memoises per entry.
"""

from __future__ import annotations

from typing import Final

from ..config import Config
from .disposition import content_disposition

__all__ = ["ACTIVE_TYPES", "CSP_SANDBOX", "active_fields", "active_mode", "is_active"]

# The media types a browser runs as a document with script (or as script):
# HTML, XHTML, SVG, XML (any +xml type too: an XML document may pull in
# XSLT that produces HTML), XSLT, and JavaScript (shown as text when
# opened, but a worker runs it; a CSP sent with a worker script governs
# the worker).  PDF is not listed: browsers render it in a viewer whose
# script, if any, never runs in the page's origin.
ACTIVE_TYPES: Final = frozenset(
    (
        "text/html",
        "application/xhtml+xml",
        "image/svg+xml",
        "text/xml",
        "application/xml",
        "text/xsl",
        "application/xslt+xml",
        "text/javascript",
        "application/javascript",
        "application/ecmascript",
        "text/ecmascript",
    )
)

CSP_SANDBOX: Final = (b"content-security-policy", b"sandbox")


def is_active(content_type: str) -> bool:
    """Is ``content_type`` (parameters allowed) an active type?"""
    media = content_type.split(";", 1)[0].strip().lower()
    return media in ACTIVE_TYPES or media.endswith("+xml")


def active_mode(cfg: Config, relpath: str) -> str:
    """The treatment of an active file at ``relpath`` (the served file's
    path below the root, no leading slash): ``"sandbox"``,
    ``"attachment"`` or ``"inline"`` (not under a writable path, writes
    off, or so configured)."""
    uploads = cfg.uploads
    if not uploads.upload:
        return "inline"
    tables = cfg.site.writable
    if not tables:
        return uploads.upload_active  # the whole root is writable
    path = ("/" + relpath).casefold()
    for pattern, allow, *mode in tables:
        if "put" not in allow:
            continue
        prefix = pattern[:-3].casefold()  # "PREFIX/**" (compile_writable checked)
        if not prefix or path.startswith(prefix + "/"):
            return (mode[0] if mode else "") or uploads.upload_active
    return "inline"


def active_fields(
    cfg: Config, relpath: str, content_type: str, disposed: bool
) -> tuple[tuple[bytes, bytes], ...]:
    """The fields an answer with the file at ``relpath`` gets for its
    active content (none for another type, or ``inline``).  ``disposed``:
    the answer already has a ``Content-Disposition`` (``?download``)."""
    if not is_active(content_type):
        return ()
    mode = active_mode(cfg, relpath)
    if mode == "sandbox":
        return (CSP_SANDBOX,)
    if mode == "attachment" and not disposed:
        return ((b"content-disposition", content_disposition(relpath.rsplit("/", 1)[-1])),)
    return ()
