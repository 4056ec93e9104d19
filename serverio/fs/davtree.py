"""Filesystem tree operations of WebDAV (blocking; issue 29, RFC 4918).

What :mod:`serverio.dav.service` runs in the ``write`` pool, beside the
single-file write path of :mod:`serverio.fs.writer` (whose
:class:`~serverio.fs.writer.Placement` it reuses: a target's directory
opened under the root's containment, its checked name, what is there):

* :func:`lookup` and :class:`DirScan`: the facts PROPFIND reports (the
  ``lstat``, the content hash of a small file for the ETag a GET shows,
  the stored dead properties), one resource or a directory in batches
  (memory bounded whatever its size);
* :func:`make_collection` (MKCOL), :func:`remove_tree` (DELETE of a
  collection), :func:`copy_tree` (COPY), :func:`move_tree` (MOVE):
  symlinks are never followed (a symlink member is skipped by COPY and
  removed, as a link, by DELETE), each file copy is a temporary made with
  ``O_EXCL`` then fsync'ed and renamed into place (a reader never sees a
  partial copy), every directory changed is fsync'ed (POSIX);
* the dead-property store: ONE directory, :data:`PROPS_DIR` at the root,
  beside the files and not among them (issue 45: other tools saw one in
  every directory).  It is a shadow tree keyed by the real path below the
  root: the node of directory ``a/b`` is ``PROPS_DIR/key(a)/key(b)``
  (:func:`node_key`: fixed-length hashes, any name), and holds one file per
  member (:func:`props_name`, ``key + ".xml"``, never a node's name);
  the root's own properties are ``props_name("")`` in the top node.  Each
  file is written atomically through the same temporary + rename; a
  resource's properties (and, for a collection, its node: its members')
  are moved, copied and removed with it.  In the tree, not in a state
  directory elsewhere: replicas serving one shared directory share the
  properties, and a copy or backup of the tree keeps them.  Its name
  starts with the write-temporary prefix, so listings, archives, GETs,
  PROPFIND and every write refuse it even with ``--hidden``.  A store of
  the former layout (one ``PROPS_DIR`` in each directory) is moved into
  its node the first time a request touches that directory's properties
  (:func:`migrate_old_store`).

Nothing here returns an HTTP status: failures are ``OSError`` (per member
of a tree: a list of ``(relative path, errno)``), refusals
:class:`~serverio.fs.writer.WriteRefused`.

Cancellation handling: every function is blocking and holds nothing
between calls.  A tree operation takes ``stop`` (the service sets it when
its caller is cancelled and the pool thread is abandoned): it is checked
between members, so an abandoned COPY, MOVE or DELETE ends at the next
member; each member is then whole or absent, and no temporary is left
(each file copy removes its temporary in a ``finally``).
"""

from __future__ import annotations

import errno
import hashlib
import os
import secrets
import stat
import threading
from collections.abc import Callable, Container, Generator, Iterator
from contextlib import closing
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from ..http.core import content_digest
from ..http.target import WRITE_TEMP_PREFIX
from .opener import ContainedRoot
from .writer import SYS, Placement, require_free

__all__ = [
    "PROPS_DIR",
    "DirScan",
    "Found",
    "TreeJob",
    "TreeTooLarge",
    "clear_props",
    "copy_room",
    "copy_tree",
    "count_tree",
    "list_tree",
    "lookup",
    "make_collection",
    "migrate_old_store",
    "move_tree",
    "node_key",
    "props_name",
    "read_props",
    "remove_tree",
    "root_place",
    "write_props",
]


def _flag(name: str) -> int:
    value: int = getattr(os, name, 0)
    return value


# The dead-property store, at the root (see the module docstring).  Hidden
# everywhere: it starts with WRITE_TEMP_PREFIX.
PROPS_DIR: Final = WRITE_TEMP_PREFIX + "props"
_READ: Final = os.O_RDONLY | _flag("O_NOFOLLOW") | _flag("O_CLOEXEC") | _flag("O_NONBLOCK")
_DIR: Final = _READ | _flag("O_DIRECTORY")
_CREATE: Final = (
    os.O_WRONLY
    | os.O_CREAT
    | os.O_EXCL
    | _flag("O_NOFOLLOW")
    | _flag("O_CLOEXEC")
    | _flag("O_BINARY")
)
_COPY_CHUNK: Final = 1 << 20
MAX_PROPS_BYTES: Final = 1 << 20  # a stored property file read at most
T = TypeVar("T")


class TreeTooLarge(Exception):
    """A collection with more members than the operation may touch."""


def node_key(name: str) -> str:
    """The store's name for the node of directory member ``name`` (a hash:
    fixed length, any name)."""
    raw = name.encode("utf-8", "surrogateescape")
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


def props_name(name: str) -> str:
    """The file in its directory's node holding ``name``'s dead properties
    (``""`` is the directory itself, used for the root)."""
    return node_key(name) + ".xml"


def _open_node(root_fd: int, real: str, create: bool = False) -> int:
    """The store's node of directory ``real`` (below the root, ``""`` the
    root), opened; -1 when there is none (made, with the store, when
    ``create``).  Never follows a symlink."""
    if root_fd < 0:
        return -1
    fd = root_fd
    try:
        for name in (PROPS_DIR, *(node_key(s) for s in real.split("/") if s)):
            try:
                nxt = os.open(name, _DIR, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    return -1
                try:
                    os.mkdir(name, 0o777, dir_fd=fd)
                except FileExistsError:
                    pass
                nxt = os.open(name, _DIR, dir_fd=fd)
            except OSError:
                if create:
                    raise
                return -1
            if fd != root_fd:
                os.close(fd)
            fd = nxt
        node, fd = fd, root_fd
        return node
    finally:
        if fd != root_fd:
            os.close(fd)


def migrate_old_store(dir_fd: int, root_fd: int, real: str) -> None:
    """Move a store of the former layout (``PROPS_DIR`` inside directory
    ``real`` itself, opened as ``dir_fd``) into that directory's node; a
    file the node already has wins.  The root's former store is the new
    store's top node: nothing to move.  Blocking; one failed ``openat``
    when there is nothing to move."""
    if not real or root_fd < 0:
        return
    try:
        old = os.open(PROPS_DIR, _DIR, dir_fd=dir_fd)
    except OSError:
        return
    try:
        node = _open_node(root_fd, real, create=True)
        try:
            with os.scandir(old) as it:
                names = [e.name for e in it if e.is_file(follow_symlinks=False)]
            for name in names:
                if name.endswith(".xml") and not name.startswith(WRITE_TEMP_PREFIX):
                    _move_file(old, name, node)
                else:
                    try:
                        SYS.unlink(name, dir_fd=old)  # a temporary left by a crash
                    except FileNotFoundError:
                        pass
            SYS.fsync(node)
        finally:
            os.close(node)
    finally:
        os.close(old)
    try:
        os.rmdir(PROPS_DIR, dir_fd=dir_fd)
        SYS.fsync(dir_fd)
    except OSError:
        pass  # something else inside it: left for the next time


def _move_file(src_dir: int, name: str, dst_dir: int) -> None:
    """``name`` from ``src_dir`` into ``dst_dir`` unless already there
    (then the source's copy is dropped); across filesystems a copy.  A
    source gone meanwhile (another request migrating the same store) is
    no failure."""
    try:
        try:
            os.stat(name, dir_fd=dst_dir, follow_symlinks=False)
        except FileNotFoundError:
            try:
                SYS.rename(name, name, src_dir_fd=src_dir, dst_dir_fd=dst_dir)
                return
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
                _copy_file(src_dir, name, dst_dir, name)
        SYS.unlink(name, dir_fd=src_dir)
    except FileNotFoundError:
        pass


@dataclass(slots=True)
class Found:
    """One resource as PROPFIND sees it: its name in its directory, its
    ``lstat`` (``fstat`` for the request target, opened as reads open it),
    the content hash of a small regular file (None otherwise), and its
    stored dead properties (the bytes, or None)."""

    name: str
    st: os.stat_result
    content_hash: bytes | None
    props: bytes | None


def _read_all(fd: int, size: int) -> bytes | None:
    parts: list[bytes] = []
    left = size
    while left > 0:
        chunk = os.read(fd, min(left, _COPY_CHUNK))
        if not chunk:
            return None
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def _read_at(dir_fd: int, name: str, limit: int) -> bytes | None:
    """The bytes of regular file ``name`` in ``dir_fd`` when at most ``limit``."""
    try:
        fd = os.open(name, _READ, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        return _read_all(fd, st.st_size)
    finally:
        os.close(fd)


def _hash_of(fd: int, st: os.stat_result, small: int) -> bytes | None:
    if not stat.S_ISREG(st.st_mode) or st.st_size > small:
        return None
    data = _read_all(fd, st.st_size)
    return None if data is None else content_digest(data)


def lookup(opener: ContainedRoot, relpath: str, small: int) -> Found | None:
    """The request target's :class:`Found` (opened as a GET opens it), or
    None when it does not exist (or containment refuses it).  ``small``:
    files up to this size are hashed (their ETag is the hash)."""
    try:
        fd = opener.open(relpath or ".")
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.EXDEV, errno.ELOOP):
            return None
        raise
    try:
        st = os.fstat(fd)
        digest = _hash_of(fd, st, small)
    finally:
        os.close(fd)
    parent, _, name = relpath.rpartition("/")
    props = None
    try:
        pfd, resolved = opener.open_resolved(parent or ".")
    except OSError:
        pfd, resolved = -1, None
    if pfd >= 0:
        try:
            real = _real(parent, resolved)
            migrate_old_store(pfd, opener.root_fd, real)
            store = _open_node(opener.root_fd, real)
            if store >= 0:
                try:
                    props = _read_at(store, props_name(name), MAX_PROPS_BYTES)
                finally:
                    os.close(store)
        finally:
            os.close(pfd)
    return Found(name, st, digest, props)


def _real(relpath: str, resolved: str | None) -> str:
    """The store's key of a directory opened by ``open_resolved``."""
    real = (relpath if resolved is None else resolved).strip("/")
    return "" if real == "." else real


def _shown(name: str, hidden: bool) -> bool:
    if name.startswith(WRITE_TEMP_PREFIX):
        return False
    return hidden or not name.startswith(".")


class DirScan:
    """The members of one directory, in batches (:meth:`batch`); owns a
    directory descriptor and a ``scandir`` iterator until :meth:`close`.
    Symlinks and special files are not members (never followed); hidden
    names only with ``hidden``; write temporaries and :data:`PROPS_DIR`
    never.

    Cancellation handling: blocking; the service closes it in a
    ``finally`` (in the pool, or here on the loop when the pool is gone).
    """

    def __init__(self, opener: ContainedRoot, relpath: str, hidden: bool, small: int) -> None:
        self.fd, resolved = opener.open_resolved(relpath or ".")
        self.store = -1
        self._it: Iterator[os.DirEntry[str]] | None = None
        try:
            real = _real(relpath, resolved)
            migrate_old_store(self.fd, opener.root_fd, real)
            self.hidden = hidden
            self.small = small
            self.store = _open_node(opener.root_fd, real)
            self._it = os.scandir(self.fd)
        except BaseException:
            self.close()
            raise

    def batch(self, n: int) -> list[Found]:
        """Up to ``n`` members (fewer only at the end)."""
        out: list[Found] = []
        it = self._it
        while it is not None and len(out) < n:
            entry = next(it, None)
            if entry is None:
                self._it = None
                break
            found = self._found(entry)
            if found is not None:
                out.append(found)
        return out

    def _found(self, entry: os.DirEntry[str]) -> Found | None:
        name = entry.name
        if not _shown(name, self.hidden):
            return None
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            return None
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
            return None
        digest = None
        if stat.S_ISREG(st.st_mode) and st.st_size <= self.small:
            data = _read_at(self.fd, name, self.small)
            digest = None if data is None else content_digest(data)
        props = None
        if self.store >= 0:
            props = _read_at(self.store, props_name(name), MAX_PROPS_BYTES)
        return Found(name, st, digest, props)

    def close(self) -> None:
        it, self._it = self._it, None
        if it is not None and hasattr(it, "close"):
            it.close()
        for fd in (self.store, self.fd):
            if fd >= 0:
                os.close(fd)
        self.store = self.fd = -1


def root_place(opener: ContainedRoot) -> Placement:
    """The root as a :class:`Placement` (its own directory, name ``""``),
    for the root's dead properties."""
    fd = opener.open(".")
    return Placement(fd, "", "", os.fstat(fd), "", opener.root_fd)


# ------------------------------------------------------------ dead properties


def _node_of(place: Placement, create: bool = False) -> int:
    """The node of ``place``'s directory (see :func:`_open_node`), a store
    of the former layout there moved in first."""
    migrate_old_store(place.dir_fd, place.root_fd, place.real)
    return _open_node(place.root_fd, place.real, create)


def read_props(place: Placement) -> bytes | None:
    """The stored dead properties of ``place``'s resource, or None."""
    store = _node_of(place)
    if store < 0:
        return None
    try:
        return _read_at(store, props_name(place.name), MAX_PROPS_BYTES)
    finally:
        os.close(store)


def _atomic_write(dir_fd: int, name: str, data: bytes) -> None:
    """``data`` as ``name`` in ``dir_fd``: temporary (O_EXCL), fsync,
    replace, fsync of the directory; the temporary never survives."""
    temp = WRITE_TEMP_PREFIX + secrets.token_hex(8)
    fd = SYS.open(temp, _CREATE, 0o666, dir_fd=dir_fd)
    done = False
    try:
        view = memoryview(data)
        while view:
            view = view[SYS.write(fd, view) :]  # type: ignore[arg-type]
        SYS.fsync(fd)
        SYS.close(fd)
        fd = -1
        SYS.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        done = True
        SYS.fsync(dir_fd)
    finally:
        if fd >= 0:
            SYS.close(fd)
        if not done:
            try:
                SYS.unlink(temp, dir_fd=dir_fd)
            except FileNotFoundError:
                pass


def write_props(place: Placement, data: bytes | None) -> None:
    """Store ``data`` as the dead properties of ``place``'s resource
    (atomically), or remove them (``data`` None)."""
    if data is None:
        store = _node_of(place)
        if store >= 0:
            try:
                SYS.unlink(props_name(place.name), dir_fd=store)
            except FileNotFoundError:
                pass
            finally:
                os.close(store)
        return
    if place.root_fd < 0:
        raise OSError(errno.ENOTSUP, "no dead-property store without the root's descriptor")
    store = _node_of(place, create=True)
    try:
        _atomic_write(store, props_name(place.name), data)
    finally:
        os.close(store)


def clear_props(place: Placement) -> None:
    """Remove the dead properties of ``place``'s resource and, were it a
    collection, of everything below it (its node): a name made anew
    starts with none."""
    write_props(place, None)
    store = _node_of(place)
    if store < 0:
        return
    try:
        _remove_node(store, node_key(place.name))
    finally:
        os.close(store)


def _remove_node(parent: int, key: str) -> None:
    """Remove node ``key`` of ``parent`` and everything in it.  What a
    concurrent request removes first, or writes meanwhile (a node left
    non-empty: properties of a resource that is gone, harmless), is no
    failure of the removal that asked."""
    try:
        fd = _open_child(parent, key)
    except FileNotFoundError:
        return
    try:
        with os.scandir(fd) as it:
            entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
        for name, is_dir in entries:
            if is_dir:
                _remove_node(fd, name)
            else:
                try:
                    SYS.unlink(name, dir_fd=fd)
                except FileNotFoundError:
                    pass
    finally:
        os.close(fd)
    try:
        os.rmdir(key, dir_fd=parent)
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ENOTEMPTY, errno.EEXIST):
            raise


def _move_props(src: Placement, dst: Placement, keep: bool) -> None:
    """The props of ``src``'s resource become ``dst``'s (copied when
    ``keep``); ``dst``'s old ones are gone either way.  Not ``keep``: a
    collection's node (its members' props) moves too (one rename)."""
    data = read_props(src)
    write_props(dst, data)
    if keep:
        return
    if data is not None:
        write_props(src, None)
    src_node = _node_of(src)
    if src_node < 0:
        return
    try:
        key = node_key(src.name)
        try:
            os.stat(key, dir_fd=src_node, follow_symlinks=False)
        except FileNotFoundError:
            return
        dst_node = _node_of(dst, create=True)
        try:
            _remove_node(dst_node, node_key(dst.name))
            SYS.rename(key, node_key(dst.name), src_dir_fd=src_node, dst_dir_fd=dst_node)
            SYS.fsync(dst_node)
        finally:
            os.close(dst_node)
        SYS.fsync(src_node)
    finally:
        os.close(src_node)


# ------------------------------------------------------------ collections


def make_collection(place: Placement) -> None:
    """MKCOL: ``mkdir`` of ``place``'s name (FileExistsError when taken),
    fsync of its directory; any dead properties a former resource of that
    name left (its own, its former members') are removed first."""
    clear_props(place)
    os.mkdir(place.name, 0o777, dir_fd=place.dir_fd)
    SYS.fsync(place.dir_fd)


def _open_child(dir_fd: int, name: str) -> int:
    return os.open(name, _DIR, dir_fd=dir_fd)


def _tree_entries(
    dir_fd: int, name: str, limit: int, skip: str = ""
) -> Generator[tuple[str, os.DirEntry[str], bool], None, None]:
    """The one bounded walk of a tree: every entry under directory
    ``name`` as (its path relative to it, its scan entry, is it a
    directory), parents before their members, symlinks not followed
    (neither descended into nor counted as directories).  Every entry is
    counted, hidden ones, write temporaries and the dead-property store
    too; :class:`TreeTooLarge` past ``limit``.  ``skip``: a name prefix
    whose entries are counted but neither given nor descended into.

    Blocking.  The directories still to scan are open descriptors, each
    closed once scanned, all of them if the walk stops early (an error,
    or the caller closing the generator)."""
    count = 0
    pending = [(_open_child(dir_fd, name), "")]
    try:
        while pending:
            fd, prefix = pending.pop()
            try:
                with os.scandir(fd) as it:
                    for entry in it:
                        count += 1
                        if count > limit:
                            raise TreeTooLarge
                        if skip and entry.name.startswith(skip):
                            continue
                        is_dir = entry.is_dir(follow_symlinks=False)
                        yield prefix + entry.name, entry, is_dir
                        if is_dir:
                            child = _open_child(fd, entry.name)
                            pending.append((child, prefix + entry.name + "/"))
            finally:
                os.close(fd)
    finally:
        for fd, _ in pending:
            os.close(fd)


def count_tree(dir_fd: int, name: str, limit: int) -> int:
    """Members under directory ``name`` (every entry, hidden ones too, not
    following symlinks); raises :class:`TreeTooLarge` past ``limit``."""
    walk = _tree_entries(dir_fd, name, limit)
    with closing(walk):
        return sum(1 for _ in walk)


def list_tree(dir_fd: int, name: str, limit: int) -> list[tuple[str, bool]]:
    """The members under directory ``name`` as (path relative to it,
    is a directory), parents before their members, not following
    symlinks (a symlink or special file is a member that is no
    directory); the dead-property store and write temporaries are no
    members (not listed, but counted).  Raises :class:`TreeTooLarge`
    past ``limit`` entries, counted as :func:`count_tree` counts them.

    What the service asks the access hook about, member by member,
    before a tree operation changes anything (``members`` of
    :func:`copy_tree`, :func:`remove_tree`, :func:`move_tree`).
    """
    walk = _tree_entries(dir_fd, name, limit, WRITE_TEMP_PREFIX)
    with closing(walk):
        return [(path, is_dir) for path, _, is_dir in walk]


Failures = list[tuple[str, int]]
# The members a tree operation may touch (paths relative to its
# collection, as list_tree gives them), or None: every member.  A member
# outside it (made after the access hook was asked) is left alone and
# reported as failed (EACCES: 403 in the 207).
Members = Container[str] | None


def _refused(path: str, members: Members) -> bool:
    return members is not None and path not in members


def _child_node(node: int, name: str) -> int:
    """The node of directory member ``name`` in ``node``, or -1."""
    if node < 0:
        return -1
    try:
        return _open_child(node, node_key(name))
    except OSError:
        return -1


def _drop_member_props(node: int, name: str, is_dir: bool) -> None:
    """A removed member's dead properties (and a collection's node) go."""
    if node < 0:
        return
    try:
        SYS.unlink(props_name(name), dir_fd=node)
    except FileNotFoundError:
        pass
    if is_dir:
        _remove_node(node, node_key(name))


def _remove_in(
    dir_fd: int,
    prefix: str,
    failed: Failures,
    stop: Callable[[], bool],
    members: Members,
    node: int = -1,
) -> None:
    """Remove every entry of ``dir_fd`` (post-order), recording failures;
    a member outside ``members`` stays (temporaries, and a store of the
    former layout, go).  ``node``: the directory's store node (-1: none):
    each removed member's dead properties go with it."""
    with os.scandir(dir_fd) as it:
        names = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
    for name, is_dir in names:
        if stop():
            raise OSError(errno.ECANCELED, "tree operation stopped")
        path = prefix + name
        # Temporaries (and a former-layout store) are no members: removed
        # with their directory, whatever they hold.
        housekeeping = name.startswith(WRITE_TEMP_PREFIX)
        try:
            if not housekeeping and _refused(path, members):
                raise OSError(errno.EACCES, "member not decided by the access hook")
            if is_dir:
                fd = _open_child(dir_fd, name)
                sub = -1 if housekeeping else _child_node(node, name)
                try:
                    kept = None if housekeeping else members
                    _remove_in(fd, path + "/", failed, stop, kept, sub)
                finally:
                    os.close(fd)
                    if sub >= 0:
                        os.close(sub)
                os.rmdir(name, dir_fd=dir_fd)
            else:
                SYS.unlink(name, dir_fd=dir_fd)
            if not housekeeping:
                _drop_member_props(node, name, is_dir)
        except OSError as exc:
            if exc.errno == errno.ECANCELED:
                raise
            if exc.errno != errno.ENOTEMPTY:  # a member's failure was reported
                failed.append((path + ("/" if is_dir else ""), exc.errno or errno.EIO))


def remove_tree(
    place: Placement, limit: int, stop: Callable[[], bool], members: Members = None
) -> Failures:
    """DELETE of ``place``'s resource (a file or a collection and all its
    members, at most ``limit``: :class:`TreeTooLarge` before anything is
    removed), its dead properties with it.  Returns the members that could
    not be removed (relative path, errno); their ancestors stay too, and
    so do their dead properties.
    ``members``: the members the access hook allowed (see :data:`Members`)."""
    cur = place.current
    failed: Failures = []
    if cur is not None and stat.S_ISDIR(cur.st_mode):
        count_tree(place.dir_fd, place.name, limit)
        fd = _open_child(place.dir_fd, place.name)
        parent = _node_of(place)
        node = _child_node(parent, place.name)
        try:
            _remove_in(fd, "", failed, stop, members, node)
        finally:
            os.close(fd)
            for held in (node, parent):
                if held >= 0:
                    os.close(held)
        if not failed:
            os.rmdir(place.name, dir_fd=place.dir_fd)
    else:
        SYS.unlink(place.name, dir_fd=place.dir_fd)
    if not failed:
        clear_props(place)
    SYS.fsync(place.dir_fd)
    return failed


def _copy_file(src_dir: int, name: str, dst_dir: int, dst_name: str) -> None:
    """One file: a temporary in ``dst_dir`` (O_EXCL), its bytes, fsync,
    replace onto ``dst_name``; the temporary is removed on any failure."""
    fd = os.open(name, _READ, dir_fd=src_dir)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        temp = WRITE_TEMP_PREFIX + secrets.token_hex(8)
        out = SYS.open(temp, _CREATE, st.st_mode & 0o777 or 0o666, dir_fd=dst_dir)
        done = False
        try:
            while chunk := os.read(fd, _COPY_CHUNK):
                view = memoryview(chunk)
                while view:
                    view = view[SYS.write(out, view) :]  # type: ignore[arg-type]
            SYS.fsync(out)
            SYS.close(out)
            out = -1
            SYS.replace(temp, dst_name, src_dir_fd=dst_dir, dst_dir_fd=dst_dir)
            done = True
        finally:
            if out >= 0:
                SYS.close(out)
            if not done:
                try:
                    SYS.unlink(temp, dir_fd=dst_dir)
                except FileNotFoundError:
                    pass
    finally:
        os.close(fd)


class _DstNode:
    """A copy's destination node, made (its parents first) and opened on
    first use: a tree without dead properties makes none."""

    def __init__(self, parent: _DstNode | None, key: str, make: Callable[[], int] | None = None):
        self.parent, self.key, self.make, self.fd = parent, key, make, -1

    def get(self) -> int:
        if self.fd < 0:
            if self.parent is None:
                assert self.make is not None
                self.fd = self.make()
            else:
                up = self.parent.get()
                try:
                    os.mkdir(self.key, 0o777, dir_fd=up)
                except FileExistsError:
                    pass
                self.fd = _open_child(up, self.key)
        return self.fd

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            try:
                SYS.fsync(fd)
            finally:
                os.close(fd)


def _copy_member_props(src_node: int, dst_node: _DstNode, name: str) -> None:
    """Copy ``name``'s dead properties from ``src_node`` into ``dst_node``."""
    if src_node < 0:
        return
    pname = props_name(name)
    try:
        st = os.stat(pname, dir_fd=src_node, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISREG(st.st_mode):
        _copy_file(src_node, pname, dst_node.get(), pname)


def _copy_in(
    src: int,
    dst: int,
    prefix: str,
    failed: Failures,
    stop: Callable[[], bool],
    members: Members,
    nodes: tuple[int, _DstNode],
) -> None:
    """Copy every member of directory ``src`` into directory ``dst``
    (temporaries skipped, symlinks and special files skipped), each
    member's dead properties with it (``nodes``: the source's store node,
    -1 for none, and the destination's); a member outside ``members`` is
    not read (a failure), nor are its dead properties."""
    src_node, dst_node = nodes
    with os.scandir(src) as it:
        entries = [
            (e.name, e.is_dir(follow_symlinks=False), e.is_file(follow_symlinks=False)) for e in it
        ]
    for name, is_dir, is_file in entries:
        if stop():
            raise OSError(errno.ECANCELED, "tree operation stopped")
        if name.startswith(WRITE_TEMP_PREFIX):
            continue  # temporaries (and a former-layout store) are no members
        path = prefix + name
        try:
            if _refused(path, members):
                raise OSError(errno.EACCES, "member not decided by the access hook")
            if is_dir:
                try:
                    os.mkdir(name, 0o777, dir_fd=dst)
                except FileExistsError:
                    pass
                s, d = _open_child(src, name), _open_child(dst, name)
                sub = (_child_node(src_node, name), _DstNode(dst_node, node_key(name)))
                try:
                    _copy_in(s, d, path + "/", failed, stop, members, sub)
                finally:
                    os.close(s)
                    os.close(d)
                    if sub[0] >= 0:
                        os.close(sub[0])
                    sub[1].close()
            elif is_file:
                _copy_file(src, name, dst, name)
            else:
                continue
            _copy_member_props(src_node, dst_node, name)
        except OSError as exc:
            if exc.errno == errno.ECANCELED:
                raise
            failed.append((path, exc.errno or errno.EIO))
    SYS.fsync(dst)


def _copy_members(
    src: Placement, dst: Placement, failed: Failures, stop: Callable[[], bool], members: Members
) -> None:
    """The members of collection ``src`` into the new collection ``dst``,
    with their dead properties (the collections' store nodes)."""
    s, d = _open_child(src.dir_fd, src.name), _open_child(dst.dir_fd, dst.name)
    src_parent = _node_of(src)
    src_node = _child_node(src_parent, src.name)
    top = _DstNode(None, "", lambda: _node_of(dst, create=True))
    dst_node = _DstNode(top, node_key(dst.name))
    try:
        _copy_in(s, d, "", failed, stop, members, (src_node, dst_node))
    finally:
        os.close(s)
        os.close(d)
        for held in (src_node, src_parent):
            if held >= 0:
                os.close(held)
        dst_node.close()
        top.close()


def copy_tree(
    src: Placement,
    dst: Placement,
    infinity: bool,
    limit: int,
    stop: Callable[[], bool],
    members: Members = None,
) -> Failures:
    """COPY of ``src``'s resource to ``dst``'s name (which the caller has
    cleared, or which is a file a file copy replaces atomically), its
    dead properties with it.  A collection: its members too when
    ``infinity`` (at most ``limit``: :class:`TreeTooLarge` before anything
    is made), else the collection alone (Depth 0, RFC 4918 §9.8.3).
    ``members``: those the access hook allowed (see :data:`Members`).
    Returns the members that could not be copied."""
    cur = src.current
    assert cur is not None
    failed: Failures = []
    if stat.S_ISDIR(cur.st_mode):
        if infinity:
            count_tree(src.dir_fd, src.name, limit)
        os.mkdir(dst.name, 0o777, dir_fd=dst.dir_fd)
        if infinity:
            _copy_members(src, dst, failed, stop, members)
    else:
        _copy_file(src.dir_fd, src.name, dst.dir_fd, dst.name)
    _move_props(src, dst, keep=True)
    SYS.fsync(dst.dir_fd)
    return failed


def move_tree(
    src: Placement, dst: Placement, limit: int, stop: Callable[[], bool], members: Members = None
) -> Failures:
    """MOVE of ``src``'s resource to ``dst``'s name (cleared by the
    caller): one rename (atomic, the members and their dead properties
    move with the directory) and the resource's own dead properties;
    across filesystems (EXDEV: a ``--mount``) a copy then a removal of
    ``members`` (see :data:`Members`; the rename moves what is there)."""
    try:
        SYS.rename(src.name, dst.name, src_dir_fd=src.dir_fd, dst_dir_fd=dst.dir_fd)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        failed = copy_tree(src, dst, True, limit, stop, members)
        if failed:
            return failed
        return remove_tree(src, limit, stop, members)
    _move_props(src, dst, keep=False)
    SYS.fsync(dst.dir_fd)
    if src.dir_fd != dst.dir_fd:
        SYS.fsync(src.dir_fd)
    return []


def _tree_bytes(dir_fd: int, name: str, limit: int) -> int:
    """The bytes of every regular file under directory ``name`` (hidden
    ones and dead properties too, not following symlinks), at most
    ``limit`` members (:class:`TreeTooLarge`, as :func:`count_tree`)."""
    walk = _tree_entries(dir_fd, name, limit)
    with closing(walk):
        return sum(
            entry.stat(follow_symlinks=False).st_size
            for _, entry, is_dir in walk
            if not is_dir and entry.is_file(follow_symlinks=False)
        )


def copy_room(
    src: Placement, dst: Placement, move: bool, infinity: bool, limit: int, min_free: int
) -> None:
    """``--min-free-space`` before a COPY of ``src``'s resource to ``dst``
    (or a MOVE, which writes only across filesystems: a rename needs no
    room): :class:`~serverio.fs.writer.WriteRefused` ``NO_SPACE`` when
    ``dst``'s filesystem would keep less than ``min_free`` free after the
    bytes the copy writes (the file's, or every file's of the tree with
    ``infinity``, at most ``limit`` members, and the dead properties).
    Blocking; nothing is held after it."""
    cur = src.current
    assert cur is not None
    if not min_free or (move and os.fstat(dst.dir_fd).st_dev == cur.st_dev):
        return
    if not stat.S_ISDIR(cur.st_mode):
        size = cur.st_size
    else:
        size = _tree_bytes(src.dir_fd, src.name, limit) if infinity else 0
    store = _node_of(src)
    if store >= 0:
        try:
            size += os.stat(props_name(src.name), dir_fd=store, follow_symlinks=False).st_size
        except FileNotFoundError:
            pass
        finally:
            os.close(store)
    require_free(dst, min_free + size)


class TreeJob:
    """What one DAV operation holds (directory descriptors: placements,
    a :class:`DirScan`) across its pool calls, and who closes it.

    Cancellation handling: the trio side calls :meth:`release` in a
    ``finally``: True when no thread is inside :meth:`run` (the caller
    then calls :meth:`close`, on the loop: closes only); False when a
    thread is (its caller was cancelled and abandoned it): that thread
    closes everything as its step ends, so no descriptor is closed under
    a thread still using it.  :meth:`stopped` is the tree operations'
    ``stop``: true once released, so an abandoned tree operation ends at
    its next member.
    """

    def __init__(self) -> None:
        self.closers: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._busy = False
        self._released = False

    def hold(self, closer: Callable[[], None]) -> None:
        """Close with the job (trio side, before any :meth:`release`)."""
        self.closers.append(closer)

    def run(self, step: Callable[..., T], *args: Any) -> T:
        """``step(*args)`` as the job's thread (blocking)."""
        with self._lock:
            if self._released:
                raise OSError(errno.ECANCELED, "operation released")
            self._busy = True
        try:
            return step(*args)
        finally:
            if self._leave():  # released meanwhile: its caller was cancelled
                self.close()

    def _leave(self) -> bool:
        with self._lock:
            self._busy = False
            return self._released

    def stopped(self) -> bool:
        return self._released

    def release(self) -> bool:
        with self._lock:
            self._released = True
            return not self._busy

    def close(self) -> None:
        closers, self.closers = self.closers, []
        for close in closers:
            try:
                close()
            except OSError:
                pass
