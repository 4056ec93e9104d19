"""Live reload's transform of the handler's answers: HTML gets the page script.

:class:`PageScript` is the :class:`~serverio.pipeline.hooks.Transform` that
``--watch`` registers (:meth:`serverio.live.service.LiveReload.hooks`).  A
request that may be answered with HTML is resolved as a plain GET (no
validators, no Range, identity: :meth:`PageScript.base`), so that the
transform gets the whole base representation; an HTML 200 becomes the
injected variant (:func:`serverio.live.protocol.decide_injected`, which
evaluates the request's own validators against the injected ETag); an
error for a request that accepts HTML becomes a small page with the
script; any other answer is resolved again with the request as sent
(non-HTML is never modified).  Every other request takes the handler's
path untouched.  Injected HTML is content-coded on the fly as the file
would be (:func:`serverio.live.protocol.injected_coding`; never from a
precompressed sidecar, which lacks the script), and sent without
Repr-Digest.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Final

from ..concurrency.blocking import Pool, PoolSaturated, run_blocking
from ..config import Config
from ..fs.reads import read_all
from ..http.codecs import compress_bytes
from ..http.core import FileSpan, RequestFacts, without_conditions
from ..http.mime import guess_type
from ..model import Prepared
from ..pipeline.content import ContentService, OwnedFd
from .protocol import (
    accepts_html,
    decide_injected,
    error_page,
    header,
    inject_html,
    injected_coding,
    injected_precondition,
    is_html,
)
from .script import LiveAssets

__all__ = ["PageScript"]

INJECT_MAX: Final = 8 * 1024 * 1024  # larger HTML is served as it is
# Appended to the coding in the compression cache's key of an injected page
# (the file's identity is the rest of the key): never a file coding's name.
INJECTED_SUFFIX: Final = "+livereload"


def _may_be_html(req: RequestFacts) -> bool:
    """Could this GET/HEAD be answered with HTML (or an error page a
    browser shows)?  Directories (index, listing), ``.html`` names, and
    extension-less names (SPA routes, pages a browser navigates to)."""
    target = req.target
    if target.slash or not target.segments:
        return True
    last = target.segments[-1]
    return "." not in last or is_html(guess_type(last).encode("latin-1"))


def _read_owned(owned: OwnedFd, size: int) -> bytes | None:
    fd = owned.claim()
    if fd < 0:
        return None
    try:
        return read_all(fd, size)
    finally:
        os.close(fd)


class PageScript:
    """Injects the page script into HTML answers (see the module docstring).

    ``fs`` is the pool the whole body of a large page is read in;
    ``content`` gives the work pool and the compression cache the coded
    variants share with the files' own.
    """

    __slots__ = ("assets", "config", "content", "fs")

    def __init__(
        self, config: Config, assets: LiveAssets, fs: Pool, content: ContentService
    ) -> None:
        self.config = config
        self.assets = assets
        self.fs = fs
        self.content = content

    def base(self, req: RequestFacts) -> RequestFacts | None:
        """The whole base representation of a request that may get HTML:
        no condition (the client's own are evaluated against the variant),
        GET, identity, no digest."""
        if req.method not in (b"GET", b"HEAD") or not _may_be_html(req):
            return None
        return replace(
            without_conditions(req), method=b"GET", accept_encoding=None, want_repr_digest=None
        )

    async def apply(
        self, req: RequestFacts, base: RequestFacts, prepared: Prepared, now: float
    ) -> Prepared | None:
        """The injected page, the script's error page, ``prepared`` itself
        when ``req`` was its own base, or None (resolve ``req`` as sent).

        Cancellation handling: ``prepared`` is closed in a ``finally``
        unless it is returned.
        """
        keep = False
        try:
            plan = prepared.plan
            ctype = header(plan, b"content-type") or b""
            if plan.status == 200 and is_html(ctype) and header(plan, b"content-encoding") is None:
                body = await self._body(prepared)
                injected = inject_html(body, self.assets.tag) if body is not None else None
                if injected is not None:
                    return await self._injected(req, prepared, injected, now)
            elif plan.status >= 400 and ctype.startswith(b"text/plain") and accepts_html(req):
                if req.method == b"HEAD":
                    plan = replace(plan, send_body=False)
                return Prepared(error_page(plan, self.assets))
            if base == req:
                keep = True
                return prepared
        finally:
            if not keep:
                prepared.close()
        return None

    async def _injected(
        self, req: RequestFacts, prepared: Prepared, injected: bytes, now: float
    ) -> Prepared:
        """The injected variant, content-coded when the request negotiates
        a coding: the 304/412 is decided first (no compression for it),
        then the coded bytes come from the compression cache or one job in
        the work pool for all requesters; a saturated pool serves identity
        (RFC 9110 §12.5.3), as for a file."""
        plan = prepared.plan
        facts = prepared.facts
        mtime = facts.mtime if facts is not None else None
        stats = self.content.stats
        coding = injected_coding(req, plan, len(injected), self.config)
        body = injected
        if coding:
            pre = injected_precondition(req, plan, mtime, now, coding)
            if pre is not None:
                return Prepared(pre, served=prepared.served, real=prepared.real)
            coded = await self._compress(prepared, coding, injected)
            if coded is None:
                stats.content.compress_fallbacks += 1
                coding = ""
            else:
                stats.content.compressed_responses += 1
                body = coded
        return Prepared(
            decide_injected(req, plan, body, mtime, now, self.assets, coding=coding),
            served=prepared.served,
            real=prepared.real,
        )

    async def _compress(self, prepared: Prepared, coding: str, injected: bytes) -> bytes | None:
        """``injected`` in ``coding``: shared with the file's compressed
        bodies (same cache, same bound, cleared on every change), keyed by
        the file's identity and a coding name no file coding has."""
        work = self.content.work

        async def job() -> bytes | None:
            return await run_blocking(work, compress_bytes, coding, injected)

        if prepared.facts is None:
            try:
                return await job()
            except PoolSaturated:
                return None
        key = (prepared.facts.key, coding + INJECTED_SUFFIX)
        return await self.content.compressed.get_or_run(key, lambda: job)

    async def _body(self, prepared: Prepared) -> bytes | None:
        """The whole body of a 200, read if it is still in the file."""
        body = prepared.plan.body
        if all(isinstance(p, bytes) for p in body):
            return b"".join(p for p in body if isinstance(p, bytes))
        size = sum(len(p) for p in body)
        if size > INJECT_MAX or prepared.fd < 0:
            return None
        if not (len(body) == 1 and isinstance(body[0], FileSpan) and body[0].offset == 0):
            return None
        # The read gets its own descriptor: if this request is cancelled,
        # the abandoned thread closes it, never the requester's.
        owned = OwnedFd(os.dup(prepared.fd))
        try:
            return await run_blocking(self.fs, _read_owned, owned, size)
        except PoolSaturated:
            return None
        finally:
            owned.release()
