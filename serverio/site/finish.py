"""The site's finishing rules (trio side): error pages, header rules, CORS.

:class:`Finisher` applies, to every answer, the error page configured for
its status (read at start-up and re-read every :data:`PAGE_RECHECK`
seconds, under the same containment as any request), then the merged
header rules for its path and the CORS fields of an actual request.  The
rules decide (:func:`serverio.site.rules.header_ops`,
:func:`~serverio.site.rules.error_page_key`,
:func:`~serverio.site.rules.cors_headers`); the plans are made by the pure
layer (:func:`serverio.http.plans.page_plan`,
:func:`serverio.http.plans.apply_headers`).
"""

from __future__ import annotations

import functools
import os
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace

import trio

from ..concurrency.blocking import Pool, PoolSaturated, run_blocking
from ..config import Config
from ..errors import ConfigError
from ..fs.opener import RootOpener
from ..fs.reads import pread
from ..http.access import AccessTarget, Kind
from ..http.core import Plan, RequestFacts
from ..http.errorpage import error_for
from ..http.mime import guess_type
from ..http.plans import NO_OPS, HeaderOps, apply_headers, page_plan
from .access import rule_for
from .rules import (
    CORS_METHOD,
    ORIGIN,
    SiteRules,
    cors_headers,
    error_page_key,
    header_ops,
    match_path,
)

__all__ = ["PAGE_RECHECK", "ErrorPage", "Finisher", "read_error_pages"]

_MEMO_MAX = 1024
_OPS_MAX = 4096
_ERROR_PAGE_MAX = 1024 * 1024

# Seconds between re-reads of the error pages (a changed page is served
# within this long; each re-read is one open and read per page, in a thread).
PAGE_RECHECK = 1.0


@dataclass(frozen=True, slots=True)
class ErrorPage:
    body: bytes
    content_type: bytes
    protected: bool  # lives under an [[auth]] path


def _read_page(opener: RootOpener, rel: str, where: str) -> tuple[bytes, bytes]:
    segs = [s for s in rel.split("/") if s]
    if not segs or any(s in (".", "..") or s.startswith(".") for s in segs) or "\\" in rel:
        raise ConfigError(f"{where}: {rel!r} must be a file below the root (no dot segments)")
    try:
        fd = opener.open("/".join(segs))
    except OSError:
        raise ConfigError(f"{where}: error page {rel!r} is missing (or outside the root)") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _ERROR_PAGE_MAX:
            raise ConfigError(f"{where}: error page {rel!r} is not a regular file up to 1 MiB")
        data = pread(fd, st.st_size, 0)
    finally:
        os.close(fd)
    return data, guess_type(segs[-1]).encode("ascii")


def read_error_pages(
    cfg: Config, rules: SiteRules, source: str, *, strict: bool
) -> dict[str, ErrorPage]:
    """Read every ``[errors]`` page through a confined opener (blocking).

    ``strict`` (start-up): a missing or unfit page is a ConfigError.  Else
    (the periodic re-read) such a page is left out, and that status gets
    the built-in body until the page is back.
    """
    pages: dict[str, ErrorPage] = {}
    if not rules.error_pages:
        return pages
    opener = RootOpener(
        cfg.root or os.path.realpath(cfg.directory),
        follow_symlinks=cfg.files.follow_symlinks,
        hidden=cfg.files.hidden,
    )
    try:
        for key, rel in rules.error_pages.items():
            try:
                body, ctype = _read_page(opener, rel, f"{source}: [errors] key {key!r}")
            except (ConfigError, OSError):
                if strict:
                    raise
                continue
            # A page under an [[auth]] path is for authenticated clients only.
            page = AccessTarget(("/" + rel.strip("/"),), Kind.FILE)
            pages[key] = ErrorPage(body, ctype, rule_for(rules, page) is not None)
    finally:
        opener.close()
    return pages


class Finisher:
    """Error pages, header rules and CORS fields for every answer."""

    def __init__(self, cfg: Config, rules: SiteRules, pages: dict[str, ErrorPage]) -> None:
        self.config = cfg
        self.rules = rules
        self.pages = pages
        # One thread re-reads the error pages (never the auth or work pools).
        self.page_pool = Pool("pages", 1, 1)
        self._ops: dict[tuple[str, bool, bool], HeaderOps] = {}  # (path, protected, tls)
        self._memo: dict[tuple[int, str | None, bool], tuple[Plan, HeaderOps, Plan]] = {}
        self._vary_origin = rules.cors is not None and not rules.cors.any_origin

    def finish(
        self,
        plan: Plan,
        req: RequestFacts | None,
        protected: bool,
        authed: bool,
        pages: bool = True,
    ) -> Plan:
        """Error page, then header rules and CORS fields.  ``protected``:
        an auth rule applied to the request; ``authed``: it passed one;
        ``pages`` False: no error page (a proxied response keeps the
        upstream's body)."""
        rules = self.rules
        path = rules.canonical(match_path(req.target)) if req is not None else ""
        # --hsts goes on TLS responses only (RFC 6797 §7.2): part of the key.
        tls = req.tls if req is not None else False
        ops = self._header_ops(req, path, protected, tls)
        # Origin matters only with CORS (its fields, the memo's key).
        origin = ORIGIN.of(req) if req is not None and rules.cors is not None else None
        memo_key: tuple[int, str | None, bool] | None = None
        if plan.shared and plan.status < 400:  # an error's page depends on Accept
            memo_key = (id(plan), origin if self._vary_origin else None, tls)
            hit = self._memo.get(memo_key)
            if hit is not None and hit[0] is plan and hit[1] is ops:
                return hit[2]
        if plan.status >= 400 and pages:
            if self.pages:  # a site's [errors] page first: it keeps priority
                plan = self._error_page(plan, authed)
            plan = error_for(plan, req)
        preflight = req is not None and req.method == b"OPTIONS" and CORS_METHOD.of(req) is not None
        extra = () if preflight else cors_headers(rules.cors, origin)
        if ops is NO_OPS and not extra and not self._vary_origin:
            out = plan
        else:
            out = apply_headers(plan, ops, extra, vary_origin=self._vary_origin)
        if memo_key is not None:
            out = replace(out, shared=True)  # shared in turn (memoised below)
            if len(self._memo) >= _MEMO_MAX:
                self._memo.clear()
            self._memo[memo_key] = (plan, ops, out)
        return out

    def _header_ops(
        self, req: RequestFacts | None, path: str, protected: bool, tls: bool
    ) -> HeaderOps:
        okey = (path, protected, tls)
        ops = self._ops.get(okey)
        if ops is not None:
            return ops
        rules = self.rules
        if req is None:
            # No request (its facts could not be built): the rules for every path.
            every = tuple(r for r in rules.header_rules if r.match is None)
            ops = header_ops(replace(rules, header_rules=every), "/")
        else:
            ops = header_ops(rules, path, protected=protected, tls=tls)
        if len(self._ops) >= _OPS_MAX:
            self._ops.clear()
        self._ops[okey] = ops
        return ops

    def _error_page(self, plan: Plan, authed: bool) -> Plan:
        key = error_page_key(self.rules, plan.status)
        if key is None:
            return plan
        page = self.pages.get(key)
        if page is None or (page.protected and not authed):
            return plan  # the built-in body: a protected page is for authenticated clients
        return page_plan(plan, page.body, page.content_type)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Re-read the error pages every :data:`PAGE_RECHECK` seconds while
        the server runs, so a changed page is served without a restart and
        a 503 still needs no pool hop for its page (the bytes are in memory).

        Cancellation handling: leaving the block cancels the re-read; a
        read stuck in the filesystem is abandoned like any pooled call (its
        thread only builds a new dict of pages, nothing to close).
        """
        if not self.rules.error_pages:
            yield
            return
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._reread_pages)
            try:
                yield
            finally:
                nursery.cancel_scope.cancel()

    async def _reread_pages(self) -> None:
        source = self.config.site.rules_source or "--config"
        while True:
            await trio.sleep(PAGE_RECHECK)
            try:
                pages = await run_blocking(
                    self.page_pool,
                    functools.partial(
                        read_error_pages, self.config, self.rules, source, strict=False
                    ),
                )
            except PoolSaturated:
                continue  # the previous read is still stuck: keep what we have
            if pages != self.pages:
                self.pages = pages
                self._memo.clear()  # memoised plans may carry the old page
