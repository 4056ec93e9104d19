"""The decision after resolution (pure, trio side): facts -> a Prepared plan.

:func:`serverio.fs.prepare.resolve` (blocking, inline or one hop into the
``fs`` pool) gathers facts and descriptors into a
:class:`~serverio.model.Resolution`; :func:`decide` turns them into the
response on the event loop: which representation
(:mod:`serverio.http.select`: the coding choice between identity, a sidecar
and on-the-fly compression, digest eligibility; the file's headers, Vary
and the digest asked for came computed with the resolution), the plan
(:func:`serverio.http.core.decide_file` / ``decide_directory`` /
``error_plan``, a filesystem reason's status from
:data:`serverio.model.reasons.REASON_STATUS`), and which descriptor the body
keeps.  It only reads its arguments (and closes the descriptors it does not
hand on), so it is tested as a table without an event loop, and it needs no
second hop: a small body was read whole in the hop and is sliced here.

The warm-file cache is answered here too: :func:`cache_candidate` finds the
entry that may answer a request (no syscall), :func:`serve_cached` decides
from it once the caller found it valid (inline: one ``stat``; pooled:
inside the trust window, or in the hop).  Neither stores anything in the
cache: a plain response worth memoising comes back as
:attr:`Prepared.memo <serverio.model.Prepared.memo>`, and the caller
(:class:`serverio.pipeline.handler.Handler`) stores it and counts the hit.
Its types are :mod:`serverio.model`'s: nothing here imports the filesystem
layer.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Final as Constant

from ..config import Config
from ..http.core import (
    FileSpan,
    Plan,
    RequestFacts,
    decide_directory,
    decide_file,
    depends_on_method_only,
    error_plan,
    precondition_plan,
    redated,
)
from ..http.select import (
    choice_depends_on,
    choose_coding,
    digest_algorithm,
    digest_applies,
    file_headers,
    negotiates,
    sidecars_wanted,
)
from . import (
    CACHED,
    DIRECTORY,
    ERROR,
    LIST,
    LISTING,
    UNAVAILABLE,
    Body,
    CacheCandidate,
    CachedFile,
    CacheEntries,
    Direct,
    FollowUps,
    Opened,
    PlainMemo,
    Prepared,
    Resolution,
    Sidecar,
)
from .reasons import REASON_STATUS

__all__ = [
    "FLY",
    "cache_candidate",
    "decide",
    "decide_direct",
    "identity_fallback",
    "needs_compressed",
    "serve_cached",
]

_PLAIN_METHODS = frozenset({b"GET", b"HEAD"})

# The prefix of a memo key's coding for a coding made on the fly (its bytes
# from the compression cache), beside "" (identity) and a sidecar's coding.
FLY = "~"


def _placeholder(now: float) -> Plan:
    # Replaced by the follow-up; if a bug ever skipped it, a 500 goes out
    # (dated now), never a wrong 200.
    return error_plan(500, now)


def _unavailable(now: float) -> Plan:
    # The file shrank while we read it: try again (never a short body).
    return error_plan(503, now)


def decide(
    res: Resolution, req: RequestFacts, cfg: Config, now: float, boundary: str = ""
) -> Prepared:
    """The response for what :func:`~serverio.fs.prepare.resolve` found.

    Takes over ``res``'s descriptors: the one the body or a follow-up reads
    moves to the returned Prepared, the others are closed here.  Not for a
    CACHED resolution (the caller answers it with :func:`serve_cached`).
    """
    kind = res.kind
    head = req.method == b"HEAD"
    if kind == ERROR:
        plan = error_plan(REASON_STATUS[res.reason], now, head_only=head)
        return Prepared(plan, real=res.real)  # real: past a link, decided there too
    if kind == DIRECTORY:
        return Prepared(decide_directory(req, cfg, now), real=res.real)
    if kind == LISTING:
        # The scan runs in the work pool (serverio.pipeline.content); the
        # directory descriptor goes with it.
        fd, res.fd = res.fd, -1
        served = "/" + req.target.relpath + "/" if req.target.segments else "/"
        return Prepared(_placeholder(now), Opened(fd), todo=LIST, served=served, real=res.real)
    if kind == UNAVAILABLE:
        return Prepared(_unavailable(now))
    assert kind != CACHED and res.file is not None
    try:
        return _decide_file(res, req, cfg, now, boundary, "/" + res.relpath)
    finally:
        res.close()  # whatever was not handed on


def decide_direct(found: Direct, req: RequestFacts, cfg: Config, now: float) -> Prepared:
    """The response for a small file the direct resolution read
    (:func:`serverio.fs.prepare.resolve_direct`): :func:`decide`'s for the
    same file, request and moment (identity, no digest, nothing held open:
    its bytes were read, or it is a HEAD)."""
    facts = found.facts
    plan = decide_file(req, facts, cfg, now, vary=found.vary, extra=found.extra)
    if plan.needs_file:
        data = found.data
        assert data is not None  # a GET's bytes are read (Direct.data)
        plan = _slice_spans(data, plan)
    return Prepared(plan, None, facts, served="/" + found.relpath)


def _decide_file(
    res: Resolution, req: RequestFacts, cfg: Config, now: float, boundary: str, served: str
) -> Prepared:
    rep = res.file
    assert rep is not None
    extra, vary, digest = res.extra, res.vary, res.digest  # computed in the hop
    coding, sidecar = "", False
    if negotiates(req, vary):
        coding, sidecar = choose_coding(req, cfg, rep.facts.size, res.sidecars)
        if sidecar:
            # Serve the sidecar: its own length, identity, ETag.
            rep = res.sidecars[coding]
            if rep.shrank:
                return Prepared(_unavailable(now), served=served, real=res.real)
    facts = rep.facts
    if coding and not sidecar:
        pre = precondition_plan(req, facts, cfg, now, coding=coding, vary=True)
        if pre is not None:
            # 304/412 without compressing anything
            return Prepared(pre, served=served, real=res.real)
        fd, rep.fd = rep.fd, -1
        todo = FollowUps(
            compress=coding,
            extra=extra,
            source=rep.data,
            digest=digest,
            hash_job=facts.hash_pending and rep.hash_settled,
        )
        return Prepared(_placeholder(now), Opened(fd), facts, todo, served=served, real=res.real)
    plan = decide_file(req, facts, cfg, now, boundary, coding=coding, vary=vary, extra=extra)
    if not digest_applies(plan):
        digest = ""
    # The ETag's hash job (large settled files) reads this descriptor too.
    hash_job = facts.hash_pending and rep.hash_settled
    keep = bool(digest) or hash_job  # the hash jobs read from this descriptor
    if plan.needs_file:
        if rep.data is not None:
            plan = _slice_spans(rep.data, plan)  # read whole in the hop
        else:
            keep = True
    opened = None
    if keep:
        opened = Opened(rep.fd)  # ownership moves to the caller
        rep.fd = -1
    if not (digest or hash_job):
        return Prepared(plan, opened, facts, served=served, real=res.real)
    todo = FollowUps(digest=digest, coding=coding, hash_job=hash_job)
    return Prepared(plan, opened, facts, todo, served=served, real=res.real)


def identity_fallback(prepared: Prepared, req: RequestFacts, cfg: Config, now: float) -> Plan:
    """The identity answer of a request whose coding could not be made on
    the fly (a saturated work pool; identity is always acceptable, RFC 9110
    §12.5.3): streamed from the descriptor, or sliced from the bytes in
    memory when the hop read them whole and closed it; 503 with neither."""
    facts, todo = prepared.facts, prepared.todo
    assert facts is not None and todo is not None
    plan = decide_file(req, facts, cfg, now, vary=True, extra=todo.extra)
    if plan.needs_file and prepared.fd < 0:
        if todo.source is None:
            return _unavailable(now)
        plan = _slice_spans(todo.source, plan)
    return plan


def _slice_spans(data: bytes, plan: Plan) -> Plan:
    """The plan with its file spans replaced by slices of the whole file's ``data``."""
    body = plan.body
    if len(body) == 1:
        span = body[0]
        if isinstance(span, FileSpan):
            # One span (the whole file, or one range): no generator.
            return plan.with_body((data[span.offset : span.offset + span.length],))
    return plan.with_body(
        tuple(data[p.offset : p.offset + p.length] if isinstance(p, FileSpan) else p for p in body)
    )


def cache_candidate(cache: CacheEntries, req: RequestFacts, cfg: Config) -> CacheCandidate | None:
    """The cache entry for the file ``req`` names directly, or None.

    Coding negotiation is answered from the sidecar states recorded with
    the entry (each revalidated with it); a coding never looked at for
    this file, or a Repr-Digest, needs the file itself: None.  No syscall;
    any thread.  Stores nothing: a choice made afresh comes back with
    ``learned`` set, for the caller to memoise in ``entry.choices``.
    """
    target = req.target
    if target.slash or not target.segments:
        return None
    entry = cache.get(target.relpath)
    if entry is None:
        return None
    headers = entry.headers
    if headers is None or target.query:
        # Without a query they depend on the file alone: computed once,
        # by the resolution that made the entry.
        headers = file_headers(req, cfg, target.relpath, entry.facts.content_type)
    extra, vary = headers
    if digest_algorithm(req, cfg):
        return None  # the digest job reads from a descriptor
    if not negotiates(req, vary):
        if not entry.whole:
            return None  # identity: the bytes are not kept
        return CacheCandidate(target.relpath, entry, extra, vary, "", entry)
    accept = req.accept_encoding
    assert accept is not None  # negotiates() says so
    choice = entry.choices.get(accept)
    if choice is not None:
        coding, rep, states = choice
        return CacheCandidate(target.relpath, entry, extra, vary, coding, rep, states)
    choice = _choose(entry, req, cfg)
    if choice is None:
        # Not memoised: the request resolves the file from disk, which
        # replaces this entry with one that has the states it lacked.
        return None
    coding, rep, states = choice
    # Made afresh: the caller may remember it in ``entry.choices``.
    return CacheCandidate(target.relpath, entry, extra, vary, coding, rep, states, learned=True)


def _choose(
    entry: CachedFile, req: RequestFacts, cfg: Config
) -> tuple[str, CachedFile, tuple[Sidecar, ...]] | None:
    """The negotiated coding, the entry holding its bytes and the sidecar
    states the choice depends on (pure: a function of the entry, which is
    never changed once stored, the configuration and Accept-Encoding);
    None when the entry cannot answer (a coding never looked at for this
    file, or a representation whose bytes it does not hold)."""
    # The sidecar facts recorded with the entry stand in for the open files.
    wanted = sidecars_wanted(req, cfg)
    sidecars: dict[str, CachedFile] = {}
    for c in wanted:
        known = entry.sidecars.get(c)
        if known is None:
            return None  # never looked at with this file
        if known.cached is not None:
            sidecars[c] = known.cached
    coding, from_sidecar = choose_coding(req, cfg, entry.facts.size, sidecars)
    if not from_sidecar and not entry.whole and not coding:
        return None  # identity needs the file's bytes
    rep = sidecars[coding] if from_sidecar else entry
    depends = choice_depends_on(req, wanted, coding, from_sidecar)
    return coding, rep, tuple(entry.sidecars[c] for c in depends)


def serve_cached(
    hit: CacheCandidate,
    req: RequestFacts,
    cfg: Config,
    now: float,
    boundary: str,
) -> Prepared:
    """The response from a candidate the caller has found valid.

    A plain request (no precondition, no range, no query: what browsers
    and benchmarks send most) gets the same response for the whole
    second of its Date header, so the plan and its serialised head are
    memoised per method and second, with its literal body source.  In a
    later second the memo is redated (:func:`~serverio.http.core.redated`)
    rather than decided again: for a plain request of a cached file
    nothing else in the plan depends on the time, as long as its
    Last-Modified is the file's both then and now (:func:`_same_dated`).
    A plan is memoised as shared (its head cached by the transport, its
    answer kept by the warm path) only from the entry's answer after
    :data:`SHARE_AFTER` answers in the same second (``hit.entry.asked``
    and ``hit.entry.answers``, which the caller sets: :func:`popular`): a
    first decision is memoised unshared, a redated plan is the request's
    alone until then (:func:`_redated`).
    Shared plans are never mutated (they are frozen), and a literal body
    has nothing to close: the transports only read them.  A new memo is
    not stored here: it comes back as ``Prepared.memo`` for the caller to
    store in ``hit.entry.plain``.
    """
    rep = hit.rep
    assert rep is not None
    if hit.coding and rep is hit.entry:
        return _serve_on_the_fly(hit, req, cfg, now)
    # Keyed by method: only the two methods served here (any other is a
    # 405 before preparation), so the memo has at most 2 x 4 entries.
    plain = req.method in _PLAIN_METHODS and depends_on_method_only(req)
    second = int(now)
    memo_key = (req.method, hit.coding)
    if plain:
        memo = hit.entry.plain.get(memo_key)
        if memo is not None:
            if memo[0] == second:
                shared = memo[1]
                if shared.shared or not popular(hit.entry, second):
                    return Prepared(shared, None, rep.facts, None, memo[2], "/" + hit.key)
                # Made this second unshared; asked for often enough since.
                shared = shared.with_headers(shared.headers, True)
                return _memoised(hit, shared, memo[2], memo_key, second)
            if _same_dated(rep.facts.mtime, memo[0], second):
                return _redated(hit, memo, memo_key, now)
    # Identity, or a precompressed sidecar (its own length, ETag).
    plan = decide_file(
        req, rep.facts, cfg, now, boundary, coding=hit.coding, vary=hit.vary, extra=hit.extra
    )
    if plan.needs_file:
        plan = _slice_spans(rep.data, plan)
    if plain:
        # Memoised (a later second redates it), and shared by this
        # second's plain requests once the entry is popular in it (the
        # HTTP/1.1 side caches a shared plan's head by identity,
        # serverio.wire.h1.shared_head; the warm path keeps its answer).
        if popular(hit.entry, second):
            plan = replace(plan, shared=True)
        # Its body source is literal (the spans were sliced from memory),
        # owns nothing and is shared like the plan.
        return _memoised(hit, plan, Body.of(plan), memo_key, second)
    return Prepared(plan, None, rep.facts, served="/" + hit.key)


def _memoised(
    hit: CacheCandidate, plan: Plan, body: Body, memo_key: tuple[bytes, str], second: int
) -> Prepared:
    """The plain answer ``plan`` with its literal ``body``, the memo
    (``Prepared.memo``) of its entry for ``second``."""
    rep = hit.rep
    assert rep is not None
    return Prepared(
        plan, None, rep.facts, None, body, "/" + hit.key, None, (memo_key, (second, plan, body))
    )


def _redated(
    hit: CacheCandidate, memo: PlainMemo, memo_key: tuple[bytes, str], now: float
) -> Prepared:
    """The plain answer ``memo`` (of an earlier second) redated to ``now``:
    memoised in turn, and shared, when the entry is popular in this second
    (:func:`popular`: a file asked for several times a second, what the
    memo is for).  Otherwise it is this request's alone, neither kept nor
    shared: a file asked for less often (a site of many files) would
    replace its memo on most of its requests, and each layer that keeps a
    shared plan's head or answer would keep one seldom asked for again:
    objects that outlive the collector's young generation only to die in
    the next (the collector's pauses, docs/performance.md)."""
    rep = hit.rep
    assert rep is not None
    body = memo[2]
    second = int(now)
    if not popular(hit.entry, second):
        plan = redated(memo[1], now, shared=False)
        return Prepared(plan, None, rep.facts, None, body, "/" + hit.key)
    return _memoised(hit, redated(memo[1], now, shared=True), body, memo_key, second)


# Answers an entry makes in one second before its plain plan is memoised
# as shared (serve_cached).  A file asked for at random among 100,000 at
# 17,000 requests a second (0.17 times a second each, Poisson arrivals)
# makes a shared plan for one answer in 236 (P(n >= 3) per answer); from
# its second answer it made one in 13 (P(n >= 2)).  A file asked for 24
# times a second (1,000 files at that rate) answers 2 of them unshared.
SHARE_AFTER: Constant = 2


def popular(entry: CachedFile, second: int) -> bool:
    """Has ``entry`` made :data:`SHARE_AFTER` answers in ``second``
    already (``asked``, ``answers``: set by the caller after each)?"""
    return entry.asked == second and entry.answers >= SHARE_AFTER


def _same_dated(mtime: int | None, then: int, second: int) -> bool:
    """Does a plain answer made in second ``then`` differ from one made in
    ``second`` by its Date alone?  Its Last-Modified is the file's
    ``mtime`` in both (or absent in both): :func:`~serverio.http.core.sent_mtime`
    puts the Date's second in place of an mtime later than it, so the
    file's mtime must be at most both seconds (a clock set back past it
    decides again)."""
    return mtime is None or (mtime <= then and mtime <= second)


def needs_compressed(hit: CacheCandidate) -> bool:
    """Can ``hit`` be answered only from the compression cache?  A coding
    made on the fly from an entry that does not keep the file's bytes (too
    large): the caller uses such a candidate only while the compression
    cache holds its bytes, checked with no await before the answer."""
    return not hit.entry.whole and hit.rep is hit.entry


def _serve_on_the_fly(hit: CacheCandidate, req: RequestFacts, cfg: Config, now: float) -> Prepared:
    # From the compression cache (a follow-up on the trio side).  No
    # descriptor: on a miss there, the job compresses the cached bytes.
    # A plain request's finished answer is memoised like serve_cached's,
    # under (method, FLY + coding): the follow-up makes it (memo_key), the
    # caller stores it, and the rest of the second is answered here.
    facts = hit.entry.facts
    memo_key: tuple[bytes, str] | None = None
    if req.method in _PLAIN_METHODS and depends_on_method_only(req):
        memo_key = (req.method, FLY + hit.coding)
        memo = hit.entry.plain.get(memo_key)
        if memo is not None and memo[0] == int(now):
            return Prepared(memo[1], None, facts, None, memo[2], "/" + hit.key)
    else:
        pre = precondition_plan(req, facts, cfg, now, coding=hit.coding, vary=True)
        if pre is not None:
            return Prepared(pre, served="/" + hit.key)
    todo = FollowUps(
        compress=hit.coding,
        extra=hit.extra,
        source=hit.entry.data if hit.entry.whole else None,
        memo_key=memo_key,
    )
    return Prepared(_placeholder(now), None, facts, todo, served="/" + hit.key)
