"""Content-Disposition for downloads (pure; RFC 6266, RFC 8187).

``attachment; filename="ascii-fallback"; filename*=UTF-8''percent-encoded``

A file name is attacker-influenced text (anyone who can create files under
the root chooses it), and it ends up inside a header.  Both parameters are
built from a whitelist, so no quote, backslash, CR, LF or other control
character can end the quoted-string or the header early.
"""

from __future__ import annotations

import fnmatch
import unicodedata
from collections.abc import Sequence
from typing import Final

__all__ = ["ascii_fallback", "content_disposition", "download_matches"]

# RFC 8187 §3.2.1: attr-char = ALPHA / DIGIT / "!" / "#" / "$" / "&" / "+" /
# "-" / "." / "^" / "_" / "`" / "|" / "~"; everything else is pct-encoded.
_ATTR_CHAR: Final = frozenset(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789!#$&+-.^_`|~"
)


def ascii_fallback(name: str) -> str:
    """The ``filename`` parameter for clients without RFC 8187 support.

    Accents are stripped by compatibility decomposition (``café`` ->
    ``cafe``); what is left outside printable ASCII becomes ``_``.  In the
    quoted-string (RFC 9110 §5.6.4) ``"`` and ``\\`` are replaced rather than
    escaped, since several user agents do not unescape; ``%`` is replaced
    because some user agents percent-decode this parameter (RFC 6266
    appendix D).  ``/`` and ``\\`` are replaced too, after the
    decomposition (fullwidth solidus U+FF0F decomposes to ``/``), and leading dots
    are dropped, so a user agent that trusts this parameter as a path can
    neither leave its download directory nor create a hidden file
    (RFC 6266 §4.3).
    """
    decomposed = unicodedata.normalize("NFKD", name)
    out = []
    for ch in decomposed:
        if unicodedata.combining(ch):
            continue
        o = ord(ch)
        if 0x20 <= o < 0x7F and ch not in '"\\%/':
            out.append(ch)
        else:
            out.append("_")
    text = "".join(out).strip(" .")
    return text or "download"


def content_disposition(name: str, disposition: str = "attachment") -> bytes:
    """The Content-Disposition field value for ``name`` (RFC 6266 §4.1)."""
    raw = name.encode("utf-8", "surrogateescape")
    encoded = "".join(chr(b) if b in _ATTR_CHAR else f"%{b:02X}" for b in raw)
    value = f"{disposition}; filename=\"{ascii_fallback(name)}\"; filename*=UTF-8''{encoded}"
    return value.encode("ascii")


def download_matches(name: str, relpath: str, globs: Sequence[str]) -> bool:
    """True when ``--download GLOB`` applies: a glob without ``/`` matches
    the file name (``*.zip``), one with ``/`` the path below the root
    (``releases/*``).  Case-sensitive, like the filesystem."""
    for glob in globs:
        if fnmatch.fnmatchcase(relpath if "/" in glob else name, glob):
            return True
    return False
