"""Names that Windows would not treat as the plain file name they spell.

Pure functions (no filesystem access), used by the ``windows`` containment
strategy of :class:`serverio.fs.opener.RootOpener` on every segment it
resolves, whether the request or a symlink target named it.  Win32 path
normalisation rewrites or reinterprets these before the filesystem sees
them, so a check made on the spelling would not be a check on the file:

* ``\\`` is a separator and ``:`` names a drive or an alternate data
  stream (``file.txt::$DATA`` is the file's bytes, ``a:b`` a stream);
  control characters and ``<>"|?*`` are invalid or wildcards;
* reserved device names (``CON``, ``PRN``, ``AUX``, ``NUL``, ``COM0``-``COM9``,
  ``LPT0``-``LPT9``, also with superscript digits, ``CONIN$``, ``CONOUT$``) name
  a device in every directory, with any extension (``nul.txt``) and
  trailing spaces;
* trailing dots and spaces are stripped (``secret.txt.`` opens
  ``secret.txt``; ``.env .`` opens ``.env``);
* an 8.3 short name (``SECRET~1.TXT``; Wine's ``_HID~NSX``) is an alias of
  some long name that the spelling does not show: the strategy serves a
  segment with a ``~`` only when the directory holds an entry spelled
  exactly so (see :func:`may_be_short_name`), and whatever the spelling, the
  opened handle's final path must be the resolved path itself
  (:class:`~serverio.fs.opener.RootOpener`, its ``windows`` strategy).
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["may_be_short_name", "windows_name_problem"]

_DEVICE_NAMES: Final = frozenset(
    {"con", "prn", "aux", "nul", "conin$", "conout$"}
    | {f"com{c}" for c in "0123456789\u00b9\u00b2\u00b3"}
    | {f"lpt{c}" for c in "0123456789\u00b9\u00b2\u00b3"}
)
_INVALID: Final = re.compile(r'[\x00-\x1f\\:<>"|?*]')
# NTFS and FAT generate short names as up to 6 characters, "~", digits and
# an extension of up to 3 characters, but other filesystems mangle
# differently (Wine: "_HID~NSX" for ".hidden-dir"; Samba: "~" and hash
# characters), so any "~" costs a lookup.  This is the cheap first check
# only: the opener also compares the opened handle's final path (long
# names) with the path it resolved, which refuses an alias of any form.
_SHORT: Final = re.compile(r"~")


def windows_name_problem(segment: str) -> str | None:
    """Why ``segment`` (one path component) would not name itself on
    Windows, or None if it would."""
    if _INVALID.search(segment):
        return "separator, drive, stream or invalid character"
    if segment[-1:] in (".", " ") and segment not in (".", ".."):
        return "trailing dot or space"
    base = segment.split(".", 1)[0].rstrip(" ").casefold()
    if base in _DEVICE_NAMES:
        return "reserved device name"
    return None


def may_be_short_name(segment: str) -> bool:
    """Could ``segment`` be an 8.3 short alias (``PROGRA~1``, ``_HID~NSX``:
    any name with a ``~``)?  Such a segment is served only if the directory
    lists it under that exact name."""
    return _SHORT.search(segment) is not None
