"""``Content-Digest`` and ``Repr-Digest`` on a request (RFC 9530), pure.

:func:`parse_digests` reads the field (a Structured Field Dictionary of
byte sequences, RFC 8941 §3.2, §3.3.5) and keeps the algorithms serverio
verifies, ``sha-256`` and ``sha-512`` (RFC 9530 §5: the only two that are
not "insecure"); unknown and insecure algorithms are ignored, as §2 says
a recipient does with algorithms it does not support.  A field that is
not a valid dictionary, or a known algorithm whose value is not a byte
sequence of that algorithm's length, raises :class:`HTTPError` 400: the
client asked for integrity and we cannot tell what it meant, so nothing
is written.

:class:`DigestVerifier` hashes the body as it streams (``update``) and
says at the end whether every digest matched (``verify``).  For a PUT
without a content coding, Content-Digest and Repr-Digest are digests of
the same bytes; the caller decides which field applies.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Mapping, Sequence
from typing import Final

from ..errors import HTTPError

__all__ = [
    "ALGORITHMS",
    "MAX_DIGEST_FIELD",
    "MAX_MEMBERS",
    "DigestVerifier",
    "parse_digests",
]

# Algorithm key (RFC 9530 §7.2 registry) -> (hashlib name, digest bytes).
ALGORITHMS: Final[Mapping[str, tuple[str, int]]] = {
    "sha-256": ("sha256", 32),
    "sha-512": ("sha512", 64),
}
# The longest field we read (all lines joined): a sha-512 member is 98
# bytes, so 4 KiB is room for every registered algorithm many times over.
MAX_DIGEST_FIELD: Final = 4096
# The most dictionary members (RFC 8941 §3.2 asks parsers to allow 1024;
# a digest field has one per algorithm, and the registry has 7).
MAX_MEMBERS: Final = 64

# RFC 8941 §3.1.2 key, §3.3.4 token, §3.3.1/§3.3.2 numbers.
_KEY = re.compile(r"[a-z*][a-z0-9_\-.*]*")
_TOKEN = re.compile(r"[A-Za-z*][!#$%&'*+\-.^_`|~0-9A-Za-z:/]*")
_NUMBER = re.compile(r"-?[0-9]{1,15}(?:\.[0-9]{1,3})?")
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")


def _bad(detail: str) -> HTTPError:
    return HTTPError(400, f"digest field: {detail}")


class _Parser:
    """RFC 8941 §4.2 parsing of a Dictionary, bare items as Python values
    (a byte sequence is :class:`bytes`, everything else is kept only to be
    skipped)."""

    __slots__ = ("pos", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def _peek(self) -> str:
        return self.text[self.pos : self.pos + 1]

    def _ows(self) -> None:
        while self._peek() in (" ", "\t"):
            self.pos += 1

    def _sp(self) -> None:
        while self._peek() == " ":
            self.pos += 1

    def dictionary(self) -> dict[str, object]:
        members: dict[str, object] = {}
        self._sp()
        while self.pos < len(self.text):
            key = self._key()
            if self._peek() == "=":
                self.pos += 1
                value = self._member()
            else:
                value = True  # §4.2.2: a bare key is Boolean true
                self._parameters()
            members[key] = value  # §4.2.2: a repeated key overwrites
            if len(members) > MAX_MEMBERS:
                raise _bad("too many members")
            self._ows()
            if self.pos >= len(self.text):
                return members
            if self._peek() != ",":
                raise _bad("expected ',' between members")
            self.pos += 1
            self._ows()
            if self.pos >= len(self.text):
                raise _bad("trailing ','")
        return members

    def _key(self) -> str:
        match = _KEY.match(self.text, self.pos)
        if match is None:
            raise _bad("invalid key")
        self.pos = match.end()
        return match.group()

    def _member(self) -> object:
        if self._peek() == "(":
            return self._inner_list()
        value = self._bare_item()
        self._parameters()
        return value

    def _inner_list(self) -> object:
        self.pos += 1
        items: list[object] = []
        while self.pos < len(self.text):
            self._sp()
            if self._peek() == ")":
                self.pos += 1
                self._parameters()
                return tuple(items)
            items.append(self._bare_item())
            self._parameters()
            if self._peek() not in (" ", ")"):
                raise _bad("invalid inner list")
        raise _bad("unterminated inner list")

    def _parameters(self) -> None:
        while self._peek() == ";":
            self.pos += 1
            self._sp()
            self._key()
            if self._peek() == "=":
                self.pos += 1
                self._bare_item()

    def _bare_item(self) -> object:
        c = self._peek()
        if c == ":":
            return self._bytes()
        if c == '"':
            return self._string()
        if c == "?":
            value = self.text[self.pos + 1 : self.pos + 2]
            if value not in ("0", "1"):
                raise _bad("invalid boolean")
            self.pos += 2
            return value == "1"
        for pattern in (_NUMBER, _TOKEN):
            match = pattern.match(self.text, self.pos)
            if match is not None:
                self.pos = match.end()
                return match.group()
        raise _bad("invalid item")

    def _bytes(self) -> bytes:
        end = self.text.find(":", self.pos + 1)
        if end < 0:
            raise _bad("unterminated byte sequence")
        encoded = self.text[self.pos + 1 : end]
        self.pos = end + 1
        if _BASE64.fullmatch(encoded) is None:
            raise _bad("invalid base64")
        # §4.2.7: parsers SHOULD NOT fail when "=" padding is missing.
        try:
            return base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
        except binascii.Error:
            raise _bad("invalid base64") from None

    def _string(self) -> str:
        out: list[str] = []
        self.pos += 1
        while self.pos < len(self.text):
            c = self.text[self.pos]
            self.pos += 1
            if c == "\\":
                nxt = self._peek()
                if nxt not in ('"', "\\"):
                    raise _bad("invalid escape in string")
                out.append(nxt)
                self.pos += 1
            elif c == '"':
                return "".join(out)
            elif not " " <= c <= "~":
                raise _bad("invalid character in string")
            else:
                out.append(c)
        raise _bad("unterminated string")


def parse_digests(values: Sequence[bytes]) -> dict[str, bytes]:
    """The sha-256 / sha-512 digests a ``Content-Digest`` or ``Repr-Digest``
    field carries (its lines, as received); empty when it names none.

    Raises :class:`HTTPError` 400 for a field over :data:`MAX_DIGEST_FIELD`
    bytes, one that is not an RFC 8941 Dictionary, or a known algorithm
    whose value is not a byte sequence of its digest length.
    """
    # RFC 9110 §5.3: several lines are one list, joined with ", ".
    joined = b", ".join(values)
    if len(joined) > MAX_DIGEST_FIELD:
        raise _bad("too long")
    try:
        text = joined.decode("ascii")
    except UnicodeDecodeError:
        raise _bad("not ASCII") from None
    # RFC 8941 §4.2: leading and trailing SP are discarded; HTAB is not SP.
    members = _Parser(text.strip(" ")).dictionary()
    digests: dict[str, bytes] = {}
    for key, (_, size) in ALGORITHMS.items():
        if key not in members:
            continue
        value = members[key]
        if not isinstance(value, bytes) or len(value) != size:
            raise _bad(f"{key} is not a byte sequence of {size} bytes")
        digests[key] = value
    return digests


class DigestVerifier:
    """Hashes a body as it streams and checks it against ``expected``
    (from :func:`parse_digests`); every digest named must match.

    An empty ``expected`` verifies anything (no digest was asked for).
    """

    __slots__ = ("_expected", "_hashes")

    def __init__(self, expected: Mapping[str, bytes]) -> None:
        self._expected = dict(expected)
        self._hashes = {key: hashlib.new(ALGORITHMS[key][0]) for key in self._expected}

    def update(self, data: bytes | bytearray | memoryview) -> None:
        """Add the next body bytes."""
        for h in self._hashes.values():
            h.update(data)

    def verify(self) -> bool:
        """True when every expected digest matches the bytes seen so far."""
        hashes = self._hashes.items()
        return all(hmac.compare_digest(h.digest(), self._expected[k]) for k, h in hashes)
