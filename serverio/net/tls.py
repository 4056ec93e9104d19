"""TLS: the server-side context and the bounded handshake.

Accepted sockets are wrapped in :class:`trio.SSLStream`; the connection task
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
import ssl

from ..config import Config
from ..errors import ConfigError

__all__ = ["TLS12_CIPHERS", "make_ssl_context"]

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
        what = "--certfile/--keyfile" if config.tls.keyfile else "--certfile"
        raise ConfigError(f"{what}: cannot load certificate and key: {exc}") from None
    return ctx
