"""Live reload, the pure part: the page script, HTML injection, SSE framing.

In ``--watch`` mode (a development mode, docs/features.md "Live reload"):

* two reserved paths under ``--watch-prefix`` (default ``/.serverio``):
  ``/events``, the Server-Sent Events stream, and ``/livereload.js``, the
  page script for pages that include it by hand.  Both are answered by
  :func:`reserved_plan`, the pipeline's router (``LiveReload.route``,
  :mod:`serverio.pipeline.hooks`), before the core's hidden-path rule;
* HTML representations get the same script, inline, before ``</body>``
  (:func:`inject_html`).  The injected bytes are a different
  representation, so they get their own ETag (:func:`injected_etag`,
  derived from the base one, RFC 9110 §8.8.3) and their own length;
  preconditions are evaluated against that ETag and Range is ignored
  (RFC 9110 §14.2 lets a server ignore it) — :func:`decide_injected`;
* the injected bytes are content-coded like the file would be
  (:func:`injected_coding`): the same negotiation, on the fly only — a
  precompressed sidecar holds the original bytes, without the script, so
  it never answers for the injected variant; each coding has its own ETag
  (``"tag-lr-gzip"``, §8.8.3.3) and ``Vary: Accept-Encoding`` stays;
* directory listings carry a strict CSP: the inline script is allowed by
  its hash (``script-src 'sha256-…'``) and the stream by
  ``connect-src 'self'`` (:func:`watch_csp`), nothing else is relaxed.

Nothing here does I/O; every rule is table-tested (tests/test_livereload.py).
"""

from __future__ import annotations

from ..config import Config
from ..http.core import Plan, RequestFacts, coded_etag, common_fields, conditional_plan
from ..http.select import choose_coding, negotiates
from .script import LiveAssets

__all__ = [
    "accepts_html",
    "csp_blocks_scripts",
    "decide_injected",
    "error_page",
    "header",
    "inject_html",
    "injected_coding",
    "injected_etag",
    "injected_precondition",
    "is_html",
    "reserved_plan",
    "watch_csp",
]


def is_html(content_type: bytes) -> bool:
    return content_type.split(b";", 1)[0].strip().lower() in (
        b"text/html",
        b"application/xhtml+xml",
    )


def accepts_html(req: RequestFacts) -> bool:
    """Does the request say it takes HTML (a browser navigation does)?"""
    return req.accept is not None and "text/html" in req.accept.lower()


def header(plan: Plan, name: bytes) -> bytes | None:
    for k, v in plan.headers:
        if k == name:
            return v
    return None


_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
_GZIP_MAGIC = b"\x1f\x8b"


def inject_html(body: bytes, tag: bytes) -> bytes | None:
    """``body`` with ``tag`` before the last ``</body>`` (any case), else
    before the last ``</html>``, else appended; None when the bytes are not
    an ASCII-compatible HTML text (a UTF-16 BOM, or gzip magic: compressed
    bytes are never edited — injection happens before compression)."""
    if body.startswith(_UTF16_BOMS) or body.startswith(_GZIP_MAGIC):
        return None
    lower = body.lower()
    for closing in (b"</body", b"</html"):
        at = lower.rfind(closing)
        if at >= 0:
            return body[:at] + tag + body[at:]
    return body + tag


def injected_etag(etag: str) -> str:
    """The ETag of the injected variant: ``"tag"`` -> ``"tag-lr"`` (weak stays weak)."""
    if not etag.endswith('"'):
        return etag
    return etag[:-1] + '-lr"'


_HASH_OR_NONCE = (b"'nonce-", b"'sha256-", b"'sha384-", b"'sha512-")


def _runs_inline(sources: list[bytes]) -> bool:
    """Do these script sources run any inline script already?  Only
    ``'unsafe-inline'`` alone does: a hash or a nonce beside it, or
    ``'strict-dynamic'``, turns it off (CSP3 §8.2), so adding our hash to a
    list that relies on it would block the page's other inline scripts."""
    low = [s.lower() for s in sources]
    return (
        b"'unsafe-inline'" in low
        and b"'strict-dynamic'" not in low
        and not any(s.startswith(_HASH_OR_NONCE) for s in low)
    )


def _with(sources: list[bytes], source: bytes, script: bool) -> list[bytes] | None:
    """``sources`` allowing ``source`` too, or None when they already do."""
    low = [s.lower() for s in sources]
    if source.lower() in low or (script and _runs_inline(sources)):
        return None
    return [s for s in sources if s.lower() != b"'none'"] + [source]


def watch_csp(csp: bytes, assets: LiveAssets) -> bytes:
    """A Content-Security-Policy, extended just enough to let the injected
    script run and open its stream; every other directive is kept as sent.

    Each fetch the script needs is allowed where CSP3 looks for it: the
    inline ``<script>`` by its hash in ``script-src-elem`` and
    ``script-src``, the EventSource by ``'self'`` in ``connect-src``; a
    missing directive falls back to ``default-src`` (§6.8.3), so it is
    added with ``default-src``'s sources plus ours (appending only ours
    would narrow it), and with no ``default-src`` either nothing restricts
    that fetch.  The first occurrence of a directive is the one enforced
    (§2.2, a duplicate is ignored): that is the one edited.  A policy with
    ``sandbox`` but no ``allow-scripts`` cannot be helped
    (:func:`csp_blocks_scripts`).
    """
    parsed = [d.split() for d in csp.split(b";") if d.strip()]
    first: dict[bytes, int] = {}
    for i, words in enumerate(parsed):
        first.setdefault(words[0].lower(), i)
    out = [b" ".join(w) for w in parsed]
    default = parsed[first[b"default-src"]][1:] if b"default-src" in first else None
    script = assets.script_source
    wants = [(b"script-src-elem", script, True), (b"script-src", script, True)]
    wants.append((b"connect-src", b"'self'", False))
    for name, source, is_script in wants:
        if name in first:
            i = first[name]
            grown = _with(parsed[i][1:], source, is_script)
            if grown is not None:
                out[i] = b" ".join([parsed[i][0], *grown])
        elif default is None or name == b"script-src-elem":
            continue  # nothing restricts it, or it falls back to script-src
        elif name == b"script-src" and b"script-src-elem" in first:
            continue  # script elements follow script-src-elem, edited above
        else:
            grown = _with(default, source, is_script)
            if grown is not None:
                out.append(b" ".join([name, *grown]))
    return b"; ".join(out)


def csp_blocks_scripts(csp: bytes) -> bool:
    """Does ``csp`` sandbox the page without ``allow-scripts``?  Then no
    script runs at all (CSP3 §6.3.2, HTML's sandboxing flags), the
    live-reload one included, whatever :func:`watch_csp` adds."""
    for d in csp.split(b";"):
        words = d.split()
        if words and words[0].lower() == b"sandbox":
            return b"allow-scripts" not in (w.lower() for w in words[1:])
    return False


_REPLACED = frozenset(
    {b"etag", b"content-length", b"accept-ranges", b"content-security-policy", b"content-encoding"}
)
# What a 304 repeats from the 200 it stands for (RFC 9110 §15.4.5), after
# the common fields.
_VALIDATORS = frozenset({b"etag", b"last-modified", b"cache-control", b"vary"})


def injected_coding(req: RequestFacts, base: Plan, size: int, cfg: Config) -> str:
    """The content coding of the injected variant (``""``: identity) whose
    identity bytes are ``size`` long.

    Negotiated only where the file's own coding is (``base`` carries
    ``Vary: Accept-Encoding``; a listing does not) and as for a file: not
    for a Range request, by the same size limits (applied to the injected
    bytes).  On the fly only: no sidecar holds these bytes.
    """
    vary = header(base, b"vary")
    if vary is None or b"accept-encoding" not in vary.lower() or not negotiates(req, True):
        return ""
    return choose_coding(req, cfg, size, ())[0]


def _etag(base: Plan, coding: str) -> str:
    base_etag = header(base, b"etag")
    if base_etag is None:
        return ""
    return coded_etag(injected_etag(base_etag.decode("ascii")), coding)


def injected_precondition(
    req: RequestFacts, base: Plan, mtime: int | None, now: float, coding: str = ""
) -> Plan | None:
    """The 304 or 412 for the injected variant in ``coding``, or None.

    Preconditions are evaluated against the variant's own ETag (§13.2.2),
    so a validator of the plain file (or of another coding) never matches
    the injected bytes and vice versa.  Known before any compression.
    """
    etag = _etag(base, coding)
    if not etag:
        return None
    validators = [
        (k, etag.encode("ascii") if k == b"etag" else v)
        for k, v in base.headers
        if k in _VALIDATORS
    ]
    return conditional_plan(req, etag, mtime, now, validators)


def decide_injected(
    req: RequestFacts,
    base: Plan,
    body: bytes,
    mtime: int | None,
    now: float,
    assets: LiveAssets,
    *,
    coding: str = "",
) -> Plan:
    """The response for the injected variant of the HTML representation
    ``base`` (a 200 of the whole identity bytes): ``body`` is the injected
    bytes, content-coded with ``coding`` when that is not ``""``.

    Preconditions: :func:`injected_precondition`.  Range is ignored
    (§14.2): ``Accept-Ranges: none``.
    """
    pre = injected_precondition(req, base, mtime, now, coding)
    if pre is not None:
        return pre
    etag = _etag(base, coding)
    head = req.method == b"HEAD"
    hs = [(k, v) for k, v in base.headers if k not in _REPLACED]
    if etag:
        hs.append((b"etag", etag.encode("ascii")))
    hs.append((b"accept-ranges", b"none"))
    if coding:
        hs.append((b"content-encoding", coding.encode("ascii")))
    csp = header(base, b"content-security-policy")
    if csp is not None:
        hs.append((b"content-security-policy", watch_csp(csp, assets)))
    hs.append((b"content-length", b"%d" % len(body)))
    return Plan(200, tuple(hs), (body,) if body else (), send_body=not head)


def error_page(plan: Plan, assets: LiveAssets) -> Plan:
    """An error plan as a small HTML page with the script (for a request
    that accepts HTML): a page deleted and recreated reloads on its own.
    The text is the same fixed status line: no path, no detail."""
    text = b"".join(p for p in plan.body if isinstance(p, bytes)).strip()
    body = (
        b"<!doctype html>\n<meta charset=utf-8>\n<title>"
        + text
        + b"</title>\n<h1>"
        + text
        + b"</h1>\n"
        + assets.tag
        + b"\n"
    )
    hs = [(k, v) for k, v in plan.headers if k not in (b"content-type", b"content-length")]
    hs.append((b"content-type", b"text/html; charset=utf-8"))
    hs.append((b"cache-control", b"no-store"))
    hs.append((b"content-length", b"%d" % len(body)))
    return Plan(plan.status, tuple(hs), (body,), send_body=plan.send_body, close=plan.close)


def reserved_plan(req: RequestFacts, assets: LiveAssets, now: float) -> Plan | None:
    """The reserved live-reload paths (a GET or HEAD under ``--watch``), or None.

    ``/events`` is a streaming plan (``stream=True``): its head goes out,
    then the connection hands the socket to the event broadcaster until
    the client or the server goes away.  The body is delimited by closing
    the connection (RFC 9112 §6.3, item 8), so no chunked framing is needed.
    """
    segments = req.target.segments
    if len(segments) != 2 or segments[0] != assets.prefix_segment or req.target.slash:
        return None
    if segments[1] == "events":
        hs = (
            *common_fields(now),
            (b"content-type", b"text/event-stream"),
            (b"cache-control", b"no-store"),
        )
        return Plan(200, hs, (), send_body=req.method == b"GET", close=True, stream=True)
    if segments[1] == "livereload.js":
        validators = (
            (b"etag", assets.script_etag.encode("ascii")),
            (b"cache-control", b"no-cache"),
        )
        pre = conditional_plan(req, assets.script_etag, None, now, validators)
        if pre is not None:
            return pre
        body = assets.script
        js = (
            *common_fields(now),
            *validators,
            (b"content-type", b"text/javascript; charset=utf-8"),
            (b"content-length", b"%d" % len(body)),
        )
        return Plan(200, js, (body,), send_body=req.method != b"HEAD")
    return None
