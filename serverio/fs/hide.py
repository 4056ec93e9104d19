"""``--hide GLOB``: names left out of what lists the tree (pure).

A glob without ``/`` is matched against a name (``*.tmp``, ``Thumbs.db``);
a glob with ``/`` against the name's path below the root (``private/*``,
``build/**``), as :mod:`fnmatch` matches (``*`` also crosses ``/``), case
sensitively.  Applied where the tree is enumerated: listings (HTML, JSON,
text), the recursive search, folder archives and WebDAV PROPFIND members.

Not an access rule: a hidden name is still served to whoever asks for it
by its URL.  Access is the access hook's ([[auth]], [[access]]).
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Sequence
from typing import Final

__all__ = ["NO_HIDE", "HideRules", "hide_rules"]


class HideRules:
    """The compiled ``--hide`` globs."""

    __slots__ = ("_names", "_paths", "active")

    def __init__(self, globs: Sequence[str]) -> None:
        names = [fnmatch.translate(g) for g in globs if "/" not in g]
        paths = [fnmatch.translate(g.strip("/")) for g in globs if "/" in g]
        self._names = re.compile("|".join(names)) if names else None
        self._paths = re.compile("|".join(paths)) if paths else None
        self.active = bool(names or paths)

    def hides(self, parent: str, name: str) -> bool:
        """Is ``name``, in the directory ``parent`` (its path below the
        root, ``""`` or ``.`` for the root), left out?"""
        if self._names is not None and self._names.match(name):
            return True
        if self._paths is not None:
            path = name if parent in ("", ".") else f"{parent}/{name}"
            return self._paths.match(path) is not None
        return False


NO_HIDE: Final = HideRules(())


@functools.lru_cache(maxsize=8)
def hide_rules(globs: tuple[str, ...]) -> HideRules:
    """The compiled rules of ``--hide`` (a config's tuple), compiled once."""
    return HideRules(globs) if globs else NO_HIDE
