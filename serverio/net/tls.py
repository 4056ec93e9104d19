"""TLS: the server-side context and the bounded handshake.

Accepted sockets are wrapped in :class:`serverio.net.tlsstream.TLSStream`
(OpenSSL's record layer over the non-blocking socket); the connection task
then does the handshake under the head deadline (a client that opens a TCP
connection and never finishes its hello is a slowloris like any other).
Bodies of TLS connections always take the buffered path: sendfile cannot
encrypt, and the buffered path reads at most ``BUFFER_CHUNK`` bytes at a
time, so memory per connection stays bounded.

The key's password is never taken from the command line (argv is visible to
every local user in ``ps``): ``--keyfile-password-env NAME`` names an
environment variable that holds it, or ``--tls-password-file PATH`` (the
name http.server uses since 3.14) a file whose first line is it.
"""

from __future__ import annotations

import os
import re
import ssl

from ..config import Config
from ..errors import ConfigError

__all__ = ["TLS12_CIPHERS", "load_error", "make_ssl_context"]

# OpenSSL cipher string of the TLS 1.2 suites offered (see make_ssl_context).
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20:!aNULL"


def make_ssl_context(config: Config) -> ssl.SSLContext | None:
    """The server context for ``config``, or None when TLS is off.

    Raises :class:`ConfigError` (one line, naming the option) when the
    certificate or key cannot be loaded.
    """
    if config.tls.certfile is None:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    # TLS 1.2 and 1.3 only.
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    # TLS 1.2 suites: AEAD with forward secrecy only (RFC 9325 §4.2: ECDHE
    # with AES-GCM or ChaCha20-Poly1305).  The ssl module's default list
    # also offers the CBC-SHA256/384 suites (MAC-then-encrypt: LUCKY13 and
    # its kin) and finite-field DHE; every client that speaks TLS 1.2 has
    # one of these.  TLS 1.3 suites are all AEAD and not set by this list.
    ctx.set_ciphers(TLS12_CIPHERS)
    # RFC 9113 §3.2: "h2" first when HTTP/2 is on (TLS 1.2+, no
    # renegotiation, as §9.2 requires; §9.2.2's cipher blocklist has none
    # of the suites above).
    ctx.set_alpn_protocols(["h2", "http/1.1"] if config.h2.http2 else ["http/1.1"])
    # Session resumption stays on, OpenSSL's default: TLS 1.3 sends
    # ``ctx.num_tickets`` (2) tickets after each handshake and TLS 1.2
    # stateless tickets, so a returning browser skips the full handshake.
    # The ticket key is made at random per process (never written
    # anywhere); with --workers a ticket resumes on the worker that issued
    # it only, any other does a full handshake.  Renegotiation is off: a
    # known DoS lever.
    ctx.options |= ssl.OP_NO_RENEGOTIATION
    env = config.tls.keyfile_password_env
    password_file = config.tls.keyfile_password_file

    def password() -> bytes:
        # Called by OpenSSL only for an encrypted key.  Without this callback
        # OpenSSL would prompt on the controlling terminal, which hangs a
        # service; we fail with a message instead.
        if password_file is not None:
            try:
                with open(password_file, "rb") as f:
                    return f.readline().rstrip(b"\r\n")
            except OSError as exc:
                raise ConfigError(
                    f"--tls-password-file {password_file!r}: {exc.strerror or exc}"
                ) from None
        if env is None:
            raise ConfigError(
                "--keyfile is encrypted: put its password in an environment "
                "variable and pass --keyfile-password-env NAME"
            )
        value = os.environ.get(env)
        if value is None:
            raise ConfigError(f"--keyfile-password-env: variable {env!r} is not set")
        return value.encode()

    try:
        ctx.load_cert_chain(config.tls.certfile, config.tls.keyfile, password=password)
    except ConfigError:
        raise
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise ConfigError(load_error(config, exc)) from None
    return ctx


_PEM_CERT = b"-----BEGIN CERTIFICATE-----"
# PKCS#8 ("PRIVATE KEY", "ENCRYPTED PRIVATE KEY") and the traditional
# "RSA PRIVATE KEY" / "EC PRIVATE KEY" labels (RFC 7468 §10, §11).
_PEM_KEY = re.compile(rb"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----")


def _read(path: str) -> bytes | str:
    """The file's bytes, or why it cannot be read (str)."""
    try:
        with open(path, "rb") as f:
            return f.read(1 << 20)  # a certificate chain is a few KiB
    except OSError as exc:
        return exc.strerror or str(exc)


def load_error(config: Config, exc: Exception) -> str:
    """One line saying which file is wrong and how, for a failed
    ``load_cert_chain`` (OpenSSL says only "[SSL] PEM lib (_ssl.c:3905)").

    In the order OpenSSL needs them: each file readable, the certificate
    file PEM (``-----BEGIN CERTIFICATE-----``, RFC 7468 §5), a PEM private
    key in the key file (the certificate file without ``--keyfile``), the
    password of an encrypted key, the key matching the certificate.
    """
    cert, key = config.tls.certfile or "", config.tls.keyfile
    key_flag, key_path = ("--keyfile", key) if key else ("--certfile", cert)
    cert_data = _read(cert)
    if isinstance(cert_data, str):
        return f"--certfile {cert}: cannot read: {cert_data}"
    key_data = cert_data if key is None else _read(key)
    if isinstance(key_data, str):
        return f"--keyfile {key_path}: cannot read: {key_data}"
    if _PEM_CERT not in cert_data:
        der = " (DER? 'openssl x509 -inform der' converts it)" if cert_data[:1] == b"\x30" else ""
        return f"--certfile {cert}: not a PEM certificate: no '{_PEM_CERT.decode()}' line{der}"
    if _PEM_KEY.search(key_data) is None:
        if key is None:
            return f"--certfile {cert}: holds no private key; give it with --keyfile FILE"
        return f"--keyfile {key}: not a PEM private key: no '-----BEGIN ... PRIVATE KEY-----' line"
    if getattr(exc, "reason", None) == "KEY_VALUES_MISMATCH":
        if key is None:
            return f"--certfile {cert}: the private key does not match the certificate"
        return f"--keyfile {key}: the key does not match the certificate in {cert}"
    if b"ENCRYPTED" in key_data:
        tls = config.tls
        source = (
            f"--tls-password-file {tls.keyfile_password_file}"
            if tls.keyfile_password_file
            else f"${tls.keyfile_password_env}"
        )
        return f"{key_flag} {key_path}: cannot load the encrypted key: wrong password? ({source})"
    return f"{key_flag} {key_path}: cannot load certificate and key: {exc}"
