"""The warm path: a plain request for a warm file answered by a precomputed Final.

A warm-file cache hit for a plain request (no precondition, no Range, no
query: what browsers and benchmarks send most) gets the same answer for
the whole second of its Date field: the decision memoises its shared plan
and literal body in the cache entry (:func:`serverio.model.decide.serve_cached`),
and the HTTP/1.1 side its serialised head (:func:`serverio.wire.h1.shared_head`).
:class:`WarmAnswers` keeps that answer as the exchange's
:class:`~serverio.pipeline.exchange.Final`, keyed by every request fact it
depends on (:data:`WARM_KEY_FIELDS`), so that the exchange
(:func:`serverio.pipeline.exchange.files`) answers the next such request
with one lookup and the cache entry's validation, without asking the
core's routing, the decision or the cache's memo again (issue 42: "the
warm path stays warm: a cache hit may be a precomputed Final").

What stays exact: the answer is one :meth:`Handler.respond_now
<serverio.pipeline.handler.Handler.respond_now>` made this second for
the same key; the entry is validated as that method would (inline, one
``stat`` of the file and the sidecar states the answer depends on;
pooled, inside the validity window, ``--fs-cache-valid``; else the
request goes the long way, which refreshes or waits), it must still be
the cache's entry for the path, and the hit is counted.  The core's
routing of a GET or HEAD depends on its path alone (the hidden paths),
which the key holds.  The exchange asks for a request without content;
under site rules for one the rules routed to the files (no rule's own
answer) that sends no credentials of its own: anonymous, or a signed-in
browser's (a session cookie: the site stage decided the request path with
it, as it is now).  It still asks the access hook on what the answer
serves (:meth:`WarmAnswers.resolved`), for the request's principal, and
finishes it with the rules (header rules, CORS, private for a rule
passed): the warm answer stands in for the handler's alone.  Basic
credentials and share links go the long way.  A handler with a transform
(live reload) keeps none.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any
from typing import Final as Constant

import trio

from ..fs.filecache import UNTIMED, FileCache, window_state
from ..fs.opener import ContainedRoot
from ..http.access import AccessTarget
from ..http.core import RequestFacts
from ..model import CacheCandidate, CachedFile, Prepared
from .exchange import Final, access_targets

__all__ = ["WARM_IGNORED", "WARM_KEY_FIELDS", "WARM_MAX", "WarmAnswers"]

# The request facts a warm answer depends on: its key.  A fact not in it is
# named in WARM_IGNORED with the reason it cannot change such an answer (a
# test holds the two together against RequestFacts' fields).  The answer
# was made for a request with no precondition, no Range and no query
# (serverio.http.core.depends_on_method_only): a request that has one
# differs in the key, and is never answered from it.
WARM_KEY_FIELDS: Constant[tuple[str, ...]] = (
    "method",
    "target.relpath",
    "target.slash",
    "target.query",
    "accept_encoding",
    "want_repr_digest",
    "if_match",
    "if_none_match",
    "if_modified_since",
    "if_unmodified_since",
    "range",
)
WARM_IGNORED: Constant[dict[str, str]] = {
    "keep_alive": "the transport's (whether the connection is kept)",
    "has_body": "asked only for a request without content",
    "if_range": "read only with Range, which is in the key",
    "accept": "read for error pages and listings, not a file's 200",
    "authorization": "the site rules' (decided per request around the answer; Basic: the long way)",
    "tls": "the site rules' (their finish, run per request)",
    "client": "set for a write step only",
    "extra": "the features' fields: read by their stages and the access hook, per request",
}
# Warm answers kept at most; cleared whole when full (the next plain hit
# of each file refills it, as the head cache does).
WARM_MAX: Constant = 1024

# One C call makes the key: no Python frame on the warm path.
_key = operator.attrgetter(*WARM_KEY_FIELDS)

# cache key, entry, the sidecar states the answer depends on (None: all the
# entry's), the Date second, the answer, and what the access hook decides
# for it under site rules (serverio.pipeline.exchange.access_targets).
_Warm = tuple[str, CachedFile, Any, int, Final, tuple[AccessTarget, ...]]


class WarmAnswers:
    """A handler's precomputed answers of warm files (see the module doc).

    ``files``: the warm-file cache (None: off, nothing is kept);
    ``inline``: ``--fs-workers 0`` (validate with a ``stat``, else by the
    validity window ``valid``); ``root``: the contained root, opened on
    first use; ``enabled``: False keeps nothing (a handler with a transform).
    """

    __slots__ = ("_answers", "_files", "_inline", "_root", "_valid")

    def __init__(
        self,
        files: FileCache | None,
        inline: bool,
        valid: float,
        root: Callable[[], ContainedRoot],
        *,
        enabled: bool = True,
    ) -> None:
        self._files = files if enabled else None
        self._inline = inline
        self._valid = valid
        self._root = root
        self._answers: dict[tuple[object, ...], _Warm] = {}

    def __len__(self) -> int:
        return len(self._answers)

    def answer(self, req: RequestFacts, now: float) -> Final | None:
        """The precomputed answer to ``req`` made this second, its cache
        entry still valid (counted as a hit); else None: ask the handler."""
        got = self._answers.get(_key(req))
        if got is None:
            return None
        key, entry, sidecars, second, final, _ = got
        files = self._files
        if second != int(now) or files is None:
            return None
        if self._inline:
            root = self._root()
            if files.get(key) is not entry:
                return None
            if not files.revalidate(key, entry, root.stat, UNTIMED, sidecars):
                return None  # changed: dropped; the handler resolves it afresh
        elif files.get(key) is not entry:
            return None
        elif window_state(entry.checked, trio.current_time(), self._valid) != "fresh":
            return None  # the handler refreshes it, or waits for its refresh
        files.hit()
        return final

    def keep(self, req: RequestFacts, hit: CacheCandidate, prepared: Prepared, now: float) -> None:
        """Keep the answer the handler just made from ``hit`` for ``req``
        when it is a plain memo's (a shared plan with its literal body,
        nothing left to do: what serve_cached makes for a plain request)."""
        if self._files is None:
            return
        plan = prepared.plan
        body = prepared.body
        if (
            not plan.shared
            or body is None
            or prepared.opened is not None
            or prepared.todo is not None
            or plan.status >= 400
        ):
            return
        if body.pieces is not plan.body and (plan.send_body or body.pieces):
            return  # not the plan's own literal body (a HEAD's is empty)
        answers = self._answers
        if len(answers) >= WARM_MAX:
            answers.clear()
        final = Final(plan, body, None)
        targets = access_targets(prepared)
        answers[_key(req)] = (hit.key, hit.entry, hit.sidecars, int(now), final, targets)

    def resolved(
        self, req: RequestFacts, now: float
    ) -> tuple[Final, tuple[AccessTarget, ...]] | None:
        """:meth:`answer`, with the targets the access hook must allow for
        it (what the handler's answer served, and its resolved target
        when reached through a link): the site rules' warm path, which
        still decides the request path and each of these for the request
        (:func:`serverio.pipeline.exchange.files`)."""
        final = self.answer(req, now)
        if final is None:
            return None
        return final, self._answers[_key(req)][5]
