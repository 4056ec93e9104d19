"""The login feature's reserved paths, on the trio side.

With users configured (``--auth-file``, ``--auth``, ``[[auth]]``) or
``--trusted-user-header``, the server answers, before its routing and its
access rules (a sign-in page must be reachable by who is not signed in):

* ``/.serverio/login``: GET the sign-in form (and a CSRF cookie); POST
  ``user``, ``password``, ``csrf`` (and ``next``): the same users files,
  failure limiter and password pool as Basic credentials (the access
  hook's :meth:`~serverio.site.gate.Gate.check_password`), then a signed
  session cookie and 303 to ``next``;
* ``/.serverio/logout``: POST ``csrf``: the cookie is cleared, 303 to ``/``;
* ``/.serverio/whoami``: GET, JSON ``{"user", "via", "csrf"}`` (the
  signed-in user, how, and the CSRF token its forms need);
* ``/.serverio/share``: POST ``path``, ``expires`` (seconds), ``mode``
  (``read`` or ``upload``), ``password``: a share link, JSON ``{"url"}``
  (serverio.login.share);
* ``/.serverio/s/TOKEN/...``: what a share link grants, served by the
  usual pipeline on the real path with the link's grant as the request's
  principal (serverio.site.principal), so every file answer (ranges,
  conditionals, listings) is the ordinary one and the access hook decides
  on what it resolves.

:meth:`Login.attach` (serverio.login.identity) runs on every request
first.  The plumbing is one adapter (:meth:`Login.step`): the pipeline asks
it before anything else (serverio.pipeline.request); it answers a reserved
path itself (a Plan), or hands back the request to serve instead.

CSRF (a sign-in page and every cookie-authenticated POST): the sign-in
form's token is a signed nonce that must match the ``serverio-login``
cookie set with the form (double submit, SameSite=Strict); a signed-in
form's token is signed over a digest of the session (or the trusted
header's user), so another site can neither read nor forge one; a POST
whose ``Origin`` names another site is refused as well.
"""

from __future__ import annotations

import functools
import hashlib
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, quote, urlsplit

from ..concurrency.blocking import PoolSaturated, run_blocking
from ..config import Config
from ..errors import HTTPError
from ..http.access import Right, Verdict
from ..http.core import Plan, RequestFacts, error_plan
from ..http.errorpage import ERROR_CSP, text_body
from ..http.extra import HOST
from ..http.negotiate import prefers_html
from ..http.target import Target
from ..pipeline.hooks import WriteContent
from ..signing import Signer, TokenError
from ..site.principal import (
    MARK,
    Principal,
    principal_of,
    share_authorization,
)
from ..site.rules import parse_basic
from . import pages
from .cookies import clear_cookie, cookie_name, cookie_value, set_cookie
from .fields import CONTENT_TYPE, COOKIE, ORIGIN, SEC_FETCH_SITE
from .identity import SESSION, Identities, session_digest
from .share import (
    LINK_PREFIX,
    DenyList,
    Share,
    open_share,
    password_matches,
    seal_password,
    share_token,
)

if TYPE_CHECKING:
    from ..site.service import Site

__all__ = ["DEFAULT_SHARE_AGE", "LOGIN_COOKIE", "MAX_FORM", "Login", "safe_next"]

LOGIN_COOKIE = "serverio-login"
MAX_FORM = 16384  # bytes of a urlencoded form read at most
DEFAULT_SHARE_AGE = 7 * 86400
_LOGIN_AGE = 3600  # a sign-in form's CSRF token lasts this long
_SHARE_PBKDF2 = 100_000  # a share password's PBKDF2 iterations
# A link's rights as the access vocabulary names them.
_RIGHTS = {"read": Right.READ, "list": Right.LIST, "upload": Right.UPLOAD}
_PAGES = frozenset(("login", "logout", "whoami", "share", "s"))
_NEXT = re.compile(r"/(?![/\\])[!-~]{0,2047}")
_FORM_TYPE = "application/x-www-form-urlencoded"


def safe_next(value: str | None) -> str:
    """Where a sign-in may send the browser: a path on this server
    (``/...``, printable ASCII, no ``//`` or ``/\\`` that a browser reads
    as another host), else ``/``."""
    if value is None or _NEXT.fullmatch(value) is None or "\\" in value:
        return "/"
    return value


def _same_site(req: RequestFacts) -> bool:
    """Is a POST from this site?  ``Origin`` when sent (RFC 6454 §7) must
    name this host; else ``Sec-Fetch-Site`` must not say cross-site; a
    client that sends neither (curl) carries no ambient browser state."""
    origin = ORIGIN.of(req)
    if origin is not None:
        parts = urlsplit(origin.strip())
        want = "https" if req.tls else "http"
        host = HOST.of(req)
        return parts.scheme.lower() == want and host is not None and parts.netloc == host
    site = SEC_FETCH_SITE.of(req)
    return site is None or site.strip().lower() in ("same-origin", "none")


async def _read_form(req: RequestFacts, content: WriteContent | None) -> dict[str, str]:
    """A urlencoded form's fields (the first of each name); 413 past
    :data:`MAX_FORM`, 415 for another content type, 400 for bad UTF-8."""
    if content is None or content.declared == 0:
        return {}
    kind = (CONTENT_TYPE.of(req) or "").partition(";")[0].strip().lower()
    if kind != _FORM_TYPE:
        raise HTTPError(415, "a urlencoded form is expected")
    if content.declared is not None and content.declared > MAX_FORM:
        raise HTTPError(413, "form too large")
    data = bytearray()
    while (chunk := await content.next_chunk()) is not None:
        data += chunk
        if len(data) > MAX_FORM:
            raise HTTPError(413, "form too large")
    try:
        text = data.decode("utf-8")
        pairs = parse_qsl(text, keep_blank_values=True, max_num_fields=32)
    except (UnicodeError, ValueError):
        raise HTTPError(400, "malformed form") from None
    out: dict[str, str] = {}
    for key, value in pairs:
        out.setdefault(key, value)
    return out


class Login:
    """Sign-in, sessions, the trusted header and share links of one server."""

    def __init__(self, config: Config, site: Site, signer: Signer) -> None:
        self.config = config
        self.site = site
        self.signer = signer
        pol = config.users
        networks = config.site.proxy_networks
        self.identities = Identities(signer, networks, pol.trusted_user_header, time.time)
        self.deny = DenyList(pol.share_deny_file, site.auth_pool)
        self.session_age = pol.session_max_age
        self.share_age = pol.share_max_age
        # Users to sign in: an [[auth]] rule's, or those the [[access]]
        # rules name (--auth-file / --auth with --allow).
        self.users = bool(site.rules.auth) or site.rules.users is not None
        # attach changes a request: the trusted header's user, or a write's
        # session (accepted by the access hook: some users file holds its hash).
        self.attaches = self.users or pol.trusted_user_header is not None
        self.reads = pol.trusted_user_header is not None  # a read's user is attached too
        vouchers = site.gate.vouchers
        self.identities.accepts = lambda auth: vouchers.of(auth).user is not None
        # The hook's two per-request calls, bound once (no wrapper call).
        self.attach = self.identities.attach
        self.names = self.identities.names
        self.authorization = self.identities.authorization

    # ------------------------------------------------------------ adapter

    def takes(self, req: RequestFacts) -> bool:
        """Is ``req`` for one of the reserved paths?  (Pure, no I/O.)"""
        segs = req.target.segments
        return len(segs) >= 2 and segs[0] == ".serverio" and segs[1] in _PAGES

    async def step(
        self,
        req: RequestFacts,
        content: WriteContent | None,
        now: float,
        client: Callable[[], str],
    ) -> Plan | RequestFacts:
        """The answer to a reserved path, or (a share link) the request to
        serve instead.  Raises HTTPError for a malformed request.

        Cancellation handling: a password check in the auth pool is the
        only wait (abandoned like any pooled call, counted as a failure);
        nothing is held.
        """
        segs = req.target.segments
        page = segs[1]
        if page == "s":
            return await self._share_link(req, content, now, client)
        if len(segs) != 2:
            raise HTTPError(404, "no such page")
        method = req.method
        if page == "login":
            if method == b"GET" or method == b"HEAD":
                return self._login_form(req, now)
            if method == b"POST":
                return await self._login(req, await _read_form(req, content), now, client)
            return _not_allowed(now, b"GET, HEAD, POST")
        if page == "whoami":
            if method == b"GET" or method == b"HEAD":
                return self._whoami(req, now)
            return _not_allowed(now, b"GET, HEAD")
        if method != b"POST":
            return _not_allowed(now, b"POST")
        form = await _read_form(req, content)
        if page == "logout":
            return self._logout(req, form, now)
        return await self._share(req, form, now, client)

    def finish(self, plan: Plan, req: RequestFacts) -> Plan:
        """A share link's answer as the link shows it: a redirect to the
        real path goes to the link's own URL instead, nothing is stored by
        shared caches, no Referer leaks the token."""
        who = principal_of(self.authorization(req))
        if who is None or who.via != "share":
            if plan.status == 401 and who is None:
                return self._offer_login(plan, req)
            return plan
        real = Target(tuple(s for s in who.share_path.split("/") if s), True, None).url_path()
        if not who.share_path.endswith("/"):
            real = real.rstrip("/")
        link = LINK_PREFIX + who.share_token + ("/" if who.share_path.endswith("/") else "")
        out: list[tuple[bytes, bytes]] = []
        for name, value in plan.headers:
            if name == b"cache-control":
                continue
            if name == b"location":
                text = value.decode("latin-1")
                if text == real or text.startswith(real.rstrip("/") + "/"):
                    rest = text[len(real.rstrip("/")) :].lstrip("/")
                    value = (link.rstrip("/") + "/" + rest).encode("latin-1")
            out.append((name, value))
        out += [(b"cache-control", b"private, no-cache"), (b"referrer-policy", b"same-origin")]
        return replace(plan, headers=tuple(out))

    def _offer_login(self, plan: Plan, req: RequestFacts) -> Plan:
        """A 401 for a browser (it prefers HTML) with the built-in page:
        the page links to the sign-in form (its Basic challenge stays, for
        the browser's own prompt; cancelled, the page shows)."""
        if not self.users or not prefers_html(req.accept):
            return plan
        builtin = (b"content-security-policy", ERROR_CSP) in plan.headers
        if not builtin and plan.body != (text_body(401),):
            return plan  # the site's own [errors] page
        where = req.target.url_path() + (f"?{req.target.query}" if req.target.query else "")
        body = pages.sign_in_needed(safe_next(where))
        kept = [(n, v) for n, v in plan.headers if n in (b"www-authenticate", b"vary")]
        return pages.page_plan(401, time.time(), body, kept, head=not plan.send_body)

    # ------------------------------------------------------------ sign-in

    def _csrf_for(self, req: RequestFacts) -> str | None:
        """The CSRF token a signed-in client's forms carry (None: no
        session nor trusted-header user)."""
        binding = self._binding(req)
        if binding is None:
            return None
        return self.signer.sign("csrf", (binding,), int(time.time()) + self.session_age)

    def _binding(self, req: RequestFacts) -> str | None:
        who = principal_of(self.authorization(req))
        if who is None or not who.user:
            return None
        if who.via == "session":
            token = cookie_value(COOKIE.of(req), cookie_name(SESSION, req.tls))
            return None if token is None else "s:" + session_digest(token)
        return "u:" + who.user

    def _csrf_ok(self, req: RequestFacts, form: dict[str, str]) -> bool:
        binding = self._binding(req)
        token = form.get("csrf")
        if binding is None or token is None:
            return False
        try:
            opened = self.signer.open("csrf", token, time.time())
        except TokenError:
            return False
        return opened.fields == (binding,)

    def _login_form(
        self, req: RequestFacts, now: float, error: str = "", status: int = 200, nxt: str = ""
    ) -> Plan:
        nonce = secrets.token_urlsafe(18)
        csrf = self.signer.sign("login", (nonce,), int(time.time()) + _LOGIN_AGE)
        if not nxt:
            nxt = safe_next(_query_value(req.target.query, "next"))
        body = pages.login_page(csrf, nxt, error)
        name = cookie_name(LOGIN_COOKIE, req.tls)
        fields = [set_cookie(name, nonce, _LOGIN_AGE, secure=req.tls, same_site="Strict")]
        return pages.page_plan(status, now, body, fields, head=req.method == b"HEAD")

    async def _login(
        self, req: RequestFacts, form: dict[str, str], now: float, client: Callable[[], str]
    ) -> Plan:
        nxt = safe_next(form.get("next"))
        nonce = cookie_value(COOKIE.of(req), cookie_name(LOGIN_COOKIE, req.tls))
        try:
            opened = self.signer.open("login", form.get("csrf", ""), time.time())
            fresh = nonce is not None and opened.fields == (nonce,)
        except TokenError:
            fresh = False
        if not fresh or not _same_site(req):
            return self._login_form(req, now, "The form expired: sign in again.", 403, nxt)
        user, password = form.get("user", ""), form.get("password", "")
        if not user or len(user) > 256 or len(password) > 1024 or not self.users:
            return self._login_form(req, now, "Wrong user or password.", 403, nxt)
        got, tag = await self.site.gate.check_password(user, password, client)
        verdict = got.verdict
        if verdict is Verdict.THROTTLE:
            retry = [(b"retry-after", b"%d" % got.retry_after)]
            body = pages.login_page("", nxt, "Too many attempts: wait a moment.")
            return pages.page_plan(429, now, body, retry)
        if verdict is Verdict.UNAVAILABLE:
            raise HTTPError(503, "the password check is busy")
        if verdict is not Verdict.ALLOW:
            return self._login_form(req, now, "Wrong user or password.", 403, nxt)
        token = self.identities.new_session(user, tag, self.session_age)
        fields = [
            set_cookie(cookie_name(SESSION, req.tls), token, self.session_age, secure=req.tls),
            clear_cookie(cookie_name(LOGIN_COOKIE, req.tls), secure=req.tls),
        ]
        return pages.see_other(now, nxt, fields)

    def _logout(self, req: RequestFacts, form: dict[str, str], now: float) -> Plan:
        if principal_of(self.authorization(req)) is not None and not (
            self._csrf_ok(req, form) and _same_site(req)
        ):
            raise HTTPError(403, "missing or stale CSRF token")
        clear = clear_cookie(cookie_name(SESSION, req.tls), secure=req.tls)
        return pages.see_other(now, "/", [clear])

    def _signed_in(self, req: RequestFacts) -> Principal | None:
        """The user a session cookie or the trusted header names, when the
        access hook accepts them (a session whose password changed since is
        nobody: anonymous here as for every right)."""
        auth = self.authorization(req)
        who = principal_of(auth)
        if who is None or not who.user or auth is None:
            return None
        return who if self.site.gate.vouchers.of(auth).user is not None else None

    def _whoami(self, req: RequestFacts, now: float) -> Plan:
        who = self._signed_in(req)
        user: str | None = who.user if who is not None and who.user else None
        via = who.via if user is not None and who is not None else None
        if user is None:
            basic = parse_basic(req.authorization)
            via = "basic" if basic is not None else None
            user = basic[0] if basic is not None else None  # not verified here: shown only
        data = {"user": user, "via": via, "csrf": self._csrf_for(req)}
        return pages.json_plan(200, now, data)

    # ------------------------------------------------------------ sharing

    async def _sharer(self, req: RequestFacts, client: Callable[[], str]) -> str | Plan:
        """Who asks for a link (a verified user), or the refusal."""
        who = self._signed_in(req)
        if who is not None:
            return who.user
        basic = parse_basic(req.authorization)
        if basic is None:
            return self._problem_401("sign in (or send Basic credentials) to share")
        got, _ = await self.site.gate.check_password(basic[0], basic[1], client)
        if got.verdict is Verdict.THROTTLE:
            retry = [(b"retry-after", b"%d" % got.retry_after)]
            return pages.problem_plan(429, time.time(), "too many attempts", retry)
        if got.verdict is Verdict.UNAVAILABLE:
            raise HTTPError(503, "the password check is busy")
        if got.verdict is not Verdict.ALLOW:
            return self._problem_401("wrong user or password")
        return basic[0]

    def _problem_401(self, detail: str) -> Plan:
        """401 for a JSON client (problem details) with the Basic challenge
        of the first auth rule's realm."""
        auth = self.site.rules.auth
        realm = auth[0].realm if auth else "serverio"
        value = f'Basic realm="{realm}", charset="UTF-8"'.encode("ascii", "replace")
        return pages.problem_plan(401, time.time(), detail, [(b"www-authenticate", value)])

    async def _share(
        self, req: RequestFacts, form: dict[str, str], now: float, client: Callable[[], str]
    ) -> Plan:
        if not _same_site(req):
            return pages.problem_plan(403, now, "cross-site request")
        who = await self._sharer(req, client)
        if isinstance(who, Plan):
            return who
        if principal_of(self.authorization(req)) is not None and not self._csrf_ok(req, form):
            return pages.problem_plan(403, now, "missing or stale csrf field")
        path = _share_path(form.get("path", ""))
        if path is None:
            return pages.problem_plan(400, now, "path: an absolute path without . or .. parts")
        mode = form.get("mode", "read")
        if mode not in ("read", "upload") or (mode == "upload" and not path.endswith("/")):
            return pages.problem_plan(400, now, "mode: read, or upload for a folder (ending /)")
        try:
            seconds = int(form.get("expires") or DEFAULT_SHARE_AGE)
        except ValueError:
            return pages.problem_plan(400, now, "expires: a number of seconds")
        if seconds <= 0:
            return pages.problem_plan(400, now, "expires: a number of seconds above 0")
        seconds = min(seconds, self.share_age)
        password = form.get("password", "")
        if len(password) > 1024:
            return pages.problem_plan(400, now, "password: at most 1024 characters")
        if mode == "upload":
            rights = frozenset(("upload",))
        elif path.endswith("/"):
            rights = frozenset(("read", "list"))
        else:
            rights = frozenset(("read",))
        refusal = self._may_share(who, path, rights, now)
        if refusal is not None:
            return refusal
        stored = ""
        if password:
            try:
                stored = await run_blocking(
                    self.site.auth_pool, seal_password, self.signer, password, _SHARE_PBKDF2
                )
            except PoolSaturated:
                raise HTTPError(503, "the password pool is busy") from None
        expires = int(now) + seconds
        token = share_token(self.signer, path, rights, stored, expires)
        name = "" if path.endswith("/") else quote(path.rsplit("/", 1)[1], safe="")
        link = f"{LINK_PREFIX}{token}/{name}"
        host = HOST.of(req)
        url = f"{'https' if req.tls else 'http'}://{host}{link}" if host else link
        data = {"url": url, "path": path, "rights": sorted(rights), "expires": expires}
        return pages.json_plan(201, now, data)

    def _may_share(self, user: str, path: str, rights: frozenset[str], now: float) -> Plan | None:
        """May ``user`` (verified) share ``path`` (``Right.SHARE``), and
        does it hold each right the link would grant?  The access hook's
        decision without a wait (:meth:`serverio.site.service.Site.may`)."""
        asked = [Right.SHARE] + [_RIGHTS[r] for r in sorted(rights)]
        if not all(self.site.may(right, path, user) for right in asked):
            return pages.problem_plan(403, now, "you may not share that")
        return None

    # ------------------------------------------------------------ links

    async def _share_link(
        self,
        req: RequestFacts,
        content: WriteContent | None,
        now: float,
        client: Callable[[], str],
    ) -> Plan | RequestFacts:
        segs = req.target.segments
        head = req.method == b"HEAD"
        if len(segs) < 3:
            raise HTTPError(404, "no such link")
        token = segs[2]
        try:
            share = open_share(self.signer, token, time.time())
        except TokenError as exc:
            status = 410 if exc.kind == "expired" else 403
            return pages.page_plan(status, now, pages.share_refused_page(status), head=head)
        if await self.deny.denies(token):
            return pages.page_plan(403, now, pages.share_refused_page(403), head=head)
        rest = segs[3:]
        if share.password:
            gate = await self._share_password(req, share, token, content, now, client)
            if gate is not None:
                return gate
        if share.folder and not rest and not req.target.slash:
            return pages.see_other(now, f"{LINK_PREFIX}{token}/")
        method = req.method
        if "upload" in share.rights:
            if rest:
                raise HTTPError(404, "a drop box has no members to show")
            if method == b"GET" or method == b"HEAD":
                name = share.path.rstrip("/").rsplit("/", 1)[-1] or "/"
                return pages.page_plan(200, now, pages.dropbox_page(name), head=head)
            if method != b"POST":
                return _not_allowed(now, b"GET, HEAD, POST")
        elif method != b"GET" and method != b"HEAD":
            return _not_allowed(now, b"GET, HEAD")
        base = tuple(s for s in share.path.split("/") if s)
        if not share.folder:
            if rest and rest != base[-1:]:
                raise HTTPError(404, "a file link names one file")
            rest = ()
        segments = base + rest
        target = Target(
            segments,
            share.folder and (req.target.slash or not rest),
            req.target.query,
            hidden=any(s.startswith(".") for s in segments),
        )
        auth = share_authorization(share.path, share.rights, token)
        return replace(req, target=target, authorization=auth)

    async def _share_password(
        self,
        req: RequestFacts,
        share: Share,
        token: str,
        content: WriteContent | None,
        now: float,
        client: Callable[[], str],
    ) -> Plan | None:
        """None when the browser holds this link's password cookie; else
        the password form, or (a POST of it) the check."""
        digest = hashlib.sha256(token.encode("ascii")).hexdigest()[:24]
        name = cookie_name("serverio-share-" + digest[:12], req.tls)
        held = cookie_value(COOKIE.of(req), name)
        if held is not None:
            try:
                if self.signer.open("share-pass", held, time.time()).fields == (digest,):
                    return None
            except TokenError:
                pass
        head = req.method == b"HEAD"
        kind = (CONTENT_TYPE.of(req) or "").partition(";")[0].strip().lower()
        if req.method != b"POST" or kind != _FORM_TYPE:
            return pages.page_plan(200, now, pages.share_password_page(), head=head)
        form = await _read_form(req, content)
        check = functools.partial(password_matches, self.signer, share.password)
        got = await self.site.gate.check_secret(
            "share:" + digest, check, form.get("password", "")[:1024], client
        )
        if got.verdict is Verdict.THROTTLE:
            retry = [(b"retry-after", b"%d" % got.retry_after)]
            return pages.page_plan(429, now, pages.share_password_page("Wait a moment."), retry)
        if got.verdict is Verdict.UNAVAILABLE:
            raise HTTPError(503, "the password check is busy")
        if got.verdict is not Verdict.ALLOW:
            return pages.page_plan(403, now, pages.share_password_page("Wrong password."))
        value = self.signer.sign("share-pass", (digest,), share.expires)
        age = max(0, share.expires - int(now))
        cookie = set_cookie(name, value, age, secure=req.tls)
        return pages.see_other(now, req.target.url_path(), [cookie])


def _share_path(value: str) -> str | None:
    """A share form's ``path`` as a match path, or None: absolute, no
    empty, ``.``, ``..`` or hidden part, no control character."""
    if not value.startswith("/") or len(value) > 2048 or "\\" in value:
        return None
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value) or MARK in value:
        return None
    folder = value.endswith("/")
    parts = value.strip("/").split("/") if value.strip("/") else []
    if any(p in ("", ".", "..") or p.startswith(".") for p in parts):
        return None
    if not parts:
        return "/"
    return "/" + "/".join(parts) + ("/" if folder else "")


def _query_value(query: str | None, name: str) -> str | None:
    if not query:
        return None
    for key, value in parse_qsl(query, keep_blank_values=True, max_num_fields=32):
        if key == name:
            return value
    return None


def _not_allowed(now: float, allow: bytes) -> Plan:
    return error_plan(405, now, allow=allow)
