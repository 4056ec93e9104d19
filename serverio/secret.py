"""The server's signing secret (``--secret-file``), read once at start-up.

Session cookies, share links and resumable-upload URLs are signed with it
(serverio.signing).  Three cases:

* ``--secret-file FILE``: the file's content, surrounding whitespace
  stripped, at least :data:`~serverio.signing.MIN_SECRET` bytes (e.g.
  ``head -c 32 /dev/urandom | base64 > secret``).  Every replica of a
  fleet is given the same file (docs/deployment.md "Fleets"); replacing
  it revokes every token.
* none given: a key generated once per user and kept in serverio's data
  directory (``secret`` beside the development TLS files' directory,
  mode 0600), so tokens survive a restart on this machine.
* that directory not writable: a random key for this process only, with
  a warning (tokens then end with the process).

A missing, unreadable or short file is a configuration error (exit 2,
naming the flag and the file).

Cancellation handling: called once before the event loop serves (the
read is a small blocking file read at start-up, like the users files);
nothing here runs inside a request.
"""

from __future__ import annotations

import logging
import os
import sys
import time

from .errors import ConfigError
from .signing import MIN_SECRET

__all__ = ["data_dir", "resolve_secret"]

log = logging.getLogger("serverio")


def data_dir(environ: dict[str, str] | None = None, platform: str = sys.platform) -> str:
    """The user's data directory for serverio (its dev-TLS files and secret)."""
    env = dict(os.environ) if environ is None else environ
    home = os.path.expanduser("~")
    if platform == "win32":
        base = env.get("LOCALAPPDATA") or os.path.join(home, "AppData", "Local")
        return os.path.join(base, "serverio")
    if platform == "darwin":
        return os.path.join(home, "Library", "Application Support", "serverio")
    base = env.get("XDG_DATA_HOME") or os.path.join(home, ".local", "share")
    return os.path.join(base, "serverio")


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read(64 * 1024 + 1).strip()
    except OSError as exc:
        raise ConfigError(f"--secret-file: {path!r}: {exc.strerror or exc}") from None
    if len(data) < MIN_SECRET:
        raise ConfigError(
            f"--secret-file: {path!r} holds {len(data)} bytes; a secret needs at least "
            f"{MIN_SECRET} (e.g. head -c 32 /dev/urandom | base64 > {path})"
        )
    return data


def resolve_secret(path: str | None, directory: str | None = None) -> bytes:
    """The secret: ``path``'s content, else the per-user generated one in
    ``directory`` (default :func:`data_dir`), else a per-process key."""
    if path is not None:
        return _read(path)
    directory = directory or data_dir()
    keyfile = os.path.join(directory, "secret")
    try:
        return _read(keyfile)
    except ConfigError:
        pass
    key = os.urandom(32).hex().encode("ascii")
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        # O_EXCL: two servers starting at once create it once; the loser
        # reads the winner's, once the winner has written it (bounded).
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
        fd = os.open(keyfile, flags, 0o600)
    except FileExistsError:
        for _ in range(20):
            time.sleep(0.05)
            try:
                return _read(keyfile)
            except ConfigError:
                pass
        # Still short or unreadable (a write cut by a crash): say so, for
        # this process only; removing the file makes a new one next start.
        log.warning(
            "%s is not a usable secret: signed links and sessions last only "
            "as long as this process (remove it, or give --secret-file)",
            keyfile,
        )
        return key
    except OSError as exc:
        log.warning(
            "no --secret-file and %s is not writable (%s): signed links and "
            "sessions last only as long as this process",
            directory,
            exc.strerror or exc,
        )
        return key
    else:
        with os.fdopen(fd, "wb") as f:
            f.write(key + b"\n")
            f.flush()
            os.fsync(f.fileno())
        return key
