"""The rights vocabulary of the access hook (pure, no imports).

The fixed set of rights an ``[[access]]`` rule grants and an access
target needs (:class:`serverio.site.access.AccessTarget`;
docs/reference/access.md).  Apart so that the compiled rules
(:mod:`serverio.site.rules`) can name it without importing the hook.
"""

from __future__ import annotations

import enum

__all__ = ["READS", "RIGHTS", "WRITES", "Right"]


class Right(enum.Enum):
    """The rights an ``[[access]]`` rule grants (docs/reference/access.md),
    and the one each request needs; the value is the word rules use."""

    READ = "read"  # a file's bytes: GET, HEAD, an archive's members, a COPY's source
    LIST = "list"  # a directory's names: a listing, PROPFIND's members, search
    UPLOAD = "upload"  # create a name that does not exist: PUT, form upload, COPY/MOVE target
    OVERWRITE = "overwrite"  # replace an existing file (or its properties: PROPPATCH)
    DELETE = "delete"  # remove a name: DELETE, a MOVE's source, what a COPY/MOVE replaces
    MKDIR = "mkdir"  # create a directory: MKCOL, the form's new folder
    LOCK = "lock"  # take a WebDAV lock
    SHARE = "share"  # make a share link (the login feature's)

    @property
    def writes(self) -> bool:
        """Does this right change the tree (what ``--upload`` and the
        ``[[writable]]`` tables allow)?"""
        return self in WRITES

    @property
    def action(self) -> str:
        """The ``[[writable]]`` method a write right is ("delete" or "put")."""
        return "delete" if self is Right.DELETE else "put"


RIGHTS: frozenset[Right] = frozenset(Right)
READS: frozenset[Right] = frozenset((Right.READ, Right.LIST))
WRITES: frozenset[Right] = frozenset(
    (Right.UPLOAD, Right.OVERWRITE, Right.DELETE, Right.MKDIR, Right.LOCK)
)
