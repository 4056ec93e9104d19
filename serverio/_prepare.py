"""The preparation step: the only code that touches the filesystem per request.

One call does containment, open, fstat, regular-file validation, MIME
selection, the decision (pure core) and, for small bodies, the read.  It is
one call so that it costs one thread hop when it runs in the ``fs`` pool
(:mod:`serverio._blocking`); it is synchronous and never touches trio.

It returns a :class:`Prepared`: the plan plus, when the body must be streamed
from the file, the opened descriptor.  Whoever receives a ``Prepared`` owns
that descriptor and must call :meth:`Prepared.close` exactly once (the
response emitter does, or the late-close path if the waiter was cancelled).
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from dataclasses import dataclass, field

from ._config import Config
from ._core import (
    FileFacts,
    FileSpan,
    Plan,
    RequestFacts,
    decide_directory,
    decide_file,
    error_plan,
)
from ._fsopen import RootOpener
from ._mime import guess_type

__all__ = ["Prepared", "prepare"]

log = logging.getLogger("serverio")

_NOT_FOUND_ERRNOS = frozenset(
    {errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EXDEV, errno.ENAMETOOLONG, errno.EINVAL}
)
_FORBIDDEN_ERRNOS = frozenset({errno.EACCES, errno.EPERM})
_OVERLOAD_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM})


@dataclass(slots=True)
class Prepared:
    """A plan, and the open file it streams from (``fd == -1``: none)."""

    plan: Plan
    fd: int = -1
    facts: FileFacts | None = field(default=None)

    def close(self) -> None:
        """Close the descriptor; safe to call again (the second call is a no-op)."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)


def _errno_plan(exc: OSError, now: float, head: bool) -> Plan:
    if exc.errno in _NOT_FOUND_ERRNOS:
        return error_plan(404, now, head_only=head)
    if exc.errno in _FORBIDDEN_ERRNOS:
        return error_plan(403, now, head_only=head)
    if exc.errno in _OVERLOAD_ERRNOS:
        return error_plan(503, now, headers=[(b"retry-after", b"1")], close=True, head_only=head)
    log.error("filesystem error %s while preparing a response", errno.errorcode.get(exc.errno or 0))
    return error_plan(500, now, head_only=head)


def _read_spans(fd: int, plan: Plan) -> bool:
    """Replace the plan's file spans with their bytes.  False if the file shrank."""
    body: list[bytes | FileSpan] = []
    for piece in plan.body:
        if isinstance(piece, FileSpan):
            data = os.pread(fd, piece.length, piece.offset)
            while len(data) < piece.length:
                more = os.pread(fd, piece.length - len(data), piece.offset + len(data))
                if not more:
                    return False
                data += more
            body.append(data)
        else:
            body.append(piece)
    plan.body = tuple(body)
    return True


def prepare(
    req: RequestFacts, cfg: Config, opener: RootOpener, now: float, boundary: str = ""
) -> Prepared:
    """Resolve, open, validate and decide.  Blocking; never raises for
    filesystem trouble (it becomes a plan)."""
    head = req.method == b"HEAD"
    target = req.target
    fd = -1
    try:
        fd = opener.open(target.relpath)
        st = os.fstat(fd)
        name = target.segments[-1] if target.segments else ""
        if stat.S_ISDIR(st.st_mode):
            if not target.slash and target.segments:
                return Prepared(decide_directory(req, cfg, now))
            os.close(fd)
            fd = -1
            for index in cfg.index:
                rel = f"{target.relpath}/{index}" if target.segments else index
                try:
                    fd = opener.open(rel)
                except OSError as exc:
                    if exc.errno in _NOT_FOUND_ERRNOS or exc.errno in _FORBIDDEN_ERRNOS:
                        continue
                    raise
                st = os.fstat(fd)
                if stat.S_ISREG(st.st_mode):
                    name = index
                    break
                os.close(fd)
                fd = -1
            else:
                return Prepared(decide_directory(req, cfg, now))
        elif not stat.S_ISREG(st.st_mode):
            # FIFO, socket, device: never served (opened O_NONBLOCK, so the
            # open itself could not hang).
            return Prepared(error_plan(404, now, head_only=head))
        elif target.slash:
            # "/file.txt/" names a directory that does not exist (POSIX
            # resolution would have said ENOTDIR for "file.txt/.").
            return Prepared(error_plan(404, now, head_only=head))
        facts = FileFacts(
            size=st.st_size,
            mtime_ns=st.st_mtime_ns,
            dev=st.st_dev,
            ino=st.st_ino,
            content_type=guess_type(name),
        )
        plan = decide_file(req, facts, cfg, now, boundary)
        if not plan.needs_file:
            return Prepared(plan, facts=facts)
        if plan.file_bytes <= cfg.small_file_size:
            # Small body: read it now, in this same hop, and send it with the
            # head in one write.  The file is closed before we return.
            if not _read_spans(fd, plan):
                return Prepared(error_plan(503, now, headers=[(b"retry-after", b"1")]), facts=facts)
            return Prepared(plan, facts=facts)
        prepared = Prepared(plan, fd, facts)
        fd = -1  # ownership moves to the caller
        return prepared
    except OSError as exc:
        return Prepared(_errno_plan(exc, now, head))
    finally:
        if fd >= 0:
            os.close(fd)
