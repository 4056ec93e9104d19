"""Resumable uploads: the flows of creation, append, offset and cancel.

The imperative half of :class:`serverio.resumable.service.Resumable`
(its base class): each flow asks :mod:`serverio.resumable.protocol` what
to do with the request facts and the upload's state, runs the blocking
steps through a :class:`~serverio.resumable.transfer.Holding`, and settles
the upload (fsync, close) in its ``finally``.

:class:`Quota` counts, per client, the bytes of the incomplete uploads
this process made or found at start-up (``--max-incomplete-per-client``).

Cancellation handling: every flow that holds an upload settles it in
``finally`` (:meth:`~serverio.resumable.transfer.Holding.settle`): bytes
that reached the file stay and are fsynced, descriptors are closed, and
the request's entry in ``holders`` is removed; a flow cancelled before
its upload exists leaves nothing (a creation's files, once made, are an
incomplete upload like any other, reported by HEAD, removed at expiry).
"""

from __future__ import annotations

import hashlib
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable

import trio

from ..concurrency.blocking import run_blocking
from ..config import Config
from ..fs.prepare import stat_facts
from ..fs.writer import Refusal, WriteRefused
from ..http.access import AccessTarget, Kind, Right
from ..http.core import Plan, RequestFacts, common_fields
from ..http.target import Target
from ..pipeline.hooks import Admit, WriteContent, interim_of
from ..signing import Signer
from ..site.rules import match_path
from ..upload.decide import created_plan as file_created
from ..upload.decide import has_preconditions, is_create_only, replaced_plan
from ..upload.service import Uploads
from ..writes.digest import parse_digests
from .protocol import (
    ACCEPTED_INTEROP,
    CONTENT_DISPOSITION,
    PURPOSE,
    REPR_DIGEST,
    UPLOAD_CHECKSUM,
    UPLOAD_METADATA,
    Ask,
    Go,
    Op,
    Policy,
    Refuse,
    State,
    append_decision,
    appended_plan,
    completed,
    create_decision,
    created_plan,
    disposition_filename,
    interim_fields,
    mismatch_plan,
    offset_plan,
    parse_checksum,
    parse_metadata,
    refusal_plan,
    resource_path,
    tus_fields,
)
from .store import Held, Info, create_upload
from .transfer import Holding, TooMuch, receive

__all__ = ["Flows", "Quota"]

# A creation's 104 (Upload Resumption Supported), sent once it is held.
Announce = Callable[[], Awaitable[None]]

log = logging.getLogger("serverio")


class Quota:
    """Bytes of incomplete uploads per client (declared lengths, else
    ``--max-upload-size``), against ``--max-incomplete-per-client``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held: defaultdict[str, int] = defaultdict(int)

    def take(self, client: str, size: int) -> bool:
        if self.limit and self.held[client] + size > self.limit:
            return False
        self.held[client] += size
        return True

    def release(self, client: str, size: int) -> None:
        left = self.held.get(client, 0) - size
        if left > 0:
            self.held[client] = left
        else:
            self.held.pop(client, None)

    def rebuild(self, found: list[tuple[str, int]]) -> None:
        for client, size in found:
            self.held[client] += size


def _replace(path: str, probe: bool = False) -> AccessTarget:
    """The overwrite right on ``path``.  A creation asks it first as a
    probe (its "no" is no denial: not counted, not logged), to know whether
    the upload may replace a file: without it the upload is create-only,
    refused at once if the target exists and committed with no-replace, so
    a file that appears meanwhile is not overwritten either (docs:
    "Rights"); an existing target then asks it as the refusal it is."""
    return AccessTarget((path,), Kind.WRITE, Right.OVERWRITE, probe=probe)


class Flows:
    """Creation, append, offset retrieval and cancellation."""

    def __init__(self, config: Config, uploads: Uploads, signer: Signer, policy: Policy) -> None:
        self.config = config
        self.uploads = uploads
        self.signer = signer
        self.policy = policy
        self.quota = Quota(config.resumable.max_incomplete_per_client)
        # The requests of this process holding an upload: its id -> the
        # request's cancel scope (the draft's "terminate the previous request").
        self.holders: dict[str, trio.CancelScope] = {}

    def _size(self, info: Info) -> int:
        return info.length if info.length is not None else self.policy.max_size

    # ------------------------------------------------------------ creation

    async def create(
        self, req: RequestFacts, ask: Ask, content: WriteContent, now: float, admit: Admit
    ) -> Plan:
        """IETF ``PUT`` with ``Upload-Complete``, tus ``POST``: a new
        upload at the target, the 104 with its resource (IETF), then the
        content if any; complete: committed at once."""
        tus = ask.tus
        segments = req.target.segments
        if req.method == b"POST":
            # tus, or the draft's creation by POST to a folder: the file's
            # name from Upload-Metadata (tus) or Content-Disposition (the draft).
            filename = _posted_name(req)
            if filename is None:
                return refusal_plan(Refuse(400, "no usable filename"), tus, self.policy, now)
            segments = (*segments, filename)
        target = Target(segments, False, None)
        path = match_path(target)
        refusal = await admit(AccessTarget((path,), Kind.WRITE, Right.UPLOAD, also=Right.OVERWRITE))
        if refusal is not None:
            return refusal
        # Without the overwrite right the upload is create-only (_replace).
        no_overwrite = await admit(_replace(path, probe=True))
        if not tus:
            if has_preconditions(req) and not is_create_only(req):
                # Validators are decided on the file at completion only for
                # If-None-Match: * (docs: "Preconditions").
                return refusal_plan(Refuse(412, "precondition"), False, self.policy, now)
        go = create_decision(ask, content.declared, self.policy)
        if isinstance(go, Refuse):
            return refusal_plan(go, tus, self.policy, now)
        expires = now + self.policy.expiry
        info = Info("", go.length, now, expires, tus, req.client)
        if not tus:
            info.repr_digest = REPR_DIGEST.of(req)
            info.create_only = is_create_only(req)
        if no_overwrite is not None:
            info.create_only = True
        size = self._size(info)
        if not self.quota.take(req.client, size):
            log.info("resumable upload refused: --max-incomplete-per-client")
            return refusal_plan(Refuse(507, "quota"), tus, self.policy, now)
        pol = self.config.uploads
        min_free = pol.min_free_space + (go.length or 0) if pol.min_free_space else 0
        try:
            held: Held = await self._blocking(
                create_upload,
                self.uploads.opener(),
                segments,
                self.config.files.hidden,
                min_free,
                info,
                not pol.no_fsync,
            )
        except WriteRefused as exc:
            self.quota.release(req.client, size)
            if no_overwrite is not None and exc.refusal is Refusal.EXISTS:
                return await admit(_replace(path)) or no_overwrite  # now a denial
            raise
        except BaseException:
            self.quota.release(req.client, size)
            raise
        token = self.signer.sign(PURPOSE, ("/".join(segments), held.upload_id), int(expires))
        location = resource_path(token)
        send = interim_of(content)
        announce: Announce | None = None
        interop = ask.interop
        if not tus and send is not None and content.declared != 0 and interop in ACCEPTED_INTEROP:
            assert interop is not None
            fields = interim_fields(location, interop, self.policy, expires, now)

            async def announce() -> None:
                await send(104, fields)

        state = State(0, go.length, expires, tus)
        return await self._transfer(req, ask, content, now, held, go, state, location, announce)

    async def _blocking(self, fn: Callable[..., Held], *args: object) -> Held:
        held: Held = await run_blocking(self.uploads.pool, fn, *args, late_close=Held.close)
        return held

    # ------------------------------------------------------------ append

    async def append(
        self, req: RequestFacts, ask: Ask, content: WriteContent, now: float, held: Held
    ) -> Plan:
        """``PATCH``: the offset checked (409), the length consolidated,
        the content appended, completed when it is the last part."""
        info = held.info
        state = State(held.offset, info.length, info.expires, info.tus)
        go = append_decision(ask, state, content.declared, self.policy)
        if isinstance(go, int):
            holding = Holding(held, self.uploads.pool)
            await holding.settle()
            return mismatch_plan(go, ask.offset, ask.tus, now)
        if isinstance(go, Refuse):
            await Holding(held, self.uploads.pool).settle()
            return refusal_plan(go, ask.tus, self.policy, now)
        return await self._transfer(req, ask, content, now, held, go, state, "")

    async def _transfer(
        self,
        req: RequestFacts,
        ask: Ask,
        content: WriteContent,
        now: float,
        held: Held,
        go: Go,
        state: State,
        location: str,
        announce: Announce | None = None,
    ) -> Plan:
        """The content into ``held`` (creation or append), then the answer;
        ``announce``: the creation's 104, sent first (held meanwhile)."""
        holding = Holding(held, self.uploads.pool)
        upload_id = held.upload_id
        checksum = parse_checksum(UPLOAD_CHECKSUM.of(req)) if ask.tus else None
        if isinstance(checksum, Refuse):
            await holding.settle()
            return refusal_plan(checksum, True, self.policy, now)
        if checksum is not None:
            held.hasher = hashlib.new(checksum[0])
        with trio.CancelScope() as scope:
            self.holders[upload_id] = scope
            try:
                if announce is not None:
                    await announce()
                return await self._receive(req, ask, content, now, holding, go, state, location)
            except TooMuch:
                await holding.step(held.remove)
                self._forget(held)
                raise
            finally:
                if self.holders.get(upload_id) is scope:
                    del self.holders[upload_id]
                await holding.settle()
        # Cancelled by a newer request for the same upload (the draft's
        # "terminate the previous request"): this one ends without answer.
        raise trio.BrokenResourceError("taken over by a newer request")

    async def _receive(
        self,
        req: RequestFacts,
        ask: Ask,
        content: WriteContent,
        now: float,
        holding: Holding,
        go: Go,
        state: State,
        location: str,
    ) -> Plan:
        held = holding.held
        start = held.offset
        await receive(holding, content, go.room)
        offset = await holding.step(held.durable)
        if held.hasher is not None:
            checksum = parse_checksum(UPLOAD_CHECKSUM.of(req))
            assert isinstance(checksum, tuple)
            if held.hasher.digest() != checksum[1]:
                # tus checksum: the part is not appended (460).
                await holding.step(held.truncate, start)
                return refusal_plan(Refuse(460, "checksum mismatch"), True, self.policy, now)
        length = go.length
        if length is None and go.complete:
            length = offset
        if length is not None and held.info.length is None:
            held.info.length = length
            await holding.step(held.save_info)
        new = State(offset, length, state.expires, state.tus)
        if go.complete and length is not None and offset == length:
            return await self._complete(req, holding, now, location)
        if ask.op is Op.CREATE:
            return created_plan(location, new, self.policy, now)
        return appended_plan(new, self.policy, now)

    async def _complete(
        self, req: RequestFacts, holding: Holding, now: float, location: str
    ) -> Plan:
        """The last byte is in: the Repr-Digest checked, one rename; the
        target's answer (a PUT's) with ``Upload-Complete: ?1``."""
        held = holding.held
        info = held.info
        if info.repr_digest:
            expected = parse_digests([info.repr_digest.encode("latin-1")])
            if expected and not await holding.step(held.digest_matches, expected):
                await holding.step(held.remove)
                self._forget(held)
                plan = refusal_plan(Refuse(400, "Repr-Digest mismatch"), False, self.policy, now)
                return completed(plan, False)
        existed = held.place.current is not None
        st = await holding.step(held.commit, info.create_only)
        self._forget(held)
        relpath = "/".join((*held.dir_segments, info.name))
        self.uploads.changed(relpath)
        writes = self.uploads.stats.writes
        writes.files += 1
        writes.bytes += held.offset
        if info.tus:
            state = State(held.offset, info.length, info.expires, True)
            return appended_plan(state, self.policy, now)
        facts = stat_facts(st, self.config, None)
        if existed:
            return completed(replaced_plan(facts, now), False, offset=held.offset)
        target = Target(tuple(relpath.split("/")), False, None)
        return completed(file_created(facts, target.url_path(), now), False, offset=held.offset)

    def _forget(self, held: Held) -> None:
        self.quota.release(held.info.client, self._size(held.info))

    # ------------------------------------------------------------ offset, cancel

    async def offset_or_cancel(self, ask: Ask, held: Held, now: float) -> Plan:
        """``HEAD``: the durable offset; ``DELETE``: both files removed."""
        holding = Holding(held, self.uploads.pool)
        try:
            info = held.info
            if ask.op is Op.CANCEL:
                await holding.step(held.remove)
                self._forget(held)
                fields = tus_fields() if ask.tus else []
                return Plan(204, (*common_fields(now), *fields), (), send_body=False)
            state = State(held.offset, info.length, info.expires, info.tus)
            return offset_plan(state, self.policy, now)
        finally:
            await holding.settle()


def _posted_name(req: RequestFacts) -> str | None:
    """The name a creation by POST gives its file: ``filename`` of tus's
    Upload-Metadata, else of Content-Disposition (the draft's §"Upload
    Creation"); None when there is none or it is not one plain name (the
    name rules of the write path judge it further: 403)."""
    meta = parse_metadata(UPLOAD_METADATA.of(req))
    raw = None if meta is None else meta.get("filename")
    try:
        name = None if raw is None else raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if name is None:
        name = disposition_filename(CONTENT_DISPOSITION.of(req))
    if not name or "/" in name or "\\" in name or "\x00" in name:
        return None
    return name
