"""Path globs, the one syntax of every rule that names paths.

A glob is matched against the decoded, normalised request path (``/`` +
the segments joined by ``/``, plus a trailing ``/`` when the request had
one): ``*`` matches within one segment, ``?`` one character of a segment,
``**`` (a whole segment) any number of segments, including none.  A
pattern starts with ``/`` or ``**``.  Site rules (:mod:`serverio.site.rules`),
access rules and ``[[hide]]`` folder paths all compile theirs here, once,
at start-up (pure: no I/O).
"""

from __future__ import annotations

import re

__all__ = ["compile_glob"]


def compile_glob(pattern: str) -> re.Pattern[str]:
    """The regular expression for one path glob (the module docstring says how they match).

    Raises ValueError with a short reason for a malformed pattern.
    """
    if not pattern or any(c in pattern for c in "\x00\r\n\\"):
        raise ValueError("must be a non-empty path glob without NUL, CR, LF or backslash")
    if pattern.startswith("**"):
        pattern = "/" + pattern
    if not pattern.startswith("/"):
        raise ValueError("must start with '/' or '**'")
    if pattern == "/":
        return re.compile("/")
    parts = pattern[1:].split("/")
    out: list[str] = []
    for i, seg in enumerate(parts):
        if seg == "**":
            out.append("(?:/[^/]*)*")
            continue
        if "**" in seg:
            raise ValueError("'**' must be a whole path segment")
        if seg == "" and i != len(parts) - 1:
            raise ValueError("empty path segment ('//')")
        piece = ["/"]
        for c in seg:
            if c == "*":
                piece.append("[^/]*")
            elif c == "?":
                piece.append("[^/]")
            else:
                piece.append(re.escape(c))
        out.append("".join(piece))
    return re.compile("".join(out))
