"""Representation selection for a file (pure): which bytes answer a request.

The blocking layer (:func:`serverio.fs.prepare.resolve`) gathers facts —
the file, the precompressed sidecars it was told to look for, what the
warm-file cache holds — and the decision after it
(:mod:`serverio.model.decide`, on the trio side) asks these functions
what they mean.  Every rule about *which*
representation is served lives here, once:

* the headers a file response carries whatever its coding
  (:func:`file_headers`: ``Vary: Accept-Encoding`` and
  ``Content-Disposition``);
* whether the coding is negotiated at all (:func:`negotiates`: a Range
  request gets identity, RFC 9110 §14.1.2 leaves coded ranges to the
  server and we never range a coded representation);
* which sidecars are worth looking for (:func:`sidecars_wanted`), and the
  choice between identity, a sidecar and on-the-fly compression
  (:func:`choose_coding`, applying :func:`serverio.http.negotiate.select_coding`
  to the facts);
* whether a ``Repr-Digest`` is computed (:func:`digest_algorithm`,
  :func:`digest_applies`).

The blocking layer takes no request: :func:`lookup` turns one into the
plain :class:`Lookup` resolution needs (the target, the ``--spa``
fallback, the parsed Accept-Encoding when the coding is negotiable, the
digest asked for), and the ``*_for`` functions answer the same questions
from it.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from ..config import Config
from .active import active_fields
from .codecs import CODECS
from .core import Plan, RequestFacts, depends_on_method_only, spa_fallback_applies
from .disposition import content_disposition, download_matches
from .mime import is_compressible
from .negotiate import (
    COMPRESS_MIN_SIZE,
    AcceptEncoding,
    parse_accept_encoding,
    parse_query,
    select_coding,
    want_digest,
    wanted_codings,
)
from .target import Target

__all__ = [
    "Headers",
    "Lookup",
    "choice_depends_on",
    "choose_coding",
    "choose_coding_for",
    "digest_algorithm",
    "digest_applies",
    "direct_applies",
    "file_fields",
    "file_headers",
    "lookup",
    "negotiates",
    "on_the_fly",
    "sidecars_wanted",
    "sidecars_wanted_for",
]

Headers = tuple[tuple[bytes, bytes], ...]


def file_headers(req: RequestFacts, cfg: Config, relpath: str, ctype: str) -> tuple[Headers, bool]:
    """The extra headers of a file response, and whether its coding varies
    (:func:`file_fields`, ``?download`` read from ``req``'s query)."""
    return file_fields(_asks_download(req.target), cfg, relpath, ctype)


def _asks_download(target: Target) -> bool:
    return target.query is not None and "download" in parse_query(target.query)


def file_fields(download: bool, cfg: Config, relpath: str, ctype: str) -> tuple[Headers, bool]:
    """The extra headers of a file response, and whether its coding varies.

    ``download`` (``?download``) or a ``--download`` glob adds
    Content-Disposition (RFC 6266).  With writes on, an active file (HTML,
    SVG ...) under a writable path gets ``Content-Security-Policy: sandbox``
    or ``Content-Disposition: attachment`` (:mod:`serverio.http.active`).
    Every response for a resource whose coding is negotiated carries
    ``Vary: Accept-Encoding``, identity included (RFC 9110 §12.5.5), so a
    shared cache never hands gzip bytes to a client that did not ask.
    Without a query the result depends on the file alone (the warm-file
    cache memoises it per entry).
    """
    extra: Headers = ()
    name = relpath.rsplit("/", 1)[-1]
    if download or (cfg.content.download and download_matches(name, relpath, cfg.content.download)):
        extra = ((b"content-disposition", content_disposition(name)),)
    if cfg.uploads.upload:  # read-only servers never ask (one attribute test)
        extra += active_fields(cfg, relpath, ctype, bool(extra))
    vary = is_compressible(ctype) and (
        cfg.content.precompressed or cfg.content.compress_max_size > 0
    )
    return extra, vary


def on_the_fly(size: int, cfg: Config) -> tuple[str, ...]:
    """The codings a file of ``size`` bytes may be compressed to on the fly:
    none below :data:`~serverio.http.negotiate.COMPRESS_MIN_SIZE` (the
    coding overhead outweighs the gain) or above ``--compress-max-size``."""
    return tuple(CODECS) if COMPRESS_MIN_SIZE <= size <= cfg.content.compress_max_size else ()


def negotiates(req: RequestFacts, vary: bool) -> bool:
    """Is the content coding negotiated for this request?

    Not for a Range request: it gets identity (coded representations are
    never ranged), for HEAD as for GET so that HEAD mirrors GET.
    """
    return vary and req.range is None and req.accept_encoding is not None


def sidecars_wanted(req: RequestFacts, cfg: Config) -> list[str]:
    """The codings whose precompressed sidecars the choice depends on, in
    preference order (call only when :func:`negotiates` is true)."""
    if not cfg.content.precompressed:
        return []
    return wanted_codings(parse_accept_encoding(req.accept_encoding))


def choose_coding(
    req: RequestFacts, cfg: Config, size: int, sidecars: Collection[str]
) -> tuple[str, bool]:
    """``(coding, from_sidecar)`` for a file of ``size`` bytes whose usable
    sidecars (present and not older than the file) are ``sidecars``;
    ``coding`` is ``""`` for identity (call only when :func:`negotiates`)."""
    accept = parse_accept_encoding(req.accept_encoding)
    return select_coding(accept, sidecars, on_the_fly(size, cfg))


def choice_depends_on(
    req: RequestFacts, wanted: list[str], coding: str, from_sidecar: bool
) -> list[str]:
    """The codings among ``wanted`` (:func:`sidecars_wanted`) whose sidecar
    state :func:`choose_coding`'s answer ``(coding, from_sidecar)`` depends on.

    A sidecar chosen at qvalue q stays the choice while it is usable,
    whatever happens to the sidecars of codings the client weights lower,
    or equally but ranked after it (:func:`~serverio.http.negotiate.select_coding`
    breaks ties in :data:`~serverio.http.negotiate.CODING_RANK` order, the
    order of ``wanted``): only it and the codings that would beat it if
    they appeared count.  Identity or on-the-fly compression depends on
    every wanted coding's sidecar.
    """
    if not from_sidecar:
        return list(wanted)
    accept = parse_accept_encoding(req.accept_encoding)
    q = accept.q(coding)
    out: list[str] = []
    ahead = True  # ranked before ``coding``: wins a tie
    for c in wanted:
        if c == coding:
            out.append(c)
            ahead = False
        elif accept.q(c) > q or (ahead and accept.q(c) == q):
            out.append(c)
    return out


def digest_algorithm(req: RequestFacts, cfg: Config) -> str:
    """The Repr-Digest algorithm to send (RFC 9530), ``""`` for none: only
    with ``--digest``, and as Want-Repr-Digest asks."""
    if not cfg.content.digest:
        return ""
    return want_digest(req.want_repr_digest) or ""


def digest_applies(plan: Plan) -> bool:
    """A Repr-Digest describes the selected representation's bytes, so only
    responses that carry (part of) them get one: 200 and 206, not 304/412."""
    return plan.status in (200, 206)


@dataclass(frozen=True, slots=True)
class Lookup:
    """What resolution opens and reads for one request, decided before the
    blocking hop (:func:`lookup`): facts, no request.

    ``target``: the path (its segments, slash and query); ``spa``: a
    missing path may be answered with the ``--spa`` file
    (:func:`~serverio.http.core.spa_fallback_applies`); ``wants_bytes``: a
    small body is read whole in the hop (a GET that probably sends it: not
    HEAD, nor a revalidation, usually a 304; a hint only); ``download``:
    ``?download`` asks for Content-Disposition; ``accept``: the parsed
    Accept-Encoding when the coding may be negotiated (None for a Range
    request, which gets identity, or without the field: :func:`negotiates`);
    ``digest``: the Repr-Digest algorithm to send, ``""`` for none.
    """

    target: Target
    spa: bool = False
    wants_bytes: bool = False
    download: bool = False
    accept: AcceptEncoding | None = None
    digest: str = ""

    def negotiates(self, vary: bool) -> bool:
        """:func:`negotiates` for this lookup."""
        return vary and self.accept is not None


def lookup(req: RequestFacts, cfg: Config) -> Lookup:
    """The :class:`Lookup` of ``req``."""
    negotiable = req.range is None and req.accept_encoding is not None
    return Lookup(
        req.target,
        spa=spa_fallback_applies(req, cfg),
        wants_bytes=(
            req.method == b"GET" and req.if_none_match is None and req.if_modified_since is None
        ),
        download=_asks_download(req.target),
        accept=parse_accept_encoding(req.accept_encoding) if negotiable else None,
        digest=digest_algorithm(req, cfg),
    )


def direct_applies(req: RequestFacts, cfg: Config) -> bool:
    """May ``req`` be resolved the direct way
    (:func:`serverio.fs.prepare.resolve_direct`)?  A GET or HEAD of a path
    that names a file (no trailing slash), with no precondition, Range or
    query (:func:`~serverio.http.core.depends_on_method_only`) and no
    Repr-Digest to send, that the ``--spa`` file may not stand in for
    (:func:`~serverio.http.core.spa_fallback_applies`): what its
    :func:`lookup` would leave to the file's facts alone.  (A coding to
    negotiate is the file's to say: resolve_direct declines then.)"""
    target = req.target
    method = req.method
    return (
        (method == b"GET" or method == b"HEAD")
        and bool(target.segments)
        and not target.slash
        and depends_on_method_only(req)
        and not digest_algorithm(req, cfg)
        and not spa_fallback_applies(req, cfg)
    )


def sidecars_wanted_for(look: Lookup, cfg: Config) -> list[str]:
    """:func:`sidecars_wanted` from a :class:`Lookup` (call only when it
    negotiates)."""
    if not cfg.content.precompressed or look.accept is None:
        return []
    return wanted_codings(look.accept)


def choose_coding_for(
    look: Lookup, cfg: Config, size: int, sidecars: Collection[str]
) -> tuple[str, bool]:
    """:func:`choose_coding` from a :class:`Lookup` (call only when it
    negotiates)."""
    assert look.accept is not None
    return select_coding(look.accept, sidecars, on_the_fly(size, cfg))
