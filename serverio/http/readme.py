"""A directory's README, rendered below its listing (pure).

Text in, an HTML fragment out; the file is read by :func:`serverio.fs.readme.read_readme`
(blocking, in the work pool) and only when the listing shows it, so a
README a client may not GET (hidden, or behind an ``[[auth]]`` rule that
hides it from this client) is never rendered.

* ``README.md`` is Markdown, rendered by markdown-it-py (a regular
  dependency: every install renders it; imported by the first README
  rendered, never at start-up); ``README`` is shown as it is, in ``<pre>``.
* The Markdown is sandboxed: raw HTML is not HTML (markdown-it's ``html``
  option off: ``<script>`` is shown as text); every link and image URL goes
  through :func:`checked_url`: ``http``, ``https`` and ``mailto`` links, and
  relative references that stay inside the served root, spelled as a request
  target would be (parsed by :func:`serverio.http.target.parse_target`:
  no backslash, NUL, encoded slash or bad escape; no hidden segment unless
  ``--hidden``).  Any other URL (``javascript:``, ``data:``, ``file:``, a
  scheme-relative ``//host``, ``../`` past the root) is not a link: its
  text is kept, the link is not.  An image is shown only from a relative,
  contained URL (the listing's CSP allows ``img-src 'self'`` and nothing
  else, so a README cannot make readers' browsers call other hosts); an
  external one becomes a link to it, labelled with its alt text.
* A README over :data:`README_MAX` (256 KiB) is not read whole: the page
  links to it instead.  Bytes that are not UTF-8 are shown as U+FFFD.
"""

from __future__ import annotations

import functools
import hashlib
import html
import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

from ..errors import HTTPError
from .target import parse_target, quote_segment


def _module(name: str) -> Any:
    """A module of markdown-it-py, imported by name on first use (a README
    below a listing): start-up never pays for it (docs/performance.md)."""
    return importlib.import_module(name)


__all__ = [
    "README_MAX",
    "README_NAMES",
    "Readme",
    "checked_url",
    "render_readme",
    "with_readme",
]

# The names looked for, in this order (the first present is shown).
README_NAMES: Final = ("README.md", "README")
README_MAX: Final = 256 * 1024

_SCHEMES: Final = frozenset({"http", "https", "mailto"})


def checked_url(url: str, segments: Sequence[str], *, hidden: bool = False) -> str | None:
    """``url`` if a README below the directory at ``segments`` may link to
    it, else None (see the module docstring).  ``url`` is as markdown-it
    normalised it (percent-encoded)."""
    if any(ord(c) < 0x21 or c == "\\" for c in url):
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme:
        scheme = parts.scheme.lower()
        if scheme not in _SCHEMES or (scheme != "mailto" and not parts.netloc):
            return None
        return url
    if parts.netloc or url.startswith("//"):
        return None  # another host, spelled without a scheme
    if not parts.path:
        return url  # "#section" or "?sort=size": this page
    stack = [] if parts.path.startswith("/") else [quote_segment(s) for s in segments]
    for seg in parts.path.split("/"):
        low = seg.lower()
        if low in ("", ".", "%2e"):
            continue
        if low in ("..", ".%2e", "%2e.", "%2e%2e"):
            if not stack:
                return None  # above the root
            stack.pop()
            continue
        stack.append(seg)
    path = "/" + "/".join(stack) + ("/" if parts.path.endswith("/") and stack else "")
    try:
        target = parse_target(b"GET", path.encode("ascii"))
    except (HTTPError, UnicodeEncodeError):
        return None
    if target.hidden and not hidden:
        return None
    return url


def _sandbox(tokens: list[Any], segments: Sequence[str], hidden: bool) -> None:
    """Check every link and image of the parsed document (in place)."""
    for block in tokens:
        children = block.children
        if not children:
            continue
        out: list[Any] = []
        refused: list[bool] = []  # per open link: was its href refused?
        for tok in children:
            if tok.type == "link_open":
                href = str(tok.attrGet("href") or "")
                ok = checked_url(href, segments, hidden=hidden) is not None
                refused.append(not ok)
                if not ok:
                    tok.tag, tok.attrs = "span", {}
            elif tok.type == "link_close" and refused:
                if refused.pop():
                    tok.tag = "span"
            elif tok.type == "image":
                out += _image(tok, segments, hidden, inside_link=bool(refused))
                continue
            out.append(tok)
        block.children = out


def _image(tok: Any, segments: Sequence[str], hidden: bool, *, inside_link: bool) -> list[Any]:
    src = str(tok.attrGet("src") or "")
    alt = "".join(c.content for c in tok.children or ()) or src
    parts = urlsplit(src) if checked_url(src, segments, hidden=hidden) else None
    if parts is not None and not parts.scheme:
        return [tok]  # relative and contained: shown (img-src 'self')
    token = _module("markdown_it.token").Token
    text = token("text", "", 0, content=alt)
    if parts is None or inside_link:
        return [text]
    return [
        token("link_open", "a", 1, attrs={"href": src}),
        text,
        token("link_close", "a", -1),
    ]


# Rendered READMEs, by text and place: markdown-it renders 100-200 KB/s
# (linear, but a 256 KiB README of "![" costs seconds), and every sort
# order, filter and format of a listing is its own page, so the fragment is
# kept apart from the listing cache (and when that is off).
@functools.lru_cache(maxsize=16)
def _markdown(text: str, segments: tuple[str, ...], hidden: bool) -> str:
    # One parser per render (0.2 ms): nothing shared between worker threads.
    md = _module("markdown_it").MarkdownIt(
        "commonmark", {"html": False, "linkify": False, "typographer": False}
    )
    md.enable(["table", "strikethrough"])
    env: dict[str, Any] = {}
    tokens = md.parse(text, env)
    _sandbox(tokens, segments, hidden)
    rendered: str = md.renderer.render(tokens, md.options, env)
    return rendered


@dataclass(frozen=True, slots=True)
class Readme:
    """A README as read (:func:`serverio.fs.readme.read_readme`): ``text``
    None when the file is over the bound."""

    name: str
    text: str | None
    size: int
    digest: bytes  # of the bytes read (or of the size, when too large)


def render_readme(
    name: str,
    text: str | None,
    segments: Sequence[str],
    *,
    hidden: bool = False,
    size: int = 0,
) -> str:
    """The ``<section class="readme">`` for the README ``name`` of the
    directory at ``segments``; ``text`` None: too large to show (``size``
    bytes), so a link to it."""
    esc = html.escape
    label = f'<section class="readme" aria-label="{esc(name)}">'
    head = f'<h2><a href="./{quote_segment(name)}">{esc(name)}</a></h2>'
    if text is None:
        body = (
            f'<p class="notice">{esc(name)} is {size // 1024} KiB, larger than '
            f"{README_MAX // 1024} KiB: it is not shown here; "
            f'<a href="./{quote_segment(name)}">open it</a>.</p>'
        )
    elif name.lower().endswith(".md"):
        body = f'<div class="markdown">{_markdown(text, tuple(segments), hidden)}</div>'
    else:
        body = f"<pre>{esc(text)}</pre>"
    return f"{label}\n{head}\n{body}\n</section>\n"


def with_readme(listing_digest: bytes, readme_digest: bytes) -> bytes:
    """The listing cache key's digest once a README is part of the page:
    its bytes are in the body, so a new README is a new key (and, through
    the rendered bytes, a new ETag)."""
    return hashlib.blake2b(listing_digest + readme_digest, digest_size=16).digest()
