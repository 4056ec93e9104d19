"""Signed, expiring tokens: state a fleet shares without sharing memory.

Session cookies, share links and resumable-upload URLs carry what the
server needs to trust them (who, which path, which rights, until when)
in the token itself, authenticated with an HMAC of the server's secret
(``--secret-file``; serverio.secret).  Any replica given the same
secret accepts what another issued; nothing is kept in memory, and a
secret rotated revokes every token at once.

A token is ``<payload>.<mac>``, both base64url without padding:

* payload: a version byte (1), the expiry as 8 big-endian bytes (Unix
  seconds), then the fields, UTF-8, each followed by NUL (so a field may
  not hold NUL: :meth:`Signer.sign` refuses one);
* mac: HMAC-SHA256 (RFC 2104) over the payload with a key derived per
  *purpose* (``HMAC(secret, "serverio token/" + purpose)``), so a share
  link can never be replayed as a session cookie or an upload URL.

:meth:`Signer.open` checks the length first (tokens are attacker input:
at most :data:`MAX_TOKEN` characters), the MAC in constant time
(``hmac.compare_digest``) before decoding any field, and the expiry last,
so an expired token is told apart from a forged one (410 against 403 for
a share link) only once it is known to be genuine.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass
from typing import Literal

__all__ = ["MAX_TOKEN", "MIN_SECRET", "Opened", "Signer", "TokenError"]

# The longest token accepted (characters): a path of 2 KiB and a few fields
# fit; anything longer is refused before any MAC is computed.
MAX_TOKEN = 4096
# The shortest secret accepted (bytes): 256 bits, the HMAC-SHA256 key size
# (RFC 2104 §3: shorter keys weaken it).
MIN_SECRET = 32
_VERSION = 1


class TokenError(ValueError):
    """A token that cannot be trusted: ``kind`` is ``"invalid"`` (malformed,
    altered, another purpose or another secret) or ``"expired"`` (genuine,
    but its time is over)."""

    def __init__(self, kind: Literal["invalid", "expired"]) -> None:
        super().__init__(kind)
        self.kind: Literal["invalid", "expired"] = kind


@dataclass(frozen=True, slots=True)
class Opened:
    """What a genuine, unexpired token says."""

    fields: tuple[str, ...]
    expires: int


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Signer:
    """Signs and opens tokens with one secret; immutable, safe to share
    between tasks and replicas (it holds no state beyond the keys)."""

    __slots__ = ("_keys", "_secret")

    def __init__(self, secret: bytes) -> None:
        if len(secret) < MIN_SECRET:
            raise ValueError(f"a secret needs at least {MIN_SECRET} bytes, got {len(secret)}")
        self._secret = secret
        self._keys: dict[str, bytes] = {}

    def _key(self, purpose: str) -> bytes:
        key = self._keys.get(purpose)
        if key is None:
            label = ("serverio token/" + purpose).encode("utf-8")
            key = hmac.new(self._secret, label, hashlib.sha256).digest()
            self._keys[purpose] = key
        return key

    def mac(self, purpose: str, data: bytes) -> bytes:
        """HMAC-SHA256 of ``data`` with ``purpose``'s key: a value only a
        holder of the secret can compute (a share password's pepper)."""
        return hmac.new(self._key(purpose), data, hashlib.sha256).digest()

    def sign(self, purpose: str, fields: tuple[str, ...], expires: int) -> str:
        """A token for ``fields`` valid until ``expires`` (Unix seconds)."""
        if not 0 <= expires < 1 << 63:
            raise ValueError("expiry out of range")
        parts = [bytes([_VERSION]), expires.to_bytes(8, "big")]
        for f in fields:
            if "\x00" in f:
                raise ValueError("a token field may not contain NUL")
            parts.append(f.encode("utf-8", "surrogatepass") + b"\x00")
        payload = b"".join(parts)
        mac = hmac.new(self._key(purpose), payload, hashlib.sha256).digest()
        token = _b64(payload) + "." + _b64(mac)
        if len(token) > MAX_TOKEN:
            raise ValueError(f"token longer than {MAX_TOKEN} characters")
        return token

    def open(self, purpose: str, token: str, now: float) -> Opened:
        """The fields of a genuine token for ``purpose`` not yet expired at
        ``now``; :class:`TokenError` otherwise."""
        if len(token) > MAX_TOKEN or token.count(".") != 1:
            raise TokenError("invalid")
        body, _, sig = token.partition(".")
        try:
            payload = _unb64(body)
            mac = _unb64(sig)
        except (binascii.Error, ValueError):
            raise TokenError("invalid") from None
        want = hmac.new(self._key(purpose), payload, hashlib.sha256).digest()
        if not hmac.compare_digest(mac, want):
            raise TokenError("invalid")
        if len(payload) < 9 or payload[0] != _VERSION or (len(payload) > 9 and payload[-1] != 0):
            raise TokenError("invalid")
        expires = int.from_bytes(payload[1:9], "big")
        raw = payload[9:-1].split(b"\x00") if len(payload) > 9 else []
        try:
            fields = tuple(r.decode("utf-8", "surrogatepass") for r in raw)
        except UnicodeDecodeError:
            raise TokenError("invalid") from None
        if now >= expires:
            raise TokenError("expired")
        return Opened(fields, expires)
