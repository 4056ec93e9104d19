"""The site rules on the trio side: load them at start-up, evaluate per request.

:func:`load_site` reads what the rules name (users files, error pages,
under the same containment as any request) and compiles everything with
:func:`serverio.site.rules.compile_rules`; with no rule configured it
returns None and the connection never calls into this module (the warm
path is unchanged).

Per request, in this order (docs/features.md "Site rules"):

1. :meth:`Site.route`: a CORS preflight; the core's method and hidden-path
   decisions; authentication (against the request path *and* the path a
   rewrite or clean URL would serve); redirects; rewrites;
2. :meth:`Site.respond_now`: the handler, retried once with the
   ``.html`` file of a clean URL, or the directory of a
   ``--trailing-slash remove`` path, when the first answer says so;
3. :meth:`Site.finish`: the error page for the status, then the header
   rules and the CORS fields.

Authentication runs in its own small pool (``auth``): password spraying
saturates that pool (503), not the filesystem or work pools, and never the
event loop.  A bounded cache of recently verified credentials (keyed by
an HMAC with a per-process key, never the password itself) spares a
legitimate client a hash per request; :mod:`serverio.site.authlimit`
counts failures per (client, user) and per user, and answers 429 once a
budget is spent.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import ipaddress
import logging
import os
import secrets
import stat
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from types import ModuleType

import trio

from ..concurrency.blocking import Pool, PoolSaturated, run_blocking
from ..config import Config
from ..errors import ConfigError
from ..fs.opener import RootOpener
from ..fs.reads import pread
from ..http.core import Plan, RequestFacts, error_plan, route
from ..http.listing import Entry
from ..http.mime import guess_type
from ..http.target import Target
from ..live.protocol import csp_blocks_scripts, watch_csp
from ..live.script import live_assets
from ..model import Prepared
from ..observe.stats import Stats
from ..pipeline.handler import Deferred, Handler
from ..pipeline.hooks import Router
from .authlimit import FAILURE_BUDGET, FAILURE_WINDOW, Attempt, AuthLimiter, retry_after
from .passwords import check_hash, cost_profile, verify_padded
from .rules import (
    NO_OPS,
    AuthRule,
    HeaderOps,
    RouteDecision,
    SiteRules,
    apply_headers,
    auth_rule_for,
    challenge_plan,
    clean_url_alternative,
    compile_rules,
    cors_headers,
    decide_route,
    error_page_key,
    header_ops,
    map_header_values,
    match_path,
    parse_basic,
    preflight_plan,
)

__all__ = ["FAILURE_BUDGET", "FAILURE_WINDOW", "Site", "Ticket", "load_site"]

log = logging.getLogger("serverio")

AUTH_WORKERS = 2
AUTH_QUEUE = 32
_VERIFIED_MAX = 1024  # recently verified credentials kept
_VERIFIED_TTL = 300.0  # seconds a verification is trusted
_MEMO_MAX = 1024
_ROUTES_MAX = 4096
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


@dataclass(slots=True)
class Ticket:
    """What :meth:`Site.route` decided: an answer (``plan``), or the request
    to serve (possibly rewritten); ``protected``/``authed``: an auth rule
    applied / the client passed it."""

    plan: Plan | None
    req: RequestFacts
    protected: bool = False
    authed: bool = False
    # The auth rules (their indices) this request's credentials passed.
    granted: frozenset[int] = frozenset()


def _read_users(path: str, where: str) -> dict[str, str]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "unreadable"
        raise ConfigError(f"{where}: users file {path!r}: {reason}") from None
    users: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        user, colon, h = line.partition(":")
        if not colon or not user:
            raise ConfigError(f"{where}: users file {path!r} line {n}: expected user:hash")
        problem = check_hash(h)
        if problem is not None:
            raise ConfigError(f"{where}: users file {path!r} line {n}: {problem}")
        users[user] = h
    if not users:
        raise ConfigError(f"{where}: users file {path!r} has no users")
    return users


def _inside(root: str, path: str, paths: ModuleType = os.path) -> bool:
    """Is ``path`` (resolved) the root or below it?  Compared with the
    platform's own path rules (``paths``: ``os.path``; ``ntpath`` in tests):
    Windows separators, drives and case-insensitive names included."""
    real = paths.normcase(paths.realpath(path))
    top = paths.normcase(paths.realpath(root))
    try:
        return bool(paths.commonpath([real, top]) == top)
    except ValueError:
        return False  # another drive, or one relative and one absolute


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
        follow_symlinks=cfg.follow_symlinks,
        hidden=cfg.hidden,
    )
    try:
        for key, rel in rules.error_pages.items():
            try:
                body, ctype = _read_page(opener, rel, f"{source}: [errors] key {key!r}")
            except (ConfigError, OSError):
                if strict:
                    raise
                continue
            page_path = rules.canonical("/" + rel.strip("/"))
            protected = auth_rule_for(rules, (page_path,)) is not None
            pages[key] = ErrorPage(body, ctype, protected)
    finally:
        opener.close()
    return pages


def load_site(cfg: Config, stats: Stats | None = None) -> Site | None:
    """Compile the site rules of ``cfg`` (reading users files and error
    pages); None when there are none.  Raises ConfigError."""
    source = cfg.rules_source or "--config"
    auth: list[tuple[str, dict[str, str], str]] = []
    specs = list(cfg.auth)
    if cfg.auth_file is not None:
        specs.insert(0, ("/**", cfg.auth_file))
    for i, (pattern, path) in enumerate(specs):
        where = "--auth-file" if cfg.auth_file is not None and i == 0 else f"{source}: [[auth]]"
        if cfg.root and _inside(cfg.root, path):
            raise ConfigError(f"{where}: users file {path!r} is inside the served root")
        users = _read_users(path, where)
        auth.append((pattern, users, cost_profile(users.values())))
    fold = bool(auth or cfg.header_rules) and case_insensitive(cfg.root)
    rules = compile_rules(
        fold=fold,
        headers=cfg.headers,
        header_rules=cfg.header_rules,
        cors=cfg.cors,
        cors_origins=cfg.cors_origins,
        redirects=cfg.redirects,
        rewrites=cfg.rewrites,
        clean_urls=cfg.clean_urls,
        trailing_slash=cfg.trailing_slash,
        error_pages=cfg.error_pages,
        auth=auth,
        hidden=cfg.hidden,
        source=source,
        hsts=cfg.hsts,
        hsts_subdomains=cfg.hsts_include_subdomains,
    )
    if rules.empty:
        return None
    if cfg.watch:
        rules = _live_reload_csp(rules, cfg)
    pages = read_error_pages(cfg, rules, source, strict=True)
    if rules.auth and not _is_loopback(cfg.host) and cfg.certfile is None:
        log.warning(
            "basic authentication over plain HTTP on %s: passwords cross the network readable",
            cfg.host,
        )
    return Site(cfg, rules, pages, stats or Stats())


_CSP = b"content-security-policy"


def _live_reload_csp(rules: SiteRules, cfg: Config) -> SiteRules:
    """``--watch``: every Content-Security-Policy a header rule sets lets
    the injected page script and its event stream through
    (:func:`serverio.live.protocol.watch_csp`, as the listings' own
    policy does); a rule's policy that sandboxes pages without
    ``allow-scripts`` gets one warning line (no script can run there)."""
    for rule in rules.header_rules:
        for name, value in rule.set:
            if name == _CSP and csp_blocks_scripts(value):
                log.warning(
                    "--watch: the Content-Security-Policy of the header rule for %s sandboxes "
                    "pages without allow-scripts: live reload cannot run on them",
                    rule.pattern,
                )
    assets = live_assets(cfg.watch_prefix)
    return map_header_values(rules, _CSP, functools.partial(watch_csp, assets=assets))


def _client_key(peer: str) -> str:
    """The limiter's key for a client address (the trusted-proxy client when
    --trusted-proxies applies): per address, not per connection (a new
    connection must not reset a budget), without a port; an IPv6 client
    by its /64, the block one host or one customer's network gets (one
    IPv6 host can use any address of it)."""
    if peer.startswith("["):
        peer = peer[1:].split("]", 1)[0]
    else:
        host, sep, port = peer.rpartition(":")
        if sep and port.isdigit() and ":" not in host:
            peer = host
    try:
        addr = ipaddress.ip_address(peer)
    except ValueError:
        return peer
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.ipv4_mapped is not None:
            return str(addr.ipv4_mapped)
        return str(ipaddress.IPv6Network((addr, 64), strict=False))
    return str(addr)


def _too_many(wait: float, now: float, head: bool) -> Plan:
    headers = [(b"retry-after", b"%d" % retry_after(wait))]
    return error_plan(429, now, headers=headers, head_only=head)


def case_insensitive(root: str) -> bool:
    """Does the filesystem of ``root`` find names regardless of case?

    Probed once at start-up: the first entry whose name changes under
    swapcase() is looked up by its swapped name; the same inode means the
    filesystem folds case (macOS and Windows defaults, some FUSE and SMB
    mounts).  A root without such an entry is taken as case-sensitive.
    """
    if not root:
        return False
    try:
        with os.scandir(root) as it:
            for entry in it:
                other = entry.name.swapcase()
                if other == entry.name:
                    continue
                try:
                    a = os.stat(os.path.join(root, entry.name), follow_symlinks=False)
                    b = os.stat(os.path.join(root, other), follow_symlinks=False)
                except OSError:
                    return False
                return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
    except OSError:
        return False
    return False


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Site:
    """Evaluates one server's compiled rules per request (trio thread only)."""

    def __init__(
        self, cfg: Config, rules: SiteRules, pages: dict[str, ErrorPage], stats: Stats
    ) -> None:
        self.config = cfg
        self.rules = rules
        self.pages = pages
        self.stats = stats
        self.auth_pool = Pool("auth", AUTH_WORKERS, AUTH_QUEUE)
        # One thread re-reads the error pages (never the auth or work pools).
        self.page_pool = Pool("pages", 1, 1)
        self._key = secrets.token_bytes(32)
        self._verified: OrderedDict[bytes, float] = OrderedDict()
        # Failed basic-auth attempts: per (client, user), per user, in flight.
        self.limiter = AuthLimiter(processes=cfg.workers)
        self._ops: dict[tuple[str, bool, bool], HeaderOps] = {}  # (path, protected, tls)
        self._routes: dict[Target, RouteDecision] = {}
        self._memo: dict[tuple[int, str | None, bool], tuple[Plan, HeaderOps, Plan]] = {}
        self._vary_origin = rules.cors is not None and not rules.cors.any_origin
        # The first segment of the reserved live-reload paths (--watch).
        self._reserved = (live_assets(cfg.watch_prefix).prefix_segment,) if cfg.watch else None
        # The pipeline's router of reserved paths (Hooks.route; the server sets it).
        self.reserved_route: Router | None = None

    # ------------------------------------------------------------ step 1

    async def route(self, req: RequestFacts, now: float, client: Callable[[], str]) -> Ticket:
        rules = self.rules
        if rules.cors is not None:
            pre = preflight_plan(rules.cors, req, now)
            if pre is not None:
                return Ticket(pre, req)
        reserved = self.reserved_route
        plan = reserved(req, now) if reserved is not None else None
        if plan is None:
            plan = route(req, self.config, now)
        # The reserved live-reload paths go through the rules like any
        # other path: an [[auth]] rule that matches them protects them.
        if plan is not None and not (
            self._reserved is not None and req.target.segments[:1] == self._reserved
        ):
            return Ticket(plan, req)
        head = req.method == b"HEAD"
        target = req.target
        decision = self._routes.get(target)
        if decision is None:
            decision = decide_route(rules, target)
            if len(self._routes) >= _ROUTES_MAX:
                self._routes.clear()  # bounded: targets (queries) are client input
            self._routes[target] = decision
        rule = decision.auth
        granted: frozenset[int] = frozenset()
        if rule is not None:
            refusal = await self._authenticate(rule, req, now, client, head)
            if refusal is not None:
                # The challenge keeps its own Cache-Control: no-store.
                return Ticket(refusal, req)
            granted = frozenset((rule.index,))
        protected = rule is not None
        if plan is not None:
            return Ticket(plan, req, protected, protected, granted)
        if decision.redirect is not None:
            status, loc = decision.redirect
            plan = error_plan(status, now, headers=[(b"location", loc)], head_only=head)
            return Ticket(plan, req, protected, protected, granted)
        rewritten = decision.rewritten
        if rewritten is not None:
            if rewritten.hidden and not self.config.hidden:
                return Ticket(
                    error_plan(404, now, head_only=head), req, protected, protected, granted
                )
            req = replace(req, target=rewritten)
        return Ticket(None, req, protected, protected, granted)

    async def admit(
        self, served: str, ticket: Ticket, now: float, client: Callable[[], str]
    ) -> Plan | None:
        """The access rules on the resolved target: None when ``ticket``'s
        client may have what the handler resolved (``served``: the index
        file, the clean-URL or trailing-slash alternative, the SPA file, a
        sidecar asked for by name, a listed directory), else the 401 / 429
        / 503 to send instead.

        :meth:`route` decided on the request path first (so that a
        protected name's existence is not told by a 404 either); this is
        the decision that holds however the bytes were reached.  A rule the
        client has not passed yet is checked here with the same
        credentials, limiter and pool; ``ticket`` records it.

        Cancellation handling: the password check may be abandoned like
        any pooled call; the caller still owns (and closes) what it resolved.
        """
        rules = self.rules
        rule = auth_rule_for(rules, (rules.canonical(served),))
        if rule is None or rule.index in ticket.granted:
            return None
        req = ticket.req
        refusal = await self._authenticate(rule, req, now, client, req.method == b"HEAD")
        if refusal is not None:
            return refusal
        ticket.granted = ticket.granted | {rule.index}
        ticket.protected = ticket.authed = True
        return None

    def visible_entries(
        self, req: RequestFacts, segments: tuple[str, ...], entries: list[Entry]
    ) -> list[Entry]:
        """The entries of a listing this client may see: a name an auth rule
        protects is listed only to a client whose credentials (sent with
        this request) were verified for that rule within the verification
        window, as the request for the listing itself does."""
        rules = self.rules
        base = "/" + "/".join(segments) + "/" if segments else "/"
        kept: list[Entry] = []
        passed: dict[int, bool] = {}
        for entry in entries:
            path = base + entry.name + ("/" if entry.is_dir else "")
            rule = auth_rule_for(rules, (rules.canonical(path),))
            if rule is not None:
                ok = passed.get(rule.index)
                if ok is None:
                    ok = passed[rule.index] = self._verified_for(rule, req)
                if not ok:
                    continue
            kept.append(entry)
        return kept

    def may_name(self, path: str) -> bool:
        """May an event that every client receives name ``path``?  Not when
        an auth rule protects it (the event would tell unauthenticated
        clients of it): live reload then sends a plain reload instead."""
        rules = self.rules
        return auth_rule_for(rules, (rules.canonical(path),)) is None

    def _credentials_key(self, rule: AuthRule, user: str, password: str) -> bytes:
        return hmac.new(
            self._key,
            b"%d\0%s\0%s" % (rule.index, user.encode(), password.encode()),
            hashlib.sha256,
        ).digest()

    def _verified_for(self, rule: AuthRule, req: RequestFacts) -> bool:
        """Were this request's credentials verified for ``rule`` recently?
        (No password check here: only the cache of verified credentials.)"""
        creds = parse_basic(req.authorization)
        if creds is None or creds[0] not in rule.users:
            return False
        seen = self._verified.get(self._credentials_key(rule, *creds))
        return seen is not None and trio.current_time() - seen < _VERIFIED_TTL

    async def _authenticate(
        self, rule: AuthRule, req: RequestFacts, now: float, peer: Callable[[], str], head: bool
    ) -> Plan | None:
        """None when the request may proceed; else the 401, 429 or 503.

        The limiter (:mod:`serverio.site.authlimit`) is asked before the
        cache of verified credentials (a client past its budget gets 429
        even with the right password) and reserves the attempt before the
        hash is awaited, so concurrent attempts are all counted.

        Cancellation handling: a cancelled verification (the client went
        away) is settled as a failure: its hash may still run in the
        abandoned thread, so it counts against the budget.
        """
        creds = parse_basic(req.authorization)
        if creds is None:
            # No (usable) credentials: the first step of every login, not a failure.
            return challenge_plan(rule.realm, now, head=head)
        user, password = creds
        client = _client_key(peer())
        # The limiter's user key, per rule (users files are per rule); a long
        # name (client input, ~3 KB at most) by a keyed digest, so the
        # limiter's tables stay small whatever names are tried.
        if len(user) > 64:
            user_id = hashlib.blake2b(user.encode(), digest_size=16, key=self._key).hexdigest()
            who = f"{rule.index}:#{user_id}"
        else:
            who = f"{rule.index}:{user}"
        mono = trio.current_time()
        limiter = self.limiter
        wait = limiter.refusal(client, who, mono)
        if wait is not None:
            return _too_many(wait, now, head)
        key = self._credentials_key(rule, user, password)
        seen = self._verified.get(key)
        if seen is not None and mono - seen < _VERIFIED_TTL:
            self._verified.move_to_end(key)
            return None
        attempt = limiter.reserve(client, who, mono)
        if not isinstance(attempt, Attempt):
            return _too_many(attempt, now, head)
        # Known or not, every check of this users file does the work of its
        # cost profile (rule.dummy; passwords.verify_padded): its time does
        # not tell which users exist, nor which scheme a user's hash uses.
        known = rule.users.get(user)
        failed = True
        try:
            ok = await run_blocking(self.auth_pool, verify_padded, known, password, rule.dummy)
            failed = not ok
        except PoolSaturated:
            failed = False  # nothing was verified: no guess to count
            return error_plan(503, now, head_only=head)
        finally:
            limiter.settle(attempt, failed=failed)
        if not failed:
            self._verified[key] = mono
            if len(self._verified) > _VERIFIED_MAX:
                self._verified.popitem(last=False)
            return None
        self.stats.site.auth_failures += 1
        return challenge_plan(rule.realm, now, head=head)

    # ------------------------------------------------------------ step 2

    def respond_now(self, handler: Handler, req: RequestFacts, now: float) -> Prepared | Deferred:
        """The handler's answer, retried with the alternative target when
        clean URLs or ``--trailing-slash remove`` call for one."""
        answer = handler.respond_now(req, now)
        rules = self.rules
        if not rules.clean_urls and rules.trailing_slash != "remove":
            return answer
        if isinstance(answer, Prepared):
            alt = self._alternative(req, answer.plan)
            if alt is None:
                return answer
            answer.close()
            return handler.respond_now(alt, now)
        first = answer

        async def step(_: Prepared | None) -> Prepared:
            prepared = await first.run()
            alt = self._alternative(req, prepared.plan)
            if alt is None:
                return prepared
            prepared.close()
            again = handler.respond_now(alt, now)
            if isinstance(again, Prepared):
                return again
            try:
                return await again.run()
            finally:
                again.close()

        return _Chained(step, first)

    def _alternative(self, req: RequestFacts, plan: Plan) -> RequestFacts | None:
        rules = self.rules
        target = req.target
        if (
            plan.status == 404
            and rules.clean_urls
            and (not target.slash or rules.trailing_slash == "add")
        ):
            # With --trailing-slash add, the clean URL of about.html is /about/.
            alt = clean_url_alternative(replace(target, slash=False))
            if alt is not None:
                return replace(req, target=alt)
        if (
            plan.status == 301
            and rules.trailing_slash == "remove"
            and not target.slash
            and target.segments
        ):
            # A directory: serve its index here instead of redirecting to
            # the slash form (which this mode would redirect back).
            return replace(
                req, target=Target(target.segments, True, target.query, hidden=target.hidden)
            )
        return None

    # ------------------------------------------------------------ step 3

    def finish(self, plan: Plan, ticket: Ticket | None) -> Plan:
        """Error page, then header rules and CORS fields."""
        rules = self.rules
        req = ticket.req if ticket is not None else None
        protected = ticket.protected if ticket is not None else False
        path = rules.canonical(match_path(req.target)) if req is not None else ""
        # --hsts goes on TLS responses only (RFC 6797 §7.2): part of the key.
        tls = req.tls if req is not None else False
        okey = (path, protected, tls)
        ops = self._ops.get(okey)
        if ops is None:
            if req is None:
                ops = header_ops(
                    replace(
                        rules, header_rules=tuple(r for r in rules.header_rules if r.match is None)
                    ),
                    "/",
                )
            else:
                ops = header_ops(rules, path, protected=protected, tls=tls)
            if len(self._ops) >= _OPS_MAX:
                self._ops.clear()
            self._ops[okey] = ops
        origin = req.origin if req is not None else None
        memo_key: tuple[int, str | None, bool] | None = None
        if plan.shared:
            memo_key = (id(plan), origin if self._vary_origin else None, tls)
            hit = self._memo.get(memo_key)
            if hit is not None and hit[0] is plan and hit[1] is ops:
                return hit[2]
        if plan.status >= 400 and self.pages:
            plan = self._error_page(plan, ticket)
        preflight = req is not None and req.method == b"OPTIONS" and req.cors_method is not None
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
        source = self.config.rules_source or "--config"
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

    def _error_page(self, plan: Plan, ticket: Ticket | None) -> Plan:
        key = error_page_key(self.rules, plan.status)
        if key is None:
            return plan
        page = self.pages.get(key)
        if page is None or (page.protected and not (ticket is not None and ticket.authed)):
            return plan  # the built-in body: a protected page is for authenticated clients
        hs = [(n, v) for n, v in plan.headers if n not in (b"content-type", b"content-length")]
        hs.append((b"content-type", page.content_type))
        hs.append((b"content-length", b"%d" % len(page.body)))
        return replace(plan, headers=tuple(hs), body=(page.body,) if page.body else ())


class _Chained(Deferred):
    """A Deferred whose step owns another Deferred (closed with it)."""

    __slots__ = ("_inner",)

    def __init__(
        self, step: Callable[[Prepared | None], Awaitable[Prepared]], inner: Deferred
    ) -> None:
        super().__init__(step)
        self._inner = inner

    async def run(self) -> Prepared:
        try:
            return await super().run()
        finally:
            self._inner.close()

    def close(self) -> None:
        super().close()
        self._inner.close()
