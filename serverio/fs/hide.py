"""``--hide GLOB`` and ``[[hide]]``: names left out of what lists the tree (pure).

A glob without ``/`` is matched against a name (``*.tmp``, ``Thumbs.db``);
a glob with ``/`` against the name's path below the root (``private/*``,
``build/**``), as :mod:`fnmatch` matches (``*`` also crosses ``/``), case
sensitively.  A ``[[hide]]`` table gives such globs for some folders only:
its ``path`` is a glob on the folder's URL path, as an ``[[access]]``
table's (``/photos/**``: the folder and every folder below it); without
``path`` a table is ``--hide`` itself.  Applied where the tree is
enumerated: listings (HTML, JSON, text), the recursive search, folder
archives and WebDAV PROPFIND members.

Not an access rule: a hidden name is still served to whoever asks for it
by its URL.  Access is the access hook's ([[auth]], [[access]]).
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Sequence
from typing import Final

from .globs import compile_glob

__all__ = ["NO_HIDE", "HideRules", "hide_rules"]


def _globs(globs: Sequence[str]) -> tuple[re.Pattern[str] | None, re.Pattern[str] | None]:
    """The name globs and the path globs of ``globs``, each as one regex."""
    names = [fnmatch.translate(g) for g in globs if "/" not in g]
    paths = [fnmatch.translate(g.strip("/")) for g in globs if "/" in g]
    return (
        re.compile("|".join(names)) if names else None,
        re.compile("|".join(paths)) if paths else None,
    )


class HideRules:
    """The compiled ``--hide`` globs and ``[[hide]]`` tables.

    ``tables``: (folder path glob, globs) pairs; the path glob is compiled
    by ``compile_folder`` (:func:`serverio.fs.globs.compile_glob`, the
    access tables' glob syntax) and matched against ``/`` and the folder's
    path below the root (``/a/b``); a folder it matches hides the globs."""

    __slots__ = ("_names", "_paths", "_scoped", "active")

    def __init__(
        self, globs: Sequence[str], tables: Sequence[tuple[str, Sequence[str]]] = ()
    ) -> None:
        # A table without a path is --hide itself.
        everywhere = [*globs, *(g for folder, gs in tables if not folder for g in gs)]
        self._names, self._paths = _globs(everywhere)
        scoped = []
        if any(folder for folder, _ in tables):
            for folder, table_globs in tables:
                if folder:
                    scoped.append((compile_glob(folder), *_globs(table_globs)))
        self._scoped: tuple[
            tuple[re.Pattern[str], re.Pattern[str] | None, re.Pattern[str] | None], ...
        ] = tuple(scoped)
        self.active = bool(self._names or self._paths or self._scoped)

    def hides(self, parent: str, name: str) -> bool:
        """Is ``name``, in the directory ``parent`` (its path below the
        root, ``""`` or ``.`` for the root), left out?"""
        if _hidden(self._names, self._paths, parent, name):
            return True
        if self._scoped:
            folder = "/" if parent in ("", ".") else "/" + parent.strip("/")
            for where, names, paths in self._scoped:
                # "/photos" and "/photos/" both name the folder.
                here = where.fullmatch(folder) or where.fullmatch(folder.rstrip("/") + "/")
                if here and _hidden(names, paths, parent, name):
                    return True
        return False


def _hidden(
    names: re.Pattern[str] | None, paths: re.Pattern[str] | None, parent: str, name: str
) -> bool:
    if names is not None and names.match(name):
        return True
    if paths is not None:
        path = name if parent in ("", ".") else f"{parent}/{name}"
        return paths.match(path) is not None
    return False


NO_HIDE: Final = HideRules(())


@functools.lru_cache(maxsize=8)
def hide_rules(
    globs: tuple[str, ...], tables: tuple[tuple[str, tuple[str, ...]], ...] = ()
) -> HideRules:
    """The compiled rules of ``--hide`` and ``[[hide]]`` (a config's
    tuples), compiled once."""
    return HideRules(globs, tables) if globs or tables else NO_HIDE
