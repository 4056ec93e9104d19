"""Password hashes for basic authentication (pure CPU work, no I/O).

Schemes accepted in a users file (``user:hash`` per line, htpasswd style):

* ``$pbkdf2-sha256$ITERATIONS$SALT$HASH`` (SALT and HASH base64 without
  padding): the standard-library scheme that ``serverio hash-password``
  writes (PBKDF2-HMAC-SHA256, RFC 8018 §5.2);
* ``$2y$`` / ``$2b$`` / ``$2a$`` bcrypt, when the optional ``bcrypt``
  package is installed (``pip install 'serverio[bcrypt]'``).

Refused at start-up (a one-line error): Apache's ``$apr1$`` (an iterated
MD5, cheap to brute-force; ``htpasswd -B`` writes bcrypt instead),
``{SHA}`` and DES/MD5 ``crypt`` hashes.

Verification is constant-time in the secret (``hmac.compare_digest``, and
bcrypt's own ``checkpw``).  Every check of one users file does the same
work, whichever user it names and whether that user exists
(:func:`verify_padded`): the file's *cost profile* (:func:`cost_profile`)
is the costliest work of each scheme in it, and a check runs exactly that
much of each: the user's own hash, then padding up to the profile
(PBKDF2 iterations; bcrypt rounds, ``2**cost``, as hashes at the costs in
between), and for a scheme the user's hash is not in, or an unknown user,
the whole profile.  Mixed schemes and costs therefore cost every check the
sum of the file's costliest PBKDF2 and costliest bcrypt: keep one scheme
and cost per file for the cheapest checks.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import importlib
import os
from collections.abc import Iterable
from types import ModuleType

__all__ = [
    "BCRYPT_MAX",
    "check_hash",
    "cost_profile",
    "dummy_like",
    "hash_password",
    "verify",
    "verify_padded",
    "work_plan",
]

PBKDF2_PREFIX = "$pbkdf2-sha256$"
DEFAULT_ITERATIONS = 600_000  # OWASP 2023 recommendation for PBKDF2-SHA256
_MIN_ITERATIONS = 1000
_MAX_ITERATIONS = 10_000_000
BCRYPT_MAX = 72  # bcrypt reads at most 72 bytes of the password


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)


def _bcrypt() -> ModuleType | None:
    try:
        return importlib.import_module("bcrypt")
    except ImportError:
        return None


def hash_password(password: str, iterations: int = DEFAULT_ITERATIONS) -> str:
    salt = os.urandom(16)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), salt, iterations)
    return f"{PBKDF2_PREFIX}{iterations}${_b64(salt)}${_b64(digest)}"


def _parse_pbkdf2(h: str) -> tuple[int, bytes, bytes] | None:
    parts = h[len(PBKDF2_PREFIX) :].split("$")
    if len(parts) != 3 or not parts[0].isdigit():
        return None
    try:
        salt, digest = _unb64(parts[1]), _unb64(parts[2])
    except (binascii.Error, ValueError):
        return None
    iterations = int(parts[0])
    if not _MIN_ITERATIONS <= iterations <= _MAX_ITERATIONS or len(salt) < 8 or len(digest) < 16:
        return None
    return iterations, salt, digest


def check_hash(h: str) -> str | None:
    """None when ``h`` is a hash we verify; else why not (one short line)."""
    if h.startswith(PBKDF2_PREFIX):
        return None if _parse_pbkdf2(h) is not None else "malformed $pbkdf2-sha256$ hash"
    if h.startswith(("$2y$", "$2b$", "$2a$")):
        if len(h) != 60:
            return "malformed bcrypt hash"
        if _bcrypt() is None:
            return "bcrypt hash needs the optional 'bcrypt' package"
        return None
    if h.startswith("$apr1$"):
        return "$apr1$ (Apache MD5) is refused: use 'htpasswd -B' or 'serverio hash-password'"
    return "unknown hash scheme (use bcrypt or 'serverio hash-password')"


def dummy_like(h: str) -> str:
    """A hash of a random password with the same scheme and cost as ``h``."""
    secret = os.urandom(18).hex()
    if h.startswith(PBKDF2_PREFIX):
        parsed = _parse_pbkdf2(h)
        assert parsed is not None
        return hash_password(secret, parsed[0])
    bc = _bcrypt()
    assert bc is not None
    cost = int(h[4:6])
    out: bytes = bc.hashpw(secret.encode(), bc.gensalt(rounds=cost))
    return out.decode("ascii")


def verify(h: str, password: str) -> bool:
    """Does ``password`` match ``h``?  Never raises for a bad password: one
    over bcrypt's 72-byte limit is simply wrong (a 401, not a 500)."""
    pw = password.encode("utf-8")
    if h.startswith(PBKDF2_PREFIX):
        parsed = _parse_pbkdf2(h)
        if parsed is None:
            return False
        iterations, salt, digest = parsed
        got = hashlib.pbkdf2_hmac("sha256", pw, salt, iterations, len(digest))
        return hmac.compare_digest(got, digest)
    bc = _bcrypt()
    if bc is None:
        return False
    if len(pw) > BCRYPT_MAX:
        # Hash anyway (same cost as a wrong password), then refuse: bcrypt
        # would silently compare only the first 72 bytes, or raise.
        bc.checkpw(pw[:BCRYPT_MAX], h.encode("ascii"))
        return False
    try:
        return bool(bc.checkpw(pw, h.encode("ascii")))
    except ValueError:
        return False


# ---------------------------------------------------------------- equal work
#
# Work is counted in each scheme's own unit: PBKDF2-HMAC-SHA256 iterations
# times output blocks (RFC 8018 §5.2: each 32-byte block of the derived key
# runs every iteration again); bcrypt by its cost (2**cost rounds of the
# expensive key setup).  Units of different schemes are never compared:
# a check runs the file's maximum of *each* scheme present.


def _pbkdf2_work(h: str) -> int:
    parsed = _parse_pbkdf2(h)
    assert parsed is not None  # check_hash() passed at start-up
    return parsed[0] * -(-len(parsed[2]) // 32)


def _bcrypt_cost(h: str) -> int:
    return int(h[4:6])


def cost_profile(hashes: Iterable[str]) -> str:
    """The work every check of a users file does, as text for
    :func:`verify_padded`: ``pbkdf2=UNITS`` and/or ``bcrypt=COST``, the
    maximum of each scheme in ``hashes`` (all passed :func:`check_hash`)."""
    pbkdf2 = bcrypt = 0
    for h in hashes:
        if h.startswith(PBKDF2_PREFIX):
            pbkdf2 = max(pbkdf2, _pbkdf2_work(h))
        else:
            bcrypt = max(bcrypt, _bcrypt_cost(h))
    parts = [f"pbkdf2={pbkdf2}"] if pbkdf2 else []
    if bcrypt:
        parts.append(f"bcrypt={bcrypt}")
    return ",".join(parts)


def work_plan(h: str | None, profile: str) -> list[tuple[str, int]]:
    """What :func:`verify_padded` runs for ``h`` (None: an unknown user):
    ``("check", 0)`` for the user's own hash, ``("pbkdf2", iterations)`` and
    ``("bcrypt", cost)`` for padding.  Pure; tests add up the work."""
    plan: list[tuple[str, int]] = []
    for part in filter(None, profile.split(",")):
        scheme, _, value = part.partition("=")
        top = int(value)
        if scheme == "pbkdf2":
            own = _pbkdf2_work(h) if h is not None and h.startswith(PBKDF2_PREFIX) else 0
            if own:
                plan.append(("check", 0))
            if top > own:
                plan.append(("pbkdf2", top - own))
        else:
            own = _bcrypt_cost(h) if h is not None and not h.startswith(PBKDF2_PREFIX) else 0
            if own:
                plan.append(("check", 0))
                # 2**top - 2**own == 2**own + 2**(own+1) + ... + 2**(top-1)
                plan += [("bcrypt", c) for c in range(own, top)]
            else:
                plan.append(("bcrypt", top))
    return plan


def verify_padded(h: str | None, password: str, profile: str) -> bool:
    """:func:`verify` of ``h`` (None: an unknown user, always False), doing
    exactly the work of ``profile`` (:func:`cost_profile` of the file
    ``h`` is from) whatever ``h`` is, so the time tells no user apart."""
    ok = False
    pw = password.encode("utf-8")[:BCRYPT_MAX]
    for step, n in work_plan(h, profile):
        if step == "check":
            assert h is not None
            ok = verify(h, password)
        elif step == "pbkdf2":
            hashlib.pbkdf2_hmac("sha256", pw, b"serverio-padding", n)
        else:
            bc = _bcrypt()
            assert bc is not None  # a bcrypt profile needs it (check_hash)
            bc.hashpw(pw, bc.gensalt(rounds=n))
    return ok
