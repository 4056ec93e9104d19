"""Directory listings: sort order and HTML/JSON rendering (pure).

Entries in, bytes out.  The scan that produces the entries (with the
containment and hidden-file policy applied) is an edge: it runs in the
``work`` pool (:mod:`serverio.pipeline.content`).  Rendering is bounded by the
number of entries (``--listing-max-entries``) and the length of a name
(255 bytes on every common filesystem).

Every name is text chosen by whoever can create files: it is HTML-escaped
where it is shown and percent-encoded where it is a link, so a file called
``<script>x.txt`` renders as that text and links to ``./%3Cscript%3Ex.txt``.
Every link is a relative path: entries start with ``./`` and encode every
byte outside RFC 3986 unreserved (:func:`serverio.http.target.quote_segment`),
so ``javascript:alert(1)`` links to ``./javascript%3Aalert%281%29``, never
to a script URL; breadcrumbs are ``../`` chains, sort links are query-only.
Bidi and control characters in a shown name are shown as ``<U+202E>``
so a name cannot disguise itself (``exe.txt`` spelled backwards).  The
page's one script is a constant (the progressive filter, allowed by its
hash), no name ever reaches it, and it is sent with :data:`LISTING_CSP`.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

from .readme import Readme, render_readme
from .target import quote_segment
from .uploader import UPLOADER_SCRIPT

__all__ = [
    "FILTER_MAX",
    "LISTING_CSP",
    "LISTING_UPLOAD_CSP",
    "SORT_KEYS",
    "Entry",
    "Listing",
    "ListingQuery",
    "entries_digest",
    "filter_entries",
    "json_text",
    "listing_etag",
    "parse_listing_query",
    "render_html",
    "render_json",
    "render_listing",
    "shown_name",
    "sort_entries",
]

SORT_KEYS: Final = ("name", "size", "mtime")
_ORDERS: Final = ("asc", "desc")


@dataclass(frozen=True, slots=True)
class Entry:
    """One listed name.  ``size`` is -1 for directories; ``mtime`` is None
    when the file's time is outside what an HTTP-date can express
    (:func:`serverio.http.dates.http_seconds`)."""

    name: str
    is_dir: bool
    size: int
    mtime: int | None  # seconds since the epoch
    # Where the entry leads when a symlink inside the root is on its way
    # (the entry itself, or the listed directory): its path below the root
    # ("a/b"), looked for only when the site has auth rules, whose rules
    # then apply to it too (serverio.site.service.Site.visible_entries).
    real: str | None = None


@dataclass(frozen=True, slots=True)
class ListingQuery:
    sort: str = "name"
    order: str = "asc"
    json: bool = False
    filter: str = ""  # ?filter=: shown names containing it, case-insensitively


# The longest ?filter= kept (characters; the rest is cut): a bound on the
# listing cache's keys and on the work of matching, as the page's
# <input maxlength> is for a browser.
FILTER_MAX: Final = 256


def parse_listing_query(params: Mapping[str, str], *, accept_json: bool) -> ListingQuery:
    """``?sort=name|size|mtime&order=asc|desc&format=json|html&filter=TEXT``.

    Unknown values are ignored (the default applies), as for any other
    query string a static server does not understand.  ``format`` wins over
    the Accept header because it is the more explicit of the two.
    ``filter`` keeps its printable characters, stripped of surrounding
    space, at most :data:`FILTER_MAX` of them.
    """
    sort = params.get("sort", "name")
    order = params.get("order", "asc")
    fmt = params.get("format")
    needle = "".join(c for c in params.get("filter", "")[: FILTER_MAX * 2] if c.isprintable())
    return ListingQuery(
        sort=sort if sort in SORT_KEYS else "name",
        order=order if order in _ORDERS else "asc",
        json=fmt == "json" if fmt in ("json", "html") else accept_json,
        filter=needle.strip()[:FILTER_MAX],
    )


def filter_entries(entries: Sequence[Entry], needle: str) -> list[Entry]:
    """The entries whose shown name (:func:`shown_name`, what a reader sees)
    contains ``needle``, ignoring case (``str.lower`` on both sides: the
    same rule as the page's script, which uses ``toLowerCase``).  An empty
    needle keeps every entry."""
    if not needle:
        return list(entries)
    low = needle.lower()
    return [e for e in entries if low in shown_name(e.name).lower()]


def _name_key(e: Entry) -> tuple[str, str]:
    return (e.name.casefold(), e.name)


def _size_key(e: Entry) -> tuple[int, str, str]:
    return (e.size, e.name.casefold(), e.name)


def _mtime_key(e: Entry) -> tuple[bool, int, str, str]:
    # An unknown time sorts after every known one (before them, descending).
    return (e.mtime is None, e.mtime or 0, e.name.casefold(), e.name)


def sort_entries(entries: Sequence[Entry], query: ListingQuery) -> list[Entry]:
    """Directories first (whatever the order), then by the chosen key; the
    name breaks ties so the order is total and stable across requests.
    Directories have no size, so a size sort orders them by name."""
    reverse = query.order == "desc"
    key = {"size": _size_key, "mtime": _mtime_key}.get(query.sort, _name_key)
    dir_key = _name_key if query.sort == "size" else key
    dirs = sorted((e for e in entries if e.is_dir), key=dir_key, reverse=reverse)
    files = sorted((e for e in entries if not e.is_dir), key=key, reverse=reverse)
    return dirs + files


def human_size(n: int) -> str:
    """1023 B, 1.0 KiB, 12.3 MiB (binary units, one decimal)."""
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        value /= 1024
        if value < 1024 or unit == "PiB":
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")  # pragma: no cover


_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def _time_cell(mtime: int | None) -> str:
    if mtime is None:
        return '<td class="time" title="unknown">\u2014</td>'
    # Arithmetic, not fromtimestamp: no platform limit on the range of time_t.
    t = _EPOCH + timedelta(seconds=mtime)
    iso = f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}Z"
    return f'<td class="time"><time datetime="{iso}">{iso[:10]} {iso[11:16]}</time></td>'


# Shown as <U+XXXX>: C0/C1 controls, line/paragraph separators and the
# bidi formatting characters (Unicode UAX #9: embeddings, overrides,
# isolates, marks), which could make one name look like another.
_BIDI: Final = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _shown_char(ch: str) -> str:
    o = ord(ch)
    if 0xDC80 <= o <= 0xDCFF:  # an undecodable byte (surrogateescape)
        return f"<0x{o - 0xDC00:02X}>"
    if ch in _BIDI or o < 0x20 or 0x7F <= o < 0xA0 or o in (0x2028, 0x2029) or 0xD800 <= o < 0xE000:
        return f"<U+{o:04X}>"
    return ch


def shown_name(name: str) -> str:
    """``name`` as displayed: controls and bidi characters made visible.

    The link still carries the exact name; only the text a reader sees
    changes.  (Not HTML-escaped: the caller escapes.)
    """
    if name.isprintable():  # fast path: none of the characters below is printable
        return name
    return "".join(_shown_char(ch) for ch in name)


def json_text(name: str) -> str:
    """``name`` as JSON text: each byte that is not UTF-8 (a surrogate from
    ``surrogateescape``) becomes U+FFFD, so the document is valid Unicode
    for every parser (RFC 8259 §8.2: lone surrogates are not).  Lossy for
    such names, which is why every entry also has its exact ``href``."""
    if name.isprintable():  # fast path: surrogates are not printable
        return name
    return "".join("\ufffd" if 0xD800 <= ord(ch) < 0xE000 else ch for ch in name)


def _entry_href(e: Entry) -> str:
    # "./" first: even an encoded first segment never starts the reference.
    return "./" + quote_segment(e.name) + ("/" if e.is_dir else "")


def entries_digest(entries: Sequence[Entry], truncated: bool) -> bytes:
    """A digest of what a scan found, in scan order (pure).

    Two scans with the same digest render to the same bytes for the same
    path, query and limit, so the digest keys the shared rendered listing
    (:mod:`serverio.pipeline.content`).  It covers every field a listing
    shows: name (its exact bytes), type, size and time.  Names never
    contain NUL, so NUL-separated fields are unambiguous.
    """
    # surrogatepass: total for any str, and injective (valid UTF-8 never
    # holds an encoded surrogate, so no two names give the same bytes).
    fields = b"".join(
        b"%s\0%s%d %r\0"
        % (e.name.encode("utf-8", "surrogatepass"), b"d" if e.is_dir else b"f", e.size, e.mtime)
        for e in entries
    )
    return hashlib.blake2b(fields + (b"t" if truncated else b"f"), digest_size=16).digest()


def listing_etag(body: bytes) -> str:
    """A weak validator over the rendered bytes (RFC 9110 §8.8.3).

    Weak because a listing is generated, not stored: we promise "same
    listing", which is what a cache revalidating it needs, and we never
    serve byte ranges of it.  Its bytes depend on the sort order and
    format, so each of those has its own validator.
    """
    return 'W/"' + hashlib.blake2b(body, digest_size=12).hexdigest() + '"'


_CSS: Final = """\
:root{color-scheme:light dark;--fg:#1f2328;--bg:#fff;--mute:#59636e;--line:#d1d9e0;\
--link:#0969da;--row:#f6f8fa;--warn-bg:#fff8c5;--warn:#7d4e00}
@media (prefers-color-scheme:dark){:root{--fg:#e6edf3;--bg:#0d1117;--mute:#9198a1;\
--line:#3d444d;--link:#4493f8;--row:#151b23;--warn-bg:#3b2e00;--warn:#f2cc60}}
*{box-sizing:border-box}
body{margin:0 auto;max-width:60rem;padding:1.5rem 1rem;font:15px/1.5 system-ui,sans-serif;\
color:var(--fg);background:var(--bg)}
h1{font-size:1.25rem;font-weight:600;margin:0 0 1rem;word-break:break-all}
a{color:var(--link);text-decoration:none}a:hover{text-decoration:underline}
nav{margin:0 0 .75rem;color:var(--mute)}nav a,nav span{margin:0 .15rem}
table{width:100%;border-collapse:collapse}
th,td{padding:.35rem .6rem;text-align:left;border-bottom:1px solid var(--line)}
th{font-weight:600;color:var(--mute);white-space:nowrap}
tbody tr:hover{background:var(--row)}
th.name,td.name{width:100%}td.name{word-break:break-all}
td.size,td.time,th.size{text-align:right;white-space:nowrap;color:var(--mute);\
font-variant-numeric:tabular-nums}
td.time,th.time{text-align:right}
.dir a{font-weight:600}
.notice{padding:.5rem .75rem;border-radius:6px;background:var(--warn-bg);color:var(--warn)}
footer{margin-top:1rem;color:var(--mute);font-size:.85rem}
form.filter{display:flex;gap:.5rem;margin:0 0 .75rem}
form.filter input,form.filter button{font:inherit;padding:.25rem .6rem;color:var(--fg);\
border:1px solid var(--line);border-radius:6px}
form.filter input{flex:1;max-width:22rem;background:var(--bg)}
form.filter button{background:var(--row)}
.upload{display:flex;flex-wrap:wrap;gap:.5rem 1.5rem;margin:0 0 .75rem;padding:.5rem .75rem;\
border:1px dashed var(--line);border-radius:6px}
.upload form{display:flex;gap:.5rem;align-items:center;margin:0}
.upload input,.upload button{font:inherit;padding:.2rem .5rem;color:var(--fg);\
border:1px solid var(--line);border-radius:6px;background:var(--bg)}
.upload button{background:var(--row)}.upload .hint{color:var(--mute);align-self:center}
body.dropping .upload{border-color:var(--link);background:var(--row)}
.readme{margin-top:1.5rem;padding:0 1.25rem 1rem;border:1px solid var(--line);border-radius:6px;\
overflow-wrap:anywhere}
.readme h2{font-size:1rem;margin:0 -1.25rem 1rem;padding:.5rem 1.25rem;\
border-bottom:1px solid var(--line)}
.readme pre{white-space:pre-wrap;font:13px/1.45 ui-monospace,monospace}
.readme code{font:13px ui-monospace,monospace;background:var(--row);padding:.1rem .3rem;\
border-radius:4px}
.readme pre code{padding:0;background:none}.readme img{max-width:100%}
.readme table{width:auto}.readme blockquote{margin:0;padding-left:1rem;color:var(--mute);\
border-left:3px solid var(--line)}
"""

_STYLE: Final = "\n" + _CSS  # the exact text of the page's <style> element

# The progressive filter: as the reader types in the filter box, rows whose
# data-name (the shown name, lower-cased) lacks the text are hidden.  The
# page works without it: the box is a GET form the server filters
# (?filter=, :func:`filter_entries`).  A constant, so one hash allows it.
_SCRIPT: Final = """
(()=>{const f=document.querySelector("form.filter input[name=filter]");if(!f)return;
const rows=[...document.querySelectorAll("tbody tr[data-name]")];
const run=()=>{const q=f.value.trim().toLowerCase();
for(const r of rows)r.hidden=q!==""&&!r.dataset.name.includes(q);};
f.addEventListener("input",run);})();
"""


# The upload form's script (``--upload``, a writable directory): the
# resumable uploader (serverio.http.uploader; the page works without it).
_UPLOAD_SCRIPT: Final = UPLOADER_SCRIPT

# The upload form and the new-folder form: multipart POSTs to this page's
# directory ("./"), answered 303 back here (serverio.upload.form).  The
# field names are the form handler's (MKDIR_FIELD "mkdir"; files "file").
_UPLOAD_FORMS: Final = (
    '<section class="upload" aria-label="Upload">'
    '<form class="files" method="post" action="./" enctype="multipart/form-data">'
    '<input type="file" name="file" multiple required aria-label="Files to upload">'
    '<button type="submit">Upload</button></form>'
    '<form class="mkdir" method="post" action="./" enctype="multipart/form-data">'
    '<input type="text" name="mkdir" required maxlength="255" placeholder="Folder name" '
    'aria-label="New folder name" autocomplete="off">'
    '<button type="submit">New folder</button></form>'
    '<span class="hint">or drop files on the page</span></section>\n'
)


def _sha256_source(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return "'sha256-" + base64.b64encode(digest).decode("ascii") + "'"


# The page loads nothing and allows only its own inline style and script,
# each by hash (CSP Level 3 §8.4): a name that slipped past escaping still
# could not execute, rebase links or frame the page.  Forms may submit only
# to this origin (the filter box is a GET form to the page itself), images
# load only from it (a README's relative images; serverio.http.readme).
LISTING_CSP: Final = (
    f"default-src 'none'; style-src {_sha256_source(_STYLE)}; "
    f"script-src {_sha256_source(_SCRIPT)}; img-src 'self'; base-uri 'none'; "
    "form-action 'self'; "
    "frame-ancestors 'none'"
).encode("ascii")
# The same for a listing with the upload form: its uploader script too,
# which may fetch from this origin only (connect-src; form-action 'self'
# already lets the forms post to it).
LISTING_UPLOAD_CSP: Final = LISTING_CSP.replace(
    b"script-src " + _sha256_source(_SCRIPT).encode("ascii"),
    b"script-src "
    + _sha256_source(_SCRIPT).encode("ascii")
    + b" "
    + _sha256_source(_UPLOAD_SCRIPT).encode("ascii"),
).replace(b"; base-uri", b"; connect-src 'self'; base-uri")


def _query_tail(query: ListingQuery) -> str:
    """``&filter=...`` for a link that keeps the page's filter (or nothing)."""
    return f"&filter={quote_segment(query.filter)}" if query.filter else ""


def _header_cells(query: ListingQuery) -> str:
    esc = html.escape
    heads = []
    for key, label, cls in (
        ("name", "Name", "name"),
        ("size", "Size", "size"),
        ("mtime", "Modified", "time"),
    ):
        order = "desc" if query.sort == key and query.order == "asc" else "asc"
        arrow = ""
        if query.sort == key:
            arrow = " \u2191" if query.order == "asc" else " \u2193"
        href = esc(f"?sort={key}&order={order}{_query_tail(query)}")
        heads.append(f'<th class="{cls}"><a href="{href}">{label}</a>{arrow}</th>')
    return "".join(heads)


def _rows(segments: Sequence[str], entries: Sequence[Entry]) -> list[str]:
    esc = html.escape
    rows = []
    if segments:
        rows.append(
            '<tr class="dir"><td class="name"><a href="../">../</a></td>'
            '<td class="size"></td><td class="time"></td></tr>'
        )
    for e in entries:
        link = _entry_href(e)
        name = shown_name(e.name)
        shown = esc(name) + ("/" if e.is_dir else "")
        size = "\u2014" if e.is_dir else human_size(e.size)
        size_title = "" if e.is_dir else f' title="{e.size} bytes"'
        rows.append(
            f'<tr class="{"dir" if e.is_dir else "file"}" data-name="{esc(name.lower())}">'
            f'<td class="name"><a href="{esc(link)}">{shown}</a></td>'
            f'<td class="size"{size_title}>{size}</td>'
            f"{_time_cell(e.mtime)}"
            "</tr>"
        )
    return rows


def _filter_form(query: ListingQuery) -> str:
    """The filter box: a GET form to this page, keeping the sort order."""
    esc = html.escape
    keep = "".join(
        f'<input type="hidden" name="{k}" value="{v}">'
        for k, v, default in (("sort", query.sort, "name"), ("order", query.order, "asc"))
        if v != default
    )
    return (
        '<form class="filter" role="search" method="get">'
        f'<input type="search" name="filter" value="{esc(query.filter)}" '
        f'maxlength="{FILTER_MAX}" placeholder="Filter names" aria-label="Filter names" '
        f'autocomplete="off">{keep}<button type="submit">Filter</button></form>\n'
    )


def render_html(
    segments: Sequence[str],
    entries: Sequence[Entry],
    query: ListingQuery,
    *,
    truncated: bool = False,
    limit: int = 0,
    scanned: int = -1,
    readme: str = "",
    archives: bool = False,
    upload: bool = False,
) -> bytes:
    """The HTML page for the directory at ``segments`` (decoded names).

    ``entries`` must already be filtered (:func:`filter_entries`) and
    sorted (:func:`sort_entries`); ``scanned`` is how many there were
    before the filter (-1: the same number).  ``readme`` is the README's
    section (:func:`serverio.http.readme.render_readme`), shown below the
    table.  ``archives`` (``--archives``): the footer offers the directory
    as a zip and a tar.gz (links only: the page's CSP allows no inline
    handler, and none is needed).  ``upload``: the directory is writable
    for this request (``--upload``, the access hook's ``Kind.WRITE``
    answer): the upload and new-folder forms and their drag-and-drop
    script (send it with :data:`LISTING_UPLOAD_CSP`).
    """
    esc = html.escape
    title = "/" + "".join(shown_name(s) + "/" for s in segments)
    # Breadcrumbs relative to this page: "../" per level up, "./" for itself.
    depth = len(segments)
    crumbs = [f'<a href="{"../" * depth or "./"}">/</a>']
    for i, seg in enumerate(segments):
        href = "../" * (depth - i - 1) or "./"
        crumbs.append(f'<a href="{href}">{esc(shown_name(seg))}</a><span>/</span>')
    rows = _rows(segments, entries)
    notice = ""
    if truncated:
        notice = (
            f'<p class="notice" role="status">Listing truncated: showing the first {limit} '
            "entries of a larger directory.</p>\n"
        )
    count = f"{len(entries)} {'entry' if len(entries) == 1 else 'entries'}"
    if query.filter:
        count = f"{len(entries)} of {scanned if scanned >= 0 else len(entries)} entries match"
    json_href = esc("?format=json" + _query_tail(query))
    download = ""
    if archives:
        download = (
            ' \u00b7 Download as <a href="?archive=zip" download>zip</a>'
            ' / <a href="?archive=tar.gz" download>tar.gz</a>'
        )
    page = (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="color-scheme" content="light dark">\n'
        f"<title>Index of {esc(title)}</title>\n"
        f"<style>{_STYLE}</style></head>\n"
        f"<body>\n<h1>Index of {esc(title)}</h1>\n"
        f'<nav aria-label="breadcrumb">{"".join(crumbs)}</nav>\n'
        f"{_UPLOAD_FORMS if upload else ''}{_filter_form(query)}{notice}"
        f"<table>\n<thead><tr>{_header_cells(query)}</tr></thead>\n<tbody>\n"
        + "\n".join(rows)
        + f"\n</tbody></table>\n{readme}<footer>{count} \u00b7 times in UTC \u00b7 "
        f'<a href="{json_href}">JSON</a>{download}</footer>\n'
        f"<script>{_SCRIPT}</script>\n"
        + (f"<script>{_UPLOAD_SCRIPT}</script>\n" if upload else "")
        + "</body></html>\n"
    )
    return page.encode("utf-8")


def render_json(
    segments: Sequence[str],
    entries: Sequence[Entry],
    *,
    truncated: bool = False,
) -> bytes:
    """The JSON listing: ``{"path", "truncated", "entries": [...]}``.

    Each entry has ``name``, ``type`` (``file``/``dir``), ``size`` (bytes;
    null for directories), ``mtime`` (seconds since the epoch, UTC; null
    when unknown: outside the years 1-9999) and ``href`` (the link relative
    to the listing: ``./`` and the percent-encoded name).  ``name`` and
    ``path`` are text (:func:`json_text`: a byte that is not UTF-8 is
    U+FFFD); ``href`` is always exact: percent-decoded, it is the name's
    bytes.
    """
    doc = {
        "path": "/" + "".join(json_text(s) + "/" for s in segments),
        "truncated": truncated,
        "entries": [
            {
                "name": json_text(e.name),
                "type": "dir" if e.is_dir else "file",
                "size": None if e.is_dir else e.size,
                "mtime": e.mtime,
                "href": _entry_href(e),
            }
            for e in entries
        ],
    }
    # ensure_ascii: the body is pure ASCII whatever the names are.
    return json.dumps(doc, ensure_ascii=True, separators=(",", ":")).encode("ascii") + b"\n"


# body, content type, weak ETag
Listing = tuple[bytes, bytes, str]


def render_listing(
    segments: tuple[str, ...],
    entries: list[Entry],
    query: ListingQuery,
    truncated: bool,
    limit: int,
    readme: Readme | None = None,
    hidden: bool = False,
    archives: bool = False,
    upload: bool = False,
) -> Listing:
    """Sort and render one listing: ``(body, content_type, etag)``.  Pure,
    but run in the ``work`` pool (:mod:`serverio.pipeline.content`):
    formatting ten thousand rows never holds the event loop."""
    ordered = sort_entries(filter_entries(entries, query.filter), query)
    if query.json:
        body = render_json(segments, ordered, truncated=truncated)
        return body, b"application/json", listing_etag(body)
    section = ""
    if readme is not None:
        section = render_readme(readme.name, readme.text, segments, hidden=hidden, size=readme.size)
    body = render_html(
        segments,
        ordered,
        query,
        truncated=truncated,
        limit=limit,
        scanned=len(entries),
        readme=section,
        archives=archives,
        upload=upload,
    )
    return body, b"text/html; charset=utf-8", listing_etag(body)
