"""Resumable uploads, the pure part: request facts + upload state + policy + now -> plan.

Two protocols share one upload state (an offset, a length once known, an
expiry; :class:`State`, read from disk by :mod:`serverio.resumable.store`):

* the IETF draft "Resumable Uploads for HTTP"
  (draft-ietf-httpbis-resumable-upload; :data:`DRAFT`, interop version
  :data:`INTEROP_VERSION`): an upload is created by a ``PUT`` to the target
  path with ``Upload-Complete`` (§"Upload Creation"), announced by a
  ``104 (Upload Resumption Supported)`` with the upload resource's
  ``Location``; ``HEAD`` on the upload resource tells the offset
  (§"Offset Retrieval"), ``PATCH`` with ``application/partial-upload``
  appends (§"Upload Append"; a wrong ``Upload-Offset`` is 409 with the
  right one), ``DELETE`` cancels (§"Upload Cancellation");
* tus 1.0.0 (https://tus.io/protocols/resumable-upload): ``POST`` to the
  target folder with ``Tus-Resumable`` and ``Upload-Length`` creates
  (the ``filename`` of ``Upload-Metadata`` names the file), ``HEAD`` /
  ``PATCH`` (``application/offset+octet-stream``) / ``DELETE`` on the
  upload resource, ``OPTIONS`` for discovery; extensions creation,
  creation-with-upload, termination, expiration, checksum.

The upload resource is serverio's own path, :data:`RESOURCE_PREFIX` +
a signed token (:mod:`serverio.signing`, purpose :data:`PURPOSE`) that
names the target and the temporary: nothing but the disk and the secret
is needed to resume it, on any replica.

Nothing here does I/O or awaits; every function is total on hostile
input (a malformed field is a :class:`Refuse` with 400, never an
exception).
"""

from __future__ import annotations

import base64
import binascii
import enum
import json
import re
from dataclasses import dataclass
from typing import Final
from urllib.parse import unquote

from ..http.core import Plan, RequestFacts, common_fields, error_plan
from ..http.dates import format_http_date
from ..http.extra import request_field

# The request fields read here (serverio.http.extra: the scan keeps them):
# the draft's (§"State", §"Draft Version Identification"), tus 1.0's, the
# media type of an append, and the Repr-Digest of a creation (RFC 9530).
UPLOAD_COMPLETE: Final = request_field("upload-complete")
UPLOAD_OFFSET: Final = request_field("upload-offset")
UPLOAD_LENGTH: Final = request_field("upload-length")
UPLOAD_INTEROP: Final = request_field("upload-draft-interop-version")
TUS_RESUMABLE: Final = request_field("tus-resumable")
UPLOAD_METADATA: Final = request_field("upload-metadata")
UPLOAD_CHECKSUM: Final = request_field("upload-checksum")
CONTENT_TYPE: Final = request_field("content-type")
REPR_DIGEST: Final = request_field("repr-digest")
CONTENT_DISPOSITION: Final = request_field("content-disposition")

__all__ = [
    "ACCEPTED_INTEROP",
    "CONTENT_DISPOSITION",
    "CONTENT_TYPE",
    "DRAFT",
    "INTEROP_VERSION",
    "PURPOSE",
    "REPR_DIGEST",
    "RESOURCE_PREFIX",
    "TUS_CHECKSUMS",
    "TUS_EXTENSIONS",
    "TUS_RESUMABLE",
    "TUS_VERSION",
    "UPLOAD_CHECKSUM",
    "UPLOAD_COMPLETE",
    "UPLOAD_INTEROP",
    "UPLOAD_LENGTH",
    "UPLOAD_METADATA",
    "UPLOAD_OFFSET",
    "Ask",
    "Go",
    "Op",
    "Policy",
    "Refuse",
    "State",
    "append_decision",
    "appended_plan",
    "classify",
    "completed",
    "create_decision",
    "created_plan",
    "disposition_filename",
    "interim_fields",
    "limit_field",
    "mismatch_plan",
    "offset_plan",
    "options_plan",
    "parse_checksum",
    "parse_metadata",
    "progress_fields",
    "refusal_plan",
    "resource_path",
    "tus_fields",
]

# The IETF draft this implements, and its interop version (§"Draft Version
# Identification"): the one place the version number is kept.  A 104 is
# sent only to a request whose Upload-Draft-Interop-Version is one of
# ACCEPTED_INTEROP (the draft: never on a missing or mismatching one).
# Versions 6 and 7 (drafts -05 to -08) differ from 8 in nothing a server
# sends or reads here (the same fields, media type and status codes;
# 8 added the 104 section and Upload-Limit on OPTIONS), so their clients
# (tus-js-client's "ietf-draft-05" setting sends 6) get the 104 too.
DRAFT: Final = "draft-ietf-httpbis-resumable-upload-12"
INTEROP_VERSION: Final = 8
ACCEPTED_INTEROP: Final = frozenset((6, 7, INTEROP_VERSION))

# tus 1.0: the version spoken, the extensions offered, the checksum
# algorithms accepted in Upload-Checksum (tus "checksum": sha1 is required).
TUS_VERSION: Final = "1.0.0"
TUS_EXTENSIONS: Final = "creation,creation-with-upload,termination,expiration,checksum"
TUS_CHECKSUMS: Final = ("sha1", "sha256", "sha512", "md5")

# The upload resources: /.serverio/uploads/<token>.  A dot path: never a
# file (uploads refuse to write dot names), never listed; the token is
# signed for PURPOSE (serverio.signing keys each purpose apart).
RESOURCE_PREFIX: Final = (".serverio", "uploads")
PURPOSE: Final = "resumable-upload"

# Structured-field Integer (RFC 9651 §3.3.1): at most 15 digits.
_SF_INT = re.compile(r"[0-9]{1,15}")
# The media types of an append: the draft's, and tus 1.0's.
_PARTIAL: Final = "application/partial-upload"
_TUS_PATCH: Final = "application/offset+octet-stream"
# At most this many Upload-Metadata pairs and bytes (attacker input).
_MAX_METADATA: Final = 4096
_MAX_PAIRS: Final = 32
_METADATA_KEY = re.compile(r"[!-+\--~]{1,64}")  # printable ASCII but SP and ","
_PROBLEMS: Final = "https://iana.org/assignments/http-problem-types#"


class Op(enum.Enum):
    """What a resumable request asks."""

    CREATE = "create"  # IETF: PUT to the target; tus: POST to the folder
    OFFSET = "offset"  # HEAD (or GET) of the upload resource
    APPEND = "append"  # PATCH of the upload resource
    CANCEL = "cancel"  # DELETE of the upload resource
    OPTIONS = "options"  # tus discovery, the draft's limits


@dataclass(frozen=True, slots=True)
class Ask:
    """A resumable request's facts, its fields parsed (invalid ones, per
    the draft's "Other values MUST cause the entire header field to be
    ignored", are None; tus's malformed ones are ``bad``)."""

    op: Op
    tus: bool
    token: str = ""  # the upload resource's token (OFFSET, APPEND, CANCEL)
    complete: bool | None = None  # IETF Upload-Complete
    offset: int | None = None  # Upload-Offset
    length: int | None = None  # Upload-Length
    interop: int | None = None  # Upload-Draft-Interop-Version
    content_type: str = ""  # the media type, lower-case, without parameters
    bad: str = ""  # why the request is malformed (400), "" when it is not


@dataclass(frozen=True, slots=True)
class State:
    """An upload as its files say: the durable offset, the length once
    known, when it expires (Unix seconds), tus or IETF."""

    offset: int
    length: int | None
    expires: float
    tus: bool


@dataclass(frozen=True, slots=True)
class Policy:
    """The limits of resumable uploads (``--max-upload-size``,
    ``--upload-expiry``, ``--upload-chunk-size``: 0 announces none)."""

    max_size: int
    expiry: float
    max_append: int = 0


@dataclass(frozen=True, slots=True)
class Go:
    """An append (or a creation's content) may go on: the length now
    known (None: not yet), at most ``room`` bytes of content, and whether
    the upload completes once the content is in."""

    length: int | None
    room: int
    complete: bool


@dataclass(frozen=True, slots=True)
class Refuse:
    """A refusal: status and the reason (logged, never sent)."""

    status: int
    reason: str
    problem: str = ""  # the draft's problem type, when it defines one


def resource_path(token: str) -> str:
    """The upload resource's absolute path (its Location)."""
    return "/" + "/".join(RESOURCE_PREFIX) + "/" + token


def _sf_int(value: str | None) -> int | None:
    """A structured-field Integer >= 0 (parameters ignored), else None."""
    if value is None:
        return None
    item = value.split(";", 1)[0].strip()
    return int(item) if _SF_INT.fullmatch(item) else None


def _sf_bool(value: str | None) -> bool | None:
    """A structured-field Boolean (RFC 9651 §3.3.6), else None."""
    if value is None:
        return None
    item = value.split(";", 1)[0].strip()
    return {"?1": True, "?0": False}.get(item)


def _media_type(value: str | None) -> str:
    return "" if value is None else value.split(";", 1)[0].strip().lower()


def classify(req: RequestFacts) -> Ask | None:
    """The resumable request ``req`` is, or None: not one (a plain PUT,
    a form POST, a DELETE of a file: the uploads' step answers it)."""
    extra = dict(req.extra)  # the registered fields (FIELDS), raw
    tus = "tus-resumable" in extra
    segs = req.target.segments
    method = req.method
    if segs[:2] == RESOURCE_PREFIX:
        if len(segs) == 2 and method == b"OPTIONS":
            return Ask(Op.OPTIONS, tus)
        if len(segs) != 3 or req.target.slash:
            return None
        op = {
            b"HEAD": Op.OFFSET,
            b"GET": Op.OFFSET,
            b"PATCH": Op.APPEND,
            b"DELETE": Op.CANCEL,
            b"OPTIONS": Op.OPTIONS,
        }.get(method)
        if op is None:
            return None
        return _parsed(Ask(op, tus, segs[2]), extra)
    if method == b"PUT" and "upload-complete" in extra and not tus:
        complete = _sf_bool(extra["upload-complete"])
        if complete is None:
            return None  # ignored (the draft): a plain PUT
        return _parsed(Ask(Op.CREATE, False, complete=complete), extra)
    if tus and method == b"POST" and (not segs or req.target.slash):
        return _parsed(Ask(Op.CREATE, True), extra)
    if method == b"POST" and "upload-complete" in extra and (not segs or req.target.slash):
        # The draft's creation by POST to a folder (the file named by
        # Content-Disposition, or Upload-Metadata as tus-js-client sends it).
        complete = _sf_bool(extra["upload-complete"])
        if complete is None:
            return None
        return _parsed(Ask(Op.CREATE, False, complete=complete), extra)
    if tus and method == b"OPTIONS":
        return Ask(Op.OPTIONS, True)
    return None


def _parsed(ask: Ask, extra: dict[str, str]) -> Ask:
    raw_offset = extra.get("upload-offset")
    raw_length = extra.get("upload-length")
    offset = _sf_int(raw_offset)
    length = _sf_int(raw_length)
    bad = ""
    if ask.tus:
        # tus 1.0: a present but malformed number is a 400.
        if raw_offset is not None and offset is None:
            bad = "malformed Upload-Offset"
        elif raw_length is not None and length is None:
            bad = "malformed Upload-Length"
    complete = ask.complete
    if not ask.tus and ask.op is Op.APPEND:
        complete = _sf_bool(extra.get("upload-complete"))
    return Ask(
        ask.op,
        ask.tus,
        ask.token,
        complete,
        offset,
        length,
        _sf_int(extra.get("upload-draft-interop-version")),
        _media_type(extra.get("content-type")),
        bad,
    )


_DISPOSITION_PARAM = re.compile(
    r';\s*(filename\*?)\s*=\s*("(?:[^"\\]|\\.)*"|[^;\s]*)', re.IGNORECASE
)


def disposition_filename(value: str | None) -> str | None:
    """``filename*`` (RFC 8187: ``UTF-8''`` percent-encoded), else
    ``filename`` of a Content-Disposition (RFC 6266); None when absent,
    malformed or over 1 KiB (attacker input: the write path's name rules
    judge what is returned)."""
    if value is None or len(value) > 1024:
        return None
    found: dict[str, str] = {}
    for key, raw in _DISPOSITION_PARAM.findall(value):
        if raw.startswith('"'):
            raw = re.sub(r"\\(.)", r"\1", raw[1:-1])
        found.setdefault(key.lower(), raw)
    ext = found.get("filename*")
    if ext is not None:
        charset, _, rest = ext.partition("'")
        _, _, encoded = rest.partition("'")
        if charset.lower() == "utf-8":
            try:
                return unquote(encoded, encoding="utf-8", errors="strict")
            except UnicodeDecodeError:
                return None
    return found.get("filename")


def parse_metadata(value: str | None) -> dict[str, bytes] | None:
    """tus ``Upload-Metadata``: ``key base64, key2 base64, key3``; None
    when malformed (400) or too large."""
    if value is None:
        return {}
    if len(value) > _MAX_METADATA:
        return None
    out: dict[str, bytes] = {}
    pairs = [p.strip() for p in value.split(",")]
    if len(pairs) > _MAX_PAIRS:
        return None
    for pair in pairs:
        if not pair:
            continue
        key, _, b64 = pair.partition(" ")
        if not _METADATA_KEY.fullmatch(key) or key in out:
            return None
        try:
            out[key] = base64.b64decode(b64.strip(), validate=True)
        except (binascii.Error, ValueError):
            return None
    return out


def parse_checksum(value: str | None) -> tuple[str, bytes] | Refuse | None:
    """tus ``Upload-Checksum: <algorithm> <base64>``: the pair, None when
    absent, a :class:`Refuse` (400 malformed; tus: unsupported algorithm)."""
    if value is None:
        return None
    algo, _, b64 = value.strip().partition(" ")
    if algo not in TUS_CHECKSUMS:
        return Refuse(400, "unsupported checksum algorithm")
    try:
        digest = base64.b64decode(b64.strip(), validate=True)
    except (binascii.Error, ValueError):
        return Refuse(400, "malformed Upload-Checksum")
    if not digest:
        return Refuse(400, "malformed Upload-Checksum")
    return algo, digest


def _merge_length(known: int | None, *given: int | None) -> int | Refuse | None:
    """The draft's §"Length": every indication must agree."""
    out = known
    for g in given:
        if g is None:
            continue
        if out is not None and out != g:
            return Refuse(400, "inconsistent upload length", "inconsistent-upload-length")
        out = g
    return out


def create_decision(ask: Ask, declared: int | None, policy: Policy) -> Go | Refuse:
    """May this creation go on, and with which length and room?  IETF: the
    length is Upload-Length, or (``Upload-Complete: ?1``) the content's
    length; tus: Upload-Length is required (no deferred length)."""
    if ask.bad:
        return Refuse(400, ask.bad)
    if ask.tus:
        if ask.length is None:
            return Refuse(400, "tus creation without Upload-Length")
        if ask.content_type not in ("", _TUS_PATCH) and declared:
            return Refuse(415, "tus creation-with-upload needs application/offset+octet-stream")
    whole = declared if ask.complete else None
    length = _merge_length(None, ask.length, whole)
    if isinstance(length, Refuse):
        return length
    if length is not None and length > policy.max_size:
        return Refuse(413, "upload larger than --max-upload-size")
    if declared is not None and length is not None and declared > length:
        return Refuse(400, "content past the upload length", "inconsistent-upload-length")
    room = length if length is not None else policy.max_size
    complete = bool(ask.complete) or (ask.tus and length == (declared or 0) and length == 0)
    return Go(length, room, complete)


def append_decision(
    ask: Ask, state: State, declared: int | None, policy: Policy
) -> Go | Refuse | int:
    """May this append go on?  An ``int`` is the offset a mismatching
    ``Upload-Offset`` should have been (409)."""
    if ask.bad:
        return Refuse(400, ask.bad)
    if ask.tus != state.tus:
        return Refuse(404, "another protocol's upload")
    if ask.tus:
        if ask.content_type != _TUS_PATCH:
            return Refuse(415, "tus PATCH needs application/offset+octet-stream")
    elif ask.content_type != _PARTIAL:
        return Refuse(415, "PATCH needs application/partial-upload")
    if ask.offset is None:
        return Refuse(400, "no valid Upload-Offset")
    if not ask.tus and ask.complete is None:
        return Refuse(400, "no valid Upload-Complete")
    if ask.offset != state.offset:
        return state.offset
    whole = state.offset + declared if ask.complete and declared is not None else None
    length = _merge_length(state.length, ask.length, whole)
    if isinstance(length, Refuse):
        return length
    if length is not None and length < state.offset:
        return Refuse(400, "upload length below the offset", "inconsistent-upload-length")
    if length is not None and length > policy.max_size:
        return Refuse(413, "upload larger than --max-upload-size")
    room = (length if length is not None else policy.max_size) - state.offset
    if declared is not None and declared > room:
        return Refuse(413, "content past the upload length or --max-upload-size")
    complete = bool(ask.complete) if not ask.tus else length is not None
    return Go(length, room, complete)


# ------------------------------------------------------------------ answers


def limit_field(policy: Policy, expires: float | None, now: float) -> tuple[bytes, bytes]:
    """``Upload-Limit`` (§"Limits"): max-size, max-append-size (the part
    size clients should keep under: a hint, not enforced), and max-age of
    this upload (its remaining lifetime; the policy's for one not made yet)."""
    age = policy.expiry if expires is None else max(0.0, expires - now)
    append = b", max-append-size=%d" % policy.max_append if policy.max_append else b""
    return b"upload-limit", b"max-size=%d%s, max-age=%d" % (policy.max_size, append, int(age))


def tus_fields(expires: float | None = None) -> list[tuple[bytes, bytes]]:
    """The fields of every tus answer (``Tus-Resumable``; ``Upload-Expires``
    for an upload that has one: the expiration extension)."""
    out = [(b"tus-resumable", TUS_VERSION.encode())]
    if expires is not None:
        out.append((b"upload-expires", format_http_date(expires).encode("ascii")))
    return out


def interim_fields(
    location: str, interop: int, policy: Policy, expires: float, now: float
) -> list[tuple[bytes, bytes]]:
    """The 104's fields (§"Upload Creation", §"Draft Version Identification"):
    the upload resource, the draft's interop version the client sent, the limits."""
    return [
        (b"location", location.encode("ascii")),
        (b"upload-draft-interop-version", b"%d" % interop),
        limit_field(policy, expires, now),
    ]


def progress_fields(offset: int, interop: int) -> list[tuple[bytes, bytes]]:
    """A progress 104's fields (the offset durable so far; no Location)."""
    return [
        (b"upload-offset", b"%d" % offset),
        (b"upload-draft-interop-version", b"%d" % interop),
    ]


def _plan(status: int, fields: list[tuple[bytes, bytes]], now: float, body: bytes = b"") -> Plan:
    hs = common_fields(now)
    hs += fields
    if body or status not in (204, 304):
        hs.append((b"content-length", b"%d" % len(body)))
    return Plan(status, tuple(hs), (body,) if body else (), send_body=bool(body))


def created_plan(
    location: str, state: State, policy: Policy, now: float, *, head: bool = False
) -> Plan:
    """201: an upload resource made (IETF: ``Upload-Complete: ?0``; tus:
    its offset after creation-with-upload, its expiry)."""
    fields = [(b"location", location.encode("ascii")), (b"cache-control", b"no-store")]
    if state.tus:
        fields += tus_fields(state.expires)
        fields.append((b"upload-offset", b"%d" % state.offset))
    else:
        fields += [
            (b"upload-complete", b"?0"),
            (b"upload-offset", b"%d" % state.offset),
            limit_field(policy, state.expires, now),
        ]
    return _plan(201, fields, now)


def offset_plan(state: State, policy: Policy, now: float) -> Plan:
    """The answer to HEAD (or an append's end): the durable offset, the
    length once known, the limits; never cached (§"Offset Retrieval")."""
    fields = [(b"upload-offset", b"%d" % state.offset), (b"cache-control", b"no-store")]
    if state.length is not None:
        fields.append((b"upload-length", b"%d" % state.length))
    if state.tus:
        fields += tus_fields(state.expires)
        return _plan(200, fields, now)  # tus 1.0 core: 200 (or 204) for HEAD
    fields += [(b"upload-complete", b"?0"), limit_field(policy, state.expires, now)]
    return _plan(204, fields, now)


def appended_plan(state: State, policy: Policy, now: float) -> Plan:
    """204 after an append that did not complete (both protocols)."""
    plan = offset_plan(state, policy, now)
    return Plan(204, plan.headers, (), send_body=False) if plan.status != 204 else plan


def completed(
    plan: Plan, tus: bool, expires: float | None = None, offset: int | None = None
) -> Plan:
    """The target's answer (the PUT's) as the upload's last answer: with
    ``Upload-Complete: ?1`` (IETF §"Upload Append"), or tus's fields.
    ``offset``: the upload's final offset, sent as ``Upload-Offset`` too
    (tus-js-client's draft setting reads it from every append's answer)."""
    extra = tus_fields() if tus else [(b"upload-complete", b"?1")]
    if offset is not None:
        extra.append((b"upload-offset", b"%d" % offset))
    return Plan(plan.status, plan.headers + tuple(extra), plan.body, plan.send_body, plan.close)


def mismatch_plan(expected: int, provided: int | None, tus: bool, now: float) -> Plan:
    """409: ``Upload-Offset`` is not the upload's offset; the right one
    is sent (IETF: with the problem type "mismatching-upload-offset")."""
    fields = [(b"upload-offset", b"%d" % expected)]
    if tus:
        return _plan(409, fields + tus_fields(), now, b"409 Conflict\n")
    body = json.dumps(
        {
            "type": _PROBLEMS + "mismatching-upload-offset",
            "title": "offset from request does not match offset of resource",
            "expected-offset": expected,
            "provided-offset": provided,
        }
    ).encode()
    fields += [(b"upload-complete", b"?0"), (b"content-type", b"application/problem+json")]
    return _plan(409, fields, now, body)


def refusal_plan(refuse: Refuse, tus: bool, policy: Policy, now: float) -> Plan:
    """A :class:`Refuse` as its answer: problem+json where the draft
    defines a type, ``Upload-Limit`` on a 413 (§"Limits"), tus's fields."""
    fields: list[tuple[bytes, bytes]] = []
    if tus:
        fields += tus_fields()
        if refuse.status == 412:
            fields.append((b"tus-version", TUS_VERSION.encode()))
    else:
        fields.append((b"upload-complete", b"?0"))
        if refuse.status == 413:
            fields.append(limit_field(policy, None, now))
    if refuse.problem and not tus:
        body = json.dumps(
            {"type": _PROBLEMS + refuse.problem, "title": refuse.reason.capitalize()}
        ).encode()
        fields.append((b"content-type", b"application/problem+json"))
        return _plan(refuse.status, fields, now, body)
    return error_plan(refuse.status, now, headers=fields, close=refuse.status == 413)


def options_plan(policy: Policy, now: float) -> Plan:
    """OPTIONS of the uploads endpoint: tus discovery (core, creation,
    checksum) and the draft's ``Upload-Limit`` (§"Limits")."""
    fields = [
        (b"tus-resumable", TUS_VERSION.encode()),
        (b"tus-version", TUS_VERSION.encode()),
        (b"tus-extension", TUS_EXTENSIONS.encode()),
        (b"tus-max-size", b"%d" % policy.max_size),
        (b"tus-checksum-algorithm", ",".join(TUS_CHECKSUMS).encode()),
        limit_field(policy, None, now),
    ]
    return _plan(204, fields, now)
