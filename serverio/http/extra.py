"""The request fields features read: each feature registers its own (pure).

The HTTP core reads a fixed set of request fields (the conditionals,
Range, Accept, Accept-Encoding, Authorization: :class:`RequestFacts`'s
attributes).  Every other field is some feature's: WebDAV's ``Depth`` and
``Destination``, the uploads' ``Content-Digest``, CORS's ``Origin``, the
proxy's ``Upgrade``.  Neither this layer nor the field scan
(:mod:`serverio.wire.fields`) names them: a feature declares each field it
reads, once, where it reads it::

    DEPTH = request_field("depth")          # serverio/dav/...
    depth = DEPTH.of(req)                   # the raw value, or None

and the scan keeps the value of every registered field in
:attr:`RequestFacts.extra` (joined with ``", "`` when the field came on
several lines, RFC 9110 §5.3; raw, as received: the feature parses it).
A field nobody registered costs the scan one failed dict lookup and is
not kept; a request with none of them (every plain GET) shares the empty
``NO_EXTRA``.  Two features that read one field each register it (the
registration is idempotent) and neither imports the other's constant.

Registration happens when the feature's module is imported, which is
before the server serves: the composition root imports every feature it
installs.  The registry only grows.

``host`` is the core's, not a feature's: the scan keeps the Host field (or
HTTP/2's ``:authority``) in ``extra`` under :data:`HOST` whenever another
extra field is kept (WebDAV's Destination and the upload form's CSRF rule
compare with it), and on every request when the Host is checked
(:mod:`serverio.http.hosts`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Protocol

__all__ = ["HOST", "KEPT", "HasExtra", "RequestField", "fields_of", "request_field"]

# Wire name (lower-case bytes) -> the key in RequestFacts.extra (its str).
_KEPT: dict[bytes, str] = {}
# What the scan reads (the dict itself, typed read-only: one dict lookup per
# field; it sees every later registration).
KEPT: Final[Mapping[bytes, str]] = _KEPT


class HasExtra(Protocol):
    """What a field is read from (a :class:`~serverio.http.core.RequestFacts`)."""

    @property
    def extra(self) -> tuple[tuple[str, str], ...]: ...


@dataclass(frozen=True, slots=True)
class RequestField:
    """One request field, by its lower-case name."""

    name: str

    def of(self, req: HasExtra) -> str | None:
        """The field's raw value in ``req`` (lines joined), or None."""
        name = self.name
        for key, value in req.extra:
            if key == name:
                return value
        return None


def fields_of(req: HasExtra, *fields: RequestField) -> list[str | None]:
    """The raw values of ``fields`` in ``req`` (each None when absent), in
    one pass over its kept fields: a feature that reads several asks once."""
    values: list[str | None] = [None] * len(fields)
    extra = req.extra
    if extra:
        for at, field in enumerate(fields):
            name = field.name
            for key, value in extra:
                if key == name:
                    values[at] = value
                    break
    return values


def request_field(name: str) -> RequestField:
    """Register ``name`` (a field name, any case) as read by the calling
    feature; the scan keeps it from now on.  Returns its reader."""
    low = name.lower()
    if not low or not low.isascii() or any(c in low for c in " \t:\r\n") or low == "host":
        raise ValueError(f"not a registrable field name: {name!r}")
    _KEPT.setdefault(low.encode("ascii"), low)
    return RequestField(low)


# The Host field (or :authority), kept by the scan itself (see the module doc).
HOST: Final = RequestField("host")
