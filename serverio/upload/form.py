"""Browser uploads: a ``multipart/form-data`` POST to a directory (``--upload``).

The listing page's form (:mod:`serverio.upload.page`) posts here; so may
``curl -F file=@a.txt -F file=@b.txt http://host/dir/``.  One form, in order
(the upload service has already checked the directory path, the request's
origin, the access hook on the directory and the writes-in-flight budget):

* the body is parsed incrementally (:class:`serverio.writes.multipart.MultipartParser`,
  fed each chunk as it is pulled: never the whole body);
* every part with a ``filename`` is a file: its name is reduced to a safe
  base name (:func:`serverio.fs.names.reduce_name`: no directory part,
  no ``..``, no control character, NFC, the Windows rules; 400 otherwise),
  the duplicate policy picks where it goes (``--on-duplicate``:
  :func:`serverio.fs.names.pick_name`), the access hook is asked on
  that final path (``Kind.WRITE``, ``"put"``: the ``[[writable]]`` tables,
  then the ``[[auth]]`` rules, exactly as for a PUT of that file; a
  refusal ends the form with it, 401 / 403, before a byte of the file is
  written: the directory's rule alone is not the file's), and its content streams into
  a temporary file of its own in the directory, committed atomically (fsync,
  no-replace or replacing rename, fsync of the directory) when its part
  ends; a part with an empty ``filename`` (a form sent with no file
  chosen) is skipped;
* a ``mkdir`` field makes a directory of that name
  (:func:`serverio.fs.writer.make_directory`), once the access hook
  allows its own path (``/dir/name/``, ``"put"``, as a MKCOL);
* other fields are read and ignored (each at most :data:`MAX_FIELD_BYTES`).

Each file is atomic: a reader sees it whole or not at all.  The request is
not: files whose part ended before a failure stay (each complete), the
answer is the failure's status, and the file in progress is removed.

Bounds: ``--max-upload-size`` per file and for the whole request body
(413), the parser's part and header bounds (413), one temporary at a time.

Cancellation handling: the file in progress is the only thing held; the
``finally`` of :func:`post_form` settles it (its temporary removed,
shielded and bounded, before the request's task ends: the upload
service's ``settle``, as for a PUT).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from ..concurrency.blocking import Pool, run_blocking
from ..config import Config
from ..errors import HTTPError
from ..fs.names import OnDuplicate, UnsafeName, check_name, pick_name, reduce_name
from ..fs.opener import ContainedRoot
from ..fs.writer import (
    SYS,
    Placement,
    Refusal,
    WriteJob,
    WriteRefused,
    make_directory,
    open_target,
    writable_current,
)
from ..http.access import AccessTarget, Kind, Right
from ..http.core import Plan, RequestFacts, error_plan
from ..observe.stats import Stats
from ..pipeline.hooks import Admit, WriteContent
from ..writes.multipart import MultipartParser, PartData, PartEnd, PartStart, boundary_of
from .decide import (
    REFUSAL_STATUS,
    duplicate_problem,
    form_answer,
    name_problem,
    refusal_problem,
    too_large_problem,
)
from .fields import CONTENT_TYPE

__all__ = ["MAX_FIELD_BYTES", "MKDIR_FIELD", "WriteKit", "place_file", "post_form"]

# The form field whose value is the name of a directory to make.
MKDIR_FIELD: Final = "mkdir"
# A plain field's value is kept up to this many bytes (400 past it).
MAX_FIELD_BYTES: Final = 1024
_WINDOWS: Final = sys.platform == "win32"

log = logging.getLogger("serverio")


class _FileRefused(Exception):
    """A form file whose own path the access hook refused: ``plan`` is
    the refusal to answer the form with (401 and its challenge, 403)."""

    def __init__(self, plan: Plan) -> None:
        super().__init__(plan.status)
        self.plan = plan


class WriteKit(Protocol):
    """What a form needs of the upload service (:class:`serverio.upload.service.Uploads`)."""

    config: Config
    stats: Stats
    pool: Pool
    opener: Callable[[], ContainedRoot]

    async def step(self, job: WriteJob, fn: Callable[..., Any], *args: Any) -> Any: ...

    async def settle(self, job: WriteJob) -> None: ...

    def changed(self, relpath: str) -> None: ...


def _exists(place: Placement, name: str) -> bool:
    path, kw = place.at(name)
    try:
        SYS.lstat(path, **kw)
    except FileNotFoundError:
        return False
    return True


def place_file(
    opener: ContainedRoot,
    directory: tuple[str, ...],
    name: str,
    policy: OnDuplicate,
    hidden: bool,
    min_free: int,
) -> Placement:
    """Where a form's file ``name`` (already reduced) goes in
    ``directory``: a :class:`Placement` whose ``current`` is the file it
    replaces (``overwrite``) or None (a name that must stay free: the
    commit renames without replacing).  Blocking.

    Raises :class:`WriteRefused` as :func:`serverio.fs.writer.open_target`
    does, and ``EXISTS`` when the policy finds no name (``error`` on a
    taken name, ``rename`` with every variant taken).

    Cancellation handling: run in the ``write`` pool with
    ``late_close=Placement.close``; it closes the directory itself when
    it raises.
    """
    place = open_target(opener, (*directory, name), hidden, min_free)
    try:
        picked = pick_name(
            name,
            policy,
            lambda n: place.current is not None if n == name else _exists(place, n),
            hidden=hidden,
            windows=_WINDOWS,
        )
    except UnsafeName:
        place.close()
        raise WriteRefused(Refusal.EXISTS) from None
    if not picked.overwrite:
        place.current = None
    place.name = picked.name
    return place


@dataclass
class _Form:
    """One form's state: the file in progress (``job``), the plain field
    being read, what was made."""

    kit: WriteKit
    req: RequestFacts
    admit: Admit | None = None  # the access hook (None: no rules, tests)
    job: WriteJob | None = None
    overwrite: bool = False
    field_name: str | None = None
    value: bytearray | None = None
    files: list[tuple[str, int]] = field(default_factory=list)
    directories: list[str] = field(default_factory=list)
    touched: bool = False  # a temporary was made (an abort counts then)
    naming: str = ""  # the file being placed (named by a 409's problem)

    async def start(self, ev: PartStart) -> None:
        cfg = self.kit.config
        hidden = cfg.files.hidden
        if ev.filename is None:
            self.field_name, self.value = ev.name, bytearray()
            return
        self.field_name, self.value = None, None
        if ev.filename == "":
            return  # a file input left empty: browsers send such a part
        try:
            name = reduce_name(ev.filename, hidden=hidden, windows=_WINDOWS)
        except UnsafeName as exc:
            raise HTTPError(
                400,
                f"unsafe file name: {exc.problem.value}",
                problem=name_problem(exc.problem.value, ev.filename),
            ) from None
        self.naming = name
        pol = cfg.uploads
        min_free = pol.min_free_space
        place: Placement = await run_blocking(
            self.kit.pool,
            place_file,
            self.kit.opener(),
            self.req.target.segments,
            name,
            OnDuplicate(pol.on_duplicate),
            hidden,
            min_free,
            late_close=Placement.close,
        )
        job = self.job = WriteJob(place, sync=not pol.no_fsync, min_free=min_free)
        self.overwrite = place.current is not None
        if self.admit is not None:
            # The file's own rule, on the path it would land at (after
            # --on-duplicate picked it): as a PUT of it would be asked, an
            # upload of a new name or an overwrite of an existing file.
            # The job holds the directory, so a refusal settles it.
            path = "/" + "/".join((*self.req.target.segments, place.name))
            right = Right.OVERWRITE if self.overwrite else Right.UPLOAD
            denied = await self.admit(AccessTarget((path,), Kind.WRITE, right))
            if denied is not None:
                raise _FileRefused(denied)
        refusal = writable_current(place.current)
        if refusal is not None:
            raise WriteRefused(refusal)  # a directory or special file of that name
        self.touched = True
        await self.kit.step(job, job.create)

    async def data(self, ev: PartData) -> None:
        job = self.job
        if job is not None:
            if job.written + len(ev.data) > self.kit.config.uploads.max_upload_size:
                limit = self.kit.config.uploads.max_upload_size
                raise HTTPError(413, "file too large", close=True, problem=too_large_problem(limit))
            await self.kit.step(job, job.write, ev.data)
        elif self.value is not None:
            if len(self.value) + len(ev.data) > MAX_FIELD_BYTES:
                raise HTTPError(400, "form field too long")
            self.value += ev.data

    async def end(self) -> None:
        job = self.job
        if job is not None:
            await self.kit.step(job, job.commit, not self.overwrite, False, None)
            self.job = None
            await self.kit.settle(job)
            relpath = "/".join((*self.req.target.segments, job.place.name))
            self.kit.changed(relpath)
            writes = self.kit.stats.writes
            writes.files += 1
            writes.bytes += job.written
            self.files.append((job.place.name, job.written))
        elif self.field_name == MKDIR_FIELD and self.value is not None:
            await self._mkdir(bytes(self.value))
        self.field_name, self.value = None, None

    async def _mkdir(self, raw: bytes) -> None:
        hidden = self.kit.config.files.hidden
        try:
            name = check_name(raw.decode("utf-8").strip(), hidden=hidden, windows=_WINDOWS)
        except UnsafeName as exc:
            problem = name_problem(exc.problem.value, raw.decode("utf-8", "replace").strip())
            raise HTTPError(400, "unsafe directory name", problem=problem) from None
        except UnicodeDecodeError:
            problem = name_problem("not valid UTF-8")
            raise HTTPError(400, "unsafe directory name", problem=problem) from None
        if self.admit is not None:
            # The new folder's own rule, as a MKCOL of it would be asked.
            path = "/" + "/".join((*self.req.target.segments, name)) + "/"
            denied = await self.admit(AccessTarget((path,), Kind.WRITE, Right.MKDIR))
            if denied is not None:
                raise _FileRefused(denied)
        await run_blocking(
            self.kit.pool,
            make_directory,
            self.kit.opener(),
            (*self.req.target.segments, name),
            hidden,
        )
        self.kit.changed("/".join((*self.req.target.segments, name)))
        self.directories.append(name)
        self.kit.stats.writes.directories += 1


async def post_form(
    kit: WriteKit,
    req: RequestFacts,
    content: WriteContent,
    now: float,
    admit: Admit | None = None,
) -> Plan:
    """The answer to a form POST to the directory ``req`` names (see the
    module docstring): 303 See Other back to the listing, or 201 with a
    JSON summary when ``Accept`` asks for JSON (:func:`form_answer`).
    ``admit``: the access hook, asked on each file's final path.

    Cancellation handling: see the module docstring; a cancelled form
    leaves no temporary and no descriptor; files whose part had ended
    stay committed.
    """
    ctype = CONTENT_TYPE.of(req)
    if ctype is None:
        return error_plan(415, now)
    try:
        parser = MultipartParser(boundary_of(ctype.encode("latin-1")))
    except HTTPError as exc:
        return error_plan(exc.status, now)  # 415 not a form, 400 no boundary
    limit = kit.config.uploads.max_upload_size
    if content.declared is not None and content.declared > limit:
        kit.stats.writes.aborted += 1
        return error_plan(413, now, close=True, problem=too_large_problem(limit))
    form = _Form(kit, req, admit)
    done = False
    try:
        total = 0
        while (chunk := await content.next_chunk()) is not None:
            total += len(chunk)
            if total > limit:
                return error_plan(413, now, close=True, problem=too_large_problem(limit))
            for ev in parser.feed(chunk):
                if type(ev) is PartData:
                    await form.data(ev)
                elif type(ev) is PartStart:
                    await form.start(ev)
                elif type(ev) is PartEnd:
                    await form.end()
        parser.end()
        done = True
    except HTTPError as exc:
        # The form's own refusals (a bad name 400, a file too large 413) and
        # the parser's (malformed 400, too many parts 413): the body is not
        # read to its end, so a 413 closes the connection.
        log.info("form upload to %s refused: %s", req.target.relpath, exc.detail)
        close = exc.close or exc.status == 413
        return error_plan(exc.status, now, close=close, problem=exc.problem)
    except _FileRefused as exc:
        log.info("form upload to %s refused: a file's own access rule", req.target.relpath)
        if not form.touched:  # else the finally counts this form's abort
            kit.stats.writes.aborted += 1
        return exc.plan
    except WriteRefused as exc:
        if exc.refusal is Refusal.EXISTS:
            # --on-duplicate error, or a name taken meanwhile
            return error_plan(409, now, problem=duplicate_problem(form.naming))
        value = exc.refusal.value
        return error_plan(REFUSAL_STATUS[value], now, problem=refusal_problem(value))
    finally:
        job, form.job = form.job, None
        if not done and form.touched:
            kit.stats.writes.aborted += 1
        if job is not None:
            await kit.settle(job)
    return form_answer(req, form.files, form.directories, now)
