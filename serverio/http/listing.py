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

import functools
import hashlib
import html
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

from .pageassets import (
    ACTIONS_SCRIPT,
    ACTIONS_SOURCE,
    HEAD_SCRIPT,
    LISTING_CSP,
    LISTING_UPLOAD_CSP,
    SCRIPT,
    SPRITE,
    STYLE,
    UPLOAD_SCRIPT,
    icon_of,
    sha256_source,
)
from .readme import Readme, render_readme
from .selection import (
    SELECT_SCRIPT,
    SELECT_SOURCE,
    TOOLS_ASSET,
    TOOLS_QUERY,
    TOOLS_SOURCE,
    TOOLS_STYLE_SOURCE,
)
from .target import quote_segment

__all__ = [
    "ALL_RIGHTS",
    "FILTER_MAX",
    "FORMATS",
    "LISTING_CSP",
    "LISTING_UPLOAD_CSP",
    "NO_RIGHTS",
    "SEARCH_STOPS",
    "SEARCH_TYPES",
    "SORT_KEYS",
    "Entry",
    "Hit",
    "Listing",
    "ListingQuery",
    "PageRights",
    "entries_digest",
    "filter_entries",
    "json_text",
    "listing_csp",
    "listing_etag",
    "natural_key",
    "page_head",
    "page_tail",
    "parse_listing_query",
    "render_html",
    "render_json",
    "render_listing",
    "render_text",
    "search_format",
    "search_head",
    "search_rows",
    "search_tail",
    "shown_name",
    "sort_entries",
    "text_line",
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
class PageRights:
    """What a listing page offers its reader: the access hook's answers
    for this request (:func:`serverio.site.pagerights.page_rights`), on
    the listed folder (``upload``: the upload form and its script;
    ``mkdir``: the new-folder form; ``share``: a signed-in reader's share
    links of its entries) and on its entries (``delete``: the per-row
    delete, rename and move, which all remove the name where it is).
    ``odd``: the names whose delete right is not ``delete`` (each row then
    carries its own).  ``overwrite``: the text editor's save, on the
    entries it opens (:mod:`serverio.http.selection`), with its own odd
    names (``odd_overwrite``).  A control is shown only with its right;
    the server still decides every request the page makes."""

    upload: bool = False
    mkdir: bool = False
    delete: bool = False
    odd: frozenset[str] = frozenset()
    share: bool = False
    overwrite: bool = False
    odd_overwrite: frozenset[str] = frozenset()

    @property
    def any(self) -> bool:
        return self.upload or self.mkdir or self.rows or self.edits

    @property
    def edits(self) -> bool:
        """May some entry be overwritten (the editor's Edit buttons)?"""
        return self.overwrite or bool(self.odd_overwrite)

    @property
    def selects(self) -> bool:
        """Has the selection's script something to offer beyond the
        archives (a delete, an edit)?"""
        return self.delete or bool(self.odd) or self.edits

    @property
    def rows(self) -> bool:
        """Has some row an action (the rows' actions script)?"""
        return self.delete or bool(self.odd) or self.share

    def tokens(self) -> str:
        """The folder's rights as the page's ``data-may`` tokens."""
        names = (
            ("upload", self.upload),
            ("mkdir", self.mkdir),
            ("delete", self.delete),
            ("share", self.share),
            ("overwrite", self.overwrite),
        )
        return " ".join(word for word, has in names if has)

    def row_tokens(self, name: str) -> str | None:
        """A row's own ``data-may`` tokens when its entry's delete or
        overwrite right differs from the folder's (None: the folder's
        apply).  A row's tokens replace the folder's for that row."""
        odd, odd_w = name in self.odd, name in self.odd_overwrite
        if not odd and not odd_w:
            return None
        names = (
            ("delete", self.delete != odd),
            ("share", self.share),
            ("overwrite", self.overwrite != odd_w),
        )
        return " ".join(word for word, has in names if has)

    def key(self) -> bytes:
        """What distinguishes two renders of the same entries."""
        odd = b"/".join(sorted(n.encode("utf-8", "surrogatepass") for n in self.odd))
        odd_w = b"/".join(sorted(n.encode("utf-8", "surrogatepass") for n in self.odd_overwrite))
        return b"+%s\0%s\0%s" % (self.tokens().encode("ascii"), odd, odd_w)


# No right: a read-only page.
NO_RIGHTS: Final = PageRights()
# --upload without site rules: every write right everywhere.
ALL_RIGHTS: Final = PageRights(upload=True, mkdir=True, delete=True, overwrite=True)


# The representations of a listing: ?format= or Accept chooses.
FORMATS: Final = ("html", "json", "text")


@dataclass(frozen=True, slots=True)
class ListingQuery:
    sort: str = "name"
    order: str = "asc"
    json: bool = False
    filter: str = ""  # ?filter=: shown names containing it, case-insensitively
    text: bool = False  # ?format=text or Accept: text/plain: one name per line
    # ?q= (or the search box's "Search subfolders"): a recursive search of
    # the tree below (serverio.fs.search), a name substring or glob.
    q: str = ""
    # ?asset=tools: the script of the page's selection actions and text
    # editor instead of the listing (serverio.http.selection: loaded when
    # first used).
    asset: bool = False


# The longest ?filter= kept (characters; the rest is cut): a bound on the
# listing cache's keys and on the work of matching, as the page's
# <input maxlength> is for a browser.
FILTER_MAX: Final = 256


def _printable(value: str) -> str:
    return "".join(c for c in value[: FILTER_MAX * 2] if c.isprintable()).strip()[:FILTER_MAX]


def parse_listing_query(
    params: Mapping[str, str], *, accept_json: bool, accept_text: bool = False
) -> ListingQuery:
    """``?sort=name|size|mtime&order=asc|desc&format=html|json|text&filter=TEXT&q=TEXT``.

    Unknown values are ignored (the default applies), as for any other
    query string a static server does not understand.  ``format`` wins over
    the Accept header because it is the more explicit of the two
    (``accept_json``/``accept_text``: what Accept prefers).  ``filter`` and
    ``q`` keep their printable characters, stripped of surrounding space, at
    most :data:`FILTER_MAX` of them.  ``search=1`` (the search box's second
    button) makes the filter text a recursive search.
    """
    sort = params.get("sort", "name")
    order = params.get("order", "asc")
    fmt = params.get("format")
    if fmt not in FORMATS:
        fmt = "json" if accept_json else "text" if accept_text else "html"
    needle = _printable(params.get("filter", ""))
    q = _printable(params.get("q", ""))
    if not q and needle and params.get("search") == "1":
        q, needle = needle, ""
    return ListingQuery(
        sort=sort if sort in SORT_KEYS else "name",
        order=order if order in _ORDERS else "asc",
        json=fmt == "json",
        filter=needle,
        text=fmt == "text",
        q=q,
        asset=params.get("asset") == TOOLS_QUERY,
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


_DIGITS: Final = re.compile(r"[0-9]+")  # ASCII digits only


def _digit_run(m: re.Match[str]) -> str:
    # The run's length first (one character: "1".."9", or ":" and three
    # digits for ten or more), so a longer number sorts after a shorter one
    # and equal lengths compare digit by digit: "file_2" < "file_10".
    run = m.group().lstrip("0") or "0"
    n = len(run)
    return (chr(0x30 + n) if n < 10 else f":{n:03d}") + run


def natural_key(name: str) -> str:
    """A natural sort key: runs of ASCII digits compare as numbers, the
    rest case-insensitively (``file_2`` before ``file_10``; ``a`` with
    ``A``), the exact name last (after a NUL, which no name contains) so
    the order is total: ``file_02`` and ``file_2`` are told apart.  A
    string, so sorting compares in C (:mod:`bench`: 10,000 names)."""
    return _DIGITS.sub(_digit_run, name.casefold()) + "\0" + name


def _name_key(e: Entry) -> str:
    return natural_key(e.name)


def _size_key(e: Entry) -> tuple[int, str]:
    return (e.size, natural_key(e.name))


def _mtime_key(e: Entry) -> tuple[bool, int, str]:
    # An unknown time sorts after every known one (before them, descending).
    return (e.mtime is None, e.mtime or 0, natural_key(e.name))


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


@functools.lru_cache(maxsize=4096)
def _day(days: int) -> str:
    # Arithmetic, not fromtimestamp: no platform limit on the range of time_t.
    # Memoised: the files of a folder share few days (bench: 10,000 rows).
    t = _EPOCH + timedelta(days=days)
    return f"{t.year:04d}-{t.month:02d}-{t.day:02d}"


def _time_cell(mtime: int | None) -> str:
    if mtime is None:
        return '<td class="time" title="unknown">\u2014</td>'
    days, secs = divmod(mtime, 86400)
    hour, rest = divmod(secs, 3600)
    minute, second = divmod(rest, 60)
    day = _day(days)
    # The script shows it in local time and keeps this UTC time in the
    # tooltip; the time of day is its own span, hidden on narrow screens.
    return (
        f'<td class="time"><time datetime="{day}T{hour:02d}:{minute:02d}:{second:02d}Z">{day}'
        f"<span> {hour:02d}:{minute:02d}</span></time></td>"
    )


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


# A name of these characters only is its own link and its own HTML text:
# no escaping, no percent-encoding (the fast path of most rows).
_PLAIN_NAME: Final = re.compile(r"[A-Za-z0-9._~-]+")


def _entry_href(e: Entry) -> str:
    # "./" first: even an encoded first segment never starts the reference.
    if _PLAIN_NAME.fullmatch(e.name):
        return "./" + e.name + ("/" if e.is_dir else "")
    return "./" + quote_segment(e.name) + ("/" if e.is_dir else "")


def _text_char(ch: str) -> str:
    o = ord(ch)
    if 0xDC80 <= o <= 0xDCFF:  # an undecodable byte (surrogateescape)
        return f"%{o - 0xDC00:02X}"
    return "".join(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))


_TEXT_UNSAFE: Final = re.compile(r"[%\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def text_line(name: str) -> str:
    """``name`` as one line of the plain-text listing: ``%``, the control
    characters (C0, DEL, C1, U+2028/U+2029, so a name never spans two
    lines) and each byte that is not UTF-8 are percent-encoded (``%0A``,
    ``%25``, ``%FF``); everything else is the name as it is.  So a line,
    percent-decoded to bytes, is always the name's exact bytes, and a name
    without ``%`` or controls is its own line."""
    return _TEXT_UNSAFE.sub(lambda m: _text_char(m.group()), name)


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


def _query_tail(query: ListingQuery) -> str:
    """``&filter=...`` (or ``&q=...``) for a link that keeps the page's
    filter or search (or nothing)."""
    if query.q:
        return f"&q={quote_segment(query.q)}"
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
        arrow = sort = ""
        if query.sort == key:
            arrow = " \u2191" if query.order == "asc" else " \u2193"
            sort = ' aria-sort="ascending"' if query.order == "asc" else ' aria-sort="descending"'
        href = esc(f"?sort={key}&order={order}{_query_tail(query)}")
        heads.append(f'<th class="{cls}"{sort}><a href="{href}">{label}</a>{arrow}</th>')
    return "".join(heads)


def _row(e: Entry, may: str) -> str:
    if _PLAIN_NAME.fullmatch(e.name):
        href = "./" + e.name + ("/" if e.is_dir else "")
        shown = e.name + ("/" if e.is_dir else "")
    else:
        # _entry_href's output is unreserved characters and %XX: nothing to escape.
        href = _entry_href(e)
        shown = html.escape(shown_name(e.name)) + ("/" if e.is_dir else "")
    if e.is_dir:
        size = '<td class="size">\u2014</td>'
    else:
        size = f'<td class="size" title="{e.size} bytes">{human_size(e.size)}</td>'
    kind = "dir" if e.is_dir else "file"
    return (
        f'<tr class="entry {kind}"{may}><td class="name"><svg aria-hidden="true">'
        f'<use href="#i-{icon_of(e.name, e.is_dir)}"/></svg>'
        f'<a href="{href}">{shown}</a></td>{size}{_time_cell(e.mtime)}</tr>'
    )


def _rows(segments: Sequence[str], entries: Sequence[Entry], rights: PageRights) -> list[str]:
    # The actions' cells are the actions script's (nothing to send for a
    # row without script); a row whose delete or overwrite right differs
    # from the folder's says so (data-may, read by the scripts).
    odd = rights.odd | rights.odd_overwrite
    rows = []
    if segments:
        rows.append(
            '<tr class="dir up"><td class="name"><svg aria-hidden="true">'
            '<use href="#i-d"/></svg><a href="../">../</a></td>'
            '<td class="size"></td><td class="time"></td></tr>'
        )
    rows.extend(
        _row(e, f' data-may="{rights.row_tokens(e.name)}"' if e.name in odd else "")
        for e in entries
    )
    return rows


def _search_form(query: ListingQuery) -> str:
    """The search box: a GET form to this page, keeping the sort order.
    Typing filters this folder's rows (the script; ``?filter=`` without
    it); "Search subfolders" asks for the recursive search (``?q=``)."""
    esc = html.escape
    keep = "".join(
        f'<input type="hidden" name="{k}" value="{v}">'
        for k, v, default in (("sort", query.sort, "name"), ("order", query.order, "asc"))
        if v != default
    )
    value = query.filter or query.q
    return (
        '<form class="search filter" role="search" method="get">'
        f'<input type="search" name="filter" value="{esc(value)}" '
        f'maxlength="{FILTER_MAX}" placeholder="Filter names" '
        'aria-label="Filter this folder, or search subfolders" autocomplete="off">'
        f'{keep}<button type="submit">Filter</button>'
        '<button type="submit" name="search" value="1">Search subfolders</button></form>'
    )


def _toolbar(query: ListingQuery, archives: bool, actions: bool) -> str:
    """The toolbar at the top: search, downloads, other formats, the theme
    toggle, and (``actions``) the slot the selection actions fill."""
    tail = html.escape(_query_tail(query))
    links = [f'<a href="?format=json{tail}">JSON</a>', f'<a href="?format=text{tail}">Text</a>']
    if archives:
        links.insert(0, '<a href="?archive=zip" download>Download zip</a>')
        links.insert(1, '<a href="?archive=tar.gz" download>tar.gz</a>')
    slot = '<span class="actions" id="actions"></span>' if actions else ""
    return (
        f'<section class="bar" aria-label="Tools">{_search_form(query)}'
        f'<span class="links">{"".join(links)}'
        '<button type="button" id="theme" hidden>Theme: auto</button>'
        f"{slot}</span></section>\n"
    )


# The upload form and the new-folder form: multipart POSTs to this page's
# directory ("./"), answered 303 back here (serverio.upload.form).  The
# field names are the form handler's (MKDIR_FIELD "mkdir"; files "file").
# Each is shown only with its right (upload, mkdir).
_UPLOAD_FORM: Final = (
    '<form class="files" method="post" action="./" enctype="multipart/form-data">'
    '<input type="file" name="file" multiple required aria-label="Files to upload">'
    '<button type="submit">Upload</button></form>'
)
_MKDIR_FORM: Final = (
    '<form class="mkdir" method="post" action="./" enctype="multipart/form-data">'
    '<input type="text" name="mkdir" required maxlength="255" placeholder="Folder name" '
    'aria-label="New folder name" autocomplete="off">'
    '<button type="submit">New folder</button></form>'
)
_DROP_HINT: Final = '<span class="hint">or drop files on the page</span>'
_UPLOAD_FORMS: Final = (
    '<section class="upload" aria-label="Upload">'
    f"{_UPLOAD_FORM}{_MKDIR_FORM}{_DROP_HINT}</section>\n"
)


def _write_forms(rights: PageRights) -> str:
    """The upload section: the forms the reader has the rights for."""
    if rights.upload and rights.mkdir:
        return _UPLOAD_FORMS
    if rights.upload:
        return f'<section class="upload" aria-label="Upload">{_UPLOAD_FORM}{_DROP_HINT}</section>\n'
    if rights.mkdir:
        return f'<section class="upload" aria-label="New folder">{_MKDIR_FORM}</section>\n'
    return ""


# The account corner (a server with users: the login feature's
# /.serverio/ paths): a sign-in link without script; with it, who is
# signed in (the name set as text, never as markup) and a sign-out form
# carrying the CSRF token /.serverio/whoami hands the page.
_ACCOUNT: Final = '<nav class="account" id="account"><a href="/.serverio/login">Sign in</a></nav>\n'
_ACCOUNT_SCRIPT: Final = """
(()=>{const n=document.getElementById("account");if(!n||!window.fetch)return;
fetch("/.serverio/whoami",{credentials:"same-origin",headers:{Accept:"application/json"}})
.then(r=>r.ok?r.json():null).then(w=>{if(!w)return;const a=n.querySelector("a");
if(!w.user){a.href="/.serverio/login?next="+encodeURIComponent(location.pathname+location.search);return;}
a.remove();const s=document.createElement("span");s.id="signed-in";s.textContent=w.user;
n.append("Signed in as ",s);if(w.via!=="session"||!w.csrf)return;
const f=document.createElement("form");f.method="post";f.action="/.serverio/logout";
const i=document.createElement("input");i.type="hidden";i.name="csrf";i.value=w.csrf;
const b=document.createElement("button");b.type="submit";b.id="sign-out";b.textContent="Sign out";
f.append(i,b);n.append(f);}).catch(()=>{});})();
"""


def listing_csp(upload: bool, account: bool, actions: bool = False, select: bool = False) -> bytes:
    """The policy of a listing page: :data:`LISTING_CSP`, with the upload
    script's hash (``upload``), the row actions' (``actions``), the
    account corner's (``account``; its one fetch, to this origin, is what
    ``connect-src 'self'`` allows) and the selection's (``select``: the
    page has archives or write actions; its script, and the tools' script
    and style it inserts when first used, :mod:`serverio.http.selection`)."""
    csp = LISTING_UPLOAD_CSP if upload else LISTING_CSP
    extra = b""
    if actions:
        extra += b" " + ACTIONS_SOURCE.encode("ascii")
    if account:
        extra += b" " + sha256_source(_ACCOUNT_SCRIPT).encode("ascii")
    if select:
        extra += f" {SELECT_SOURCE} {TOOLS_SOURCE}".encode("ascii")
        style = f" {TOOLS_STYLE_SOURCE}; script-src".encode("ascii")
        csp = csp.replace(b"; script-src", style, 1)
    if not extra:
        return csp
    return csp.replace(b"; img-src", extra + b"; img-src", 1)


def page_head(title: str) -> str:
    """The page's ``<head>`` and the opening of its body (``title``
    already escaped): the style and the theme script, the icon sprite."""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="color-scheme" content="light dark">\n'
        f"<title>{title}</title>\n"
        f"<style>{STYLE}</style>\n<script>{HEAD_SCRIPT}</script></head>\n"
        f"<body>\n{SPRITE}\n"
    )


def page_tail(upload: bool, actions: bool = False, select: bool = False) -> str:
    """The scripts at the end of the body and the closing tags
    (``select``: the selection's, :mod:`serverio.http.selection`)."""
    return (
        f"<script>{SCRIPT}</script>\n"
        + (f"<script>{UPLOAD_SCRIPT}</script>\n" if upload else "")
        + (f"<script>{ACTIONS_SCRIPT}</script>\n" if actions else "")
        + (f"<script>{SELECT_SCRIPT}</script>\n" if select else "")
        + "</body></html>\n"
    )


def _crumbs(segments: Sequence[str]) -> str:
    """Breadcrumbs relative to this page: "../" per level up, "./" for itself."""
    esc = html.escape
    depth = len(segments)
    items = [f'<li><a href="{"../" * depth or "./"}">/</a></li>']
    for i, seg in enumerate(segments):
        href = "../" * (depth - i - 1) or "./"
        current = ' aria-current="page"' if i == depth - 1 else ""
        items.append(f'<li><a href="{href}"{current}>{esc(shown_name(seg))}</a></li>')
    return f'<nav aria-label="Breadcrumb"><ol>{"".join(items)}</ol></nav>\n'


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
    actions: bool = False,
    title: str = "",
    account: bool = False,
    rights: PageRights | None = None,
) -> bytes:
    """The HTML page for the directory at ``segments`` (decoded names).

    ``entries`` must already be filtered (:func:`filter_entries`) and
    sorted (:func:`sort_entries`); ``scanned`` is how many there were
    before the filter (-1: the same number).  ``readme`` is the README's
    section (:func:`serverio.http.readme.render_readme`), shown below the
    table.  ``archives`` (``--archives``): the toolbar offers the directory
    as a zip and a tar.gz (links only: the page's CSP allows no inline
    handler, and none is needed).  ``rights``: what this request may do
    here (:class:`PageRights`, the access hook's answers): with ``upload``
    the upload form and its script, with ``mkdir`` the new-folder form,
    with ``delete`` (every entry, or those ``odd`` names) the rows'
    actions script (rename, move, delete, download) and the toolbar's
    selection slot; the folder's rights are the table's ``data-may``
    (send the page with :func:`listing_csp`).  Without ``rights``:
    ``upload`` is the upload and new-folder rights, ``actions`` the
    delete right on every entry.  With ``archives`` or a delete right, the
    selection's script (:mod:`serverio.http.selection`: its checkboxes
    and toolbar, the editor's buttons).  ``title`` (``--title``): the heading
    and window title, before the path.  ``account``: the server has
    users: the account corner and its script.
    """
    if rights is None:
        rights = PageRights(upload=upload, mkdir=upload, delete=actions, overwrite=actions)
    may = f' data-may="{rights.tokens()}"' if rights.any else ""
    esc = html.escape
    path = "/" + "".join(shown_name(s) + "/" for s in segments)
    heading = f"{esc(title)} \u2014 {esc(path)}" if title else f"Index of {esc(path)}"
    notice = ""
    if truncated:
        notice = (
            f'<p class="notice" role="status">Listing truncated: showing the first {limit} '
            "entries of a larger directory.</p>\n"
        )
    count = f"{len(entries)} {'entry' if len(entries) == 1 else 'entries'}"
    if query.filter:
        count = f"{len(entries)} of {scanned if scanned >= 0 else len(entries)} entries match"
    page = (
        page_head(heading)
        + (_ACCOUNT if account else "")
        + f"<h1>{heading}</h1>\n{_crumbs(segments)}"
        f"{_toolbar(query, archives, rights.any)}{_write_forms(rights)}"
        f'{notice}<p id="status" role="status" aria-live="polite"></p>\n'
        f"<table{may}>\n<thead><tr>{_header_cells(query)}</tr></thead>\n<tbody>\n"
        + "\n".join(_rows(segments, entries, rights))
        + f'\n</tbody></table>\n{readme}<footer>{count} \u00b7 <span id="tz">times in UTC</span>'
        "</footer>\n"
        + (f"<script>{_ACCOUNT_SCRIPT}</script>\n" if account else "")
        + page_tail(rights.upload, rights.rows, archives or rights.selects)
    )
    return page.encode("utf-8")


def render_text(entries: Sequence[Entry]) -> bytes:
    """The plain-text listing: one name per line (:func:`text_line`), a
    folder's with a trailing ``/``, in the listing's order; UTF-8."""
    out = [text_line(e.name) + ("/\n" if e.is_dir else "\n") for e in entries]
    return "".join(out).encode("utf-8")


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

# One search result: its path below the searched folder (decoded names,
# the last is the entry's) and the entry.
Hit = tuple[tuple[str, ...], Entry]

# Why a streamed search ended before its walk did: the bound's name and
# the option that sets it (named in every format's ending).
SEARCH_STOPS: Final = {
    "entries": "at --search-max-entries",
    "time": "at --search-time",
    "results": "at --listing-max-entries",
    "busy": "because the work pool was full",
}
SEARCH_TYPES: Final = {
    "html": b"text/html; charset=utf-8",
    "json": b"application/json",
    "text": b"text/plain; charset=utf-8",
}


def search_format(query: ListingQuery) -> str:
    """The representation a search answers in: ``json``, ``text`` or ``html``."""
    return "json" if query.json else "text" if query.text else "html"


def _hit_href(rel: tuple[str, ...], is_dir: bool) -> str:
    return "./" + "/".join(quote_segment(s) for s in rel) + ("/" if is_dir else "")


def _hit_row(rel: tuple[str, ...], e: Entry) -> str:
    shown = html.escape("/".join(shown_name(s) for s in rel)) + ("/" if e.is_dir else "")
    if e.is_dir:
        size = '<td class="size">\u2014</td>'
    else:
        size = f'<td class="size" title="{e.size} bytes">{human_size(e.size)}</td>'
    return (
        f'<tr class="entry {"dir" if e.is_dir else "file"}"><td class="name">'
        f'<svg aria-hidden="true"><use href="#i-{icon_of(e.name, e.is_dir)}"/></svg>'
        f'<a href="{_hit_href(rel, e.is_dir)}">{shown}</a></td>{size}{_time_cell(e.mtime)}</tr>\n'
    )


def _hit_json(rel: tuple[str, ...], e: Entry) -> str:
    doc = {
        "name": "/".join(json_text(s) for s in rel),
        "type": "dir" if e.is_dir else "file",
        "size": None if e.is_dir else e.size,
        "mtime": e.mtime,
        "href": _hit_href(rel, e.is_dir),
    }
    return json.dumps(doc, ensure_ascii=True, separators=(",", ":"))


def search_head(
    segments: tuple[str, ...], query: ListingQuery, *, archives: bool = False, title: str = ""
) -> bytes:
    """The start of a streamed answer to ``?q=`` below the folder at
    ``segments`` (pure), before any result.

    HTML: the listing's page up to the opening of the results' table;
    JSON: ``{"path", "q", "entries": [`` (the object is completed by
    :func:`search_tail`, so the whole body is one JSON document); text:
    nothing (one path per line follows)."""
    fmt = search_format(query)
    if fmt == "json":
        path = "/" + "".join(json_text(s) + "/" for s in segments)
        start = json.dumps({"path": path, "q": query.q}, ensure_ascii=True, separators=(",", ":"))
        return (start[:-1] + ',"entries":[').encode("ascii")
    if fmt == "text":
        return b""
    esc = html.escape
    path = "/" + "".join(shown_name(s) + "/" for s in segments)
    heading = f"{esc(title)} \u2014 {esc(path)}" if title else f"Index of {esc(path)}"
    page = (
        page_head(f"Search: {esc(query.q)} \u2014 {heading}")
        + f"<h1>{heading}</h1>\n{_crumbs(segments)}"
        f"{_toolbar(query, archives, False)}"
        f'<p class="searching">Matches for \u201c{esc(query.q)}\u201d below this folder, '
        "folder by folder as they are found:</p>\n"
        f"<table>\n<thead><tr>{_header_cells(query)}</tr></thead>\n<tbody>\n"
    )
    return page.encode("utf-8")


def search_rows(hits: Sequence[Hit], query: ListingQuery, *, first: bool) -> bytes:
    """Results of a streamed search, in natural order of their paths
    (pure): HTML table rows, JSON array members (``first``: no comma
    before the first of the whole answer) whose ``name`` is the path below
    the folder, or text lines (folders with a trailing ``/``)."""
    ordered = sorted(hits, key=lambda h: [natural_key(s) for s in h[0]])
    fmt = search_format(query)
    if fmt == "json":
        body = ",".join(_hit_json(rel, e) for rel, e in ordered)
        return (body if first else "," + body).encode("ascii")
    if fmt == "text":
        return "".join(
            "/".join(text_line(s) for s in rel) + ("/\n" if e.is_dir else "\n")
            for rel, e in ordered
        ).encode("utf-8")
    return "".join(_hit_row(rel, e) for rel, e in ordered).encode("utf-8")


def search_tail(query: ListingQuery, *, found: int, visited: int, stopped: str) -> bytes:
    """The end of a streamed search (pure): how many matches, how many
    entries were looked at, and whether the walk stopped at a bound
    (``stopped``: a key of :data:`SEARCH_STOPS`, ``""`` when it ended).

    HTML: the table's end, a notice naming the bound, the count and the
    page's scripts; JSON: ``], "truncated", "visited", "stopped"`` and the
    object's end (``stopped``: null or the bound's name); text: nothing
    when the walk ended, else an empty line (never a path) and a line
    ``# search stopped at BOUND (N entries looked at)`` (or ``because the
    work pool was full``)."""
    fmt = search_format(query)
    why = SEARCH_STOPS.get(stopped, "")
    if fmt == "json":
        end = {"truncated": bool(stopped), "visited": visited, "stopped": stopped or None}
        return ("]," + json.dumps(end, ensure_ascii=True, separators=(",", ":"))[1:] + "\n").encode(
            "ascii"
        )
    if fmt == "text":
        if not stopped:
            return b""
        return f"\n# search stopped {why} ({visited} entries looked at)\n".encode("ascii")
    esc = html.escape
    count = f"{found} {'match' if found == 1 else 'matches'}"
    notice = ""
    if stopped:
        notice = (
            f'<p class="notice" role="status">The search stopped {esc(why)} '
            f"({visited} entries looked at): there may be more matches.</p>\n"
        )
    page = (
        f"</tbody></table>\n{notice}"
        f'<p id="status" role="status" aria-live="polite">{count} for '
        f"\u201c{esc(query.q)}\u201d below this folder.</p>\n"
        f'<footer>{count} \u00b7 <span id="tz">times in UTC</span></footer>\n' + page_tail(False)
    )
    return page.encode("utf-8")


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
    actions: bool = False,
    title: str = "",
    account: bool = False,
    rights: PageRights | None = None,
) -> Listing:
    """Sort and render one listing: ``(body, content_type, etag)``.  Pure,
    but run in the ``work`` pool (:mod:`serverio.pipeline.content`):
    formatting ten thousand rows never holds the event loop.  With
    ``query.asset``: the page's tools script (the same for every folder)."""
    if query.asset:
        return TOOLS_ASSET, b"text/javascript; charset=utf-8", listing_etag(TOOLS_ASSET)
    ordered = sort_entries(filter_entries(entries, query.filter), query)
    if query.json:
        body = render_json(segments, ordered, truncated=truncated)
        return body, b"application/json", listing_etag(body)
    if query.text:
        body = render_text(ordered)
        return body, b"text/plain; charset=utf-8", listing_etag(body)
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
        actions=actions,
        title=title,
        account=account,
        rights=rights,
    )
    return body, b"text/html; charset=utf-8", listing_etag(body)
