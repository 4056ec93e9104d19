"""Signed tokens (serverio.signing) and the secret they use (serverio.secret)."""

from __future__ import annotations

import os
import stat
import sys

import pytest

from serverio.errors import ConfigError
from serverio.secret import resolve_secret
from serverio.signing import MAX_TOKEN, Signer, TokenError

KEY = b"k" * 32


def test_a_token_opens_with_its_fields_until_it_expires() -> None:
    s = Signer(KEY)
    tok = s.sign("share", ("/a b/ü.txt", "read", ""), 1000)
    opened = s.open("share", tok, 999.5)
    assert opened.fields == ("/a b/ü.txt", "read", "")
    assert opened.expires == 1000
    with pytest.raises(TokenError) as exc:
        s.open("share", tok, 1000)
    assert exc.value.kind == "expired"


def test_no_fields_round_trip() -> None:
    s = Signer(KEY)
    assert s.open("x", s.sign("x", (), 5), 0).fields == ()


@pytest.mark.parametrize("how", ["purpose", "secret", "flip", "truncate", "junk", "long"])
def test_a_forged_or_foreign_token_is_invalid_even_when_expired(how: str) -> None:
    s = Signer(KEY)
    tok = s.sign("share", ("/a",), 10)
    other = Signer(b"o" * 32)
    purpose, signer, token = "share", s, tok
    if how == "purpose":
        purpose = "session"
    elif how == "secret":
        signer = other
    else:
        body, _, mac = tok.partition(".")
        token = {
            "flip": body[:-2] + ("A" if body[-2] != "A" else "B") + body[-1] + "." + mac,
            "truncate": tok[:-3],
            "junk": "not a token",
            "long": "a" * (MAX_TOKEN + 1),
        }[how]
    with pytest.raises(TokenError) as exc:
        signer.open(purpose, token, 100)
    assert exc.value.kind == "invalid"


def test_sign_refuses_nul_and_short_secrets() -> None:
    with pytest.raises(ValueError):
        Signer(b"short")
    with pytest.raises(ValueError):
        Signer(KEY).sign("p", ("a\x00b",), 1)


def test_secret_file_is_read_and_checked(tmp_path: object) -> None:
    d = str(tmp_path)
    good = os.path.join(d, "good")
    with open(good, "w") as f:
        f.write("  " + "s" * 40 + "\n")
    assert resolve_secret(good) == b"s" * 40
    short = os.path.join(d, "short")
    with open(short, "w") as f:
        f.write("abc")
    with pytest.raises(ConfigError, match=r"--secret-file.*short.*at least 32"):
        resolve_secret(short)
    with pytest.raises(ConfigError, match=r"--secret-file.*missing"):
        resolve_secret(os.path.join(d, "missing"))


def test_without_a_file_a_key_is_generated_once_and_kept(tmp_path: object) -> None:
    d = os.path.join(str(tmp_path), "data")
    first = resolve_secret(None, d)
    assert len(first) >= 32
    assert resolve_secret(None, d) == first  # survives a restart
    if sys.platform != "win32":
        mode = stat.S_IMODE(os.stat(os.path.join(d, "secret")).st_mode)
        assert mode == 0o600


def test_an_unusable_generated_secret_is_said_and_not_trusted(
    tmp_path: object, caplog: pytest.LogCaptureFixture
) -> None:
    d = os.path.join(str(tmp_path), "data")
    os.makedirs(d)
    with open(os.path.join(d, "secret"), "wb") as f:
        f.write(b"cut")  # a write cut short by a crash
    first = resolve_secret(None, d)
    assert len(first) >= 32 and first != b"cut"
    assert "not a usable secret" in caplog.text
    assert resolve_secret(None, d) != first  # per process: never persisted over it
