"""The request handler: the one place that orders a response's steps.

For a request no stage took and routing could not answer
(``serverio.http.core.route``), the exchange's files step
(:func:`serverio.pipeline.exchange.files`, the same for both transports)
calls :meth:`Handler.respond_now`; it gets back either a finished
:class:`~serverio.model.Prepared`, or the need of the exchange that must be
awaited first, as data: a :class:`~serverio.pipeline.exchange.Resolve` (a
pool hop, a shared revalidation, live reload's transform), a
:class:`~serverio.pipeline.exchange.Listing` or a
:class:`~serverio.pipeline.exchange.Coding` (a follow-up on a resolved
answer).  The driver fulfils it through :meth:`Handler.fulfil`, awaited the
transport's way (HTTP/1.1 watches its client meanwhile), and feeds the
result back to the step, which asks :meth:`Handler.followups` for what a
resolved answer still needs.  The order of the steps lives here and
nowhere else:

1. **resolve** (:func:`serverio.fs.prepare.resolve`: facts and descriptors,
   no plan): inline with ``--fs-workers 0`` (a warm-file cache candidate
   costs one ``stat`` instead), otherwise from the warm-file cache when its
   entry is inside the validity window (no syscall), otherwise through one
   hop into the ``fs`` pool (which also revalidates a candidate);
2. **decide** (:mod:`serverio.model.decide`, pure, here on the trio
   thread after the hop); what it returns to memoise (``Prepared.memo``)
   is stored in the warm-file cache entry here, and the hit counted here;
3. **follow-ups** (:class:`~serverio.pipeline.content.ContentService`,
   ``Prepared.todo``): a listing scan, on-the-fly compression, a
   representation digest, from their caches when they can answer, in the
   ``work`` pool or a cache job otherwise.  Each makes a new ``Prepared``
   (the value is immutable; what it holds open, its
   :class:`~serverio.model.Opened`, is handed on).

The handler knows nothing of sockets, parsers or connections.

Cancellation handling: :meth:`Handler.fulfil` may be cancelled at any
await.  A pool hop that was under way is abandoned and its result closed by
the late-close path of :func:`~serverio.concurrency.blocking.run_blocking`
(exactly once: :meth:`~serverio.model.Resolution.close`); the decision
takes the resolution's descriptors over with no await; a ``Prepared`` a
follow-up holds is closed before the cancellation propagates (closing is
idempotent: the driver closes the need's too); a wait on a shared
revalidation or a cache job just stops (the job carries on for the other
requests).
"""

from __future__ import annotations

import logging
import secrets
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from contextvars import ContextVar
from functools import partial
from itertools import count
from typing import Any, Protocol, TypeVar

import trio

from ..concurrency.blocking import Pool, PoolSaturated, run_blocking
from ..config import Config
from ..fs.filecache import UNTIMED, FileCache, HashStore, window_state
from ..fs.opener import ContainedRoot
from ..fs.prepare import follows_links, resolve, resolve_direct
from ..http.core import Plan, RequestFacts, read_only
from ..http.hosts import host_rule
from ..http.select import direct_applies, lookup
from ..model import CACHED, CHOICES_KEPT, CacheCandidate, CachedFile, Direct, Prepared, Resolution
from ..model.decide import cache_candidate, decide, decide_direct, needs_compressed, serve_cached
from .content import ContentService
from .exchange import Coding, Listing, Resolve
from .hooks import NO_HOOKS, Hooks
from .warm import WarmAnswers

__all__ = [
    "BodyStep",
    "ClientGone",
    "Closable",
    "Content",
    "Handler",
    "Revalidations",
    "client_gone",
    "prepare",
    "run_watched",
    "watching_client",
]

log = logging.getLogger("serverio")


class Content(Protocol):
    """A request's content as a handler pulls it: what
    :class:`serverio.net.reqbody.RequestBody` (HTTP/1.1's ``H1Body``,
    HTTP/2's ``H2Body``) offers the pipeline, which sits below the
    transports and so names it by its shape.

    ``async for chunk in content`` yields non-empty ``bytes``; a pull raises
    an :class:`~serverio.errors.HTTPError` (413 too large, 408 a body
    deadline, 400 broken framing) that the request steps turn into the
    answer, or ``trio.BrokenResourceError`` when the client left.

    Cancellation handling: every pull is a checkpoint and runs under the
    body's idle and total deadlines (``--body-timeout``,
    ``--body-total-timeout``: cancel scopes of the body's own); an outer
    cancellation propagates and leaves the content unusable.
    """

    declared: int | None  # the declared length (Content-Length / content-length), or None
    received: int  # bytes handed out so far

    def __aiter__(self) -> AsyncIterator[bytes]: ...

    async def next_chunk(self) -> bytes | None: ...


# A handler step for a request that carries content: the Plan that answers
# it, or None to answer it as any other request (a POST to a file: 405 with
# Allow).  The transport owns the content and drains or discards what the
# step left unread.  serverio installs none yet (uploads are the next
# feature); the tests install one that reads the content, to prove the
# seam over both protocols.
BodyStep = Callable[[RequestFacts, Content, float], Awaitable[Plan | None]]


# The transport's "watch the client during this wait" while a late-watched
# step runs (run_watched) (HTTP/1.1's disconnect watcher, for the span of one wait);
# None elsewhere (HTTP/2 needs none: RST_STREAM cancels the stream's task).
# With it, the same watch run in the waiting task itself (client_gone).
_Watch = Callable[[], AbstractAsyncContextManager[None]]
_Gone = Callable[[], Awaitable[None]]
_WATCH: ContextVar[tuple[_Watch, _Gone | None] | None] = ContextVar("serverio_watch", default=None)


class ClientGone(BaseException):
    """The client went away during a :func:`watching_client` block.

    Raised out of the block (a BaseException, like a cancellation: the
    ``except Exception`` of a step lets it through) and caught by the
    transport around the whole step, which then answers nothing.  What a
    step holds is closed by its ``finally`` and ``except BaseException``
    clauses as for a cancellation; something a wait handed over just as
    the client left (a pool slot, a new connection) is the block's
    caller's to give back.
    """


@asynccontextmanager
async def watching_client() -> AsyncIterator[None]:
    """The client is watched while the block runs (nested: watched once; a
    no-op outside a late-watched step, :func:`run_watched`).  A step that is about
    to wait for long wraps the wait in it, so that a client that goes away
    meanwhile cancels the step; a step that never waits for long never
    pays for the watcher's task and nursery.

    Cancellation handling: a client gone during the block cancels the
    block's wait and raises :class:`ClientGone` out of it, which ends the
    whole step (the transport catches it around the step): no code after
    the block runs.  The step needs no cancel scope of its own for that."""
    watch = _WATCH.get()
    if watch is None:
        yield
        return
    async with watch[0]():
        yield


async def client_gone() -> None:
    """Wait, in this task, until the client goes away, then raise
    :class:`ClientGone`; never returns.  For a wait that another event
    ends by cancelling it (a pool slot handed over by cancelling the
    waiter's scope): the client is watched without the helper task and
    nursery of :func:`watching_client`.  Where the client is not watched
    (outside a late-watched step, HTTP/2) or is already
    watched (inside a :func:`watching_client` block), it sleeps until
    cancelled.

    Cancellation handling: a cancellation ends the wait and reads nothing
    more; bytes it already read (a pipelined request) stay with the
    connection's parser."""
    watch = _WATCH.get()
    if watch is None or watch[1] is None:
        await trio.sleep_forever()
    else:
        await watch[1]()
    raise ClientGone


class Closable(Protocol):
    """What a transport's wait hands back: it closes one that arrived for
    a client already gone (a :class:`~serverio.model.Prepared`, a proxied
    answer)."""

    def close(self) -> None: ...


R = TypeVar("R", bound=Closable)


async def run_watched(
    run: Callable[[], Awaitable[R]], watch: _Watch, gone: _Gone | None = None
) -> R:
    """``run()`` with ``watch`` behind this task's :func:`watching_client`
    and ``gone`` (returns when the client has gone; sleeps forever if it
    cannot watch here) behind its :func:`client_gone`: how a transport
    runs a step that watches its client late (the proxy's exchange).

    Cancellation handling: as ``run``'s; the watch is unset in every case.
    """
    token = _WATCH.set((watch, gone))
    try:
        return await run()
    finally:
        _WATCH.reset(token)


class Handler:
    """Resolve, decide and finish responses for one served root.

    Owns the order of the steps and the revalidation jobs of the warm-file
    cache; the pools, caches and the root opener belong to the server and
    are handed in.  ``opener`` is called when the root is needed, so a
    server that never serves never opens it.  ``hooks``: the features
    plugged into the pipeline (:mod:`serverio.pipeline.hooks`); the
    handler calls their transform and runs their tasks.
    """

    def __init__(
        self,
        config: Config,
        opener: Callable[[], ContainedRoot],
        *,
        fs: Pool,
        files: FileCache,
        content: ContentService,
        hooks: Hooks = NO_HOOKS,
    ) -> None:
        self.config = config
        self.hooks = hooks
        # Flat copies: an absent hook costs one test (the stage list is
        # built from the hooks themselves: serverio.pipeline.stages).
        self.write = hooks.write  # PUT and DELETE (None: read-only, no call)
        self.write_methods = hooks.write_methods  # the methods ``write`` answers
        self.allow = hooks.allow or read_only  # the methods a path allows (Allow)
        self.proxy = hooks.proxy  # --proxy-fallback's (None: no call)
        # The Host names answered (serverio.http.hosts; None: any, no call):
        # with writes or the proxy on, the DNS-rebinding rule.
        self.hosts = host_rule(config, socket.gethostname())
        self._opener = opener
        # The opened root once asked for (the warm path then reads one
        # attribute, not a call through the server's lazy property);
        # forgotten when the server closes it (forget_root).
        self._root: ContainedRoot | None = None
        self.fs = fs
        self.files = files
        # Read once (both fixed at construction): the warm path then tests
        # two attributes instead of calling into fs/ and concurrency/.
        self._cache = files if files.enabled else None
        self._inline = fs.inline
        # The direct resolution of a plain small-file miss
        # (serverio.fs.prepare.resolve_direct): inline only (pooled mode
        # resolves in one hop anyway), and never under auth rules (the
        # general way says where a symlink led).  A test turns it off to
        # hold the two ways equal (tests/test_direct.py).
        self.direct = fs.inline and not follows_links(config)
        self.content = content
        self.revalidations = Revalidations(fs, files, opener)
        # The multipart boundaries of range answers: unguessable, and
        # distinct within the server's life.
        prefix = "serverio-" + secrets.token_hex(6)
        self._boundaries = map(f"{prefix}{{:x}}".format, count(1))
        # The step for requests with content (None: answered as any other
        # request); see BodyStep.
        self._receive: BodyStep | None = None
        # The stage list (serverio.pipeline.stages), built from the hooks on
        # the first request (None until then, and again when ``receive``
        # changes).
        # (serverio.pipeline.exchange.Stage: the exchange names the handler.)
        self.stages: tuple[Any, ...] | None = None
        # The precomputed answers of warm files (the exchange asks them
        # first; kept from this handler's plain cache hits).
        self.warm = WarmAnswers(
            self._cache,
            self._inline,
            config.files.fs_cache_valid,
            self._opened_root,
            enabled=hooks.transform is None,
        )

    @property
    def receive(self) -> BodyStep | None:
        """The step for requests with content (None: none)."""
        return self._receive

    @receive.setter
    def receive(self, step: BodyStep | None) -> None:
        self._receive = step
        self.stages = None  # rebuilt with (or without) its stage

    def _opened(self) -> ContainedRoot:
        """The contained root (opened on first use by the server), kept."""
        root = self._root = self._opener()
        return root

    def _opened_root(self) -> ContainedRoot:
        """The contained root, opened now if it was not yet."""
        return self._root if self._root is not None else self._opened()

    def forget_root(self) -> None:
        """The server closed its root: the next request asks for it again."""
        self._root = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The nursery of the cache jobs (revalidations, compression,
        digests) for the server's lifetime, and inside it the hooks' own
        tasks (:attr:`Hooks.running`: live reload's watcher).

        Cancellation handling: leaving the block stops the hooks' tasks
        first, then cancels the jobs still running; their pool threads are
        abandoned like any other pooled call (a revalidation only stamps or
        drops a cache entry, a compression or hash job closes its own
        descriptor).
        """
        lifetime = self.hooks.running
        async with self.content.running(), trio.open_nursery() as jobs:
            self.revalidations.jobs = jobs
            try:
                async with lifetime() if lifetime is not None else nullcontext():
                    yield
            finally:
                self.revalidations.jobs = None
                jobs.cancel_scope.cancel()

    # ------------------------------------------------------------ entry

    def respond_now(
        self, req: RequestFacts, now: float, transform: bool = True
    ) -> Prepared | Resolve | Listing | Coding:
        """As much of the response as can be had without waiting.

        Inline mode resolves here, on the event loop (that is what
        ``--fs-workers 0`` asks for); pooled mode answers here only from
        the warm-file cache inside its validity window.  What must wait is
        returned as the need the driver fulfils (:meth:`fulfil`).  A
        request the hooks' transform takes (:meth:`Transform.base`) always
        waits: its base is resolved, then transformed.
        ``transform=False``: the answer without the transform (what the
        transform's base gets).
        """
        live = self.hooks.transform
        if live is not None and transform:
            base = live.base(req)
            if base is not None:
                return Resolve(req, base=base)
        boundary = next(self._boundaries) if req.range is not None else ""
        files = self._cache
        if self._inline:
            # Inline hits are revalidated by a stat every time: no trust
            # window, so no clock reading (UNTIMED).
            hit = cache_candidate(files, req, self.config) if files is not None else None
            if hit is not None and (hit.entry.whole or self._answerable(hit)):
                assert files is not None
                if hit.learned:
                    _remember_choice(hit, req)
                # Only the sidecar states this answer depends on: nothing
                # vouches for the rest without a stat (UNTIMED).
                root = self._root if self._root is not None else self._opened()
                if files.revalidate(hit.key, hit.entry, root.stat, UNTIMED, hit.sidecars):
                    files.hit()
                    prepared = serve_cached(hit, req, self.config, now, boundary)
                    _answered(hit, prepared, now)
                    if prepared.todo is None:
                        self.warm.keep(req, hit, prepared, now)
                        return prepared
                    return _memoised(hit, self.followups(prepared, req, now))
            hit = None  # stale or not answerable: resolve afresh (the miss is counted there)
            root = self._root if self._root is not None else self._opened()
            direct = self.direct and direct_applies(req, self.config)
            if direct and (got := self._direct(req, now, root)) is not None:
                return got
            res = resolve(
                lookup(req, self.config),
                self.config,
                root,
                now,
                files,
                UNTIMED,
                self.content.hashes,
                hit,
            )
            prepared = decide(res, req, self.config, now, boundary)
            if prepared.todo is None:
                return prepared
            return self.followups(prepared, req, now)
        mono = trio.current_time()
        hit = cache_candidate(files, req, self.config) if files is not None else None
        if hit is not None and not (hit.entry.whole or self._answerable(hit)):
            hit = None
        if hit is not None:
            assert files is not None
            if hit.learned:
                _remember_choice(hit, req)
            state = window_state(hit.entry.checked, mono, self.config.files.fs_cache_valid)
            if state != "expired":
                if state == "refresh":
                    # In the background; this request does not wait.
                    self.revalidations.start(hit)
                files.hit()
                prepared = serve_cached(hit, req, self.config, now, boundary)
                _answered(hit, prepared, now)
                self.warm.keep(req, hit, prepared, now)  # answered from it while fresh
                if prepared.todo is None:
                    return prepared
                return _memoised(hit, self.followups(prepared, req, now))
        return Resolve(req, boundary, mono, hit)

    def _direct(
        self, req: RequestFacts, now: float, root: ContainedRoot
    ) -> Prepared | Listing | Coding | None:
        """A plain miss resolved the direct way
        (:func:`~serverio.fs.prepare.resolve_direct`) and decided, or None
        where it declines before opening anything: the general way
        answers."""
        cfg = self.config
        found = resolve_direct(
            req.target,
            req.method == b"GET",
            req.accept_encoding is not None,
            cfg,
            root,
            now,
            self._cache,
            self.content.hashes,
            partial(lookup, req, cfg),
        )
        if type(found) is Direct:
            return decide_direct(found, req, cfg, now)
        if found is None:
            return None
        # An error, a file that shrank, or what the general way made of a
        # directory or a large file (resolve_direct): decided as it is.
        assert isinstance(found, Resolution)
        prepared = decide(found, req, cfg, now)
        return prepared if prepared.todo is None else self.followups(prepared, req, now)

    def _answerable(self, hit: CacheCandidate) -> bool:
        """Can the candidate of an entry without the file's bytes answer now?
        Only a sidecar's bytes, or a coding made on the fly that the
        compression cache holds (checked with no await before the answer)."""
        if not needs_compressed(hit):
            return True
        return self.content.compressed.get((hit.entry.facts.key, hit.coding)) is not None

    def followups(
        self, prepared: Prepared, req: RequestFacts, now: float
    ) -> Prepared | Listing | Coding:
        """A resolved answer finished from the caches when they can finish
        it (``todo`` None: nothing to do); else what it must wait for: a
        :class:`Listing` (a listing to scan and render, or its other form,
        a folder archive) or a :class:`Coding` (a coding to produce, a
        digest), which takes ``prepared`` over."""
        todo = prepared.todo
        if todo is None:
            return prepared
        if todo.listing:
            return Listing(prepared, req)
        try:
            prepared = self.content.finish_cached(prepared, req, now)
        except BaseException:
            prepared.close()
            raise
        return prepared if prepared.todo is None else Coding(prepared, req)

    # ------------------------------------------------------------ fulfillers

    async def fulfil(self, need: Resolve | Listing | Coding, now: float) -> Prepared:
        """What ``need`` waits for (the driver awaits it the transport's
        way): a :class:`Resolve`'s resolved answer (whose follow-ups the
        step asks :meth:`followups` for next; a transform's is finished),
        a :class:`Listing`'s or a :class:`Coding`'s finished one.  Raises
        :class:`~serverio.HTTPError` (such as
        :class:`~serverio.PoolSaturated`) for an error answer.

        Cancellation handling: see the module docstring; what the need
        holds is closed before this raises.
        """
        if type(need) is Resolve:
            if need.base is not None:
                return await self._transformed(need.req, need.base, now)
            return await self._pooled(need, now)
        assert isinstance(need, Listing | Coding)
        prepared, req = need.prepared, need.req
        try:
            view = self.hooks.listing
            if type(need) is Listing and view is not None and view.takes(req):
                return await view.answer(req, prepared, now)
            return await self.content.finish(prepared, req, now)
        except BaseException:
            prepared.close()
            raise

    async def _transformed(self, req: RequestFacts, base: RequestFacts, now: float) -> Prepared:
        """The hooks' transform of ``base``'s answer (live reload's
        injection), or, declined, ``req`` answered as sent."""
        transform = self.hooks.transform
        assert transform is not None
        got = await transform.apply(req, base, await self._settled(base, now), now)
        if got is not None:
            return got
        return await self._settled(req, now)  # declined: the request as sent

    async def _settled(self, req: RequestFacts, now: float) -> Prepared:
        """The untransformed answer, its needs fulfilled here, in turn.

        Cancellation handling: what a need holds is closed by
        :meth:`fulfil` before it raises.
        """
        got = self.respond_now(req, now, False)
        while type(got) is not Prepared:
            assert isinstance(got, Resolve | Listing | Coding)
            got = self.followups(await self.fulfil(got, now), req, now)
        return got

    async def _pooled(self, need: Resolve, now: float) -> Prepared:
        """Pooled mode past the window: wait for the shared revalidation of
        an expired entry (a stampede of hops becomes one stat), or hop."""
        req, boundary, mono, hit = need.req, need.boundary, need.mono, need.hit
        files = self._cache
        if hit is not None and needs_compressed(hit):
            # Its bytes would have to outlive the waits below in the
            # compression cache: resolve the file instead.
            hit = None
        if hit is not None:
            assert files is not None
            valid = self.config.files.fs_cache_valid
            # At most two rounds: a revalidation already under way may have
            # started before this request arrived, which is not fresh enough
            # when the window is (nearly) 0; the second one, shared with
            # everyone who waited, starts after.
            refreshed = self.revalidations.start(hit)
            for last in (False, True):
                if refreshed is None or mono - hit.entry.checked <= valid:
                    break
                await refreshed.wait()
                if last or files.get(hit.key) is not hit.entry:
                    break  # waited enough, or the file changed: resolve it afresh
                if mono - hit.entry.checked > valid:
                    refreshed = self.revalidations.start(hit)
            if mono - hit.entry.checked <= valid and files.get(hit.key) is hit.entry:
                return _cached(files, hit, req, self.config, now, boundary)
        # One hop: the revalidation of the candidate (if any) or the full
        # resolution; the decision runs here, on the event loop, after it.
        res = await run_blocking(
            self.fs,
            resolve,
            lookup(req, self.config),
            self.config,
            self._root if self._root is not None else self._opened(),
            now,
            files,
            mono,
            self.content.hashes,
            hit,
            late_close=Resolution.close,
        )
        if res.kind == CACHED:
            assert files is not None and hit is not None
            return _cached(files, hit, req, self.config, now, boundary)
        return decide(res, req, self.config, now, boundary)


class Revalidations:
    """The warm-file cache's revalidation jobs: one at a time per file,
    through the ``fs`` pool, in the handler's job nursery (``jobs``, set
    while the server runs; None: no job can start).  A request that finds
    an entry expired waits for the one under way instead of hopping itself
    (a stampede of hops becomes one ``stat``)."""

    __slots__ = ("_done", "_files", "_fs", "_opener", "jobs")

    def __init__(self, fs: Pool, files: FileCache, opener: Callable[[], ContainedRoot]) -> None:
        self._fs = fs
        self._files = files
        self._opener = opener
        self._done: dict[str, trio.Event] = {}
        self.jobs: trio.Nursery | None = None

    def start(self, hit: CacheCandidate) -> trio.Event | None:
        """Revalidate ``hit``'s file unless that is under way; the Event is
        set when done (None: no job nursery to run it in)."""
        done = self._done.get(hit.key)
        if done is None and self.jobs is not None:
            done = self._done[hit.key] = trio.Event()
            self.jobs.start_soon(self._run, hit.key, hit.entry, done)
        return done

    async def _run(self, key: str, entry: CachedFile, done: trio.Event) -> None:
        """Cancellation handling: a refresh cancelled at shutdown abandons its
        thread like any pooled call; the thread only stamps or drops the
        entry, so nothing needs closing.  Waiters are woken either way."""
        try:
            await run_blocking(
                self._fs,
                self._files.revalidate,
                key,
                entry,
                self._opener().stat,
                trio.current_time(),
            )
        except PoolSaturated:
            pass  # busy pool: the entry stays expired; requests hop themselves
        except Exception:
            # A bug here must not take the job nursery down with it; the
            # entry just expires and requests resolve the file themselves.
            log.exception("internal error while revalidating a cached file")
        finally:
            del self._done[key]
            done.set()


def _memoised(
    hit: CacheCandidate, answer: Prepared | Listing | Coding
) -> Prepared | Listing | Coding:
    """``answer``, with the memo its follow-up made from the caches (a coding
    made on the fly: ``FollowUps.memo_key``) stored in ``hit``'s entry."""
    if type(answer) is Prepared:
        memo = answer.memo
        if memo is not None:
            hit.entry.plain[memo[0]] = memo[1]
    return answer


def _remember_choice(hit: CacheCandidate, req: RequestFacts) -> None:
    """Memoise in its entry a coding choice the decision made afresh
    (``hit.learned``), at most :data:`~serverio.model.CHOICES_KEPT` per
    entry: the caller's step, so that the decision stores nothing."""
    choices = hit.entry.choices
    if len(choices) < CHOICES_KEPT:
        assert req.accept_encoding is not None and hit.rep is not None
        assert hit.sidecars is not None
        choices[req.accept_encoding] = (hit.coding, hit.rep, hit.sidecars)


def _cached(
    files: FileCache,
    hit: CacheCandidate,
    req: RequestFacts,
    cfg: Config,
    now: float,
    boundary: str,
) -> Prepared:
    """The answer from a candidate found valid: counted as a hit, and the
    plain memo the decision made stored in its entry (the decision itself
    stores nothing).  The warm paths of :meth:`Handler.respond_now` do the
    same without this call."""
    files.hit()
    prepared = serve_cached(hit, req, cfg, now, boundary)
    _answered(hit, prepared, now)
    return prepared


def _answered(hit: CacheCandidate, prepared: Prepared, now: float) -> None:
    """The caller's step after :func:`~serverio.model.decide.serve_cached`
    (the decision stores nothing): the plain memo it made stored in the
    entry, and this answer counted in the entry's second (a plan is
    memoised as shared once the entry is popular in its second:
    serverio.model.decide.popular)."""
    memo = prepared.memo
    entry = hit.entry
    if memo is not None:
        entry.plain[memo[0]] = memo[1]
    second = int(now)
    if entry.asked == second:
        entry.answers += 1
    else:
        entry.asked = second
        entry.answers = 1


def prepare(
    req: RequestFacts,
    cfg: Config,
    opener: ContainedRoot,
    now: float,
    boundary: str = "",
    cache: FileCache | None = None,
    mono: float = UNTIMED,
    hashes: HashStore | None = None,
) -> Prepared:
    """Resolve and decide in one blocking call (the public API, and tests):
    from the warm-file cache after one ``stat`` when it can answer, else
    from the filesystem.  The steps :class:`Handler` orders, without pools."""
    hit = cache_candidate(cache, req, cfg) if cache is not None else None
    if hit is not None and needs_compressed(hit):
        hit = None  # no compression cache here: the file is resolved
    if hit is not None and hit.learned:
        _remember_choice(hit, req)
    res = resolve(lookup(req, cfg), cfg, opener, now, cache, mono, hashes, hit)
    if res.kind == CACHED:
        assert cache is not None and hit is not None
        return _cached(cache, hit, req, cfg, now, boundary)
    return decide(res, req, cfg, now, boundary)
