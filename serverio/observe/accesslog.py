"""Access log lines: common, combined and JSON.

Never logs request bodies or raw header bytes; every value that came from the
client is escaped so it cannot forge a log line: in ``common`` and
``combined``, control characters, non-ASCII bytes, quotes and backslashes
become ``\\xNN`` escapes; ``json`` uses JSON's own ``\\uNNNN`` escapes
(lossless).  The request id is the client's ``X-Request-Id``, if any.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from typing import TextIO

from .logpipe import LogPipe, open_append

__all__ = ["AccessLog", "AccessRecord"]

_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _user(value: str | None) -> str:
    """The user field of a common/combined line: "-" for none; escaped as
    the quoted fields are, and a space too (the field is not quoted)."""
    if not value:
        return "-"
    return _escape(value).replace(" ", "\\x20")


def _escape(value: str) -> str:
    # Values are latin-1 decodings of the wire bytes, so every non-printable
    # or non-ASCII character becomes \xNN: the exact byte the client sent,
    # and a line that cannot be split, recoloured or mis-decoded by a viewer.
    if value.isascii() and value.isprintable() and '"' not in value and "\\" not in value:
        return value
    out = []
    for ch in value:
        o = ord(ch)
        if o < 0x20 or o >= 0x7F or ch in '"\\':
            out.append(f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}")
        else:
            out.append(ch)
    return "".join(out)


@dataclass(frozen=True, slots=True)
class AccessRecord:
    client: str
    method: str
    target: str
    version: str
    status: int
    size: int
    duration: float
    user_agent: str | None = None
    referer: str | None = None
    request_id: str | None = None
    # The response was cut off (client gone, write deadline, shutdown's
    # abort) after its head: ``size`` is the body bytes actually sent.
    cut: bool = False
    # The signed-in user (verified credentials), None for none: the third
    # field of the common format (RFC 1413's field, the second, stays "-").
    user: str | None = None


class AccessLog:
    """Formats and writes one line per response.

    A response cut off mid-body (the client went away, ``--write-timeout``,
    the abort after ``--shutdown-timeout``) is logged too, with the body
    bytes actually handed to the kernel and a marker: `` cut`` at the end
    of a ``common``/``combined`` line, ``"cut": true`` in ``json`` (a
    complete response has neither, so existing parsers see no change).

    The timestamp string is memoised per second.  ``fmt`` is one of
    ``common``, ``combined``, ``json``; ``off`` makes :meth:`write` a no-op.

    Lines go through :attr:`pipe` (:class:`~serverio.observe.logpipe.LogPipe`):
    while the server serves, its writer task writes them in a thread, and
    a log reader that stalls (a full stderr pipe) costs dropped lines,
    counted in ``lines_dropped`` (``serverio_log_lines_dropped_total``),
    never a blocked event loop.  Without a running writer (no ``serve()``)
    a line is written at once, as before.

    ``path`` (``--access-log-file``): append to that file instead of
    ``stream``; :meth:`reopen` (SIGHUP) reopens it by name, so logrotate can
    move the old file away first.  Several ``--workers`` processes may share
    one file: it is opened with O_APPEND and written by whole lines, so
    lines do not interleave.
    """

    def __init__(self, fmt: str, stream: TextIO | None = None, *, path: str | None = None) -> None:
        self.fmt = fmt
        self.path = path
        self.enabled = fmt != "off"
        self.pipe = LogPipe(stream, name="log")
        if path is not None and self.enabled:
            target = open_append(path)
            self.pipe.retarget(target)
        self.stream = stream if stream is not None else sys.stderr
        self._sec = -1
        self._stamp = ""

    @property
    def lines_dropped(self) -> int:
        """Lines dropped: the reader stalled with the buffer full, or the
        stream failed."""
        return self.pipe.counts.lines_dropped

    def reopen(self) -> None:
        """Reopen ``path`` (after logrotate moved it).  No-op without a path.

        If the new file cannot be opened, keep writing to the old one and
        say so on stderr: losing the log silently is worse than a stale name.
        """
        if self.path is None or self.fmt == "off":
            return
        try:
            target = open_append(self.path)
        except OSError as exc:
            print(f"serverio: error: cannot reopen access log: {exc}", file=sys.stderr)
            return
        self.pipe.retarget(target)  # the old file is closed once no write uses it
        self.enabled = True

    def close(self) -> None:
        """Close the log file (not stderr, not a caller's stream)."""
        self.pipe.close()

    def _clf_time(self, now: float) -> str:
        sec = int(now)
        if sec != self._sec:
            t = time.gmtime(sec)
            self._stamp = (
                f"{t.tm_mday:02d}/{_MONTHS[t.tm_mon - 1]}/{t.tm_year}:"
                f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} +0000"
            )
            self._sec = sec
        return self._stamp

    def format(self, r: AccessRecord, now: float) -> str:
        if self.fmt == "json":
            return json.dumps(
                {
                    "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
                    "client": r.client,
                    "method": r.method,
                    "target": r.target,
                    "version": r.version,
                    "status": r.status,
                    "bytes": r.size,
                    "duration": round(r.duration, 6),
                    "user_agent": r.user_agent,
                    "referer": r.referer,
                    "request_id": r.request_id,
                    **({"user": r.user} if r.user else {}),
                    **({"cut": True} if r.cut else {}),
                },
                ensure_ascii=True,
            )
        line = (
            f"{r.client} - {_user(r.user)} [{self._clf_time(now)}] "
            f'"{_escape(r.method)} {_escape(r.target)} '
            f'HTTP/{r.version}" {r.status} {r.size if r.size else "-"}'
        )
        if self.fmt == "combined":
            line += f' "{_escape(r.referer or "-")}" "{_escape(r.user_agent or "-")}"'
        if r.cut:
            line += " cut"
        return line

    def write(self, r: AccessRecord, now: float) -> None:
        """Hand the line to :attr:`pipe`: never blocks while the server serves.

        Cancellation handling: nothing here waits; a line the pipe cannot
        take (buffer full, stream stuck or broken) is dropped and counted.
        """
        if self.enabled:
            self.pipe.put(self.format(r, now))
