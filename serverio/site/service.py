"""The site rules on the trio side: load them at start-up, evaluate per request.

:func:`load_site` reads what the rules name (users files, error pages,
under the same containment as any request) and compiles everything with
:func:`serverio.site.rules.compile_rules`; with no rule configured it
returns None and the connection never calls into this module (the warm
path is unchanged).

Per request, in this order (docs/features.md "Site rules"):

1. :meth:`Site.route`: a CORS preflight; the core's method and hidden-path
   decisions; access (the request path *and* the path a rewrite or clean
   URL would serve); redirects; rewrites;
2. :meth:`Site.alternative`: the request the handler is asked once more,
   the ``.html`` file of a clean URL, or the directory of a
   ``--trailing-slash remove`` path, when its first answer says so (the
   exchange asks, :mod:`serverio.pipeline.exchange`);
3. :meth:`Site.admit`: access again, on what the handler resolved (the
   pipeline's access hook, :func:`serverio.pipeline.request.access`);
4. :meth:`Site.finish`: the error page for the status, then the header
   rules and the CORS fields (:class:`serverio.site.finish.Finisher`).

Every access question — a request path, a resolved file, a listing, a
sidecar, the reserved live-reload paths, a listed name, a path an event
names — is one call, :meth:`Site.access` (or :meth:`Site.access_now`,
the same decision without waiting), on an
:class:`~serverio.http.access.AccessTarget`; :class:`serverio.site.gate.Gate`
decides it.  The rules return decisions (an :class:`~serverio.http.access.Access`,
a redirect's status and Location, the fields of a preflight, a page);
the plans come from the pure layer (:mod:`serverio.http.access`,
:mod:`serverio.http.plans`, :func:`serverio.http.core.error_plan`).
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import os
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from types import ModuleType

from ..concurrency.blocking import Pool
from ..config import Config
from ..errors import ConfigError
from ..http.access import (
    Access,
    AccessTarget,
    Kind,
    Right,
    Ticket,
    Verdict,
    access_plan,
    resolved_path,
)
from ..http.core import Allow, Plan, RequestFacts, error_plan, read_only, route
from ..http.listing import Entry
from ..http.plans import no_content_plan, redirect_plan
from ..http.target import Target
from ..live.protocol import csp_blocks_scripts, watch_csp
from ..live.script import live_assets
from ..observe.stats import Stats
from ..pipeline.hooks import Reserved, Router
from .access import write_allowed
from .authlimit import FAILURE_BUDGET, FAILURE_WINDOW, AuthLimiter
from .finish import ErrorPage, Finisher, read_error_pages
from .gate import Gate
from .passwords import check_hash, cost_profile
from .rights import AccessSpec, allow_spec, compile_access
from .rules import (
    AuthRule,
    RouteDecision,
    SiteRules,
    clean_url_alternative,
    compile_rules,
    decide_route,
    map_header_values,
    match_path,
    preflight_fields,
)

__all__ = [
    "FAILURE_BUDGET",
    "FAILURE_WINDOW",
    "Site",
    "Ticket",
    "load_site",
    "plain_auth_warning",
    "served_inside",
]

log = logging.getLogger("serverio")


_ROUTES_MAX = 4096


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


def served_inside(cfg: Config, path: str) -> bool:
    """Does ``path`` (resolved) lie inside what ``cfg`` serves: the root or
    a ``--mount`` directory?  Whatever ``--hidden`` says: a secret there is
    one flag (or one rule change) away from being served, so the callers
    refuse to start instead (a users file, the ``--dev-tls`` directory)."""
    served = [cfg.root] if cfg.root else []
    served += [directory for _, directory in cfg.files.mounts]  # --mount: served too
    return any(_inside(top, path) for top in served)


def load_site(cfg: Config, stats: Stats | None = None) -> Site | None:
    """Compile the site rules of ``cfg`` (reading users files and error
    pages); None when there are none.  Raises ConfigError."""
    source = cfg.site.rules_source or "--config"
    auth: list[tuple[str, dict[str, str], str]] = []
    specs = list(cfg.site.auth)
    # With [[access]] rules, --auth-file and --auth name the users the rules
    # give rights to (read below); without, they protect the whole site.
    rights = cfg.users.rights
    if cfg.users.auth_file is not None and not rights:
        specs.insert(0, ("/**", cfg.users.auth_file))
    inline = _inline_users(cfg.users.auth_users)
    if inline and cfg.users.auth_file is None and not rights:
        auth.append(("/**", inline, cost_profile(inline.values())))
    for i, (pattern, path) in enumerate(specs):
        where = (
            "--auth-file" if cfg.users.auth_file is not None and i == 0 else f"{source}: [[auth]]"
        )
        # A missing file is reported as missing (by _read_users), not as
        # "inside the served root": the fix is to create it, wherever.
        if os.path.exists(path) and served_inside(cfg, path):
            raise ConfigError(f"{where}: users file {path!r} is inside the served root")
        users = _read_users(path, where)
        if inline and where == "--auth-file":
            users = {**users, **inline}  # one whole-site rule: --auth-file's and --auth's users
        auth.append((pattern, users, cost_profile(users.values())))
    fold = bool(auth or rights or cfg.site.header_rules) and case_insensitive(cfg.root)
    rules = compile_rules(
        fold=fold,
        headers=cfg.site.headers,
        header_rules=cfg.site.header_rules,
        cors=cfg.site.cors,
        cors_origins=cfg.site.cors_origins,
        cors_writes=cfg.site.cors_writes and cfg.uploads.upload,
        redirects=cfg.site.redirects,
        rewrites=cfg.site.rewrites,
        clean_urls=cfg.site.clean_urls,
        trailing_slash=cfg.site.trailing_slash,
        error_pages=cfg.site.error_pages,
        auth=auth,
        hidden=cfg.files.hidden,
        source=source,
        hsts=cfg.tls.hsts,
        hsts_subdomains=cfg.tls.hsts_include_subdomains,
        writable=cfg.site.writable if cfg.uploads.upload else (),
        fold_under=tuple(r.prefix for r in cfg.proxy.routes if r.case_insensitive),
    )
    if rights:
        rules = _with_access(cfg, rules, inline, source)
    if rules.empty:
        return None
    if cfg.live.watch:
        rules = _live_reload_csp(rules, cfg)
    pages = read_error_pages(cfg, rules, source, strict=True)
    return Site(cfg, rules, pages, stats or Stats())


def _with_access(cfg: Config, rules: SiteRules, inline: dict[str, str], source: str) -> SiteRules:
    """``rules`` with the ``[[access]]`` tables and ``--allow`` rules
    compiled (:func:`serverio.site.rights.compile_access`) and the users
    file they name users of (``--auth-file`` and ``--auth``) as the table
    Basic credentials are checked against."""
    users: dict[str, str] = {}
    path = cfg.users.auth_file
    if path is not None:
        if os.path.exists(path) and served_inside(cfg, path):
            raise ConfigError(f"--auth-file: users file {path!r} is inside the served root")
        users = _read_users(path, "--auth-file")
    users.update(inline)
    specs: list[AccessSpec] = [
        (glob, grants, f"{source}: [[access]] #{i + 1}")
        for i, (glob, grants) in enumerate(cfg.users.access)
    ]
    specs += [allow_spec(line) for line in cfg.users.allow]
    under = () if rules.fold else rules.fold_under
    access = compile_access(
        specs, list(users), cfg.users.groups, source, fold=rules.fold, folded=bool(under)
    )
    table = None
    if users:
        index = len(rules.auth)  # after the [[auth]] rules' (Ticket.granted)
        table = AuthRule("/**", None, users, "serverio", cost_profile(users.values()), index)
    return replace(rules, access=access, users=table)


def plain_auth_warning(cfg: Config) -> str | None:
    """The one start-up warning for basic authentication served over plain
    HTTP on a non-loopback address (RFC 7617 §4: the credentials are
    cleartext), or None.  Said once by the command (serverio.ops.cli), not
    by each compile of the rules (the check before binding, each worker)."""
    has_auth = bool(cfg.site.auth or cfg.users.auth_file is not None or cfg.users.auth_users)
    plain = cfg.tls.certfile is None and not cfg.tls.dev_tls
    if not has_auth or not plain or _is_loopback(cfg.listeners.host):
        return None
    return (
        f"basic authentication over plain HTTP on {cfg.listeners.host}: "
        "passwords cross the network readable"
    )


def _inline_users(lines: tuple[str, ...]) -> dict[str, str]:
    """``--auth``'s USER:HASH lines (hashed when parsed) as a users table."""
    users: dict[str, str] = {}
    for line in lines:
        user, _, h = line.partition(":")
        problem = check_hash(h)
        if problem is not None:  # never the password: the hash's own problem
            raise ConfigError(f"--auth {user}: {problem}")
        users[user] = h
    return users


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
    assets = live_assets(cfg.live.watch_prefix)
    return map_header_values(rules, _CSP, functools.partial(watch_csp, assets=assets))


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
        self.stats = stats
        self.gate = Gate(rules, stats, cfg.listeners.workers, verbose=cfg.log.verbose)
        self.finisher = Finisher(cfg, rules, pages)
        # Per request target: the rules' decision and its access target.
        self._routes: dict[Target, tuple[RouteDecision, AccessTarget]] = {}
        # The first segment of the reserved live-reload paths (--watch).
        self._reserved = (
            (live_assets(cfg.live.watch_prefix).prefix_segment,) if cfg.live.watch else None
        )
        # The pipeline's router of reserved paths (Hooks.route; the server sets it).
        self.reserved_route: Router | None = None
        # The proxy hook's match (Hooks.proxy; the server sets it).
        self.proxied: Callable[[RequestFacts], object | None] | None = None
        # The login feature (sessions, trusted header, share links; the
        # server sets it when users exist): the principal a session cookie
        # names, and its answers' finish.
        self.login: Reserved | None = None
        # The methods a path allows (Hooks.allow, the write feature's; the
        # server sets it): the core's OPTIONS and 405 name them.
        self.allow: Allow = read_only

    @property
    def auth_pool(self) -> Pool:
        return self.gate.auth_pool

    @property
    def page_pool(self) -> Pool:
        return self.finisher.page_pool

    @property
    def limiter(self) -> AuthLimiter:
        return self.gate.limiter

    # ------------------------------------------------------------ access

    async def access(
        self,
        target: AccessTarget,
        req: RequestFacts,
        client: Callable[[], str],
        granted: frozenset[int] = frozenset(),
        user: str | None = None,
    ) -> Access:
        """THE access decision: may the client of ``req`` have ``target``?

        Any feature with a resolved target asks here (through the
        pipeline's hook, :func:`serverio.pipeline.request.access`): the
        rule that protects its paths, then ``req``'s Basic credentials,
        the failure limiter and the password check.  ``granted``: rules
        this request already passed (not checked again).  ``user``: a user
        the caller verified otherwise (a session cookie, a trusted proxy's
        header), decided on as a signed-in user.  The target's right
        (:attr:`~serverio.http.access.AccessTarget.right`) is what the
        ``[[access]]`` rules are asked about.  The result is a decision
        (``Access.user``: the signed-in user it knows);
        :func:`serverio.http.access.access_plan` makes a refusal's response.

        Cancellation handling: the password check is the only wait; it may
        be abandoned like any pooled call, and then counts as a failure.
        """
        got = self._access_now(target, req, granted, user)
        if got.verdict is Verdict.ALLOW:
            return got  # no wait (the warm path: no coroutine of the gate's)
        return await self.gate.decide(target, self._authorization(req), granted, client, user, got)

    def _authorization(self, req: RequestFacts) -> str | None:
        """What ``req`` authenticates with: its Basic credentials, else a
        session cookie's principal (the login feature's)."""
        auth = req.authorization
        login = self.login
        if auth is None and login is not None and req.extra:
            auth = login.authorization(req)  # a session cookie's principal
        return auth

    def _access_now(
        self,
        target: AccessTarget,
        req: RequestFacts,
        granted: frozenset[int],
        user: str | None = None,
    ) -> Access:
        """:meth:`access`'s decision without waiting (``Verdict.PENDING``:
        the password check is due, :meth:`access` waits for it)."""
        return self.gate.decide_now(target, self._authorization(req), granted, user)

    def access_now(
        self, target: AccessTarget, req: RequestFacts | None, user: str | None = None
    ) -> Access:
        """The same decision, without waiting: final for the named kinds
        (``Kind.ENTRY``: shown to credentials verified within the window;
        ``Kind.EVENT``: only an unprotected path), ``Verdict.PENDING`` when
        a served kind needs the password check.  ``req`` None: a client
        without credentials."""
        authorization = None
        if req is not None:
            authorization = req.authorization
            login = self.login
            if authorization is None and login is not None and req.extra:
                authorization = login.authorization(req)  # a session cookie's principal
        return self.gate.decide_now(target, authorization, frozenset(), user)

    def count(self, user: str, size: int) -> None:
        """A response of ``size`` body bytes sent to signed-in ``user``
        (the per-user counters of /metrics; a name no users file holds is
        not counted)."""
        self.gate.count(user, size)

    def user_counts(self) -> dict[str, tuple[int, int, int]]:
        """Per user of the users files: ``(requests, bytes, denied)`` (a
        copy of the access hook's counters, for /metrics)."""
        return {user: (c[0], c[1], c[2]) for user, c in self.gate.per_user.items()}

    def may(self, right: Right, path: str, user: str | None) -> bool:
        """May ``user`` (verified by the caller; None: an anonymous client)
        have ``right`` on ``path`` (a match path: ``/a/b``, ``/d/`` for a
        directory)?  The hook's decision, without credentials or a wait:
        for what a page offers (an upload form, a delete button) and what a
        share link may grant (``Right.SHARE`` to make one, the link's own
        rights on its path).  Writes also need ``--upload``; the caller
        knows whether it is on.  A path reached through a symlink is asked
        again on its resolved path (:func:`~serverio.site.access.resolved_path`)
        by the caller, as the pipeline does."""
        if right.writes:
            kind = Kind.WRITE  # the [[writable]] tables too
        else:
            kind = Kind.LISTING if right is Right.LIST else Kind.FILE  # read, share
        return self.gate.allows(AccessTarget((path,), kind, right), user)

    async def admit(
        self, target: AccessTarget, ticket: Ticket, client: Callable[[], str]
    ) -> tuple[Access, Ticket]:
        """:meth:`access` for what the handler resolved for ``ticket`` (the
        index file, the clean-URL or trailing-slash alternative, the SPA
        file, a sidecar asked for by name, a listed directory), and the
        ticket with what it passed recorded (:func:`_record`).

        :meth:`route` decided on the request path first (so that a
        protected name's existence is not told by a 404 either); this is
        the decision that holds however the bytes were reached.

        Cancellation handling: as :meth:`access`; the caller still owns
        (and closes) what it resolved.
        """
        access = await self.access(target, ticket.req, client, ticket.granted)
        return access, _record(ticket, access)

    def admit_now(self, target: AccessTarget, ticket: Ticket) -> Ticket | None:
        """:meth:`admit` when it needs no wait: the ticket with the
        decision recorded (as :meth:`admit` records it) when it is an allow
        without the password check, else None: :meth:`admit` decides (a
        refusal's limiter and log are its)."""
        access = self._access_now(target, ticket.req, ticket.granted)
        if access.verdict is not Verdict.ALLOW:
            return None
        return _record(ticket, access)

    def visible_entries(
        self, req: RequestFacts, segments: tuple[str, ...], entries: list[Entry]
    ) -> list[Entry]:
        """The entries of a listing this client may see: a name an auth rule
        protects is listed only to a client whose credentials (sent with
        this request) were verified for that rule within the verification
        window, as the request for the listing itself does.  An entry that
        leads through a symlink inside the root (``Entry.real``) must pass
        its resolved target's rules too."""
        base = "/" + "/".join(segments) + "/" if segments else "/"
        kept: list[Entry] = []
        for entry in entries:
            path = base + entry.name + ("/" if entry.is_dir else "")
            if not self.access_now(AccessTarget((path,), Kind.ENTRY), req).allowed:
                continue
            if entry.real is not None:
                real = resolved_path(entry.real, entry.is_dir)
                if not self.access_now(AccessTarget((real,), Kind.ENTRY), req).allowed:
                    continue
            kept.append(entry)
        return kept

    def _write_methods(self, target: Target) -> bytes:
        """The write methods a CORS preflight on ``target`` may allow
        (``--cors-writes``): those the ``[[writable]]`` tables allow there
        (PUT and the form's POST for "put", DELETE for "delete"); the
        actual request still goes through the access hook in full."""
        paths = (match_path(target),)
        out = b""
        if write_allowed(self.rules, AccessTarget(paths, Kind.WRITE, Right.UPLOAD)):
            out += b", PUT, POST"
        if write_allowed(self.rules, AccessTarget(paths, Kind.WRITE, Right.DELETE)):
            out += b", DELETE"
        return out

    def may_write(self, req: RequestFacts) -> bool:
        """Does the listing ``req`` asks for show the upload form?  The
        access hook's answer for ``Kind.WRITE`` (``"put"``) on the listed
        directory, the question the form's POST asks (serverio.upload),
        decided now: allowed, or pending a password check of credentials
        this request sent (the listing itself, under the same rule, has
        passed that check to be shown); never for a path no
        ``[[writable]]`` table allows, nor to a client without credentials
        under an auth rule."""
        target = AccessTarget((match_path(req.target),), Kind.WRITE, Right.UPLOAD)
        verdict = self.access_now(target, req).verdict
        return verdict is Verdict.ALLOW or verdict is Verdict.PENDING

    def may_name(self, path: str) -> bool:
        """May an event that every client receives name ``path``?  Not when
        an auth rule protects it (the event would tell unauthenticated
        clients of it): live reload then sends a plain reload instead."""
        return self.access_now(AccessTarget((path,), Kind.EVENT), None).allowed

    # ------------------------------------------------------------ step 1

    async def route(self, req: RequestFacts, now: float, client: Callable[[], str]) -> Ticket:
        """Step 1 (the module doc): the answer the site gives ``req`` (a
        preflight's, a refusal, a redirect...) or the request to serve,
        in a :class:`Ticket`.  Cancellation handling: the password check
        is the only wait (as :meth:`access`)."""
        first = self._routed(req, now)
        if isinstance(first, Ticket):
            return first
        plan, decision, target = first
        access = await self.access(target, req, client)
        return self._ticket(req, now, plan, decision, access)

    def route_now(self, req: RequestFacts, now: float) -> Ticket | None:
        """:meth:`route`'s answer when it needs no wait: the same ticket
        when the access decision on the request path is an allow without
        the password check (the warm anonymous read under rules), else
        None (ask :meth:`route`, which decides it all again)."""
        first = self._routed(req, now)
        if isinstance(first, Ticket):
            return first
        plan, decision, target = first
        access = self._access_now(target, req, frozenset())
        if access.verdict is not Verdict.ALLOW:
            return None  # a refusal or a password check: route's (its limiter, its log)
        return self._ticket(req, now, plan, decision, access)

    def _routed(
        self, req: RequestFacts, now: float
    ) -> Ticket | tuple[Plan | None, RouteDecision, AccessTarget]:
        """The part of :meth:`route` before the access decision: a ticket
        already (a preflight, the core's answer on a path no rule sees),
        or the core's answer to keep, the rules' decision and its target."""
        rules = self.rules
        if rules.cors is not None:
            writes = self._write_methods(req.target) if rules.cors.writes else b""
            fields = preflight_fields(rules.cors, req, writes)
            if fields is not None:
                return Ticket(no_content_plan(now, fields), req)
        reserved = self.reserved_route
        plan = reserved(req, now) if reserved is not None else None
        if plan is None and (self.proxied is None or self.proxied(req) is None):
            # A proxied path is no file: the core's 405/404 do not apply.
            plan = route(req, self.config, now, self.allow)
        # The reserved live-reload paths go through the rules like any
        # other path: an [[auth]] rule that matches them protects them.
        if plan is not None and not self._is_reserved(req.target):
            return Ticket(plan, req)
        decision, target = self._decision(req.target)
        return plan, decision, target

    def _ticket(
        self,
        req: RequestFacts,
        now: float,
        plan: Plan | None,
        decision: RouteDecision,
        access: Access,
    ) -> Ticket:
        """The part of :meth:`route` after the access decision."""
        head = req.method == b"HEAD"
        if not access.allowed:
            # The challenge keeps its own Cache-Control: no-store.
            return Ticket(access_plan(access, now, head=head), req)
        protected = access.rule >= 0
        granted = frozenset((access.rule,)) if protected else frozenset()
        user = access.user
        if plan is not None:
            return Ticket(plan, req, protected, protected, granted, user)
        if decision.redirect is not None:
            status, loc = decision.redirect
            plan = redirect_plan(status, loc, now, head=head)
            return Ticket(plan, req, protected, protected, granted, user)
        if decision.not_found:
            plan = error_plan(404, now, head_only=head)
            return Ticket(plan, req, protected, protected, granted, user)
        if decision.rewritten is not None:
            req = replace(req, target=decision.rewritten)
        return Ticket(None, req, protected, protected, granted, user)

    def _is_reserved(self, target: Target) -> bool:
        return self._reserved is not None and target.segments[:1] == self._reserved

    def _decision(self, target: Target) -> tuple[RouteDecision, AccessTarget]:
        got = self._routes.get(target)
        if got is None:
            decision = decide_route(self.rules, target)
            kind = Kind.RESERVED if self._is_reserved(target) else Kind.REQUEST
            got = decision, AccessTarget(decision.paths, kind)
            if len(self._routes) >= _ROUTES_MAX:
                self._routes.clear()  # bounded: targets (queries) are client input
            self._routes[target] = got
        return got

    # ------------------------------------------------------------ step 2

    def alternative(self, req: RequestFacts, plan: Plan) -> RequestFacts | None:
        """The request to answer instead of ``req``, whose first answer is
        ``plan``: a clean URL's ``.html`` file for a 404, a slashless
        directory's index for its 301 under ``--trailing-slash remove``;
        None (the answer stands)."""
        rules = self.rules
        if not rules.clean_urls and rules.trailing_slash != "remove":
            return None
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

    def finish(self, plan: Plan, ticket: Ticket | None, pages: bool = True) -> Plan:
        """Error page (unless ``pages`` is False: a proxied response), then
        header rules and CORS fields
        (:meth:`serverio.site.finish.Finisher.finish`)."""
        if ticket is None:
            return self.finisher.finish(plan, None, False, False, pages)
        req = ticket.req
        plan = self.finisher.finish(plan, req, ticket.protected, ticket.authed, pages)
        login = self.login
        if login is not None and (req.authorization is not None or plan.status == 401):
            plan = login.finish(plan, req)  # a share link's answer; a 401's sign-in link
        return plan

    def running(self) -> AbstractAsyncContextManager[None]:
        """The error pages' re-read while the server runs
        (:meth:`serverio.site.finish.Finisher.running`).

        Cancellation handling: as there: leaving the block cancels the
        re-read; a read stuck in the filesystem is abandoned.
        """
        return self.finisher.running()


def _record(ticket: Ticket, access: Access) -> Ticket:
    """``ticket`` with an access decision on a resolved target kept: a rule
    it passed (its responses are then private, its error pages shown) and
    the user it knows; ``ticket`` itself when there is nothing to keep."""
    rule = access.rule
    passed = access.allowed and rule >= 0 and rule not in ticket.granted
    user = access.user if access.user and access.user != ticket.user else None
    if not passed and user is None:
        return ticket
    if passed:
        ticket = replace(ticket, granted=ticket.granted | {rule}, protected=True, authed=True)
    if user is not None:
        ticket = replace(ticket, user=user)
    return ticket
