"""Client-supplied file names reduced to a safe base name, or refused.

Pure (no filesystem access).  Two entry points:

* :func:`check_name` judges one name exactly as given (a PUT target's last
  segment, a MKCOL name, a COPY/MOVE destination segment): it is accepted
  unchanged or refused with a :class:`NameProblem`.
* :func:`reduce_name` is for a multipart ``filename``: RFC 7578 §4.2 says a
  receiver must not use the directory part that some senders include
  (``C:\\Users\\me\\a.txt``, ``../../a.txt``), so the name is cut after its
  last ``/`` or ``\\`` first, then checked.

The rules: NFC (so one name has one spelling on every filesystem: macOS
stores NFD, Linux stores bytes), no ``/``, ``\\``, NUL or control
character (Unicode category Cc) and no bidirectional formatting character
(U+202E and the other embeddings, overrides, isolates and marks of UAX
#9: ``invoice<U+202E>fdp.exe`` would read as ``invoiceexe.pdf``), not
``.`` or ``..``, no leading dot unless hidden files are allowed
(``--hidden``: reads refuse them the same way, see
:attr:`serverio.http.target.Target.hidden`), at most 255 bytes of UTF-8
(NAME_MAX on Linux and the BSDs; NTFS allows 255 UTF-16 units, never
fewer bytes), and everything :func:`serverio.fs.winpath.windows_name_problem`
refuses, on every platform: reserved device names with any extension
(``CON``, ``nul.txt``, ``COM1``-``COM9``, ``LPT1``-``LPT9``, their
superscript forms), trailing dots and spaces, ``:<>"|?*``.  A name that a
Windows client or a Windows root could not hold is refused everywhere, so
a tree written on one replica is readable on every other.  With
``windows=True`` a name that may be an 8.3 short alias (any ``~``) is
refused too: on NTFS it could name another file.

:func:`pick_name` is the duplicate policy (``--on-duplicate``) as a pure
function over an ``exists`` predicate.  The predicate is a snapshot: the
writer must still create with ``O_EXCL`` / ``RENAME_NOREPLACE`` and ask
again on a collision.
"""

from __future__ import annotations

import enum
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from ..http.target import WRITE_TEMP_PREFIX
from .winpath import may_be_short_name, windows_name_problem

__all__ = [
    "MAX_NAME_BYTES",
    "MAX_RENAME_TRIES",
    "NameProblem",
    "OnDuplicate",
    "Picked",
    "UnsafeName",
    "check_name",
    "pick_name",
    "reduce_name",
]

# NAME_MAX (Linux, the BSDs, macOS): the longest file name, in bytes.
MAX_NAME_BYTES: Final = 255
# The bidirectional formatting characters (UAX #9: ALM, LRM, RLM, the
# embeddings and overrides LRE..RLO, the isolates LRI..PDI), refused in a
# name written as control characters are: a name that displays reversed
# ("invoice<U+202E>fdp.exe" as "invoiceexe.pdf") is never created.  The same
# set that listings show as <U+202E> (serverio.http.listing) for names
# that exist already.  Other format characters (ZWJ in emoji, ZWNJ in
# Persian names, the soft hyphen) are kept.
_BIDI: Final = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
# "a (1).txt" .. "a (999).txt": past that the policy gives up (a 409).
MAX_RENAME_TRIES: Final = 999


class NameProblem(enum.Enum):
    """Why a name is refused (the value is the log text)."""

    EMPTY = "empty name"
    DOT = "'.' or '..'"
    SEPARATOR = "'/' or '\\' in name"
    CONTROL = "NUL, control or bidirectional formatting character"
    NOT_UTF8 = "not valid UTF-8"
    HIDDEN = "leading dot (hidden file)"
    TOO_LONG = "longer than 255 bytes of UTF-8"
    WINDOWS = "not a plain file name on Windows"
    SHORT_ALIAS = "may be a Windows 8.3 short alias"
    TAKEN = "name taken and no free variant"


class UnsafeName(ValueError):
    """A name refused by :func:`check_name`, :func:`reduce_name` or
    :func:`pick_name`; :attr:`problem` says why (the caller answers 400,
    or 409 for :attr:`NameProblem.TAKEN`)."""

    def __init__(self, problem: NameProblem, name: str) -> None:
        super().__init__(f"{problem.value}: {name!r}")
        self.problem = problem
        self.name = name


def check_name(name: str, *, hidden: bool = False, windows: bool = False) -> str:
    """``name`` in NFC if it is a safe base name; raises :class:`UnsafeName`.

    ``hidden`` allows a leading dot; ``windows`` also refuses possible 8.3
    short aliases (the root is on Windows).
    """
    if not name:
        raise UnsafeName(NameProblem.EMPTY, name)
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate: an undecodable byte carried by surrogateescape.
        raise UnsafeName(NameProblem.NOT_UTF8, name) from None
    nfc = unicodedata.normalize("NFC", name)
    if nfc in (".", ".."):
        raise UnsafeName(NameProblem.DOT, name)
    if "/" in nfc or "\\" in nfc:
        raise UnsafeName(NameProblem.SEPARATOR, name)
    if any(unicodedata.category(c) == "Cc" or c in _BIDI for c in nfc):
        raise UnsafeName(NameProblem.CONTROL, name)
    if nfc[0] == "." and (not hidden or nfc.startswith(WRITE_TEMP_PREFIX)):
        # An upload's temporary name is never a target, even with --hidden.
        raise UnsafeName(NameProblem.HIDDEN, name)
    if len(nfc.encode("utf-8")) > MAX_NAME_BYTES:
        raise UnsafeName(NameProblem.TOO_LONG, name)
    if windows_name_problem(nfc) is not None:
        raise UnsafeName(NameProblem.WINDOWS, name)
    if windows and may_be_short_name(nfc):
        raise UnsafeName(NameProblem.SHORT_ALIAS, name)
    return nfc


def reduce_name(raw: str, *, hidden: bool = False, windows: bool = False) -> str:
    """The safe base name of a multipart ``filename``: its part after the
    last ``/`` or ``\\`` (RFC 7578 §4.2), checked by :func:`check_name`."""
    cut = max(raw.rfind("/"), raw.rfind("\\"))
    return check_name(raw[cut + 1 :], hidden=hidden, windows=windows)


class OnDuplicate(enum.Enum):
    """What a write does when its name is taken (``--on-duplicate``)."""

    ERROR = "error"  # refuse (409 Conflict)
    RENAME = "rename"  # the first free "stem (N).ext"
    OVERWRITE = "overwrite"  # replace the existing file atomically


@dataclass(frozen=True, slots=True)
class Picked:
    """The name a write goes to, and whether it replaces an existing file
    (``os.replace``) or must not (``RENAME_NOREPLACE`` / ``O_EXCL``)."""

    name: str
    overwrite: bool


def _variant(name: str, n: int) -> str:
    # "report.pdf" -> "report (2).pdf"; ".env" -> ".env (2)" (a leading dot
    # is not an extension); the stem is cut, on a character, to stay within
    # MAX_NAME_BYTES.
    dot = name.rfind(".")
    stem, ext = (name[:dot], name[dot:]) if dot > 0 else (name, "")
    suffix = f" ({n}){ext}"
    room = MAX_NAME_BYTES - len(suffix.encode("utf-8"))
    stem_bytes = stem.encode("utf-8")[: max(room, 0)]
    return stem_bytes.decode("utf-8", "ignore").rstrip(" .") + suffix


def pick_name(
    name: str,
    policy: OnDuplicate,
    exists: Callable[[str], bool],
    *,
    hidden: bool = False,
    windows: bool = False,
) -> Picked:
    """Where a write of the checked name ``name`` goes under ``policy``.

    ``exists`` says whether a name is taken in the target directory.
    Raises :class:`UnsafeName` with :attr:`NameProblem.TAKEN` for ERROR on
    a taken name, or RENAME when :data:`MAX_RENAME_TRIES` variants are all
    taken.  A variant is checked like any name (it stays under 255 bytes).
    """
    if not exists(name):
        return Picked(name, overwrite=False)
    if policy is OnDuplicate.OVERWRITE:
        return Picked(name, overwrite=True)
    if policy is OnDuplicate.RENAME:
        for n in range(1, MAX_RENAME_TRIES + 1):
            candidate = check_name(_variant(name, n), hidden=hidden, windows=windows)
            if not exists(candidate):
                return Picked(candidate, overwrite=False)
    raise UnsafeName(NameProblem.TAKEN, name)
